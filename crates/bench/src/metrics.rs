//! A run's numbers from its requests' timelines.
//!
//! Definitions (the same as vLLM's `bench serve`): TTFT = first output chunk's arrival; TPOT =
//! (E2EL − TTFT) / (output tokens − 1), per request with more than one output token; ITL = every
//! gap between successive output chunks, pooled over requests; E2EL = request start to stream end.
//! Makespan = the first request's start to the last request's end, failed ones included.
//! Throughputs divide completed requests' counts by the makespan. Goodput = completed requests
//! meeting every given SLO (TTFT ≤ `ttft_ms`, TPOT ≤ `tpot_ms`) per second of makespan.
//! Percentiles interpolate linearly between order statistics (numpy's default).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::client::Outcome;

/// Mean, median, p90 and p99 of a sample, in milliseconds; all 0 (with `n` 0) for no sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
}

/// The `p`-th percentile (0..=100) of sorted values, interpolated.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let rank = (p / 100.0).clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

impl Stat {
    pub fn of(values: &[f64]) -> Stat {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Stat::default();
        }
        v.sort_by(f64::total_cmp);
        Stat {
            n: v.len(),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            median: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
        }
    }
}

/// Service-level objectives for goodput, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
}

impl Slo {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.tpot_ms.is_some()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    pub completed: usize,
    pub failed: usize,
    pub makespan_s: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// Prompt tokens of completed requests as the server reported them (`None` if any did not).
    pub total_input_tokens: Option<usize>,
    pub total_output_tokens: usize,
    pub ttft_ms: Stat,
    pub tpot_ms: Stat,
    pub itl_ms: Stat,
    pub e2el_ms: Stat,
    pub good_requests: Option<usize>,
    pub goodput: Option<f64>,
    /// sha256 over the per-request digests in request order (failed requests hash as "failed").
    pub output_digest: String,
    /// The first few distinct error messages.
    pub errors: Vec<String>,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// Each request's output digest, in request-index order (`None` for failed ones).
pub fn output_digests(outcomes: &[Outcome]) -> Vec<Option<String>> {
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| o.index);
    sorted
        .iter()
        .map(|o| o.ok().then(|| sha256_hex(o.text.as_bytes())))
        .collect()
}

pub fn combined_digest(digests: &[Option<String>]) -> String {
    let joined: Vec<&str> = digests
        .iter()
        .map(|d| d.as_deref().unwrap_or("failed"))
        .collect();
    sha256_hex(joined.join("\n").as_bytes())
}

fn tpot_s(o: &Outcome) -> Option<f64> {
    let ttft = o.ttft_s()?;
    let n = o.output_tokens();
    (n > 1).then(|| (o.e2el_s - ttft) / (n - 1) as f64)
}

pub fn compute(outcomes: &[Outcome], slo: &Slo) -> RunMetrics {
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok()).collect();
    let start = outcomes
        .iter()
        .map(|o| o.start_s)
        .fold(f64::INFINITY, f64::min);
    let end = outcomes
        .iter()
        .map(|o| o.start_s + o.e2el_s)
        .fold(f64::NEG_INFINITY, f64::max);
    let makespan_s = if outcomes.is_empty() {
        0.0
    } else {
        (end - start).max(0.0)
    };
    let per_s = |x: f64| {
        if makespan_s > 0.0 {
            x / makespan_s
        } else {
            0.0
        }
    };
    let ms = |x: f64| x * 1e3;

    let ttft: Vec<f64> = ok.iter().filter_map(|o| o.ttft_s()).map(ms).collect();
    let tpot: Vec<f64> = ok.iter().filter_map(|o| tpot_s(o)).map(ms).collect();
    let itl: Vec<f64> = ok
        .iter()
        .flat_map(|o| o.chunk_times.windows(2).map(|w| ms(w[1] - w[0])))
        .collect();
    let e2el: Vec<f64> = ok.iter().map(|o| ms(o.e2el_s)).collect();
    let total_output_tokens: usize = ok.iter().map(|o| o.output_tokens()).sum();
    let total_input_tokens: Option<usize> = ok.iter().map(|o| o.prompt_tokens).sum();

    let good_requests = slo.is_set().then(|| {
        ok.iter()
            .filter(|o| {
                let t = o.ttft_s().map_or(f64::INFINITY, ms);
                let p = tpot_s(o).map_or(0.0, ms);
                slo.ttft_ms.is_none_or(|s| t <= s) && slo.tpot_ms.is_none_or(|s| p <= s)
            })
            .count()
    });
    let mut errors: Vec<String> = Vec::new();
    for e in outcomes.iter().filter_map(|o| o.error.as_ref()) {
        if errors.len() < 5 && !errors.contains(e) {
            errors.push(e.clone());
        }
    }
    RunMetrics {
        completed: ok.len(),
        failed: outcomes.len() - ok.len(),
        makespan_s,
        request_throughput: per_s(ok.len() as f64),
        output_throughput: per_s(total_output_tokens as f64),
        total_token_throughput: per_s(
            (total_output_tokens + total_input_tokens.unwrap_or(0)) as f64,
        ),
        total_input_tokens,
        total_output_tokens,
        ttft_ms: Stat::of(&ttft),
        tpot_ms: Stat::of(&tpot),
        itl_ms: Stat::of(&itl),
        e2el_ms: Stat::of(&e2el),
        good_requests,
        goodput: good_requests.map(|g| per_s(g as f64)),
        output_digest: combined_digest(&output_digests(outcomes)),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    fn outcome(index: usize, start: f64, chunks: &[f64], e2el: f64, tokens: usize) -> Outcome {
        Outcome {
            index,
            error: None,
            start_s: start,
            chunk_times: chunks.to_vec(),
            e2el_s: e2el,
            text: format!("out{index}"),
            prompt_tokens: Some(10),
            completion_tokens: Some(tokens),
        }
    }

    #[test]
    fn percentiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0];
        close(percentile(&v, 50.0), 2.5);
        close(percentile(&v, 90.0), 3.7);
        close(percentile(&v, 99.0), 3.97);
        close(percentile(&v, 0.0), 1.0);
        close(percentile(&v, 100.0), 4.0);
        close(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
        let s = Stat::of(&[4.0, 1.0, 3.0, 2.0, f64::NAN]);
        assert_eq!(s.n, 4);
        close(s.mean, 2.5);
        close(s.median, 2.5);
    }

    /// Two requests with known timelines:
    /// A starts at 0, chunks at 0.1, 0.3, 0.6 (1 token each), ends 0.6: TTFT 100, ITL 200 and
    /// 300, TPOT (600-100)/2 = 250, E2EL 600.
    /// B starts at 0.5, chunks at 0.2 and 0.4 but carries 5 tokens, ends 0.5: TTFT 200, ITL 200,
    /// TPOT (500-200)/4 = 75, E2EL 500; ends at 1.0 run time.
    /// C starts at 0.2 and fails after 1.0 s: it ends the run at 1.2.
    #[test]
    fn synthetic_timeline() {
        let a = outcome(0, 0.0, &[0.1, 0.3, 0.6], 0.6, 3);
        let b = outcome(1, 0.5, &[0.2, 0.4], 0.5, 5);
        let c = Outcome {
            index: 2,
            error: Some("HTTP 500: boom".into()),
            start_s: 0.2,
            e2el_s: 1.0,
            ..Outcome::default()
        };
        let m = compute(&[a.clone(), b.clone(), c], &Slo::default());
        assert_eq!((m.completed, m.failed), (2, 1));
        close(m.makespan_s, 1.2);
        close(m.request_throughput, 2.0 / 1.2);
        assert_eq!(m.total_output_tokens, 8);
        assert_eq!(m.total_input_tokens, Some(20));
        close(m.output_throughput, 8.0 / 1.2);
        close(m.total_token_throughput, 28.0 / 1.2);
        close(m.ttft_ms.mean, 150.0);
        close(m.ttft_ms.median, 150.0);
        close(m.ttft_ms.p90, 190.0);
        close(m.tpot_ms.mean, 162.5);
        assert_eq!(m.itl_ms.n, 3);
        close(m.itl_ms.median, 200.0);
        close(m.itl_ms.mean, 700.0 / 3.0);
        close(m.itl_ms.p99, 298.0);
        close(m.e2el_ms.median, 550.0);
        assert_eq!(m.goodput, None);
        assert_eq!(m.errors, ["HTTP 500: boom"]);

        // Goodput: TTFT <= 150 keeps A only; TPOT <= 100 keeps B only; both: none.
        let g = |ttft, tpot| {
            compute(
                &[a.clone(), b.clone()],
                &Slo {
                    ttft_ms: ttft,
                    tpot_ms: tpot,
                },
            )
            .good_requests
        };
        assert_eq!(g(Some(150.0), None), Some(1));
        assert_eq!(g(None, Some(100.0)), Some(1));
        assert_eq!(g(Some(150.0), Some(100.0)), Some(0));
        assert_eq!(g(Some(1e9), Some(1e9)), Some(2));
        let m = compute(
            &[a.clone(), b.clone()],
            &Slo {
                ttft_ms: Some(150.0),
                tpot_ms: None,
            },
        );
        close(m.goodput.unwrap(), 1.0 / 1.0);
    }

    #[test]
    fn digests_follow_request_order_and_mark_failures() {
        let a = outcome(0, 0.0, &[0.1], 0.1, 1);
        let b = outcome(1, 0.0, &[0.1], 0.1, 1);
        let d1 = output_digests(&[a.clone(), b.clone()]);
        let d2 = output_digests(&[b.clone(), a.clone()]);
        assert_eq!(d1, d2);
        assert_eq!(d1[0].as_deref(), Some(sha256_hex(b"out0").as_str()));
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let mut bf = b.clone();
        bf.error = Some("x".into());
        let d3 = output_digests(&[a, bf]);
        assert_eq!(d3[1], None);
        assert_ne!(combined_digest(&d1), combined_digest(&d3));
    }

    #[test]
    fn unknown_prompt_tokens_and_empty_runs() {
        let mut a = outcome(0, 0.0, &[0.1], 0.2, 1);
        a.prompt_tokens = None;
        let m = compute(&[a], &Slo::default());
        assert_eq!(m.total_input_tokens, None);
        assert_eq!(m.tpot_ms.n, 0);
        let m = compute(&[], &Slo::default());
        assert_eq!((m.completed, m.makespan_s), (0, 0.0));
    }
}
