//! The library's error type: everything that can go wrong talking to a server, reading a
//! workload, or running the engine offline.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP protocol: {0}")]
    Protocol(String),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("bad response: {0}")]
    Response(String),
    #[error("timed out after {0:.1} s")]
    Timeout(f64),
    #[error("{path}: line {line}: {reason}")]
    Dataset {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("engine: {0}")]
    Engine(String),
}

pub type Result<T> = std::result::Result<T, BenchError>;
