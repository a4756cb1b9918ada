//! [`ServerConfig`]: what the HTTP layer needs besides the engine.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The model name clients send and `/v1/models` lists.
    pub served_model_name: String,
    /// Where the model came from (for logs; never sent to clients).
    pub model_path: String,
    /// Most requests allowed to wait for a slot; beyond it, 503 with `Retry-After`.
    pub max_waiting: usize,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
    /// How long running requests may take to finish after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// With a key, every route but `/health` (and `/metrics` unless `protect_metrics`) needs
    /// `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Whether `/metrics` needs the API key too.
    pub protect_metrics: bool,
    /// Longest wait for a request's header (on a new or a kept-alive connection) and for its
    /// body; past it the connection is closed (header) or answered 408 (body).
    pub header_read_timeout: Duration,
    /// Encode special-token spellings inside chat message contents as control tokens (vLLM's
    /// default) instead of as text (ours: a user cannot forge a turn).
    pub special_tokens_in_content: bool,
    /// Origins a browser page may call from (`*`: any); empty: CORS off.
    pub cors_allow_origins: Vec<String>,
    /// `--tool-call-parser`: the tool-call format (`hermes`, `generic`); `None` follows the
    /// chat template.
    pub tool_call_parser: Option<crate::tools::ToolFormat>,
    /// `--kv-events`: serve the engine's KV-cache events on `GET /v1/kv_events`.
    pub kv_events: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            served_model_name: "oxllm".into(),
            model_path: String::new(),
            max_waiting: 1024,
            max_body_bytes: 8 << 20,
            shutdown_grace: Duration::from_secs(30),
            api_key: None,
            protect_metrics: false,
            cors_allow_origins: Vec::new(),
            special_tokens_in_content: false,
            header_read_timeout: Duration::from_secs(15),
            tool_call_parser: None,
            kv_events: false,
        }
    }
}
