//! The Gated DeltaNet token mixer's core (Qwen3-Next, Qwen3.5 linear attention), for every
//! sequence of a step: causal depthwise conv with the rolling conv state, SiLU, per-head L2
//! norms, the gates, the delta rule on the recurrent state, checkpoints, and the gated RMSNorm.
//!
//! Guarantees: only rows `query_start_loc[s]..query_start_loc[s + 1]` of sequence `s` are read,
//! so padded rows and padded (empty) sequences advance no state and take no checkpoint; rows of
//! no sequence come out zero. A sequence whose step starts it (`seq_lens[s]` = its rows) starts
//! from zero states. Checkpoints are written straight into their slots (a checkpoint slot is
//! never a running slot of the step). Nothing allocates under [`DeltaRule::Recurrent`], so a
//! captured plan's replay stays off the heap. Bad slots are errors, never a panic.

pub mod delta_rule;

use thiserror::Error;

use crate::ops::silu;

/// Shape of a Gated DeltaNet layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnShape {
    pub conv_kernel: usize,
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

impl GdnShape {
    pub fn key_width(&self) -> usize {
        self.n_k_heads * self.k_dim
    }
    pub fn value_width(&self) -> usize {
        self.n_v_heads * self.v_dim
    }
    /// Channels of the depthwise convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_width() + self.value_width()
    }
    /// Floats of one sequence's recurrent matrices (one `k_dim x v_dim` per value head).
    pub fn recurrent_len(&self) -> usize {
        self.n_v_heads * self.k_dim * self.v_dim
    }
    /// Floats of one sequence's conv state (the last `conv_kernel - 1` inputs).
    pub fn conv_state_len(&self) -> usize {
        self.conv_dim() * self.conv_kernel.saturating_sub(1)
    }
    /// Width of one projected row: `[q | k | v | z]`.
    pub fn proj_width(&self) -> usize {
        self.conv_dim() + self.value_width()
    }
    /// Floats of the work buffer [`gated_delta_net`] needs for a step of `n` rows.
    pub fn scratch_len(&self, n: usize) -> usize {
        let hist = self.conv_kernel.saturating_sub(1);
        let cd = self.conv_dim();
        (hist + n) * cd + n * cd + 2 * n * self.k_dim + 2 * n * self.v_dim + 2 * n + self.v_dim
    }
}

/// Which form of the delta rule runs multi-token steps (single tokens always run recurrently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaRule {
    /// Token by token: results do not depend on how a prompt is split into steps.
    Recurrent,
    /// Chunks of this many tokens (the UT-transform form).
    Chunked(usize),
}

/// A layer's own small weights.
#[derive(Clone, Copy)]
pub struct GdnWeights<'a> {
    /// `[conv_dim, conv_kernel]`.
    pub conv: &'a [f32],
    /// `-exp(A_log)` per value head.
    pub neg_a: &'a [f32],
    pub dt_bias: &'a [f32],
    /// Per-head gated RMSNorm weight (`v_dim`).
    pub norm: &'a [f32],
    pub eps: f32,
}

/// A step's inputs: the projections and where each sequence's rows and states are.
#[derive(Clone, Copy)]
pub struct GdnInputs<'a> {
    /// `[n, proj_width]`: q, k, v, z per row.
    pub proj: &'a [f32],
    /// `[n, 2 * n_v_heads]`: b, a per row.
    pub ba: &'a [f32],
    pub query_start_loc: &'a [u32],
    pub seq_lens: &'a [u32],
    pub state_slots: &'a [u32],
    /// Checkpoint entries: after the token at row `checkpoint_rows[i]`, copy its sequence's
    /// states to slot `checkpoint_slots[i]` (rows of no sequence: padding).
    pub checkpoint_rows: &'a [u32],
    pub checkpoint_slots: &'a [u32],
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum GdnError {
    #[error("sequence rows outside the step")]
    RowsOutsideStep,
    #[error("state slot {slot} outside the pool of {slots}")]
    SlotOutsidePool { slot: usize, slots: usize },
    #[error("checkpoint slot {slot} outside the pool of {slots}")]
    CheckpointOutsidePool { slot: usize, slots: usize },
    #[error("inputs, weights or buffers do not match the layer shape")]
    ShapeMismatch,
}

/// `ln(1 + e^x)`, exact to f32 above 20.
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `x * scale / ||x||` (with 1e-6 under the root).
pub fn l2_normalize(x: &mut [f32], scale: f32) {
    let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f32>() + 1e-6).sqrt();
    x.iter_mut().for_each(|a| *a *= inv * scale);
}

/// Runs the core for every sequence of the step into `out` (`[n, value_width]`), advancing
/// the states of each sequence's slot in `conv_state` / `rec_state` (all slots, slot-major).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_net(
    shape: &GdnShape,
    rule: DeltaRule,
    w: &GdnWeights<'_>,
    x: &GdnInputs<'_>,
    conv_state: &mut [f32],
    rec_state: &mut [f32],
    scratch: &mut [f32],
    out: &mut [f32],
) -> Result<(), GdnError> {
    let c = shape;
    let (kw, vw, cd) = (c.key_width(), c.value_width(), c.conv_dim());
    let (kd, vd) = (c.k_dim, c.v_dim);
    let pw = c.proj_width();
    let nv = c.n_v_heads;
    let group = nv / c.n_k_heads.max(1);
    let taps = c.conv_kernel;
    let hist = taps.saturating_sub(1);
    let (conv_len, rec_len) = (c.conv_state_len(), c.recurrent_len());
    let q_scale = 1.0 / (kd as f32).sqrt();
    let n = out.len() / vw.max(1);
    let shapes_ok = w.conv.len() == cd * taps
        && w.neg_a.len() >= nv
        && w.dt_bias.len() >= nv
        && w.norm.len() >= vd
        && x.proj.len() >= n * pw
        && x.ba.len() >= n * 2 * nv
        && x.query_start_loc.len() > x.seq_lens.len()
        && x.state_slots.len() >= x.seq_lens.len()
        && scratch.len() >= c.scratch_len(n);
    if !shapes_ok {
        return Err(GdnError::ShapeMismatch);
    }
    let num_slots = conv_state.len() / conv_len.max(1);
    // Rows of no sequence (padding) stay zero.
    out.fill(0.0);

    let (buf, rest) = scratch.split_at_mut((hist + n) * cd);
    let (mixed, rest) = rest.split_at_mut(n * cd);
    let (hq, rest) = rest.split_at_mut(n * kd);
    let (hk, rest) = rest.split_at_mut(n * kd);
    let (hv, rest) = rest.split_at_mut(n * vd);
    let (ho, rest) = rest.split_at_mut(n * vd);
    let (hg, rest) = rest.split_at_mut(n);
    let (hb, delta) = rest.split_at_mut(n);

    for s in 0..x.seq_lens.len() {
        let (t0, t1) = (
            x.query_start_loc[s] as usize,
            x.query_start_loc[s + 1] as usize,
        );
        if t1 <= t0 {
            continue;
        }
        let len = t1 - t0;
        if t1 > n {
            return Err(GdnError::RowsOutsideStep);
        }
        let slot = x.state_slots[s] as usize;
        if slot >= num_slots || (slot + 1) * rec_len > rec_state.len() {
            return Err(GdnError::SlotOutsidePool {
                slot,
                slots: num_slots,
            });
        }
        // Checkpoints inside this sequence's rows: (tokens processed, slot), ascending.
        let cps = || {
            x.checkpoint_rows
                .iter()
                .zip(x.checkpoint_slots.iter())
                .filter(move |(&r, _)| (t0..t1).contains(&(r as usize)))
                .map(move |(&r, &ck)| (r as usize + 1 - t0, ck as usize))
        };
        if let Some((_, ck)) =
            cps().find(|&(_, ck)| ck >= num_slots || (ck + 1) * rec_len > rec_state.len())
        {
            return Err(GdnError::CheckpointOutsidePool {
                slot: ck,
                slots: num_slots,
            });
        }
        let conv_range = slot * conv_len..(slot + 1) * conv_len;
        let rec_base = slot * rec_len;
        if x.seq_lens[s] as usize == len {
            // The step starts the sequence: no history.
            conv_state[conv_range.clone()].fill(0.0);
            rec_state[rec_base..rec_base + rec_len].fill(0.0);
        }
        // Causal depthwise conv over [history | new inputs], then SiLU.
        let buf = &mut buf[..(hist + len) * cd];
        buf[..hist * cd].copy_from_slice(&conv_state[conv_range.clone()]);
        for t in t0..t1 {
            buf[(hist + t - t0) * cd..][..cd].copy_from_slice(&x.proj[t * pw..t * pw + cd]);
        }
        let mixed = &mut mixed[..len * cd];
        for t in 0..len {
            let o = &mut mixed[t * cd..(t + 1) * cd];
            for (ch, o) in o.iter_mut().enumerate() {
                let wc = &w.conv[ch * taps..(ch + 1) * taps];
                let mut acc = 0f32;
                for (j, &wj) in wc.iter().enumerate() {
                    acc += wj * buf[(t + j) * cd + ch];
                }
                *o = silu(acc);
            }
        }
        conv_state[conv_range].copy_from_slice(&buf[len * cd..]);
        for (m, ck) in cps() {
            conv_state[ck * conv_len..(ck + 1) * conv_len]
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
                hk[t * kd..(t + 1) * kd].copy_from_slice(&row[kw + kh * kd..kw + (kh + 1) * kd]);
                let vo = 2 * kw + h * vd;
                hv[t * vd..(t + 1) * vd].copy_from_slice(&row[vo..vo + vd]);
                let bat = &x.ba[(t0 + t) * 2 * nv..(t0 + t + 1) * 2 * nv];
                hb[t] = 1.0 / (1.0 + (-bat[h]).exp());
                hg[t] = w.neg_a[h] * softplus(bat[nv + h] + w.dt_bias[h]);
            }
            let head = rec_base + h * kd * vd..rec_base + (h + 1) * kd * vd;
            // Segments end at the checkpoints; the recurrent form gives the same bits however
            // the rows are segmented.
            let mut a = 0;
            let cuts = cps().map(|(m, ck)| (m, Some(ck)));
            for (b, ck) in cuts.chain(std::iter::once((len, None))) {
                let st = &mut rec_state[head.clone()];
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
                    rec_state.copy_within(head.clone(), dst);
                }
                a = b;
            }
            for t in 0..len {
                let dst = &mut out[(t0 + t) * vw + h * vd..][..vd];
                dst.copy_from_slice(&ho[t * vd..(t + 1) * vd]);
            }
        }
        // Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
        for t in t0..t1 {
            let z = &x.proj[t * pw + cd..(t + 1) * pw];
            let o = &mut out[t * vw..(t + 1) * vw];
            for (oh, zh) in o.chunks_exact_mut(vd).zip(z.chunks_exact(vd)) {
                let ms = oh.iter().map(|a| a * a).sum::<f32>() / vd as f32;
                let inv = 1.0 / (ms + w.eps).sqrt();
                for ((a, &wn), &zz) in oh.iter_mut().zip(w.norm).zip(zh) {
                    *a = wn * (*a * inv) * silu(zz);
                }
            }
        }
    }
    Ok(())
}

/// Copies each restoring sequence's checkpoint slot (`restores[s]`, -1: none) into its running
/// slot (`slots[s]`) in one state buffer of `len` floats per slot.
pub fn restore_state_slots(
    state: &mut [f32],
    len: usize,
    slots: &[u32],
    restores: &[i32],
) -> Result<(), GdnError> {
    let num_slots = state.len() / len.max(1);
    for (&src, &dst) in restores.iter().zip(slots.iter()) {
        if src < 0 || src as u32 == dst {
            continue;
        }
        let (src, dst) = (src as usize, dst as usize);
        if src.max(dst) >= num_slots {
            return Err(GdnError::SlotOutsidePool {
                slot: src.max(dst),
                slots: num_slots,
            });
        }
        state.copy_within(src * len..(src + 1) * len, dst * len);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: GdnShape = GdnShape {
        conv_kernel: 3,
        n_k_heads: 1,
        n_v_heads: 2,
        k_dim: 4,
        v_dim: 3,
    };

    fn wave(n: usize, f: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * f).sin() * 0.5).collect()
    }

    struct Case {
        conv: Vec<f32>,
        neg_a: Vec<f32>,
        dt_bias: Vec<f32>,
        norm: Vec<f32>,
        proj: Vec<f32>,
        ba: Vec<f32>,
    }

    fn case(n: usize) -> Case {
        let c = SHAPE;
        Case {
            conv: wave(c.conv_dim() * c.conv_kernel, 0.7),
            neg_a: vec![-0.5, -1.0],
            dt_bias: vec![0.1, -0.2],
            norm: vec![1.0, 0.9, 1.1],
            proj: wave(n * c.proj_width(), 0.31),
            ba: wave(n * 2 * c.n_v_heads, 0.53),
        }
    }

    /// (out, conv states, recurrent states).
    type Run = (Vec<f32>, Vec<f32>, Vec<f32>);

    /// Runs `rows` rows as one sequence (starting it) in state slot `slot` of `slots`, plus
    /// `pad` padded rows of no sequence; returns (out, conv, rec).
    fn run(k: &Case, rows: usize, pad: usize, slot: u32, slots: usize) -> Result<Run, GdnError> {
        let c = SHAPE;
        let n = rows + pad;
        let w = GdnWeights {
            conv: &k.conv,
            neg_a: &k.neg_a,
            dt_bias: &k.dt_bias,
            norm: &k.norm,
            eps: 1e-6,
        };
        let qsl = [0, rows as u32];
        let seq_lens = [rows as u32];
        let x = GdnInputs {
            proj: &k.proj[..n * c.proj_width()],
            ba: &k.ba[..n * 2 * c.n_v_heads],
            query_start_loc: &qsl,
            seq_lens: &seq_lens,
            state_slots: &[slot],
            checkpoint_rows: &[],
            checkpoint_slots: &[],
        };
        let mut conv = vec![7.0; slots * c.conv_state_len()];
        let mut rec = vec![7.0; slots * c.recurrent_len()];
        let mut scratch = vec![0.0; c.scratch_len(n)];
        let mut out = vec![f32::NAN; n * c.value_width()];
        let rule = DeltaRule::Recurrent;
        gated_delta_net(
            &c,
            rule,
            &w,
            &x,
            &mut conv,
            &mut rec,
            &mut scratch,
            &mut out,
        )?;
        Ok((out, conv, rec))
    }

    #[test]
    fn padding_rows_are_zero_and_do_not_change_real_rows_or_states() {
        let k = case(7);
        let (plain, conv, rec) = run(&k, 5, 0, 1, 2).unwrap();
        let (padded, conv_p, rec_p) = run(&k, 5, 2, 1, 2).unwrap();
        let vw = SHAPE.value_width();
        assert_eq!(plain[..], padded[..5 * vw]);
        assert!(padded[5 * vw..].iter().all(|&v| v == 0.0));
        assert_eq!((conv, rec), (conv_p.clone(), rec_p.clone()));
        // Slot 0 is not the sequence's: untouched.
        assert!(conv_p[..SHAPE.conv_state_len()].iter().all(|&v| v == 7.0));
        assert!(rec_p[..SHAPE.recurrent_len()].iter().all(|&v| v == 7.0));
        assert!(plain.iter().all(|v| v.is_finite()) && plain.iter().any(|&v| v != 0.0));
    }

    #[test]
    fn a_slot_outside_the_pool_is_an_error() {
        let k = case(3);
        assert_eq!(
            run(&k, 3, 0, 2, 2).unwrap_err(),
            GdnError::SlotOutsidePool { slot: 2, slots: 2 }
        );
    }

    #[test]
    fn restores_copy_checkpoints_into_running_slots() {
        let len = 3;
        let mut state: Vec<f32> = (0..4 * len).map(|i| i as f32).collect();
        restore_state_slots(&mut state, len, &[0, 1, 3], &[2, -1, 3]).unwrap();
        assert_eq!(&state[..len], &[6.0, 7.0, 8.0]);
        assert_eq!(
            &state[len..],
            &(len..4 * len).map(|i| i as f32).collect::<Vec<_>>()[..]
        );
        assert_eq!(
            restore_state_slots(&mut state, len, &[0], &[4]).unwrap_err(),
            GdnError::SlotOutsidePool { slot: 4, slots: 4 }
        );
    }
}
