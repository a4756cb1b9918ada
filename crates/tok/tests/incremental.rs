//! `IncrementalDecoder` on byte-split characters: holds partial UTF-8, never leaks U+FFFD.

mod common;

use oxllm_tok::Tokenizer;

fn load() -> Tokenizer {
    Tokenizer::from_file(common::fixtures_dir().join("smollm2/tokenizer.json")).unwrap()
}

#[test]
fn emoji_split_across_byte_tokens_is_held() {
    let tok = load();
    for text in ["I love 🦀!", "family: 👨‍👩‍👧‍👦", "你好，世界", "e\u{301}"]
    {
        let ids = tok.encode(text, false).unwrap();
        let mut dec = tok.incremental_decoder(false);
        let mut out = String::new();
        let mut held = false;
        for &id in &ids {
            let delta = dec.push(id).unwrap();
            held |= dec.pending() > 0;
            assert!(!delta.contains('\u{FFFD}'), "{text:?}: leaked {delta:?}");
            out.push_str(&delta);
        }
        out.push_str(&dec.flush().unwrap());
        assert_eq!(out, text);
        if text.contains('🦀') {
            assert!(held, "the crab emoji should span several byte tokens");
        }
    }
}

#[test]
fn invalid_bytes_are_flushed() {
    let tok = load();
    // The first byte token of the crab emoji alone can never complete.
    let crab = tok.encode("🦀", false).unwrap();
    assert!(crab.len() > 1, "{crab:?}");
    let mut ids = tok.encode("ok ", false).unwrap();
    ids.push(crab[0]);
    let mut dec = tok.incremental_decoder(false);
    let mut out = String::new();
    for &id in &ids {
        out.push_str(&dec.push(id).unwrap());
    }
    assert!(!out.contains('\u{FFFD}'));
    out.push_str(&dec.flush().unwrap());
    assert_eq!(out, tok.decode(&ids, false).unwrap());
    assert!(out.ends_with('\u{FFFD}'));
    assert_eq!(dec.pending(), 0);
}
