//! `GgufVocab::build` on small hand-made vocabularies: BOS/EOS flags, added-token kinds.

use oxllm_tok::{GgufVocab, Tokenizer};

fn vocab(add_bos: Option<bool>, add_eos: Option<bool>) -> GgufVocab {
    GgufVocab {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens: [
            "<s>", "</s>", "<think>", "h", "i", "hi", "Ġ", "Ġhi", "1", "2",
        ]
        .map(String::from)
        .to_vec(),
        token_types: Some(vec![3, 3, 4, 1, 1, 1, 1, 1, 1, 1]),
        merges: vec!["h i".into(), "Ġ hi".into()],
        bos: Some(0),
        eos: Some(1),
        extra_eos: vec![1, 2],
        add_bos,
        add_eos,
        chat_template: Some("{{ messages }}".into()),
        ..GgufVocab::default()
    }
}

#[test]
fn bos_only_when_declared() {
    let plain = vocab(None, None).build().unwrap();
    assert_eq!(plain.encode("hi hi", true).unwrap(), [5, 7]);
    let with_bos = vocab(Some(true), Some(false)).build().unwrap();
    assert_eq!(with_bos.encode("hi hi", true).unwrap(), [0, 5, 7]);
    assert_eq!(with_bos.encode("hi hi", false).unwrap(), [5, 7]);
    let both = vocab(Some(true), Some(true)).build().unwrap();
    assert_eq!(both.encode("hi", true).unwrap(), [0, 5, 1]);
}

#[test]
fn special_and_user_defined_tokens() {
    let tok: Tokenizer = vocab(None, None).build().unwrap();
    assert_eq!(tok.bos_id(), Some(0));
    assert_eq!(tok.eos_ids(), [1, 2]);
    assert!(tok.is_eos(2));
    assert_eq!(tok.chat_template(), Some("{{ messages }}"));
    // Control and user-defined tokens are matched whole in text.
    let ids = tok.encode("<s>hi<think>hi</s>", false).unwrap();
    assert_eq!(ids, [0, 5, 2, 5, 1]);
    // Skipping special tokens drops control tokens but keeps user-defined ones.
    assert_eq!(tok.decode(&ids, true).unwrap(), "hi<think>hi");
    assert_eq!(tok.decode(&ids, false).unwrap(), "<s>hi<think>hi</s>");
    // smollm splits digits.
    assert_eq!(tok.encode("12", false).unwrap(), [8, 9]);
}
