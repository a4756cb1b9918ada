//! A single sequence on its own cache: the smallest runner, for the CLI's one-shot generation
//! and for oracle tests. Blocks are assigned in order (block i holds positions
//! `i*block_size..`), so the paged path is exercised exactly as the engine uses it.

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;

use crate::{ForwardBatch, KvCache, Model, ModelError};

pub struct Session<'m> {
    model: &'m Model,
    kv: KvCache,
    block_table: Vec<u32>,
    len: usize,
    capacity: usize,
}

pub const SESSION_BLOCK_SIZE: usize = 16;

impl<'m> Session<'m> {
    /// A session able to hold `capacity` tokens (capped at the model's context length).
    pub fn new(model: &'m Model, capacity: usize) -> Session<'m> {
        let capacity = capacity.min(model.config.context_length).max(1);
        let blocks = capacity.div_ceil(SESSION_BLOCK_SIZE);
        Session {
            model,
            kv: model.new_cache(blocks, SESSION_BLOCK_SIZE, 1),
            block_table: (0..blocks as u32).collect(),
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// The cache (K/V and, for hybrids, the recurrent state in slot 0).
    pub fn cache(&self) -> &KvCache {
        &self.kv
    }

    /// Appends `ids` and returns the logits after each of them when `all_logits`, else only
    /// after the last one (`[rows, vocab]`).
    pub fn extend(
        &mut self,
        pool: &ThreadPool,
        ids: &[u32],
        all_logits: bool,
    ) -> Result<Vec<f32>, ModelError> {
        if ids.is_empty() {
            return Err(ModelError::InvalidBatch("no tokens to process".into()));
        }
        if self.len + ids.len() > self.capacity {
            return Err(ModelError::InvalidBatch(format!(
                "{} tokens exceed the session capacity of {}",
                self.len + ids.len(),
                self.capacity
            )));
        }
        let positions: Vec<u32> = (self.len..self.len + ids.len()).map(|p| p as u32).collect();
        let slots: Vec<i32> = positions.iter().map(|&p| p as i32).collect();
        let n = ids.len() as u32;
        let seq_lens = [(self.len + ids.len()) as u32];
        let logits_indices: Vec<u32> = if all_logits {
            (0..n).collect()
        } else {
            vec![n - 1]
        };
        let batch = ForwardBatch {
            token_ids: ids,
            positions: &positions,
            slot_mapping: &slots,
            attn: AttnMetadata {
                query_start_loc: &[0, n],
                seq_lens: &seq_lens,
                block_tables: &self.block_table,
                block_table_stride: self.block_table.len(),
                block_size: SESSION_BLOCK_SIZE,
            },
            logits_indices: &logits_indices,
            state_slots: &[0],
            restore_slots: &[],
            checkpoint_rows: &[],
            checkpoint_slots: &[],
        };
        let logits = self.model.forward(pool, &batch, &mut self.kv)?;
        self.len += ids.len();
        Ok(logits)
    }
}

/// Index of the largest value (first one on ties), as greedy decoding picks it.
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}
