//! Model file readers: GGUF ([`gguf`]), safetensors ([`safetensors`]) and Hugging Face model
//! directories ([`hf`]), all memory-mapped and validated when opened.
//!
//! Guarantees: opening never panics on malformed input; a successfully opened file hands out
//! [`TensorView`]s whose bytes are in bounds and whose shapes are **outermost dimension first**
//! (PyTorch order) whatever the format stores.

pub mod error;
pub mod gguf;
pub mod hf;
pub mod safetensors;
mod storage;
pub mod tensor;

pub use error::FormatError;
pub use gguf::{GgufFile, MetaValue, TensorInfo};
pub use hf::HfModelDir;
pub use oxllm_core::DType;
pub use safetensors::{SafetensorsFile, SafetensorsInfo};
pub use tensor::TensorView;
