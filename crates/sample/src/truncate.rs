//! Truncation of a candidate list `(token, value)`: top-k, top-p (nucleus) and min-p, and the
//! final weighted draw.
//!
//! Ordering is "larger value first, lower token id first among equal values", so every filter is
//! deterministic and ties are broken the same way as greedy's argmax. Nothing here sorts the whole
//! vocabulary: top-k is a linear-time selection and top-p a weighted quickselect.

use std::cmp::Ordering;

/// A candidate token and its logit or (unnormalised) probability.
pub(crate) type Cand = (u32, f32);

/// Larger value first; lower id first among equal values.
pub(crate) fn desc(a: &Cand, b: &Cand) -> Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Keeps the `k` best candidates (in no particular order); `k == 0` or `k >= len` keeps all.
pub(crate) fn top_k(cands: &mut Vec<Cand>, k: usize) {
    if k == 0 || k >= cands.len() {
        return;
    }
    cands.select_nth_unstable_by(k - 1, desc);
    cands.truncate(k);
}

/// Below this many candidates, [`top_p`] finishes with a sort.
const TOP_P_SORT_BELOW: usize = 64;

/// Keeps the smallest set of most probable candidates whose mass is at least `p` of the total.
/// Values must be non-negative weights (unnormalised probabilities). `p >= 1` keeps all. A mass
/// within one part in a million below `p` counts as reaching it.
///
/// A weighted quickselect: split around a median, keep the upper half whole when its mass falls
/// short of the target, else recurse into it; expected linear time, no full sort. The kept set is
/// exactly the prefix a full sort by [`desc`] would keep.
pub(crate) fn top_p(cands: &mut Vec<Cand>, p: f32) {
    let total: f64 = cands.iter().map(|c| c.1 as f64).sum();
    top_p_of(cands, p, total);
}

/// [`top_p`] against a mass `total` taken over a larger set than `cands` (which must hold
/// every candidate the full set's nucleus can contain, e.g. all weights above a cut whose mass
/// alone reaches `p * total`).
pub(crate) fn top_p_of(cands: &mut Vec<Cand>, p: f32, total: f64) {
    let len = cands.len();
    if p >= 1.0 || len <= 1 {
        return;
    }
    // A relative slack of 1e-6 absorbs f32 rounding, so a set whose mass is p on paper counts.
    let target = p as f64 * total * (1.0 - 1e-6);
    // Invariant: cands[..lo] are kept (mass `before`), the cut lies in cands[lo..hi], and
    // everything in cands[lo..hi] ranks above everything in cands[hi..].
    let (mut lo, mut hi, mut before) = (0usize, len, 0.0f64);
    while hi - lo > TOP_P_SORT_BELOW {
        let mid = lo + (hi - lo) / 2;
        cands[lo..hi].select_nth_unstable_by(mid - lo, desc);
        let upper: f64 = cands[lo..=mid].iter().map(|c| c.1 as f64).sum();
        if before + upper >= target {
            hi = mid + 1;
        } else {
            before += upper;
            lo = mid + 1;
        }
    }
    cands[lo..hi].sort_unstable_by(desc);
    let mut acc = before;
    for i in lo..hi {
        acc += cands[i].1 as f64;
        if acc >= target {
            cands.truncate(i + 1);
            return;
        }
    }
    // Rounding left the mass a hair below the target: keep up to `hi`.
    cands.truncate(hi);
}

/// Drops candidates whose weight is below `min_p` times the largest weight. `min_p <= 0` keeps
/// all; the largest candidate is always kept.
pub(crate) fn min_p(cands: &mut Vec<Cand>, min_p: f32) {
    if min_p <= 0.0 || cands.is_empty() {
        return;
    }
    let max = cands.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let threshold = min_p * max;
    cands.retain(|c| c.1 >= threshold);
}

/// Picks a candidate with probability proportional to its weight, given `u` uniform in `[0, 1)`.
/// Returns `None` only for an empty list.
pub(crate) fn pick(cands: &[Cand], u: f64) -> Option<Cand> {
    let total: f64 = cands.iter().map(|c| c.1 as f64).sum();
    let r = u * total;
    let mut acc = 0.0f64;
    for &c in cands {
        acc += c.1 as f64;
        if r < acc {
            return Some(c);
        }
    }
    // `r` can reach the total through rounding: take the last candidate with positive weight.
    cands
        .iter()
        .rev()
        .find(|c| c.1 > 0.0)
        .or(cands.last())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: &[Cand]) -> Vec<u32> {
        let mut v: Vec<u32> = c.iter().map(|c| c.0).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn top_k_keeps_best_with_low_id_ties() {
        let mut c = vec![(0, 1.0), (1, 3.0), (2, 3.0), (3, 2.0), (4, 3.0)];
        top_k(&mut c, 2);
        assert_eq!(ids(&c), vec![1, 2]);
    }

    #[test]
    fn top_p_smallest_set_reaching_mass() {
        // probs 0.5, 0.3, 0.15, 0.05
        let base = vec![(0, 0.15), (1, 0.5), (2, 0.05), (3, 0.3)];
        for (p, want) in [
            (0.5, vec![1]),
            (0.51, vec![1, 3]),
            (0.8, vec![1, 3]),
            (0.81, vec![0, 1, 3]),
            (0.95, vec![0, 1, 3]),
            (0.96, vec![0, 1, 2, 3]),
            (0.01, vec![1]),
        ] {
            let mut c = base.clone();
            top_p(&mut c, p);
            assert_eq!(ids(&c), want, "p = {p}");
        }
    }

    #[test]
    fn top_p_matches_full_sort() {
        // 3000 equal weights: p = 0.5 needs 1500 of them, the lowest ids.
        let mut c: Vec<Cand> = (0..3000).rev().map(|i| (i, 1.0)).collect();
        top_p(&mut c, 0.5);
        assert_eq!(ids(&c), (0..1500).collect::<Vec<u32>>());
        // Against a full sort on many distinct weights.
        let mut x = 1u64;
        let base: Vec<Cand> = (0..5000)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (i, ((x >> 44) as f32 / 1e6).powi(4))
            })
            .collect();
        for p in [0.01f32, 0.3, 0.5, 0.9, 0.99, 0.999] {
            let mut sorted = base.clone();
            sorted.sort_by(desc);
            let total: f64 = sorted.iter().map(|c| c.1 as f64).sum();
            let mut acc = 0.0;
            let n = sorted
                .iter()
                .position(|c| {
                    acc += c.1 as f64;
                    acc >= p as f64 * total * (1.0 - 1e-6)
                })
                .map_or(sorted.len(), |i| i + 1);
            let mut c = base.clone();
            top_p(&mut c, p);
            assert_eq!(ids(&c), ids(&sorted[..n]), "p = {p}");
        }
    }

    #[test]
    fn min_p_relative_to_max() {
        let mut c = vec![(0, 0.5), (1, 0.2), (2, 0.1), (3, 0.09)];
        min_p(&mut c, 0.2); // threshold 0.1
        assert_eq!(ids(&c), vec![0, 1, 2]);
    }

    #[test]
    fn pick_walks_cumulative_mass() {
        let c = vec![(7, 1.0), (8, 0.0), (9, 3.0)];
        assert_eq!(pick(&c, 0.0).map(|c| c.0), Some(7));
        assert_eq!(pick(&c, 0.2499).map(|c| c.0), Some(7));
        assert_eq!(pick(&c, 0.25).map(|c| c.0), Some(9));
        assert_eq!(pick(&c, 0.999_999).map(|c| c.0), Some(9));
        assert_eq!(pick(&[], 0.5), None);
    }
}
