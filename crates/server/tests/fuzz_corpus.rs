//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the functions the
//! cargo-fuzz targets call, so every seed and every crash ever saved there is checked by a
//! plain `cargo test` (no nightly toolchain or cargo-fuzz needed).

use std::path::PathBuf;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        run(&bytes);
        n += 1;
    }
    assert!(n > 0, "no corpus in {}", dir.display());
}

#[test]
fn completions_corpus() {
    replay("completions", oxllm_server::fuzzing::completions);
}

#[test]
fn chat_corpus() {
    replay("chat", oxllm_server::fuzzing::chat);
}

#[test]
fn tokenize_corpus() {
    replay("tokenize", oxllm_server::fuzzing::tokenize);
}

#[test]
fn chat_template_corpus() {
    replay("chat_template", oxllm_server::fuzzing::chat_template);
}
