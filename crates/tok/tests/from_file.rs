//! `Tokenizer::from_file` on the tokenizer.json transformers builds from the SmolLM2 GGUF.

mod common;

use oxllm_tok::Tokenizer;

fn load() -> Tokenizer {
    Tokenizer::from_file(common::fixtures_dir().join("smollm2/tokenizer.json")).unwrap()
}

#[test]
fn corpus_matches_transformers() {
    common::check_against_fixture(&load(), &common::fixture());
}

#[test]
fn incremental_matches_decode() {
    common::check_incremental(&load(), &common::fixture());
}

#[test]
fn vocabulary_lookups() {
    let tok = load();
    let fx = common::fixture();
    assert_eq!(tok.vocab_size(), fx.vocab_size);
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.id_to_token(2).as_deref(), Some("<|im_end|>"));
    assert_eq!(
        tok.encode("The capital of France is", true).unwrap(),
        [504, 3575, 282, 4649, 314]
    );
    // A bare tokenizer.json says nothing about BOS/EOS or chat templates.
    assert_eq!(tok.bos_id(), None);
    assert!(tok.eos_ids().is_empty());
    assert!(tok.chat_template().is_none());
}
