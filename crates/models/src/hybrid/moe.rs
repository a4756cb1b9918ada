//! MLPs of the hybrid families (weights and routing): the dense SiLU-gated MLP and the mixture
//! of experts, run by the `moe` op (`graph::moe_op`).
//!
//! MoE: router logits -> softmax over all experts -> top-k (optionally renormalised to sum 1)
//! -> the selected experts' outputs weighted by their probabilities; Qwen3-Next adds a shared
//! expert on every token, scaled by `sigmoid(shared_gate . x)`.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops;

pub struct DenseMlp {
    pub gate: QMatrix,
    pub up: QMatrix,
    pub down: QMatrix,
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
