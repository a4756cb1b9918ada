//! Typed errors: [`SamplingError`] for invalid parameters (a client's mistake, reported with the
//! offending field so a server can answer 400 with `param` set), [`SampleError`] for a logits row
//! or token history the sampler cannot work with (an engine bug, never a panic).

use thiserror::Error;

/// A [`crate::SamplingParams`] field outside its allowed range.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SamplingError {
    /// `field` has `value`, which is not in `allowed`.
    #[error("`{field}` must be {allowed}, got {value}")]
    OutOfRange {
        /// The field's name, as in the OpenAI API where it has one.
        field: &'static str,
        /// The rejected value, formatted.
        value: String,
        /// The allowed range, in words or interval notation.
        allowed: &'static str,
    },
    /// Stop string number `index` is empty (it would stop before the first character).
    #[error("`stop` strings must be non-empty, but stop[{index}] is empty")]
    EmptyStop {
        /// Position in the `stop` list.
        index: usize,
    },
    /// More stop strings than a request may carry.
    #[error("at most {max} `stop` strings are allowed, got {count}")]
    TooManyStops { count: usize, max: usize },
    /// The stop strings are longer, together, than a request may carry.
    #[error("the `stop` strings may have at most {max} bytes together, got {bytes}")]
    StopsTooLong { bytes: usize, max: usize },
}

impl SamplingError {
    /// The name of the offending field (for OpenAI's `error.param`).
    pub fn field(&self) -> &'static str {
        match self {
            SamplingError::OutOfRange { field, .. } => field,
            SamplingError::EmptyStop { .. }
            | SamplingError::TooManyStops { .. }
            | SamplingError::StopsTooLong { .. } => "stop",
        }
    }
}

/// Why a logits row could not be sampled.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SampleError {
    /// The logits row has no entries.
    #[error("empty logits row")]
    EmptyLogits,
    /// A prompt or output token id does not index the logits row.
    #[error("token id {token} is outside the vocabulary of {vocab_size} logits")]
    TokenOutOfVocab {
        /// The offending id.
        token: u32,
        /// Length of the logits row.
        vocab_size: usize,
    },
    /// Every logit is NaN or negative infinity: no token can be chosen.
    #[error("no token has a finite logit")]
    NoCandidates,
    /// A row flagged as constrained found no token mask in the step.
    #[error("a constrained row has no token mask")]
    MissingMask,
}
