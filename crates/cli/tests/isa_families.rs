//! End-to-end: the default model (SmolLM2-135M Q4_1 layers, Q8_0 output head in wide panels)
//! gives the same greedy ids whichever panel kernel family runs it: natively (AVX512-VNNI
//! where the CPU has it), under `OXLLM_ISA=avxvnni` (the AVX-VNNI panel kernels where the CPU
//! has AVX-VNNI) and under `OXLLM_ISA=avx2` (the AVX2 ones), batched and a prompt alone on
//! one thread. Every family gives its scalar reference's bits, so any id that differs is a
//! kernel bug (a mutated AVX-VNNI kernel changed the ids of every line here).

use std::path::{Path, PathBuf};
use std::process::Command;

fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let p = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

/// Greedy ids of each line of `lines` from `oxllm generate --input` on `model`, with `env`
/// set and `args` added.
fn greedy_ids(
    model: &Path,
    lines: &[serde_json::Value],
    env: &[(&str, &str)],
    args: &[&str],
) -> Vec<Vec<u64>> {
    let dir = tempfile::Builder::new()
        .prefix("oxllm-isa-")
        .tempdir()
        .unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oxllm"))
        .arg("generate")
        .args(args)
        .envs(env.iter().copied())
        .arg("--model")
        .arg(model)
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn smollm2_gives_the_same_ids_on_every_panel_kernel_family_alone_or_batched() {
    let model = smollm2();
    let line = |prompt: Vec<u32>| {
        let mut l = serde_json::json!({"max_tokens": 12, "ignore_eos": true, "temperature": 0});
        l["prompt_ids"] = prompt.into();
        l
    };
    // Prompt lengths around the kernels' row counts per call (6, 8, 16 per chunk): a batched
    // prefill step runs 60 rows, a decode step 3.
    let lines = [
        // "The capital of France is"
        line(vec![504, 3575, 282, 4649, 314]),
        line((0..37u32).map(|i| (i * 1237 + 11) % 49000 + 100).collect()),
        line((0..18u32).map(|i| (i * 389 + 7) % 20000 + 50).collect()),
    ];
    let native = greedy_ids(&model, &lines, &[], &["--threads", "2"]);
    assert_eq!(native.len(), lines.len());
    for ids in &native {
        assert_eq!(ids.len(), 12);
    }
    for isa in ["avxvnni", "avx2"] {
        let batched = greedy_ids(&model, &lines, &[("OXLLM_ISA", isa)], &["--threads", "2"]);
        assert_eq!(batched, native, "OXLLM_ISA={isa}, batched");
    }
    let alone = greedy_ids(
        &model,
        &lines[1..2],
        &[("OXLLM_ISA", "avxvnni")],
        &["--threads", "1"],
    );
    assert_eq!(
        alone[0], native[1],
        "the second line alone under OXLLM_ISA=avxvnni"
    );
}
