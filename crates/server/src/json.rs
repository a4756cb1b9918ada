//! [`ApiJson`]: a strict JSON body extractor whose every failure is an OpenAI-shaped error: 413
//! for an oversized body; 408 for a body slower than the header-read timeout; 400 for a body that is not UTF-8, not one JSON object (trailing data
//! included), lacks a required field (`param` names it), has a field this endpoint does not know
//! (`param` names it), or has a wrong type (`param` is the path, e.g. `stop[1]`).
//!
//! Unknown fields are rejected, not ignored, so a misspelled option never silently does nothing.
//! The exception is [`IGNORED_FIELDS`]: fields OpenAI clients send that change nothing about the
//! output (bookkeeping for OpenAI's own platform), accepted whatever their value.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::state::AppState;

/// Fields accepted on every POST endpoint and ignored: OpenAI's end-user id, request metadata,
/// stored-completion flag and service tier.
pub const IGNORED_FIELDS: &[&str] = &["user", "metadata", "store", "service_tier"];

/// A request body: its top-level fields and which of them must be present (and not null).
pub trait RequestBody: DeserializeOwned {
    const FIELDS: &'static [&'static str];
    const REQUIRED: &'static [&'static str] = &[];
}

/// The request body parsed as `T`.
pub struct ApiJson<T>(pub T);

impl<T: RequestBody> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let wait = state.config().header_read_timeout;
        let read = tokio::time::timeout(wait, Bytes::from_request(req, state))
            .await
            .map_err(|_| {
                let mut e = ApiError::bad_request(format!(
                    "the request body did not arrive within {} s",
                    wait.as_secs_f32()
                ))
                .with_code("request_timeout");
                e.status = StatusCode::REQUEST_TIMEOUT;
                e
            })?;
        let bytes = read.map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(state.config().max_body_bytes)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {r}"))
            }
        })?;
        parse(&bytes).map(ApiJson)
    }
}

/// Parses `bytes` as `T`, strictly (see the module header).
pub fn parse<T: RequestBody>(bytes: &[u8]) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the request body is not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Value::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    let Value::Object(fields) = &value else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    if let Some(unknown) = fields
        .keys()
        .find(|k| !T::FIELDS.contains(&k.as_str()) && !IGNORED_FIELDS.contains(&k.as_str()))
    {
        return Err(ApiError::invalid_param(
            unknown.clone(),
            format!(
                "unknown field `{unknown}`; this endpoint accepts: {}",
                T::FIELDS.join(", ")
            ),
        ));
    }
    if let Some(missing) = T::REQUIRED
        .iter()
        .find(|f| fields.get(**f).is_none_or(Value::is_null))
    {
        return Err(ApiError::invalid_param(
            *missing,
            format!("the field `{missing}` is required"),
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let err = ApiError::bad_request(format!("invalid request: {}", e.into_inner()));
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
        prompt: String,
        max_tokens: Option<u32>,
        stop: Option<Vec<String>>,
    }

    impl RequestBody for Body {
        const FIELDS: &'static [&'static str] = &["prompt", "max_tokens", "stop"];
        const REQUIRED: &'static [&'static str] = &["prompt"];
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse::<Body>(br#"{"prompt": "", "max_tokens": "x"}"#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = parse::<Body>(br#"{"prompt": "", "stop": ["a", 3]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("stop[1]"));
        let e = parse::<Body>(b"{nope").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
        let e = parse::<Body>(b"[1]").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e = parse::<Body>(br#"{"max_tokens": 3}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        let e = parse::<Body>(br#"{"prompt": null}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        let e = parse::<Body>(br#"{"prompt": "", "max_tokns": 3}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokns"));
        assert!(parse::<Body>(br#"{"prompt": "", "user": {"x": 1}}"#).is_ok());
    }

    #[test]
    fn only_one_utf8_json_object_is_accepted() {
        let e = parse::<Body>(br#"{"prompt": "a"} garbage"#).unwrap_err();
        assert!(e.message.contains("trailing"), "{}", e.message);
        assert!(parse::<Body>(br#"{"prompt": "a"}{"prompt": "b"}"#).is_err());
        assert!(parse::<Body>(b"{\"prompt\": \"a\"}  \n").is_ok());
        let e = parse::<Body>(b"{\"prompt\": \"a\", \"user\": \"\xff\"}").unwrap_err();
        assert!(e.message.contains("UTF-8"), "{}", e.message);
    }
}
