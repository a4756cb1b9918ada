//! `Model`: any supported architecture behind one forward pass.
//!
//! Callers read `model.config` (the common summary), build the cache with [`Model::new_cache`]
//! (paged K/V for the attention layers, plus a recurrent-state pool for hybrids) and call
//! [`Model::forward`].

use std::sync::Arc;

use oxllm_kernels::pool::ThreadPool;

use crate::hybrid::HybridModel;
use crate::{ForwardBatch, KvCache, LlamaModel, ModelConfig, ModelError};

pub enum ModelKind {
    /// Llama, Mistral-style, Qwen2, Qwen3 dense.
    /// Shared so that recorded plans can hold the weights they read.
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
    pub fn forward(
        &self,
        pool: &ThreadPool,
        batch: &ForwardBatch<'_>,
        kv: &mut KvCache,
    ) -> Result<Vec<f32>, ModelError> {
        match &self.kind {
            ModelKind::Dense(m) => m.forward(pool, batch, kv),
            ModelKind::Hybrid(m) => m.forward(pool, batch, kv),
        }
    }

    /// A cache of `num_blocks` blocks for the attention layers and, for models with linear
    /// layers, `num_state_slots` recurrent states (one per concurrently running sequence).
    pub fn new_cache(
        &self,
        num_blocks: usize,
        block_size: usize,
        num_state_slots: usize,
    ) -> KvCache {
        let c = &self.config;
        let kv = KvCache::new(c.kv_layers, num_blocks, block_size, c.kv_width());
        match self
            .hybrid()
            .and_then(|h| h.new_state_pool(num_state_slots))
        {
            Some(states) => kv.with_states(states),
            None => kv,
        }
    }

    /// True when sequences carry recurrent state (they need `ForwardBatch::state_slots`, and
    /// prefix caching cannot restore them yet).
    pub fn has_recurrent_state(&self) -> bool {
        self.hybrid().is_some_and(|h| h.config.linear.is_some())
    }

    /// Bytes of one sequence's recurrent state (0 for attention-only models).
    pub fn state_bytes_per_seq(&self) -> usize {
        self.hybrid()
            .and_then(|h| h.new_state_pool(1))
            .map_or(0, |p| p.bytes_per_slot())
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
