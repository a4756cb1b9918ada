//! HTTP integration tests of `oxllm-server` on SmolLM2-135M-Instruct (and a tiny checkpoint
//! without tokenizer): the OpenAI endpoints and their schemas, streaming against whole answers,
//! `n`, stop strings, logprobs, seeds, every error status with its body shape, concurrency,
//! disconnects, overload and graceful shutdown.

mod api;
mod client;
mod connections;
mod deploy;
mod errors;
mod harness;
mod injection;
mod limits;
mod load;
mod strict;

use serde_json::Value;

use client::Response;

/// Asserts an OpenAI error: the status, the shape `{"error": {message, type, param, code}}`,
/// and the `param` when one is expected.
pub fn assert_error(resp: &Response, status: u16, param: Option<&str>) -> Value {
    assert_eq!(resp.status, status, "body: {}", resp.text());
    let body = resp.json();
    let err = body
        .get("error")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("no error object: {body}"));
    let mut keys: Vec<&str> = err.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"], "{body}");
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(err["type"].is_string(), "{body}");
    assert!(err["code"].is_null() || err["code"].is_string(), "{body}");
    if let Some(p) = param {
        assert_eq!(err["param"], p, "{body}");
    }
    body
}

/// Concatenated text, finish reasons and usage of an SSE completion or chat stream, checking
/// the framing: JSON chunks, then exactly one `[DONE]` at the end.
pub struct Streamed {
    pub texts: Vec<String>,
    pub finish: Vec<Option<String>>,
    pub chunks: Vec<Value>,
    pub usage: Option<Value>,
}

pub fn read_stream(resp: &Response, chat: bool) -> Streamed {
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(
        resp.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        resp.headers
    );
    let data = resp.sse_data();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{data:?}");
    let mut s = Streamed {
        texts: Vec::new(),
        finish: Vec::new(),
        chunks: Vec::new(),
        usage: None,
    };
    for d in &data[..data.len() - 1] {
        let v: Value = serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}"));
        assert!(v.get("error").is_none(), "{v}");
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            s.usage = Some(u.clone());
        }
        for c in v["choices"].as_array().expect("choices") {
            let i = c["index"].as_u64().expect("index") as usize;
            if s.texts.len() <= i {
                s.texts.resize(i + 1, String::new());
                s.finish.resize(i + 1, None);
            }
            let piece = if chat {
                c["delta"]["content"].as_str()
            } else {
                c["text"].as_str()
            };
            s.texts[i].push_str(piece.unwrap_or(""));
            if let Some(f) = c["finish_reason"].as_str() {
                assert!(s.finish[i].is_none(), "two finish reasons for {i}");
                s.finish[i] = Some(f.to_string());
            }
        }
        s.chunks.push(v);
    }
    s
}
