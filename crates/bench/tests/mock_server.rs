//! Integration: a tiny OpenAI-style streaming server in-process (tokio) and short sweeps against
//! it: every request completes, JSONL records carry the full set of fields, A/B pairs compare as
//! identical; a flaky server's failures (HTTP 500, a stream cut short, a stalled stream past the
//! timeout, an error event) are counted as failed, never lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oxllm_bench::client::Endpoint;
use oxllm_bench::compare::compare;
use oxllm_bench::http::Url;
use oxllm_bench::metrics::Slo;
use oxllm_bench::record::read_records;
use oxllm_bench::serve::{run_bench, ServeBench, Target};
use oxllm_bench::workload::{Prompt, RandomSpec, Workload};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

async fn read_request(s: &mut BufReader<TcpStream>) -> Option<(String, Value)> {
    let mut line = String::new();
    s.read_line(&mut line).await.ok()?;
    let path = line.split(' ').nth(1)?.to_string();
    let mut len = 0;
    loop {
        line.clear();
        s.read_line(&mut line).await.ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).await.ok()?;
    Some((path, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

/// Writes one HTTP chunk holding `data`, split into two TCP writes (a "split packet").
async fn chunk(s: &mut TcpStream, data: &str) -> std::io::Result<()> {
    let framed = format!("{:x}\r\n{data}\r\n", data.len());
    let mid = framed.len() / 2;
    let mid = (mid..framed.len())
        .find(|&i| framed.is_char_boundary(i))
        .unwrap_or(mid);
    s.write_all(&framed.as_bytes()[..mid]).await?;
    s.flush().await?;
    tokio::time::sleep(Duration::from_micros(300)).await;
    s.write_all(&framed.as_bytes()[mid..]).await?;
    s.flush().await
}

/// What the mock does for a prompt: the behaviour is chosen by the prompt's first word.
async fn serve_conn(stream: TcpStream, hits: Arc<AtomicUsize>) -> std::io::Result<()> {
    let mut r = BufReader::new(stream);
    let Some((path, body)) = read_request(&mut r).await else {
        return Ok(());
    };
    hits.fetch_add(1, Ordering::Relaxed);
    let mut s = r.into_inner();
    if path == "/v1/models" {
        let b = json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
            .to_string();
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        );
        return s.write_all(resp.as_bytes()).await;
    }
    let chat = path == "/v1/chat/completions";
    let prompt = if chat {
        body["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    } else {
        body["prompt"].as_str().unwrap_or("").to_string()
    };
    let max_tokens = body["max_tokens"].as_u64().unwrap_or(16) as usize;
    let first = prompt.split(' ').next().unwrap_or("");
    if first == "FAIL" {
        let b = r#"{"error":{"message":"boom","type":"server_error","param":null,"code":null}}"#;
        let resp = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        );
        return s.write_all(resp.as_bytes()).await;
    }
    s.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await?;
    chunk(&mut s, ": keep-alive\n\n").await?;
    if chat {
        chunk(&mut s, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n").await?;
    }
    // Output is a pure function of the prompt, so identical prompts give identical digests.
    let words: Vec<&str> = prompt.split(' ').collect();
    for i in 0..max_tokens {
        if first == "CUT" && i == 2 {
            return Ok(()); // connection closed mid-stream
        }
        if first == "STALL" && i == 1 {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        if first == "ERROR" && i == 1 {
            chunk(&mut s, "error: {\"message\":\"slot failed\"}\n\n").await?;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let text = format!(" {}é", words[i % words.len()]);
        let c = if chat {
            json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
        } else {
            json!({"choices": [{"index": 0, "text": text, "finish_reason": null}]})
        };
        chunk(&mut s, &format!("data: {c}\n\n")).await?;
    }
    let usage = json!({"choices": [], "usage": {"prompt_tokens": words.len(), "completion_tokens": max_tokens, "total_tokens": words.len() + max_tokens}});
    chunk(&mut s, &format!("data: {usage}\n\n")).await?;
    chunk(&mut s, "data: [DONE]\n\n").await?;
    s.write_all(b"0\r\n\r\n").await?;
    s.flush().await
}

async fn start_mock() -> (Url, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(serve_conn(s, h.clone()));
        }
    });
    (Url::parse(&format!("http://{addr}")).unwrap(), hits)
}

fn bench(
    targets: Vec<Target>,
    workload: impl Into<Workload>,
    out: std::path::PathBuf,
) -> ServeBench {
    ServeBench {
        targets,
        endpoint: Endpoint::Completions,
        temperature: 0.0,
        ignore_eos: true,
        timeout: Duration::from_secs(10),
        workload: workload.into(),
        concurrency: vec![1, 4],
        request_rate: None,
        max_concurrency: None,
        repeats: 2,
        repetition_offset: 0,
        seed: 0,
        slo: Slo {
            ttft_ms: Some(10_000.0),
            tpot_ms: Some(10_000.0),
        },
        warmup: 1,
        progress: false,
        out: Some(out),
        config: json!({"test": true}),
        commit: Some("deadbeef".into()),
    }
}

/// A results file in a fresh directory, removed when the guard drops.
fn tmp(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::Builder::new()
        .prefix(&format!("oxllm-bench-it-{name}-"))
        .tempdir()
        .unwrap();
    let file = d.path().join("results.jsonl");
    (d, file)
}

#[tokio::test(flavor = "current_thread")]
async fn ab_sweep_completes_and_records_everything() {
    let (url_a, hits_a) = start_mock().await;
    let (url_b, _) = start_mock().await;
    let model = oxllm_bench::client::first_model(&url_a).await.unwrap();
    assert_eq!(model, "mock-model");
    let (_dir, out) = tmp("ab");
    let targets = vec![
        Target {
            label: "A".into(),
            url: url_a,
            model: model.clone(),
        },
        Target {
            label: "B".into(),
            url: url_b,
            model,
        },
    ];
    let fresh = Workload::Fresh(RandomSpec {
        num: 6,
        input_len: 8,
        output_len: 5,
        prefix_len: 3,
        seed: 1,
    });
    let b = bench(targets, fresh, out.clone());
    let records = run_bench(&b).await.unwrap();
    // 2 repetitions x 2 loads x 2 servers, A before B each time.
    assert_eq!(records.len(), 8);
    let order: Vec<(String, Option<usize>, usize)> = records
        .iter()
        .map(|r| (r.label.clone(), r.concurrency, r.repetition))
        .collect();
    assert_eq!(order[0], ("A".into(), Some(1), 0));
    assert_eq!(order[1], ("B".into(), Some(1), 0));
    assert_eq!(order[2], ("A".into(), Some(4), 0));
    assert_eq!(order[7], ("B".into(), Some(4), 1));
    // 1 /v1/models + 1 warm-up + 2 reps x 2 loads x 6 prompts.
    assert_eq!(hits_a.load(Ordering::Relaxed), 1 + 1 + 24);

    let stored = read_records(&out).unwrap();
    assert_eq!(stored.len(), records.len());
    for (s, r) in stored.iter().zip(&records) {
        assert_eq!(
            (&s.label, s.concurrency, s.repetition),
            (&r.label, r.concurrency, r.repetition)
        );
        assert_eq!(s.output_sha256, r.output_sha256);
        assert!((s.metrics.output_throughput - r.metrics.output_throughput).abs() < 1e-9);
    }
    let raw = std::fs::read_to_string(&out).unwrap();
    for line in raw.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        for k in [
            "kind",
            "label",
            "url",
            "model",
            "concurrency",
            "repetition",
            "config",
            "metrics",
            "output_sha256",
            "commit",
            "machine",
            "date",
        ] {
            assert!(v.get(k).is_some(), "missing {k} in {line}");
        }
        let m = &v["metrics"];
        for k in [
            "completed",
            "failed",
            "makespan_s",
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "ttft_ms",
            "tpot_ms",
            "itl_ms",
            "e2el_ms",
            "goodput",
            "output_digest",
        ] {
            assert!(m.get(k).is_some(), "missing metrics.{k}");
        }
        for k in ["mean", "median", "p90", "p99"] {
            assert!(m["ttft_ms"][k].as_f64().is_some());
        }
        assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
        assert_eq!(v["date"].as_str().unwrap().len(), 20);
    }
    for r in &records {
        let m = &r.metrics;
        assert_eq!((m.completed, m.failed), (6, 0), "{:?}", m.errors);
        assert_eq!(m.total_output_tokens, 30);
        assert_eq!(m.total_input_tokens, Some(6 * 11));
        assert_eq!(m.good_requests, Some(6));
        assert!(m.ttft_ms.median > 0.0 && m.itl_ms.n == 6 * 4);
        assert!(m.output_throughput > 0.0 && m.makespan_s > 0.0);
        assert_eq!(r.output_sha256.len(), 6);
    }
    // The mock's output is a function of the prompt: A and B got the same prompts in each
    // run, and every (repetition, load) got prompts no other run sent.
    for pair in records.chunks(2) {
        assert_eq!(pair[0].output_sha256, pair[1].output_sha256);
        assert_eq!(pair[0].prompt_seed, pair[1].prompt_seed);
        assert!(pair[0].prompt_seed.is_some());
    }
    let mut outputs = std::collections::HashSet::new();
    for r in records.iter().step_by(2) {
        for d in &r.output_sha256 {
            assert!(outputs.insert(d.clone()), "an output repeated across runs");
        }
    }
    // The same seed draws the same prompts again.
    let again = run_bench(&b).await.unwrap();
    for (r, a) in records.iter().zip(&again) {
        assert_eq!(
            (r.prompt_seed, &r.output_sha256),
            (a.prompt_seed, &a.output_sha256)
        );
    }
    let cmp = compare(&records, "A", "B");
    assert_eq!(cmp.len(), 2);
    assert_eq!(
        (
            cmp[1].pairs,
            cmp[1].identical_outputs,
            cmp[1].compared_outputs
        ),
        (2, 12, 12)
    );
    let svg = oxllm_bench::plot::svg(&records, "mock");
    assert_eq!(svg.matches("<polyline").count(), 4);
    std::fs::remove_file(&out).ok();
}

#[tokio::test(flavor = "current_thread")]
async fn failures_are_counted_not_lost() {
    let (url, _) = start_mock().await;
    let texts = [
        "ok one two",
        "FAIL x",
        "CUT a b c",
        "ok three",
        "STALL z",
        "ERROR q",
        "ok four five",
    ];
    let prompts: Vec<Prompt> = texts
        .iter()
        .enumerate()
        .map(|(index, t)| Prompt {
            index,
            text: t.to_string(),
            max_tokens: 4,
        })
        .collect();
    let (_dir, out) = tmp("flaky");
    let mut b = bench(
        vec![Target {
            label: "flaky".into(),
            url,
            model: "m".into(),
        }],
        prompts.clone(),
        out.clone(),
    );
    b.warmup = 0;
    b.repeats = 1;
    b.concurrency = vec![3];
    b.timeout = Duration::from_millis(1500);
    let records = run_bench(&b).await.unwrap();
    let m = &records[0].metrics;
    assert_eq!((m.completed, m.failed), (3, 4), "{:?}", m.errors);
    assert_eq!(
        records[0]
            .output_sha256
            .iter()
            .filter(|d| d.is_none())
            .count(),
        4
    );
    let errs = m.errors.join(" | ");
    for needle in ["HTTP 500", "timed out", "error event", "closed"] {
        assert!(errs.contains(needle), "{needle} not in {errs}");
    }
    // The stalled request holds the run open until its timeout.
    assert!(m.makespan_s >= 1.4, "{}", m.makespan_s);

    // Chat and open loop against the same mock.
    b.endpoint = Endpoint::Chat;
    b.request_rate = Some(200.0);
    b.workload = Workload::Fixed(
        prompts
            .into_iter()
            .filter(|p| p.text.starts_with("ok"))
            .collect(),
    );
    let records = run_bench(&b).await.unwrap();
    assert_eq!(records[0].request_rate, Some(200.0));
    assert_eq!(
        (records[0].metrics.completed, records[0].metrics.failed),
        (3, 0)
    );
    std::fs::remove_file(&out).ok();
}
