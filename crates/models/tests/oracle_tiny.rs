//! Tiny random checkpoints (Llama, Qwen2, Qwen3; f32 and bf16; sharded) against the
//! transformers float32 oracle: prompt logits within 1e-3 and 32 greedy ids identical.

mod common;

use common::{ids, read_f32, repo_root};
use oxllm_kernels::pool::ThreadPool;
use oxllm_models::{argmax, load_model, Session};

const LOGIT_TOL: f32 = 1e-3;

fn check(dir: &str, threads: usize) {
    let path = repo_root().join("tests/fixtures/tiny").join(dir);
    let oracle: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.join("oracle.json")).unwrap()).unwrap();
    let (_, model) = load_model(&path).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let pool = ThreadPool::new(threads);
    let vocab = model.config.vocab_size;
    for (case, logits_file) in [
        (&oracle, "prompt_logits.f32"),
        (&oracle["single_token"], "single_logits.f32"),
    ] {
        let prompt = ids(&case["prompt_ids"]);
        let want_logits = read_f32(&path.join(logits_file));
        let want_greedy = ids(&case["greedy_ids"]);
        let mut session = Session::new(&model, prompt.len() + want_greedy.len());
        let logits = session.extend(&pool, &prompt, true).unwrap();
        assert_eq!(logits.len(), want_logits.len());
        let max_err = logits
            .iter()
            .zip(&want_logits)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!(
            "{dir} prompt of {}: max |logit error| = {max_err:.2e}",
            prompt.len()
        );
        assert!(
            max_err <= LOGIT_TOL,
            "{dir}: prompt logits differ by {max_err}"
        );

        let mut next = argmax(&logits[(prompt.len() - 1) * vocab..]);
        let mut got = Vec::new();
        for step in 0..want_greedy.len() {
            got.push(next);
            if step + 1 < want_greedy.len() {
                next = argmax(&session.extend(&pool, &[next], false).unwrap());
            }
        }
        assert_eq!(got, want_greedy, "{dir}: greedy continuation");
    }
}

#[test]
fn llama_f32() {
    check("llama-f32", 2);
}
#[test]
fn llama_bf16() {
    check("llama-bf16", 2);
}
#[test]
fn llama_f32_sharded_single_thread() {
    check("llama-f32-sharded", 1);
}
#[test]
fn qwen2_f32() {
    check("qwen2-f32", 2);
}
#[test]
fn qwen2_bf16() {
    check("qwen2-bf16", 2);
}
#[test]
fn qwen3_f32() {
    check("qwen3-f32", 2);
}
#[test]
fn qwen3_bf16() {
    check("qwen3-bf16", 3);
}

#[test]
fn missing_tensor_and_unknown_architecture_are_named() {
    let tmp = std::env::temp_dir().join(format!("oxllm-bad-model-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let src = repo_root().join("tests/fixtures/tiny/llama-f32");
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    std::fs::copy(src.join("model.safetensors"), tmp.join("model.safetensors")).unwrap();

    config["num_hidden_layers"] = serde_json::json!(3);
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let err = load_model(&tmp)
        .err()
        .expect("a layer is missing")
        .to_string();
    assert!(err.contains("model.layers.2."), "{err}");

    config["num_hidden_layers"] = serde_json::json!(2);
    config["architectures"] = serde_json::json!(["FalconForCausalLM"]);
    std::fs::write(tmp.join("config.json"), config.to_string()).unwrap();
    let err = load_model(&tmp).err().expect("unknown arch").to_string();
    assert!(err.contains("FalconForCausalLM"), "{err}");
    std::fs::remove_dir_all(&tmp).ok();
}
