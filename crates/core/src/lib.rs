//! Shared vocabulary of oxllm: the element types a tensor can be stored in and the byte layout
//! of their blocks. Every crate that touches weights agrees on these numbers; they follow the
//! GGML type ids so a GGUF tensor table maps onto them directly.

mod dtype;

pub use dtype::{DType, DTypeError};

/// A token id in a model's vocabulary.
pub type TokenId = u32;
