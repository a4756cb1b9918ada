//! Flattening a [`SchedulerOutput`] into the flat arrays a runner's forward batch and attention
//! metadata are views of.
//!
//! Guarantees for an output the scheduler produced: rows are the scheduled sequences' tokens
//! concatenated in order; `query_start_loc` has one more entry than there are sequences;
//! every slot lies inside the sequence's block table; block tables are padded with the null
//! block up to a common stride; one logits row per sampling sequence, in order; for hybrid
//! models one state slot and one restore entry per sequence, and each checkpoint row inside its
//! sequence's rows.

use oxllm_core::{ReqId, TokenId};
use oxllm_kv::NULL_BLOCK;

use crate::error::SchedError;
use crate::output::{ScheduledSeq, SchedulerOutput};

/// The flat inputs of one forward step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchArrays {
    pub token_ids: Vec<TokenId>,
    /// Position of each row in its sequence.
    pub positions: Vec<u32>,
    /// Cache slot each row's K/V is written to: `block * block_size + pos % block_size`.
    pub slot_mapping: Vec<i32>,
    /// `num_seqs + 1` offsets into the rows.
    pub query_start_loc: Vec<u32>,
    /// Context length of each sequence after the step.
    pub seq_lens: Vec<u32>,
    /// Block tables, `block_table_stride` entries per sequence, padded with the null block.
    pub block_tables: Vec<u32>,
    pub block_table_stride: usize,
    /// The last row of each sequence that samples.
    pub logits_indices: Vec<u32>,
    /// The request each logits row belongs to.
    pub sample_req_ids: Vec<ReqId>,
    /// Hybrid models: the recurrent-state slot of each sequence (empty for attention-only).
    pub state_slots: Vec<u32>,
    /// Hybrid models: per sequence, the checkpoint slot to restore its state from before the
    /// step, or -1.
    pub restore_slots: Vec<i32>,
    /// Hybrid models: after row `checkpoint_rows[i]`, copy its sequence's recurrent state into
    /// slot `checkpoint_slots[i]`. Ascending rows.
    pub checkpoint_rows: Vec<u32>,
    pub checkpoint_slots: Vec<u32>,
}

impl SchedulerOutput {
    /// The runner's arrays for this step; errors if a sequence's block table is too short for
    /// its positions (never for an output the scheduler produced).
    pub fn to_batch_arrays(&self, block_size: usize) -> Result<BatchArrays, SchedError> {
        let stride = self
            .scheduled
            .iter()
            .map(|s| s.block_table.len())
            .max()
            .unwrap_or(0);
        let mut arrays = BatchArrays {
            block_table_stride: stride,
            query_start_loc: vec![0],
            ..BatchArrays::default()
        };
        for seq in &self.scheduled {
            let end = seq.start_pos + seq.token_ids.len();
            let needed = end.div_ceil(block_size.max(1));
            if block_size == 0 || needed > seq.block_table.len() {
                return Err(SchedError::BlockTableTooShort {
                    req_id: seq.req_id,
                    blocks: seq.block_table.len(),
                    pos: end.saturating_sub(1),
                });
            }
            let first_row = arrays.token_ids.len();
            arrays.token_ids.extend_from_slice(&seq.token_ids);
            self.push_state(seq, first_row, &mut arrays)?;
            for pos in seq.start_pos..end {
                let block = seq.block_table[pos / block_size] as usize;
                arrays.positions.push(pos as u32);
                arrays
                    .slot_mapping
                    .push((block * block_size + pos % block_size) as i32);
            }
            let rows = arrays.token_ids.len() as u32;
            arrays.query_start_loc.push(rows);
            arrays.seq_lens.push(end as u32);
            arrays.block_tables.extend_from_slice(&seq.block_table);
            // Pad with the null block so every table has the same stride.
            let padded_len = arrays.block_tables.len() + stride - seq.block_table.len();
            arrays.block_tables.resize(padded_len, NULL_BLOCK);
            if seq.needs_sample && !seq.token_ids.is_empty() {
                arrays.logits_indices.push(rows - 1);
                arrays.sample_req_ids.push(seq.req_id);
            }
        }
        if !arrays.state_slots.is_empty() && arrays.state_slots.len() != self.scheduled.len() {
            return Err(SchedError::InvalidStateMetadata(
                "some sequences of the step have a state slot and some do not".into(),
            ));
        }
        Ok(arrays)
    }

    /// The recurrent-state entries of one sequence whose rows start at `first_row`.
    fn push_state(
        &self,
        seq: &ScheduledSeq,
        first_row: usize,
        arrays: &mut BatchArrays,
    ) -> Result<(), SchedError> {
        let Some(slot) = seq.state_slot else {
            return if seq.restore_from.is_some() || !seq.checkpoints.is_empty() {
                Err(SchedError::InvalidStateMetadata(format!(
                    "request {} restores or checkpoints state without a state slot",
                    seq.req_id
                )))
            } else {
                Ok(())
            };
        };
        arrays.state_slots.push(slot);
        arrays
            .restore_slots
            .push(seq.restore_from.map_or(-1, |s| s as i32));
        let end = seq.start_pos + seq.token_ids.len();
        for c in &seq.checkpoints {
            if c.num_tokens <= seq.start_pos || c.num_tokens > end {
                return Err(SchedError::InvalidStateMetadata(format!(
                    "request {}: checkpoint after {} tokens outside its step",
                    seq.req_id, c.num_tokens
                )));
            }
            let row = first_row + (c.num_tokens - seq.start_pos - 1);
            arrays.checkpoint_rows.push(row as u32);
            arrays.checkpoint_slots.push(c.slot);
        }
        Ok(())
    }
}
