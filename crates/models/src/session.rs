//! A single sequence on its own cache: the smallest runner, for one-shot generation and the
//! oracle tests. It runs the model's one recorded forward (`graph::record_forward`) eagerly on
//! the backend it is given (`CpuBackend` or `ReferenceBackend`), so the tests that check a
//! model against transformers check exactly what the engine runs. Blocks are assigned in order
//! (block i holds positions `i*block_size..`), so the paged path is exercised exactly as the
//! engine uses it; a hybrid's recurrent state lives in state slot 0.

use oxllm_runtime::{Backend, RuntimeError};

use crate::graph::{record_forward, KvBuffers, StateBuffers, StepBuffers};
use crate::{Model, ModelError, ModelKind};

pub struct Session<'m> {
    model: &'m Model,
    backend: Box<dyn Backend>,
    kv: KvBuffers,
    states: Option<StateBuffers>,
    inputs: StepBuffers,
    block_table: Vec<u32>,
    len: usize,
    capacity: usize,
}

pub const SESSION_BLOCK_SIZE: usize = 16;

impl<'m> Session<'m> {
    /// A session able to hold `capacity` tokens (capped at the model's context length), its
    /// cache and inputs allocated on `backend`.
    pub fn new(
        model: &'m Model,
        capacity: usize,
        mut backend: Box<dyn Backend>,
    ) -> Result<Session<'m>, ModelError> {
        let capacity = capacity.min(model.config.context_length).max(1);
        let blocks = capacity.div_ceil(SESSION_BLOCK_SIZE);
        backend.load_weights(model.weights())?;
        let b = backend.as_mut();
        let c = &model.config;
        let kv = KvBuffers::alloc(b, c.kv_layers, blocks, SESSION_BLOCK_SIZE, c.kv_width())?;
        let states = match &model.kind {
            ModelKind::Hybrid(h) => Some(StateBuffers::alloc(b, h, 1, 1, capacity)?),
            ModelKind::Dense(_) => None,
        };
        let inputs = StepBuffers::alloc(b, capacity, 1, blocks)?;
        let block_table = (0..blocks as u32).collect();
        Ok(Session {
            model,
            backend,
            kv,
            states,
            inputs,
            block_table,
            len: 0,
            capacity,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The sequence's recurrent state (hybrids: conv states then recurrent matrices, layer by
    /// layer; `None` for attention-only models).
    pub fn recurrent_state(&mut self) -> Result<Option<Vec<f32>>, ModelError> {
        match &self.states {
            Some(s) if !s.layers.is_empty() => Ok(Some(s.read_slot(self.backend.as_mut(), 0)?)),
            _ => Ok(None),
        }
    }

    /// Appends `ids` and returns the logits after each of them when `all_logits`, else only
    /// after the last one (`[rows, vocab]`).
    pub fn extend(&mut self, ids: &[u32], all_logits: bool) -> Result<Vec<f32>, ModelError> {
        if ids.is_empty() {
            return Err(ModelError::InvalidBatch("no tokens to process".into()));
        }
        if self.len + ids.len() > self.capacity {
            return Err(ModelError::InvalidBatch(format!(
                "{} tokens exceed the session capacity of {}",
                self.len + ids.len(),
                self.capacity
            )));
        }
        let n = ids.len();
        let logits = if all_logits { n } else { 1 };
        let view = self
            .inputs
            .view(n, 1, logits)
            .ok_or_else(|| ModelError::InvalidBatch("the step exceeds the session".into()))?;
        self.write_inputs(ids, all_logits)?;
        let b = self.backend.as_mut();
        b.begin_step()?;
        let out =
            record_forward(b, self.model, &view, &self.kv, self.states.as_ref()).and_then(|buf| {
                b.keep(buf);
                const OP: &str = "read_logits";
                let mem = b.host_access(OP, false)?;
                Ok(mem.f32(OP, buf)?.to_vec())
            });
        let ended = b.end_step();
        let out = out?;
        ended?;
        self.len += n;
        Ok(out)
    }

    fn write_inputs(&mut self, ids: &[u32], all_logits: bool) -> Result<(), RuntimeError> {
        const OP: &str = "write_inputs";
        let (start, n) = (self.len, ids.len());
        let i = &self.inputs;
        let mem = self.backend.host_access(OP, true)?;
        mem.u32_mut(OP, i.token_ids)?[..n].copy_from_slice(ids);
        for (t, (p, s)) in mem.u32_mut(OP, i.positions)?[..n]
            .iter_mut()
            .zip(mem.i32_mut(OP, i.slot_mapping)?[..n].iter_mut())
            .enumerate()
        {
            *p = (start + t) as u32;
            *s = (start + t) as i32;
        }
        mem.u32_mut(OP, i.query_start_loc)?[..2].copy_from_slice(&[0, n as u32]);
        mem.u32_mut(OP, i.seq_lens)?[0] = (start + n) as u32;
        mem.u32_mut(OP, i.block_tables)?[..self.block_table.len()]
            .copy_from_slice(&self.block_table);
        let mut idx = mem.u32_mut(OP, i.logits_indices)?;
        if all_logits {
            for (r, v) in idx[..n].iter_mut().enumerate() {
                *v = r as u32;
            }
        } else {
            idx[0] = n as u32 - 1;
        }
        drop(idx);
        if let Some(states) = &self.states {
            states.write_inputs(self.backend.as_mut(), &[0], &[-1], &[], &[])?;
        }
        Ok(())
    }
}

/// Index of the largest value (first one on ties), as greedy decoding picks it.
pub fn argmax(xs: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best as u32
}
