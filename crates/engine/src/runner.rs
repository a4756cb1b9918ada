//! The model runner: turns a scheduler output into the model's inputs, runs the step, and
//! samples each sampling row with its request's own sampler.
//!
//! Dense models run on a runtime backend ([`crate::plans`]): captured plans per bucket where
//! one serves the step, eager ops otherwise; sampling happens inside the step. Hybrid models run
//! their direct forward on a [`KvCache`] and are sampled on the host; the scheduler's output
//! names each sequence's recurrent-state slot (and the checkpoints to restore or take), which
//! the runner passes on.

use std::sync::Arc;

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::pool::ThreadPool;
use oxllm_models::{ForwardBatch, KvCache, Model};
use oxllm_runtime::OpProfile;
use oxllm_sample::{SampleError, Sampled, Sampler};
use oxllm_sched::{BatchArrays, SchedulerOutput};

use crate::config::{BackendKind, KvCacheDtype, PlanMode};
use crate::plans::{GraphExec, PlanReport};
use crate::EngineError;

/// One sampling row's request: its sampler and the ids its penalties may read.
pub(crate) struct SampleJob<'a> {
    pub sampler: &'a mut Sampler,
    pub prompt: &'a [u32],
    pub output: &'a [u32],
}

/// A sampling row's result; `None` when the row had no job.
pub(crate) type SampleOutcome = Option<Result<Sampled, SampleError>>;

/// How the runner's steps ran so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCounts {
    pub replayed: u64,
    pub eager: u64,
}

#[derive(Clone, Copy)]
pub(crate) struct RunnerConfig {
    pub num_blocks: usize,
    pub block_size: usize,
    pub threads: usize,
    pub max_seqs: usize,
    /// Hybrid models: recurrent-state slots of the cache (running slots + checkpoint slots).
    pub state_slots: usize,
    pub max_tokens: usize,
    pub max_model_len: usize,
    pub plan: PlanMode,
    pub backend: BackendKind,
    /// Resolved (not `Auto`).
    pub kv_dtype: KvCacheDtype,
}

enum Exec {
    Graph(Box<GraphExec>),
    Direct(Box<Direct>),
}

/// The direct forward of models without plans (hybrids).
struct Direct {
    kv: KvCache,
    pool: ThreadPool,
}

pub struct ModelRunner {
    model: Model,
    block_size: usize,
    exec: Exec,
    counts: StepCounts,
    report: PlanReport,
}

impl ModelRunner {
    pub(crate) fn new(model: Model, cfg: RunnerConfig) -> Result<Self, EngineError> {
        let mut report = PlanReport::default();
        let exec = match model.dense_shared() {
            Some(dense) => {
                let g = GraphExec::new(Arc::clone(dense), &cfg)?;
                report = g.report.clone();
                Exec::Graph(Box::new(g))
            }
            None => {
                if cfg.plan == PlanMode::Captured {
                    let msg = "captured plans are not available for hybrid models yet: every step runs eager";
                    eprintln!("oxllm: {msg}");
                    report.failed.push(msg.to_string());
                }
                let kv = model.new_cache(cfg.num_blocks, cfg.block_size, cfg.state_slots);
                Exec::Direct(Box::new(Direct {
                    kv,
                    pool: ThreadPool::new(cfg.threads),
                }))
            }
        };
        Ok(ModelRunner {
            model,
            block_size: cfg.block_size,
            exec,
            counts: StepCounts::default(),
            report,
        })
    }

    pub fn counts(&self) -> StepCounts {
        self.counts
    }

    pub fn plan_report(&self) -> &PlanReport {
        &self.report
    }

    /// Runs one step; `jobs[j]` samples the `j`-th sampling row (`arrays.sample_req_ids[j]`).
    /// Returns the flat arrays and each row's outcome.
    pub(crate) fn execute(
        &mut self,
        out: &SchedulerOutput,
        jobs: &mut [Option<SampleJob<'_>>],
    ) -> Result<(BatchArrays, Vec<SampleOutcome>), EngineError> {
        self.execute_profiled(out, jobs, None)
    }

    pub(crate) fn execute_profiled(
        &mut self,
        out: &SchedulerOutput,
        jobs: &mut [Option<SampleJob<'_>>],
        profile: Option<&mut OpProfile>,
    ) -> Result<(BatchArrays, Vec<SampleOutcome>), EngineError> {
        let arrays = out.to_batch_arrays(self.block_size)?;
        if jobs.len() != arrays.sample_req_ids.len() {
            return Err(EngineError::Config(format!(
                "{} sampling jobs for {} sampling rows",
                jobs.len(),
                arrays.sample_req_ids.len()
            )));
        }
        let outcomes = match &mut self.exec {
            Exec::Graph(g) => {
                let num_slots = g.num_slots();
                batch_of(&arrays, self.block_size)
                    .validate(num_slots, self.block_size)
                    .map_err(|e| EngineError::Model(oxllm_models::ModelError::InvalidBatch(e)))?;
                let (replayed, outcomes) = g.run(&arrays, jobs, profile)?;
                if replayed {
                    self.counts.replayed += 1;
                } else {
                    self.counts.eager += 1;
                }
                outcomes
            }
            Exec::Direct(d) => {
                let batch = batch_of(&arrays, self.block_size);
                let mut logits = self.model.forward(&d.pool, &batch, &mut d.kv)?;
                self.counts.eager += 1;
                let vocab = self.model.config.vocab_size;
                jobs.iter_mut()
                    .zip(logits.chunks_exact_mut(vocab.max(1)))
                    .map(|(job, row)| {
                        job.as_mut()
                            .map(|j| j.sampler.sample(row, j.prompt, j.output))
                    })
                    .collect()
            }
        };
        Ok((arrays, outcomes))
    }
}

fn batch_of(arrays: &BatchArrays, block_size: usize) -> ForwardBatch<'_> {
    ForwardBatch {
        token_ids: &arrays.token_ids,
        positions: &arrays.positions,
        slot_mapping: &arrays.slot_mapping,
        attn: AttnMetadata {
            query_start_loc: &arrays.query_start_loc,
            seq_lens: &arrays.seq_lens,
            block_tables: &arrays.block_tables,
            block_table_stride: arrays.block_table_stride,
            block_size,
        },
        logits_indices: &arrays.logits_indices,
        // Hybrid models: the scheduler's state slots, restores and checkpoints.
        state_slots: &arrays.state_slots,
        restore_slots: &arrays.restore_slots,
        checkpoint_rows: &arrays.checkpoint_rows,
        checkpoint_slots: &arrays.checkpoint_slots,
    }
}
