//! The same measurements under vLLM's metric names and labels, so that routers and autoscalers
//! made for vLLM read oxllm unchanged: the Gateway API Inference Extension's endpoint picker
//! and llm-d (`vllm:num_requests_waiting`, `vllm:num_requests_running`,
//! `vllm:kv_cache_usage_perc`, `vllm:cache_config_info`), prometheus-adapter rules for an HPA,
//! and the common vLLM Grafana dashboards (latency histograms, token and request counters).
//!
//! Every series carries `model_name` (the served model name). Units and meanings follow vLLM's:
//! KV usage is a fraction in 0..1; prefix-cache queries and hits count prompt tokens;
//! `time_per_output_token_seconds` observes every gap between two generated tokens (a delta of
//! k tokens counts k gaps of a k-th of its wait each).

use std::fmt::Write;

use oxllm_engine::{EngineInfo, EngineStats};

use crate::metrics::Inner;

/// Appends the vLLM-named series to `out`.
pub(crate) fn render(
    out: &mut String,
    m: &Inner,
    stats: &EngineStats,
    info: &EngineInfo,
    model_name: &str,
) {
    let label = format!("model_name=\"{}\"", escape(model_name));
    let usable = info.num_blocks.saturating_sub(1);
    let gauges = [
        (
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            stats.num_running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            stats.num_waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            stats.num_blocks_used() as f64 / usable.max(1) as f64,
        ),
    ];
    for (name, help, v) in gauges {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{label}}} {v}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP vllm:cache_config_info Information of the KV cache configuration.\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{label},block_size=\"{}\",num_gpu_blocks=\"{usable}\",cache_dtype=\"{}\"}} 1",
        info.block_size,
        info.kv_dtype.name()
    );
    let counters = [
        (
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_queried_tokens,
        ),
        (
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_hit_tokens,
        ),
        (
            "vllm:prompt_tokens",
            "Number of prefill tokens processed.",
            m.prompt_tokens,
        ),
        (
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            m.generation_tokens,
        ),
        (
            "vllm:num_preemptions",
            "Cumulative number of preemptions from the engine.",
            stats.num_preemptions,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP {name}_total {help}\n# TYPE {name}_total counter\n{name}_total{{{label}}} {v}"
        );
    }
    out.push_str("# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\n");
    for reason in ["stop", "length", "abort"] {
        let n = m.finished.get(reason).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{label},finished_reason=\"{reason}\"}} {n}"
        );
    }
    let prefix = format!("{label},");
    m.ttft.render_labelled(
        out,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &prefix,
    );
    m.inter_token.render_labelled(
        out,
        "vllm:time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        &prefix,
    );
    m.e2e.render_labelled(
        out,
        "vllm:e2e_request_latency_seconds",
        "Histogram of end to end request latency in seconds.",
        &prefix,
    );
}

/// A label value as the exposition format wants it (backslash, quote and newline escaped).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
