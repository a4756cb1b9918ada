//! Errors: [`ApiError`] is what a client sees (OpenAI's `{"error": {"message", "type", "param",
//! "code"}}` with an HTTP status); [`ServerError`] is what stops the server from starting.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use oxllm_engine::EngineError;
use oxllm_sched::SchedError;
use serde_json::json;

/// An error answered to the client in OpenAI's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header (503 only).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or asks for something impossible.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the offending field.
    pub fn invalid_param(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::bad_request(message).with_param(param)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            format!("the request body is larger than the limit of {limit} bytes"),
        )
        .with_code("payload_too_large")
    }

    /// 503 with `Retry-After`: the waiting queue is full.
    pub fn overloaded(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_overloaded",
                message,
            )
        }
    }

    /// 503 with `Retry-After`: the server is draining for a stop (another replica can answer).
    pub fn shutting_down(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", message)
        }
        .with_code("server_shutting_down")
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }

    /// Maps an engine error by its variant: a request that can never run is the client's (400;
    /// `prompt_param` names the prompt's field, `prompt` or `messages`), a stopped engine is
    /// ours for now (503), anything else is a bug (500).
    pub fn from_engine(e: &EngineError, prompt_param: &'static str) -> Self {
        match e {
            EngineError::Sampling(s) => Self::invalid_param(s.field(), s.to_string()),
            EngineError::EmptyPrompt | EngineError::TokenOutOfVocabulary { .. } => {
                Self::invalid_param(prompt_param, e.to_string())
            }
            EngineError::ContextTooLong { .. } => Self::invalid_param(prompt_param, e.to_string())
                .with_code("context_length_exceeded"),
            EngineError::Scheduler(
                SchedError::EmptyPrompt(_)
                | SchedError::ExceedsMaxModelLen { .. }
                | SchedError::ExceedsKvCache { .. },
            ) => Self::invalid_param(prompt_param, e.to_string()),
            EngineError::Stopped => ApiError {
                retry_after: None,
                ..Self::overloaded("the engine has stopped")
            },
            EngineError::Scheduler(_)
            | EngineError::Model(_)
            | EngineError::RequestFailed(_)
            | EngineError::Structured(_)
            | EngineError::Config(_)
            | EngineError::Cuda(_) => Self::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("model {path}: {message}")]
    Model { path: String, message: String },
    #[error(transparent)]
    Tokenizer(#[from] oxllm_tok::TokError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
