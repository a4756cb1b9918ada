//! One streaming request against an OpenAI-compatible server and the timeline it leaves.
//!
//! Timing: the clock starts right before the connection is opened. Each SSE event whose
//! `choices[0].text` (completions) or `choices[0].delta.content` (chat) is non-empty is an
//! output chunk, time-stamped when its bytes were read; TTFT is the first chunk's time, ITLs the
//! gaps between successive chunks, E2EL the time the stream ended (`[DONE]`). Token counts come
//! from the final `usage` chunk (`stream_options.include_usage`); without one, output tokens are
//! counted as chunks and the prompt's tokens are unknown.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::error::{BenchError, Result};
use crate::http::{post_json, Url};
use crate::sse::SseParser;
use crate::workload::Prompt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }
}

/// What every request of a run shares.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub url: Url,
    pub model: String,
    pub endpoint: Endpoint,
    pub temperature: f64,
    pub ignore_eos: bool,
    pub timeout: Duration,
}

/// A finished request, successful or not. Times are seconds; `start_s` is from the run's start,
/// the others from the request's start.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    pub index: usize,
    pub error: Option<String>,
    pub start_s: f64,
    /// Arrival times of the output chunks.
    pub chunk_times: Vec<f64>,
    pub e2el_s: f64,
    pub text: String,
    pub prompt_tokens: Option<usize>,
    pub completion_tokens: Option<usize>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }

    pub fn ttft_s(&self) -> Option<f64> {
        self.chunk_times.first().copied()
    }

    /// Output tokens: the server's count, else the number of chunks.
    pub fn output_tokens(&self) -> usize {
        self.completion_tokens.unwrap_or(self.chunk_times.len())
    }
}

pub fn request_body(cfg: &ClientConfig, p: &Prompt) -> Value {
    let mut body = json!({
        "model": cfg.model,
        "max_tokens": p.max_tokens,
        "temperature": cfg.temperature,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    match cfg.endpoint {
        Endpoint::Completions => body["prompt"] = json!(p.text),
        Endpoint::Chat => body["messages"] = json!([{"role": "user", "content": p.text}]),
    }
    if cfg.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    body
}

/// Sends one request and records its timeline; never panics on what the server sends.
pub async fn run_request(cfg: &ClientConfig, p: &Prompt, run_start: Instant) -> Outcome {
    let t0 = Instant::now();
    let mut out = Outcome {
        index: p.index,
        start_s: (t0 - run_start).as_secs_f64(),
        ..Outcome::default()
    };
    let res = tokio::time::timeout(cfg.timeout, stream(cfg, p, t0, &mut out)).await;
    out.e2el_s = t0.elapsed().as_secs_f64();
    match res {
        Ok(Ok(())) => {}
        Ok(Err(e)) => out.error = Some(e.to_string()),
        Err(_) => out.error = Some(BenchError::Timeout(cfg.timeout.as_secs_f64()).to_string()),
    }
    out
}

async fn stream(cfg: &ClientConfig, p: &Prompt, t0: Instant, out: &mut Outcome) -> Result<()> {
    let body = serde_json::to_vec(&request_body(cfg, p))?;
    let mut resp = post_json(&cfg.url, cfg.endpoint.path(), &body).await?;
    if resp.status != 200 {
        let body = resp.read_all(64 * 1024).await.unwrap_or_default();
        let mut text = String::from_utf8_lossy(&body).into_owned();
        text.truncate(500);
        return Err(BenchError::Status {
            status: resp.status,
            body: text,
        });
    }
    let mut parser = SseParser::new();
    let mut done = false;
    loop {
        let bytes = resp.next_bytes().await?;
        let now = t0.elapsed().as_secs_f64();
        let events = match &bytes {
            Some(b) => parser.feed(b),
            None => parser.finish().into_iter().collect(),
        };
        for ev in events {
            if ev.event.as_deref() == Some("error") {
                return Err(BenchError::Response(format!("error event: {}", ev.data)));
            }
            if ev.data.trim() == "[DONE]" {
                done = true;
                continue;
            }
            if done {
                continue;
            }
            handle_chunk(cfg.endpoint, &ev.data, now, out)?;
        }
        if bytes.is_none() || done {
            break;
        }
    }
    if !done {
        return Err(BenchError::Response(
            "the stream ended without data: [DONE]".into(),
        ));
    }
    if out.chunk_times.is_empty() {
        return Err(BenchError::Response(
            "the stream carried no output text".into(),
        ));
    }
    Ok(())
}

fn handle_chunk(endpoint: Endpoint, data: &str, now: f64, out: &mut Outcome) -> Result<()> {
    let v: Value = serde_json::from_str(data)
        .map_err(|e| BenchError::Response(format!("chunk is not JSON ({e}): {data:.200}")))?;
    if let Some(err) = v.get("error") {
        return Err(BenchError::Response(format!("error chunk: {err}")));
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|n| n as usize);
        out.prompt_tokens = n("prompt_tokens").or(out.prompt_tokens);
        out.completion_tokens = n("completion_tokens").or(out.completion_tokens);
    }
    let choice = v.get("choices").and_then(|c| c.get(0));
    let text = choice.and_then(|c| match endpoint {
        Endpoint::Completions => c.get("text"),
        Endpoint::Chat => c.get("delta").and_then(|d| d.get("content")),
    });
    if let Some(t) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) {
        out.chunk_times.push(now);
        out.text.push_str(t);
    }
    Ok(())
}

/// `GET /v1/models` and the first model's id, for when `--model` is not given.
pub async fn first_model(url: &Url) -> Result<String> {
    let mut resp = crate::http::get(url, "/v1/models").await?;
    let body = resp.read_all(1 << 20).await?;
    if resp.status != 200 {
        return Err(BenchError::Status {
            status: resp.status,
            body: String::from_utf8_lossy(&body).chars().take(500).collect(),
        });
    }
    let v: Value = serde_json::from_slice(&body)?;
    v.get("data")
        .and_then(|d| d.get(0))
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| BenchError::Response("/v1/models lists no model".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_and_usage() {
        let mut o = Outcome::default();
        handle_chunk(
            Endpoint::Completions,
            r#"{"choices":[{"text":"a"}]}"#,
            0.1,
            &mut o,
        )
        .unwrap();
        handle_chunk(
            Endpoint::Completions,
            r#"{"choices":[{"text":""}]}"#,
            0.2,
            &mut o,
        )
        .unwrap();
        handle_chunk(
            Endpoint::Completions,
            r#"{"choices":[{"text":"b","finish_reason":"length"}]}"#,
            0.3,
            &mut o,
        )
        .unwrap();
        handle_chunk(
            Endpoint::Completions,
            r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}"#,
            0.4,
            &mut o,
        )
        .unwrap();
        assert_eq!(o.text, "ab");
        assert_eq!(o.chunk_times, [0.1, 0.3]);
        assert_eq!((o.prompt_tokens, o.completion_tokens), (Some(4), Some(3)));
        assert_eq!(o.output_tokens(), 3);
        assert!(handle_chunk(Endpoint::Completions, "not json", 0.5, &mut o).is_err());
        assert!(handle_chunk(
            Endpoint::Completions,
            r#"{"error":{"message":"x"}}"#,
            0.5,
            &mut o
        )
        .is_err());

        let mut c = Outcome::default();
        handle_chunk(
            Endpoint::Chat,
            r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#,
            0.1,
            &mut c,
        )
        .unwrap();
        handle_chunk(
            Endpoint::Chat,
            r#"{"choices":[{"delta":{"content":"hi"}}]}"#,
            0.2,
            &mut c,
        )
        .unwrap();
        assert_eq!((c.text.as_str(), c.chunk_times.len()), ("hi", 1));
    }

    #[test]
    fn bodies() {
        let cfg = ClientConfig {
            url: Url::parse("http://127.0.0.1:1").unwrap(),
            model: "m".into(),
            endpoint: Endpoint::Chat,
            temperature: 0.0,
            ignore_eos: false,
            timeout: Duration::from_secs(1),
        };
        let p = Prompt {
            index: 0,
            text: "x".into(),
            max_tokens: 5,
        };
        let b = request_body(&cfg, &p);
        assert_eq!(b["messages"][0]["content"], "x");
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert!(b.get("ignore_eos").is_none());
        let b = request_body(
            &ClientConfig {
                endpoint: Endpoint::Completions,
                ignore_eos: true,
                ..cfg
            },
            &p,
        );
        assert_eq!(
            (b["prompt"].as_str(), b["ignore_eos"].as_bool()),
            (Some("x"), Some(true))
        );
    }
}
