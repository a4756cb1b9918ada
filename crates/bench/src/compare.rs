//! A/B comparison: for each load and metric, the ratio B/A of runs paired by repetition (A and
//! B ran back to back), summarised by its median and its spread (min and max over repetitions),
//! and how many requests produced identical output on both servers.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::metrics::percentile;
use crate::record::RunRecord;

/// The metrics a comparison reports: (name, unit, higher is better, getter).
pub type Getter = fn(&RunRecord) -> f64;
pub const METRICS: &[(&str, &str, bool, Getter)] = &[
    ("output_throughput", "tok/s", true, |r| {
        r.metrics.output_throughput
    }),
    ("request_throughput", "req/s", true, |r| {
        r.metrics.request_throughput
    }),
    ("total_token_throughput", "tok/s", true, |r| {
        r.metrics.total_token_throughput
    }),
    ("makespan", "s", false, |r| r.metrics.makespan_s),
    ("median_ttft", "ms", false, |r| r.metrics.ttft_ms.median),
    ("p99_ttft", "ms", false, |r| r.metrics.ttft_ms.p99),
    ("median_tpot", "ms", false, |r| r.metrics.tpot_ms.median),
    ("median_itl", "ms", false, |r| r.metrics.itl_ms.median),
    ("p99_itl", "ms", false, |r| r.metrics.itl_ms.p99),
    ("median_e2el", "ms", false, |r| r.metrics.e2el_ms.median),
];

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Spread {
            median: percentile(&v, 50.0),
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricRatio {
    pub metric: String,
    pub unit: String,
    pub a: Spread,
    pub b: Spread,
    pub ratio: Spread,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadComparison {
    pub load: String,
    /// Order key (concurrency or rate).
    pub x: f64,
    pub pairs: usize,
    pub metrics: Vec<MetricRatio>,
    /// Requests whose output digests match, over all pairs.
    pub identical_outputs: usize,
    pub compared_outputs: usize,
}

fn x_of(r: &RunRecord) -> f64 {
    r.request_rate
        .or(r.concurrency.map(|c| c as f64))
        .unwrap_or(0.0)
}

/// Compares label `b` against label `a` over `records`, pairing runs of the same load and
/// repetition.
pub fn compare(records: &[RunRecord], a: &str, b: &str) -> Vec<LoadComparison> {
    type Pairs<'r> = BTreeMap<usize, (Option<&'r RunRecord>, Option<&'r RunRecord>)>;
    let mut by_load: BTreeMap<String, (f64, Pairs<'_>)> = BTreeMap::new();
    for r in records {
        let slot = if r.label == a {
            0
        } else if r.label == b {
            1
        } else {
            continue;
        };
        let entry = by_load
            .entry(r.load_key())
            .or_insert_with(|| (x_of(r), BTreeMap::new()));
        let pair = entry.1.entry(r.repetition).or_default();
        if slot == 0 {
            pair.0 = Some(r);
        } else {
            pair.1 = Some(r);
        }
    }
    let mut out: Vec<LoadComparison> = by_load
        .into_iter()
        .filter_map(|(load, (x, reps))| {
            let pairs: Vec<(&RunRecord, &RunRecord)> = reps
                .values()
                .filter_map(|(ra, rb)| Some(((*ra)?, (*rb)?)))
                .collect();
            if pairs.is_empty() {
                return None;
            }
            let metrics = METRICS
                .iter()
                .map(|(name, unit, _, get)| {
                    let av: Vec<f64> = pairs.iter().map(|(ra, _)| get(ra)).collect();
                    let bv: Vec<f64> = pairs.iter().map(|(_, rb)| get(rb)).collect();
                    let ratios: Vec<f64> = av
                        .iter()
                        .zip(&bv)
                        .filter(|(x, _)| **x != 0.0)
                        .map(|(x, y)| y / x)
                        .collect();
                    MetricRatio {
                        metric: name.to_string(),
                        unit: unit.to_string(),
                        a: Spread::of(&av),
                        b: Spread::of(&bv),
                        ratio: Spread::of(&ratios),
                    }
                })
                .collect();
            let (mut same, mut total) = (0, 0);
            for (ra, rb) in &pairs {
                for (da, db) in ra.output_sha256.iter().zip(&rb.output_sha256) {
                    total += 1;
                    if da.is_some() && da == db {
                        same += 1;
                    }
                }
            }
            Some(LoadComparison {
                load,
                x,
                pairs: pairs.len(),
                metrics,
                identical_outputs: same,
                compared_outputs: total,
            })
        })
        .collect();
    out.sort_by(|p, q| p.x.total_cmp(&q.x));
    out
}

impl LoadComparison {
    pub fn metric(&self, name: &str) -> Option<&MetricRatio> {
        self.metrics.iter().find(|m| m.metric == name)
    }
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn fmt_ratio(s: &Spread) -> String {
    if !s.median.is_finite() {
        return "-".into();
    }
    format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max)
}

/// The comparison as a Markdown table: one row per load, for the headline metrics.
pub fn markdown_table(cmp: &[LoadComparison], a: &str, b: &str) -> String {
    let cols = [
        ("output_throughput", "output tok/s"),
        ("median_ttft", "median TTFT ms"),
        ("median_tpot", "median TPOT ms"),
        ("median_itl", "median ITL ms"),
        ("p99_itl", "p99 ITL ms"),
        ("makespan", "makespan s"),
    ];
    let mut s = String::from("| load | runs |");
    for (_, title) in &cols {
        s.push_str(&format!(" {title} {a} | {b} | {b}/{a} |"));
    }
    s.push_str(" identical outputs |\n|---|---|");
    for _ in &cols {
        s.push_str("---:|---:|---:|");
    }
    s.push_str("---:|\n");
    for c in cmp {
        s.push_str(&format!("| {} | {} |", c.load, c.pairs));
        for (name, _) in &cols {
            match c.metric(name) {
                Some(m) => s.push_str(&format!(
                    " {} | {} | {} |",
                    fmt_num(m.a.median),
                    fmt_num(m.b.median),
                    fmt_ratio(&m.ratio)
                )),
                None => s.push_str(" - | - | - |"),
            }
        }
        s.push_str(&format!(
            " {}/{} |\n",
            c.identical_outputs, c.compared_outputs
        ));
    }
    s
}

/// The comparison as a plain-text table for a terminal: every metric, one block per load.
pub fn text_table(cmp: &[LoadComparison], a: &str, b: &str) -> String {
    let mut s = String::new();
    for c in cmp {
        s.push_str(&format!(
            "{} ({} pairs; identical outputs {}/{})\n",
            c.load, c.pairs, c.identical_outputs, c.compared_outputs
        ));
        s.push_str(&format!(
            "  {:<32} {:>12} {:>12}  {:<24}\n",
            "metric",
            a,
            b,
            format!("{b}/{a} median (min–max)")
        ));
        for m in &c.metrics {
            s.push_str(&format!(
                "  {:<32} {:>12} {:>12}  {:<24}\n",
                format!("{} [{}]", m.metric, m.unit),
                fmt_num(m.a.median),
                fmt_num(m.b.median),
                fmt_ratio(&m.ratio)
            ));
        }
    }
    s
}

#[cfg(test)]
pub(crate) mod tests_support {
    use crate::metrics::RunMetrics;
    use crate::record::{Machine, RunRecord};

    pub(crate) fn rec(label: &str, c: usize, rep: usize, tput: f64, ttft: f64) -> RunRecord {
        let mut m = RunMetrics {
            output_throughput: tput,
            makespan_s: 1.0,
            ..RunMetrics::default()
        };
        m.ttft_ms.median = ttft;
        RunRecord {
            kind: "serve".into(),
            label: label.into(),
            url: String::new(),
            model: "m".into(),
            concurrency: Some(c),
            request_rate: None,
            repetition: rep,
            prompt_seed: None,
            config: serde_json::Value::Null,
            metrics: m,
            output_sha256: vec![Some("x".into()), Some(label.to_string())],
            commit: None,
            machine: Machine::default(),
            date: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::rec;
    use super::*;

    #[test]
    fn ratios_pair_by_repetition() {
        let rs = vec![
            rec("a", 4, 0, 100.0, 10.0),
            rec("b", 4, 0, 150.0, 10.0),
            rec("a", 4, 1, 120.0, 20.0),
            rec("b", 4, 1, 120.0, 10.0),
            rec("a", 4, 2, 100.0, 10.0),
            rec("b", 4, 2, 200.0, 5.0),
            rec("a", 1, 0, 50.0, 1.0),
            rec("b", 1, 0, 25.0, 2.0),
            rec("a", 16, 0, 1.0, 1.0), // no B partner: dropped
            rec("other", 4, 0, 1.0, 1.0),
        ];
        let cmp = compare(&rs, "a", "b");
        assert_eq!(cmp.len(), 2);
        assert_eq!((cmp[0].load.as_str(), cmp[1].load.as_str()), ("c=1", "c=4"));
        let t = cmp[1].metric("output_throughput").unwrap();
        assert_eq!(cmp[1].pairs, 3);
        assert_eq!(
            t.ratio,
            Spread {
                median: 1.5,
                min: 1.0,
                max: 2.0
            }
        );
        assert_eq!(t.a.median, 100.0);
        assert_eq!(t.b.median, 150.0);
        let f = cmp[1].metric("median_ttft").unwrap();
        assert_eq!(
            f.ratio,
            Spread {
                median: 0.5,
                min: 0.5,
                max: 1.0
            }
        );
        assert_eq!((cmp[1].identical_outputs, cmp[1].compared_outputs), (3, 6));
        assert_eq!(
            cmp[0].metric("output_throughput").unwrap().ratio.median,
            0.5
        );
        let md = markdown_table(&cmp, "a", "b");
        assert!(
            md.contains("| c=4 | 3 | 100 | 150 | 1.50 (1.00–2.00) |"),
            "{md}"
        );
        assert!(text_table(&cmp, "a", "b").contains("c=4 (3 pairs"));
    }
}
