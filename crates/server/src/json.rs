//! [`ApiJson`]: a JSON body extractor whose every failure is an OpenAI-shaped error — 413 for an
//! oversized body, 400 naming the field (`param`) for a wrong type or a malformed document.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// The request body parsed as `T`.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(state.config().max_body_bytes)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {r}"))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

/// Parses `bytes` as `T`; the error names the path of the offending field.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let what = if inner.is_syntax() || inner.is_eof() {
            "the request body is not valid JSON"
        } else {
            "invalid request"
        };
        let err = ApiError::bad_request(format!("{what}: {inner}"));
        if path.is_empty() || path == "." {
            err
        } else {
            err.with_param(path)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        max_tokens: Option<u32>,
        stop: Option<Vec<String>>,
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse::<Body>(br#"{"max_tokens": "x"}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = parse::<Body>(br#"{"stop": ["a", 3]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop[1]"));
        let e = parse::<Body>(b"{nope").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse::<Body>(b"[1]").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(parse::<Body>(br#"{"max_tokens": 3, "other": 1}"#).is_ok());
    }
}
