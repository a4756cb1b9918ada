//! Sampling a step's logits rows, the kernel of the `sample` op description
//! (`runtime::OpDesc::Sample`), so a plan's replay ends with token ids.
//!
//! Per-row sampling state lives in a host-prepared buffer ([`SampleRows`]) that the engine
//! fills before a replay: each active row holds the request's own [`Sampler`] (moved in, moved
//! back after) and, when a penalty needs them, copies of its prompt and output ids.
//! [`sample_rows`] runs the same [`Sampler::sample`] an eager step runs, so replay and eager
//! draw identical tokens, whatever the thread count. Padded rows are inactive and produce
//! [`NO_TOKEN`].
//!
//! Prompt logprobs: a row that samples nothing may instead *score* a given token
//! ([`SampleRow::score`]): the op writes its logprob, rank and top alternatives
//! ([`crate::score_token`], the sampler's own log-softmax) into [`SampleRow::scored`]. Scoring
//! reads the row and draws nothing, so sampled rows beside it are unchanged.
//!
//! Constrained decoding: the op may read a token-mask buffer (`u32` words, `ceil(vocab / 32)`
//! per row, bit `t % 32` of word `t / 32` set when token `t` is allowed). A row flagged
//! `masked` has every disallowed logit set to `-inf` before its sampler runs; other rows never
//! read the buffer, so unconstrained rows draw the same tokens whatever shares their step.
//! A row with a `gate_row` takes its mask from [`SampleRows::gate`] instead, waiting for the
//! gate to open: the mask was computed on another thread while the forward ran
//! ([`crate::mask_gate`]); the op waits only when a gated row is active.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use oxllm_kernels::pool::{SharedMut, ThreadPool};

use crate::mask_gate::MaskGate;
use crate::{
    score_token, SampleError, Sampled, Sampler, SamplingError, SamplingParams, ScoredToken,
};

/// The token id written for inactive (padded) rows.
pub const NO_TOKEN: u32 = u32::MAX;

/// One logits row's sampling state.
pub struct SampleRow {
    pub active: bool,
    pub sampler: Sampler,
    /// Prompt and output ids, filled only when the sampler's penalties need them.
    pub prompt: Vec<u32>,
    pub output: Vec<u32>,
    /// The row's bits in the op's mask buffer hold this step's allowed tokens.
    pub masked: bool,
    /// The row's mask is row `gate_row` of [`SampleRows::gate`], filled while the forward runs.
    pub gate_row: Option<usize>,
    pub result: Option<Result<Sampled, SampleError>>,
    /// For an inactive row: score this token with this many top alternatives.
    pub score: Option<(u32, usize)>,
    pub scored: Option<ScoredToken>,
}

/// The sampling state of every row a plan can sample.
pub struct SampleRows {
    pub rows: Vec<SampleRow>,
    /// Masks handed over by a worker thread (see [`SampleRow::gate_row`]).
    pub gate: Option<Arc<MaskGate>>,
}

impl SampleRows {
    /// `n` inactive rows, each holding a placeholder greedy sampler.
    pub fn new(n: usize) -> Result<SampleRows, SamplingError> {
        let placeholder = Sampler::new(&SamplingParams::greedy(), 0)?;
        let rows = (0..n)
            .map(|_| SampleRow {
                active: false,
                sampler: placeholder.clone(),
                prompt: Vec::new(),
                output: Vec::new(),
                masked: false,
                gate_row: None,
                result: None,
                score: None,
                scored: None,
            })
            .collect();
        Ok(SampleRows { rows, gate: None })
    }
}

/// Words of a token mask over `vocab` tokens.
pub fn mask_words(vocab: usize) -> usize {
    vocab.div_ceil(32)
}

/// Sets every logit whose bit in `mask` is clear to `-inf`.
///
/// A grammar's mask is mostly whole words: all clear outside the few allowed tokens, or all
/// set inside free text. A clear word is one fill and a mixed word visits only its clear
/// bits, so a row costs about a word per 32 logits instead of a test per logit.
pub fn apply_token_mask(logits: &mut [f32], mask: &[u32]) {
    for (chunk, &word) in logits.chunks_mut(32).zip(mask) {
        match word {
            u32::MAX => {}
            0 => chunk.fill(f32::NEG_INFINITY),
            _ => {
                // Bits past a short last chunk name no logit.
                let mut blocked = !word;
                if chunk.len() < 32 {
                    blocked &= (1u32 << chunk.len()) - 1;
                }
                while blocked != 0 {
                    let bit = blocked.trailing_zeros() as usize;
                    if let Some(logit) = chunk.get_mut(bit) {
                        *logit = f32::NEG_INFINITY;
                    }
                    blocked &= blocked - 1;
                }
            }
        }
    }
}

/// Every thread of `pool` may sample a row in a replay: sizes their scratch for `vocab`
/// logits, then samples like [`sample_rows`] (a warm step's sampling).
pub fn warm_sample_rows(
    pool: &ThreadPool,
    logits: &mut [f32],
    rows: &mut SampleRows,
    ids: &mut [u32],
    mask: &[u32],
    vocab: usize,
) {
    let v = vocab.max(1);
    pool.run(|_, _| crate::sampler::reserve_scratch(v));
    sample_rows(pool, logits, rows, ids, mask, vocab)
}

/// Samples row `r` of `logits` (`[rows, vocab]`) with `rows.rows[r]` into `ids[r]`; `mask`
/// holds [`mask_words`]`(vocab)` words per row for rows flagged `masked`.
pub fn sample_rows(
    pool: &ThreadPool,
    logits: &mut [f32],
    rows: &mut SampleRows,
    ids: &mut [u32],
    mask: &[u32],
    vocab: usize,
) {
    let vocab = vocab.max(1);
    let words = mask_words(vocab);
    let n = rows.rows.len().min(ids.len()).min(logits.len() / vocab);
    let gated = rows.rows[..n]
        .iter()
        .any(|r| r.active && r.gate_row.is_some());
    let gate = rows.gate.clone().filter(|_| gated);
    let view = gate.as_deref().map(MaskGate::wait);
    let (gate_words, gate_width) = view.as_ref().map_or((&[][..], 0), |v| v.words());
    let sample_row = |i: usize, row: &mut SampleRow, id: &mut u32, row_logits: &mut [f32]| {
        if !row.active {
            *id = NO_TOKEN;
            row.result = None;
            row.scored = row
                .score
                .map(|(token, top)| score_token(row_logits, token, top));
            return;
        }
        let bits = match row.gate_row {
            Some(g) => Some(gate_words.get(g * gate_width..(g + 1) * gate_width)),
            None => row.masked.then(|| mask.get(i * words..(i + 1) * words)),
        };
        if let Some(bits) = bits {
            match bits {
                Some(bits) => apply_token_mask(row_logits, bits),
                None => {
                    // A masked row without mask words would sample unconstrained.
                    *id = NO_TOKEN;
                    row.result = Some(Err(SampleError::MissingMask));
                    return;
                }
            }
        }
        let result = row.sampler.sample(row_logits, &row.prompt, &row.output);
        *id = result.as_ref().map_or(NO_TOKEN, |s| s.token);
        row.result = Some(result);
    };
    let active = rows.rows[..n]
        .iter()
        .filter(|r| r.active || r.score.is_some())
        .count();
    if pool.n_threads() <= 1 || active <= 1 {
        for (i, ((row, id), row_logits)) in rows.rows[..n]
            .iter_mut()
            .zip(ids.iter_mut())
            .zip(logits.chunks_exact_mut(vocab))
            .enumerate()
        {
            sample_row(i, row, id, row_logits);
        }
        return;
    }
    // Rows are independent (each has its own sampler and RNG), so they spread over the pool;
    // a row's draw does not depend on which thread takes it.
    let (rows_p, ids_p) = (
        SharedMut::new(&mut rows.rows[..n]),
        SharedMut::new(&mut ids[..n]),
    );
    let logits_p = SharedMut::new(&mut logits[..n * vocab]);
    let next = AtomicUsize::new(0);
    pool.run_dynamic(|_, _| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        // SAFETY: row i (its state, id and logits) is claimed by exactly one thread.
        unsafe {
            sample_row(
                i,
                &mut rows_p.slice(i, 1)[0],
                &mut ids_p.slice(i, 1)[0],
                logits_p.slice(i * vocab, vocab),
            )
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition: logit `t` becomes `-inf` exactly when bit `t % 32` of word `t / 32`
    /// is clear (logits past the mask's words are left alone).
    fn reference_mask(logits: &mut [f32], mask: &[u32]) {
        for (t, logit) in logits.iter_mut().enumerate() {
            if let Some(&w) = mask.get(t / 32) {
                if w & (1 << (t % 32)) == 0 {
                    *logit = f32::NEG_INFINITY;
                }
            }
        }
    }

    /// Words drawn the way grammar masks look: mostly all-clear or all-set, some mixed.
    fn word() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(u32::MAX),
            any::<u32>(),
            Just(1u32),
            Just(1u32 << 31)
        ]
    }

    proptest! {
        #[test]
        fn mask_matches_its_definition(
            vocab in 1usize..300,
            words in proptest::collection::vec(word(), 0..12),
        ) {
            let logits: Vec<f32> = (0..vocab).map(|i| i as f32 * 0.5 - 7.0).collect();
            let mut fast = logits.clone();
            let mut slow = logits;
            apply_token_mask(&mut fast, &words);
            reference_mask(&mut slow, &words);
            prop_assert_eq!(
                fast.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                slow.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn mask_keeps_allowed_logits_and_clears_the_rest() {
        let mut logits: Vec<f32> = (0..70).map(|i| i as f32).collect();
        let mut mask = vec![0u32; mask_words(70)];
        for t in [0usize, 33, 64, 69] {
            mask[t / 32] |= 1 << (t % 32);
        }
        apply_token_mask(&mut logits, &mask);
        for (t, &l) in logits.iter().enumerate() {
            if [0, 33, 64, 69].contains(&t) {
                assert_eq!(l, t as f32);
            } else {
                assert_eq!(l, f32::NEG_INFINITY, "token {t}");
            }
        }
    }
}
