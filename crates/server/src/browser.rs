//! Browser safety. A web page the local user visits can make the browser send "simple"
//! cross-site POSTs (form or `text/plain` bodies) without asking; requiring `Content-Type:
//! application/json` on every POST turns those into 415s, because a page may only send JSON
//! cross-site after a CORS preflight, which this server refuses unless an origin is allowed.
//!
//! CORS is off by default: no `Access-Control-*` header is ever sent. With allowed origins
//! (`*` for any), a preflight from one of them gets 204 with the allowed methods and headers,
//! and its requests' responses carry `Access-Control-Allow-Origin`.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

/// Answers a POST whose body is not declared as JSON with 415.
pub async fn require_json(req: Request, next: Next) -> Response {
    if req.method() == Method::POST {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let essence = content_type.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            let mut e = ApiError::bad_request(format!(
                "POST bodies must be sent with `Content-Type: application/json`, got `{content_type}`"
            ))
            .with_code("unsupported_media_type");
            e.status = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            return e.into_response();
        }
    }
    next.run(req).await
}

/// Whether `origin` may call this server from a browser.
fn allowed(origins: &[String], origin: &str) -> bool {
    origins.iter().any(|o| o == "*" || o == origin)
}

/// CORS for the configured origins (nothing at all when none are).
pub async fn cors(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let origins = &state.config().cors_allow_origins;
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(origin) = origin.filter(|o| allowed(origins, o)) else {
        return next.run(req).await;
    };
    let Ok(origin_value) = HeaderValue::from_str(&origin) else {
        return next.run(req).await;
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        r
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin_value);
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    resp
}
