//! The Gated DeltaNet core as one op: conv with the rolling state, SiLU, L2 norms, gates, the
//! delta rule, checkpoints and the gated RMSNorm, for every sequence of the step.
//!
//! Memory: the per-sequence work arrays live in one step-local `scratch` buffer sized for the
//! step's rows, the states in persistent backend buffers, and checkpoints are written straight
//! into their slots (a checkpoint slot is never a running slot of the step, so the order of
//! those writes cannot matter). Only rows
//! `query_start_loc[s]..query_start_loc[s + 1]` of a sequence are read: padded rows and
//! padded (empty) sequences advance no state and take no checkpoint.

use std::sync::Arc;

use oxllm_kernels::ops;
use oxllm_runtime::{BufRef, ExecCtx, Memory, Op, RuntimeError};

use crate::hybrid::gated_delta_net::{l2_normalize, softplus};
use crate::hybrid::{delta_rule, DeltaRule, GatedDeltaNet, HybridModel, Mixer};

pub(crate) struct GdnCore {
    pub model: Arc<HybridModel>,
    pub layer: usize,
    /// `[n, conv_dim + value_width]`: q, k, v, z per row.
    pub proj: BufRef,
    /// `[n, 2 * n_v_heads]`: b, a per row.
    pub ba: BufRef,
    pub query_start_loc: BufRef,
    pub seq_lens: BufRef,
    pub state_slots: BufRef,
    pub checkpoint_rows: BufRef,
    pub checkpoint_slots: BufRef,
    pub conv_state: BufRef,
    pub rec_state: BufRef,
    pub scratch: BufRef,
    /// `[n, value_width]`.
    pub out: BufRef,
}

/// Floats of [`GdnCore::scratch`] for a step of `n` rows.
pub(crate) fn scratch_len(g: &GatedDeltaNet, n: usize) -> usize {
    let c = &g.cfg;
    let hist = c.conv_kernel.saturating_sub(1);
    let cd = c.conv_dim();
    (hist + n) * cd + n * cd + 2 * n * c.k_dim + 2 * n * c.v_dim + 2 * n + c.v_dim
}

impl Op for GdnCore {
    fn name(&self) -> &'static str {
        "gated_delta_net"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [
            self.proj,
            self.ba,
            self.query_start_loc,
            self.seq_lens,
            self.state_slots,
            self.checkpoint_rows,
            self.checkpoint_slots,
            self.conv_state,
            self.rec_state,
            self.scratch,
            self.out,
        ] {
            visit(b);
        }
    }

    fn warm(&self, _mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        // A warm step runs on whatever the inputs hold: it must not touch the states (its work
        // buffers are arena buffers, no scratch to size).
        Ok(())
    }

    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let Mixer::Linear(g) = &self.model.layers[self.layer].mixer else {
            return Err(RuntimeError::op(name, "not a linear-attention layer"));
        };
        let rule = self.model.delta_rule();
        let c = &g.cfg;
        let (kw, vw, cd) = (c.key_width(), c.value_width(), c.conv_dim());
        let (kd, vd) = (c.k_dim, c.v_dim);
        let pw = cd + vw;
        let nv = c.n_v_heads;
        let group = nv / c.n_k_heads.max(1);
        let taps = c.conv_kernel;
        let hist = taps - 1;
        let (conv_len, rec_len) = (c.conv_state_len(), c.recurrent_len());
        let q_scale = 1.0 / (kd as f32).sqrt();

        let proj = mem.f32(name, self.proj)?;
        let ba = mem.f32(name, self.ba)?;
        let qsl = mem.u32(name, self.query_start_loc)?;
        let seq_lens = mem.u32(name, self.seq_lens)?;
        let slots = mem.u32(name, self.state_slots)?;
        let cp_rows = mem.u32(name, self.checkpoint_rows)?;
        let cp_slots = mem.u32(name, self.checkpoint_slots)?;
        let mut conv_all = mem.f32_mut(name, self.conv_state)?;
        let mut rec_all = mem.f32_mut(name, self.rec_state)?;
        let mut scratch = mem.f32_mut(name, self.scratch)?;
        let mut core = mem.f32_mut(name, self.out)?;
        let n = core.len() / vw.max(1);
        let num_slots = conv_all.len() / conv_len.max(1);
        // Rows of no sequence (padding) stay zero.
        core.fill(0.0);

        let (buf, rest) = scratch.split_at_mut((hist + n) * cd);
        let (mixed, rest) = rest.split_at_mut(n * cd);
        let (hq, rest) = rest.split_at_mut(n * kd);
        let (hk, rest) = rest.split_at_mut(n * kd);
        let (hv, rest) = rest.split_at_mut(n * vd);
        let (ho, rest) = rest.split_at_mut(n * vd);
        let (hg, rest) = rest.split_at_mut(n);
        let (hb, delta) = rest.split_at_mut(n);

        for s in 0..seq_lens.len() {
            let (t0, t1) = (qsl[s] as usize, qsl[s + 1] as usize);
            if t1 <= t0 {
                continue;
            }
            let len = t1 - t0;
            if t1 > n {
                return Err(RuntimeError::op(name, "sequence rows outside the step"));
            }
            let slot = slots[s] as usize;
            if slot >= num_slots {
                return Err(RuntimeError::op(
                    name,
                    format!("state slot {slot} outside the pool of {num_slots}"),
                ));
            }
            // Checkpoints inside this sequence's rows: (tokens processed, slot), ascending.
            let cps = || {
                cp_rows
                    .iter()
                    .zip(cp_slots.iter())
                    .filter(move |(&r, _)| (t0..t1).contains(&(r as usize)))
                    .map(move |(&r, &ck)| (r as usize + 1 - t0, ck as usize))
            };
            if let Some((_, ck)) = cps().find(|&(_, ck)| ck >= num_slots) {
                return Err(RuntimeError::op(
                    name,
                    format!("checkpoint slot {ck} outside the pool of {num_slots}"),
                ));
            }
            let conv_range = slot * conv_len..(slot + 1) * conv_len;
            let rec_base = slot * rec_len;
            if seq_lens[s] as usize == len {
                // The step starts the sequence: no history.
                conv_all[conv_range.clone()].fill(0.0);
                rec_all[rec_base..rec_base + rec_len].fill(0.0);
            }
            // Causal depthwise conv over [history | new inputs], then SiLU.
            let buf = &mut buf[..(hist + len) * cd];
            buf[..hist * cd].copy_from_slice(&conv_all[conv_range.clone()]);
            for t in t0..t1 {
                buf[(hist + t - t0) * cd..][..cd].copy_from_slice(&proj[t * pw..t * pw + cd]);
            }
            let mixed = &mut mixed[..len * cd];
            for t in 0..len {
                let o = &mut mixed[t * cd..(t + 1) * cd];
                for (ch, o) in o.iter_mut().enumerate() {
                    let w = &g.conv[ch * taps..(ch + 1) * taps];
                    let mut acc = 0f32;
                    for (j, &wj) in w.iter().enumerate() {
                        acc += wj * buf[(t + j) * cd + ch];
                    }
                    *o = ops::silu(acc);
                }
            }
            conv_all[conv_range].copy_from_slice(&buf[len * cd..]);
            for (m, ck) in cps() {
                conv_all[ck * conv_len..(ck + 1) * conv_len]
                    .copy_from_slice(&buf[m * cd..(m + hist) * cd]);
            }
            for t in 0..len {
                let row = &mut mixed[t * cd..(t + 1) * cd];
                let (q, rest) = row.split_at_mut(kw);
                q.chunks_exact_mut(kd)
                    .for_each(|h| l2_normalize(h, q_scale));
                rest[..kw]
                    .chunks_exact_mut(kd)
                    .for_each(|h| l2_normalize(h, 1.0));
            }
            // Per value head: gather its inputs and run the delta rule on its state.
            for h in 0..nv {
                let kh = h / group;
                for t in 0..len {
                    let row = &mixed[t * cd..(t + 1) * cd];
                    hq[t * kd..(t + 1) * kd].copy_from_slice(&row[kh * kd..(kh + 1) * kd]);
                    hk[t * kd..(t + 1) * kd]
                        .copy_from_slice(&row[kw + kh * kd..kw + (kh + 1) * kd]);
                    let vo = 2 * kw + h * vd;
                    hv[t * vd..(t + 1) * vd].copy_from_slice(&row[vo..vo + vd]);
                    let bat = &ba[(t0 + t) * 2 * nv..(t0 + t + 1) * 2 * nv];
                    hb[t] = 1.0 / (1.0 + (-bat[h]).exp());
                    hg[t] = g.neg_a[h] * softplus(bat[nv + h] + g.dt_bias[h]);
                }
                let head = rec_base + h * kd * vd..rec_base + (h + 1) * kd * vd;
                // Segments end at the checkpoints; the recurrent form gives the same bits
                // however the rows are segmented.
                let mut a = 0;
                let cuts = cps().map(|(m, ck)| (m, Some(ck)));
                for (b, ck) in cuts.chain(std::iter::once((len, None))) {
                    let st = &mut rec_all[head.clone()];
                    let (q, k) = (&hq[a * kd..b * kd], &hk[a * kd..b * kd]);
                    let (v, o) = (&hv[a * vd..b * vd], &mut ho[a * vd..b * vd]);
                    let (gg, beta) = (&hg[a..b], &hb[a..b]);
                    match rule {
                        DeltaRule::Chunked(size) if b - a > 1 => {
                            delta_rule::chunked(q, k, v, gg, beta, kd, vd, st, o, size)
                        }
                        _ => delta_rule::recurrent_with(q, k, v, gg, beta, kd, vd, st, o, delta),
                    }
                    if let Some(ck) = ck {
                        let dst = ck * rec_len + h * kd * vd;
                        rec_all.copy_within(head.clone(), dst);
                    }
                    a = b;
                }
                for t in 0..len {
                    let dst = &mut core[(t0 + t) * vw + h * vd..][..vd];
                    dst.copy_from_slice(&ho[t * vd..(t + 1) * vd]);
                }
            }
            // Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
            for t in t0..t1 {
                let z = &proj[t * pw + cd..(t + 1) * pw];
                let o = &mut core[t * vw..(t + 1) * vw];
                for (oh, zh) in o.chunks_exact_mut(vd).zip(z.chunks_exact(vd)) {
                    let ms = oh.iter().map(|a| a * a).sum::<f32>() / vd as f32;
                    let inv = 1.0 / (ms + g.eps).sqrt();
                    for ((a, &w), &zz) in oh.iter_mut().zip(&g.norm).zip(zh) {
                        *a = w * (*a * inv) * ops::silu(zz);
                    }
                }
            }
        }
        Ok(())
    }
}
