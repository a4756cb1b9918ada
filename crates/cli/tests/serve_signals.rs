//! `oxllm serve` and its stop signals, through the real binary: the first Ctrl-C says at once
//! how many requests it drains and for how long, a second one exits at once (130); SIGTERM on an
//! idle server exits 0 right away; `OXLLM_LOG` quiets the libraries' log lines (drain notes,
//! the request log) but not the binary's own output.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

fn smollm2() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let p = std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(home).join(".cache/oxllm"))
        .join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} missing: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

/// A running `oxllm serve` and its stderr lines.
struct Serve {
    child: Child,
    lines: Receiver<String>,
    addr: String,
}

impl Serve {
    fn start() -> Serve {
        Serve::start_logging(None)
    }

    /// Starts with `OXLLM_LOG` set to `level` (unset: the default level).
    fn start_logging(level: Option<&str>) -> Serve {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxllm"));
        cmd.env_remove("OXLLM_LOG");
        if let Some(level) = level {
            cmd.env("OXLLM_LOG", level);
        }
        let mut child = cmd
            .args([
                "serve",
                "--port",
                "0",
                "--threads",
                "1",
                "--max-num-seqs",
                "4",
            ])
            .args(["--kv-cache-memory", &(64 << 20).to_string()])
            .arg("--model")
            .arg(smollm2())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start oxllm serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut serve = Serve {
            child,
            lines,
            addr: String::new(),
        };
        let line = serve.wait_for("listening on http://", Duration::from_secs(120));
        serve.addr = line
            .rsplit("http://")
            .next()
            .expect("address")
            .trim()
            .to_string();
        serve
    }

    /// The first stderr line containing `needle`.
    fn wait_for(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(e) => panic!("no line with {needle:?} on stderr: {e}"),
            }
        }
    }

    /// Every stderr line still to come, up to the process's end.
    fn rest(&self) -> Vec<String> {
        self.lines.iter().collect()
    }

    /// Sends `GET path` and reads the whole response.
    fn get(&self, path: &str) -> String {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .expect("send");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        out
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{name}");
    }

    /// The exit status, waiting up to `within`.
    fn exit_within(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("oxllm serve still running after {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Opens a long streamed completion and waits for its first event.
    fn open_long_stream(&self) -> TcpStream {
        let body =
            r#"{"prompt": "Count:", "max_tokens": 1000, "ignore_eos": true, "stream": true}"#;
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        write!(
            s,
            "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&seen).contains("data: ") {
            let k = s.read(&mut buf).expect("read");
            assert!(k > 0, "closed before the first event");
            seen.extend_from_slice(&buf[..k]);
        }
        s
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn first_ctrl_c_says_what_it_drains_and_a_second_exits_at_once() {
    let mut serve = Serve::start();
    let _stream = serve.open_long_stream();
    serve.signal("INT");
    let line = serve.wait_for("draining", Duration::from_secs(5));
    assert!(
        line.contains("draining 1 requests (up to 30 s); Ctrl-C again to stop now"),
        "{line}"
    );
    let second = Instant::now();
    serve.signal("INT");
    let status = serve.exit_within(Duration::from_secs(10));
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "took {:?}",
        second.elapsed()
    );
    assert_eq!(status.code(), Some(130), "{status:?}");
}

#[test]
fn sigterm_on_an_idle_server_exits_zero_at_once() {
    let mut serve = Serve::start();
    let start = Instant::now();
    serve.signal("TERM");
    let status = serve.exit_within(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    serve.wait_for("draining 0 requests", Duration::from_secs(1));
}

#[test]
fn oxllm_log_sets_which_library_lines_reach_stderr() {
    for (level, shown) in [(None, true), (Some("warn"), false)] {
        let mut serve = Serve::start_logging(level);
        assert!(serve.get("/v1/models").starts_with("HTTP/1.1 200"));
        serve.signal("TERM");
        assert!(serve.exit_within(Duration::from_secs(20)).success());
        let lines = serve.rest();
        let request_line = lines
            .iter()
            .any(|l| l.starts_with("oxllm serve: request - GET /v1/models 200 "));
        let drain_line = lines.iter().any(|l| l.contains("draining 0 requests"));
        assert_eq!(
            (request_line, drain_line),
            (shown, shown),
            "OXLLM_LOG={level:?}: {lines:#?}"
        );
    }
}
