//! The model runner: turns a scheduler output into the model's flat batch, runs the forward
//! pass on the paged cache, and returns one logits row per sampling request.

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;
use oxllm_models::{ForwardBatch, KvCache, LlamaModel};
use oxllm_sched::{BatchArrays, SchedulerOutput};

use crate::EngineError;

pub struct ModelRunner {
    model: LlamaModel,
    kv: KvCache,
    pool: ThreadPool,
    block_size: usize,
}

impl ModelRunner {
    pub fn new(model: LlamaModel, num_blocks: usize, block_size: usize, threads: usize) -> Self {
        let c = &model.config;
        let kv = KvCache::new(c.n_layers, num_blocks, block_size, c.kv_width());
        ModelRunner {
            model,
            kv,
            pool: ThreadPool::new(threads),
            block_size,
        }
    }

    pub fn model(&self) -> &LlamaModel {
        &self.model
    }

    /// Runs one step; returns the flat arrays (for the sampling rows' request ids) and the
    /// logits, `[arrays.logits_indices.len(), vocab]`.
    pub fn execute(
        &mut self,
        out: &SchedulerOutput,
    ) -> Result<(BatchArrays, Vec<f32>), EngineError> {
        let arrays = out.to_batch_arrays(self.block_size)?;
        let batch = ForwardBatch {
            token_ids: &arrays.token_ids,
            positions: &arrays.positions,
            slot_mapping: &arrays.slot_mapping,
            attn: AttnMetadata {
                query_start_loc: &arrays.query_start_loc,
                seq_lens: &arrays.seq_lens,
                block_tables: &arrays.block_tables,
                block_table_stride: arrays.block_table_stride,
                block_size: self.block_size,
            },
            logits_indices: &arrays.logits_indices,
        };
        let logits = self.model.forward(&self.pool, &batch, &mut self.kv)?;
        Ok((arrays, logits))
    }
}
