//! Strict request parsing through HTTP: one UTF-8 JSON object per body, required and unknown
//! fields named in `param`, no internal names in messages, the context error naming the limit
//! that applies, and 400 (not 503) for `n` no server state could ever admit.

use serde_json::json;

use crate::assert_error;
use crate::client::{post, request};
use crate::harness::{engine_config, serial, server_config, shared, tiny_llama, TestServer};

const POSTS: [(&str, &str); 4] = [
    ("/v1/completions", r#"{"prompt": "Hi", "max_tokens": 1}"#),
    (
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}"#,
    ),
    ("/tokenize", r#"{"prompt": "Hi"}"#),
    ("/detokenize", r#"{"tokens": [1, 2]}"#),
];

#[test]
fn trailing_data_and_invalid_utf8_are_rejected_on_every_post_endpoint() {
    let _g = serial();
    let addr = shared().addr;
    for (path, body) in POSTS {
        let r = request(addr, "POST", path, body.as_bytes());
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        for tail in [&b" garbage"[..], b"{}", b"\n[1]"] {
            let raw = [body.as_bytes(), tail].concat();
            let v = assert_error(&request(addr, "POST", path, &raw), 400, None);
            let m = v["error"]["message"].as_str().unwrap_or("");
            assert!(m.contains("trailing"), "{path}: {m}");
        }
        // Invalid UTF-8 inside a field the endpoint ignores is still rejected.
        let raw = [
            &body.as_bytes()[..body.len() - 1],
            b", \"user\": \"\xff\xfe\"}",
        ]
        .concat();
        let v = assert_error(&request(addr, "POST", path, &raw), 400, None);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("UTF-8"),
            "{v}"
        );
    }
}

#[test]
fn missing_and_unknown_fields_are_named() {
    let _g = serial();
    let addr = shared().addr;
    let cases = [
        ("/v1/completions", json!({"max_tokens": 2}), "prompt"),
        ("/v1/completions", json!({"prompt": null}), "prompt"),
        ("/v1/chat/completions", json!({"max_tokens": 2}), "messages"),
        ("/detokenize", json!({}), "tokens"),
        (
            "/v1/completions",
            json!({"prompt": "a", "max_tokenz": 2}),
            "max_tokenz",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "a"}], "temprature": 0}),
            "temprature",
        ),
        ("/tokenize", json!({"prompt": "a", "bogus": 1}), "bogus"),
        ("/detokenize", json!({"tokens": [1], "extra": 1}), "extra"),
    ];
    for (path, body, param) in cases {
        let v = assert_error(&post(addr, path, &body), 400, Some(param));
        let m = v["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(&format!("`{param}`")), "{path} {body}: {m}");
    }
    // The documented extras OpenAI clients send are accepted and ignored.
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 1, "user": "u1", "metadata": {"k": "v"}, "store": false, "service_tier": "auto"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn messages_name_no_internal_types_or_template_lines() {
    let _g = serial();
    let addr = shared().addr;
    let cases = [
        (
            "/v1/completions",
            json!({"prompt": {"a": 1}}),
            Some("prompt"),
        ),
        (
            "/v1/completions",
            json!({"prompt": [1, "a"]}),
            Some("prompt"),
        ),
        ("/v1/completions", json!({"prompt": 5}), Some("prompt")),
        (
            "/v1/completions",
            json!({"prompt": "a", "stop": 5}),
            Some("stop"),
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "stop": [5]}),
            Some("stop"),
        ),
        // SmolLM2's template concatenates `content`, which is null here.
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user"}]}),
            Some("messages"),
        ),
    ];
    for (path, body, param) in cases {
        let v = assert_error(&post(addr, path, &body), 400, param);
        let m = v["error"]["message"].as_str().unwrap_or("");
        for internal in [
            "untagged",
            "PromptInput",
            "StopInput",
            "chat_template:",
            "enum",
        ] {
            assert!(!m.contains(internal), "{path} {body}: {m}");
        }
    }
}

#[test]
fn context_error_names_the_kv_cache_and_impossible_n_is_400() {
    let _g = serial();
    let mut engine = engine_config();
    // 10 usable blocks of 16: 160 tokens, below the tiny model's context of 512.
    engine.kv_cache = oxllm_engine::KvCacheSize::Blocks(11);
    engine.max_num_seqs = 2;
    let mut config = server_config();
    config.max_waiting = 1;
    let server = TestServer::start(tiny_llama(), engine, config);
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": vec![5u32; 150], "max_tokens": 20}),
    );
    let v = assert_error(&r, 400, Some("max_tokens"));
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    let m = v["error"]["message"].as_str().unwrap_or("");
    assert!(
        m.contains("KV cache holds at most 160 tokens") && m.contains("context length is 512"),
        "{m}"
    );
    assert!(!m.contains("maximum context length is 160"), "{m}");
    // 2 running + 1 waiting: n = 4 can never be admitted, even on an idle server.
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": [1, 2], "max_tokens": 1, "n": 4}),
    );
    let v = assert_error(&r, 400, Some("n"));
    assert!(r.header("retry-after").is_none());
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("at most 3"),
        "{v}"
    );
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": [1, 2], "max_tokens": 1, "n": 3}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    server.stop();
}
