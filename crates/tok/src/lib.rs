//! Tokenizers for oxllm: `tokenizer.json` files, Hugging Face model directories and
//! GGUF-embedded vocabularies, plus streaming (incremental) detokenization.
//!
//! Entry points: [`Tokenizer::from_file`], [`Tokenizer::from_hf_dir`], [`Tokenizer::from_gguf`]
//! (or [`GgufVocab`] + [`GgufVocab::build`] for metadata read some other way), and
//! [`Tokenizer::incremental_decoder`]. Every fallible call returns [`TokError`].

#![forbid(unsafe_code)]

mod byte_alphabet;
mod chat_template;
mod error;
mod gguf_file;
mod gguf_vocab;
mod hf_dir;
mod incremental;
pub mod pretok;
mod token_bytes;
mod tokenizer;

pub use chat_template::{ChatTemplate, ChatTemplateError, ChatTemplateInputs};
pub use error::TokError;
pub use gguf_vocab::{GgufVocab, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED};
pub use incremental::IncrementalDecoder;
pub use token_bytes::TokenBytes;
pub use tokenizer::Tokenizer;
