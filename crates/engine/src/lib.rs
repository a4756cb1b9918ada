//! The serving engine: one thread owns every request's state; clients talk to it through
//! channels.
//!
//! `Engine::start` loads nothing itself: it takes a model, its tokenizer and a config, sizes the
//! paged KV cache, and spawns the engine thread. `EngineHandle::submit` validates a request,
//! sends it to the thread and returns a `RequestStream` of token/text deltas ending with a
//! finish reason. Dropping the stream (or calling `abort`) frees the request's blocks at the next
//! step. One step is three phases with values between them: plan (schedule one token budget
//! over running then waiting requests, fill token masks) → run (build the flat batch, forward,
//! sample each request's row with its own seeded sampler) → deliver (update the scheduler,
//! detokenize, cut stop strings, send).

#![forbid(unsafe_code)]

mod buckets;
mod config;
mod core;
mod error;
mod handle;
mod kv_events;
mod request;
mod runner;
mod states;

pub use crate::core::EngineStats;
pub use buckets::{decode_buckets, prefill_buckets, PlanReport};
pub use config::{
    kv_bytes_per_token, BackendKind, EngineConfig, KvCacheDtype, KvCacheSize, KvDtype, PlanMode,
};
pub use error::{ContextBound, EngineError};
pub use handle::{Engine, EngineHandle, EngineInfo};
pub use kv_events::{BlockHash, KvEvent, KvEventBatch, KvEventReceiver, KV_EVENT_BUFFER};
pub use oxllm_kernels::matmul::WeightLayout;
pub use oxllm_runtime::CpuOptions;
pub use request::{GenerationRequest, PromptLogprob, RequestEvent, RequestStream, TokenLogprob};
pub use states::{plan_states, StatePlan};
