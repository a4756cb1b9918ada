//! Shared vocabulary of oxllm: the element types a tensor can be stored in and the byte layout
//! of their blocks (following the GGML type ids so a GGUF tensor table maps onto them
//! directly), and the ids and outcomes of requests.

#![forbid(unsafe_code)]

mod dtype;
mod request;

pub use dtype::{DType, DTypeError};
pub use request::{BlockId, FinishReason, ReqId};

/// A token id in a model's vocabulary.
pub type TokenId = u32;
