//! Sampling as an op of a captured plan, so a replay ends with token ids and no logits ever
//! cross to the host.
//!
//! Per-row sampling state lives in a host-prepared buffer ([`SampleRows`]) that the engine
//! fills before a replay: each active row holds the request's own [`Sampler`] (moved in, moved
//! back after) and, when a penalty needs them, copies of its prompt and output ids. The op runs
//! the same [`Sampler::sample`] an eager step runs, so replay and eager draw identical tokens.
//! Padded rows are inactive and produce [`NO_TOKEN`].

use std::sync::atomic::{AtomicUsize, Ordering};

use oxllm_kernels::pool::SharedMut;
use oxllm_runtime::{BufRef, ExecCtx, Memory, Op, RuntimeError};

use crate::{SampleError, Sampled, Sampler, SamplingError, SamplingParams};

/// The token id written for inactive (padded) rows.
pub const NO_TOKEN: u32 = u32::MAX;

/// One logits row's sampling state.
pub struct SampleRow {
    pub active: bool,
    pub sampler: Sampler,
    /// Prompt and output ids, filled only when the sampler's penalties need them.
    pub prompt: Vec<u32>,
    pub output: Vec<u32>,
    pub result: Option<Result<Sampled, SampleError>>,
}

/// The sampling state of every row a plan can sample.
pub struct SampleRows {
    pub rows: Vec<SampleRow>,
}

impl SampleRows {
    /// `n` inactive rows, each holding a placeholder greedy sampler.
    pub fn new(n: usize) -> Result<SampleRows, SamplingError> {
        let placeholder = Sampler::new(&SamplingParams::greedy(), 0)?;
        let rows = (0..n)
            .map(|_| SampleRow {
                active: false,
                sampler: placeholder.clone(),
                prompt: Vec::new(),
                output: Vec::new(),
                result: None,
            })
            .collect();
        Ok(SampleRows { rows })
    }
}

/// Samples row `r` of `logits` (`[rows, vocab]`) with `SampleRows.rows[r]` into `token_ids[r]`.
pub struct SampleOp {
    pub logits: BufRef,
    pub rows: BufRef,
    pub token_ids: BufRef,
    pub vocab: usize,
}

impl Op for SampleOp {
    fn name(&self) -> &'static str {
        "sample"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.logits, self.rows, self.token_ids] {
            visit(b);
        }
    }

    fn warm(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        // Every thread may sample a row in a replay: size their scratch now.
        let vocab = self.vocab.max(1);
        cx.pool.run(|_, _| crate::sampler::reserve_scratch(vocab));
        self.run(mem, cx)
    }

    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let mut logits = mem.f32_mut(name, self.logits)?;
        let mut rows = mem.host_mut::<SampleRows>(name, self.rows)?;
        let mut ids = mem.u32_mut(name, self.token_ids)?;
        let vocab = self.vocab.max(1);
        let n = rows.rows.len().min(ids.len()).min(logits.len() / vocab);
        let sample_row = |row: &mut SampleRow, id: &mut u32, row_logits: &mut [f32]| {
            if !row.active {
                *id = NO_TOKEN;
                row.result = None;
                return;
            }
            let result = row.sampler.sample(row_logits, &row.prompt, &row.output);
            *id = result.as_ref().map_or(NO_TOKEN, |s| s.token);
            row.result = Some(result);
        };
        let active = rows.rows[..n].iter().filter(|r| r.active).count();
        if cx.pool.n_threads() <= 1 || active <= 1 {
            for ((row, id), row_logits) in rows.rows[..n]
                .iter_mut()
                .zip(ids.iter_mut())
                .zip(logits.chunks_exact_mut(vocab))
            {
                sample_row(row, id, row_logits);
            }
            return Ok(());
        }
        // Rows are independent (each has its own sampler and RNG), so they spread over the
        // pool; a row's draw does not depend on which thread takes it.
        let (rows_p, ids_p) = (
            SharedMut::new(&mut rows.rows[..n]),
            SharedMut::new(&mut ids[..n]),
        );
        let logits_p = SharedMut::new(&mut logits[..n * vocab]);
        let next = AtomicUsize::new(0);
        cx.pool.run_dynamic(|_, _| loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            // SAFETY: row i (its state, id and logits) is claimed by exactly one thread.
            unsafe {
                sample_row(
                    &mut rows_p.slice(i, 1)[0],
                    &mut ids_p.slice(i, 1)[0],
                    logits_p.slice(i * vocab, vocab),
                )
            };
        });
        Ok(())
    }
}
