//! Per-sequence recurrent state of the linear-attention (Gated DeltaNet) layers.
//!
//! A hybrid model's sequence owns one *state slot*: for every linear layer, the conv state (the
//! last `kernel - 1` conv inputs) and the recurrent matrices (one `k_dim x v_dim` per value head).
//! The pool is fixed-size like the block pool; the caller (session, scheduler) assigns slots and
//! passes them in `ForwardBatch::state_slots`. A sequence whose step starts at position 0 starts
//! from a zero state, so a recycled slot needs no explicit reset.

/// Fixed-size store of recurrent states, `num_slots` sequences x `n_layers` linear layers.
#[derive(Clone, Debug)]
pub struct RecurrentStatePool {
    num_slots: usize,
    n_layers: usize,
    conv_len: usize,
    recurrent_len: usize,
    conv: Vec<f32>,
    recurrent: Vec<f32>,
}

impl RecurrentStatePool {
    /// `conv_len` and `recurrent_len`: floats per (layer, slot) of each state.
    pub fn new(
        n_layers: usize,
        num_slots: usize,
        conv_len: usize,
        recurrent_len: usize,
    ) -> RecurrentStatePool {
        RecurrentStatePool {
            num_slots,
            n_layers,
            conv_len,
            recurrent_len,
            conv: vec![0.0; n_layers * num_slots * conv_len],
            recurrent: vec![0.0; n_layers * num_slots * recurrent_len],
        }
    }

    pub fn num_slots(&self) -> usize {
        self.num_slots
    }
    pub fn n_layers(&self) -> usize {
        self.n_layers
    }

    /// Bytes one slot occupies across all linear layers.
    pub fn bytes_per_slot(&self) -> usize {
        self.n_layers * (self.conv_len + self.recurrent_len) * std::mem::size_of::<f32>()
    }

    /// The conv and recurrent state of `slot` in linear layer `layer`.
    pub fn get_mut(&mut self, layer: usize, slot: usize) -> (&mut [f32], &mut [f32]) {
        let c = (layer * self.num_slots + slot) * self.conv_len;
        let r = (layer * self.num_slots + slot) * self.recurrent_len;
        (
            &mut self.conv[c..c + self.conv_len],
            &mut self.recurrent[r..r + self.recurrent_len],
        )
    }

    /// Zeroes `slot` in every layer.
    pub fn reset(&mut self, slot: usize) {
        for l in 0..self.n_layers {
            let (c, r) = self.get_mut(l, slot);
            c.fill(0.0);
            r.fill(0.0);
        }
    }

    /// Copies the whole state of `src` into `dst` (prefix-cache checkpoints, forks).
    pub fn copy_slot(&mut self, src: usize, dst: usize) {
        if src == dst {
            return;
        }
        for l in 0..self.n_layers {
            let (cs, rs) = (
                (l * self.num_slots + src) * self.conv_len,
                (l * self.num_slots + src) * self.recurrent_len,
            );
            let (cd, rd) = (
                (l * self.num_slots + dst) * self.conv_len,
                (l * self.num_slots + dst) * self.recurrent_len,
            );
            self.conv.copy_within(cs..cs + self.conv_len, cd);
            self.recurrent.copy_within(rs..rs + self.recurrent_len, rd);
        }
    }

    /// The state of `slot` flattened (conv states then recurrent matrices, layer by layer).
    pub fn snapshot(&self, slot: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.n_layers * (self.conv_len + self.recurrent_len));
        for l in 0..self.n_layers {
            let c = (l * self.num_slots + slot) * self.conv_len;
            out.extend_from_slice(&self.conv[c..c + self.conv_len]);
        }
        for l in 0..self.n_layers {
            let r = (l * self.num_slots + slot) * self.recurrent_len;
            out.extend_from_slice(&self.recurrent[r..r + self.recurrent_len]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_disjoint_and_copy_reset_work() {
        let mut p = RecurrentStatePool::new(2, 3, 4, 6);
        p.get_mut(1, 2).1.fill(5.0);
        p.get_mut(0, 2).0.fill(1.0);
        assert!(p.snapshot(1).iter().all(|&x| x == 0.0));
        p.copy_slot(2, 0);
        assert_eq!(p.snapshot(0), p.snapshot(2));
        p.reset(2);
        assert!(p.snapshot(2).iter().all(|&x| x == 0.0));
        assert_eq!(p.bytes_per_slot(), 2 * 10 * 4);
    }
}
