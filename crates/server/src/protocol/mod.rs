//! The OpenAI (and vLLM) wire format: request bodies as they are parsed and response bodies as
//! they are written, field for field. No behaviour lives here.

pub mod chat;
pub mod common;
pub mod completions;
pub mod kv_events;
pub mod tokenize;
