//! `Model`: any supported architecture behind one forward.
//!
//! Callers read `model.config` (the common summary) and record the forward with
//! [`crate::graph::record_forward`] over backend buffers: paged K/V for the attention layers
//! (`graph::KvBuffers`) plus, for hybrids, the recurrent states (`graph::StateBuffers`).

use std::sync::Arc;

use crate::hybrid::HybridModel;
use crate::{LlamaModel, ModelConfig};

pub enum ModelKind {
    /// Llama, Mistral-style, Qwen2, Qwen3 dense.
    /// Shared so that a backend can keep the weights it is handed (`Model::weights`).
    Dense(Arc<LlamaModel>),
    /// Qwen3-Next, Qwen3.5, Qwen3-MoE (shared for the same reason).
    Hybrid(Arc<HybridModel>),
}

pub struct Model {
    pub config: ModelConfig,
    pub kind: ModelKind,
}

impl From<LlamaModel> for Model {
    fn from(m: LlamaModel) -> Model {
        Model {
            config: m.config.clone(),
            kind: ModelKind::Dense(Arc::new(m)),
        }
    }
}

impl From<HybridModel> for Model {
    fn from(m: HybridModel) -> Model {
        Model {
            config: m.config.base.clone(),
            kind: ModelKind::Hybrid(Arc::new(m)),
        }
    }
}

impl Model {
    /// The weights to hand a backend ([`oxllm_runtime::Backend::load_weights`]), which
    /// resolves every op description's weight id in them.
    pub fn weights(&self) -> Arc<dyn oxllm_runtime::WeightSource> {
        match &self.kind {
            ModelKind::Dense(m) => m.clone(),
            ModelKind::Hybrid(m) => m.clone(),
        }
    }

    /// True when sequences carry recurrent state (they need `ForwardBatch::state_slots`, and
    /// prefix caching cannot restore them yet).
    pub fn has_recurrent_state(&self) -> bool {
        self.hybrid().is_some_and(|h| h.config.linear.is_some())
    }

    /// Bytes of one sequence's recurrent state (0 for attention-only models).
    pub fn state_bytes_per_seq(&self) -> usize {
        self.hybrid().map_or(0, HybridModel::state_bytes_per_slot)
    }

    pub fn dense(&self) -> Option<&LlamaModel> {
        match &self.kind {
            ModelKind::Dense(m) => Some(m.as_ref()),
            ModelKind::Hybrid(_) => None,
        }
    }

    /// The shared dense model, for building plans that hold its weights.
    pub fn dense_shared(&self) -> Option<&Arc<LlamaModel>> {
        match &self.kind {
            ModelKind::Dense(m) => Some(m),
            ModelKind::Hybrid(_) => None,
        }
    }

    pub fn hybrid(&self) -> Option<&HybridModel> {
        match &self.kind {
            ModelKind::Hybrid(m) => Some(m.as_ref()),
            ModelKind::Dense(_) => None,
        }
    }

    /// The shared hybrid model, for building plans that hold its weights.
    pub fn hybrid_shared(&self) -> Option<&Arc<HybridModel>> {
        match &self.kind {
            ModelKind::Hybrid(m) => Some(m),
            ModelKind::Dense(_) => None,
        }
    }

    /// Mutable access while no plan shares the model yet (`None` for dense models or once
    /// the weights are shared).
    pub fn hybrid_mut(&mut self) -> Option<&mut HybridModel> {
        match &mut self.kind {
            ModelKind::Hybrid(m) => Arc::get_mut(m),
            ModelKind::Dense(_) => None,
        }
    }

    /// Bytes of weights read by one decode step.
    pub fn weight_bytes(&self) -> usize {
        match &self.kind {
            ModelKind::Dense(m) => m.weight_bytes(),
            ModelKind::Hybrid(m) => m.weight_bytes(),
        }
    }
}
