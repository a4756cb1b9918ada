//! A model whose vocabulary is larger than its tokenizer's (checkpoints pad the embedding
//! rows): an id past the tokenizer has no spelling, so it adds no text, and the request goes on
//! instead of failing (it failed with "detokenization failed" before).

use std::path::PathBuf;

use oxllm_core::FinishReason;
use oxllm_engine::{Engine, EngineConfig, GenerationRequest, KvCacheSize};
use oxllm_models::load_model;
use oxllm_sample::SamplingParams;
use oxllm_tok::Tokenizer;

#[test]
fn ids_past_the_tokenizer_add_no_text_and_do_not_fail_the_request() {
    let dir = std::env::temp_dir().join(format!("oxllm-padded-vocab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Eight words; the tiny Qwen3 has 1024 ids, so most greedy ids have no spelling here.
    let vocab: serde_json::Map<String, serde_json::Value> =
        ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .enumerate()
            .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
            .collect();
    let json = serde_json::json!({
        "version": "1.0",
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "a"},
        "pre_tokenizer": {"type": "Whitespace"},
        "added_tokens": [],
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, json.to_string()).unwrap();
    let tok = Tokenizer::from_file(&path).unwrap();
    assert_eq!(tok.vocab_size(), 8);

    let model_dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny/qwen3-f32");
    let (_, model) = load_model(&model_dir).unwrap();
    let config = EngineConfig {
        threads: 2,
        kv_cache: KvCacheSize::Blocks(32),
        ..EngineConfig::default()
    };
    let engine = Engine::start(model, Some(tok), config).unwrap();
    let params = SamplingParams {
        max_tokens: 12,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let stream = engine
        .handle()
        .submit(GenerationRequest {
            prompt_ids: vec![1, 17, 523, 42, 999, 42, 7],
            params,
            choice: 0,
            constraint: None,
        })
        .unwrap();
    let (ids, text, reason) = stream.collect_blocking().expect("the request failed");
    assert_eq!(ids.len(), 12);
    assert!(
        ids.iter().any(|&id| id >= 8),
        "every id was spelled: {ids:?}"
    );
    assert_eq!(reason, FinishReason::Length);
    let spelled: String = ids
        .iter()
        .filter(|&&id| id < 8)
        .map(|&id| ["a", "b", "c", "d", "e", "f", "g", "h"][id as usize])
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>().join(" "),
        spelled
    );
    let _ = std::fs::remove_dir_all(&dir);
}
