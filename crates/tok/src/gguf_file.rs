//! Reading a [`GgufVocab`] out of an `oxllm_formats::GgufFile`, and `Tokenizer::from_gguf`.
//!
//! Guarantees: `tokenizer.ggml.model` and `tokenizer.ggml.tokens` are required (missing ->
//! [`TokError::MissingGgufKey`]); every other key is optional; a key present with the wrong type
//! is [`TokError::BadGgufValue`], never ignored.

use oxllm_formats::{GgufFile, MetaValue};

use crate::error::TokError;
use crate::gguf_vocab::GgufVocab;
use crate::tokenizer::Tokenizer;

fn bad(key: &str, message: &str) -> TokError {
    TokError::BadGgufValue {
        key: key.to_string(),
        message: message.to_string(),
    }
}

fn opt_str(file: &GgufFile, key: &str) -> Result<Option<String>, TokError> {
    file.meta(key)
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(key, "expected a string"))
        })
        .transpose()
}

fn opt_id(file: &GgufFile, key: &str) -> Result<Option<u32>, TokError> {
    file.meta(key)
        .map(|v| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(key, "expected a token id"))
        })
        .transpose()
}

fn opt_bool(file: &GgufFile, key: &str) -> Result<Option<bool>, TokError> {
    file.meta(key)
        .map(|v| v.as_bool().ok_or_else(|| bad(key, "expected a bool")))
        .transpose()
}

fn opt_array<'a>(file: &'a GgufFile, key: &str) -> Result<Option<&'a [MetaValue]>, TokError> {
    file.meta(key)
        .map(|v| v.as_array().ok_or_else(|| bad(key, "expected an array")))
        .transpose()
}

fn strings(items: &[MetaValue], key: &str) -> Result<Vec<String>, TokError> {
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(key, "expected an array of strings"))
        })
        .collect()
}

impl GgufVocab {
    /// Read the tokenizer metadata of `file`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokError> {
        let model = opt_str(file, "tokenizer.ggml.model")?
            .ok_or_else(|| TokError::MissingGgufKey("tokenizer.ggml.model".into()))?;
        let tokens_key = "tokenizer.ggml.tokens";
        let tokens = opt_array(file, tokens_key)?
            .ok_or_else(|| TokError::MissingGgufKey(tokens_key.into()))?;
        let tokens = strings(tokens, tokens_key)?;
        let types_key = "tokenizer.ggml.token_type";
        let token_types = opt_array(file, types_key)?
            .map(|items| {
                items
                    .iter()
                    .map(|v| {
                        v.as_i64()
                            .and_then(|n| i32::try_from(n).ok())
                            .ok_or_else(|| bad(types_key, "expected an array of integers"))
                    })
                    .collect::<Result<Vec<i32>, TokError>>()
            })
            .transpose()?;
        let merges_key = "tokenizer.ggml.merges";
        let merges = match opt_array(file, merges_key)? {
            Some(items) => strings(items, merges_key)?,
            None => Vec::new(),
        };
        let mut extra_eos = Vec::new();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            extra_eos.extend(opt_id(file, key)?);
        }
        Ok(GgufVocab {
            model,
            pre: opt_str(file, "tokenizer.ggml.pre")?,
            tokens,
            token_types,
            merges,
            bos: opt_id(file, "tokenizer.ggml.bos_token_id")?,
            eos: opt_id(file, "tokenizer.ggml.eos_token_id")?,
            extra_eos,
            unk: opt_id(file, "tokenizer.ggml.unknown_token_id")?,
            pad: opt_id(file, "tokenizer.ggml.padding_token_id")?,
            add_bos: opt_bool(file, "tokenizer.ggml.add_bos_token")?,
            add_eos: opt_bool(file, "tokenizer.ggml.add_eos_token")?,
            chat_template: opt_str(file, "tokenizer.chat_template")?,
        })
    }
}

impl Tokenizer {
    /// Build the tokenizer embedded in a GGUF file (see [`GgufVocab::build`]).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, TokError> {
        GgufVocab::from_gguf(file)?.build()
    }
}
