//! Every error case: status code, OpenAI error shape and `param`; and no input brings the
//! server down.

use serde_json::json;

use crate::assert_error;
use crate::client::{get, post, request};
use crate::harness::{serial, server_config, shared, tiny_llama, TestServer};

#[test]
fn bad_requests_are_400_naming_the_field() {
    let _g = serial();
    let addr = shared().addr;
    let c = "/v1/completions";
    let chat = "/v1/chat/completions";
    let msgs = json!([{"role": "user", "content": "Hi"}]);
    let cases = [
        (
            c,
            json!({"prompt": "x", "temperature": "hot"}),
            Some("temperature"),
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": 1.5}),
            Some("max_tokens"),
        ),
        (c, json!({"prompt": "x", "stop": ["a", 3]}), Some("stop")),
        (c, json!({"prompt": "x", "n": 0}), Some("n")),
        (c, json!({"prompt": "x", "n": 129}), Some("n")),
        (
            c,
            json!({"prompt": "x", "max_tokens": 0}),
            Some("max_tokens"),
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": -5}),
            Some("max_tokens"),
        ),
        (
            c,
            json!({"prompt": "x", "temperature": -1}),
            Some("temperature"),
        ),
        (
            c,
            json!({"prompt": "x", "temperature": 1e300}),
            Some("temperature"),
        ),
        (c, json!({"prompt": "x", "top_p": 2}), Some("top_p")),
        (c, json!({"prompt": "x", "top_k": -3}), Some("top_k")),
        (c, json!({"prompt": "x", "min_p": -0.5}), Some("min_p")),
        (
            c,
            json!({"prompt": "x", "presence_penalty": 3}),
            Some("presence_penalty"),
        ),
        (
            c,
            json!({"prompt": "x", "frequency_penalty": -2.5}),
            Some("frequency_penalty"),
        ),
        (
            c,
            json!({"prompt": "x", "repetition_penalty": 0}),
            Some("repetition_penalty"),
        ),
        (c, json!({"prompt": "x", "logprobs": 21}), Some("logprobs")),
        (c, json!({"prompt": "x", "logprobs": -1}), Some("logprobs")),
        (c, json!({"prompt": "x", "stop": ""}), Some("stop")),
        (
            c,
            json!({"prompt": "x", "logit_bias": {"5": 10}}),
            Some("logit_bias"),
        ),
        (
            c,
            json!({"prompt": "x", "stream_options": {"include_usage": true}}),
            Some("stream_options"),
        ),
        (
            c,
            json!({"prompt": "x", "prompt_logprobs": -1}),
            Some("prompt_logprobs"),
        ),
        (
            c,
            json!({"prompt": "x", "prompt_logprobs": 21}),
            Some("prompt_logprobs"),
        ),
        (
            c,
            json!({"prompt": "x", "max_tokens": 0}),
            Some("max_tokens"),
        ),
        (c, json!({"prompt": "x", "best_of": 3}), Some("best_of")),
        (c, json!({"prompt": "x", "suffix": "y"}), Some("suffix")),
        (c, json!({"prompt": ""}), Some("prompt")),
        (c, json!({"prompt": []}), Some("prompt")),
        (c, json!({"prompt": [1, -2]}), Some("prompt")),
        (c, json!({"prompt": [60000]}), Some("prompt")),
        (
            c,
            json!({"prompt": [1, 2, 3], "max_tokens": 9000}),
            Some("max_tokens"),
        ),
        (
            c,
            json!({"prompt": vec![1u32; 8200], "max_tokens": 1}),
            Some("prompt"),
        ),
        (c, json!({"max_tokens": 3}), None),
        (chat, json!({"messages": []}), Some("messages")),
        (chat, json!({"messages": "Hi"}), Some("messages")),
        (
            chat,
            json!({"messages": [{"content": "Hi"}]}),
            Some("messages[0].role"),
        ),
        (
            chat,
            json!({"messages": [{"role": "user", "content": 5}]}),
            Some("messages[0].content"),
        ),
        (
            chat,
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            Some("messages[0].content[0]"),
        ),
        (
            chat,
            json!({"messages": msgs, "top_logprobs": 2}),
            Some("top_logprobs"),
        ),
        (
            chat,
            json!({"messages": msgs, "logprobs": true, "top_logprobs": 21}),
            Some("top_logprobs"),
        ),
        (
            chat,
            json!({"messages": msgs, "logprobs": 3}),
            Some("logprobs"),
        ),
        (
            chat,
            json!({"messages": msgs, "max_completion_tokens": 0}),
            Some("max_completion_tokens"),
        ),
        (
            chat,
            json!({"messages": msgs, "max_tokens": 100000}),
            Some("max_tokens"),
        ),
        (
            chat,
            json!({"messages": msgs, "response_format": {"type": "json_schema"}}),
            Some("response_format.json_schema"),
        ),
        (
            chat,
            json!({"messages": msgs, "continue_final_message": true, "add_generation_prompt": true}),
            Some("continue_final_message"),
        ),
        ("/tokenize", json!({"prompt": "a", "messages": msgs}), None),
        ("/tokenize", json!({}), None),
        ("/detokenize", json!({"tokens": [70000]}), Some("tokens")),
        ("/detokenize", json!({"tokens": "x"}), Some("tokens")),
    ];
    for (path, body, param) in cases {
        let r = post(addr, path, &body);
        let v = assert_error(&r, 400, param);
        assert_eq!(v["error"]["type"], "invalid_request_error", "{path} {body}");
    }
    // Context overflow says so in `code`.
    let r = post(addr, c, &json!({"prompt": [1, 2, 3], "max_tokens": 9000}));
    assert_eq!(
        assert_error(&r, 400, None)["error"]["code"],
        "context_length_exceeded"
    );

    // Invalid JSON.
    for raw in [
        &b"{not json"[..],
        b"",
        b"[1, 2]",
        b"\"text\"",
        b"{\"prompt\": \"x\",}",
    ] {
        let r = request(addr, "POST", c, raw);
        assert_error(&r, 400, None);
    }
}

#[test]
fn unknown_routes_models_methods_and_oversized_bodies() {
    let _g = serial();
    let addr = shared().addr;
    assert_error(&get(addr, "/v2/nothing"), 404, None);
    assert_error(&post(addr, "/v1/embeddings", &json!({})), 404, None);
    let r = post(
        addr,
        "/v1/completions",
        &json!({"model": "gpt-4", "prompt": "x"}),
    );
    let v = assert_error(&r, 404, Some("model"));
    assert_eq!(v["error"]["code"], "model_not_found");
    let r = post(
        addr,
        "/v1/chat/completions",
        &json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]}),
    );
    assert_error(&r, 404, Some("model"));
    assert_error(&get(addr, "/v1/completions"), 405, None);
    // 413: the shared server accepts at most 1 MiB.
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(2 << 20));
    let r = request(addr, "POST", "/v1/completions", big.as_bytes());
    let v = assert_error(&r, 413, None);
    assert_eq!(v["error"]["code"], "payload_too_large");
    assert_eq!(get(addr, "/health").status, 200);
}

#[test]
fn garbage_never_brings_the_server_down() {
    let _g = serial();
    let addr = shared().addr;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let fields = [
        "prompt",
        "messages",
        "n",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stop",
        "seed",
        "logprobs",
        "top_logprobs",
        "stream",
        "echo",
        "tokens",
        "stream_options",
        "min_p",
    ];
    let values = [
        json!(null),
        json!(-1),
        json!(0),
        json!(1e308),
        json!(-1e308),
        json!(u64::MAX),
        json!(i64::MIN),
        json!("x"),
        json!(""),
        json!([]),
        json!([[]]),
        json!({}),
        json!([{"role": 1}]),
        json!([{"role": "user", "content": null}]),
        json!(true),
        json!([4294967295u64]),
        json!({"include_usage": "yes"}),
        json!(["\u{0}", "\u{10FFFF}"]),
    ];
    for i in 0..200 {
        let mut body = serde_json::Map::new();
        for _ in 0..(next() % 5) {
            let f = fields[(next() % fields.len() as u64) as usize];
            let v = values[(next() % values.len() as u64) as usize].clone();
            body.insert(f.into(), v);
        }
        if i % 3 == 0 {
            body.insert("max_tokens".into(), json!(2));
        }
        let path = [
            "/v1/completions",
            "/v1/chat/completions",
            "/tokenize",
            "/detokenize",
        ][(next() % 4) as usize];
        let r = post(addr, path, &serde_json::Value::Object(body.clone()));
        assert!(
            r.status == 200 || r.status == 400 || r.status == 404,
            "{path} {body:?} -> {} {}",
            r.status,
            r.text()
        );
        if r.status != 200 {
            assert_error(&r, r.status, None);
        }
    }
    let mut bytes = Vec::new();
    for _ in 0..50 {
        bytes.clear();
        for _ in 0..(next() % 64) {
            bytes.push((next() % 256) as u8);
        }
        let r = request(addr, "POST", "/v1/completions", &bytes);
        assert_error(&r, 400, None);
    }
    assert_eq!(get(addr, "/health").status, 200);
    crate::harness::wait_for_no_blocks(shared());
}

#[test]
fn chat_without_a_tokenizer_or_template_is_a_clear_400() {
    let _g = serial();
    let mut engine = crate::harness::engine_config();
    engine.max_num_seqs = 4;
    let server = TestServer::start(tiny_llama(), engine, server_config());
    let r = post(
        server.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    let v = assert_error(&r, 400, None);
    assert_eq!(v["error"]["code"], "chat_template_unavailable");
    // Completions still work with token ids (no text without a tokenizer).
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 4);
    assert_error(
        &post(server.addr, "/v1/completions", &json!({"prompt": "text"})),
        400,
        None,
    );
    server.stop();
}
