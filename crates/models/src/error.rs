//! Errors of model loading and forward passes; each names what was wrong.

use oxllm_core::DType;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Format(#[from] oxllm_formats::FormatError),
    #[error("unknown model architecture '{0}' (supported: llama, mistral, qwen2, qwen3, qwen3_moe, qwen3_next, qwen3_5)")]
    UnknownArchitecture(String),
    #[error("model config is missing '{0}'")]
    MissingConfig(String),
    #[error("model config value '{key}' is invalid: {reason}")]
    InvalidConfig { key: String, reason: String },
    #[error("tensor '{name}' has shape {got:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("tensor '{name}' has type {dtype}, which oxllm cannot compute with")]
    TensorType { name: String, dtype: DType },
    #[error("weight '{name}': {source}")]
    Matrix {
        name: String,
        source: oxllm_kernels::matmul::MatrixError,
    },
    #[error(transparent)]
    Quant(#[from] oxllm_kernels::quant::QuantError),
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error(transparent)]
    Runtime(#[from] oxllm_runtime::RuntimeError),
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    #[error("cannot read model path {path}: {reason}")]
    Path { path: String, reason: String },
}
