//! oxllm's benchmarks.
//!
//! - `bench serve`: an OpenAI-API load generator ([`serve`]) over a minimal HTTP/1.1 client
//!   ([`http`]) and an SSE parser ([`sse`]); request timelines ([`client`]) become metrics
//!   ([`metrics`]) and JSONL records ([`record`]); two servers compare as ratios with spreads
//!   ([`compare`]), drawn as SVG ([`plot`]) and written into a marked Markdown section ([`doc`]).
//! - `bench generate`: prefill and decode throughput through the engine, no HTTP ([`offline`]).

#![forbid(unsafe_code)]

pub mod client;
pub mod compare;
pub mod doc;
pub mod error;
pub mod http;
pub mod metrics;
pub mod offline;
pub mod plan_profile;
pub mod plot;
pub mod progress;
pub mod record;
pub mod runner;
pub mod serve;
pub mod sse;
pub mod workload;

pub use error::{BenchError, Result};
