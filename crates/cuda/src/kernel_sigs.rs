//! The kernels of `kernels.cu` and their parameter lists (`p` pointer, `i` int, `l` long long,
//! `f` float). The host emulator checks every launch against these, and a test checks them
//! against the CUDA source, so a launch whose arguments drift from its kernel fails on any
//! machine, not only on a GPU.

/// Every kernel `kernels.cu` exports, with its parameter list.
pub(crate) const KERNEL_SIGS: &[(&str, &str)] = &[
    ("embed_f32", "pppii"),
    ("embed_bf16", "pppii"),
    ("rms_norm", "ppippif"),
    ("matmul_bf16", "ppppiii"),
    ("matmul_f32", "ppppiii"),
    ("qk_norm_rope", "pppiiippfpii"),
    ("store_kv_f32", "pppppil"),
    ("store_kv_f16", "pppppil"),
    ("attention_d16_f32", ATTN),
    ("attention_d32_f32", ATTN),
    ("attention_d64_f32", ATTN),
    ("attention_d96_f32", ATTN),
    ("attention_d128_f32", ATTN),
    ("attention_d256_f32", ATTN),
    ("attention_d16_f16", ATTN),
    ("attention_d32_f16", ATTN),
    ("attention_d64_f16", ATTN),
    ("attention_d96_f16", ATTN),
    ("attention_d128_f16", ATTN),
    ("attention_d256_f16", ATTN),
    ("add_in_place", "ppl"),
    ("silu_mul", "ppl"),
];

const ATTN: &str = "ppppppiiiiifp";

pub(crate) fn signature(kernel: &str) -> Option<&'static str> {
    KERNEL_SIGS
        .iter()
        .find(|(k, _)| *k == kernel)
        .map(|(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(param: &str) -> char {
        if param.contains('*') {
            'p'
        } else if param.contains("long long") {
            'l'
        } else if param.contains("float") {
            'f'
        } else {
            'i'
        }
    }

    fn params(list: &str) -> String {
        list.split(',').map(|p| kind(p.trim())).collect()
    }

    /// Each `extern "C"` kernel of the source (the attention macro expanded) with its parameter
    /// list.
    fn kernels_in_source() -> Vec<(String, String)> {
        let src = include_str!("kernels.cu");
        let flat: String = src.replace("\\\n", " ");
        let mut found = Vec::new();
        let mut macro_params = None;
        for piece in flat.split("extern \"C\" __global__ void ").skip(1) {
            let name: String = piece.chars().take_while(|c| *c != '(').collect();
            let list = &piece[name.len() + 1..piece.find(')').unwrap_or(piece.len())];
            if name == "NAME" {
                macro_params = Some(params(list));
            } else {
                found.push((name, params(list)));
            }
        }
        let attn = macro_params.expect("the ATTENTION macro");
        for line in flat.lines().filter(|l| l.starts_with("ATTENTION(")) {
            let name = line
                .trim_end_matches(')')
                .rsplit(',')
                .next()
                .unwrap_or("")
                .trim();
            found.push((name.to_string(), attn.clone()));
        }
        found
    }

    #[test]
    fn signatures_match_the_cuda_source() {
        let mut src = kernels_in_source();
        let mut table: Vec<(String, String)> = KERNEL_SIGS
            .iter()
            .map(|(k, s)| (k.to_string(), s.to_string()))
            .collect();
        src.sort();
        table.sort();
        assert_eq!(src, table);
    }
}
