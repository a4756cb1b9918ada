//! MLPs of the hybrid families: the dense SiLU-gated MLP and the mixture of experts.
//!
//! MoE: router logits -> softmax over all experts -> top-k (optionally renormalised to sum 1)
//! -> the selected experts' outputs weighted by their probabilities; Qwen3-Next adds a shared
//! expert on every token, scaled by `sigmoid(shared_gate . x)`.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops;
use oxllm_kernels::pool::ThreadPool;

use crate::llama::SharedActs;
use crate::ModelError;

pub struct DenseMlp {
    pub gate: QMatrix,
    pub up: QMatrix,
    pub down: QMatrix,
}

impl DenseMlp {
    /// `x`: `[rows, hidden]` -> `[rows, hidden]`.
    pub fn forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        rows: usize,
        hidden: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let mut acts = SharedActs::new(x, rows, hidden);
        let mut g = acts.project(pool, &self.gate, None)?;
        let u = acts.project(pool, &self.up, None)?;
        ops::silu_mul_in_place(&mut g, &u);
        SharedActs::new(&g, rows, self.gate.rows()).project(pool, &self.down, None)
    }
}

pub struct MoeMlp {
    /// `[n_experts, hidden]`, computed with f32 activations so routing sees exact inputs.
    pub router: QMatrix,
    pub experts: Vec<DenseMlp>,
    pub top_k: usize,
    pub norm_topk: bool,
    /// The shared expert and its `[1, hidden]` gate.
    pub shared: Option<(DenseMlp, QMatrix)>,
}

/// The `top_k` experts of one token and their weights: softmax over all logits, the largest
/// probabilities first (the lower index wins a tie), optionally renormalised.
pub fn route(logits: &[f32], top_k: usize, renorm: bool) -> Vec<(usize, f32)> {
    let mut probs = vec![0f32; logits.len()];
    let mut sel = vec![(0usize, 0f32); top_k.min(logits.len())];
    route_into(logits, renorm, &mut probs, &mut sel);
    sel
}

/// [`route`] into caller buffers (`probs`: one per expert; `sel`: `top_k` entries), allocating
/// nothing, for the captured MoE op. Picking the largest remaining probability `top_k` times
/// yields the same experts in the same order as a stable descending sort, so both give the
/// same bits.
pub fn route_into(logits: &[f32], renorm: bool, probs: &mut [f32], sel: &mut [(usize, f32)]) {
    let p = &mut probs[..logits.len()];
    p.copy_from_slice(logits);
    ops::softmax_in_place(p);
    for i in 0..sel.len() {
        let mut best: Option<usize> = None;
        for e in 0..p.len() {
            if sel[..i].iter().any(|&(s, _)| s == e) {
                continue;
            }
            // Strictly greater keeps the lower index on a tie.
            if best.is_none_or(|b| p[e].total_cmp(&p[b]).is_gt()) {
                best = Some(e);
            }
        }
        let e = best.unwrap_or(0);
        sel[i] = (e, p[e]);
    }
    if renorm {
        let sum: f32 = sel.iter().map(|s| s.1).sum();
        sel.iter_mut().for_each(|s| s.1 /= sum);
    }
}

impl MoeMlp {
    pub fn forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        rows: usize,
        hidden: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let logits = SharedActs::new(x, rows, hidden).project(pool, &self.router, None)?;
        let ne = self.experts.len();
        // Per expert: (token, weight) in token order.
        let mut assigned: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
        for t in 0..rows {
            for (e, w) in route(&logits[t * ne..(t + 1) * ne], self.top_k, self.norm_topk) {
                assigned[e].push((t, w));
            }
        }
        let mut out = vec![0f32; rows * hidden];
        for (expert, toks) in self.experts.iter().zip(&assigned) {
            if toks.is_empty() {
                continue;
            }
            let mut xs = Vec::with_capacity(toks.len() * hidden);
            for &(t, _) in toks {
                xs.extend_from_slice(&x[t * hidden..(t + 1) * hidden]);
            }
            let y = expert.forward(pool, &xs, toks.len(), hidden)?;
            for (r, &(t, w)) in toks.iter().enumerate() {
                for (o, &v) in out[t * hidden..(t + 1) * hidden]
                    .iter_mut()
                    .zip(&y[r * hidden..(r + 1) * hidden])
                {
                    *o += v * w;
                }
            }
        }
        if let Some((mlp, gate)) = &self.shared {
            let y = mlp.forward(pool, x, rows, hidden)?;
            let g = SharedActs::new(x, rows, hidden).project(pool, gate, None)?;
            for t in 0..rows {
                let s = 1.0 / (1.0 + (-g[t]).exp());
                for (o, &v) in out[t * hidden..(t + 1) * hidden]
                    .iter_mut()
                    .zip(&y[t * hidden..(t + 1) * hidden])
                {
                    *o += s * v;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn route_picks_top_k_and_renormalises() {
        let r = route(&[0.0, 2.0, 1.0, 2.0], 2, false);
        assert_eq!((r[0].0, r[1].0), (1, 3));
        assert!((r[0].1 - r[1].1).abs() < 1e-7 && r[0].1 < 0.5);
        let r = route(&[0.0, 2.0, 1.0, 3.0], 2, true);
        assert_eq!((r[0].0, r[1].0), (3, 1));
        assert!((r[0].1 + r[1].1 - 1.0).abs() < 1e-6);
    }
}
