//! The model runner: turns a scheduler output into the model's inputs, runs the step, and
//! samples each sampling row with its request's own sampler.
//!
//! Every model runs on a runtime backend ([`crate::plans`]): captured plans per bucket where
//! one serves the step, eager ops otherwise; sampling happens inside the step. For hybrid
//! models the scheduler's output names each sequence's recurrent-state slot (and the
//! checkpoints to restore or take), which the runner passes on as step inputs.

use oxllm_kernels::attention::AttnMetadata;
use oxllm_models::{ForwardBatch, Model, ModelError};
use oxllm_runtime::OpProfile;
use oxllm_sample::{SampleError, Sampled, Sampler};
use oxllm_sched::{BatchArrays, SchedulerOutput};

use crate::config::{BackendKind, KvCacheDtype, PlanMode};
use crate::plans::{GraphExec, PlanReport};
use crate::EngineError;

/// One sampling row's request: its sampler, the ids its penalties may read, and its token
/// mask when the request is constrained.
pub(crate) struct SampleJob<'a> {
    pub sampler: &'a mut Sampler,
    pub prompt: &'a [u32],
    pub output: &'a [u32],
    pub mask: Option<&'a [u32]>,
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

pub struct ModelRunner {
    block_size: usize,
    exec: Box<GraphExec>,
    counts: StepCounts,
    report: PlanReport,
}

impl ModelRunner {
    pub(crate) fn new(model: Model, cfg: RunnerConfig) -> Result<Self, EngineError> {
        let exec = GraphExec::new(&model, &cfg)?;
        let report = exec.report.clone();
        Ok(ModelRunner {
            block_size: cfg.block_size,
            exec: Box::new(exec),
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
        let g = &mut self.exec;
        let batch = batch_of(&arrays, self.block_size);
        batch
            .validate(g.num_slots(), self.block_size)
            .map_err(|e| EngineError::Model(ModelError::InvalidBatch(e)))?;
        if g.num_state_slots() > 0 {
            oxllm_models::hybrid::validate_state_slots(&batch, g.num_state_slots())
                .map_err(EngineError::Model)?;
        }
        let (replayed, outcomes) = g.run(&arrays, jobs, profile)?;
        if replayed {
            self.counts.replayed += 1;
        } else {
            self.counts.eager += 1;
        }
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
