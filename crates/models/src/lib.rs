//! Model architectures and their loaders.
//!
//! A model is a set of weights plus one forward: the op sequence `graph` records on a runtime
//! backend (eager, captured into a plan, or on the scalar reference backend). A model owns no
//! cache and no position: a step's inputs (flat token ids, positions, slot mapping and paged
//! attention metadata for any mix of prefill chunks and decode steps, described and validated
//! as a `ForwardBatch`) and the K/V and recurrent-state buffers are backend buffers; logits come
//! only for the requested rows. `Session` runs that forward for one sequence.
//!
//! Supported: the Llama family (Llama 2/3, SmolLM2, Mistral-style configs), Qwen2 (q/k/v
//! biases) and Qwen3 dense (per-head q/k RMSNorm), from GGUF files and from Hugging Face
//! safetensors directories; the hybrid / MoE Qwen families (Qwen3-Next, Qwen3.5, Qwen3-MoE:
//! Gated DeltaNet + gated attention, mixture of experts) from Hugging Face directories, with a
//! per-sequence recurrent state held in backend buffers (`hybrid`, `graph::StateBuffers`).
//! `Model` fronts them all.

#![forbid(unsafe_code)]

mod batch;
mod config;
mod error;
pub mod graph;
pub mod hybrid;
mod llama;
mod loader;
mod model;
mod session;

pub use batch::ForwardBatch;
pub use config::{Arch, ModelConfig, RopeScaling};
pub use error::ModelError;
pub use llama::{LayerWeights, LlamaModel};
pub use loader::{load_model, load_model_with, ModelFile};
pub use model::{Model, ModelKind};
pub use session::{argmax, Session, SESSION_BLOCK_SIZE};
