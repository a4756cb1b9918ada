//! Typed errors for everything in this crate.
//!
//! Every fallible public function returns [`TokError`]; no path through the crate panics on
//! user-controlled input (files, metadata, token ids).

use std::path::PathBuf;

/// An error from loading a tokenizer or from encoding / decoding with it.
#[derive(Debug, thiserror::Error)]
pub enum TokError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (tokenizer_config.json, generation_config.json, ...) is not valid JSON.
    #[error("invalid JSON in {path}: {source}")]
    Json {
        /// The file that failed.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A `tokenizer.json` could not be turned into a tokenizer.
    #[error("invalid tokenizer file {path}: {message}")]
    InvalidTokenizerFile {
        /// The file that failed.
        path: PathBuf,
        /// What the `tokenizers` library reported.
        message: String,
    },
    /// The `tokenizers` library failed while encoding, decoding or building.
    #[error("tokenizer error: {0}")]
    Backend(String),
    /// A required GGUF metadata key is absent.
    #[error("GGUF tokenizer metadata is missing `{0}`")]
    MissingGgufKey(String),
    /// A GGUF metadata key has an unusable value.
    #[error("GGUF metadata `{key}`: {message}")]
    BadGgufValue {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer family this crate cannot build.
    #[error("unsupported GGUF tokenizer model `{0}` (supported: gpt2)")]
    UnsupportedGgufTokenizer(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not know.
    ///
    /// Guessing would silently produce token ids the model was not trained on, so this is an
    /// error rather than a fallback.
    #[error("unknown GGUF pre-tokenizer `{name}`; known: {}", .known.join(", "))]
    UnknownPreTokenizer {
        /// The name the file gives.
        name: String,
        /// The names this crate knows.
        known: &'static [&'static str],
    },
    /// A token id is not in the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab_size})")]
    TokenIdOutOfRange {
        /// The offending id.
        id: u32,
        /// The vocabulary size, added tokens included.
        vocab_size: usize,
    },
    /// Reading the GGUF file's metadata failed in `oxllm-formats`.
    #[error("GGUF: {0}")]
    Gguf(String),
}

impl TokError {
    pub(crate) fn backend(err: impl std::fmt::Display) -> Self {
        TokError::Backend(err.to_string())
    }
}
