//! The flat description of one forward step over many sequences.

use oxllm_kernels::attention::AttnMetadata;

/// One step's inputs. Token rows of all sequences are concatenated; `attn` says which rows
/// belong to which sequence and where their K/V live. `slot_mapping[t]` is the cache slot token
/// `t` writes its K/V to (-1 for padding). Logits are produced only for `logits_indices`.
/// `state_slots[s]` is the recurrent-state slot of sequence `s` (hybrid models; empty for dense
/// models, which ignore it and the other state fields).
///
/// Prefix caching of hybrids: before any layer runs, sequence `s` with `restore_slots[s] >= 0`
/// gets that checkpoint slot's state copied into its own (all restores of a step run first, so
/// a checkpoint may be read and overwritten in the same step). While the linear layers run,
/// the state of the sequence owning row `checkpoint_rows[i]` just after that row is copied into
/// slot `checkpoint_slots[i]` (in every linear layer); the chunk is not split for it.
#[derive(Clone, Copy, Debug)]
pub struct ForwardBatch<'a> {
    pub token_ids: &'a [u32],
    pub positions: &'a [u32],
    pub slot_mapping: &'a [i32],
    pub attn: AttnMetadata<'a>,
    pub logits_indices: &'a [u32],
    pub state_slots: &'a [u32],
    /// Per sequence, a checkpoint slot to restore the state from before the step, or -1
    /// (empty: no restores).
    pub restore_slots: &'a [i32],
    /// Rows after which a sequence's state is checkpointed (strictly ascending) and the slots it
    /// goes to.
    pub checkpoint_rows: &'a [u32],
    pub checkpoint_slots: &'a [u32],
}

impl ForwardBatch<'_> {
    /// Checks that the metadata is self-consistent, so a bad batch is an error and never an
    /// out-of-bounds access inside a kernel.
    pub fn validate(&self, num_slots: usize, block_size: usize) -> Result<(), String> {
        let n = self.token_ids.len();
        if self.positions.len() != n || self.slot_mapping.len() != n {
            return Err(format!(
                "{} tokens but {} positions and {} slots",
                n,
                self.positions.len(),
                self.slot_mapping.len()
            ));
        }
        if self.attn.block_size != block_size {
            return Err(format!(
                "block size {} does not match the cache's {}",
                self.attn.block_size, block_size
            ));
        }
        if let Some(&s) = self
            .slot_mapping
            .iter()
            .find(|&&s| s >= num_slots as i32 || s < -1)
        {
            return Err(format!("slot {s} outside the cache of {num_slots} slots"));
        }
        let qsl = self.attn.query_start_loc;
        let num_seqs = self.attn.seq_lens.len();
        if qsl.len() != num_seqs + 1 || qsl.first() != Some(&0) {
            return Err("query_start_loc must have num_seqs + 1 entries starting at 0".into());
        }
        if qsl.windows(2).any(|w| w[0] > w[1]) || qsl[num_seqs] as usize > n {
            return Err("query_start_loc must be non-decreasing and within the batch".into());
        }
        let stride = self.attn.block_table_stride;
        if self.attn.block_tables.len() < num_seqs * stride {
            return Err("block_tables shorter than num_seqs * stride".into());
        }
        let num_blocks = num_slots / block_size;
        for s in 0..num_seqs {
            let len = self.attn.seq_lens[s] as usize;
            let q_len = (qsl[s + 1] - qsl[s]) as usize;
            if len == 0 {
                continue;
            }
            if q_len > len {
                return Err(format!("sequence {s} has {q_len} queries but length {len}"));
            }
            let blocks = len.div_ceil(block_size);
            if blocks > stride {
                return Err(format!(
                    "sequence {s} needs {blocks} blocks, table holds {stride}"
                ));
            }
            let table = &self.attn.block_tables[s * stride..s * stride + blocks];
            if table.iter().any(|&b| b as usize >= num_blocks) {
                return Err(format!("sequence {s} references a block outside the cache"));
            }
        }
        if !self.state_slots.is_empty() && self.state_slots.len() != num_seqs {
            return Err(format!(
                "{} state slots for {num_seqs} sequences",
                self.state_slots.len()
            ));
        }
        if !self.restore_slots.is_empty() && self.restore_slots.len() != self.state_slots.len() {
            return Err(format!(
                "{} restore slots for {} state slots",
                self.restore_slots.len(),
                self.state_slots.len()
            ));
        }
        if self.checkpoint_rows.len() != self.checkpoint_slots.len() {
            return Err("checkpoint rows and slots differ in length".into());
        }
        if !self.checkpoint_rows.is_empty() && self.state_slots.is_empty() {
            return Err("checkpoints without state slots".into());
        }
        if self.checkpoint_rows.windows(2).any(|w| w[0] >= w[1])
            || self
                .checkpoint_rows
                .last()
                .is_some_and(|&r| r as usize >= n)
        {
            return Err("checkpoint rows must be strictly ascending rows of the batch".into());
        }
        if self.logits_indices.iter().any(|&i| i as usize >= n) {
            return Err("logits index outside the batch".into());
        }
        Ok(())
    }
}
