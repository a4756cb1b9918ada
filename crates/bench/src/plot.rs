//! A hand-written SVG: output tokens/s and median TTFT against concurrency, one line per server,
//! the median over repetitions with a min–max whisker.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::compare::Spread;
use crate::record::RunRecord;

const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];
const PW: f64 = 460.0;
const PH: f64 = 300.0;
const ML: f64 = 70.0;
const MT: f64 = 50.0;
const MB: f64 = 50.0;
const GAP: f64 = 90.0;

/// label → x → per-repetition values.
type Series = BTreeMap<String, BTreeMap<u64, Vec<f64>>>;

fn series(records: &[RunRecord], get: fn(&RunRecord) -> f64) -> (Vec<String>, Series) {
    let mut labels: Vec<String> = Vec::new();
    let mut s: Series = BTreeMap::new();
    for r in records {
        let Some(c) = r.concurrency else { continue };
        if !labels.contains(&r.label) {
            labels.push(r.label.clone());
        }
        s.entry(r.label.clone())
            .or_default()
            .entry(c as u64)
            .or_default()
            .push(get(r));
    }
    (labels, s)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

#[allow(clippy::too_many_arguments)]
fn panel(
    svg: &mut String,
    ox: f64,
    title: &str,
    ylabel: &str,
    labels: &[String],
    s: &Series,
    xs: &[u64],
) {
    let ymax = nice_max(
        s.values()
            .flat_map(|m| m.values().flatten().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            * 1.05,
    );
    let lx = |x: u64| -> f64 {
        let (lo, hi) = (
            (*xs.first().unwrap_or(&1) as f64).max(1.0).log2(),
            (*xs.last().unwrap_or(&1) as f64).max(1.0).log2(),
        );
        let t = if hi > lo {
            ((x as f64).max(1.0).log2() - lo) / (hi - lo)
        } else {
            0.5
        };
        ox + ML + 20.0 + t * (PW - 40.0)
    };
    let ly = |y: f64| MT + PH - (y / ymax) * PH;
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="15" font-weight="bold" text-anchor="middle">{}</text>"##,
        ox + ML + PW / 2.0,
        MT - 18.0,
        esc(title)
    );
    let _ = write!(
        svg,
        r##"<rect x="{:.1}" y="{MT}" width="{PW}" height="{PH}" fill="none" stroke="#444"/>"##,
        ox + ML
    );
    for i in 0..=5 {
        let y = ymax * i as f64 / 5.0;
        let py = ly(y);
        let _ = write!(
            svg,
            r##"<line x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            ox + ML,
            ox + ML + PW,
            ox + ML - 6.0,
            py + 4.0,
            if ymax >= 10.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        );
    }
    for &x in xs {
        let px = lx(x);
        let _ = write!(
            svg,
            r##"<line x1="{px:.1}" y1="{MT}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" font-size="11" text-anchor="middle">{x}</text>"##,
            MT + PH,
            MT + PH + 16.0
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">concurrency (requests in flight)</text>"##,
        ox + ML + PW / 2.0,
        MT + PH + 36.0
    );
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">{}</text>"##,
        ox + 18.0,
        MT + PH / 2.0,
        ox + 18.0,
        MT + PH / 2.0,
        esc(ylabel)
    );
    for (i, label) in labels.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let Some(pts) = s.get(label) else { continue };
        let mut path = String::new();
        for (&x, vals) in pts {
            let sp = Spread::of(vals);
            if !sp.median.is_finite() {
                continue;
            }
            let (px, py) = (lx(x), ly(sp.median));
            let _ = write!(
                path,
                "{}{px:.1},{py:.1}",
                if path.is_empty() { "" } else { " " }
            );
            let _ = write!(
                svg,
                r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="{color}" stroke-width="1.5"/><circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{color}"/>"##,
                ly(sp.min),
                ly(sp.max)
            );
        }
        let _ = write!(
            svg,
            r##"<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>"##
        );
    }
}

/// The SVG for `records` (closed-loop runs only; open-loop runs have no concurrency axis).
pub fn svg(records: &[RunRecord], subtitle: &str) -> String {
    let (labels, tput) = series(records, |r| r.metrics.output_throughput);
    let (_, ttft) = series(records, |r| r.metrics.ttft_ms.median);
    let mut xs: Vec<u64> = tput.values().flat_map(|m| m.keys().copied()).collect();
    xs.sort_unstable();
    xs.dedup();
    let width = 2.0 * (ML + PW) + GAP;
    let height = MT + PH + MB + 30.0 + 22.0 * labels.len() as f64;
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"##
    );
    panel(
        &mut s,
        0.0,
        "Output throughput (higher is better)",
        "output tokens/s",
        &labels,
        &tput,
        &xs,
    );
    panel(
        &mut s,
        ML + PW + GAP,
        "Median time to first token (lower is better)",
        "TTFT (ms)",
        &labels,
        &ttft,
        &xs,
    );
    let ly0 = MT + PH + MB + 8.0;
    for (i, label) in labels.iter().enumerate() {
        let y = ly0 + 22.0 * i as f64;
        let _ = write!(
            s,
            r##"<line x1="{ML}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{:.1}" font-size="13">{}</text>"##,
            ML + 30.0,
            COLORS[i % COLORS.len()],
            ML + 38.0,
            y + 4.0,
            esc(label)
        );
    }
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#555" text-anchor="end">{} (points: median over repetitions; whiskers: min–max)</text></svg>"##,
        width - 10.0,
        ly0 + 4.0,
        esc(subtitle)
    );
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_each_server() {
        let mut rs = Vec::new();
        for (label, k) in [("llama.cpp", 1.0), ("oxllm <dev>", 1.5)] {
            for c in [1usize, 4, 8] {
                for rep in 0..2 {
                    let mut r = crate::compare::tests_support::rec(
                        label,
                        c,
                        rep,
                        10.0 * c as f64 * k,
                        100.0,
                    );
                    r.metrics.ttft_ms.median = 50.0 * c as f64;
                    rs.push(r);
                }
            }
        }
        let s = svg(&rs, "SmolLM2 Q4_1");
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 4);
        assert!(s.contains("oxllm &lt;dev&gt;"));
        assert_eq!(nice_max(123.0), 200.0);
        assert_eq!(nice_max(0.0), 1.0);
    }
}
