//! Load and lifecycle: 32 concurrent streams equal their whole answers, clients that disconnect
//! mid-stream leave no blocks in use, a full waiting queue answers 503 with Retry-After, and a
//! shutdown lets running streams finish.

use std::io::Read;

use serde_json::json;

use crate::api::{metric, parse_metrics};
use crate::client::{get, open_stream, post};
use crate::harness::{
    engine_config, serial, server_config, shared, smollm2, wait_for_no_blocks, TestServer,
};
use crate::{assert_error, read_stream};

fn prompts() -> Vec<String> {
    let subjects = [
        "The capital of France is",
        "def fibonacci(n):",
        "Once upon a time",
        "1, 2, 3, 4,",
        "The quick brown fox",
        "Rust is a language that",
        "My favourite food is",
        "In 1969, the first humans",
    ];
    (0..32)
        .map(|i| format!("{} {}", subjects[i % subjects.len()], "and".repeat(i / 8)))
        .collect()
}

#[test]
fn thirty_two_concurrent_streams_equal_their_whole_answers() {
    let _g = serial();
    let addr = shared().addr;
    let run = |stream: bool| -> Vec<String> {
        let handles: Vec<_> = prompts()
            .into_iter()
            .map(|p| {
                std::thread::spawn(move || {
                    let body = json!({"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": true, "stream": stream});
                    let r = post(addr, "/v1/completions", &body);
                    if stream {
                        let s = read_stream(&r, false);
                        assert_eq!(s.finish, vec![Some("length".to_string())]);
                        s.texts[0].clone()
                    } else {
                        assert_eq!(r.status, 200, "{}", r.text());
                        r.json()["choices"][0]["text"].as_str().unwrap().to_string()
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    };
    let whole = run(false);
    let streamed = run(true);
    assert_eq!(whole, streamed);
    assert!(whole.iter().all(|t| !t.is_empty()));
}

#[test]
fn clients_that_disconnect_mid_stream_free_their_blocks() {
    let _g = serial();
    let server = shared();
    let before = parse_metrics(&get(server.addr, "/metrics").text());
    let streams: Vec<_> = (0..8)
        .map(|i| {
            let path = if i % 2 == 0 { "/v1/completions" } else { "/v1/chat/completions" };
            let body = if i % 2 == 0 {
                json!({"prompt": format!("Write a long story number {i}:"), "max_tokens": 1000, "ignore_eos": true, "stream": true})
            } else {
                json!({"messages": [{"role": "user", "content": format!("Story {i}, please.")}], "max_tokens": 1000, "ignore_eos": true, "stream": true})
            };
            open_stream(server.addr, path, &body)
        })
        .collect();
    assert!(server.engine.stats().num_blocks_used() > 0);
    drop(streams);
    wait_for_no_blocks(server);
    let after = parse_metrics(&get(server.addr, "/metrics").text());
    assert_eq!(metric(&after, "oxllm_kv_blocks_in_use"), 0.0);
    assert_eq!(metric(&after, "oxllm_num_requests_in_flight"), 0.0);
    let aborted =
        |m: &[(String, f64)]| metric(m, "oxllm_request_finished_total{finished_reason=\"abort\"}");
    assert_eq!(aborted(&after) - aborted(&before), 8.0);
    // The server still answers.
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_full_waiting_queue_answers_503_with_retry_after() {
    let _g = serial();
    let mut engine = engine_config();
    engine.max_num_seqs = 1;
    let mut config = server_config();
    config.max_waiting = 0;
    let server = TestServer::start(smollm2(), engine, config);
    let long = json!({"prompt": "Tell me a story.", "max_tokens": 2000, "ignore_eos": true, "stream": true});
    let running = open_stream(server.addr, "/v1/completions", &long);
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "Hi", "max_tokens": 2})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": true}),
        ),
    ] {
        let r = post(server.addr, path, &body);
        let v = assert_error(&r, 503, None);
        assert_eq!(v["error"]["type"], "server_overloaded");
        let retry: u64 = r
            .header("retry-after")
            .expect("Retry-After")
            .parse()
            .unwrap();
        assert!(retry >= 1);
    }
    drop(running);
    wait_for_no_blocks(&server);
    let r = post(
        server.addr,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    server.stop();
}

#[test]
fn shutdown_lets_running_streams_finish_then_stops_listening() {
    let _g = serial();
    let mut server = TestServer::start(smollm2(), engine_config(), server_config());
    let addr = server.addr;
    let body =
        json!({"prompt": "Count to ten:", "max_tokens": 40, "ignore_eos": true, "stream": true});
    let mut stream = open_stream(addr, "/v1/completions", &body);
    server.signal_shutdown();
    let mut rest = String::new();
    stream
        .read_to_string(&mut rest)
        .expect("read the rest of the stream");
    assert!(rest.contains("\"finish_reason\":\"length\""), "{rest}");
    assert!(
        rest.trim_end().ends_with("data: [DONE]") || rest.contains("data: [DONE]"),
        "{rest}"
    );
    server.stop();
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "still listening"
    );
}
