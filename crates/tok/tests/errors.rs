//! Error paths: missing and malformed files, unusable GGUF metadata, bad ids.

mod common;

use oxllm_tok::{GgufVocab, TokError, Tokenizer};

#[test]
fn missing_file() {
    let err = Tokenizer::from_file("/nonexistent/tokenizer.json").unwrap_err();
    assert!(matches!(err, TokError::Io { .. }), "{err}");
    let err = Tokenizer::from_hf_dir("/nonexistent-dir").unwrap_err();
    assert!(matches!(err, TokError::Io { .. }), "{err}");
}

#[test]
fn malformed_tokenizer_json() {
    let tmp = common::temp_dir("malformed");
    let dir = tmp.path();
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, b"{\"model\": [1, 2").unwrap();
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(
        matches!(err, TokError::InvalidTokenizerFile { .. }),
        "{err}"
    );
    std::fs::write(&path, b"{\"version\": \"1.0\"}").unwrap();
    let err = Tokenizer::from_file(&path).unwrap_err();
    assert!(
        matches!(err, TokError::InvalidTokenizerFile { .. }),
        "{err}"
    );
}

#[test]
fn malformed_side_file() {
    let tmp = common::temp_dir("badconfig");
    let dir = tmp.path();
    std::fs::copy(
        common::fixtures_dir().join("smollm2/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), b"{not json").unwrap();
    let err = Tokenizer::from_hf_dir(dir).unwrap_err();
    assert!(matches!(err, TokError::Json { .. }), "{err}");
}

fn tiny_vocab() -> GgufVocab {
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("gpt2".into()),
        tokens: ["<s>", "</s>", "h", "i", "hi", "Ġ", "Ġhi"]
            .map(String::from)
            .to_vec(),
        token_types: Some(vec![3, 3, 1, 1, 1, 1, 1]),
        merges: vec!["h i".into(), "Ġ hi".into()],
        bos: Some(0),
        eos: Some(1),
        ..GgufVocab::default()
    }
}

#[test]
fn bad_vocab_metadata() {
    let mut v = tiny_vocab();
    v.pre = Some("no-such-pre".into());
    assert!(matches!(
        v.build(),
        Err(TokError::UnknownPreTokenizer { .. })
    ));

    let mut v = tiny_vocab();
    v.merges.push("h i x".into());
    assert!(matches!(v.build(), Err(TokError::BadGgufValue { .. })));

    let mut v = tiny_vocab();
    v.bos = Some(99);
    assert!(matches!(v.build(), Err(TokError::BadGgufValue { .. })));

    let mut v = tiny_vocab();
    v.token_types = Some(vec![1]);
    assert!(matches!(v.build(), Err(TokError::BadGgufValue { .. })));

    let mut v = tiny_vocab();
    v.tokens.clear();
    assert!(matches!(v.build(), Err(TokError::MissingGgufKey(_))));
}

#[test]
fn decode_rejects_unknown_ids() {
    let tok = tiny_vocab().build().unwrap();
    let err = tok.decode(&[2, 1000], false).unwrap_err();
    assert!(
        matches!(
            err,
            TokError::TokenIdOutOfRange {
                id: 1000,
                vocab_size: 7
            }
        ),
        "{err}"
    );
    let mut dec = tok.incremental_decoder(false);
    assert!(dec.push(1000).is_err());
    assert_eq!(dec.push(4).unwrap(), "hi");
}
