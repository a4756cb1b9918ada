//! Mixture-of-experts routing: softmax over a token's router logits, the `top_k` largest
//! probabilities (the lower expert index wins a tie), optionally renormalised to sum 1.
//!
//! Guarantees: [`route_into`] allocates nothing (a captured plan's MoE op runs it) and picks the
//! same experts in the same order, with the same bits, as a stable descending sort would.

use crate::ops::softmax_in_place;

/// The `top_k` experts of one token and their weights (see the module docs).
pub fn route(logits: &[f32], top_k: usize, renorm: bool) -> Vec<(usize, f32)> {
    let mut probs = vec![0f32; logits.len()];
    let mut sel = vec![(0usize, 0f32); top_k.min(logits.len())];
    route_into(logits, renorm, &mut probs, &mut sel);
    sel
}

/// [`route`] into caller buffers (`probs`: one per expert; `sel`: `top_k` entries). Picking the
/// largest remaining probability `top_k` times yields a stable descending sort's order.
pub fn route_into(logits: &[f32], renorm: bool, probs: &mut [f32], sel: &mut [(usize, f32)]) {
    let p = &mut probs[..logits.len()];
    p.copy_from_slice(logits);
    softmax_in_place(p);
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
    use super::*;

    #[test]
    fn route_picks_top_k_and_renormalises() {
        let r = route(&[0.0, 2.0, 1.0, 2.0], 2, false);
        assert_eq!((r[0].0, r[1].0), (1, 3));
        assert!((r[0].1 - r[1].1).abs() < 1e-7 && r[0].1 < 0.5);
        let r = route(&[0.0, 2.0, 1.0, 3.0], 2, true);
        assert_eq!((r[0].0, r[1].0), (3, 1));
        assert!((r[0].1 + r[1].1 - 1.0).abs() < 1e-6);
    }

    /// Against the definition: a stable sort of the softmax probabilities, descending.
    #[test]
    fn route_equals_a_stable_descending_sort() {
        let logits: Vec<f32> = (0..23).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
        let mut probs = logits.clone();
        softmax_in_place(&mut probs);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        for k in [1, 2, 5, 23] {
            let want: Vec<(usize, f32)> = order[..k].iter().map(|&e| (e, probs[e])).collect();
            assert_eq!(route(&logits, k, false), want, "top-{k}");
        }
    }
}
