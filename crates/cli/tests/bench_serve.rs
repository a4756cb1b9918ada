//! Integration: `oxllm bench serve` against `oxllm serve` on loopback with the default model
//! (SmolLM2 Q4_1): a short closed-loop sweep completes every request, the JSONL records carry
//! the configuration, metrics, digests, commit, machine and date, and greedy output is the same
//! across repetitions and concurrency levels (batch invariance, seen from the outside).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oxllm_bench::http::{get, Url};
use oxllm_bench::serve::block_on;
use serde_json::Value;

fn smollm2() -> PathBuf {
    let p = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/oxllm")))
        .expect("HOME or OXLLM_CACHE")
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn healthy(url: &Url) -> bool {
    block_on(async {
        match get(url, "/health").await {
            Ok(r) => r.status == 200,
            Err(_) => false,
        }
    })
    .unwrap_or(false)
}

#[test]
fn bench_serve_against_oxllm_serve() {
    let exe = env!("CARGO_BIN_EXE_oxllm");
    let model = smollm2();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("oxllm-bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = std::fs::File::create(dir.join("serve.log")).unwrap();
    let mut server = Server(
        Command::new(exe)
            .args(["serve", "--model"])
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--threads", "2", "--max-num-seqs", "4"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("oxllm serve starts"),
    );
    let url = Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let t0 = Instant::now();
    while !healthy(&url) {
        if let Ok(Some(status)) = server.0.try_wait() {
            let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
            panic!("oxllm serve exited with {status}:\n{log}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "oxllm serve not healthy after 120 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let out = dir.join("results.jsonl");
    let status = Command::new(exe)
        .args([
            "bench",
            "serve",
            "--url",
            &url.to_string(),
            "--label",
            "oxllm",
        ])
        .args([
            "--num-prompts",
            "6",
            "--input-len",
            "24",
            "--output-len",
            "8",
        ])
        .args(["--concurrency", "1,4", "--repeats", "2", "--no-progress"])
        // The same prompts in every run, so outputs can be compared across batch sizes.
        .arg("--reuse-prompts")
        .args(["--slo-ttft-ms", "600000", "--slo-tpot-ms", "600000"])
        .arg("--out")
        .arg(&out)
        .status()
        .expect("oxllm bench serve runs");
    assert!(status.success());

    let text = std::fs::read_to_string(&out).unwrap();
    let recs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(recs.len(), 4, "2 concurrencies x 2 repetitions");
    for r in &recs {
        for k in [
            "label",
            "url",
            "model",
            "concurrency",
            "repetition",
            "config",
            "commit",
            "machine",
            "date",
            "output_sha256",
        ] {
            assert!(r.get(k).is_some(), "missing {k}");
        }
        assert_eq!(r["config"]["output_len"], 8);
        assert_eq!(r["config"]["ignore_eos"], true);
        let m = &r["metrics"];
        assert_eq!(m["completed"], 6, "errors: {}", m["errors"]);
        assert_eq!(m["failed"], 0);
        // ignore_eos: every request generates exactly max_tokens.
        assert_eq!(m["total_output_tokens"], 6 * 8);
        assert!(m["total_input_tokens"].as_u64().unwrap() >= 6 * 20);
        assert_eq!(m["good_requests"], 6);
        assert!(m["ttft_ms"]["median"].as_f64().unwrap() > 0.0);
        assert!(m["output_throughput"].as_f64().unwrap() > 0.0);
    }
    // Greedy output does not depend on the batch it ran in.
    let digests: Vec<&Value> = recs
        .iter()
        .map(|r| &r["metrics"]["output_digest"])
        .collect();
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    std::fs::remove_dir_all(&dir).ok();
}
