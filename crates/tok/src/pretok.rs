//! Pre-tokenizers for GGUF byte-level BPE vocabularies, chosen by `tokenizer.ggml.pre`.
//!
//! A byte-level BPE vocabulary only reproduces the model's training-time token ids if text is
//! cut into pieces with the same split rules the vocabulary was trained with. llama.cpp names
//! those rules in `tokenizer.ggml.pre`; this module maps each known name to the equivalent
//! `tokenizers` pre-tokenizer (as its serialized JSON form).
//!
//! Guarantees: every name in [`KNOWN_PRE`] maps to a pre-tokenizer; a file without the key gets
//! the GPT-2 rules (what llama.cpp does for old files); an unknown name is an error
//! ([`TokError::UnknownPreTokenizer`]) rather than a silent guess.

use serde_json::{json, Value};

use crate::error::TokError;

/// The GPT-2 split rules: contractions, letters, digits, other symbols, each with an optional
/// leading space, and whitespace runs. Built into the `ByteLevel` pre-tokenizer (`use_regex`).
const FAMILY_GPT2: &[&str] = &["gpt2", "default", "mpt", "olmo", "jais"];

/// GPT-2 rules after isolating every digit (StarCoder-style vocabularies, SmolLM).
const FAMILY_DIGITS_GPT2: &[&str] = &[
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva",
];

/// Llama 3 rules: numbers in groups of at most three, case-insensitive contractions, letters
/// may carry one leading non-letter, newlines kept with the preceding symbols.
const FAMILY_LLAMA3: &[&str] = &[
    "llama3",
    "llama-bpe",
    "llama-v3",
    "falcon3",
    "smaug-bpe",
    "dbrx",
    "pixtral",
];

/// Qwen 2 rules: the Llama 3 rules with every digit on its own.
const FAMILY_QWEN2: &[&str] = &["qwen2", "deepseek-r1-qwen", "megrez"];

/// Every `tokenizer.ggml.pre` value this crate understands.
pub const KNOWN_PRE: &[&str] = &[
    "gpt2",
    "default",
    "mpt",
    "olmo",
    "jais",
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva",
    "llama3",
    "llama-bpe",
    "llama-v3",
    "falcon3",
    "smaug-bpe",
    "dbrx",
    "pixtral",
    "qwen2",
    "deepseek-r1-qwen",
    "megrez",
];

const LLAMA3_SPLIT: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

const QWEN2_SPLIT: &str = concat!(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

fn byte_level(use_regex: bool) -> Value {
    json!({
        "type": "ByteLevel",
        "add_prefix_space": false,
        "trim_offsets": true,
        "use_regex": use_regex,
    })
}

fn split_then_bytes(pattern: &str) -> Value {
    json!({
        "type": "Sequence",
        "pretokenizers": [
            {
                "type": "Split",
                "pattern": { "Regex": pattern },
                "behavior": "Isolated",
                "invert": false,
            },
            byte_level(false),
        ],
    })
}

/// The serialized `tokenizers` pre-tokenizer for a GGUF `tokenizer.ggml.pre` value
/// (`None`: the key is absent, use GPT-2 rules).
pub fn pre_tokenizer_for(pre: Option<&str>) -> Result<Value, TokError> {
    let Some(name) = pre else {
        return Ok(byte_level(true));
    };
    if FAMILY_GPT2.contains(&name) {
        Ok(byte_level(true))
    } else if FAMILY_DIGITS_GPT2.contains(&name) {
        Ok(json!({
            "type": "Sequence",
            "pretokenizers": [
                { "type": "Digits", "individual_digits": true },
                byte_level(true),
            ],
        }))
    } else if FAMILY_LLAMA3.contains(&name) {
        Ok(split_then_bytes(LLAMA3_SPLIT))
    } else if FAMILY_QWEN2.contains(&name) {
        Ok(split_then_bytes(QWEN2_SPLIT))
    } else {
        Err(TokError::UnknownPreTokenizer {
            name: name.to_string(),
            known: KNOWN_PRE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

    fn pieces(pre: &str, text: &str) -> Vec<String> {
        let value = pre_tokenizer_for(Some(pre)).unwrap();
        let pt = tokenizers::PreTokenizerWrapper::deserialize(&value).unwrap();
        let mut s = PreTokenizedString::from(text);
        pt.pre_tokenize(&mut s).unwrap();
        s.get_splits(OffsetReferential::Original, OffsetType::Byte)
            .into_iter()
            .map(|(_, (a, b), _)| text[a..b].to_string())
            .collect()
    }

    use serde::Deserialize;

    #[test]
    fn every_known_name_builds() {
        for name in KNOWN_PRE {
            let value = pre_tokenizer_for(Some(name)).unwrap();
            tokenizers::PreTokenizerWrapper::deserialize(&value)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn llama3_groups_digits_by_three() {
        assert_eq!(pieces("llama-bpe", "12345"), ["123", "45"]);
        assert_eq!(pieces("llama3", "I'M ok"), ["I", "'M", " ok"]);
    }

    #[test]
    fn qwen2_and_smollm_isolate_digits() {
        assert_eq!(pieces("qwen2", "x 123"), ["x", " ", "1", "2", "3"]);
        assert_eq!(pieces("smollm", "a 12"), ["a", " ", "1", "2"]);
    }

    #[test]
    fn gpt2_keeps_digit_runs() {
        assert_eq!(pieces("gpt2", "a 12345"), ["a", " 12345"]);
    }

    #[test]
    fn unknown_pre_is_an_error() {
        assert!(matches!(
            pre_tokenizer_for(Some("no-such-pre")),
            Err(TokError::UnknownPreTokenizer { .. })
        ));
        assert!(pre_tokenizer_for(None).is_ok());
    }
}
