//! The router: every route, the 404/405 fallbacks in OpenAI's error shape, the body-size
//! limit, per-response counting for `/metrics`, the per-request log line, and (outermost
//! first) CORS, the JSON content-type requirement and the API key.

mod chat;
mod completions;
mod info;
mod kv_events;
mod page;
mod tokenize;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::error::ApiError;
use crate::request_log::{self, RequestLog};
use crate::state::AppState;
use crate::{auth, browser};

/// The whole HTTP API over `state`.
pub fn router(state: AppState) -> Router {
    let limit = state.config().max_body_bytes;
    Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/models", get(info::models))
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/tokenizer_info", get(tokenize::tokenizer_info))
        .route("/v1/kv_events", get(kv_events::kv_events))
        .route("/", get(page::chat_page))
        .route("/chat.js", get(page::chat_script))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(middleware::from_fn(browser::require_json))
        .layer(middleware::from_fn_with_state(state.clone(), browser::cors))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

async fn method_not_allowed(req: Request) -> Response {
    let mut e = ApiError::bad_request(format!(
        "method {} is not allowed on {}",
        req.method(),
        req.uri().path()
    ));
    e.status = axum::http::StatusCode::METHOD_NOT_ALLOWED;
    e.into_response()
}

/// A fixed label per route, so unknown paths cannot blow up the metric's cardinality.
fn endpoint(path: &str) -> &'static str {
    match path {
        "/v1/completions" => "completions",
        "/v1/chat/completions" => "chat_completions",
        "/v1/models" => "models",
        "/health" => "health",
        "/metrics" => "metrics",
        "/tokenize" => "tokenize",
        "/detokenize" => "detokenize",
        "/v1/kv_events" => "kv_events",
        "/" | "/chat.js" => "chat_page",
        _ => "other",
    }
}

async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let endpoint = endpoint(req.uri().path());
    let path = req.uri().path().to_string();
    let resp = if request_log::is_logged(&path) {
        let log = RequestLog::new(req.method().as_str(), &path);
        let resp = request_log::scope(log.clone(), next.run(req)).await;
        log.set_status(resp.status().as_u16());
        resp
    } else {
        next.run(req).await
    };
    state
        .metrics()
        .observe_http(endpoint, resp.status().as_u16());
    resp
}
