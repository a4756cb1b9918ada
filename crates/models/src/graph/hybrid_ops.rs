//! The small ops of the hybrid forward: state restores, embedding, row norms, the gated
//! attention's query/gate split with q/k norms and partial rotary, the sigmoid output gate, and
//! the final norm at the logits rows.

use std::sync::Arc;

use oxllm_kernels::ops;
use oxllm_runtime::{BufRef, ExecCtx, Memory, Op, RuntimeError};

use crate::hybrid::{HybridModel, Mixer};

/// Copies each restoring sequence's checkpoint slot into its running slot, in every linear
/// layer, before any layer runs (so a checkpoint may be read and overwritten in one step).
/// Padded sequences carry restore -1 and are skipped.
pub(crate) struct RestoreStates {
    pub state_slots: BufRef,
    pub restore_slots: BufRef,
    pub layers: Vec<(BufRef, BufRef)>,
    pub conv_len: usize,
    pub rec_len: usize,
}

impl Op for RestoreStates {
    fn name(&self) -> &'static str {
        "restore_states"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.state_slots, self.restore_slots] {
            visit(b);
        }
        for &(conv, rec) in &self.layers {
            visit(conv);
            visit(rec);
        }
    }
    fn warm(&self, _mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        // A warm step runs on whatever the inputs hold: it must not touch the states.
        Ok(())
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let slots = mem.u32(name, self.state_slots)?;
        let restores = mem.i32(name, self.restore_slots)?;
        for (&src, &dst) in restores.iter().zip(slots.iter()) {
            if src < 0 || src as u32 == dst {
                continue;
            }
            let (src, dst) = (src as usize, dst as usize);
            for &(conv, rec) in &self.layers {
                for (buf, len) in [(conv, self.conv_len), (rec, self.rec_len)] {
                    let mut b = mem.f32_mut(name, buf)?;
                    if (src.max(dst) + 1) * len > b.len() {
                        return Err(RuntimeError::op(name, "state slot outside the pool"));
                    }
                    b.copy_within(src * len..(src + 1) * len, dst * len);
                }
            }
        }
        Ok(())
    }
}

/// The gated attention's query side: splits `[query | gate]` per head when the layer is gated,
/// then per-head q/k RMSNorm and rotary on the first `rotary_dim` dims at each row's position.
pub(crate) struct AttnPrep {
    pub model: Arc<HybridModel>,
    pub layer: usize,
    /// The query (normalised and rotated in place); when `split` is set, written from it first.
    pub q: BufRef,
    /// The projection `[n, heads * 2 * head_dim]` and the gate output `[n, heads * head_dim]`.
    pub split: Option<(BufRef, BufRef)>,
    pub k: BufRef,
    pub positions: BufRef,
}

impl Op for AttnPrep {
    fn name(&self) -> &'static str {
        "attn_prep"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.q, self.k, self.positions] {
            visit(b);
        }
        if let Some((qg, gate)) = self.split {
            visit(qg);
            visit(gate);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let m = &self.model;
        let c = &m.config.base;
        let Mixer::Full(a) = &m.layers[self.layer].mixer else {
            return Err(RuntimeError::op(name, "not a full-attention layer"));
        };
        let hd = c.head_dim;
        let mut q = mem.f32_mut(name, self.q)?;
        if let Some((qg, gate)) = self.split {
            let qg = mem.f32(name, qg)?;
            let mut gate = mem.f32_mut(name, gate)?;
            for (src, (dq, dg)) in qg
                .chunks_exact(2 * hd)
                .zip(q.chunks_exact_mut(hd).zip(gate.chunks_exact_mut(hd)))
            {
                dq.copy_from_slice(&src[..hd]);
                dg.copy_from_slice(&src[hd..]);
            }
        }
        let mut k = mem.f32_mut(name, self.k)?;
        let positions = mem.u32(name, self.positions)?;
        ops::rms_norm_rows_in_place(&mut q, &a.q_norm, c.rms_eps);
        ops::rms_norm_rows_in_place(&mut k, &a.k_norm, c.rms_eps);
        let (qw, kvw) = (c.q_width(), c.kv_width());
        for (t, &pos) in positions.iter().enumerate() {
            m.rope.apply(&mut q[t * qw..(t + 1) * qw], pos as usize);
            m.rope.apply(&mut k[t * kvw..(t + 1) * kvw], pos as usize);
        }
        Ok(())
    }
}

/// `attn *= sigmoid(gate)`.
pub(crate) struct SigmoidGate {
    pub attn: BufRef,
    pub gate: BufRef,
}

impl Op for SigmoidGate {
    fn name(&self) -> &'static str {
        "sigmoid_gate"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.attn, self.gate] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let gate = mem.f32(self.name(), self.gate)?;
        let mut attn = mem.f32_mut(self.name(), self.attn)?;
        for (a, &g) in attn.iter_mut().zip(gate.iter()) {
            *a *= 1.0 / (1.0 + (-g).exp());
        }
        Ok(())
    }
}
