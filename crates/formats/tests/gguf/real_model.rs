//! The real SmolLM2-135M Q4_1 GGUF, when it has been downloaded (skipped otherwise).

use std::collections::HashMap;
use std::path::PathBuf;

use oxllm_formats::{DType, GgufFile};

#[test]
fn smollm2_q4_1() {
    // The same cache scripts/fetch-model.sh fills: $OXLLM_CACHE, else ~/.cache/oxllm.
    let cache = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/oxllm")));
    let Some(cache) = cache else {
        eprintln!("skipping: neither OXLLM_CACHE nor HOME is set");
        return;
    };
    let path = cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        eprintln!("skipping: {} is absent", path.display());
        return;
    }
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.meta_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.meta_u64("llama.block_count").unwrap(), 30);
    assert_eq!(f.tensors().len(), 272);
    let mut counts: HashMap<DType, usize> = HashMap::new();
    for t in f.tensors() {
        *counts.entry(t.dtype).or_default() += 1;
        assert_eq!(f.tensor(&t.name).unwrap().data.len(), t.n_bytes());
    }
    assert_eq!(counts[&DType::Q4_1], 210);
    assert_eq!(counts[&DType::F32], 61);
    assert_eq!(counts[&DType::Q8_0], 1);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.dtype, DType::Q8_0);
    assert_eq!(emb.shape, &[49152, 576]);
    assert_eq!(emb.data.len(), 49152 * 576 / 32 * 34);
    let tokens = f.meta_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49152);
    assert!(tokens.iter().all(|t| t.as_str().is_some()));
}
