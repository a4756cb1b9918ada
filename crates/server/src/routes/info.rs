//! `GET /v1/models`, `GET /health`, `GET /metrics`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::ids::unix_now;
use crate::state::AppState;

pub async fn models(State(state): State<AppState>) -> Response {
    let c = state.config();
    Json(json!({
        "object": "list",
        "data": [{
            "id": c.served_model_name,
            "object": "model",
            "created": unix_now(),
            "owned_by": "oxllm",
            "root": c.served_model_name,
            "parent": null,
            "max_model_len": state.context_limit(),
            "permission": [],
        }],
    }))
    .into_response()
}

/// 200 with an empty body: the model is loaded and the plans captured (the server only listens
/// after that); 503 once a stop signal came (draining: send no new requests here).
pub async fn health(State(state): State<AppState>) -> StatusCode {
    if state.drain().is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let stats = state.engine().stats();
    let body = state.metrics().render(
        &stats,
        state.engine().info(),
        state.admission().in_flight(),
        &state.config().served_model_name,
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
