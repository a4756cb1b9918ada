//! The hybrid forward recorded as ops against the direct `HybridModel::forward`, on the tiny
//! f32 checkpoints (Qwen3.5, Qwen3-Next, Qwen3-MoE):
//! - eager graph steps give bit-identical logits and recurrent states to the direct forward,
//!   over a prefill with checkpoints, a restore into another slot, and a mixed batch of a
//!   prefill chunk and a decode step;
//! - a prompt prefilled through a captured, padded bucket (padded rows and a padded sequence)
//!   leaves the same conv + recurrent state, bit for bit, as the exact-length eager prefill, and
//!   the padded checkpoint entries take no checkpoint.

mod common;

use std::sync::Arc;

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;
use oxllm_models::graph::{record_hybrid_forward, KvBuffers, StateBuffers, StepBuffers, StepView};
use oxllm_models::hybrid::HybridModel;
use oxllm_models::{load_model, ForwardBatch, KvCache, Model};
use oxllm_runtime::{Backend, BufRef, CpuBackend, Plan};

const BS: usize = 16;
const STRIDE: usize = 8;
const SLOTS: usize = 6;

/// One step's flat arrays, owned.
#[derive(Clone, Default)]
struct Arrays {
    tokens: Vec<u32>,
    positions: Vec<u32>,
    slot_mapping: Vec<i32>,
    qsl: Vec<u32>,
    seq_lens: Vec<u32>,
    tables: Vec<u32>,
    logits: Vec<u32>,
    state_slots: Vec<u32>,
    restores: Vec<i32>,
    cp_rows: Vec<u32>,
    cp_slots: Vec<u32>,
}

/// One sequence of a step: `tokens` at positions `start..`, blocks `table`, state `slot`.
struct Seq<'a> {
    tokens: &'a [u32],
    start: usize,
    table: &'a [u32],
    slot: u32,
    restore: i32,
    /// (row within this sequence's tokens, checkpoint slot)
    checkpoints: &'a [(u32, u32)],
}

fn arrays(seqs: &[Seq<'_>]) -> Arrays {
    let mut a = Arrays {
        qsl: vec![0],
        ..Arrays::default()
    };
    for s in seqs {
        let base = a.tokens.len() as u32;
        for (i, &t) in s.tokens.iter().enumerate() {
            let p = s.start + i;
            a.tokens.push(t);
            a.positions.push(p as u32);
            a.slot_mapping
                .push((s.table[p / BS] as usize * BS + p % BS) as i32);
        }
        a.qsl.push(a.tokens.len() as u32);
        a.seq_lens.push((s.start + s.tokens.len()) as u32);
        let mut t = s.table.to_vec();
        t.resize(STRIDE, 0);
        a.tables.extend(t);
        a.logits.push(a.tokens.len() as u32 - 1);
        a.state_slots.push(s.slot);
        a.restores.push(s.restore);
        for &(r, c) in s.checkpoints {
            a.cp_rows.push(base + r);
            a.cp_slots.push(c);
        }
    }
    a
}

fn direct(model: &Model, pool: &ThreadPool, kv: &mut KvCache, a: &Arrays) -> Vec<f32> {
    let batch = ForwardBatch {
        token_ids: &a.tokens,
        positions: &a.positions,
        slot_mapping: &a.slot_mapping,
        attn: AttnMetadata {
            query_start_loc: &a.qsl,
            seq_lens: &a.seq_lens,
            block_tables: &a.tables,
            block_table_stride: STRIDE,
            block_size: BS,
        },
        logits_indices: &a.logits,
        state_slots: &a.state_slots,
        restore_slots: &a.restores,
        checkpoint_rows: &a.cp_rows,
        checkpoint_slots: &a.cp_slots,
    };
    model.forward(pool, &batch, kv).expect("direct forward")
}

struct Graph {
    b: CpuBackend,
    model: Arc<HybridModel>,
    kv: KvBuffers,
    states: StateBuffers,
    inputs: StepBuffers,
}

fn pad<T: Copy>(dst: &mut [T], src: &[T], pad: T) {
    dst[..src.len()].copy_from_slice(src);
    dst[src.len()..].fill(pad);
}

impl Graph {
    fn new(model: &Model) -> Graph {
        let hybrid = model.hybrid_shared().expect("hybrid").clone();
        let c = &model.config;
        let mut b = CpuBackend::new(2);
        let kv = KvBuffers::alloc(&mut b, c.kv_layers, 16, BS, c.kv_width()).unwrap();
        let states = StateBuffers::alloc(&mut b, &hybrid, SLOTS, 4, 64).unwrap();
        let inputs = StepBuffers::alloc(&mut b, 64, 4, STRIDE).unwrap();
        Graph {
            b,
            model: hybrid,
            kv,
            states,
            inputs,
        }
    }

    /// Writes `a` into the inputs of `view`, padding like the engine does.
    fn write(&mut self, a: &Arrays, view: &StepView) {
        let mem = self.b.host_access("test", true).unwrap();
        let n = a.tokens.len() as u32;
        pad(&mut mem.u32_mut("t", view.token_ids).unwrap(), &a.tokens, 0);
        pad(
            &mut mem.u32_mut("t", view.positions).unwrap(),
            &a.positions,
            0,
        );
        pad(
            &mut mem.i32_mut("t", view.slot_mapping).unwrap(),
            &a.slot_mapping,
            -1,
        );
        pad(
            &mut mem.u32_mut("t", view.query_start_loc).unwrap(),
            &a.qsl,
            n,
        );
        pad(
            &mut mem.u32_mut("t", view.seq_lens).unwrap(),
            &a.seq_lens,
            0,
        );
        pad(
            &mut mem.u32_mut("t", view.block_tables).unwrap(),
            &a.tables,
            0,
        );
        pad(
            &mut mem.u32_mut("t", view.logits_indices).unwrap(),
            &a.logits,
            0,
        );
        self.states
            .write_inputs(
                &mut self.b,
                &a.state_slots,
                &a.restores,
                &a.cp_rows,
                &a.cp_slots,
            )
            .unwrap();
    }

    fn eager(&mut self, a: &Arrays) -> Vec<f32> {
        let view = self
            .inputs
            .view(a.tokens.len(), a.seq_lens.len(), a.logits.len())
            .unwrap();
        self.write(a, &view);
        self.b.begin_step().unwrap();
        let logits =
            record_hybrid_forward(&mut self.b, &self.model, &view, &self.kv, &self.states).unwrap();
        let out = self
            .b
            .host_access("t", false)
            .unwrap()
            .f32("t", logits)
            .unwrap()
            .to_vec();
        self.b.end_step();
        out
    }

    /// Warms and captures a plan of `tokens` rows over `seqs` sequences; returns it, its view
    /// and its logits buffer (read after a replay).
    fn capture(&mut self, tokens: usize, seqs: usize) -> (Plan, StepView, BufRef) {
        let view = self.inputs.view(tokens, seqs, seqs).unwrap();
        self.b.warm_step().unwrap();
        let l =
            record_hybrid_forward(&mut self.b, &self.model, &view, &self.kv, &self.states).unwrap();
        self.b.release(l);
        self.b.end_step();
        self.b.begin_capture().unwrap();
        let l =
            record_hybrid_forward(&mut self.b, &self.model, &view, &self.kv, &self.states).unwrap();
        self.b.release(l);
        (self.b.end_capture().unwrap(), view, l)
    }

    fn slot(&mut self, slot: usize) -> Vec<f32> {
        self.states.read_slot(&mut self.b, slot).unwrap()
    }
}

fn load(dir: &str) -> Model {
    let path = common::repo_root().join("tests/fixtures/tiny").join(dir);
    load_model(&path).expect("fixture").1
}

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 37 + seed * 11 + 5) % 500 + 3)
        .collect()
}

fn eager_matches_direct(dir: &str) {
    let model = load(dir);
    let pool = ThreadPool::new(2);
    let mut kv = model.new_cache(16, BS, SLOTS);
    let mut g = Graph::new(&model);
    let has_states = kv.states().is_some();
    let check = |kv: &KvCache, g: &mut Graph, what: &str| {
        if has_states {
            for s in 0..SLOTS {
                let d = kv.states().unwrap().snapshot(s);
                assert!(d == g.slot(s), "{dir}: {what}: state slot {s} differs");
            }
        }
    };
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
        let want = direct(&model, &pool, &mut kv, s);
        let got = g.eager(s);
        assert!(want == got, "{dir}: step {i}: logits differ");
        check(&kv, &mut g, &format!("step {i}"));
    }
}

#[test]
fn qwen3_5_graph_eager_is_bit_identical_to_direct() {
    eager_matches_direct("qwen3.5-f32");
}

#[test]
fn qwen3_next_graph_eager_is_bit_identical_to_direct() {
    eager_matches_direct("qwen3-next-f32");
}

#[test]
fn qwen3_moe_graph_eager_is_bit_identical_to_direct() {
    eager_matches_direct("qwen3-moe-f32");
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
    let mut exact = Graph::new(&model);
    exact.eager(&junk);
    let want = exact.eager(&s);
    let mut padded = Graph::new(&model);
    padded.eager(&junk);
    let (plan, view, logits) = padded.capture(32, 2);
    padded.write(&s, &view);
    padded.b.replay(&plan).unwrap();
    let got = padded
        .b
        .host_access("t", false)
        .unwrap()
        .f32("t", logits)
        .unwrap()
        .to_vec();
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
