//! Model architectures and their loaders.
//!
//! A model is a set of weights plus a pure forward function: it owns no cache and no position.
//! The caller passes a `ForwardBatch` (flat token ids, positions, slot mapping and paged
//! attention metadata for any mix of prefill chunks and decode steps) and a `KvCache` to read and
//! write; the model returns logits for the requested rows only.
//!
//! Supported: the Llama family (Llama 2/3, SmolLM2, Mistral-style configs), Qwen2 (q/k/v
//! biases) and Qwen3 dense (per-head q/k RMSNorm), from GGUF files and from Hugging Face
//! safetensors directories; the hybrid / MoE Qwen families (Qwen3-Next, Qwen3.5, Qwen3-MoE:
//! Gated DeltaNet + gated attention, mixture of experts) from Hugging Face directories, with a
//! per-sequence recurrent state held in the cache (`hybrid`). `Model` fronts them all.

mod batch;
mod config;
mod error;
pub mod graph;
pub mod hybrid;
mod kv_cache;
mod llama;
mod loader;
mod model;
mod session;
mod state_pool;

pub use batch::ForwardBatch;
pub use config::{Arch, ModelConfig, RopeScaling};
pub use error::ModelError;
pub use kv_cache::KvCache;
pub use llama::{LayerWeights, LlamaModel};
pub use loader::{load_model, ModelFile};
pub use model::{Model, ModelKind};
pub use session::{argmax, Session, SESSION_BLOCK_SIZE};
pub use state_pool::RecurrentStatePool;
