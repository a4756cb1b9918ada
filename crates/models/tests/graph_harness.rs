//! A step harness for the model tests: one sequence set's flat arrays written into backend
//! input buffers the way the engine writes them (padding included), run eagerly or captured.
#![allow(dead_code)] // each test binary uses a subset

use oxllm_kernels::attention::AttnMetadata;
use oxllm_models::graph::{record_forward, KvBuffers, StateBuffers, StepBuffers, StepView};
use oxllm_models::{ForwardBatch, Model, ModelError, ModelKind};
use oxllm_runtime::{Backend, BufRef, CpuBackend, Plan, ReferenceBackend};

pub const BS: usize = 16;
pub const STRIDE: usize = 8;

/// One step's flat arrays, owned.
#[derive(Clone, Default)]
pub struct Arrays {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub slot_mapping: Vec<i32>,
    pub qsl: Vec<u32>,
    pub seq_lens: Vec<u32>,
    pub tables: Vec<u32>,
    pub logits: Vec<u32>,
    pub state_slots: Vec<u32>,
    pub restores: Vec<i32>,
    pub cp_rows: Vec<u32>,
    pub cp_slots: Vec<u32>,
}

/// One sequence of a step: `tokens` at positions `start..`, blocks `table`, state `slot`.
pub struct Seq<'a> {
    pub tokens: &'a [u32],
    pub start: usize,
    pub table: &'a [u32],
    pub slot: u32,
    pub restore: i32,
    /// (row within this sequence's tokens, checkpoint slot)
    pub checkpoints: &'a [(u32, u32)],
}

pub fn arrays(seqs: &[Seq<'_>]) -> Arrays {
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

/// A model's cache, state and input buffers on one backend.
pub struct Graph<'m> {
    pub b: Box<dyn Backend>,
    pub model: &'m Model,
    pub kv: KvBuffers,
    pub states: Option<StateBuffers>,
    pub inputs: StepBuffers,
}

fn pad<T: Copy>(dst: &mut [T], src: &[T], pad: T) {
    dst[..src.len()].copy_from_slice(src);
    dst[src.len()..].fill(pad);
}

impl<'m> Graph<'m> {
    /// 16 blocks, `slots` state slots, up to 4 sequences and 64 rows a step.
    pub fn new(model: &'m Model, mut b: Box<dyn Backend>, slots: usize) -> Graph<'m> {
        b.load_weights(model.weights()).unwrap();
        let c = &model.config;
        let kv = KvBuffers::alloc(b.as_mut(), c.kv_layers, 16, BS, c.kv_width()).unwrap();
        let states = match &model.kind {
            ModelKind::Hybrid(h) => Some(StateBuffers::alloc(b.as_mut(), h, slots, 4, 64).unwrap()),
            ModelKind::Dense(_) => None,
        };
        let inputs = StepBuffers::alloc(b.as_mut(), 64, 4, STRIDE).unwrap();
        Graph {
            b,
            model,
            kv,
            states,
            inputs,
        }
    }

    pub fn cpu(model: &'m Model, slots: usize) -> Graph<'m> {
        Graph::new(model, Box::new(CpuBackend::new(2)), slots)
    }

    pub fn reference(model: &'m Model, slots: usize) -> Graph<'m> {
        Graph::new(model, Box::new(ReferenceBackend::new()), slots)
    }

    /// The checks the engine runs on a step before writing its inputs.
    pub fn validate(&self, a: &Arrays) -> Result<(), ModelError> {
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
        batch
            .validate(self.kv.num_slots(), BS)
            .map_err(ModelError::InvalidBatch)?;
        match &self.states {
            Some(s) => oxllm_models::hybrid::validate_state_slots(&batch, s.num_slots),
            None => Ok(()),
        }
    }

    /// Writes `a` into the inputs of `view`, padding like the engine does.
    pub fn write(&mut self, a: &Arrays, view: &StepView) {
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
        if let Some(states) = &self.states {
            states
                .write_inputs(
                    self.b.as_mut(),
                    &a.state_slots,
                    &a.restores,
                    &a.cp_rows,
                    &a.cp_slots,
                )
                .unwrap();
        }
    }

    fn record(&mut self, view: &StepView) -> Result<BufRef, ModelError> {
        record_forward(
            self.b.as_mut(),
            self.model,
            view,
            &self.kv,
            self.states.as_ref(),
        )
    }

    /// Validates and runs one eager step; returns its logits rows.
    pub fn try_eager(&mut self, a: &Arrays) -> Result<Vec<f32>, ModelError> {
        self.validate(a)?;
        let view = self
            .inputs
            .view(a.tokens.len(), a.seq_lens.len(), a.logits.len())
            .unwrap();
        self.write(a, &view);
        self.b.begin_step().unwrap();
        let out = self.record(&view).map(|logits| {
            self.b.keep(logits);
            let mem = self.b.host_access("t", false).unwrap();
            mem.f32("t", logits).unwrap().to_vec()
        });
        self.b.end_step().unwrap();
        out
    }

    pub fn eager(&mut self, a: &Arrays) -> Vec<f32> {
        self.try_eager(a).expect("eager step")
    }

    /// Warms and captures a plan of `tokens` rows over `seqs` sequences; returns it, its view
    /// and its logits buffer (read after a replay).
    pub fn capture(&mut self, tokens: usize, seqs: usize) -> (Plan, StepView, BufRef) {
        let view = self.inputs.view(tokens, seqs, seqs).unwrap();
        self.b.warm_step().unwrap();
        self.record(&view).unwrap();
        self.b.end_step().unwrap();
        self.b.begin_capture().unwrap();
        let l = self.record(&view).unwrap();
        self.b.keep(l);
        (self.b.end_capture().unwrap(), view, l)
    }

    /// Replays `plan` after writing `a` into `view`; returns the logits rows of `a`.
    pub fn replay(&mut self, plan: &Plan, view: &StepView, logits: BufRef, a: &Arrays) -> Vec<f32> {
        self.write(a, view);
        self.b.replay(plan).unwrap();
        let mem = self.b.host_access("t", false).unwrap();
        mem.f32("t", logits).unwrap().to_vec()
    }

    /// The recurrent state of `slot`, flattened.
    pub fn slot(&mut self, slot: usize) -> Vec<f32> {
        let states = self.states.as_ref().expect("a hybrid model");
        states.read_slot(self.b.as_mut(), slot).unwrap()
    }
}

/// Largest |a - b| over two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}
