//! What a rolling update and a router need: draining on the stop signal (`/health` 503, new
//! work refused, running streams finish), the end of the grace (streams end with an error
//! chunk, `[DONE]` and the chunked terminator; waiting requests get 503), and the vLLM metric
//! names the Gateway API Inference Extension's endpoint picker reads.

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::api::{metric, parse_metrics};
use crate::assert_error;
use crate::client::{get, open_stream, post};
use crate::harness::{engine_config, serial, server_config, shared, smollm2, TestServer};

/// The raw rest of a chunked SSE body, read to the end of the connection.
fn read_rest(mut s: std::net::TcpStream) -> String {
    let mut rest = Vec::new();
    s.read_to_end(&mut rest)
        .expect("read the rest of the stream");
    String::from_utf8_lossy(&rest).into_owned()
}

#[test]
fn draining_answers_health_503_refuses_new_work_and_lets_streams_finish() {
    let _g = serial();
    let mut server = TestServer::start(smollm2(), engine_config(), server_config());
    let addr = server.addr;
    assert_eq!(get(addr, "/health").status, 200);
    let body =
        json!({"prompt": "Count to ten:", "max_tokens": 200, "ignore_eos": true, "stream": true});
    let stream = open_stream(addr, "/v1/completions", &body);
    server.signal_shutdown();
    let start = Instant::now();
    let health = loop {
        let h = get(addr, "/health");
        if h.status != 200 || start.elapsed() > Duration::from_secs(5) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(health.status, 503, "/health while draining");
    let refused = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    let err = assert_error(&refused, 503, None);
    assert_eq!(err["error"]["code"], "server_shutting_down");
    assert_eq!(refused.header("retry-after"), Some("1"));
    let rest = read_rest(stream);
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    assert!(
        rest.ends_with("0\r\n\r\n"),
        "no chunked terminator: {rest:?}"
    );
    server.stop();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
}

#[test]
fn grace_expiry_ends_streams_with_an_error_and_answers_waiting_requests_503() {
    let _g = serial();
    let engine = oxllm_engine::EngineConfig {
        max_num_seqs: 1,
        ..engine_config()
    };
    let config = oxllm_server::ServerConfig {
        shutdown_grace: Duration::from_millis(500),
        ..server_config()
    };
    let mut server = TestServer::start(smollm2(), engine, config);
    let addr = server.addr;
    let long = json!({"prompt": "Count:", "max_tokens": 4000, "ignore_eos": true, "stream": true});
    let stream = open_stream(addr, "/v1/completions", &long);
    let waiting = std::thread::spawn(move || {
        post(
            addr,
            "/v1/completions",
            &json!({"prompt": "Hello", "max_tokens": 4000, "ignore_eos": true}),
        )
    });
    let start = Instant::now();
    while server.engine.stats().num_waiting == 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "never waited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let signalled = Instant::now();
    server.signal_shutdown();
    let rest = read_rest(stream);
    assert!(
        signalled.elapsed() < Duration::from_secs(10),
        "the stream outlived the grace: {:?}",
        signalled.elapsed()
    );
    assert!(rest.contains("\"code\":\"server_shutting_down\""), "{rest}");
    assert!(rest.contains("data: [DONE]"), "{rest}");
    assert!(
        rest.ends_with("0\r\n\r\n"),
        "no chunked terminator: {rest:?}"
    );
    assert!(!rest.contains("\"finish_reason\":\"length\""), "{rest}");
    let waited = waiting.join().expect("waiting client");
    let err = assert_error(&waited, 503, None);
    assert_eq!(err["error"]["code"], "server_shutting_down");
    server.stop();
}

/// The endpoint picker's default metric mapping for vLLM, from
/// kubernetes-sigs/gateway-api-inference-extension `pkg/epp/datalayer/metrics/extractor_test.go`
/// (`defaultTotalQueuedRequestsMetric` and siblings, which mirror the flag defaults read by
/// `factories.go` at commit 0e82c62154c66e555e77c8a179471aea2b181db0): waiting and running
/// requests, KV-cache usage in 0..1 and the cache-config info gauge (`block_size`,
/// `num_gpu_blocks` labels). LoRA info is only published by servers with adapters.
const ENDPOINT_PICKER_GAUGES: [&str; 3] = [
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
];

#[test]
fn metrics_carry_the_vllm_names_routers_read() {
    let _g = serial();
    let addr = shared().addr;
    crate::harness::wait_for_no_blocks(shared());
    let before = parse_metrics(&get(addr, "/metrics").text());
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 7, "temperature": 0, "ignore_eos": true}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    crate::harness::wait_for_no_blocks(shared());
    let text = get(addr, "/metrics").text();
    let after = parse_metrics(&text);
    let label = "{model_name=\"smollm2\"}";
    for name in ENDPOINT_PICKER_GAUGES {
        assert!(
            text.contains(&format!("# TYPE {name} gauge")),
            "{name} is no gauge"
        );
        let v = metric(&after, &format!("{name}{label}"));
        assert!((0.0..=1.0).contains(&v) || name != "vllm:kv_cache_usage_perc");
    }
    let info = after
        .iter()
        .find(|(s, _)| s.starts_with("vllm:cache_config_info{"))
        .expect("vllm:cache_config_info");
    assert!(info.0.contains("block_size=\"16\""), "{}", info.0);
    assert!(info.0.contains("num_gpu_blocks=\"2047\""), "{}", info.0);
    let delta = |s: &str| {
        let s = format!("{s}{label}");
        metric(&after, &s)
            - before
                .iter()
                .find(|(k, _)| *k == s)
                .map_or(0.0, |(_, v)| *v)
    };
    assert_eq!(delta("vllm:prompt_tokens_total"), 5.0);
    assert_eq!(delta("vllm:generation_tokens_total"), 7.0);
    assert!(delta("vllm:prefix_cache_queries_total") >= 5.0);
    assert!(delta("vllm:prefix_cache_hits_total") <= delta("vllm:prefix_cache_queries_total"));
    let success = "vllm:request_success_total{model_name=\"smollm2\",finished_reason=\"length\"}";
    assert_eq!(
        metric(&after, success)
            - before
                .iter()
                .find(|(k, _)| k == success)
                .map_or(0.0, |(_, v)| *v),
        1.0
    );
    assert_eq!(delta("vllm:time_to_first_token_seconds_count"), 1.0);
    assert_eq!(delta("vllm:e2e_request_latency_seconds_count"), 1.0);
    assert_eq!(
        delta("vllm:time_per_output_token_seconds_count"),
        6.0,
        "one gap between each two of the 7 tokens"
    );
    for hist in [
        "vllm:time_to_first_token_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {hist} histogram")), "{hist}");
        let inf = metric(
            &after,
            &format!("{hist}_bucket{{model_name=\"smollm2\",le=\"+Inf\"}}"),
        );
        assert_eq!(inf, metric(&after, &format!("{hist}_count{label}")));
    }
    for counter in [
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:request_success_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {counter} counter")),
            "{counter}"
        );
    }
    assert_eq!(
        metric(&after, &format!("vllm:num_requests_running{label}")),
        0.0
    );
    assert_eq!(
        metric(&after, &format!("vllm:kv_cache_usage_perc{label}")),
        0.0
    );
}
