//! Bucket choice: which step shapes get a captured plan, and which bucket kind a step needs.
//!
//! Decode steps (every sequence computes one token) of 1, 2, 4, 8, then multiples of 8 up to
//! `max_num_seqs`, padded up with empty sequences; single-sequence prefill chunks padded to 16,
//! 32, ... tokens up to the token budget (at most 2048). Everything else (mixed batches,
//! several prefills) runs eager.

/// Largest prefill bucket.
const MAX_PREFILL_BUCKET: usize = 2048;

/// What the start-up capture did, for the log and `EngineInfo`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlanReport {
    pub decode_buckets: Vec<usize>,
    pub prefill_buckets: Vec<usize>,
    /// Buckets whose capture failed (they run eager), with the reason.
    pub failed: Vec<String>,
    pub capture_ms: f64,
    pub pool_bytes: usize,
    /// The largest plan's step-local bytes live at once, and all its step-local buffers
    /// together (what it would take without reuse).
    pub peak_bytes: usize,
    pub buffer_bytes: usize,
}

/// The two shapes a captured plan serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BucketKind {
    /// Every sequence computes one token; padded with empty sequences.
    Decode,
    /// One sequence's prefill chunk; padded with rows of no sequence.
    Prefill,
}

/// Decode buckets for `max_seqs` sequences: 1, 2, 4, 8, then steps of 8.
pub fn decode_buckets(max_seqs: usize) -> Vec<usize> {
    let mut b: Vec<usize> = [1, 2, 4, 8]
        .into_iter()
        .filter(|&s| s <= max_seqs)
        .collect();
    let mut s = 16;
    while s <= max_seqs {
        b.push(s);
        s += 8;
    }
    if b.last().is_some_and(|&l| l < max_seqs) {
        b.push(max_seqs);
    }
    b
}

/// Prefill buckets up to `max_tokens`: 16, 32, ... (powers of two).
pub fn prefill_buckets(max_tokens: usize) -> Vec<usize> {
    let mut b = Vec::new();
    let mut s = 16;
    while s <= max_tokens.min(MAX_PREFILL_BUCKET) {
        b.push(s);
        s *= 2;
    }
    b
}

/// The bucket kind a step of `seqs` sequences over `tokens` rows needs and the size it must
/// reach; `None` for steps no bucket serves (mixed batches, several prefills).
pub(crate) fn needed(seqs: usize, tokens: usize) -> Option<(BucketKind, usize)> {
    if tokens == seqs {
        Some((BucketKind::Decode, seqs))
    } else if seqs == 1 {
        Some((BucketKind::Prefill, tokens))
    } else {
        None
    }
}
