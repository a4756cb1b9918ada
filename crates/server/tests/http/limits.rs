//! Request size limits through HTTP: stop lists are bounded in count and bytes (400 naming
//! `stop`, before anything is copied per choice), and the largest legal list still works.

use serde_json::json;

use crate::assert_error;
use crate::client::post;
use crate::harness::{serial, shared};

#[test]
fn stop_lists_are_bounded_in_count_and_bytes() {
    let _g = serial();
    let addr = shared().addr;
    let max = oxllm_sample::MAX_STOP_STRINGS;
    let bytes = oxllm_sample::MAX_STOP_BYTES;
    let too_many = vec!["zq"; max + 1];
    let too_long = vec!["z".repeat(bytes / 4 + 1); 4];
    // What the attack sent: a body near the limit made of tiny stop strings, with many choices.
    let flood: Vec<String> = (0..100_000).map(|i| format!("{i:x}")).collect();
    for stop in [json!(too_many), json!(too_long), json!(flood)] {
        for path in ["/v1/completions", "/v1/chat/completions"] {
            let body = json!({
                "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}],
                "stop": stop, "n": 64, "max_tokens": 4,
            });
            let mut body = body.as_object().cloned().unwrap_or_default();
            body.remove(if path == "/v1/completions" {
                "messages"
            } else {
                "prompt"
            });
            let r = post(addr, path, &serde_json::Value::Object(body));
            let v = assert_error(&r, 400, Some("stop"));
            let m = v["error"]["message"].as_str().unwrap_or("");
            assert!(
                m.contains(&max.to_string()) || m.contains(&bytes.to_string()),
                "{m}"
            );
        }
    }
    // The largest legal list (none of which appears) leaves a greedy output unchanged.
    let legal: Vec<String> = (0..max)
        .map(|i| format!("{i:02}{}", "\u{1F600}".repeat(bytes / max / 4 - 1)))
        .collect();
    let base =
        json!({"prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "n": 2});
    let plain = post(addr, "/v1/completions", &base);
    assert_eq!(plain.status, 200, "{}", plain.text());
    let mut with_stops = base.clone();
    with_stops["stop"] = json!(legal);
    let r = post(addr, "/v1/completions", &with_stops);
    assert_eq!(r.status, 200, "{}", r.text());
    for i in 0..2 {
        assert_eq!(
            r.json()["choices"][i]["text"],
            plain.json()["choices"][i]["text"]
        );
    }
}
