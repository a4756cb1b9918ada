//! CPU compute for oxllm: quantized weight formats and their dot products (`quant`), a
//! persistent thread pool (`pool`), and the tensor ops a transformer forward pass needs (`ops`).

pub mod quant;
