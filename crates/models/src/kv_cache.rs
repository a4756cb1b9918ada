//! Paged K/V storage: per layer, one K and one V array of `num_blocks * block_size` slots, each
//! slot `n_kv_heads * head_dim` f32 values. The cache knows nothing of sequences; block tables
//! (owned by the KV manager) say which blocks a sequence uses. A hybrid model's cache also
//! holds the recurrent states of its linear layers (`RecurrentStatePool`), indexed by the
//! state slots of the batch.

use crate::RecurrentStatePool;

pub struct KvCache {
    block_size: usize,
    num_blocks: usize,
    kv_width: usize,
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    states: Option<RecurrentStatePool>,
}

impl KvCache {
    pub fn new(n_layers: usize, num_blocks: usize, block_size: usize, kv_width: usize) -> KvCache {
        let slots = num_blocks * block_size;
        KvCache {
            block_size,
            num_blocks,
            kv_width,
            layers: (0..n_layers)
                .map(|_| (vec![0.0; slots * kv_width], vec![0.0; slots * kv_width]))
                .collect(),
            states: None,
        }
    }

    /// Adds the recurrent state pool of a hybrid model.
    pub fn with_states(mut self, states: RecurrentStatePool) -> KvCache {
        self.states = Some(states);
        self
    }

    pub fn states(&self) -> Option<&RecurrentStatePool> {
        self.states.as_ref()
    }

    /// The recurrent state pool (hybrid models only).
    pub fn states_mut(&mut self) -> Option<&mut RecurrentStatePool> {
        self.states.as_mut()
    }

    /// Number of layers holding K/V.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Bytes one token occupies across all layers (K and V).
    pub fn bytes_per_token(n_layers: usize, kv_width: usize) -> usize {
        n_layers * kv_width * 2 * std::mem::size_of::<f32>()
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }
    pub fn kv_width(&self) -> usize {
        self.kv_width
    }
    pub fn layer_mut(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        let (k, v) = &mut self.layers[layer];
        (k, v)
    }
}
