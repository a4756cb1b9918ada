//! Continuous-batching scheduler over a paged KV cache, without tensors.
//!
//! Each step is ONE loop over a token budget (no prefill/decode phases): running requests first,
//! in admission order, each computing as many of its pending tokens as the budget allows (a
//! decode is one token, a long prompt is chunked over steps while other requests keep decoding);
//! then waiting requests, skipping any prefix the KV cache already holds. While some request is
//! decoding, an optional cap bounds the prompt tokens a step carries (a step's length is every
//! decoding request's inter-token latency). Running slots are
//! shared fairly between submission groups (the choices of one API request; see `fairness`):
//! the least-served group is admitted first, and a group above its fair share gives up its
//! newest request to one below it. When KV blocks run out, the newest running request of the
//! group running the most is preempted: its blocks are freed and it is recomputed later from
//! its prompt plus the output so far. For hybrid models each running
//! request also holds a recurrent-state slot (admission waits for one like for blocks), and
//! prefix hits restore a state checkpoint taken at a block boundary.
//!
//! [`SchedulerOutput`] is the only thing the model runner receives; after the runner has sampled,
//! [`Scheduler::update_from_output`] appends the tokens, caches full blocks and finishes requests.

#![forbid(unsafe_code)]

mod batch;
mod budget;
mod config;
mod error;
mod fairness;
mod output;
mod request;
mod scheduler;
mod update;

pub use batch::BatchArrays;
pub use config::{RecurrentStateConfig, SchedulerConfig};
pub use error::SchedError;
pub use output::{RequestUpdate, ScheduledSeq, SchedulerOutput};
pub use request::{Request, RequestStatus};
pub use scheduler::Scheduler;
