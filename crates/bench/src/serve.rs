//! `bench serve`: runs the workload against one server, or two interleaved (A B A B: for each
//! repetition and each load, A's run then B's, on the same prompts), writing one JSONL record
//! per run as it finishes. A random workload draws fresh prompts for every (repetition, load)
//! and for the warm-up (see `workload`), so one run's prompts are never cached by another's.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::{run_request, ClientConfig, Endpoint};
use crate::error::{BenchError, Result};
use crate::http::Url;
use crate::metrics::{compute, output_digests, Slo};
use crate::progress::Progress;
use crate::record::{append_jsonl, utc_now, Machine, RunRecord};
use crate::runner::{run, Load};
use crate::workload::{RunKey, Workload};

#[derive(Clone, Debug)]
pub struct Target {
    pub label: String,
    pub url: Url,
    pub model: String,
}

#[derive(Clone, Debug)]
pub struct ServeBench {
    pub targets: Vec<Target>,
    pub endpoint: Endpoint,
    pub temperature: f64,
    pub ignore_eos: bool,
    pub timeout: Duration,
    /// Each run's prompts: fresh random ones per (repetition, load), or fixed.
    pub workload: Workload,
    /// Closed-loop concurrencies; ignored when `request_rate` is set.
    pub concurrency: Vec<usize>,
    pub request_rate: Option<f64>,
    pub max_concurrency: Option<usize>,
    pub repeats: usize,
    /// First repetition's number in the records (for runs split over several invocations).
    pub repetition_offset: usize,
    pub seed: u64,
    pub slo: Slo,
    /// Requests sent to each target before its first measured run (not recorded).
    pub warmup: usize,
    pub progress: bool,
    pub out: Option<PathBuf>,
    /// The full configuration as the caller describes it (stored in every record).
    pub config: serde_json::Value,
    pub commit: Option<String>,
}

impl ServeBench {
    fn loads(&self) -> Vec<Load> {
        match self.request_rate {
            Some(rate) => vec![Load::Poisson {
                rate,
                max_concurrency: self.max_concurrency,
                seed: self.seed,
            }],
            None => self
                .concurrency
                .iter()
                .map(|&c| Load::Closed { concurrency: c })
                .collect(),
        }
    }

    fn client(&self, t: &Target) -> ClientConfig {
        ClientConfig {
            url: t.url.clone(),
            model: t.model.clone(),
            endpoint: self.endpoint,
            temperature: self.temperature,
            ignore_eos: self.ignore_eos,
            timeout: self.timeout,
        }
    }

    pub fn validate(&self) -> Result<()> {
        if self.targets.is_empty() || self.workload.is_empty() {
            return Err(BenchError::Config("no server or no prompts".into()));
        }
        if self.request_rate.is_none()
            && (self.concurrency.is_empty() || self.concurrency.contains(&0))
        {
            return Err(BenchError::Config("concurrency levels must be >= 1".into()));
        }
        if let Some(r) = self.request_rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(BenchError::Config("--request-rate must be > 0".into()));
            }
        }
        if self.repeats == 0 {
            return Err(BenchError::Config("--repeats must be >= 1".into()));
        }
        Ok(())
    }
}

/// Runs every (repetition, load, target) and returns the records in run order.
pub async fn run_bench(b: &ServeBench) -> Result<Vec<RunRecord>> {
    b.validate()?;
    for t in &b.targets {
        for p in b.workload.prompts_for(RunKey::WARMUP).iter().take(b.warmup) {
            let o = run_request(&b.client(t), p, std::time::Instant::now()).await;
            if let Some(e) = o.error {
                return Err(BenchError::Response(format!(
                    "warm-up request to {} ({}) failed: {e}",
                    t.label, t.url
                )));
            }
        }
    }
    let mut records = Vec::new();
    for rep in 0..b.repeats {
        for load in b.loads() {
            for t in &b.targets {
                let (concurrency, request_rate) = match load {
                    Load::Closed { concurrency } => (Some(concurrency), None),
                    Load::Poisson { rate, .. } => (b.max_concurrency, Some(rate)),
                };
                let what = match load {
                    Load::Closed { concurrency } => format!("c={concurrency}"),
                    Load::Poisson { rate, .. } => format!("rate={rate}"),
                };
                let key = RunKey {
                    repetition: b.repetition_offset + rep,
                    load: match load {
                        Load::Closed { concurrency } => concurrency as u64,
                        Load::Poisson { rate, .. } => rate.to_bits(),
                    },
                };
                let prompts = b.workload.prompts_for(key);
                let mut progress = Progress::new(
                    format!("{} {what} rep {}/{}", t.label, rep + 1, b.repeats),
                    prompts.len(),
                    b.progress,
                );
                let outcomes = run(&b.client(t), &prompts, load, &mut progress).await;
                let rec = RunRecord {
                    kind: "serve".into(),
                    label: t.label.clone(),
                    url: t.url.to_string(),
                    model: t.model.clone(),
                    concurrency,
                    request_rate,
                    repetition: b.repetition_offset + rep,
                    prompt_seed: b.workload.seed_for(key),
                    config: b.config.clone(),
                    metrics: compute(&outcomes, &b.slo),
                    output_sha256: output_digests(&outcomes),
                    commit: b.commit.clone(),
                    machine: Machine::detect(),
                    date: utc_now(),
                };
                if let Some(path) = &b.out {
                    append_jsonl(path, &rec)?;
                }
                records.push(rec);
            }
        }
    }
    Ok(records)
}

/// The per-run table for a terminal.
pub fn runs_table(records: &[RunRecord]) -> String {
    let mut s = format!(
        "{:<14} {:>8} {:>4} {:>5} {:>5} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}  {}\n",
        "server", "load", "rep", "ok", "fail", "req/s", "out tok/s", "tot tok/s", "makespan",
        "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "E2EL p50", "goodput", "outputs sha256"
    );
    for r in records {
        let m = &r.metrics;
        s.push_str(&format!(
            "{:<14} {:>8} {:>4} {:>5} {:>5} {:>8.2} {:>9.1} {:>9.1} {:>8.2}s {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.1} {:>9}  {}\n",
            r.label,
            r.load_key(),
            r.repetition,
            m.completed,
            m.failed,
            m.request_throughput,
            m.output_throughput,
            m.total_token_throughput,
            m.makespan_s,
            m.ttft_ms.median,
            m.ttft_ms.p99,
            m.tpot_ms.median,
            m.tpot_ms.p99,
            m.itl_ms.median,
            m.itl_ms.p99,
            m.e2el_ms.median,
            m.goodput.map_or("-".into(), |g| format!("{g:.2}")),
            &m.output_digest[..m.output_digest.len().min(16)]
        ));
    }
    s.push_str("(times in ms unless marked; TTFT/TPOT/ITL/E2EL means and p90s are in the JSONL)\n");
    s
}

/// Runs `f` on a single-threaded tokio runtime: the load generator needs little CPU, and one
/// thread leaves the most cores to a server on the same machine.
pub fn block_on<F: std::future::Future>(f: F) -> Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(f))
}
