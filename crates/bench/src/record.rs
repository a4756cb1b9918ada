//! The JSONL record of one run (one server, one load, one repetition) and what it says about
//! where it was taken: git commit, machine (cores, CPU model, load average), UTC date.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{BenchError, Result};
use crate::metrics::RunMetrics;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: Option<String>,
    /// 1-minute load average when the record was written (a busy machine shows here).
    pub loadavg_1m: Option<f64>,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string());
        let loadavg_1m = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()));
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            loadavg_1m,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// "serve".
    pub kind: String,
    pub label: String,
    pub url: String,
    pub model: String,
    pub concurrency: Option<usize>,
    pub request_rate: Option<f64>,
    pub repetition: usize,
    /// The seed this run's random prompts were drawn with (absent for fixed prompts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_seed: Option<u64>,
    /// The full benchmark configuration, as the caller describes it.
    pub config: serde_json::Value,
    pub metrics: RunMetrics,
    /// Per-request sha256 of the output text, in request order; `null` for failed requests.
    pub output_sha256: Vec<Option<String>>,
    pub commit: Option<String>,
    pub machine: Machine,
    pub date: String,
}

impl RunRecord {
    /// A key naming the load: `c=8` or `rate=2.5`.
    pub fn load_key(&self) -> String {
        match (self.concurrency, self.request_rate) {
            (_, Some(r)) => format!("rate={r}"),
            (Some(c), None) => format!("c={c}"),
            (None, None) => "c=?".into(),
        }
    }
}

/// `git rev-parse HEAD` in the current directory, if git and a repository are there.
pub fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn append_jsonl<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut line = serde_json::to_string(value)?;
    line.push('\n');
    f.write_all(line.as_bytes())?;
    Ok(())
}

/// Reads `kind == "serve"` records from a JSONL file (other lines are an error).
pub fn read_records(path: &Path) -> Result<Vec<RunRecord>> {
    let text = std::fs::read_to_string(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| BenchError::Dataset {
                path: path.to_path_buf(),
                line: i + 1,
                reason: format!("not a serve record: {e}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_735_689_599), "2024-12-31T23:59:59Z");
    }

    #[test]
    fn machine_detects_cores() {
        assert!(Machine::detect().cores >= 1);
    }
}
