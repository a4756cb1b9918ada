//! The chat page at `GET /` and its script at `GET /chat.js`: static files compiled into the
//! binary (no build step, no Node toolchain), which talk to the same OpenAI API as any client.

use axum::http::header;
use axum::response::IntoResponse;

const CHAT_HTML: &str = include_str!("../../static/chat.html");
const CHAT_JS: &str = include_str!("../../static/chat.js");

pub async fn chat_page() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        CHAT_HTML,
    )
}

pub async fn chat_script() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        CHAT_JS,
    )
}
