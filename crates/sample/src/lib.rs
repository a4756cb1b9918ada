//! Token sampling for oxllm: everything that turns one row of logits into the next token of one
//! request, and decides when that request stops.
//!
//! - [`SamplingParams`]: the per-request knobs (OpenAI/vLLM semantics) and their validation.
//! - [`Sampler`]: one per request (or per choice when `n > 1`). Applies penalties, temperature,
//!   top-k, top-p and min-p, then draws from its own seeded RNG, exactly one draw per token, so a
//!   seeded request gives the same tokens whatever else shares the batch.
//! - [`StopChecker`]: stop *strings* over streamed text, holding back text that may be the start
//!   of a stop string and cutting the output right before it.
//! - [`check_stop_token`]: stop token ids, end-of-sequence and `max_tokens`.
//!
//! Logprobs reported by the sampler are those of the model's raw distribution (log-softmax of the
//! logits before penalties, temperature and truncation), like vLLM's default; see [`Sampled`].

mod error;
mod finish;
mod logprobs;
pub mod mask_gate;
mod params;
mod penalties;
mod rng;
pub mod sample_rows;
mod sampler;
mod stop;
mod stop_automaton;
mod stop_strings;
mod truncate;

pub use error::{SampleError, SamplingError};
pub use finish::check_stop_token;
pub use logprobs::{score_token, ScoredToken};
pub use params::{SamplingParams, GREEDY_EPSILON, MAX_LOGPROBS, MAX_N, MAX_TEMPERATURE};
pub use rng::Rng;
pub use sampler::{Sampled, Sampler};
pub use stop::{StopChecker, StopOutcome};
pub use stop_strings::{StopStrings, MAX_STOP_BYTES, MAX_STOP_STRINGS};
