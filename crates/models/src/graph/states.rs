//! The recurrent-state pool of a hybrid model as persistent backend buffers, and the per-step
//! state inputs (running slots, restores, checkpoints) as plain input buffers.
//!
//! Per linear layer one conv buffer (`num_slots x conv_len`) and one recurrent buffer
//! (`num_slots x recurrent_len`), slot after slot. The step inputs have a
//! fixed capacity so a plan recorded for a bucket reads them at fixed addresses; unused entries
//! are inert: a padded sequence has slot `u32::MAX` and restore -1 (it has no rows, so it is
//! never looked at), a padded checkpoint has row `u32::MAX` (no sequence owns that row).

use oxllm_runtime::{Backend, BufKind, BufRef, RuntimeError};

use crate::hybrid::HybridModel;

pub struct StateBuffers {
    /// Per linear layer: (conv states, recurrent states).
    pub layers: Vec<(BufRef, BufRef)>,
    pub num_slots: usize,
    pub conv_len: usize,
    pub recurrent_len: usize,
    /// Per sequence: its running slot (`u32::MAX` for padding).
    pub state_slots: BufRef,
    /// Per sequence: the checkpoint slot restored before the step, or -1.
    pub restore_slots: BufRef,
    /// Rows after which a state is checkpointed (`u32::MAX` for unused entries).
    pub checkpoint_rows: BufRef,
    pub checkpoint_slots: BufRef,
}

/// Padding of [`StateBuffers::state_slots`] and [`StateBuffers::checkpoint_rows`].
pub const NO_ENTRY: u32 = u32::MAX;

impl StateBuffers {
    /// Buffers for `num_slots` states of `model`'s linear layers and step inputs of up to
    /// `max_seqs` sequences and `max_tokens` rows (every row may carry one checkpoint).
    pub fn alloc(
        b: &mut dyn Backend,
        model: &HybridModel,
        num_slots: usize,
        max_seqs: usize,
        max_tokens: usize,
    ) -> Result<StateBuffers, RuntimeError> {
        let n_linear = model
            .layers
            .iter()
            .filter(|l| matches!(l.mixer, crate::hybrid::Mixer::Linear(_)))
            .count();
        let (conv_len, recurrent_len) = model
            .config
            .linear
            .map_or((0, 0), |l| (l.conv_state_len(), l.recurrent_len()));
        let layers = (0..n_linear)
            .map(|_| {
                Ok((
                    b.alloc_persistent(BufKind::F32, num_slots * conv_len)?,
                    b.alloc_persistent(BufKind::F32, num_slots * recurrent_len)?,
                ))
            })
            .collect::<Result<_, RuntimeError>>()?;
        let s = StateBuffers {
            layers,
            num_slots,
            conv_len,
            recurrent_len,
            state_slots: b.alloc_persistent(BufKind::U32, max_seqs)?,
            restore_slots: b.alloc_persistent(BufKind::I32, max_seqs)?,
            checkpoint_rows: b.alloc_persistent(BufKind::U32, max_tokens)?,
            checkpoint_slots: b.alloc_persistent(BufKind::U32, max_tokens)?,
        };
        const OP: &str = "state_inputs";
        let mem = b.host_access(OP, true)?;
        mem.u32_mut(OP, s.state_slots)?.fill(NO_ENTRY);
        mem.i32_mut(OP, s.restore_slots)?.fill(-1);
        mem.u32_mut(OP, s.checkpoint_rows)?.fill(NO_ENTRY);
        Ok(s)
    }

    /// Writes one step's state inputs (`state_slots`, `restore_slots` per sequence, empty
    /// `restore_slots` meaning none; checkpoint rows and slots), padding the rest inert.
    pub fn write_inputs(
        &self,
        b: &mut dyn Backend,
        state_slots: &[u32],
        restore_slots: &[i32],
        checkpoint_rows: &[u32],
        checkpoint_slots: &[u32],
    ) -> Result<(), RuntimeError> {
        const OP: &str = "write_state_inputs";
        let too_many = state_slots.len() > self.state_slots.len
            || restore_slots.len() > self.restore_slots.len
            || checkpoint_rows.len() > self.checkpoint_rows.len
            || checkpoint_slots.len() != checkpoint_rows.len();
        if too_many {
            return Err(RuntimeError::op(
                OP,
                "more sequences or checkpoints than the state inputs hold",
            ));
        }
        let mem = b.host_access(OP, true)?;
        pad_copy(
            &mut mem.u32_mut(OP, self.state_slots)?,
            state_slots,
            NO_ENTRY,
        );
        pad_copy(&mut mem.i32_mut(OP, self.restore_slots)?, restore_slots, -1);
        pad_copy(
            &mut mem.u32_mut(OP, self.checkpoint_rows)?,
            checkpoint_rows,
            NO_ENTRY,
        );
        pad_copy(
            &mut mem.u32_mut(OP, self.checkpoint_slots)?,
            checkpoint_slots,
            0,
        );
        Ok(())
    }

    /// The state of `slot` flattened (conv states then recurrent matrices, layer by layer); a host read, so never inside a capture.
    pub fn read_slot(&self, b: &mut dyn Backend, slot: usize) -> Result<Vec<f32>, RuntimeError> {
        const OP: &str = "read_state_slot";
        if slot >= self.num_slots {
            return Err(RuntimeError::op(
                OP,
                format!("state slot {slot} outside the pool"),
            ));
        }
        let mem = b.host_access(OP, false)?;
        let mut out = Vec::with_capacity(self.layers.len() * (self.conv_len + self.recurrent_len));
        for &(conv, _) in &self.layers {
            out.extend_from_slice(&mem.f32(OP, conv)?[slot * self.conv_len..][..self.conv_len]);
        }
        for &(_, rec) in &self.layers {
            let r = &mem.f32(OP, rec)?[slot * self.recurrent_len..][..self.recurrent_len];
            out.extend_from_slice(r);
        }
        Ok(out)
    }
}

/// `dst[..src.len()] = src`, the rest `pad`.
fn pad_copy<T: Copy>(dst: &mut [T], src: &[T], pad: T) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(pad);
}
