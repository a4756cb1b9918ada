//! `--backend cuda` through the CLI: without an NVIDIA driver a clear error and exit 1, never a
//! panic; and the CUDA backend's host side (`--backend cuda-emulator`) reproduces the
//! transformers greedy ids of the tiny Qwen3 fixture, captured and eager.

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tiny")
        .join(name)
}

fn generate(backend: &str, plan: &str) -> std::process::Output {
    let oracle: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("qwen3-f32").join("oracle.json")).unwrap(),
    )
    .unwrap();
    let prompt: Vec<String> = oracle["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    Command::new(env!("CARGO_BIN_EXE_oxllm"))
        .args(["generate", "--model"])
        .arg(fixture("qwen3-f32"))
        .args([
            "--prompt-ids",
            &prompt.join(","),
            "--max-tokens",
            "16",
            "--json",
        ])
        .args([
            "--ignore-eos",
            "--temperature",
            "0",
            "--backend",
            backend,
            "--plan",
            plan,
        ])
        .output()
        .unwrap()
}

#[test]
fn cuda_without_a_driver_is_a_clear_error() {
    let out = generate("cuda", "captured");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    if out.status.success() {
        eprintln!("a GPU answered: nothing to check here");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no CUDA driver found") || err.contains("no CUDA GPU found"),
        "{err}"
    );
}

#[test]
fn cuda_emulator_gives_the_oracle_greedy_ids() {
    let oracle: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("qwen3-f32").join("oracle.json")).unwrap(),
    )
    .unwrap();
    let want: Vec<u64> = oracle["greedy_ids"].as_array().unwrap()[..16]
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    for plan in ["captured", "eager"] {
        let out = generate("cuda-emulator", plan);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let got: Vec<u64> = v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{plan}");
    }
}
