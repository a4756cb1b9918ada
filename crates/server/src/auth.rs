//! API-key authentication: with a key configured, every route but the open ones (`/health`,
//! the chat page at `/`, and `/metrics` unless `protect_metrics`) needs `Authorization: Bearer
//! <key>`; anything else is a 401 in OpenAI's error shape. The key is compared in constant time
//! (the comparison's duration depends only on the lengths, never on where a guess first differs).

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Whether `path` needs the API key (when one is configured).
pub fn is_protected(path: &str, protect_metrics: bool) -> bool {
    match path {
        "/health" | "/" | "/chat.js" => false,
        "/metrics" => protect_metrics,
        _ => true,
    }
}

/// `a == b` in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keep the compiler from turning the fold into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

/// The middleware: passes the request on, or answers 401.
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let config = state.config();
    let Some(key) = config.api_key.as_deref() else {
        return next.run(req).await;
    };
    if !is_protected(req.uri().path(), config.protect_metrics) {
        return next.run(req).await;
    }
    let sent = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match sent {
        Some(token) if constant_time_eq(token.as_bytes(), key.as_bytes()) => next.run(req).await,
        Some(_) => unauthorized("Incorrect API key provided."),
        None => {
            unauthorized("Missing API key: send it as an `Authorization: Bearer <key>` header.")
        }
    }
}

fn unauthorized(message: &str) -> Response {
    let mut e = ApiError::bad_request(message).with_code("invalid_api_key");
    e.status = StatusCode::UNAUTHORIZED;
    let mut resp = e.into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_whole_keys_only() {
        assert!(constant_time_eq(b"sk-abc", b"sk-abc"));
        assert!(!constant_time_eq(b"sk-abc", b"sk-abd"));
        assert!(!constant_time_eq(b"sk-abc", b"sk-ab"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn open_routes() {
        assert!(!is_protected("/health", true));
        assert!(!is_protected("/metrics", false));
        assert!(is_protected("/metrics", true));
        assert!(is_protected("/v1/models", false));
        assert!(is_protected("/tokenize", false));
    }
}
