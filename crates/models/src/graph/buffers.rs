//! Step inputs and the paged K/V cache as backend buffers.

use oxllm_runtime::{Backend, BufKind, BufRef, RuntimeError};

/// Step-input buffers sized for the largest step; each step or plan uses a [`StepView`].
pub struct StepBuffers {
    pub token_ids: BufRef,
    pub positions: BufRef,
    pub slot_mapping: BufRef,
    pub query_start_loc: BufRef,
    pub seq_lens: BufRef,
    pub block_tables: BufRef,
    pub logits_indices: BufRef,
    pub max_tokens: usize,
    pub max_seqs: usize,
    /// Block-table entries per sequence (the most blocks a sequence can hold).
    pub block_table_stride: usize,
}

/// One step's shape: the first `tokens` rows, `seqs` sequences and `logits` sampled rows of the
/// input buffers.
#[derive(Clone, Copy, Debug)]
pub struct StepView {
    pub token_ids: BufRef,
    pub positions: BufRef,
    pub slot_mapping: BufRef,
    pub query_start_loc: BufRef,
    pub seq_lens: BufRef,
    pub block_tables: BufRef,
    pub logits_indices: BufRef,
    pub block_table_stride: usize,
}

impl StepView {
    pub fn tokens(&self) -> usize {
        self.token_ids.len
    }
    pub fn seqs(&self) -> usize {
        self.seq_lens.len
    }
    pub fn logits(&self) -> usize {
        self.logits_indices.len
    }
}

impl StepBuffers {
    pub fn alloc(
        b: &mut dyn Backend,
        max_tokens: usize,
        max_seqs: usize,
        block_table_stride: usize,
    ) -> Result<StepBuffers, RuntimeError> {
        let max_logits = max_tokens.max(max_seqs);
        Ok(StepBuffers {
            token_ids: b.alloc_persistent(BufKind::U32, max_tokens)?,
            positions: b.alloc_persistent(BufKind::U32, max_tokens)?,
            slot_mapping: b.alloc_persistent(BufKind::I32, max_tokens)?,
            query_start_loc: b.alloc_persistent(BufKind::U32, max_seqs + 1)?,
            seq_lens: b.alloc_persistent(BufKind::U32, max_seqs)?,
            block_tables: b.alloc_persistent(BufKind::U32, max_seqs * block_table_stride)?,
            logits_indices: b.alloc_persistent(BufKind::U32, max_logits)?,
            max_tokens,
            max_seqs,
            block_table_stride,
        })
    }

    /// The view of a step of `tokens` rows over `seqs` sequences sampling `logits` rows; `None`
    /// when it does not fit the buffers.
    pub fn view(&self, tokens: usize, seqs: usize, logits: usize) -> Option<StepView> {
        if tokens > self.max_tokens || seqs > self.max_seqs || logits > self.logits_indices.len {
            return None;
        }
        Some(StepView {
            token_ids: self.token_ids.prefix(tokens),
            positions: self.positions.prefix(tokens),
            slot_mapping: self.slot_mapping.prefix(tokens),
            query_start_loc: self.query_start_loc.prefix(seqs + 1),
            seq_lens: self.seq_lens.prefix(seqs),
            block_tables: self.block_tables.prefix(seqs * self.block_table_stride),
            logits_indices: self.logits_indices.prefix(logits),
            block_table_stride: self.block_table_stride,
        })
    }
}

/// Per layer, one K and one V buffer of `num_blocks * block_size` slots of `kv_width` values,
/// of `F32` or `F16` elements (the ops follow the buffers' kind).
pub struct KvBuffers {
    pub layers: Vec<(BufRef, BufRef)>,
    pub kind: BufKind,
    pub num_blocks: usize,
    pub block_size: usize,
    pub kv_width: usize,
}

impl KvBuffers {
    /// An f32 cache.
    pub fn alloc(
        b: &mut dyn Backend,
        n_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_width: usize,
    ) -> Result<KvBuffers, RuntimeError> {
        Self::alloc_of(b, BufKind::F32, n_layers, num_blocks, block_size, kv_width)
    }

    /// A cache of `kind` elements (`F32` or `F16`).
    pub fn alloc_of(
        b: &mut dyn Backend,
        kind: BufKind,
        n_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_width: usize,
    ) -> Result<KvBuffers, RuntimeError> {
        if !matches!(kind, BufKind::F32 | BufKind::F16) {
            return Err(RuntimeError::op(
                "kv_cache",
                format!("a K/V cache holds f32 or f16 values, not {kind:?}"),
            ));
        }
        let len = num_blocks * block_size * kv_width;
        let layers = (0..n_layers)
            .map(|_| {
                Ok((
                    b.alloc_persistent(kind, len)?,
                    b.alloc_persistent(kind, len)?,
                ))
            })
            .collect::<Result<_, RuntimeError>>()?;
        Ok(KvBuffers {
            layers,
            kind,
            num_blocks,
            block_size,
            kv_width,
        })
    }

    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }
}
