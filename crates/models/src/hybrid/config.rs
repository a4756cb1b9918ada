//! Hyper-parameters of the hybrid / MoE Qwen families, read from a Hugging Face `config.json`.
//!
//! Covers `Qwen3NextForCausalLM`, `Qwen3_5ForCausalLM`, `Qwen3_5ForConditionalGeneration`
//! (text part only: nested `text_config`, weights under `model.language_model.`) and
//! `Qwen3MoeForCausalLM`. Which layer is linear (Gated DeltaNet) and which is full attention
//! comes from `layer_types`, else from `full_attention_interval` (default 4). A returned config
//! is consistent: head counts divide, the rotary dim is even and within the head.

use oxllm_kernels::ops::RopeLayout;
use serde_json::Value;

use crate::{Arch, ModelConfig, ModelError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet linear attention with a per-sequence recurrent state.
    Linear,
    /// (Gated) softmax attention over the paged K/V cache.
    Full,
}

/// Shape of the Gated DeltaNet layers (the kernel's own shape type).
pub type LinearAttnConfig = oxllm_kernels::gdn::GdnShape;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeConfig {
    pub n_experts: usize,
    pub top_k: usize,
    pub expert_ffn: usize,
    pub norm_topk: bool,
    /// Intermediate size of the always-on shared expert (Qwen3-Next), gated by a sigmoid.
    pub shared_ffn: Option<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct HybridConfig {
    /// The summary every caller sees (`kv_layers` counts the full-attention layers only).
    pub base: ModelConfig,
    pub layers: Vec<LayerKind>,
    /// Per layer: MoE MLP (true) or dense MLP of `base.ffn` (false).
    pub moe_layers: Vec<bool>,
    pub rotary_dim: usize,
    pub linear: Option<LinearAttnConfig>,
    pub moe: Option<MoeConfig>,
    /// RMSNorms scale by `1 + w` (Qwen3-Next, Qwen3.5) instead of `w`.
    pub offset_norms: bool,
    /// `q_proj` yields the query and a sigmoid gate on the attention output.
    pub attn_gate: bool,
    /// Prefix of the decoder tensors: `model.` or `model.language_model.`.
    pub prefix: String,
    /// Set when the checkpoint's vision tower is present but not served.
    pub skipped_vision: bool,
}

/// The hybrid architecture named by `architectures[0]`, if it is one.
pub fn hybrid_arch(name: &str) -> Option<Arch> {
    match name {
        "Qwen3NextForCausalLM" | "qwen3_next" => Some(Arch::Qwen3Next),
        "Qwen3_5ForCausalLM" | "Qwen3_5ForConditionalGeneration" | "qwen3_5" | "qwen3_5_text" => {
            Some(Arch::Qwen35)
        }
        "Qwen3MoeForCausalLM" | "qwen3_moe" => Some(Arch::Qwen3Moe),
        _ => None,
    }
}

fn invalid(key: &str, reason: &str) -> ModelError {
    ModelError::InvalidConfig {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

impl HybridConfig {
    pub fn from_hf(root: &Value) -> Result<HybridConfig, ModelError> {
        let name = root
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .or_else(|| root.get("model_type").and_then(Value::as_str))
            .ok_or_else(|| ModelError::MissingConfig("architectures".into()))?;
        let arch =
            hybrid_arch(name).ok_or_else(|| ModelError::UnknownArchitecture(name.to_string()))?;
        let nested = root.get("text_config").filter(|v| v.is_object());
        let cfg = nested.unwrap_or(root);
        let conditional = name.ends_with("ForConditionalGeneration");
        let get = |k: &str| cfg.get(k).filter(|v| !v.is_null());
        let usize_of = |k: &str| -> Result<usize, ModelError> {
            get(k)
                .ok_or_else(|| ModelError::MissingConfig(k.into()))?
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| invalid(k, "not a non-negative integer"))
        };
        let opt_usize = |k: &str| -> Result<Option<usize>, ModelError> {
            get(k)
                .map(|v| {
                    v.as_u64()
                        .map(|v| v as usize)
                        .ok_or_else(|| invalid(k, "not a non-negative integer"))
                })
                .transpose()
        };
        let bool_of = |k: &str, default: bool| {
            get(k)
                .or_else(|| root.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(default)
        };
        let hidden = usize_of("hidden_size")?;
        let n_layers = usize_of("num_hidden_layers")?;
        let n_heads = usize_of("num_attention_heads")?;
        let head_dim = opt_usize("head_dim")?.unwrap_or(hidden / n_heads.max(1));
        let rope = get("rope_parameters")
            .or_else(|| get("rope_scaling"))
            .filter(|v| v.is_object());
        let rope_f = |k: &str| {
            get(k)
                .or_else(|| rope.and_then(|r| r.get(k)))
                .and_then(Value::as_f64)
        };
        let rope_theta = rope_f("rope_theta").unwrap_or(10000.0) as f32;
        let hybrid = arch != Arch::Qwen3Moe;
        let partial = rope_f("partial_rotary_factor").unwrap_or(if hybrid { 0.25 } else { 1.0 });
        let rotary_dim = (head_dim as f64 * partial) as usize;

        let layers = match get("layer_types").and_then(Value::as_array) {
            Some(types) => types
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("linear_attention") => Ok(LayerKind::Linear),
                    Some("full_attention") => Ok(LayerKind::Full),
                    other => Err(invalid(
                        &format!("layer_types[{i}]"),
                        &format!("unknown layer type {other:?}"),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None if hybrid => {
                let every = opt_usize("full_attention_interval")?.unwrap_or(4);
                if every == 0 {
                    return Err(invalid("full_attention_interval", "must be positive"));
                }
                (0..n_layers)
                    .map(|i| {
                        if (i + 1) % every == 0 {
                            LayerKind::Full
                        } else {
                            LayerKind::Linear
                        }
                    })
                    .collect()
            }
            None => vec![LayerKind::Full; n_layers],
        };
        if layers.len() != n_layers {
            return Err(invalid(
                "layer_types",
                &format!("{} entries for {n_layers} layers", layers.len()),
            ));
        }
        let linear = if layers.contains(&LayerKind::Linear) {
            Some(LinearAttnConfig {
                conv_kernel: opt_usize("linear_conv_kernel_dim")?.unwrap_or(4),
                n_k_heads: usize_of("linear_num_key_heads")?,
                n_v_heads: usize_of("linear_num_value_heads")?,
                k_dim: usize_of("linear_key_head_dim")?,
                v_dim: usize_of("linear_value_head_dim")?,
            })
        } else {
            None
        };
        let n_experts = if arch == Arch::Qwen35 {
            0
        } else {
            // transformers 5 writes `num_local_experts` for Qwen3-MoE; hub configs `num_experts`.
            match opt_usize("num_experts")? {
                Some(n) => n,
                None => opt_usize("num_local_experts")?.unwrap_or(0),
            }
        };
        let moe = if n_experts > 0 {
            Some(MoeConfig {
                n_experts,
                top_k: usize_of("num_experts_per_tok")?,
                expert_ffn: usize_of("moe_intermediate_size")?,
                norm_topk: bool_of("norm_topk_prob", arch == Arch::Qwen3Next),
                shared_ffn: match arch {
                    Arch::Qwen3Next => opt_usize("shared_expert_intermediate_size")?,
                    _ => None,
                }
                .filter(|&s| s > 0),
            })
        } else {
            None
        };
        let mlp_only: Vec<usize> = get("mlp_only_layers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_u64)
                    .map(|v| v as usize)
                    .collect()
            })
            .unwrap_or_default();
        let sparse_step = opt_usize("decoder_sparse_step")?.unwrap_or(1).max(1);
        let moe_layers = (0..n_layers)
            .map(|i| moe.is_some() && !mlp_only.contains(&i) && (i + 1) % sparse_step == 0)
            .collect::<Vec<_>>();
        let ffn = match opt_usize("intermediate_size")? {
            Some(f) => f,
            None if moe_layers.iter().all(|&m| m) => moe.map_or(0, |m| m.expert_ffn),
            None => return Err(ModelError::MissingConfig("intermediate_size".into())),
        };
        let n_kv_heads = opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
        let base = ModelConfig {
            arch,
            vocab_size: usize_of("vocab_size")?,
            hidden,
            n_layers,
            kv_layers: layers.iter().filter(|&&k| k == LayerKind::Full).count(),
            n_heads,
            n_kv_heads,
            head_dim,
            ffn,
            rms_eps: get("rms_norm_eps").and_then(Value::as_f64).unwrap_or(1e-6) as f32,
            rope_theta,
            rope_layout: RopeLayout::SplitHalf,
            rope_scaling: None,
            context_length: opt_usize("max_position_embeddings")?.unwrap_or(4096),
            qkv_bias: bool_of("attention_bias", false),
            qk_norm: true,
            tied_embeddings: bool_of("tie_word_embeddings", false),
        }
        .check()?;
        if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) || rotary_dim > head_dim {
            return Err(invalid(
                "partial_rotary_factor",
                &format!(
                    "rotary dim {rotary_dim} must be even, positive and <= head_dim {head_dim}"
                ),
            ));
        }
        if let Some(l) = linear {
            let sizes = [l.conv_kernel, l.n_k_heads, l.n_v_heads, l.k_dim, l.v_dim];
            if sizes.contains(&0) || !l.n_v_heads.is_multiple_of(l.n_k_heads) {
                return Err(invalid(
                    "linear_num_value_heads",
                    "linear head counts and dims must be positive, value heads a multiple of key heads",
                ));
            }
        }
        if let Some(m) = moe {
            if m.top_k == 0 || m.top_k > m.n_experts || m.expert_ffn == 0 {
                return Err(invalid(
                    "num_experts_per_tok",
                    &format!("top-{} of {} experts", m.top_k, m.n_experts),
                ));
            }
        }
        if base.qkv_bias {
            return Err(invalid(
                "attention_bias",
                "biased attention is not supported here",
            ));
        }
        Ok(HybridConfig {
            base,
            layers,
            moe_layers,
            rotary_dim,
            linear,
            moe,
            offset_norms: hybrid,
            attn_gate: hybrid,
            prefix: if conditional {
                "model.language_model.".into()
            } else {
                "model.".into()
            },
            skipped_vision: conditional && root.get("vision_config").is_some(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn next() -> Value {
        json!({
            "architectures": ["Qwen3NextForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "intermediate_size": 32, "vocab_size": 512, "linear_num_key_heads": 2,
            "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 16, "mlp_only_layers": [2],
            "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.25}
        })
    }

    #[test]
    fn interval_decides_layer_kinds_and_moe_layers_follow_mlp_only() {
        let c = HybridConfig::from_hf(&next()).unwrap();
        use LayerKind::*;
        assert_eq!(c.layers, [Linear, Linear, Linear, Full]);
        assert_eq!(c.base.kv_layers, 1);
        assert_eq!(c.moe_layers, [true, true, false, true]);
        assert_eq!(c.rotary_dim, 4);
        assert_eq!(c.moe.unwrap().shared_ffn, Some(16));
        assert!(c.offset_norms && c.attn_gate && c.moe.unwrap().norm_topk);
    }

    #[test]
    fn conditional_generation_reads_text_config() {
        let mut text = next();
        text["layer_types"] = json!([
            "full_attention",
            "linear_attention",
            "linear_attention",
            "full_attention"
        ]);
        let v = json!({"architectures": ["Qwen3_5ForConditionalGeneration"],
                       "text_config": text, "vision_config": {"depth": 2}});
        let c = HybridConfig::from_hf(&v).unwrap();
        assert_eq!(c.prefix, "model.language_model.");
        assert!(c.skipped_vision && c.moe.is_none());
        assert_eq!(c.layers[0], LayerKind::Full);
    }

    #[test]
    fn unknown_layer_type_is_named() {
        let mut v = next();
        v["layer_types"] = json!([
            "linear_attention",
            "sliding_attention",
            "full_attention",
            "full_attention"
        ]);
        let e = HybridConfig::from_hf(&v).unwrap_err().to_string();
        assert!(
            e.contains("layer_types[1]") && e.contains("sliding_attention"),
            "{e}"
        );
    }
}
