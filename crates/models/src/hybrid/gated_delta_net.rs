//! The Gated DeltaNet token mixer (linear attention with a per-sequence recurrent state).
//!
//! Per token: one projection gives `[q | k | v | z]` (the loader reorders Qwen3-Next's fused,
//! per-key-head-grouped `in_proj_qkvz` into this layout; Qwen3.5's separate `in_proj_qkv` and
//! `in_proj_z` are stacked), another `[b | a]`. `q k v` pass a causal depthwise conv1d (with the
//! sequence's rolling conv state) and SiLU; q and k are L2-normalised per head; each value head
//! runs the gated delta rule with `g = -exp(A_log) * softplus(a + dt_bias)` and
//! `beta = sigmoid(b)` on the key head it shares with `n_v / n_k - 1` others; the output is
//! RMS-normalised per head, scaled by `silu(z)` and projected back.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops;
use oxllm_kernels::pool::ThreadPool;

use super::config::LinearAttnConfig;
use super::delta_rule;
use super::state_io::checkpoints_in;
use crate::llama::SharedActs;
use crate::{ForwardBatch, ModelError, RecurrentStatePool};

/// Which form of the delta rule runs multi-token steps (single tokens always run recurrently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaRule {
    /// Token by token: results do not depend on how a prompt is split into steps.
    Recurrent,
    /// Chunks of this many tokens (the UT-transform form).
    Chunked(usize),
}

pub struct GatedDeltaNet {
    pub cfg: LinearAttnConfig,
    /// `[conv_dim + value_width, hidden]`: rows q, k, v, z.
    pub in_proj: QMatrix,
    /// `[2 * n_v_heads, hidden]`: rows b, a.
    pub in_proj_ba: QMatrix,
    /// `[conv_dim, kernel]`.
    pub conv: Vec<f32>,
    /// `-exp(A_log)` per value head.
    pub neg_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// Per-head gated RMSNorm weight (`v_dim`).
    pub norm: Vec<f32>,
    pub out_proj: QMatrix,
    pub eps: f32,
}

/// `ln(1 + e^x)`, exact to f32 above 20.
pub(crate) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `x * scale / ||x||` (with 1e-6 under the root).
pub(crate) fn l2_normalize(x: &mut [f32], scale: f32) {
    let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f32>() + 1e-6).sqrt();
    x.iter_mut().for_each(|a| *a *= inv * scale);
}

impl GatedDeltaNet {
    /// Mixes `x` (`[n, hidden]`, already normalised) for every sequence of `batch`, reading and
    /// updating their states in linear layer `layer` of `states`. Returns `[n, hidden]`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        hidden: usize,
        batch: &ForwardBatch<'_>,
        states: &mut RecurrentStatePool,
        layer: usize,
        rule: DeltaRule,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.cfg;
        let n = batch.token_ids.len();
        let (kw, vw, cd) = (c.key_width(), c.value_width(), c.conv_dim());
        let mut acts = SharedActs::new(x, n, hidden);
        let proj = acts.project(pool, &self.in_proj, None)?;
        let ba = acts.project(pool, &self.in_proj_ba, None)?;
        let pw = cd + vw;
        let nv = c.n_v_heads;
        let group = nv / c.n_k_heads;
        let taps = c.conv_kernel;
        let hist = taps - 1;
        let q_scale = 1.0 / (c.k_dim as f32).sqrt();
        let mut core = vec![0f32; n * vw];
        let qsl = batch.attn.query_start_loc;
        for s in 0..batch.attn.seq_lens.len() {
            let (t0, t1) = (qsl[s] as usize, qsl[s + 1] as usize);
            let len = t1 - t0;
            if len == 0 {
                continue;
            }
            let slot = *batch.state_slots.get(s).ok_or_else(|| {
                ModelError::InvalidBatch("hybrid models need a state slot per sequence".into())
            })? as usize;
            if slot >= states.num_slots() {
                return Err(ModelError::InvalidBatch(format!(
                    "state slot {slot} outside the pool of {}",
                    states.num_slots()
                )));
            }
            let (conv_state, rec) = states.get_mut(layer, slot);
            if batch.attn.seq_lens[s] as usize == len {
                // The step starts the sequence: no history.
                conv_state.fill(0.0);
                rec.fill(0.0);
            }
            // Causal depthwise conv over [history | new inputs], then SiLU.
            let mut buf = Vec::with_capacity((hist + len) * cd);
            buf.extend_from_slice(conv_state);
            for t in t0..t1 {
                buf.extend_from_slice(&proj[t * pw..t * pw + cd]);
            }
            let mut mixed = vec![0f32; len * cd];
            for t in 0..len {
                let o = &mut mixed[t * cd..(t + 1) * cd];
                for (ch, o) in o.iter_mut().enumerate() {
                    let w = &self.conv[ch * taps..(ch + 1) * taps];
                    let mut acc = 0f32;
                    for (j, &wj) in w.iter().enumerate() {
                        acc += wj * buf[(t + j) * cd + ch];
                    }
                    *o = ops::silu(acc);
                }
            }
            conv_state.copy_from_slice(&buf[len * cd..]);
            // Checkpoints inside the chunk: (conv state, recurrent state) after `m` tokens.
            let cps = checkpoints_in(batch, t0, t1);
            let mut snaps: Vec<(Vec<f32>, Vec<f32>)> = cps
                .iter()
                .map(|&(m, _)| (buf[m * cd..(m + hist) * cd].to_vec(), vec![0f32; rec.len()]))
                .collect();
            let mut cuts: Vec<usize> = cps.iter().map(|&(m, _)| m).collect();
            cuts.push(len);
            for t in 0..len {
                let row = &mut mixed[t * cd..(t + 1) * cd];
                let (q, rest) = row.split_at_mut(kw);
                q.chunks_exact_mut(c.k_dim)
                    .for_each(|h| l2_normalize(h, q_scale));
                rest[..kw]
                    .chunks_exact_mut(c.k_dim)
                    .for_each(|h| l2_normalize(h, 1.0));
            }
            // Per value head: gather its inputs and run the delta rule on its state.
            let (mut hq, mut hk) = (vec![0f32; len * c.k_dim], vec![0f32; len * c.k_dim]);
            let (mut hv, mut ho) = (vec![0f32; len * c.v_dim], vec![0f32; len * c.v_dim]);
            let (mut hg, mut hb) = (vec![0f32; len], vec![0f32; len]);
            for h in 0..nv {
                let kh = h / group;
                for t in 0..len {
                    let row = &mixed[t * cd..(t + 1) * cd];
                    let kd = c.k_dim;
                    hq[t * kd..(t + 1) * kd].copy_from_slice(&row[kh * kd..(kh + 1) * kd]);
                    hk[t * kd..(t + 1) * kd]
                        .copy_from_slice(&row[kw + kh * kd..kw + (kh + 1) * kd]);
                    let vo = 2 * kw + h * c.v_dim;
                    hv[t * c.v_dim..(t + 1) * c.v_dim].copy_from_slice(&row[vo..vo + c.v_dim]);
                    let bat = &ba[(t0 + t) * 2 * nv..(t0 + t + 1) * 2 * nv];
                    hb[t] = 1.0 / (1.0 + (-bat[h]).exp());
                    hg[t] = self.neg_a[h] * softplus(bat[nv + h] + self.dt_bias[h]);
                }
                let head = h * c.k_dim * c.v_dim..(h + 1) * c.k_dim * c.v_dim;
                let st = &mut rec[head.clone()];
                // Segments end at the checkpoints; the recurrent form gives the same bits
                // however the rows are segmented.
                let (kd, vd) = (c.k_dim, c.v_dim);
                let mut a = 0;
                for (i, &b) in cuts.iter().enumerate() {
                    let (q, k) = (&hq[a * kd..b * kd], &hk[a * kd..b * kd]);
                    let (v, o) = (&hv[a * vd..b * vd], &mut ho[a * vd..b * vd]);
                    let (g, beta) = (&hg[a..b], &hb[a..b]);
                    match rule {
                        DeltaRule::Chunked(size) if b - a > 1 => {
                            delta_rule::chunked(q, k, v, g, beta, kd, vd, st, o, size)
                        }
                        _ => delta_rule::recurrent(q, k, v, g, beta, kd, vd, st, o),
                    }
                    if let Some(snap) = snaps.get_mut(i) {
                        snap.1[head.clone()].copy_from_slice(st);
                    }
                    a = b;
                }
                for t in 0..len {
                    let dst = &mut core[(t0 + t) * vw + h * c.v_dim..][..c.v_dim];
                    dst.copy_from_slice(&ho[t * c.v_dim..(t + 1) * c.v_dim]);
                }
            }
            for (&(_, ck), (conv, recur)) in cps.iter().zip(&snaps) {
                let (c_dst, r_dst) = states.get_mut(layer, ck);
                c_dst.copy_from_slice(conv);
                r_dst.copy_from_slice(recur);
            }
            // Gated RMSNorm per value head: rmsnorm(o) * w * silu(z).
            for t in t0..t1 {
                let z = &proj[t * pw + cd..(t + 1) * pw];
                let o = &mut core[t * vw..(t + 1) * vw];
                for (oh, zh) in o.chunks_exact_mut(c.v_dim).zip(z.chunks_exact(c.v_dim)) {
                    let ms = oh.iter().map(|a| a * a).sum::<f32>() / c.v_dim as f32;
                    let inv = 1.0 / (ms + self.eps).sqrt();
                    for ((a, &w), &zz) in oh.iter_mut().zip(&self.norm).zip(zh) {
                        *a = w * (*a * inv) * ops::silu(zz);
                    }
                }
            }
        }
        SharedActs::new(&core, n, vw).project(pool, &self.out_proj, None)
    }
}
