//! Hybrid and mixture-of-experts Qwen families: Qwen3-Next and Qwen3.5 (Gated DeltaNet linear
//! attention interleaved with gated full attention; MoE with a shared expert or dense MLPs) and
//! Qwen3-MoE (Qwen3 attention, MoE MLPs), from Hugging Face directories.

mod config;
mod gated_attention;
pub(crate) mod gated_delta_net;
mod load;
mod model;
mod moe;
pub(crate) mod state_io;

pub use config::{hybrid_arch, HybridConfig, LayerKind, LinearAttnConfig, MoeConfig};
pub use gated_attention::GatedAttention;
pub use gated_delta_net::GatedDeltaNet;
pub use load::load_hybrid;
pub use model::{HybridLayer, HybridModel, Mixer, Mlp};
pub use moe::{DenseMlp, MoeMlp};
pub use oxllm_kernels::gdn::DeltaRule;
pub use state_io::validate_slots as validate_state_slots;
