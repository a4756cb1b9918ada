//! Recurrent-state checkpoints of the hybrid forward (prefix caching of hybrids), bit for bit on
//! the tiny f32 checkpoints and on both backends: a state checkpointed in the middle of a
//! prefill chunk, restored into another slot and continued on the shared attention blocks gives
//! the same logits and the same state after the prompt as computing the whole prompt cold.

mod common;
mod graph_harness;

use graph_harness::{arrays, Graph, Seq};
use oxllm_models::{load_model, ModelError};

/// One sequence's step: `tokens` at positions `start..`, in state `slot`.
fn run(
    g: &mut Graph<'_>,
    tokens: &[u32],
    start: usize,
    table: &[u32],
    (slot, restore): (u32, i32),
    checkpoints: &[(u32, u32)],
) -> Result<Vec<f32>, ModelError> {
    g.try_eager(&arrays(&[Seq {
        tokens,
        start,
        table,
        slot,
        restore,
        checkpoints,
    }]))
}

fn check(dir: &str, reference: bool) {
    let path = common::repo_root().join("tests/fixtures/tiny").join(dir);
    let (_, model) = load_model(&path).expect("fixture");
    let mut g = if reference {
        Graph::reference(&model, 5)
    } else {
        Graph::cpu(&model, 5)
    };
    let shared: Vec<u32> = (0..32u32).map(|i| (i * 37 + 5) % 500 + 3).collect();
    let mut a = shared.clone();
    a.extend((0..16u32).map(|i| (i * 11 + 1) % 500 + 3));
    let mut b = shared.clone();
    b.extend((0..21u32).map(|i| (i * 53 + 9) % 500 + 3));

    // Cold: B whole, slot 0, blocks 1..=4.
    let cold = run(&mut g, &b, 0, &[1, 2, 3, 4], (0, -1), &[]).expect("forward");
    let cold_state = g.slot(0);

    // A whole in one chunk, slot 1, blocks 5..=7, checkpointing its state after 16 tokens (a
    // row in the middle of the chunk, into slot 3) and after 32 (into slot 4).
    run(&mut g, &a, 0, &[5, 6, 7], (1, -1), &[(15, 3), (31, 4)]).expect("forward");
    assert_ne!(g.slot(3), g.slot(4));
    // The checkpoint equals the state of a cold run that stops at the boundary.
    run(&mut g, &shared, 0, &[8, 9], (2, -1), &[]).expect("forward");
    assert!(g.slot(2) == g.slot(4), "{dir}: checkpoint after 32");

    // Hit: B on A's first two blocks, state restored from the 32-token checkpoint into slot 2
    // (which holds another state), only B's 21 new tokens computed.
    let hit = run(&mut g, &b[32..], 32, &[5, 6, 10, 11], (2, 4), &[]).expect("forward");
    assert!(hit == cold, "{dir}: logits after a hit differ from cold");
    assert!(
        g.slot(2) == cold_state,
        "{dir}: state after the prompt differs"
    );
    assert!(g.slot(4) != cold_state, "the checkpoint is not moved");

    // A checkpoint slot that is a running slot of the batch is rejected.
    let err = run(&mut g, &b[..4], 0, &[12], (2, -1), &[(1, 2)]);
    assert!(
        matches!(err, Err(ModelError::InvalidBatch(ref m)) if m.contains("running slot")),
        "{err:?}"
    );
}

#[test]
fn qwen3_5_checkpoint_restore_is_bit_exact() {
    check("qwen3.5-f32", false);
    check("qwen3.5-f32", true);
}

#[test]
fn qwen3_next_checkpoint_restore_is_bit_exact() {
    check("qwen3-next-f32", false);
    check("qwen3-next-f32", true);
}
