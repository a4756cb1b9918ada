//! [`ServerConfig`]: what the HTTP layer needs besides the engine.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The model name clients send and `/v1/models` lists.
    pub served_model_name: String,
    /// Where the model came from (`/v1/models` `root`).
    pub model_path: String,
    /// Most requests allowed to wait for a slot; beyond it, 503 with `Retry-After`.
    pub max_waiting: usize,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// How long running requests may take to finish after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            served_model_name: "oxllm".into(),
            model_path: String::new(),
            max_waiting: 1024,
            max_body_bytes: 8 << 20,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
