//! End-to-end tests of the `oxllm` binary: one-shot generation on the real model and a tiny
//! checkpoint (against the transformers oracle), offline batch mode, and clear errors.

use std::path::PathBuf;
use std::process::Command;

fn oxllm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_oxllm"))
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

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

fn ids(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn generate_json_on_smollm2_answers_paris() {
    let out = oxllm()
        .args([
            "generate",
            "--prompt",
            "The capital of France is",
            "--max-tokens",
            "4",
        ])
        .args(["--temperature", "0", "--json", "--threads", "2", "--model"])
        .arg(smollm2())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v["prompt_ids"]), vec![504, 3575, 282, 4649, 314]);
    assert_eq!(ids(&v["ids"]).len(), 4);
    assert!(v["text"].as_str().unwrap().starts_with(" Paris"), "{v}");
}

/// `--weight-layout rows` keeps SmolLM2's matrices row-major (the row kernels): the answer is
/// still " Paris" (the oracle's wide-margin token), and a layout the CLI does not know is a
/// clear error naming the choices.
#[test]
fn generate_with_row_major_weights_answers_paris_and_rejects_unknown_layouts() {
    let out = oxllm()
        .args(["generate", "--prompt", "The capital of France is"])
        .args(["--max-tokens", "4", "--temperature", "0", "--json"])
        .args(["--threads", "2", "--weight-layout", "rows", "--model"])
        .arg(smollm2())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["text"].as_str().unwrap().starts_with(" Paris"), "{v}");

    let out = oxllm()
        .args(["generate", "--prompt", "x", "--weight-layout", "columns"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown weight layout `columns` (expected `panels` or `rows`)"),
        "{err}"
    );
}

#[test]
fn generate_prompt_ids_on_tiny_qwen3_matches_oracle() {
    let dir = repo().join("tests/fixtures/tiny/qwen3-f32");
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("oracle.json")).unwrap()).unwrap();
    let prompt: Vec<String> = ids(&oracle["prompt_ids"])
        .iter()
        .map(|x| x.to_string())
        .collect();
    let out = oxllm()
        .args([
            "generate",
            "--max-tokens",
            "32",
            "--json",
            "--ignore-eos",
            "--model",
        ])
        .arg(&dir)
        .arg("--prompt-ids")
        .arg(prompt.join(","))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids(&v["ids"]), ids(&oracle["greedy_ids"]));
}

#[test]
fn batch_mode_keeps_order_reports_bad_lines_and_matches_one_shot() {
    let tmp = std::env::temp_dir().join(format!("oxllm-batch-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let input = tmp.join("in.jsonl");
    let output = tmp.join("out.jsonl");
    std::fs::write(
        &input,
        [
            r#"{"prompt": "The capital of France is", "max_tokens": 4}"#,
            r#"{"prompt": 42}"#,
            r#"{"prompt_ids": [504, 3575, 282], "max_tokens": 3, "ignore_eos": true}"#,
            "this is not json",
            r#"{"prompt": "Hello", "max_tokens": 5, "temperature": 0.8, "seed": 1}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let out = oxllm()
        .args(["generate", "--threads", "2", "--model"])
        .arg(smollm2())
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
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("KV cache:"), "{stderr}");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i);
    }
    assert!(lines[0]["text"].as_str().unwrap().starts_with(" Paris"));
    assert_eq!(lines[0]["finish_reason"], "length");
    assert!(lines[1]["error"].as_str().unwrap().contains("line 2"));
    assert_eq!(ids(&lines[2]["ids"]).len(), 3);
    assert!(lines[3]["error"].as_str().unwrap().contains("line 4"));
    assert_eq!(ids(&lines[4]["ids"]).len(), 5);
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn bad_inputs_give_clear_errors() {
    let tmp = std::env::temp_dir().join(format!("oxllm-bad-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let run = |args: &[&str]| {
        let out = oxllm().args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        err
    };
    let missing = tmp.join("nope.gguf");
    let err = run(&[
        "generate",
        "--prompt",
        "x",
        "--model",
        missing.to_str().unwrap(),
    ]);
    assert!(err.contains("not found"), "{err}");

    let truncated = tmp.join("truncated.gguf");
    let bytes = std::fs::read(smollm2()).unwrap();
    std::fs::write(&truncated, &bytes[..1 << 20]).unwrap();
    let err = run(&[
        "generate",
        "--prompt",
        "x",
        "--model",
        truncated.to_str().unwrap(),
    ]);
    assert!(
        err.contains("truncated") || err.contains("past the end") || err.contains("out of bounds"),
        "{err}"
    );

    let garbage = tmp.join("garbage.gguf");
    std::fs::write(&garbage, b"not a gguf file at all").unwrap();
    let err = run(&[
        "generate",
        "--prompt",
        "x",
        "--model",
        garbage.to_str().unwrap(),
    ]);
    assert!(err.to_lowercase().contains("magic"), "{err}");

    let model = smollm2();
    let m = model.to_str().unwrap();
    let err = run(&[
        "generate",
        "--model",
        m,
        "--prompt-ids",
        "1,2,99999999",
        "--max-tokens",
        "2",
    ]);
    assert!(err.contains("vocabulary"), "{err}");
    let err = run(&[
        "generate",
        "--model",
        m,
        "--prompt",
        "x",
        "--max-tokens",
        "100000",
    ]);
    assert!(err.contains("context length"), "{err}");
    let err = run(&[
        "generate",
        "--model",
        m,
        "--prompt",
        "x",
        "--temperature=-1",
    ]);
    assert!(err.contains("temperature"), "{err}");
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
fn batch_mode_on_a_hybrid_reports_the_state_pool_and_reuses_checkpoints() {
    let guard = tempfile::Builder::new()
        .prefix("oxllm-hybrid-")
        .tempdir()
        .unwrap();
    let tmp = guard.path();
    let (input, output) = (tmp.join("in.jsonl"), tmp.join("out.jsonl"));
    let prompt: Vec<u32> = (0..40u32).map(|i| (i * 37 + 5) % 500 + 3).collect();
    let line = serde_json::json!({"prompt_ids": prompt, "max_tokens": 6, "ignore_eos": true});
    std::fs::write(&input, format!("{line}\n{line}\n")).unwrap();
    let out = oxllm()
        .args(["generate", "--threads", "2", "--max-state-slots", "1"])
        .args([
            "--state-checkpoints",
            "3",
            "--state-checkpoint-interval",
            "1",
        ])
        .arg("--model")
        .arg(repo().join("tests/fixtures/tiny/qwen3.5-f32"))
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("at most 1 sequences run at once, below --max-num-seqs 64"),
        "{stderr}"
    );
    assert!(
        stderr.contains("a state checkpoint every 16 tokens, 3 checkpoints"),
        "{stderr}"
    );
    // One state slot: the two lines run one after the other (the second may reuse the first's
    // checkpoints) and give the same ids.
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(ids(&lines[0]["ids"]).len(), 6);
    assert_eq!(lines[0]["ids"], lines[1]["ids"]);
}

/// Greedy ids of each line of `lines` from `oxllm generate` on `model`, with `env` set and
/// `args` added.
fn greedy_ids(
    model: &std::path::Path,
    lines: &[serde_json::Value],
    env: &[(&str, &str)],
    args: &[&str],
) -> Vec<Vec<u64>> {
    let guard = tempfile::Builder::new()
        .prefix("oxllm-greedy-")
        .tempdir()
        .unwrap();
    let (input, output) = (
        guard.path().join("in.jsonl"),
        guard.path().join("out.jsonl"),
    );
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let out = oxllm()
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
        .map(|l| ids(&serde_json::from_str::<serde_json::Value>(l).unwrap()["ids"]))
        .collect()
}

#[test]
fn a_k_quant_model_gives_the_same_ids_on_every_kernel_family_alone_or_batched() {
    // Q4_K / Q5_K / Q6_K layers and a Q6_K tied head (scripts/oracle/make_tiny_kquant.py): the
    // k-quant panels run the AVX512-VNNI kernel natively where the CPU has it, the AVX-VNNI
    // kernel under OXLLM_ISA=avxvnni and the AVX2 kernel under OXLLM_ISA=avx2, all with the
    // reference's bits, so every greedy id agrees, and agrees with the row-major kernels and
    // with a line run alone on one thread.
    let model = repo().join("tests/fixtures/tiny/llama-kquant.gguf");
    let line = |prompt: Vec<u32>| serde_json::json!({"prompt_ids": prompt, "max_tokens": 10, "ignore_eos": true, "temperature": 0});
    let lines = [
        line((0..12u32).map(|i| (i * 131 + 5) % 1000).collect()),
        line(vec![900, 14, 2, 77]),
    ];
    let native = greedy_ids(&model, &lines, &[], &["--threads", "2"]);
    assert_eq!(native.len(), 2);
    for ids in &native {
        assert_eq!(ids.len(), 10);
        // Not a degenerate model: the fixture's scales keep its tokens varied.
        let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
        assert!(distinct.len() >= 5, "{ids:?}");
    }
    let avx2 = greedy_ids(
        &model,
        &lines,
        &[("OXLLM_ISA", "avx2")],
        &["--threads", "2"],
    );
    assert_eq!(avx2, native, "AVX2 kernels");
    // AVX-VNNI without AVX-512 (an Alder Lake / Sierra Forest class dispatch): the AVX-VNNI
    // k-panel kernel where the CPU has `avxvnni`, else the AVX2 one.
    let avx_vnni = greedy_ids(
        &model,
        &lines,
        &[("OXLLM_ISA", "avxvnni")],
        &["--threads", "2"],
    );
    assert_eq!(avx_vnni, native, "AVX-VNNI kernels");
    let rows = greedy_ids(
        &model,
        &lines,
        &[],
        &["--threads", "2", "--weight-layout", "rows"],
    );
    assert_eq!(rows, native, "row-major weights");
    let alone = greedy_ids(&model, &lines[1..], &[], &["--threads", "1"]);
    assert_eq!(alone[0], native[1], "the second line alone");
}

/// The default model (SmolLM2-135M Q4_1 layers, Q8_0 output head in wide panels) gives the
/// same greedy ids whichever panel kernel family runs it: natively (AVX512-VNNI where the CPU
/// has it), under `OXLLM_ISA=avxvnni` (the AVX-VNNI panel kernels where the CPU has AVX-VNNI)
/// and under `OXLLM_ISA=avx2` (the AVX2 ones), batched and a prompt alone on one thread. Every
/// family gives its scalar reference's bits, so any id that differs is a kernel bug (a mutated
/// AVX-VNNI kernel changed the ids of every line here).
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

/// A mistyped `OXLLM_ISA` is refused with the values it takes, before any work (silently
/// running the native kernels would mislabel a measurement); `native` is one of them.
#[test]
fn an_unknown_isa_cap_is_refused_and_native_is_taken() {
    let model = smollm2();
    let run = |isa: &str| {
        oxllm()
            .env("OXLLM_ISA", isa)
            .args(["generate", "--prompt", "Hi", "--max-tokens", "1", "--model"])
            .arg(&model)
            .output()
            .unwrap()
    };
    let out = run("avx-vnni");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("OXLLM_ISA=\"avx-vnni\"") && err.contains("avxvnni"),
        "{err}"
    );
    let out = run("native");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_generate_times_every_decode_token_of_the_batch() {
    // Decode window: from the last request's first token; every request's later tokens land in
    // it, so a batch of 3 with 5 tokens each times exactly 3 * 4 tokens.
    let out_file =
        std::env::temp_dir().join(format!("oxllm-bench-gen-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&out_file);
    let out = oxllm()
        .args([
            "bench",
            "generate",
            "--prompt-lens",
            "8",
            "--batch-sizes",
            "1,3",
        ])
        .args([
            "--output-len",
            "5",
            "--decode-prompt-len",
            "8",
            "--repeats",
            "1",
        ])
        .args(["--threads", "2", "--weight-layout", "rows", "--out"])
        .arg(&out_file)
        .arg("--model")
        .arg(repo().join("tests/fixtures/tiny/llama-f32"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&out_file).unwrap();
    let _ = std::fs::remove_file(&out_file);
    let decode: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["phase"] == "decode")
        .collect();
    assert_eq!(decode.len(), 2, "{text}");
    for v in decode {
        let bs = v["batch_size"].as_u64().unwrap();
        assert_eq!(v["tokens_timed"].as_u64().unwrap(), bs * 4, "{v}");
        assert!(v["tokens_per_s"].as_f64().unwrap() > 0.0, "{v}");
        assert_eq!(v["weight_layout"], "rows", "{v}");
    }
}
