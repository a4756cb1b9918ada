//! Entry points for fuzzing: request bytes through the same parsing and validation the
//! handlers use (the strict JSON extractor, the request types, the sampling-parameter checks,
//! the chat-message checks) and chat-template rendering, each with the invariants that must
//! hold for any input. A violated invariant panics, which is what cargo-fuzz reports; the
//! targets in `fuzz/` call these, and `tests/fuzz_corpus.rs` replays the committed corpus.

use std::sync::OnceLock;

use axum::http::StatusCode;
use oxllm_tok::{ChatTemplate, ChatTemplateInputs};
use serde_json::Value;

use crate::error::ApiError;
use crate::json;
use crate::params;
use crate::prompt::messages_json;
use crate::protocol::chat::ChatRequest;
use crate::protocol::completions::CompletionRequest;
use crate::protocol::tokenize::TokenizeRequest;

/// An error a client may get from parsing: 400 with a message; a `param`, when set, names a
/// field (a known one, or the unknown one rejected) and the message names no internal type.
fn check_error(e: &ApiError) {
    assert_eq!(e.status, StatusCode::BAD_REQUEST, "{e:?}");
    assert!(!e.message.is_empty(), "{e:?}");
    if let Some(p) = &e.param {
        let root = p.split(['.', '[']).next().unwrap_or("");
        assert!(!root.is_empty(), "param {p} names no field: {e:?}");
        assert!(!e.message.contains("untagged enum"), "{e:?}");
    }
}

/// `POST /v1/completions` bytes to sampling parameters.
pub fn completions(bytes: &[u8]) {
    let result = json::parse::<CompletionRequest>(bytes)
        .and_then(|req| params::parse(&req.sampling(), req.max_tokens, "max_tokens", None));
    match result {
        Ok(p) => assert!(p.params.validate().is_ok(), "{:?}", p.params),
        Err(e) => check_error(&e),
    }
}

/// `POST /v1/chat/completions` bytes to sampling parameters and template-ready messages.
pub fn chat(bytes: &[u8]) {
    let result = json::parse::<ChatRequest>(bytes).and_then(|req| {
        let p = params::parse(&req.sampling(), req.max_tokens, "max_tokens", None)?;
        let messages = messages_json(&req.messages)?;
        Ok((p, messages))
    });
    match result {
        Ok((p, messages)) => {
            assert!(p.params.validate().is_ok(), "{:?}", p.params);
            for m in messages.as_array().into_iter().flatten() {
                assert!(m["role"].is_string(), "{m}");
                assert!(m["content"].is_string() || m["content"].is_null(), "{m}");
            }
        }
        Err(e) => check_error(&e),
    }
}

/// `POST /tokenize` bytes to a request (and its messages, when given).
pub fn tokenize(bytes: &[u8]) {
    let result = json::parse::<TokenizeRequest>(bytes)
        .and_then(|req| req.messages.as_deref().map(messages_json).transpose());
    if let Err(e) = result {
        check_error(&e);
    }
}

/// A ChatML template (the shape of SmolLM2's and Qwen's), compiled once.
fn chatml() -> &'static ChatTemplate {
    static T: OnceLock<ChatTemplate> = OnceLock::new();
    T.get_or_init(|| {
        let src = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        match ChatTemplate::new(src, "<s>", "</s>") {
            Ok(t) => t,
            Err(e) => panic!("the fuzzing template does not compile: {e}"),
        }
    })
}

/// Chat messages (JSON bytes) rendered through a chat template: checked messages render
/// without panicking, and every string content appears in the output.
pub fn chat_template(bytes: &[u8]) {
    let Ok(messages) = serde_json::from_slice::<Vec<serde_json::Map<String, Value>>>(bytes) else {
        return;
    };
    let Ok(json) = messages_json(&messages) else {
        return;
    };
    let rendered = chatml().render(&ChatTemplateInputs {
        messages: &json,
        add_generation_prompt: true,
        tools: None,
        kwargs: None,
    });
    if let Ok(text) = rendered {
        for m in json.as_array().into_iter().flatten() {
            if let Some(c) = m["content"].as_str() {
                assert!(text.contains(c), "{c:?} missing from {text:?}");
            }
        }
    }
}
