//! One log line per HTTP request (an `info` record of target `oxllm::request`), written when the request is over (the response
//! sent, its stream ended, or the client gone):
//!
//! `oxllm serve: request chatcmpl-… POST /v1/chat/completions 200 prompt_tokens=37
//! completion_tokens=20 ttft_ms=41.2 total_ms=803.5 finish=length`
//!
//! The router opens a [`RequestLog`] per request and runs the handler inside it (a task-local),
//! so the response id minted by the handler and the engine requests it submits attach to it
//! without being passed around; the streams that outlive the handler keep it alive, so a
//! streamed response is logged when its last event has gone out. Probes (`GET /health`,
//! `GET /metrics`) are not logged.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

tokio::task_local! {
    static CURRENT: Arc<RequestLog>;
}

/// What one request did, filled in as it runs and printed when the last holder drops it.
pub struct RequestLog {
    method: String,
    path: String,
    start: Instant,
    inner: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    id: Option<String>,
    status: Option<u16>,
    generated: bool,
    prompt_tokens: usize,
    completion_tokens: usize,
    first_token_ms: Option<f64>,
    finish: Vec<&'static str>,
}

impl RequestLog {
    pub fn new(method: &str, path: &str) -> Arc<Self> {
        Arc::new(RequestLog {
            method: method.to_string(),
            path: path.to_string(),
            start: Instant::now(),
            inner: Mutex::new(Seen::default()),
        })
    }

    fn with(&self, f: impl FnOnce(&mut Seen)) {
        // A poisoned lock only means another holder panicked mid-update; the counts stay usable.
        let mut seen = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut seen);
    }

    /// The response's HTTP status, once its head is ready.
    pub fn set_status(&self, status: u16) {
        self.with(|s| s.status = Some(status));
    }

    /// A generated token arrived: the first one sets the time to first token.
    pub fn token(&self) {
        let ms = self.start.elapsed().as_secs_f64() * 1e3;
        self.with(|s| {
            s.generated = true;
            s.first_token_ms.get_or_insert(ms);
        });
    }

    /// One engine request (a choice) ended; `prompt_tokens` counts each prompt once.
    pub fn finished(&self, reason: &'static str, prompt_tokens: usize, completion_tokens: usize) {
        self.with(|s| {
            s.generated = true;
            s.prompt_tokens += prompt_tokens;
            s.completion_tokens += completion_tokens;
            if !s.finish.contains(&reason) {
                s.finish.push(reason);
            }
        });
    }

    fn line(&self, seen: &Seen) -> String {
        let mut line = format!(
            "oxllm serve: request {} {} {} {}",
            seen.id.as_deref().unwrap_or("-"),
            self.method,
            self.path,
            seen.status.map_or("-".to_string(), |s| s.to_string())
        );
        if seen.generated {
            let _ = write!(
                line,
                " prompt_tokens={} completion_tokens={}",
                seen.prompt_tokens, seen.completion_tokens
            );
            if let Some(ms) = seen.first_token_ms {
                let _ = write!(line, " ttft_ms={ms:.1}");
            }
        }
        let _ = write!(
            line,
            " total_ms={:.1}",
            self.start.elapsed().as_secs_f64() * 1e3
        );
        if !seen.finish.is_empty() {
            let _ = write!(line, " finish={}", seen.finish.join(","));
        }
        line
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        let seen = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        log::info!(target: "oxllm::request", "{}", self.line(&seen));
    }
}

/// Whether requests to `path` get a line (probes do not).
pub fn is_logged(path: &str) -> bool {
    !matches!(path, "/health" | "/metrics")
}

/// Runs `f` (the request's handler) with `log` as the current request's log.
pub async fn scope<F: Future>(log: Arc<RequestLog>, f: F) -> F::Output {
    CURRENT.scope(log, f).await
}

/// The log of the request whose handler is running, if any.
pub fn current() -> Option<Arc<RequestLog>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// Names the current request by the first response id minted for it.
pub fn note_id(id: &str) {
    if let Some(log) = current() {
        log.with(|s| {
            s.id.get_or_insert_with(|| id.to_string());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_line_names_the_id_tokens_and_status() {
        let log = RequestLog::new("POST", "/v1/completions");
        let inner = log.clone();
        scope(log.clone(), async move {
            note_id("cmpl-1");
            note_id("cmpl-2");
            let cur = current().expect("inside the scope");
            cur.token();
            cur.token();
            cur.finished("stop", 5, 3);
            cur.finished("length", 0, 4);
        })
        .await;
        assert!(current().is_none());
        inner.set_status(200);
        let line = inner.line(&inner.inner.lock().unwrap());
        assert!(
            line.starts_with("oxllm serve: request cmpl-1 POST /v1/completions 200 prompt_tokens=5 completion_tokens=7 ttft_ms="),
            "{line}"
        );
        assert!(
            line.contains(" total_ms=") && line.ends_with(" finish=stop,length"),
            "{line}"
        );
        let bare = RequestLog::new("GET", "/v1/models");
        bare.set_status(200);
        let line = bare.line(&bare.inner.lock().unwrap());
        assert!(!line.contains("tokens"), "{line}");
        assert!(!is_logged("/health") && is_logged("/v1/models"));
    }
}
