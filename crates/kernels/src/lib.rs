//! CPU compute for oxllm: quantized weight formats and their dot products (`quant`), a
//! persistent thread pool (`pool`), matrix products over any weight format (`matmul`), paged
//! causal attention (`attention`), the Gated DeltaNet core (`gdn`), and the remaining transformer
//! ops (`ops`).

pub mod attention;
pub mod gdn;
pub mod matmul;
pub mod ops;
pub mod pool;
pub mod quant;
mod scratch;
mod shared_mut;
pub mod weight_bytes;
pub mod weight_dot;
