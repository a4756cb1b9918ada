//! Recurrent-state checkpoints of the hybrid forward (prefix caching of hybrids), bit for bit on
//! the tiny f32 checkpoints: a state checkpointed in the middle of a prefill chunk, restored
//! into another slot and continued on the shared attention blocks gives the same logits and the
//! same state after the prompt as computing the whole prompt cold.

mod common;

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;
use oxllm_models::{load_model, ForwardBatch, KvCache, Model, ModelError};

const BS: usize = 16;

/// One sequence's step: `tokens` at positions `start..`, in state `slot`.
struct Step<'a> {
    tokens: &'a [u32],
    start: usize,
    table: &'a [u32],
    slot: u32,
    restore: i32,
    /// (row, checkpoint slot)
    checkpoints: &'a [(u32, u32)],
}

fn run(
    model: &Model,
    pool: &ThreadPool,
    kv: &mut KvCache,
    s: &Step<'_>,
) -> Result<Vec<f32>, ModelError> {
    let n = s.tokens.len();
    let positions: Vec<u32> = (s.start..s.start + n).map(|p| p as u32).collect();
    let slots: Vec<i32> = positions
        .iter()
        .map(|&p| (s.table[p as usize / BS] as usize * BS + p as usize % BS) as i32)
        .collect();
    let seq_lens = [(s.start + n) as u32];
    let rows: Vec<u32> = s.checkpoints.iter().map(|c| c.0).collect();
    let cslots: Vec<u32> = s.checkpoints.iter().map(|c| c.1).collect();
    let batch = ForwardBatch {
        token_ids: s.tokens,
        positions: &positions,
        slot_mapping: &slots,
        attn: AttnMetadata {
            query_start_loc: &[0, n as u32],
            seq_lens: &seq_lens,
            block_tables: s.table,
            block_table_stride: s.table.len(),
            block_size: BS,
        },
        logits_indices: &[n as u32 - 1],
        state_slots: &[s.slot],
        restore_slots: &[s.restore],
        checkpoint_rows: &rows,
        checkpoint_slots: &cslots,
    };
    model.forward(pool, &batch, kv)
}

fn check(dir: &str) {
    let path = common::repo_root().join("tests/fixtures/tiny").join(dir);
    let (_, model) = load_model(&path).expect("fixture");
    let pool = ThreadPool::new(2);
    let mut kv = model.new_cache(16, BS, 5);
    let shared: Vec<u32> = (0..32u32).map(|i| (i * 37 + 5) % 500 + 3).collect();
    let mut a = shared.clone();
    a.extend((0..16u32).map(|i| (i * 11 + 1) % 500 + 3));
    let mut b = shared.clone();
    b.extend((0..21u32).map(|i| (i * 53 + 9) % 500 + 3));

    // Cold: B whole, slot 0, blocks 1..=4.
    let cold = run(
        &model,
        &pool,
        &mut kv,
        &Step {
            tokens: &b,
            start: 0,
            table: &[1, 2, 3, 4],
            slot: 0,
            restore: -1,
            checkpoints: &[],
        },
    )
    .expect("forward");
    let states = |kv: &KvCache, slot| kv.states().expect("hybrid").snapshot(slot);
    let cold_state = states(&kv, 0);

    // A whole in one chunk, slot 1, blocks 5..=7, checkpointing its state after 16 tokens (a
    // row in the middle of the chunk, into slot 3) and after 32 (into slot 4).
    run(
        &model,
        &pool,
        &mut kv,
        &Step {
            tokens: &a,
            start: 0,
            table: &[5, 6, 7],
            slot: 1,
            restore: -1,
            checkpoints: &[(15, 3), (31, 4)],
        },
    )
    .expect("forward");
    assert_ne!(states(&kv, 3), states(&kv, 4));
    // The checkpoint equals the state of a cold run that stops at the boundary.
    run(
        &model,
        &pool,
        &mut kv,
        &Step {
            tokens: &shared,
            start: 0,
            table: &[8, 9],
            slot: 2,
            restore: -1,
            checkpoints: &[],
        },
    )
    .expect("forward");
    assert!(
        states(&kv, 2) == states(&kv, 4),
        "{dir}: checkpoint after 32"
    );

    // Hit: B on A's first two blocks, state restored from the 32-token checkpoint into slot 2
    // (which holds another state), only B's 21 new tokens computed.
    let hit = run(
        &model,
        &pool,
        &mut kv,
        &Step {
            tokens: &b[32..],
            start: 32,
            table: &[5, 6, 10, 11],
            slot: 2,
            restore: 4,
            checkpoints: &[],
        },
    )
    .expect("forward");
    assert!(hit == cold, "{dir}: logits after a hit differ from cold");
    assert!(
        states(&kv, 2) == cold_state,
        "{dir}: state after the prompt differs"
    );
    assert!(states(&kv, 4) != cold_state, "the checkpoint is not moved");

    // A checkpoint slot that is a running slot of the batch is rejected.
    let err = run(
        &model,
        &pool,
        &mut kv,
        &Step {
            tokens: &b[..4],
            start: 0,
            table: &[12],
            slot: 2,
            restore: -1,
            checkpoints: &[(1, 2)],
        },
    );
    assert!(err.is_err());
}

#[test]
fn qwen3_5_checkpoint_restore_is_bit_exact() {
    check("qwen3.5-f32");
}

#[test]
fn qwen3_next_checkpoint_restore_is_bit_exact() {
    check("qwen3-next-f32");
}
