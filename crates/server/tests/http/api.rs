//! The endpoints' answers: schemas field by field, greedy equality with the engine, streaming
//! equal to whole answers, `n`, seeds, stop strings, logprobs, echo, tokenize, metrics.

use oxllm_engine::GenerationRequest;
use oxllm_sample::SamplingParams;
use serde_json::{json, Value};

use crate::client::{get, post};
use crate::harness::{serial, shared, MODEL};
use crate::read_stream;

const FRANCE_IDS: [u32; 5] = [504, 3575, 282, 4649, 314];

fn ok(path: &str, body: Value) -> Value {
    let r = post(shared().addr, path, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn greedy_completion_equals_the_engine_and_matches_the_schema() {
    let _g = serial();
    let v = ok(
        "/v1/completions",
        json!({"model": MODEL, "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0, "ignore_eos": true, "user": "u1"}),
    );
    assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(v["object"], "text_completion");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(v["model"], MODEL);
    let c = &v["choices"][0];
    assert_eq!(v["choices"].as_array().unwrap().len(), 1);
    assert_eq!(c["index"], 0);
    assert!(c["logprobs"].is_null());
    assert_eq!(c["finish_reason"], "length");
    assert_eq!(v["usage"]["prompt_tokens"], 5);
    assert_eq!(v["usage"]["completion_tokens"], 12);
    assert_eq!(v["usage"]["total_tokens"], 17);
    let text = c["text"].as_str().unwrap();

    let params = SamplingParams {
        max_tokens: 12,
        ignore_eos: true,
        ..SamplingParams::greedy()
    };
    let (_, engine_text, _) = shared()
        .engine
        .submit(GenerationRequest {
            prompt_ids: FRANCE_IDS.to_vec(),
            params,
            choice: 0,
            constraint: None,
        })
        .unwrap()
        .collect_blocking()
        .unwrap();
    assert_eq!(text, engine_text);
    assert!(text.contains("Paris"), "{text}");

    // Token-id prompts, plain and as a list of one, give the same answer.
    for prompt in [
        json!(FRANCE_IDS),
        json!([FRANCE_IDS]),
        json!(["The capital of France is"]),
    ] {
        let v = ok(
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": true}),
        );
        assert_eq!(v["choices"][0]["text"], text);
    }
    // Two prompts: choices in prompt order.
    let v = ok(
        "/v1/completions",
        json!({"prompt": ["The capital of France is", "1, 2, 3,"], "max_tokens": 12, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(v["choices"][0]["text"], text);
    assert_eq!(v["choices"][1]["index"], 1);
    assert_eq!(v["usage"]["completion_tokens"], 24);
    // The default max_tokens of completions is 16.
    let v = ok(
        "/v1/completions",
        json!({"prompt": "Once upon a time", "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(v["usage"]["completion_tokens"], 16);
}

#[test]
fn chat_streamed_equals_chat_whole() {
    let _g = serial();
    let body = json!({"model": MODEL, "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": [{"type": "text", "text": "Name three colors."}]}], "max_completion_tokens": 20, "temperature": 0});
    let whole = ok("/v1/chat/completions", body.clone());
    assert!(whole["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["model"], MODEL);
    let c = &whole["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    let content = c["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
    let reason = c["finish_reason"].as_str().unwrap();
    assert!(reason == "stop" || reason == "length");
    let usage = &whole["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );

    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let s = read_stream(&post(shared().addr, "/v1/chat/completions", &sbody), true);
    assert_eq!(s.texts, vec![content.to_string()]);
    assert_eq!(s.finish, vec![Some(reason.to_string())]);
    // Equal usage, except that the second request's prompt hits the prefix cache.
    let su = s.usage.clone().expect("usage chunk");
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(su[k], usage[k], "{k}");
    }
    assert!(
        su["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let first = &s.chunks[0];
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    for ch in &s.chunks[..s.chunks.len() - 1] {
        assert!(
            ch["usage"].is_null(),
            "usage null on every chunk but the last: {ch}"
        );
        assert_eq!(ch["id"], first["id"]);
    }
    assert_eq!(s.chunks.last().unwrap()["choices"], json!([]));

    // Without include_usage, no chunk carries `usage`.
    sbody.as_object_mut().unwrap().remove("stream_options");
    let s = read_stream(&post(shared().addr, "/v1/chat/completions", &sbody), true);
    assert_eq!(s.texts, vec![content.to_string()]);
    assert!(s.chunks.iter().all(|c| c.get("usage").is_none()));
}

#[test]
fn n_choices_and_seeds_reproduce_streamed_and_whole() {
    let _g = serial();
    let body = json!({"prompt": "My favourite animal is", "n": 3, "max_tokens": 12, "temperature": 1.0, "seed": 1234, "ignore_eos": true});
    let a = ok("/v1/completions", body.clone());
    let b = ok("/v1/completions", body.clone());
    assert_eq!(a["choices"], b["choices"], "same seed, same choices");
    let texts: Vec<&str> = (0..3)
        .map(|i| a["choices"][i]["text"].as_str().unwrap())
        .collect();
    assert!(
        texts[0] != texts[1] || texts[1] != texts[2],
        "choices of one request sample independently: {texts:?}"
    );
    let prompt_len = ok("/tokenize", json!({"prompt": "My favourite animal is"}))["count"].clone();
    assert_eq!(
        a["usage"]["prompt_tokens"], prompt_len,
        "prompt counted once"
    );
    assert_eq!(a["usage"]["completion_tokens"], 36);
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let s = read_stream(&post(shared().addr, "/v1/completions", &sbody), false);
    assert_eq!(s.texts, texts);
    assert!(s.finish.iter().all(|f| f.as_deref() == Some("length")));

    let others: Vec<Value> = [1u64, 2, 3]
        .iter()
        .map(|seed| {
            let mut b = body.clone();
            b["seed"] = json!(seed);
            b["n"] = json!(1);
            ok("/v1/completions", b)["choices"][0]["text"].clone()
        })
        .collect();
    assert!(
        others.iter().any(|t| t != &a["choices"][0]["text"]),
        "different seeds should not all agree"
    );

    // Chat n=2 streamed equals whole, with the same seed.
    let chat = json!({"messages": [{"role": "user", "content": "Tell me a word."}], "n": 2, "max_tokens": 8, "seed": 7, "temperature": 0.9});
    let whole = ok("/v1/chat/completions", chat.clone());
    let mut sc = chat.clone();
    sc["stream"] = json!(true);
    let s = read_stream(&post(shared().addr, "/v1/chat/completions", &sc), true);
    for i in 0..2 {
        assert_eq!(whole["choices"][i]["message"]["content"], s.texts[i]);
    }
}

#[test]
fn stop_strings_cut_the_text() {
    let _g = serial();
    let base =
        json!({"prompt": "1, 2, 3, 4, 5,", "max_tokens": 16, "temperature": 0, "ignore_eos": true});
    let full = ok("/v1/completions", base.clone())["choices"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(full.contains(" 8"), "{full}");
    let cut = full.find(" 8").unwrap();
    for stop in [json!(" 8"), json!(["nothing-like-this", " 8"])] {
        let mut b = base.clone();
        b["stop"] = stop;
        let v = ok("/v1/completions", b.clone());
        assert_eq!(v["choices"][0]["text"], full[..cut], "{b}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        b["stream"] = json!(true);
        let s = read_stream(&post(shared().addr, "/v1/completions", &b), false);
        assert_eq!(s.texts, vec![full[..cut].to_string()]);
        assert_eq!(s.finish, vec![Some("stop".to_string())]);
    }
}

#[test]
fn logprobs_in_both_shapes() {
    let _g = serial();
    let v = ok(
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 2, "ignore_eos": true}),
    );
    let c = &v["choices"][0];
    let lp = &c["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 4);
    let joined: String = tokens.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, c["text"].as_str().unwrap());
    let mut last_offset = None;
    for i in 0..4 {
        let l = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(l <= 0.0);
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 2, "{top:?}");
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((best - l).abs() < 1e-4, "greedy token is the top one");
        let off = lp["text_offset"][i].as_u64().unwrap();
        assert!(last_offset.is_none_or(|o| off > o));
        last_offset = Some(off);
    }
    // Streamed completions carry the same logprobs.
    let s = read_stream(
        &post(
            shared().addr,
            "/v1/completions",
            &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "logprobs": 2, "ignore_eos": true, "stream": true}),
        ),
        false,
    );
    let streamed: Vec<Value> = s
        .chunks
        .iter()
        .filter_map(|c| {
            c["choices"][0]["logprobs"]["token_logprobs"]
                .as_array()
                .cloned()
        })
        .flatten()
        .collect();
    assert_eq!(&streamed, lp["token_logprobs"].as_array().unwrap());

    let v = ok(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 5, "temperature": 0, "logprobs": true, "top_logprobs": 3}),
    );
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for t in content {
        let token = t["token"].as_str().unwrap();
        assert_eq!(t["bytes"], json!(token.as_bytes()));
        assert_eq!(t["top_logprobs"].as_array().unwrap().len(), 3);
        assert!(t["logprob"].as_f64().unwrap() <= 0.0);
    }
    // logprobs without top_logprobs: the sampled token only.
    let v = ok(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 2, "temperature": 0, "logprobs": true}),
    );
    assert!(v["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        .as_array()
        .unwrap()
        .is_empty());
}

#[test]
fn echo_prepends_the_prompt() {
    let _g = serial();
    let v = ok(
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0, "echo": true}),
    );
    let text = v["choices"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("The capital of France is"), "{text}");
    assert!(text.len() > "The capital of France is".len());
    let s = read_stream(
        &post(
            shared().addr,
            "/v1/completions",
            &json!({"prompt": FRANCE_IDS, "max_tokens": 3, "temperature": 0, "echo": true, "stream": true}),
        ),
        false,
    );
    assert_eq!(s.texts, vec![text.to_string()]);
}

#[test]
fn models_health_tokenize_detokenize() {
    let _g = serial();
    let addr = shared().addr;
    let h = get(addr, "/health");
    assert_eq!(h.status, 200);
    let m = get(addr, "/v1/models").json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["id"], MODEL);
    assert_eq!(m["data"][0]["object"], "model");
    assert!(m["data"][0]["max_model_len"].as_u64().unwrap() > 0);

    let t = ok(
        "/tokenize",
        json!({"prompt": "The capital of France is", "return_token_strs": true}),
    );
    assert_eq!(t["tokens"], json!(FRANCE_IDS));
    assert_eq!(t["count"], 5);
    assert_eq!(t["token_strs"][1], " capital");
    assert!(t["max_model_len"].as_u64().unwrap() > 0);
    let d = ok("/detokenize", json!({"tokens": FRANCE_IDS}));
    assert_eq!(d["prompt"], "The capital of France is");

    let t = ok(
        "/tokenize",
        json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    let ids = t["tokens"].clone();
    let d = ok("/detokenize", json!({"tokens": ids}));
    let text = d["prompt"].as_str().unwrap();
    assert!(text.starts_with("<|im_start|>"), "{text}");
    assert!(text.contains("<|im_start|>user\nHi<|im_end|>\n"), "{text}");
    assert!(text.ends_with("<|im_start|>assistant\n"), "{text}");
    let t = ok(
        "/tokenize",
        json!({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": false}),
    );
    let d = ok("/detokenize", json!({"tokens": t["tokens"]}));
    assert!(!d["prompt"].as_str().unwrap().ends_with("assistant\n"));
    // chat_template_kwargs are accepted and passed through.
    let v = ok(
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": false}}),
    );
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() <= 2);
}

/// Parses Prometheus text: every sample line is `name{labels} value` with a float value.
pub fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            assert!(
                rest.starts_with("HELP ") || rest.starts_with("TYPE "),
                "bad comment: {line}"
            );
            if let Some(t) = rest.strip_prefix("TYPE ") {
                let kind = t.split(' ').nth(1).unwrap();
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "{line}");
        }
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line}"));
        out.push((series.to_string(), v));
    }
    out
}

pub fn metric(samples: &[(String, f64)], series: &str) -> f64 {
    samples
        .iter()
        .find(|(s, _)| s == series)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {series}"))
}

#[test]
fn metrics_parse_and_move_with_traffic() {
    let _g = serial();
    let addr = shared().addr;
    let before = parse_metrics(&get(addr, "/metrics").text());
    ok(
        "/v1/completions",
        json!({"prompt": "The capital of France is", "max_tokens": 7, "temperature": 0, "ignore_eos": true}),
    );
    let bad = post(addr, "/v1/completions", &json!({"prompt": "x", "top_p": 7}));
    assert_eq!(bad.status, 400);
    // Gauges come from the engine's snapshot, published right after it answers: let it settle.
    let start = std::time::Instant::now();
    let after = loop {
        let resp = get(addr, "/metrics");
        assert!(resp
            .header("content-type")
            .unwrap()
            .starts_with("text/plain"));
        let m = parse_metrics(&resp.text());
        let idle = metric(&m, "oxllm_num_requests_running") == 0.0
            && metric(&m, "oxllm_kv_blocks_in_use") == 0.0;
        if idle || start.elapsed() > std::time::Duration::from_secs(10) {
            break m;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let delta =
        |s: &str| metric(&after, s) - before.iter().find(|(k, _)| k == s).map_or(0.0, |(_, v)| *v);
    assert_eq!(delta("oxllm_prompt_tokens_total"), 5.0);
    assert_eq!(delta("oxllm_generation_tokens_total"), 7.0);
    assert_eq!(
        delta("oxllm_http_requests_total{endpoint=\"completions\",status=\"200\"}"),
        1.0
    );
    assert_eq!(
        delta("oxllm_http_requests_total{endpoint=\"completions\",status=\"400\"}"),
        1.0
    );
    assert_eq!(
        delta("oxllm_request_finished_total{finished_reason=\"length\"}"),
        1.0
    );
    assert_eq!(delta("oxllm_time_to_first_token_seconds_count"), 1.0);
    assert_eq!(delta("oxllm_time_per_output_token_seconds_count"), 1.0);
    assert_eq!(delta("oxllm_e2e_request_latency_seconds_count"), 1.0);
    assert_eq!(metric(&after, "oxllm_num_requests_running"), 0.0);
    assert_eq!(metric(&after, "oxllm_num_requests_waiting"), 0.0);
    assert_eq!(metric(&after, "oxllm_kv_blocks_in_use"), 0.0);
    assert!(metric(&after, "oxllm_kv_blocks_total") > 0.0);
    let rate = metric(&after, "oxllm_prefix_cache_hit_rate");
    assert!((0.0..=1.0).contains(&rate));
    // Histogram buckets are cumulative up to +Inf == count.
    let buckets: Vec<f64> = after
        .iter()
        .filter(|(s, _)| s.starts_with("oxllm_e2e_request_latency_seconds_bucket"))
        .map(|(_, v)| *v)
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(
        buckets.last().copied(),
        Some(metric(&after, "oxllm_e2e_request_latency_seconds_count"))
    );
}
