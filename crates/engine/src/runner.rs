//! The model runner: turns a scheduler output into step inputs, runs the step on a runtime
//! backend (a captured plan per bucket where one serves it, eager ops otherwise; see
//! [`crate::buckets`]) and samples each sampling row inside the step with its request's own
//! sampler.
//!
//! Padding rows carry token 0, position 0 and slot -1 and belong to no sequence; padded
//! sequences have length 0; their sampling rows are inactive. At start-up each bucket is
//! captured once, largest first, after one warm pass of the largest decode and prefill shapes
//! fills the buffer pool they share; a bucket whose capture fails is logged once and runs
//! eager. Replay and eager run the same ops, so they produce the same bits.
//!
//! Hybrid models add their recurrent-state pool as persistent buffers and the scheduler's
//! state slots, restores and checkpoints as step inputs of fixed capacity; padded sequences get
//! slot `u32::MAX` and restore -1, unused checkpoint entries row `u32::MAX`, so padding advances
//! no state (see `oxllm_models::graph::record_hybrid_forward`).
//!
//! Prompt logprobs: a step may also *score* rows ([`ScoreRow`]: a row's logits against the
//! prompt's next token). Their logits rows follow the sampling rows, and such a step always runs
//! eager (buckets carry one logits row per sequence); eager and replay compute every row the
//! same way, so the sampled tokens of the step are those a replay would give.

use std::sync::Arc;
use std::time::Instant;

use oxllm_kernels::attention::AttnMetadata;
use oxllm_models::graph::{record_forward, KvBuffers, StateBuffers, StepBuffers, StepView};
use oxllm_models::{ForwardBatch, Model, ModelError, ModelKind};
use oxllm_runtime::{
    Backend, BufKind, BufRef, CpuBackend, CpuOptions, OpDesc, OpProfile, Plan, ReferenceBackend,
};
use oxllm_sample::mask_gate::MaskGate;
use oxllm_sample::sample_rows::{mask_words, SampleRows};
use oxllm_sample::{SampleError, Sampled, Sampler, ScoredToken};
use oxllm_sched::{BatchArrays, SchedulerOutput};

use crate::buckets::{decode_buckets, needed, prefill_buckets, BucketKind, PlanReport};
use crate::config::{BackendKind, KvDtype, PlanMode};
use crate::EngineError;

/// One sampling row's request: its sampler, the ids its penalties may read, and its token
/// mask when the request is constrained.
pub(crate) struct SampleJob<'a> {
    pub sampler: &'a mut Sampler,
    pub prompt: &'a [u32],
    pub output: &'a [u32],
    pub mask: Option<&'a [u32]>,
    /// The mask is instead row `gate_row` of the runner's [`MaskGate`], filled by a worker
    /// while the forward runs.
    pub gate_row: Option<usize>,
}

/// A row of the flat batch whose logits score a given token (prompt logprobs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScoreRow {
    pub row: u32,
    pub token: u32,
    /// Top alternatives to list.
    pub top: usize,
}

/// A sampling row's result; `None` when the row had no job.
pub(crate) type SampleOutcome = Option<Result<Sampled, SampleError>>;

/// What one step's run gives: whether a plan was replayed, each job's outcome, each score.
type RunOutcome = (bool, Vec<SampleOutcome>, Vec<Option<ScoredToken>>);

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
    pub cpu: CpuOptions,
    pub kv_dtype: KvDtype,
}

pub struct ModelRunner {
    backend: Box<dyn Backend + Send>,
    model: Model,
    /// Hybrid models: the recurrent-state buffers and state inputs.
    states: Option<StateBuffers>,
    kv: KvBuffers,
    inputs: StepBuffers,
    sample_rows: BufRef,
    /// Token masks of the sampling rows (a step input: constrained rows' allowed tokens).
    token_masks: BufRef,
    /// Masks computed while the forward runs (see `oxllm_sample::mask_gate`).
    mask_gate: Arc<MaskGate>,
    sampled_ids: BufRef,
    buckets: Vec<Bucket>,
    vocab: usize,
    block_size: usize,
    counts: StepCounts,
    report: PlanReport,
}

struct Bucket {
    kind: BucketKind,
    size: usize,
    plan: Plan,
}

impl ModelRunner {
    pub(crate) fn new(model: Model, cfg: RunnerConfig) -> Result<ModelRunner, EngineError> {
        let RunnerConfig {
            num_blocks,
            block_size,
            threads,
            max_seqs,
            state_slots,
            max_tokens,
            max_model_len,
            plan: mode,
            backend,
            cpu,
            kv_dtype,
        } = cfg;
        let mut backend: Box<dyn Backend + Send> = match backend {
            BackendKind::Cpu => Box::new(CpuBackend::with_options(threads, cpu)),
            BackendKind::Reference => Box::new(ReferenceBackend::new()),
            BackendKind::Cuda => Box::new(oxllm_cuda::CudaBackend::new(0, threads)?),
            BackendKind::CudaEmulator => Box::new(oxllm_cuda::EmulatedBackend::emulated(threads)),
        };
        if matches!(model.kind, ModelKind::Hybrid(_)) && backend.name().starts_with("cuda") {
            return Err(EngineError::Config(
                "hybrid models do not run on the CUDA backend yet (dense models only)".into(),
            ));
        }
        backend
            .load_weights(model.weights())
            .map_err(|e| EngineError::Model(e.into()))?;
        let (kv_width, vocab) = (model.config.kv_width(), model.config.vocab_size);
        let stride = max_model_len.div_ceil(block_size.max(1)).max(1);
        let max_tokens = max_tokens.max(max_seqs);
        let rt = |e: oxllm_runtime::RuntimeError| EngineError::Model(e.into());
        let states = match &model.kind {
            ModelKind::Dense(_) => None,
            ModelKind::Hybrid(m) => Some(
                StateBuffers::alloc(backend.as_mut(), m, state_slots, max_seqs, max_tokens)
                    .map_err(rt)?,
            ),
        };
        let kv_layers = model.config.kv_layers;
        let kv_kind = match kv_dtype {
            KvDtype::F16 => BufKind::F16,
            KvDtype::F32 => BufKind::F32,
        };
        let kv = KvBuffers::alloc_of(
            backend.as_mut(),
            kv_kind,
            kv_layers,
            num_blocks,
            block_size,
            kv_width,
        )
        .map_err(rt)?;
        let inputs =
            StepBuffers::alloc(backend.as_mut(), max_tokens, max_seqs, stride).map_err(rt)?;
        let rows = inputs.logits_indices.len;
        let mask_gate = Arc::new(MaskGate::new(rows, mask_words(vocab)));
        let mut host_rows = SampleRows::new(rows)?;
        host_rows.gate = Some(Arc::clone(&mask_gate));
        let sample_rows = backend.alloc_host(Box::new(host_rows)).map_err(rt)?;
        let sampled_ids = backend.alloc_persistent(BufKind::U32, rows).map_err(rt)?;
        let token_masks = backend
            .alloc_persistent(BufKind::U32, rows * mask_words(vocab))
            .map_err(rt)?;
        let mut exec = ModelRunner {
            backend,
            model,
            states,
            kv,
            inputs,
            sample_rows,
            token_masks,
            mask_gate,
            sampled_ids,
            buckets: Vec::new(),
            vocab,
            block_size,
            counts: StepCounts::default(),
            report: PlanReport::default(),
        };
        if mode == PlanMode::Captured {
            exec.capture_all(max_seqs, max_tokens)?;
        }
        Ok(exec)
    }

    /// The gate a mask worker fills for this step's rows ([`SampleJob::gate_row`]).
    pub(crate) fn mask_gate(&self) -> &Arc<MaskGate> {
        &self.mask_gate
    }

    pub(crate) fn num_slots(&self) -> usize {
        self.kv.num_slots()
    }

    /// Recurrent-state slots (hybrid models; 0 otherwise).
    pub(crate) fn num_state_slots(&self) -> usize {
        self.states.as_ref().map_or(0, |s| s.num_slots)
    }

    fn view(&self, kind: BucketKind, size: usize) -> Option<StepView> {
        match kind {
            BucketKind::Decode => self.inputs.view(size, size, size),
            BucketKind::Prefill => self.inputs.view(size, 1, 1),
        }
    }

    /// Launches the forward of `view` and the sampling of its logits rows.
    fn record(&mut self, view: &StepView) -> Result<(), ModelError> {
        let b = self.backend.as_mut();
        let logits = record_forward(b, &self.model, view, &self.kv, self.states.as_ref())?;
        self.backend.launch(OpDesc::Sample {
            logits,
            rows: self.sample_rows,
            token_ids: self.sampled_ids.prefix(view.logits()),
            mask: Some(self.token_masks),
            vocab: self.vocab,
        })?;
        Ok(())
    }

    fn capture_all(&mut self, max_seqs: usize, max_tokens: usize) -> Result<(), EngineError> {
        let start = Instant::now();
        if !self.backend.supports_capture() {
            let msg = format!(
                "backend `{}` does not support capture: every step runs eager",
                self.backend.name()
            );
            log::warn!("oxllm: {msg}");
            self.report.failed.push(msg);
            return Ok(());
        }
        let mut wanted: Vec<(BucketKind, usize)> = Vec::new();
        wanted.extend(
            decode_buckets(max_seqs)
                .into_iter()
                .rev()
                .map(|s| (BucketKind::Decode, s)),
        );
        wanted.extend(
            prefill_buckets(max_tokens)
                .into_iter()
                .rev()
                .map(|s| (BucketKind::Prefill, s)),
        );
        // One warm pass per kind at its largest shape fills the pool every bucket draws from.
        for kind in [BucketKind::Decode, BucketKind::Prefill] {
            let Some(&(_, size)) = wanted.iter().find(|(k, _)| *k == kind) else {
                continue;
            };
            let Some(view) = self.view(kind, size) else {
                continue;
            };
            self.backend
                .warm_step()
                .map_err(|e| EngineError::Model(e.into()))?;
            let r = self.record(&view);
            let ended = self.backend.end_step();
            r?;
            ended.map_err(|e| EngineError::Model(e.into()))?;
        }
        for (kind, size) in wanted {
            let Some(view) = self.view(kind, size) else {
                continue;
            };
            self.backend
                .begin_capture()
                .map_err(|e| EngineError::Model(e.into()))?;
            match self.record(&view) {
                Ok(()) => {
                    let plan = self
                        .backend
                        .end_capture()
                        .map_err(|e| EngineError::Model(e.into()))?;
                    self.report.peak_bytes = self.report.peak_bytes.max(plan.peak_bytes());
                    self.report.buffer_bytes = self.report.buffer_bytes.max(plan.buffer_bytes());
                    self.buckets.push(Bucket { kind, size, plan });
                    match kind {
                        BucketKind::Decode => self.report.decode_buckets.push(size),
                        BucketKind::Prefill => self.report.prefill_buckets.push(size),
                    }
                }
                Err(e) => {
                    self.backend.abort_capture();
                    let msg =
                        format!("{kind:?} bucket {size}: capture failed ({e}); it runs eager");
                    log::warn!("oxllm: {msg}");
                    self.report.failed.push(msg);
                }
            }
        }
        self.report.decode_buckets.sort_unstable();
        self.report.prefill_buckets.sort_unstable();
        // Smallest bucket first, so the first fit is the tightest.
        self.buckets
            .sort_by_key(|b| (b.kind == BucketKind::Prefill, b.size));
        self.report.capture_ms = start.elapsed().as_secs_f64() * 1e3;
        self.report.pool_bytes = self.backend.pooled_bytes();
        Ok(())
    }

    /// The bucket that serves a step of `arrays`, if any.
    fn pick_bucket(&self, arrays: &BatchArrays) -> Option<usize> {
        let (kind, need) = needed(arrays.seq_lens.len(), arrays.token_ids.len())?;
        self.buckets
            .iter()
            .position(|b| b.kind == kind && b.size >= need)
    }

    /// Runs one step: writes the inputs (padded to a bucket when one serves the step), moves
    /// each job's sampler into its sample row, runs the plan or the eager ops, and moves the
    /// samplers back. `jobs[j]` samples the `j`-th entry of `arrays.logits_indices` (`None`:
    /// nobody samples it); the entries after the jobs' are `scores`' rows. Returns whether a
    /// plan was replayed, each job's outcome and each score.
    fn run(
        &mut self,
        arrays: &BatchArrays,
        jobs: &mut [Option<SampleJob<'_>>],
        scores: &[ScoreRow],
        profile: Option<&mut OpProfile>,
    ) -> Result<RunOutcome, EngineError> {
        let rt = |e: oxllm_runtime::RuntimeError| EngineError::Model(e.into());
        // Buckets have one logits row per sequence; a scoring step runs eager.
        let bucket = if scores.is_empty() {
            self.pick_bucket(arrays)
        } else {
            None
        };
        let n_jobs = jobs.len();
        let n_logits = arrays.logits_indices.len();
        let (view, job_rows): (_, Vec<usize>) = match bucket {
            Some(i) => {
                let b = &self.buckets[i];
                let rows = match b.kind {
                    // Decode rows are their own logits rows.
                    BucketKind::Decode => {
                        arrays.logits_indices.iter().map(|&t| t as usize).collect()
                    }
                    BucketKind::Prefill => vec![0; n_jobs],
                };
                (self.view(b.kind, b.size), rows)
            }
            None => (
                self.inputs
                    .view(arrays.token_ids.len(), arrays.seq_lens.len(), n_logits),
                (0..n_jobs).collect(),
            ),
        };
        let view = view.ok_or_else(|| {
            EngineError::Config(format!(
                "a step of {} tokens over {} sequences exceeds the runner's buffers",
                arrays.token_ids.len(),
                arrays.seq_lens.len()
            ))
        })?;
        self.write_inputs(arrays, &view, bucket.map(|i| self.buckets[i].kind))?;
        {
            const OP: &str = "prepare_sampling";
            let mem = self.backend.host_access(OP, true).map_err(rt)?;
            let mut rows = mem
                .host_mut::<SampleRows>(OP, self.sample_rows)
                .map_err(rt)?;
            let mut masks = mem.u32_mut(OP, self.token_masks).map_err(rt)?;
            let words = mask_words(self.vocab);
            for row in rows.rows.iter_mut() {
                row.active = false;
                row.masked = false;
                row.gate_row = None;
                row.score = None;
            }
            for (row, s) in rows.rows.iter_mut().skip(n_jobs).zip(scores) {
                row.score = Some((s.token, s.top));
            }
            for (job, &r) in jobs.iter_mut().zip(&job_rows) {
                let (Some(job), Some(row)) = (job, rows.rows.get_mut(r)) else {
                    continue;
                };
                row.active = true;
                row.gate_row = job.gate_row;
                if let (Some(mask), Some(dst)) =
                    (job.mask, masks.get_mut(r * words..(r + 1) * words))
                {
                    let n = mask.len().min(words);
                    dst[..n].copy_from_slice(&mask[..n]);
                    dst[n..].fill(0);
                    row.masked = true;
                }
                std::mem::swap(&mut row.sampler, job.sampler);
                row.prompt.clear();
                row.output.clear();
                if row.sampler.needs_history() {
                    row.prompt.extend_from_slice(job.prompt);
                    row.output.extend_from_slice(job.output);
                }
            }
        }
        let result = match bucket {
            Some(i) => {
                let plan = &self.buckets[i].plan;
                match profile {
                    Some(p) => self.backend.replay_profiled(plan).map(|got| *p = got),
                    None => self.backend.replay(plan),
                }
                .map_err(rt)
            }
            None => self.run_eager(&view),
        };
        const OP: &str = "read_sampled";
        let mem = self.backend.host_access(OP, false).map_err(rt)?;
        let mut rows = mem
            .host_mut::<SampleRows>(OP, self.sample_rows)
            .map_err(rt)?;
        let mut outcomes = Vec::with_capacity(n_jobs);
        for (job, &r) in jobs.iter_mut().zip(&job_rows) {
            let (Some(job), Some(row)) = (job, rows.rows.get_mut(r)) else {
                outcomes.push(None);
                continue;
            };
            std::mem::swap(&mut row.sampler, job.sampler);
            row.active = false;
            outcomes.push(row.result.take());
        }
        let scored = (0..scores.len())
            .map(|k| {
                let row = rows.rows.get_mut(n_jobs + k)?;
                row.score = None;
                row.scored.take()
            })
            .collect();
        result.map(|()| (bucket.is_some(), outcomes, scored))
    }

    fn run_eager(&mut self, view: &StepView) -> Result<(), EngineError> {
        self.backend
            .begin_step()
            .map_err(|e| EngineError::Model(e.into()))?;
        let r = self.record(view);
        let ended = self.backend.end_step();
        r?;
        Ok(ended.map_err(ModelError::from)?)
    }

    /// Writes `arrays` into the input buffers of `view`, padding rows and sequences up to the
    /// view's shape.
    fn write_inputs(
        &mut self,
        arrays: &BatchArrays,
        view: &StepView,
        bucket: Option<BucketKind>,
    ) -> Result<(), EngineError> {
        const OP: &str = "write_inputs";
        let stride = view.block_table_stride;
        let rt = |e: oxllm_runtime::RuntimeError| EngineError::Model(e.into());
        let mem = self.backend.host_access(OP, true).map_err(rt)?;
        let n = arrays.token_ids.len();
        let seqs = arrays.seq_lens.len();
        fill(
            &mut mem.u32_mut(OP, view.token_ids).map_err(rt)?,
            &arrays.token_ids,
            0,
        );
        fill(
            &mut mem.u32_mut(OP, view.positions).map_err(rt)?,
            &arrays.positions,
            0,
        );
        fill(
            &mut mem.i32_mut(OP, view.slot_mapping).map_err(rt)?,
            &arrays.slot_mapping,
            -1,
        );
        fill(
            &mut mem.u32_mut(OP, view.query_start_loc).map_err(rt)?,
            &arrays.query_start_loc,
            n as u32,
        );
        fill(
            &mut mem.u32_mut(OP, view.seq_lens).map_err(rt)?,
            &arrays.seq_lens,
            0,
        );
        {
            let mut tables = mem.u32_mut(OP, view.block_tables).map_err(rt)?;
            tables.fill(0);
            let src_stride = arrays.block_table_stride;
            if src_stride > stride {
                return Err(EngineError::Config(format!(
                    "a sequence holds {src_stride} blocks, more than the {stride} of the longest context"
                )));
            }
            for s in 0..seqs {
                tables[s * stride..s * stride + src_stride]
                    .copy_from_slice(&arrays.block_tables[s * src_stride..(s + 1) * src_stride]);
            }
        }
        {
            let mut idx = mem.u32_mut(OP, view.logits_indices).map_err(rt)?;
            match bucket {
                // Every decode row has logits (inactive rows are not sampled).
                Some(BucketKind::Decode) => {
                    for (i, v) in idx.iter_mut().enumerate() {
                        *v = if i < n { i as u32 } else { 0 };
                    }
                }
                Some(BucketKind::Prefill) => idx[0] = n.saturating_sub(1) as u32,
                None => idx.copy_from_slice(&arrays.logits_indices),
            }
        }
        if let Some(states) = &self.states {
            states
                .write_inputs(
                    self.backend.as_mut(),
                    &arrays.state_slots,
                    &arrays.restore_slots,
                    &arrays.checkpoint_rows,
                    &arrays.checkpoint_slots,
                )
                .map_err(rt)?;
        }
        Ok(())
    }

    pub fn counts(&self) -> StepCounts {
        self.counts
    }

    pub fn plan_report(&self) -> &PlanReport {
        &self.report
    }

    /// Runs one step; `jobs[j]` samples the `j`-th sampling row (`arrays.sample_req_ids[j]`)
    /// and `scores[k]` scores a row's logits against a token. Returns the flat arrays, each
    /// sampling row's outcome and each score (`None` only if the row was out of reach).
    pub(crate) fn execute(
        &mut self,
        out: &SchedulerOutput,
        jobs: &mut [Option<SampleJob<'_>>],
        scores: &[ScoreRow],
    ) -> Result<StepResult, EngineError> {
        self.execute_profiled(out, jobs, scores, None)
    }

    pub(crate) fn execute_profiled(
        &mut self,
        out: &SchedulerOutput,
        jobs: &mut [Option<SampleJob<'_>>],
        scores: &[ScoreRow],
        profile: Option<&mut OpProfile>,
    ) -> Result<StepResult, EngineError> {
        let mut arrays = out.to_batch_arrays(self.block_size)?;
        if jobs.len() != arrays.sample_req_ids.len() {
            return Err(EngineError::Config(format!(
                "{} sampling jobs for {} sampling rows",
                jobs.len(),
                arrays.sample_req_ids.len()
            )));
        }
        let rows = arrays.token_ids.len();
        if let Some(bad) = scores.iter().find(|s| s.row as usize >= rows) {
            return Err(EngineError::Config(format!(
                "score row {} outside a step of {rows} rows",
                bad.row
            )));
        }
        arrays.logits_indices.extend(scores.iter().map(|s| s.row));
        let batch = batch_of(&arrays, self.block_size);
        batch
            .validate(self.num_slots(), self.block_size)
            .map_err(|e| EngineError::Model(ModelError::InvalidBatch(e)))?;
        if self.num_state_slots() > 0 {
            oxllm_models::hybrid::validate_state_slots(&batch, self.num_state_slots())
                .map_err(EngineError::Model)?;
        }
        let (replayed, outcomes, scored) = self.run(&arrays, jobs, scores, profile)?;
        if replayed {
            self.counts.replayed += 1;
        } else {
            self.counts.eager += 1;
        }
        Ok(StepResult {
            arrays,
            outcomes,
            scored,
        })
    }
}

/// What one step gave back: its flat arrays (logits rows: the sampling rows, then the score
/// rows), each sampling row's outcome, and each score row's result.
pub(crate) struct StepResult {
    pub arrays: BatchArrays,
    pub outcomes: Vec<SampleOutcome>,
    pub scored: Vec<Option<ScoredToken>>,
}

/// `dst[..src.len()] = src`, the rest `pad`.
fn fill<T: Copy>(dst: &mut [T], src: &[T], pad: T) {
    let n = src.len().min(dst.len());
    dst[..n].copy_from_slice(&src[..n]);
    dst[n..].fill(pad);
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
