//! [`Sampler`]: turns one logits row of one request into its next token.
//!
//! Pipeline, in order: penalties (in place) -> greedy argmax if the temperature is (near) 0 ->
//! temperature -> top-k -> top-p -> min-p -> a draw from the renormalised distribution.
//!
//! Guarantees:
//! - Every call to [`Sampler::sample`] consumes exactly one draw of the request's own RNG, greedy
//!   or not, so token `i` always uses draw `i`: a seeded request produces the same tokens however
//!   the batch around it is composed.
//! - The sampled token has a non-zero probability in the processed distribution, lies in the
//!   top-k set, the top-p nucleus and above the min-p threshold.
//! - The full vocabulary is never sorted unless top-p needs it; the softmax is computed once.
//! - Logprobs (when asked) are of the raw distribution: log-softmax of the logits as given,
//!   before penalties, temperature and truncation (vLLM's default). They answer "how likely did
//!   the model find this token", independent of the sampling knobs.

use std::cell::RefCell;

use oxllm_kernels::ops::vexp::{exp_in_place, exp_ref};

use crate::logprobs::{clean, log_sum_exp, top_n};
use crate::penalties::Penalties;
use crate::truncate::{self, Cand};
use crate::{Rng, SampleError, SamplingError, SamplingParams};

/// The outcome of one sampling step.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The chosen token id.
    pub token: u32,
    /// Raw log-probability of `token` (log-softmax of the unmodified logits); `Some` exactly when
    /// the request asked for logprobs.
    pub logprob: Option<f32>,
    /// The `logprobs` most likely tokens of the raw distribution with their log-probabilities,
    /// most likely first (lower id first among equals). Empty unless asked for.
    pub top_logprobs: Vec<(u32, f32)>,
}

/// Reusable per-thread buffers, so a step allocates nothing and a sampler holds no vocab-sized
/// memory between steps.
#[derive(Default)]
struct Scratch {
    cands: Vec<Cand>,
    raw: Vec<f32>,
    /// Softmax numerators of the whole vocabulary (no top-k).
    weights: Vec<f32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Grows this thread's sampling scratch to a vocabulary of `vocab`, so that later draws on the
/// thread allocate nothing (warm-up steps call it on every pool thread).
pub(crate) fn reserve_scratch(vocab: usize) {
    let _ = SCRATCH.try_with(|cell| {
        if let Ok(mut s) = cell.try_borrow_mut() {
            let grow = |len: usize| vocab.saturating_sub(len);
            let n = grow(s.cands.capacity());
            s.cands.reserve(n);
            let n = grow(s.raw.capacity());
            s.raw.reserve(n);
            let n = grow(s.weights.capacity());
            s.weights.reserve(n);
        }
    });
}

/// Sampling state of one request (or one choice of an `n > 1` request).
#[derive(Clone, Debug)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    draws: u64,
    penalties: Penalties,
}

impl Sampler {
    /// A sampler for `params` (validated here). Its RNG is seeded from `params.seed`, or from
    /// `request_seed_fallback` (which the engine derives, e.g. from the request id) when unset.
    pub fn new(params: &SamplingParams, request_seed_fallback: u64) -> Result<Self, SamplingError> {
        Sampler::for_choice(params, request_seed_fallback, 0)
    }

    /// The sampler of choice `choice` of an `n > 1` request: choice 0 is [`Sampler::new`], other
    /// choices use independent RNG streams of the same seed, so they differ from each other yet
    /// are reproducible.
    pub fn for_choice(
        params: &SamplingParams,
        request_seed_fallback: u64,
        choice: usize,
    ) -> Result<Self, SamplingError> {
        params.validate()?;
        let seed = params.seed.unwrap_or(request_seed_fallback);
        Ok(Sampler {
            params: params.clone(),
            rng: Rng::seed_stream(seed, choice as u64),
            draws: 0,
            penalties: Penalties::new(params),
        })
    }

    /// The parameters this sampler was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Whether [`Sampler::sample`] reads the prompt and output ids (only the penalties do).
    pub fn needs_history(&self) -> bool {
        self.penalties.is_active()
    }

    /// How many RNG draws have been consumed (one per call to [`Sampler::sample`]).
    pub fn draws(&self) -> u64 {
        self.draws
    }

    /// Samples the next token from `logits` (one row over the vocabulary; modified in place by
    /// the penalties). `prompt_ids` is the request's prompt and `output_ids` the tokens generated
    /// so far; each call's `output_ids` must extend the previous call's (a shorter one is recounted
    /// from scratch). NaN logits count as `-inf`.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        prompt_ids: &[u32],
        output_ids: &[u32],
    ) -> Result<Sampled, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::EmptyLogits);
        }
        // Exactly one draw per call, whatever happens below.
        let u = self.rng.next_f64();
        self.draws += 1;
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.sample_with(&mut scratch, u, logits, prompt_ids, output_ids),
            Err(_) => self.sample_with(&mut Scratch::default(), u, logits, prompt_ids, output_ids),
        })
    }

    fn sample_with(
        &mut self,
        scratch: &mut Scratch,
        u: f64,
        logits: &mut [f32],
        prompt_ids: &[u32],
        output_ids: &[u32],
    ) -> Result<Sampled, SampleError> {
        let penalised = self.penalties.is_active();
        // Raw-distribution logprobs are taken before the penalties touch the row.
        let raw = match self.params.logprobs {
            Some(n) => {
                let lse = log_sum_exp(logits);
                let top = top_n(logits, n)
                    .into_iter()
                    .map(|(t, l)| (t, l - lse))
                    .collect::<Vec<_>>();
                if penalised {
                    scratch.raw.clear();
                    scratch.raw.extend_from_slice(logits);
                }
                Some((lse, top))
            }
            None => None,
        };

        self.penalties.apply(logits, prompt_ids, output_ids)?;

        let token = if self.params.is_greedy() {
            argmax(logits).ok_or(SampleError::NoCandidates)?
        } else {
            self.draw(scratch, logits, u)?
        };

        let (logprob, top_logprobs) = match raw {
            Some((lse, top)) => {
                let source: &[f32] = if penalised { &scratch.raw } else { logits };
                let l = source
                    .get(token as usize)
                    .map_or(f32::NEG_INFINITY, |&x| clean(x));
                (Some(l - lse), top)
            }
            None => (None, Vec::new()),
        };
        Ok(Sampled {
            token,
            logprob,
            top_logprobs,
        })
    }

    /// Temperature, top-k, top-p, min-p and the draw, over the (penalised) logits.
    ///
    /// The kept candidates are drawn from in token order (as the flat path without truncation
    /// does), so the drawn token depends on the kept set and `u` only.
    /// Numerators are `exp((logit - max) / t)` by the vector `exp` (`vexp::exp_in_place`,
    /// whose scalar and vector lanes agree bit for bit), so the max token weighs exactly 1 and a
    /// draw does not depend on which path computed it. Without top-k every weight lands in one
    /// flat buffer; without top-p/min-p the draw scans it directly, and with top-p only the
    /// weights above a cut that provably holds the nucleus become candidates.
    fn draw(&self, scratch: &mut Scratch, logits: &[f32], u: f64) -> Result<u32, SampleError> {
        let max = max_clean(logits);
        if max == f32::NEG_INFINITY {
            return Err(SampleError::NoCandidates);
        }
        let t = self.params.temperature;
        let cands = &mut scratch.cands;
        cands.clear();
        if let Some(k) = self.params.effective_top_k() {
            cands.extend(
                logits
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| (i as u32, clean(x)))
                    .filter(|c| c.1 > f32::NEG_INFINITY),
            );
            truncate::top_k(cands, k);
            for c in cands.iter_mut() {
                c.1 = exp_ref((c.1 - max) / t);
            }
            cands.retain(|c| c.1 > 0.0);
            truncate::top_p(cands, self.params.top_p);
        } else {
            let w = &mut scratch.weights;
            w.clear();
            w.extend(logits.iter().map(|&x| (clean(x) - max) / t));
            exp_in_place(w);
            let p = self.params.top_p;
            if p >= 1.0 && self.params.min_p <= 0.0 {
                return pick_weights(w, u).ok_or(SampleError::NoCandidates);
            }
            // The nucleus never reaches below a weight whose betters already hold its mass:
            // candidates start at such a cut (the max weighs 1), not at the whole vocabulary.
            let total: f64 = w.iter().map(|&x| x as f64).sum();
            let target = p as f64 * total * (1.0 - 1e-6);
            let above = |cut: f32| {
                w.iter()
                    .filter(|&&x| x > cut)
                    .map(|&x| x as f64)
                    .sum::<f64>()
            };
            let cut = [1e-3f32, 1e-6]
                .into_iter()
                .find(|&c| p < 1.0 && above(c) >= target)
                .unwrap_or(0.0);
            cands.extend(
                w.iter()
                    .enumerate()
                    .filter(|(_, &x)| x > cut)
                    .map(|(i, &x)| (i as u32, x)),
            );
            truncate::top_p_of(cands, p, total);
        }
        truncate::min_p(cands, self.params.min_p);
        // The kept set does not depend on how it was selected, but its order does (selection
        // permutes): the draw walks it in token order, so every path draws the same token.
        cands.sort_unstable_by_key(|c| c.0);
        truncate::pick(cands, u)
            .map(|c| c.0)
            .ok_or(SampleError::NoCandidates)
    }
}

/// The largest cleaned logit (`-inf` when none), in lanes that vectorise.
fn max_clean(logits: &[f32]) -> f32 {
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, &x) in lanes.iter_mut().zip(chunk) {
            let v = clean(x);
            *m = if v > *m { v } else { *m };
        }
    }
    lanes.iter().chain(tail).fold(
        f32::NEG_INFINITY,
        |m, &x| if clean(x) > m { clean(x) } else { m },
    )
}

/// [`truncate::pick`] over a flat weight per token id (zeros are never picked).
fn pick_weights(w: &[f32], u: f64) -> Option<u32> {
    let total: f64 = w.iter().map(|&x| x as f64).sum();
    let r = u * total;
    let mut acc = 0.0f64;
    for (i, &x) in w.iter().enumerate() {
        acc += x as f64;
        if r < acc && x > 0.0 {
            return Some(i as u32);
        }
    }
    w.iter().rposition(|&x| x > 0.0).map(|i| i as u32)
}

/// Index of the largest logit, the first one among ties; `None` if none is above `-inf`.
fn argmax(logits: &[f32]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available.
        return unsafe { argmax_avx2(logits) };
    }
    argmax_portable(logits)
}

/// [`argmax_portable`] compiled for AVX2 (wider lanes for the same code).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn argmax_avx2(logits: &[f32]) -> Option<u32> {
    argmax_portable(logits)
}

#[inline(always)]
fn argmax_portable(logits: &[f32]) -> Option<u32> {
    // One pass that vectorises: per lane the largest value and its first index (a strict `>`
    // keeps the first; NaN never compares greater, so it loses like `clean`'s `-inf`), then
    // the first index among the lanes holding the maximum: the first index of the largest
    // cleaned value, as `argmax_scalar`, without a branch per logit.
    const LANES: usize = 16;
    let mut best = [f32::NEG_INFINITY; LANES];
    let mut at = [0u32; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail_start = logits.len() - chunks.remainder().len();
    for (i, chunk) in chunks.enumerate() {
        let base = (i * LANES) as u32;
        for (l, &x) in chunk.iter().enumerate() {
            // `clean` without its NaN branch (see above).
            let v = if x == f32::INFINITY { f32::MAX } else { x };
            let better = v > best[l];
            best[l] = if better { v } else { best[l] };
            at[l] = if better { base + l as u32 } else { at[l] };
        }
    }
    let mut winner: Option<(u32, f32)> = None;
    let lanes = at.iter().zip(best).map(|(&i, v)| (i, v));
    let tail = (tail_start..logits.len()).map(|i| (i as u32, clean(logits[i])));
    for (i, v) in lanes.chain(tail) {
        if v == f32::NEG_INFINITY {
            continue;
        }
        winner = match winner {
            Some((wi, wv)) if wv > v || (wv == v && wi < i) => Some((wi, wv)),
            _ => Some((i, v)),
        };
    }
    winner.map(|w| w.0)
}

#[cfg(test)]
mod argmax_tests {
    use super::*;
    use proptest::prelude::*;

    /// The plain scan the vectorised [`argmax`] must agree with.
    fn argmax_scalar(logits: &[f32]) -> Option<u32> {
        let mut best: Option<(u32, f32)> = None;
        for (i, &x) in logits.iter().enumerate() {
            let v = clean(x);
            if v != f32::NEG_INFINITY && !matches!(best, Some((_, b)) if v <= b) {
                best = Some((i as u32, v));
            }
        }
        best.map(|b| b.0)
    }

    fn logit() -> impl Strategy<Value = f32> {
        prop_oneof![
            8 => (-4i32..4).prop_map(|v| v as f32 * 0.5),
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
            1 => Just(f32::MAX),
        ]
    }

    proptest! {
        #[test]
        fn vectorised_argmax_matches_the_scan(xs in prop::collection::vec(logit(), 0..200)) {
            // The dispatched form (AVX2 where the CPU has it) and the baseline build.
            prop_assert_eq!(argmax(&xs), argmax_scalar(&xs));
            prop_assert_eq!(argmax_portable(&xs), argmax_scalar(&xs));
        }
    }
}

#[cfg(test)]
mod draw_tests {
    use super::*;
    use proptest::prelude::*;

    /// The draw as a plain pipeline over the whole vocabulary: every candidate, top-k, the same
    /// `exp`, top-p over all survivors, min-p, pick.
    fn draw_reference(params: &SamplingParams, logits: &[f32], u: f64) -> Option<u32> {
        let max = logits
            .iter()
            .map(|&x| clean(x))
            .fold(f32::NEG_INFINITY, f32::max);
        if max == f32::NEG_INFINITY {
            return None;
        }
        let mut cands: Vec<Cand> = logits
            .iter()
            .enumerate()
            .map(|(i, &x)| (i as u32, clean(x)))
            .filter(|c| c.1 > f32::NEG_INFINITY)
            .collect();
        if let Some(k) = params.effective_top_k() {
            truncate::top_k(&mut cands, k);
        }
        for c in cands.iter_mut() {
            c.1 = exp_ref((c.1 - max) / params.temperature);
        }
        cands.retain(|c| c.1 > 0.0);
        truncate::top_p(&mut cands, params.top_p);
        truncate::min_p(&mut cands, params.min_p);
        cands.sort_unstable_by_key(|c| c.0);
        truncate::pick(&cands, u).map(|c| c.0)
    }

    proptest! {
        /// The flat-buffer draw with its nucleus cut picks exactly the token the plain
        /// pipeline picks, for every parameter mix.
        #[test]
        fn fast_draw_matches_the_plain_pipeline(
            logits in prop::collection::vec(-30f32..10.0, 1..300),
            temperature in 0.05f32..2.0,
            top_p in prop_oneof![Just(1.0f32), 0.01f32..1.0],
            top_k in prop_oneof![Just(None), (1usize..50).prop_map(Some)],
            min_p in prop_oneof![Just(0.0f32), 0.0f32..0.5],
            u in 0.0f64..1.0,
        ) {
            let params = SamplingParams {
                temperature,
                top_p,
                top_k,
                min_p,
                ..SamplingParams::greedy()
            };
            let sampler = Sampler::new(&params, 1).unwrap();
            let got = sampler.draw(&mut Scratch::default(), &logits, u).ok();
            prop_assert_eq!(got, draw_reference(&params, &logits, u));
        }
    }
}
