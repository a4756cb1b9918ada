//! A GGUF-embedded vocabulary, and its conversion to a `tokenizers` tokenizer.
//!
//! [`GgufVocab`] holds the `tokenizer.*` metadata llama.cpp writes, independent of how the file
//! was read (see `gguf_file` for reading it from an `oxllm_formats::GgufFile`).
//! [`GgufVocab::build`] turns a byte-level BPE vocabulary (`tokenizer.ggml.model == "gpt2"`)
//! into a [`Tokenizer`].
//!
//! Guarantees:
//! * token ids are the vocabulary indices of the file; the result never has more ids than the
//!   file has tokens;
//! * tokens typed CONTROL (3) become special added tokens (matched whole in text, dropped by
//!   `decode(.., skip_special_tokens = true)`); USER_DEFINED (4) tokens become non-special added
//!   tokens (matched whole, always decoded). A control token not spelled in the byte alphabet is
//!   a known llama.cpp mislabel and is left a plain vocabulary entry, as transformers does;
//! * the pre-tokenizer comes from `tokenizer.ggml.pre` (see [`crate::pretok`]); an unknown name
//!   is an error;
//! * `tokenizer.ggml.model == "llama"` (SentencePiece) and every other model is
//!   [`TokError::UnsupportedGgufTokenizer`];
//! * malformed metadata (bad merge, out-of-range special id, token types of the wrong length)
//!   is an error, never a panic.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use crate::byte_alphabet::{byte_to_char, is_spelled, respell};
use crate::error::TokError;
use crate::pretok::pre_tokenizer_for;
use crate::tokenizer::{Tokenizer, TokenizerSpec};

/// llama.cpp token type: a control token such as `<|im_start|>`.
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp token type: a user-defined added token such as `<think>`.
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

/// The tokenizer metadata of a GGUF file (`tokenizer.ggml.*`, `tokenizer.chat_template`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE), `"llama"` (SentencePiece), ...
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`, indexed by token id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`, parallel to `tokens`.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`, each `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// Other end-of-generation ids the file declares (`eot_token_id`, `eom_token_id`).
    pub extra_eos: Vec<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos: Option<bool>,
    /// `tokenizer.chat_template`.
    pub chat_template: Option<String>,
}

impl GgufVocab {
    /// Build the tokenizer this vocabulary describes.
    pub fn build(&self) -> Result<Tokenizer, TokError> {
        match self.model.as_str() {
            "gpt2" => self.build_byte_level_bpe(),
            other => Err(TokError::UnsupportedGgufTokenizer(other.to_string())),
        }
    }

    fn check_id(&self, key: &str, id: Option<u32>) -> Result<Option<u32>, TokError> {
        match id {
            Some(id) if id as usize >= self.tokens.len() => Err(TokError::BadGgufValue {
                key: key.to_string(),
                message: format!("id {id} is not below the token count {}", self.tokens.len()),
            }),
            other => Ok(other),
        }
    }

    fn build_byte_level_bpe(&self) -> Result<Tokenizer, TokError> {
        if self.tokens.is_empty() {
            return Err(TokError::MissingGgufKey("tokenizer.ggml.tokens".into()));
        }
        if let Some(types) = &self.token_types {
            if types.len() != self.tokens.len() {
                return Err(TokError::BadGgufValue {
                    key: "tokenizer.ggml.token_type".into(),
                    message: format!("{} entries for {} tokens", types.len(), self.tokens.len()),
                });
            }
        }
        let bos = self.check_id("tokenizer.ggml.bos_token_id", self.bos)?;
        let eos = self.check_id("tokenizer.ggml.eos_token_id", self.eos)?;
        for &id in &self.extra_eos {
            self.check_id("tokenizer.ggml.eot_token_id", Some(id))?;
        }
        let table = byte_to_char();

        // Vocabulary, in the byte alphabet. A repeated spelling keeps its first id.
        let mut vocab = Map::with_capacity(self.tokens.len());
        for (id, token) in self.tokens.iter().enumerate() {
            let key = respell(token, &table);
            if !vocab.contains_key(&key) {
                vocab.insert(key, json!(id));
            }
        }

        let mut merges = Vec::with_capacity(self.merges.len());
        for (i, merge) in self.merges.iter().enumerate() {
            let mut parts = merge.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(a), Some(b), None) if !a.is_empty() && !b.is_empty() => {
                    merges.push(json!([a, b]))
                }
                _ => {
                    return Err(TokError::BadGgufValue {
                        key: "tokenizer.ggml.merges".into(),
                        message: format!("merge {i} ({merge:?}) is not two tokens"),
                    })
                }
            }
        }

        let added = self.added_tokens(&table);
        let tokenizer_json = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer_for(self.pre.as_deref())?,
            "post_processor": null,
            "decoder": {
                "type": "ByteLevel",
                "add_prefix_space": true,
                "trim_offsets": true,
                "use_regex": true,
            },
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": merges,
            },
        });
        let bytes = serde_json::to_vec(&tokenizer_json).map_err(TokError::backend)?;
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(TokError::backend)?;

        let mut eos_ids: Vec<u32> = Vec::new();
        for id in eos.into_iter().chain(self.extra_eos.iter().copied()) {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }
        Ok(Tokenizer::from_parts(
            inner,
            TokenizerSpec {
                bos_id: bos,
                eos_ids,
                prepend_bos: self.add_bos.unwrap_or(false) && bos.is_some(),
                append_eos: self.add_eos.unwrap_or(false) && eos.is_some(),
                chat_template: self.chat_template.clone(),
            },
        ))
    }

    /// Added-token entries (serialized form) for CONTROL and USER_DEFINED tokens.
    fn added_tokens(&self, table: &[char; 256]) -> Vec<Value> {
        let Some(types) = &self.token_types else {
            return Vec::new();
        };
        let mut seen = HashSet::new();
        let mut added = Vec::new();
        for (id, (token, &ty)) in self.tokens.iter().zip(types).enumerate() {
            let special = match ty {
                TOKEN_TYPE_CONTROL => true,
                TOKEN_TYPE_USER_DEFINED => false,
                _ => continue,
            };
            // An empty or foreign-spelled control token cannot be matched in text; a repeated
            // one would get a second id. Leave those as plain vocabulary entries.
            if token.is_empty() || (special && !is_spelled(token, table)) || !seen.insert(token) {
                continue;
            }
            added.push(json!({
                "id": id,
                "content": token,
                "single_word": false,
                "lstrip": false,
                "rstrip": false,
                "normalized": false,
                "special": special,
            }));
        }
        added
    }
}
