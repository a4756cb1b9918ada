//! `Tokenizer::from_gguf` on the real SmolLM2 GGUF (skipped when the file is absent).

mod common;

use oxllm_formats::GgufFile;
use oxllm_tok::{GgufVocab, TokError, Tokenizer};

fn load() -> Option<Tokenizer> {
    let path = common::model_path()?;
    let file = GgufFile::open(&path).unwrap();
    Some(Tokenizer::from_gguf(&file).unwrap())
}

#[test]
fn corpus_matches_transformers() {
    let Some(tok) = load() else { return };
    common::check_against_fixture(&tok, &common::fixture());
}

#[test]
fn incremental_matches_decode() {
    let Some(tok) = load() else { return };
    common::check_incremental(&tok, &common::fixture());
}

#[test]
fn special_token_facts() {
    let Some(tok) = load() else { return };
    let fx = common::fixture();
    assert_eq!(tok.bos_id(), Some(fx.bos_id));
    assert_eq!(tok.eos_ids(), [fx.eos_id]);
    assert!(!fx.add_bos);
    assert_eq!(tok.vocab_size(), fx.vocab_size);
    assert_eq!(
        tok.encode("The capital of France is", true).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    assert_eq!(
        tok.encode("<|im_start|>user\nhi<|im_end|>", false).unwrap()[0],
        1
    );
    let template = tok.chat_template().expect("SmolLM2 ships a chat template");
    assert!(template.contains("<|im_start|>"), "{template}");
}

#[test]
fn vocab_metadata() {
    let Some(path) = common::model_path() else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let vocab = GgufVocab::from_gguf(&file).unwrap();
    assert_eq!(vocab.model, "gpt2");
    assert_eq!(vocab.pre.as_deref(), Some("smollm"));
    assert_eq!(vocab.tokens.len(), 49152);
    assert_eq!(vocab.token_types.as_ref().map(Vec::len), Some(49152));
    assert_eq!(
        (vocab.bos, vocab.eos, vocab.add_bos),
        (Some(1), Some(2), Some(false))
    );
}

/// A minimal GGUF v3 file: no tensors, string / string-array metadata only.
fn gguf_bytes(kvs: &[(&str, &[&str])]) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u64).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((kvs.len() as u64).to_le_bytes());
    for (key, values) in kvs {
        string(&mut out, key);
        if let [single] = values {
            out.extend(8u32.to_le_bytes());
            string(&mut out, single);
        } else {
            out.extend(9u32.to_le_bytes());
            out.extend(8u32.to_le_bytes());
            out.extend((values.len() as u64).to_le_bytes());
            for v in *values {
                string(&mut out, v);
            }
        }
    }
    out.resize(out.len().next_multiple_of(32), 0);
    out
}

#[test]
fn gguf_missing_tokens() {
    let file = GgufFile::from_bytes(gguf_bytes(&[("tokenizer.ggml.model", &["gpt2"])])).unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err();
    assert!(
        matches!(&err, TokError::MissingGgufKey(k) if k == "tokenizer.ggml.tokens"),
        "{err}"
    );
    let file = GgufFile::from_bytes(gguf_bytes(&[])).unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err();
    assert!(
        matches!(&err, TokError::MissingGgufKey(k) if k == "tokenizer.ggml.model"),
        "{err}"
    );
}

#[test]
fn gguf_wrong_types_and_models() {
    let file = GgufFile::from_bytes(gguf_bytes(&[
        ("tokenizer.ggml.model", &["gpt2"]),
        ("tokenizer.ggml.tokens", &["a"]),
    ]))
    .unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err();
    assert!(matches!(err, TokError::BadGgufValue { .. }), "{err}");

    let file = GgufFile::from_bytes(gguf_bytes(&[
        ("tokenizer.ggml.model", &["llama"]),
        ("tokenizer.ggml.tokens", &["<unk>", "<s>"]),
    ]))
    .unwrap();
    let err = Tokenizer::from_gguf(&file).unwrap_err();
    assert!(
        matches!(&err, TokError::UnsupportedGgufTokenizer(m) if m == "llama"),
        "{err}"
    );
}
