//! Typed errors of constrained decoding.

use thiserror::Error;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum StructuredError {
    /// The schema, regex, choice list or grammar does not compile (a client's mistake).
    #[error("{0}")]
    Compile(String),
    /// The tokenizer cannot back a grammar (no end-of-sequence token, bad vocabulary).
    #[error("constrained decoding is unavailable for this model: {0}")]
    Unsupported(String),
    /// The grammar engine failed on a token or a mask mid-generation.
    #[error("constrained decoding failed: {0}")]
    Matcher(String),
}
