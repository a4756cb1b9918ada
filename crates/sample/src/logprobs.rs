//! Log-softmax helpers over one raw logits row: the log partition function and the N most likely
//! tokens, each in one linear pass (no sort, no allocation beyond the N results).
//!
//! Non-finite logits are read through [`clean`]: NaN counts as negative infinity (probability 0)
//! and positive infinity as `f32::MAX`, so the results are finite whenever one logit is.

/// A logit as the sampler reads it: NaN becomes `-inf`, `+inf` becomes `f32::MAX`.
#[inline]
pub(crate) fn clean(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        f32::MAX
    } else {
        x
    }
}

/// `ln(sum(exp(logits)))`, computed stably; `-inf` when no logit is finite.
pub(crate) fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits
        .iter()
        .map(|&x| clean(x))
        .fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return max;
    }
    let sum: f64 = logits.iter().map(|&x| (clean(x) - max).exp() as f64).sum();
    max + sum.ln() as f32
}

/// The `n` largest logits as `(token, logit)`, largest first, lower id first among equals;
/// tokens with a `-inf` (or NaN) logit are never listed.
pub(crate) fn top_n(logits: &[f32], n: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(n + 1);
    if n == 0 {
        return best;
    }
    for (i, &x) in logits.iter().enumerate() {
        let v = clean(x);
        if v == f32::NEG_INFINITY {
            continue;
        }
        if best.len() == n && best.last().is_some_and(|&(_, w)| v <= w) {
            continue;
        }
        // Ids arrive in increasing order, so an equal value goes after the ones already kept.
        let at = best.partition_point(|&(_, w)| w >= v);
        best.insert(at, (i as u32, v));
        best.truncate(n);
    }
    best
}

/// A given token's place in one raw logits row: what prompt logprobs report for each prompt
/// token (the row is the model's prediction for the token's position).
#[derive(Clone, Debug, PartialEq)]
pub struct ScoredToken {
    pub token: u32,
    /// `log_softmax(logits)[token]`, computed as [`crate::Sampler`] computes a sampled token's.
    pub logprob: f32,
    /// 1 + the number of tokens strictly more likely (vLLM's rank).
    pub rank: usize,
    /// The `top` most likely tokens with their logprobs, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Scores `token` against `logits` and lists the `top` most likely tokens. A token outside the
/// vocabulary gets logprob `-inf` and the rank after every token.
pub fn score_token(logits: &[f32], token: u32, top: usize) -> ScoredToken {
    let lse = log_sum_exp(logits);
    let own = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&x| clean(x));
    let above = logits.iter().filter(|&&x| clean(x) > own).count();
    ScoredToken {
        token,
        logprob: own - lse,
        rank: above + 1,
        top: top_n(logits, top)
            .into_iter()
            .map(|(t, l)| (t, l - lse))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_matches_log_softmax_and_counts_rank() {
        let l = [1.0f32, 3.0, 2.0, 3.0, f32::NAN];
        let lse = log_sum_exp(&l);
        let s = score_token(&l, 2, 2);
        assert_eq!(s.logprob, 2.0 - lse);
        assert_eq!(s.rank, 3, "two tokens are strictly more likely");
        assert_eq!(s.top, vec![(1, 3.0 - lse), (3, 3.0 - lse)]);
        assert_eq!(score_token(&l, 3, 0).rank, 1, "ties share the better rank");
        let outside = score_token(&l, 99, 0);
        assert_eq!(outside.logprob, f32::NEG_INFINITY);
        assert_eq!(outside.rank, 5);
    }

    #[test]
    fn lse_matches_direct_formula() {
        let l = [1.0f32, 2.0, 3.0, -1.0];
        let direct = l.iter().map(|x| (*x as f64).exp()).sum::<f64>().ln() as f32;
        assert!((log_sum_exp(&l) - direct).abs() < 1e-6);
        assert_eq!(
            log_sum_exp(&[f32::NEG_INFINITY, f32::NAN]),
            f32::NEG_INFINITY
        );
        assert!((log_sum_exp(&[1000.0, 1000.0]) - (1000.0 + 2f32.ln())).abs() < 1e-3);
    }

    #[test]
    fn top_n_sorted_with_ties_by_id() {
        let l = [0.5f32, 2.0, f32::NAN, 2.0, -1.0, 3.0, f32::NEG_INFINITY];
        assert_eq!(top_n(&l, 3), vec![(5, 3.0), (1, 2.0), (3, 2.0)]);
        assert_eq!(top_n(&l, 0), vec![]);
        assert_eq!(top_n(&l, 10).len(), 5);
    }
}
