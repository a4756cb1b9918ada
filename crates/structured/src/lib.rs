//! Constrained decoding for oxllm: JSON schemas, regular expressions, choices and Lark grammars
//! turned into a per-token mask over the model's vocabulary, on the `llguidance` engine.
//!
//! - [`ConstraintSpec`]: what a request asks for (the OpenAI / vLLM fields map onto it).
//! - [`GrammarCompiler`]: one per model; builds llguidance's token trie from our tokenizer's
//!   vocabulary (each id's bytes, special tokens marked), compiles specs at admission (errors
//!   are typed, so a server answers 400) and caches compiled grammars by content hash.
//! - [`Constraint`]: one per request (per choice); fills the step's mask words and advances
//!   with each sampled token. End of sequence is allowed only where the grammar accepts.

#![forbid(unsafe_code)]

mod compiler;
mod constraint;
mod error;
mod spec;
mod termination;
mod vocab;

pub use compiler::{CompileStats, GrammarCompiler};
pub use constraint::{Constraint, MaskStats};
pub use error::StructuredError;
pub use spec::{with_compact_json, ConstraintSpec, StructuralTag, TagStructure};
