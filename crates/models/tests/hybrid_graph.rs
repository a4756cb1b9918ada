//! The hybrid forward on the two backends, on the tiny f32 checkpoints (Qwen3.5, Qwen3-Next,
//! Qwen3-MoE):
//! - the reference backend (scalar kernels, one thread) and the CPU backend give the same
//!   logits and recurrent states to within float rounding, over a prefill with checkpoints, a
//!   restore into another slot, and a mixed batch of a prefill chunk and a decode step (both
//!   are also checked against transformers in `oracle_hybrid`);
//! - a prompt prefilled through a captured, padded bucket (padded rows and a padded sequence)
//!   leaves the same conv + recurrent state, bit for bit, as the exact-length eager prefill, and
//!   the padded checkpoint entries take no checkpoint.

mod common;
mod graph_harness;

use graph_harness::{arrays, max_diff, Graph, Seq};
use oxllm_models::{load_model, Model};

const SLOTS: usize = 6;
/// Reference vs fast kernels on f32 weights: summation orders differ (measured up to 1.1e-4 on
/// logits of magnitude ~1); the oracle tests hold both to 1e-3 of transformers.
const BACKEND_TOL: f32 = 5e-4;

fn load(dir: &str) -> Model {
    let path = common::repo_root().join("tests/fixtures/tiny").join(dir);
    load_model(&path).expect("fixture").1
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + seed * 11 + 5) % 500 + 3)
        .collect()
}

fn reference_matches_cpu(dir: &str) {
    let model = load(dir);
    let mut cpu = Graph::cpu(&model, SLOTS);
    let mut reference = Graph::reference(&model, SLOTS);
    let has_states = model.hybrid().is_some_and(|h| h.linear_layers() > 0);
    let a = prompt(40, 1);
    let b = prompt(23, 2);
    let cps: &[(u32, u32)] = if has_states { &[(15, 3), (31, 4)] } else { &[] };
    let steps = [
        // A's prefill, checkpointing after 16 and 32 tokens.
        arrays(&[Seq {
            tokens: &a,
            start: 0,
            table: &[1, 2, 3],
            slot: 0,
            restore: -1,
            checkpoints: cps,
        }]),
        // B on A's first two blocks, restored from the 32-token checkpoint, beside A's decode.
        arrays(&[
            Seq {
                tokens: &a[..1],
                start: 40,
                table: &[1, 2, 3],
                slot: 0,
                restore: -1,
                checkpoints: &[],
            },
            Seq {
                tokens: &b,
                start: 32,
                table: &[1, 2, 4, 5],
                slot: 1,
                restore: if has_states { 4 } else { -1 },
                checkpoints: &[],
            },
        ]),
        // Both decode.
        arrays(&[
            Seq {
                tokens: &b[..1],
                start: 41,
                table: &[1, 2, 3],
                slot: 0,
                restore: -1,
                checkpoints: &[],
            },
            Seq {
                tokens: &a[..1],
                start: 55,
                table: &[1, 2, 4, 5],
                slot: 1,
                restore: -1,
                checkpoints: &[],
            },
        ]),
    ];
    for (i, s) in steps.iter().enumerate() {
        let want = reference.eager(s);
        let got = cpu.eager(s);
        let d = max_diff(&want, &got);
        eprintln!("{dir}: step {i}: max |logit diff| reference vs cpu = {d:.2e}");
        assert!(d <= BACKEND_TOL, "{dir}: step {i}: logits differ by {d}");
        if has_states {
            for slot in 0..SLOTS {
                let d = max_diff(&reference.slot(slot), &cpu.slot(slot));
                assert!(
                    d <= BACKEND_TOL,
                    "{dir}: step {i}: state slot {slot} differs by {d}"
                );
            }
        }
    }
}

#[test]
fn qwen3_5_reference_backend_matches_cpu_backend() {
    reference_matches_cpu("qwen3.5-f32");
}

#[test]
fn qwen3_next_reference_backend_matches_cpu_backend() {
    reference_matches_cpu("qwen3-next-f32");
}

#[test]
fn qwen3_moe_reference_backend_matches_cpu_backend() {
    reference_matches_cpu("qwen3-moe-f32");
}

/// A 21-token prompt through a captured 32-row, 2-sequence plan (11 padded rows, one padded
/// sequence, padded checkpoint entries) against the exact-length eager prefill.
fn padded_bucket_state_matches_exact(dir: &str) {
    let model = load(dir);
    let p = prompt(21, 3);
    let s = arrays(&[Seq {
        tokens: &p,
        start: 0,
        table: &[1, 2],
        slot: 0,
        restore: -1,
        checkpoints: &[(15, 2)],
    }]);
    // Every other slot holds a state first, so a write by padding anywhere would show.
    let junk = arrays(&[Seq {
        tokens: &prompt(9, 4),
        start: 0,
        table: &[3],
        slot: 1,
        restore: -1,
        checkpoints: &[(3, 3), (5, 4), (7, 5)],
    }]);
    let mut exact = Graph::cpu(&model, SLOTS);
    exact.eager(&junk);
    let want = exact.eager(&s);
    let mut padded = Graph::cpu(&model, SLOTS);
    padded.eager(&junk);
    let (plan, view, logits) = padded.capture(32, 2);
    let got = padded.replay(&plan, &view, logits, &s);
    assert!(got[..want.len()] == want[..], "{dir}: padded logits differ");
    for slot in 0..SLOTS {
        assert!(
            exact.slot(slot) == padded.slot(slot),
            "{dir}: state slot {slot} after the padded prefill differs"
        );
    }
}

#[test]
fn qwen3_5_padded_bucket_state_matches_exact_length() {
    padded_bucket_state_matches_exact("qwen3.5-f32");
}

#[test]
fn qwen3_next_padded_bucket_state_matches_exact_length() {
    padded_bucket_state_matches_exact("qwen3-next-f32");
}
