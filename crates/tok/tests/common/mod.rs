//! Shared helpers for the oxllm-tok integration tests: fixture paths and the oracle corpus.
#![allow(dead_code)]

use std::path::PathBuf;

use oxllm_tok::Tokenizer;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct Entry {
    pub text: String,
    pub ids: Vec<u32>,
    pub ids_no_special: Vec<u32>,
    pub decoded: String,
    pub decoded_skip_special: String,
}

#[derive(Debug, Deserialize)]
pub struct Fixture {
    pub bos_id: u32,
    pub eos_id: u32,
    pub add_bos: bool,
    pub vocab_size: usize,
    pub entries: Vec<Entry>,
}

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tok")
}

pub fn fixture() -> Fixture {
    let path = fixtures_dir().join("smollm2_encodings.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// The real model, or `None` (with a note on stderr) when it has not been fetched.
pub fn model_path() -> Option<PathBuf> {
    // The same cache scripts/fetch-model.sh fills: $OXLLM_CACHE, else ~/.cache/oxllm.
    let cache = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/oxllm")))?;
    let path = cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("skipping: {path:?} is absent (run scripts/fetch-model.sh)");
        None
    }
}

/// A fresh empty directory under the system temp dir, removed when the guard drops.
pub fn temp_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("oxllm-tok-{tag}-"))
        .tempdir()
        .unwrap()
}

/// Every corpus entry encodes and decodes exactly as transformers does.
pub fn check_against_fixture(tok: &Tokenizer, fx: &Fixture) {
    let mut failures = Vec::new();
    for e in &fx.entries {
        let ids = tok.encode(&e.text, true).unwrap();
        let ids_plain = tok.encode(&e.text, false).unwrap();
        if ids != e.ids {
            failures.push(format!(
                "{:?}: with special {:?} != {:?}",
                e.text, ids, e.ids
            ));
        }
        if ids_plain != e.ids_no_special {
            failures.push(format!(
                "{:?}: without special {:?} != {:?}",
                e.text, ids_plain, e.ids_no_special
            ));
        }
        let decoded = tok.decode(&e.ids, false).unwrap();
        if decoded != e.decoded {
            failures.push(format!(
                "{:?}: decode {:?} != {:?}",
                e.text, decoded, e.decoded
            ));
        }
        let skipped = tok.decode(&e.ids, true).unwrap();
        if skipped != e.decoded_skip_special {
            failures.push(format!(
                "{:?}: decode(skip) {:?} != {:?}",
                e.text, skipped, e.decoded_skip_special
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Streaming the ids of every corpus entry reproduces `decode` exactly, and no delta ever
/// contains a replacement character that the full decode does not.
pub fn check_incremental(tok: &Tokenizer, fx: &Fixture) {
    for skip in [false, true] {
        for e in &fx.entries {
            let mut dec = tok.incremental_decoder(skip);
            let mut out = String::new();
            for &id in &e.ids {
                let delta = dec.push(id).unwrap();
                assert!(
                    !delta.ends_with('\u{FFFD}'),
                    "{:?}: held bytes leaked",
                    e.text
                );
                out.push_str(&delta);
            }
            out.push_str(&dec.flush().unwrap());
            assert_eq!(out, tok.decode(&e.ids, skip).unwrap(), "{:?}", e.text);
        }
    }
}
