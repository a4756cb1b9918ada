//! The model runner: turns a scheduler output into the model's flat batch, runs the forward
//! pass on the paged cache, and returns one logits row per sampling request. For models with
//! recurrent state (hybrids) it also assigns each running request a state slot, held until the
//! scheduler reports the request finished or preempted.

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;
use std::collections::HashMap;

use oxllm_core::ReqId;
use oxllm_models::{ForwardBatch, KvCache, Model};
use oxllm_sched::{BatchArrays, SchedulerOutput};

use crate::EngineError;

pub struct ModelRunner {
    model: Model,
    kv: KvCache,
    pool: ThreadPool,
    block_size: usize,
    /// Recurrent-state slot of each running request (hybrid models only).
    state_slots: HashMap<ReqId, u32>,
    free_state_slots: Vec<u32>,
}

impl ModelRunner {
    /// `max_seqs`: the most sequences running at once (the number of recurrent-state slots).
    pub fn new(
        model: Model,
        num_blocks: usize,
        block_size: usize,
        threads: usize,
        max_seqs: usize,
    ) -> Self {
        let kv = model.new_cache(num_blocks, block_size, max_seqs);
        let free_state_slots = if model.has_recurrent_state() {
            (0..max_seqs as u32).rev().collect()
        } else {
            Vec::new()
        };
        ModelRunner {
            model,
            kv,
            pool: ThreadPool::new(threads),
            block_size,
            state_slots: HashMap::new(),
            free_state_slots,
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Runs one step; returns the flat arrays (for the sampling rows' request ids) and the
    /// logits, `[arrays.logits_indices.len(), vocab]`.
    pub fn execute(
        &mut self,
        out: &SchedulerOutput,
    ) -> Result<(BatchArrays, Vec<f32>), EngineError> {
        let arrays = out.to_batch_arrays(self.block_size)?;
        let mut slots = Vec::new();
        if self.model.has_recurrent_state() {
            for id in out.finished.iter().chain(&out.preempted) {
                if let Some(slot) = self.state_slots.remove(id) {
                    self.free_state_slots.push(slot);
                }
            }
            for seq in &out.scheduled {
                let slot = match self.state_slots.get(&seq.req_id) {
                    Some(&slot) => slot,
                    None => {
                        let slot = self.free_state_slots.pop().ok_or_else(|| {
                            EngineError::Config(
                                "more running sequences than recurrent-state slots".into(),
                            )
                        })?;
                        self.state_slots.insert(seq.req_id, slot);
                        slot
                    }
                };
                slots.push(slot);
            }
        }
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
            state_slots: &slots,
        };
        let logits = self.model.forward(&self.pool, &batch, &mut self.kv)?;
        Ok((arrays, logits))
    }
}
