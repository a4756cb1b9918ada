//! Prometheus metrics: the server's own counters and latency histograms, plus gauges read from
//! the engine's published [`EngineStats`] at scrape time, rendered in the text exposition format
//! under oxllm's names and, for routers and dashboards made for vLLM, under vLLM's
//! ([`crate::vllm_metrics`]).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use oxllm_engine::{EngineInfo, EngineStats};

const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
];
const TPOT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
];

#[derive(Clone, Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, v: f64) {
        self.observe_n(v, 1);
    }

    fn observe_n(&mut self, v: f64, n: u64) {
        if let Some(i) = self.bounds.iter().position(|&b| v <= b) {
            self.counts[i] += n;
        }
        self.sum += v * n as f64;
        self.count += n;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        self.render_labelled(out, name, help, "");
    }

    /// `labels` is empty or `key="value",` pairs, each followed by a comma.
    pub(crate) fn render_labelled(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c;
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{b}\"}} {cum}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {}", self.count);
        let bare = match labels.trim_end_matches(',') {
            "" => String::new(),
            l => format!("{{{l}}}"),
        };
        let _ = writeln!(out, "{name}_sum{bare} {}", self.sum);
        let _ = writeln!(out, "{name}_count{bare} {}", self.count);
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    http: BTreeMap<(&'static str, u16), u64>,
    pub(crate) finished: BTreeMap<&'static str, u64>,
    pub(crate) prompt_tokens: u64,
    pub(crate) generation_tokens: u64,
    pub(crate) ttft: Histogram,
    /// KV-cache event batches subscribers of `/v1/kv_events` fell too far behind to get.
    kv_events_dropped: u64,
    tpot: Histogram,
    /// Every gap between two generated tokens (vLLM's `time_per_output_token`).
    pub(crate) inter_token: Histogram,
    pub(crate) e2e: Histogram,
}

/// The server's metrics registry.
#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            inner: Mutex::new(Inner {
                http: BTreeMap::new(),
                finished: BTreeMap::new(),
                prompt_tokens: 0,
                generation_tokens: 0,
                ttft: Histogram::new(LATENCY_BUCKETS),
                kv_events_dropped: 0,
                tpot: Histogram::new(TPOT_BUCKETS),
                inter_token: Histogram::new(TPOT_BUCKETS),
                e2e: Histogram::new(LATENCY_BUCKETS),
            }),
        }
    }
}

/// How one engine request ended, for the counters.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    /// `stop`, `length`, `abort` (client gone) or `error`.
    pub reason: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub ttft: Option<Duration>,
    pub e2e: Duration,
}

impl Metrics {
    fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut g)
    }

    /// `n` KV-cache event batches a `/v1/kv_events` subscriber missed (it fell behind).
    pub fn observe_kv_events_dropped(&self, n: u64) {
        self.with(|m| m.kv_events_dropped += n);
    }

    /// One HTTP response on `endpoint` (a fixed route name) with `status`.
    pub fn observe_http(&self, endpoint: &'static str, status: u16) {
        self.with(|m| *m.http.entry((endpoint, status)).or_default() += 1);
    }

    pub fn observe_first_token(&self, ttft: Duration) {
        self.with(|m| m.ttft.observe(ttft.as_secs_f64()));
    }

    /// `tokens` tokens generated `gap` after the previous ones: each counts `gap / tokens`.
    pub fn observe_inter_token(&self, gap: Duration, tokens: usize) {
        if tokens > 0 {
            let each = gap.as_secs_f64() / tokens as f64;
            self.with(|m| m.inter_token.observe_n(each, tokens as u64));
        }
    }

    pub fn observe_finished(&self, f: Finished) {
        self.with(|m| {
            *m.finished.entry(f.reason).or_default() += 1;
            m.prompt_tokens += f.prompt_tokens as u64;
            m.generation_tokens += f.completion_tokens as u64;
            m.e2e.observe(f.e2e.as_secs_f64());
            if let (Some(ttft), true) = (f.ttft, f.completion_tokens > 1) {
                let decode = f.e2e.saturating_sub(ttft).as_secs_f64();
                m.tpot.observe(decode / (f.completion_tokens - 1) as f64);
            }
        });
    }

    /// The Prometheus text exposition; `model_name` labels the vLLM-named series.
    pub fn render(
        &self,
        stats: &EngineStats,
        info: &EngineInfo,
        in_flight: usize,
        model_name: &str,
    ) -> String {
        let mut out = String::with_capacity(16384);
        self.with(|m| {
            crate::vllm_metrics::render(&mut out, m, stats, info, model_name);
            out.push_str("# HELP oxllm_http_requests_total HTTP responses by endpoint and status code.\n# TYPE oxllm_http_requests_total counter\n");
            for ((endpoint, status), n) in &m.http {
                let _ = writeln!(
                    out,
                    "oxllm_http_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
            out.push_str("# HELP oxllm_request_finished_total Engine requests (choices) by how they ended.\n# TYPE oxllm_request_finished_total counter\n");
            for reason in ["stop", "length", "abort", "error"] {
                let n = m.finished.get(reason).copied().unwrap_or(0);
                let _ = writeln!(
                    out,
                    "oxllm_request_finished_total{{finished_reason=\"{reason}\"}} {n}"
                );
            }
            counter(
                &mut out,
                "oxllm_prompt_tokens_total",
                "Prompt tokens of finished requests.",
                m.prompt_tokens,
            );
            counter(
                &mut out,
                "oxllm_generation_tokens_total",
                "Generated tokens of finished requests.",
                m.generation_tokens,
            );
            m.ttft.render(
                &mut out,
                "oxllm_time_to_first_token_seconds",
                "Time from submission to the first generated token.",
            );
            m.tpot.render(
                &mut out,
                "oxllm_time_per_output_token_seconds",
                "Mean time between generated tokens after the first, per request.",
            );
            m.e2e.render(
                &mut out,
                "oxllm_e2e_request_latency_seconds",
                "Time from submission to the last token.",
            );
            counter(
                &mut out,
                "oxllm_kv_events_dropped_total",
                "KV-cache event batches /v1/kv_events subscribers missed by falling behind.",
                m.kv_events_dropped,
            );
        });
        gauge(
            &mut out,
            "oxllm_num_requests_running",
            "Requests the engine is running.",
            stats.num_running as f64,
        );
        gauge(
            &mut out,
            "oxllm_num_requests_waiting",
            "Requests waiting for a slot in the engine.",
            stats.num_waiting as f64,
        );
        gauge(
            &mut out,
            "oxllm_num_requests_in_flight",
            "Engine requests admitted by the server and not finished.",
            in_flight as f64,
        );
        gauge(
            &mut out,
            "oxllm_kv_blocks_in_use",
            "KV cache blocks referenced by requests.",
            stats.num_blocks_used() as f64,
        );
        gauge(
            &mut out,
            "oxllm_kv_blocks_total",
            "KV cache blocks usable by requests.",
            info.num_blocks.saturating_sub(1) as f64,
        );
        let usage =
            stats.num_blocks_used() as f64 / info.num_blocks.saturating_sub(1).max(1) as f64;
        gauge(
            &mut out,
            "oxllm_kv_cache_usage_ratio",
            "Fraction of KV blocks in use.",
            usage,
        );
        counter(
            &mut out,
            "oxllm_prefix_cache_queries_total",
            "Prompt tokens looked up in the prefix cache.",
            stats.prefix_queried_tokens,
        );
        counter(
            &mut out,
            "oxllm_prefix_cache_hits_total",
            "Prompt tokens found in the prefix cache.",
            stats.prefix_hit_tokens,
        );
        let rate = if stats.prefix_queried_tokens == 0 {
            0.0
        } else {
            stats.prefix_hit_tokens as f64 / stats.prefix_queried_tokens as f64
        };
        gauge(
            &mut out,
            "oxllm_prefix_cache_hit_rate",
            "Prefix-cache hits over queries since start.",
            rate,
        );
        if stats.num_state_slots_total > 0 {
            gauge(
                &mut out,
                "oxllm_state_slots_in_use",
                "Recurrent-state slots held by running sequences (hybrid models).",
                stats
                    .num_state_slots_total
                    .saturating_sub(stats.num_state_slots_free) as f64,
            );
            gauge(
                &mut out,
                "oxllm_state_slots_total",
                "Recurrent-state slots: the most sequences that run at once (hybrid models).",
                stats.num_state_slots_total as f64,
            );
            gauge(
                &mut out,
                "oxllm_state_checkpoints",
                "Recurrent-state checkpoints held for prefix hits (hybrid models).",
                stats.num_state_checkpoints as f64,
            );
        }
        counter(
            &mut out,
            "oxllm_num_preemptions_total",
            "Requests preempted for lack of KV blocks.",
            stats.num_preemptions,
        );
        counter(
            &mut out,
            "oxllm_stop_match_bytes_total",
            "Generated text bytes fed to stop-string matchers on the engine thread.",
            stats.stop_match_bytes,
        );
        counter(
            &mut out,
            "oxllm_stop_match_steps_total",
            "Stop-string matcher steps (at most twice the bytes fed, whatever the stop lists).",
            stats.stop_match_steps,
        );
        counter(
            &mut out,
            "oxllm_plan_replay_steps_total",
            "Engine steps that replayed a captured plan.",
            stats.plan_steps,
        );
        counter(
            &mut out,
            "oxllm_eager_steps_total",
            "Engine steps that ran eager (no captured plan served their shape).",
            stats.eager_steps,
        );
        counter(
            &mut out,
            "oxllm_engine_steps_total",
            "Engine steps run.",
            stats.steps,
        );
        out
    }
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

fn gauge(out: &mut String, name: &str, help: &str, v: f64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counters_move() {
        let m = Metrics::default();
        m.observe_http("completions", 200);
        m.observe_http("completions", 400);
        m.observe_first_token(Duration::from_millis(30));
        m.observe_finished(Finished {
            reason: "length",
            prompt_tokens: 5,
            completion_tokens: 11,
            ttft: Some(Duration::from_millis(30)),
            e2e: Duration::from_millis(130),
        });
        let info = EngineInfo {
            num_blocks: 11,
            block_size: 16,
            max_model_len: 64,
            max_num_seqs: 4,
            max_num_batched_tokens: 64,
            vocab_size: 10,
            kv_bytes: 0,
            kv_dtype: oxllm_engine::KvDtype::F32,
            plans: Default::default(),
            states: None,
        };
        let stats = EngineStats {
            plan_steps: 7,
            eager_steps: 2,
            num_state_slots_total: 4,
            num_state_slots_free: 1,
            num_state_checkpoints: 5,
            stop_match_bytes: 12,
            stop_match_steps: 20,
            ..EngineStats::default()
        };
        let text = m.render(&stats, &info, 0, "m");
        assert!(text.contains("oxllm_plan_replay_steps_total 7"));
        assert!(text.contains("oxllm_eager_steps_total 2"));
        assert!(text.contains("oxllm_stop_match_bytes_total 12"));
        assert!(text.contains("oxllm_stop_match_steps_total 20"));
        assert!(text.contains("oxllm_state_slots_in_use 3"), "{text}");
        assert!(text.contains("oxllm_state_checkpoints 5"));
        let dense = m.render(&EngineStats::default(), &info, 0, "m");
        assert!(!dense.contains("oxllm_state_slots"));
        assert!(
            text.contains("oxllm_http_requests_total{endpoint=\"completions\",status=\"400\"} 1")
        );
        assert!(text.contains("oxllm_time_to_first_token_seconds_bucket{le=\"0.025\"} 0"));
        assert!(text.contains("oxllm_time_to_first_token_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("oxllm_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1"));
        assert!(text.contains("oxllm_time_per_output_token_seconds_bucket{le=\"0.01\"} 1"));
        assert!(text.contains("oxllm_generation_tokens_total 11"));
        assert!(text.contains("oxllm_kv_blocks_total 10"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
