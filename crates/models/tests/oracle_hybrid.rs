//! Tiny random Qwen3-Next / Qwen3.5 / Qwen3-MoE checkpoints (f32 and bf16) against the
//! transformers float32 oracle (`scripts/oracle/make_hybrid.py`): the stored prompt-logit rows of
//! an 80-token prompt (past the reference's 64-token delta-rule chunk) and a 12-token prompt,
//! and 32 greedy ids, with the recurrent and the chunked delta rule, on the CPU backend and on
//! the reference backend.

mod common;

use common::{ids, read_f32, repo_root};
use oxllm_models::hybrid::DeltaRule;
use oxllm_models::{argmax, load_model, Model, Session};
use oxllm_runtime::{Backend, CpuBackend, ReferenceBackend};

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new(2))
}

fn load(dir: &str, rule: DeltaRule) -> (Model, serde_json::Value, std::path::PathBuf) {
    let path = repo_root().join("tests/fixtures/tiny").join(dir);
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.join("oracle.json")).unwrap()).unwrap();
    let (_, mut model) = load_model(&path).unwrap_or_else(|e| panic!("{dir}: {e}"));
    if let Some(h) = model.hybrid_mut() {
        h.set_delta_rule(rule);
    }
    (model, oracle, path)
}

/// Checks `dir` on both backends; returns the max |logit error| over both prompts.
fn check(dir: &str, tol: f32, rule: DeltaRule) -> f32 {
    let reference = check_on(dir, tol, rule, || Box::new(ReferenceBackend::new()));
    check_on(dir, tol, rule, cpu).max(reference)
}

fn check_on(dir: &str, tol: f32, rule: DeltaRule, backend: impl Fn() -> Box<dyn Backend>) -> f32 {
    let (model, oracle, path) = load(dir, rule);
    let vocab = model.config.vocab_size;
    let mut worst = 0f32;
    for case in [&oracle, &oracle["short_prompt"]] {
        let prompt = ids(&case["prompt_ids"]);
        let pl = &case["prompt_logits"];
        let want = read_f32(&path.join(pl["file"].as_str().unwrap()));
        let rows = ids(&pl["rows"]);
        let want_greedy = ids(&case["greedy_ids"]);
        let mut session =
            Session::new(&model, prompt.len() + want_greedy.len(), backend()).unwrap();
        let logits = session.extend(&prompt, true).unwrap();
        let mut max_err = 0f32;
        for (i, &r) in rows.iter().enumerate() {
            let got = &logits[r as usize * vocab..(r as usize + 1) * vocab];
            for (a, b) in got.iter().zip(&want[i * vocab..(i + 1) * vocab]) {
                max_err = max_err.max((a - b).abs());
            }
        }
        eprintln!(
            "{dir} {rule:?} prompt of {}: max |logit error| = {max_err:.2e}",
            prompt.len()
        );
        assert!(max_err <= tol, "{dir}: prompt logits differ by {max_err}");
        worst = worst.max(max_err);
        let mut next = argmax(&logits[(prompt.len() - 1) * vocab..]);
        let mut got = Vec::new();
        for step in 0..want_greedy.len() {
            got.push(next);
            if step + 1 < want_greedy.len() {
                next = argmax(&session.extend(&[next], false).unwrap());
            }
        }
        assert_eq!(got, want_greedy, "{dir}: greedy continuation");
    }
    worst
}

const F32_TOL: f32 = 1e-3;
// The oracle ran on the same bf16 values upcast to f32 (measured error ~4e-5); the margin
// leaves room for kernels that round activations to bf16.
const BF16_TOL: f32 = 1e-2;

#[test]
fn qwen3_next_f32() {
    check("qwen3-next-f32", F32_TOL, DeltaRule::Recurrent);
    check("qwen3-next-f32", F32_TOL, DeltaRule::Chunked(64));
}
#[test]
fn qwen3_next_bf16() {
    check("qwen3-next-bf16", BF16_TOL, DeltaRule::Recurrent);
}
#[test]
fn qwen3_5_f32() {
    check("qwen3.5-f32", F32_TOL, DeltaRule::Recurrent);
    check("qwen3.5-f32", F32_TOL, DeltaRule::Chunked(64));
}
#[test]
fn qwen3_5_bf16() {
    check("qwen3.5-bf16", BF16_TOL, DeltaRule::Chunked(64));
}
#[test]
fn qwen3_moe_f32() {
    check("qwen3-moe-f32", F32_TOL, DeltaRule::Recurrent);
}
#[test]
fn qwen3_moe_bf16() {
    check("qwen3-moe-bf16", BF16_TOL, DeltaRule::Recurrent);
}

/// The chunked and recurrent forms agree on the whole model, and with the recurrent form a
/// prompt split into steps gives bit-identical logits and recurrent state.
#[test]
fn chunked_matches_recurrent_and_split_prefill_is_bit_exact() {
    for dir in ["qwen3-next-f32", "qwen3.5-f32"] {
        let (rec, oracle, _) = load(dir, DeltaRule::Recurrent);
        let (chk, _, _) = load(dir, DeltaRule::Chunked(16));
        let prompt = ids(&oracle["prompt_ids"]);
        let mut a = Session::new(&rec, 128, cpu()).unwrap();
        let la = a.extend(&prompt, true).unwrap();
        let mut b = Session::new(&chk, 128, cpu()).unwrap();
        let lb = b.extend(&prompt, true).unwrap();
        let diff = la
            .iter()
            .zip(&lb)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        eprintln!("{dir}: chunked(16) vs recurrent max |logit diff| = {diff:.2e}");
        assert!(diff < 1e-4, "{dir}: {diff}");
        let state_a = a.recurrent_state().unwrap().expect("linear layers");
        let state_b = b.recurrent_state().unwrap().expect("linear layers");
        let sd = state_a
            .iter()
            .zip(&state_b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(sd < 1e-4, "{dir}: state differs by {sd}");

        let mut c = Session::new(&rec, 128, cpu()).unwrap();
        let mut lc = c.extend(&prompt[..37], true).unwrap();
        lc.extend(c.extend(&prompt[37..38], true).unwrap());
        lc.extend(c.extend(&prompt[38..], true).unwrap());
        assert!(la == lc, "{dir}: split prefill changed the logits");
        assert!(state_a == c.recurrent_state().unwrap().expect("linear layers"));
    }
}

#[test]
fn missing_tensor_is_named() {
    let tmp = std::env::temp_dir().join(format!("oxllm-bad-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let src = repo_root().join("tests/fixtures/tiny/qwen3-next-f32");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    std::fs::copy(src.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();
    // Layer 1 becomes linear: its linear_attn tensors do not exist.
    config["layer_types"][1] = serde_json::json!("linear_attention");
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let err = load_model(&tmp).err().expect("missing tensor").to_string();
    assert!(err.contains("model.layers.1.linear_attn."), "{err}");
    config["layer_types"][1] = serde_json::json!("mamba");
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let err = load_model(&tmp).err().expect("unknown layer").to_string();
    assert!(
        err.contains("mamba") && err.contains("layer_types[1]"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).ok();
}

/// A backend without kernels for the hybrid ops refuses each by its description's name, as a
/// typed error before running anything (never a wrong answer or a panic).
#[test]
fn a_backend_without_hybrid_kernels_refuses_them_by_name() {
    use oxllm_models::ModelError;
    use oxllm_runtime::RuntimeError;
    for (dir, first_refused) in [
        ("qwen3-next-f32", "restore_states"),
        ("qwen3.5-f32", "restore_states"),
        ("qwen3-moe-f32", "moe"),
    ] {
        let (model, oracle, _) = load(dir, DeltaRule::Recurrent);
        let prompt = ids(&oracle["short_prompt"]["prompt_ids"]);
        let backend = Box::new(oxllm_cuda::EmulatedBackend::emulated(1));
        let err = Session::new(&model, 64, backend)
            .and_then(|mut s| s.extend(&prompt, true))
            .err()
            .unwrap_or_else(|| panic!("{dir}: ran on a backend without its kernels"));
        match err {
            ModelError::Runtime(RuntimeError::Unsupported { backend, op }) => {
                assert_eq!((backend, op), ("cuda", first_refused), "{dir}");
            }
            other => panic!("{dir}: expected Unsupported, got {other}"),
        }
    }
}
