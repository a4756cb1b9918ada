//! oxllm's OpenAI-compatible HTTP server (axum + tokio) over the engine's client API.
//!
//! Routes: `POST /v1/completions`, `POST /v1/chat/completions` (whole or SSE-streamed),
//! `GET /v1/models`, `GET /health`, `POST /tokenize`, `POST /detokenize`, `GET /metrics`,
//! `GET /v1/kv_events` (KV-cache events for prefix-aware routers, with `--kv-events`), and
//! a chat page at `GET /` (static files in the binary, over the same streaming API).
//! A request is parsed ([`json`], [`protocol`]), checked ([`params`]), templated and tokenized
//! on the blocking pool ([`prompt`]), admitted ([`admission`]), submitted as `n` engine
//! requests ([`generation`]) and answered whole or as SSE ([`sse`]). The server keeps no
//! request state of the engine's: it holds only the `RequestStream`s, and dropping them (a
//! client that disconnects) aborts the requests.
//!
//! Entry points: [`start_engine`] loads a model and starts the engine, [`AppState::new`] wraps
//! its handle, [`serve_until`] runs the server until stop signals (e.g. [`signals`]) end it: the
//! first drains ([`drain`]), a second stops at once.

#![forbid(unsafe_code)]

pub mod admission;
pub mod answer;
pub mod answer_stream;
pub mod auth;
pub mod browser;
pub mod call_scan;
pub mod config;
pub mod conn;
pub mod content_tokens;
pub mod drain;
pub mod error;
pub mod fuzzing;
pub mod generation;
pub mod ids;
pub mod json;
pub mod kv_events_zmq;
pub mod load;
pub mod logprobs;
pub mod metrics;
pub mod params;
pub mod prompt;
pub mod protocol;
pub mod reasoning;
pub mod request_log;
pub mod routes;
pub mod shutdown;
pub mod sse;
pub mod state;
pub mod structured;
pub mod tool_stream;
pub mod tools;
pub mod vllm_metrics;

pub use config::ServerConfig;
pub use error::{ApiError, ServerError};
pub use load::start_engine;
pub use routes::router;
pub use shutdown::{serve, serve_until, signals, Stopped};
pub use state::AppState;
