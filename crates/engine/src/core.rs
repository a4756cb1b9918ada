//! The engine thread's state and its step: the single owner of every live request.
//!
//! Guarantees: a request's events arrive in order and end with exactly one `Finished` or
//! `Error`; a request whose stream was dropped is aborted (blocks freed) before the next step;
//! each request samples from its own seeded generator, so its output does not depend on what
//! else is in the batch.
//!
//! Prompt logprobs: a request asking for them skips the prefix cache (every prompt position
//! needs its logits, which a cache hit would not compute) and has each prompt row scored
//! against the next prompt token in the steps that compute it; a position scored once is not
//! scored again after a preemption. The scores travel on the request's first delta. With
//! `max_tokens` 0 the request scores its prompt and finishes (`length`) without output: the
//! token its last prompt row samples is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use oxllm_core::{FinishReason, ReqId};
use oxllm_sample::mask_gate::MaskGate;
use oxllm_sample::{Sampler, StopChecker};
use oxllm_sched::{Request, Scheduler, SchedulerOutput};
use oxllm_structured::{Constraint, StructuredError};
use oxllm_tok::{IncrementalDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::runner::{ModelRunner, SampleJob, SampleOutcome, ScoreRow, StepResult};
use crate::{EngineError, GenerationRequest, PromptLogprob, RequestEvent, TokenLogprob};
use oxllm_sample::ScoredToken;

/// A point-in-time view of the engine for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub num_running: usize,
    pub num_waiting: usize,
    pub num_blocks_total: usize,
    pub num_blocks_free: usize,
    pub prefix_queried_tokens: u64,
    pub prefix_hit_tokens: u64,
    pub num_preemptions: u64,
    pub steps: u64,
    pub prompt_tokens_computed: u64,
    pub generated_tokens: u64,
    /// Steps that replayed a captured plan, and steps that ran eager.
    pub plan_steps: u64,
    pub eager_steps: u64,
    /// Hybrid models: recurrent-state slots for running sequences (0 for attention-only
    /// models), how many are free, and the state checkpoints held for prefix hits.
    pub num_state_slots_total: usize,
    pub num_state_slots_free: usize,
    pub num_state_checkpoints: usize,
    /// Constrained decoding: token masks computed so far and the seconds they took.
    pub masks_computed: u64,
    pub mask_seconds: f64,
    /// Constrained decoding: sampled tokens the grammars consumed and the seconds it took.
    pub grammar_advances: u64,
    pub grammar_advance_seconds: f64,
    /// Steps whose masks a worker computed while the step's forward ran (overlap on).
    pub masks_overlapped: u64,
    /// Stop strings: text bytes fed to the requests' stop matchers, and the matchers' steps
    /// (at most twice the bytes, whatever the stop lists: a long list does not slow a step).
    pub stop_match_bytes: u64,
    pub stop_match_steps: u64,
}

/// Running totals of stop-string matching work on the engine thread.
#[derive(Clone, Copy, Debug, Default)]
struct StopMatchWork {
    bytes: u64,
    steps: u64,
}

impl StopMatchWork {
    fn add(&mut self, bytes: usize, steps: u64) {
        self.bytes += bytes as u64;
        self.steps += steps;
    }
}

impl EngineStats {
    /// Blocks held by requests or cached prefixes not yet evicted... minus the null block.
    pub fn num_blocks_used(&self) -> usize {
        self.num_blocks_total
            .saturating_sub(1)
            .saturating_sub(self.num_blocks_free)
    }
}

/// What one step runs, decided before the model runs: the scheduler's output, the request of
/// each sampling row (in logits-row order), and the constrained requests whose token mask
/// failed (they sample nothing and are failed on delivery).
pub(crate) struct StepPlan {
    out: SchedulerOutput,
    sampling: Vec<ReqId>,
    mask_failures: Vec<(ReqId, StructuredError)>,
}

/// What the model drew for a [`StepPlan`]: each sampling row's request and outcome (or the
/// step's error), and when the tokens were produced.
pub(crate) struct StepRun {
    /// Each sampling row's outcome, and each scored prompt row's value.
    rows: Result<StepRows, EngineError>,
    /// The prompt positions the step scored (prompt logprobs), in row order.
    scores: Vec<(ReqId, ScoreAt)>,
    produced_at: Instant,
    /// Constrained requests whose mask failed on the worker (overlap on).
    mask_failures: Vec<(ReqId, StructuredError)>,
}

type StepRows = (Vec<(ReqId, SampleOutcome)>, Vec<Option<ScoredToken>>);

struct LiveRequest<'t> {
    tx: UnboundedSender<RequestEvent>,
    sampler: Sampler,
    /// `None` for models without a tokenizer: events then carry ids and no text.
    decoder: Option<IncrementalDecoder<'t>>,
    stop: StopChecker,
    want_logprobs: bool,
    prompt_tokens: usize,
    completion_tokens: usize,
    cached_tokens: Option<usize>,
    /// Constrained decoding: the request's grammar and its next step's mask words.
    constraint: Option<Box<Constraint>>,
    mask: Vec<u32>,
    /// Prompt logprobs being gathered, until the first delta carries them.
    prompt_scores: Option<PromptScores>,
    /// `max_tokens` 0: only the prompt is scored; sampled tokens are dropped.
    score_only: bool,
}

/// A row to score and the prompt position its score belongs to.
struct ScoreAt {
    position: usize,
    row: ScoreRow,
}

/// A request's prompt logprobs as its steps compute them.
struct PromptScores {
    top: usize,
    /// One per prompt position; position 0 stays `None`.
    values: Vec<Option<PromptLogprob>>,
}

pub(crate) struct EngineCore<'t> {
    tokenizer: Option<&'t Tokenizer>,
    scheduler: Scheduler,
    runner: ModelRunner,
    live: HashMap<ReqId, LiveRequest<'t>>,
    stats: Arc<Mutex<EngineStats>>,
    num_blocks: usize,
    preemptions: u64,
    steps: u64,
    prompt_tokens_computed: u64,
    generated_tokens: u64,
    seed_base: u64,
    masks_computed: u64,
    mask_seconds: f64,
    grammar_advances: u64,
    grammar_advance_seconds: f64,
    masks_overlapped: u64,
    /// Compute token masks on a worker while the forward runs (else before the step).
    overlap_masks: bool,
    stop_match: StopMatchWork,
}

impl<'t> EngineCore<'t> {
    pub fn new(
        tokenizer: Option<&'t Tokenizer>,
        scheduler: Scheduler,
        runner: ModelRunner,
        num_blocks: usize,
        stats: Arc<Mutex<EngineStats>>,
    ) -> Self {
        let seed_base = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        let core = EngineCore {
            tokenizer,
            scheduler,
            runner,
            live: HashMap::new(),
            stats,
            num_blocks,
            preemptions: 0,
            steps: 0,
            prompt_tokens_computed: 0,
            generated_tokens: 0,
            seed_base,
            masks_computed: 0,
            mask_seconds: 0.0,
            grammar_advances: 0,
            grammar_advance_seconds: 0.0,
            masks_overlapped: 0,
            overlap_masks: false,
            stop_match: StopMatchWork::default(),
        };
        core.publish_stats();
        core
    }

    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Starts recording KV-cache events, with a snapshot of the cache first.
    pub fn enable_kv_events(&mut self) {
        self.scheduler.enable_kv_events();
    }

    /// The KV-cache events since the last call (see `kv_events`).
    pub fn take_kv_events(&mut self) -> Vec<oxllm_kv::KvEvent> {
        self.scheduler.take_kv_events()
    }

    /// Admits a request of submission group `group`; on error the client gets an `Error`
    /// event and nothing is kept.
    pub fn add(
        &mut self,
        id: ReqId,
        group: ReqId,
        req: GenerationRequest,
        tx: UnboundedSender<RequestEvent>,
    ) {
        match self.try_add(id, group, req, tx.clone()) {
            Ok(()) => {}
            Err(e) => {
                let _ = tx.send(RequestEvent::Error(Arc::new(e)));
            }
        }
        self.publish_stats();
    }

    fn try_add(
        &mut self,
        id: ReqId,
        group: ReqId,
        req: GenerationRequest,
        tx: UnboundedSender<RequestEvent>,
    ) -> Result<(), EngineError> {
        let p = &req.params;
        let sampler = Sampler::for_choice(p, self.seed_base.wrapping_add(id), req.choice)?;
        let mut stop_ids = p.stop_token_ids.clone();
        if !p.ignore_eos {
            if let Some(tok) = self.tokenizer {
                stop_ids.extend_from_slice(tok.eos_ids());
            }
        }
        let prompt_tokens = req.prompt_ids.len();
        let prompt_scores = p.prompt_logprobs.map(|top| PromptScores {
            top,
            values: vec![None; prompt_tokens],
        });
        let score_only = p.max_tokens == 0;
        let mask = req
            .constraint
            .as_ref()
            .map_or_else(Vec::new, |c| vec![0; c.mask_words()]);
        // Scoring the prompt alone still samples once, from its last row (dropped).
        let mut request =
            Request::new(id, req.prompt_ids, p.max_tokens.max(1), stop_ids).with_group(group);
        if prompt_scores.is_some() {
            request = request.without_prefix_cache();
        }
        self.scheduler.add_request(request)?;
        self.live.insert(
            id,
            LiveRequest {
                tx,
                sampler,
                decoder: self.tokenizer.map(|t| t.incremental_decoder(true)),
                stop: StopChecker::shared(p.stop.clone()),
                want_logprobs: p.logprobs.is_some(),
                prompt_tokens,
                completion_tokens: 0,
                cached_tokens: None,
                constraint: req.constraint,
                mask,
                prompt_scores,
                score_only,
            },
        );
        Ok(())
    }

    pub fn abort(&mut self, id: ReqId) {
        if self.live.remove(&id).is_some() {
            self.scheduler.abort(id);
            self.publish_stats();
        }
    }

    /// Aborts requests whose client dropped its stream.
    pub fn reap_disconnected(&mut self) {
        let gone: Vec<ReqId> = self
            .live
            .iter()
            .filter(|(_, r)| r.tx.is_closed())
            .map(|(id, _)| *id)
            .collect();
        if gone.is_empty() {
            return;
        }
        for id in gone {
            self.abort(id);
        }
        self.publish_stats();
    }

    /// One engine step: [`Self::plan_step`] decides what runs, [`Self::run_step`] runs the
    /// model and samples, [`Self::deliver_step`] updates the scheduler and streams the tokens.
    /// Errors of the model are reported to every request in the step, which are then dropped,
    /// so a bad step never hangs a client.
    pub fn step(&mut self) {
        let Some(plan) = self.plan_step() else {
            return;
        };
        let run = self.run_step(&plan);
        self.deliver_step(plan, run);
    }

    /// Schedules the next step and prepares its sampling rows (token masks of constrained
    /// requests). `None` when nothing runs: a scheduler failure (every request is failed) or
    /// nothing schedulable (e.g. everything waits for blocks; the caller waits for new input
    /// rather than spin).
    fn plan_step(&mut self) -> Option<StepPlan> {
        let out = match self.scheduler.schedule() {
            Ok(out) => out,
            Err(e) => {
                self.fail_all(EngineError::Scheduler(e));
                return None;
            }
        };
        self.preemptions += out.preempted.len() as u64;
        if out.is_empty() {
            let _ = self.scheduler.update_from_output(&out, &[]);
            self.publish_stats();
            return None;
        }
        for seq in &out.scheduled {
            if let Some(live) = self.live.get_mut(&seq.req_id) {
                live.cached_tokens.get_or_insert(seq.start_pos);
            }
            let prompt_len = self
                .scheduler
                .request(seq.req_id)
                .map_or(0, |r| r.prompt().len());
            let prompt_part = prompt_len
                .saturating_sub(seq.start_pos)
                .min(seq.token_ids.len());
            self.prompt_tokens_computed += prompt_part as u64;
        }
        // One sampling row per request that samples, in the order of the flat batch's logits
        // rows.
        let sampling: Vec<ReqId> = out
            .scheduled
            .iter()
            .filter(|s| s.needs_sample && !s.token_ids.is_empty())
            .map(|s| s.req_id)
            .collect();
        let mask_failures = if self.overlap_masks {
            Vec::new()
        } else {
            self.compute_masks(&sampling)
        };
        Some(StepPlan {
            out,
            sampling,
            mask_failures,
        })
    }

    /// Runs `plan` on the model, each sampling row drawn with its request's own sampler (a
    /// request whose mask failed samples nothing). Sends no event and touches no scheduler
    /// state: what was drawn goes to [`Self::deliver_step`].
    fn run_step(&mut self, plan: &StepPlan) -> StepRun {
        let row_of: HashMap<ReqId, usize> = plan
            .sampling
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, i))
            .collect();
        let scores = self.score_rows(&plan.out);
        let mut jobs: Vec<Option<SampleJob<'_>>> = plan.sampling.iter().map(|_| None).collect();
        // Overlap on: the constrained rows' grammars, filled on a worker into the gate row
        // of their sampling row while the forward runs.
        let mut work: Vec<MaskWork<'_>> = Vec::new();
        let overlap = self.overlap_masks;
        for (id, live) in self.live.iter_mut() {
            if plan.mask_failures.iter().any(|(f, _)| f == id) {
                continue;
            }
            if let (Some(&row), Some(req)) = (row_of.get(id), self.scheduler.request(*id)) {
                let LiveRequest {
                    sampler,
                    constraint,
                    mask,
                    ..
                } = live;
                let active = constraint.as_deref_mut().filter(|c| c.is_active());
                let (mask, gate_row) = match active {
                    Some(c) if overlap => {
                        work.push(MaskWork {
                            id: *id,
                            row,
                            constraint: c,
                        });
                        (None, Some(row))
                    }
                    Some(_) => (Some(mask.as_slice()), None),
                    None => (None, None),
                };
                jobs[row] = Some(SampleJob {
                    sampler,
                    prompt: req.prompt(),
                    output: req.output(),
                    mask,
                    gate_row,
                });
            }
        }
        let score_rows: Vec<ScoreRow> = scores.iter().map(|(_, s)| s.row).collect();
        let (executed, masks) = if work.is_empty() {
            let executed = self.runner.execute(&plan.out, &mut jobs, &score_rows);
            (executed, MaskReport::default())
        } else {
            let gate = Arc::clone(self.runner.mask_gate());
            let work_ids: Vec<ReqId> = work.iter().map(|w| w.id).collect();
            let runner = &mut self.runner;
            let forward_start = Instant::now();
            gate.close();
            let gate_ref = &gate;
            std::thread::scope(|s| {
                let spawned = std::thread::Builder::new()
                    .name("oxllm-masks".into())
                    .spawn_scoped(s, move || fill_gate(gate_ref, work));
                let (worker, inline) = match spawned {
                    Ok(h) => (Some(h), None),
                    // No thread to be had: open the gate (the sample op must not wait) and
                    // fail the constrained requests of this step, cleanly.
                    Err(e) => {
                        log::warn!("oxllm: mask worker did not start: {e}");
                        drop(gate.fill());
                        let why = format!("the mask worker did not start: {e}");
                        (None, Some(MaskReport::failed(&work_ids, &why)))
                    }
                };
                let executed = runner.execute(&plan.out, &mut jobs, &score_rows);
                let forward_end = Instant::now();
                let mut report = match (worker, inline) {
                    (_, Some(r)) => r,
                    (Some(h), None) => h.join().unwrap_or_else(|_| {
                        MaskReport::failed(&work_ids, "the mask worker panicked")
                    }),
                    (None, None) => MaskReport::default(),
                };
                report.overlapped = report
                    .span
                    .is_some_and(|(a, b)| a < forward_end && b > forward_start);
                (executed, report)
            })
        };
        self.masks_computed += masks.masks;
        self.mask_seconds += masks.seconds;
        self.masks_overlapped += u64::from(masks.overlapped);
        let mask_failures = masks.failures;
        let produced_at = Instant::now();
        StepRun {
            rows: executed.map(|r: StepResult| {
                let rows = r
                    .arrays
                    .sample_req_ids
                    .into_iter()
                    .zip(r.outcomes)
                    .collect();
                (rows, r.scored)
            }),
            scores,
            produced_at,
            mask_failures,
        }
    }

    /// Applies what `run` drew: advances grammars, updates the scheduler (appends, finishes,
    /// frees), publishes stats, then sends each request its delta (and its finish). A failed
    /// run fails every request of the step.
    fn deliver_step(&mut self, plan: StepPlan, run: StepRun) {
        let StepPlan {
            out, mask_failures, ..
        } = plan;
        for (id, err) in mask_failures {
            self.fail(id, err.into());
        }
        let StepRun {
            rows,
            scores,
            produced_at,
            mask_failures,
        } = run;
        for (id, err) in mask_failures {
            self.fail(id, err.into());
        }
        let (rows, scored) = match rows {
            Ok(r) => r,
            Err(e) => {
                let err = Arc::new(e);
                let ids: Vec<ReqId> = out.scheduled.iter().map(|s| s.req_id).collect();
                for id in ids {
                    self.fail_shared(id, Arc::clone(&err));
                }
                let _ = self.scheduler.update_from_output(&out, &[]);
                return;
            }
        };
        for ((id, row), value) in scores.iter().zip(scored) {
            let slot = self
                .live
                .get_mut(id)
                .and_then(|l| l.prompt_scores.as_mut())
                .and_then(|p| p.values.get_mut(row.position));
            if let Some(slot) = slot {
                *slot = value;
            }
        }
        let mut sampled = Vec::with_capacity(rows.len());
        let mut logprobs: HashMap<ReqId, TokenLogprob> = HashMap::new();
        for (id, outcome) in rows {
            if !self.live.contains_key(&id) {
                continue;
            }
            match outcome {
                Some(Ok(s)) => {
                    let advanced = match self.live.get_mut(&id).and_then(|l| l.constraint.as_mut())
                    {
                        Some(c) => {
                            let before = c.stats();
                            let advanced = c.advance(s.token);
                            let after = c.stats();
                            self.grammar_advances += after.advances - before.advances;
                            self.grammar_advance_seconds +=
                                after.advance_seconds - before.advance_seconds;
                            advanced
                        }
                        None => Ok(()),
                    };
                    if let Err(e) = advanced {
                        self.fail(id, e.into());
                        continue;
                    }
                    let Some(live) = self.live.get(&id) else {
                        continue;
                    };
                    if live.want_logprobs {
                        logprobs.insert(
                            id,
                            TokenLogprob {
                                token: s.token,
                                logprob: s.logprob.unwrap_or(0.0),
                                top: s.top_logprobs,
                            },
                        );
                    }
                    sampled.push((id, s.token));
                }
                Some(Err(e)) => {
                    self.fail(
                        id,
                        EngineError::RequestFailed(format!("sampling failed: {e}")),
                    );
                }
                None => {}
            }
        }
        let updates = match self.scheduler.update_from_output(&out, &sampled) {
            Ok(u) => u,
            Err(e) => {
                self.fail_all(EngineError::Scheduler(e));
                return;
            }
        };
        self.steps += 1;
        // Publish before the events go out, so a client that has seen a token never reads
        // stats older than the step that produced it.
        self.publish_stats();
        for upd in updates {
            self.generated_tokens += upd.new_token_ids.len() as u64;
            self.deliver(
                upd.req_id,
                upd.new_token_ids,
                upd.finish_reason,
                logprobs.remove(&upd.req_id),
                produced_at,
            );
        }
        self.publish_stats();
    }

    /// This step's prompt rows to score: for each request gathering prompt logprobs, every
    /// computed row whose next position is a prompt token not scored yet.
    fn score_rows(&self, out: &oxllm_sched::SchedulerOutput) -> Vec<(ReqId, ScoreAt)> {
        let mut rows = Vec::new();
        let mut first_row = 0usize;
        for seq in &out.scheduled {
            let n = seq.token_ids.len();
            let wanted = self
                .live
                .get(&seq.req_id)
                .and_then(|l| l.prompt_scores.as_ref());
            let prompt = self.scheduler.request(seq.req_id).map(|r| r.prompt());
            if let (Some(scores), Some(prompt)) = (wanted, prompt) {
                for i in 0..n {
                    let next = seq.start_pos + i + 1;
                    if next >= prompt.len() {
                        break;
                    }
                    if scores.values[next].is_some() {
                        continue;
                    }
                    rows.push((
                        seq.req_id,
                        ScoreAt {
                            position: next,
                            row: ScoreRow {
                                row: (first_row + i) as u32,
                                token: prompt[next],
                                top: scores.top,
                            },
                        },
                    ));
                }
            }
            first_row += n;
        }
        rows
    }

    /// Computes token masks on a worker while the forward runs (off by default), or before
    /// each step on the engine thread; either way the same masks reach the same rows.
    pub fn set_overlap_masks(&mut self, on: bool) {
        self.overlap_masks = on;
    }

    /// Fills the masks of this step's constrained sampling rows; returns the requests whose
    /// grammar failed (they are failed after the step, like a failed draw).
    fn compute_masks(&mut self, sampling: &[ReqId]) -> Vec<(ReqId, StructuredError)> {
        let mut failures = Vec::new();
        for id in sampling {
            let Some(live) = self.live.get_mut(id) else {
                continue;
            };
            let Some(c) = live.constraint.as_mut().filter(|c| c.is_active()) else {
                continue;
            };
            let before = c.stats();
            if let Err(e) = c.fill_mask(&mut live.mask) {
                failures.push((*id, e));
            }
            let after = c.stats();
            self.masks_computed += after.masks - before.masks;
            self.mask_seconds += after.seconds - before.seconds;
        }
        failures
    }

    fn deliver(
        &mut self,
        id: ReqId,
        token_ids: Vec<u32>,
        mut finish: Option<FinishReason>,
        logprob: Option<TokenLogprob>,
        produced_at: Instant,
    ) {
        let Some(live) = self.live.get_mut(&id) else {
            return;
        };
        let prompt_logprobs = live.prompt_scores.take().map(|p| p.values);
        if live.score_only {
            // The prompt was all that was asked for: drop the token its last row sampled.
            let _ = live.tx.send(RequestEvent::Delta {
                token_ids: Vec::new(),
                text: String::new(),
                logprobs: Vec::new(),
                prompt_logprobs,
                produced_at,
            });
            let _ = live.tx.send(RequestEvent::Finished {
                reason: FinishReason::Length,
                text: String::new(),
                prompt_tokens: live.prompt_tokens,
                completion_tokens: 0,
                cached_tokens: live.cached_tokens.unwrap_or(0),
            });
            self.live.remove(&id);
            self.scheduler.finish_with(id, FinishReason::Length);
            return;
        }
        live.completion_tokens += token_ids.len();
        let mut text = String::new();
        for &t in &token_ids {
            let Some(decoder) = live.decoder.as_mut() else {
                break;
            };
            match decoder.push(t) {
                Ok(delta) => text.push_str(&delta),
                // A model may have more ids than its tokenizer (padded embedding rows): such an
                // id has no spelling, so it adds no text.
                Err(oxllm_tok::TokError::TokenIdOutOfRange { .. }) => {}
                Err(e) => {
                    self.fail(
                        id,
                        EngineError::RequestFailed(format!("detokenization failed: {e}")),
                    );
                    return;
                }
            }
        }
        let steps_before = live.stop.steps();
        let outcome = live.stop.push(&text);
        self.stop_match
            .add(text.len(), live.stop.steps() - steps_before);
        let mut emitted = outcome.text;
        if outcome.stopped.is_some() && finish.is_none() {
            self.scheduler.finish_with(id, FinishReason::Stop);
            finish = Some(FinishReason::Stop);
        }
        let Some(live) = self.live.get_mut(&id) else {
            return;
        };
        let logprobs = logprob.into_iter().collect();
        let _ = live.tx.send(RequestEvent::Delta {
            token_ids,
            text: std::mem::take(&mut emitted),
            logprobs,
            prompt_logprobs,
            produced_at,
        });
        if let Some(reason) = finish {
            let mut tail = String::new();
            if live.stop.stopped().is_none() {
                if let Some(Ok(rest)) = live.decoder.as_mut().map(|d| d.flush()) {
                    let steps_before = live.stop.steps();
                    let o = live.stop.push(&rest);
                    self.stop_match
                        .add(rest.len(), live.stop.steps() - steps_before);
                    tail.push_str(&o.text);
                }
                if live.stop.stopped().is_none() {
                    tail.push_str(&live.stop.finish());
                }
            }
            let _ = live.tx.send(RequestEvent::Finished {
                reason,
                text: tail,
                prompt_tokens: live.prompt_tokens,
                completion_tokens: live.completion_tokens,
                cached_tokens: live.cached_tokens.unwrap_or(0),
            });
            self.live.remove(&id);
        }
    }

    fn fail(&mut self, id: ReqId, err: EngineError) {
        self.fail_shared(id, Arc::new(err));
    }

    fn fail_shared(&mut self, id: ReqId, err: Arc<EngineError>) {
        if let Some(live) = self.live.remove(&id) {
            let _ = live.tx.send(RequestEvent::Error(err));
        }
        self.scheduler.abort(id);
    }

    fn fail_all(&mut self, err: EngineError) {
        let err = Arc::new(err);
        let ids: Vec<ReqId> = self.live.keys().copied().collect();
        for id in ids {
            self.fail_shared(id, Arc::clone(&err));
        }
    }

    fn publish_stats(&self) {
        let pc = self.scheduler.prefix_cache_stats();
        let kv = self.scheduler.kv();
        let slots = kv.state_slots();
        let snapshot = EngineStats {
            num_running: self.scheduler.num_running(),
            num_waiting: self.scheduler.num_waiting(),
            num_blocks_total: self.num_blocks,
            num_blocks_free: self.scheduler.num_free_blocks(),
            prefix_queried_tokens: pc.num_queried_tokens,
            prefix_hit_tokens: pc.num_hit_tokens,
            num_preemptions: self.preemptions,
            steps: self.steps,
            prompt_tokens_computed: self.prompt_tokens_computed,
            generated_tokens: self.generated_tokens,
            plan_steps: self.runner.counts().replayed,
            eager_steps: self.runner.counts().eager,
            num_state_slots_total: slots.map_or(0, |s| s.num_slots()),
            num_state_slots_free: slots.map_or(0, |s| s.num_free()),
            num_state_checkpoints: kv.checkpoint_stats().map_or(0, |c| c.committed),
            masks_computed: self.masks_computed,
            mask_seconds: self.mask_seconds,
            grammar_advances: self.grammar_advances,
            grammar_advance_seconds: self.grammar_advance_seconds,
            masks_overlapped: self.masks_overlapped,
            stop_match_bytes: self.stop_match.bytes,
            stop_match_steps: self.stop_match.steps,
        };
        if let Ok(mut s) = self.stats.lock() {
            *s = snapshot;
        }
    }
}

#[cfg(test)]
mod tests {
    //! The three phases of a step, each on its own, over the tiny f32 Llama fixture.

    use oxllm_models::load_model;
    use oxllm_sample::{Sampled, SamplingParams};
    use oxllm_sched::SchedulerConfig;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    use super::*;
    use crate::config::{BackendKind, KvDtype, PlanMode};
    use crate::runner::RunnerConfig;

    fn fixture() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/tiny/llama-f32")
    }

    /// The oracle's prompt and transformers' greedy continuation of it.
    fn oracle() -> (Vec<u32>, Vec<u32>) {
        let o: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture().join("oracle.json")).unwrap())
                .unwrap();
        let ids = |k: &str| -> Vec<u32> {
            o[k].as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        };
        (ids("prompt_ids"), ids("greedy_ids"))
    }

    fn tiny_core() -> EngineCore<'static> {
        let (_, model) = load_model(&fixture()).unwrap();
        let (num_blocks, block_size, max_model_len) = (64, 16, 256);
        let scheduler = Scheduler::new(SchedulerConfig {
            max_num_batched_tokens: 64,
            max_prefill_beside_decode: None,
            max_num_seqs: 4,
            block_size,
            num_blocks,
            max_model_len,
            enable_prefix_caching: true,
            recurrent_states: None,
        })
        .unwrap();
        let runner = ModelRunner::new(
            model,
            RunnerConfig {
                num_blocks,
                block_size,
                threads: 1,
                max_seqs: 4,
                state_slots: 0,
                max_tokens: 64,
                max_model_len,
                plan: PlanMode::Eager,
                backend: BackendKind::Cpu,
                cpu: oxllm_runtime::CpuOptions::default(),
                kv_dtype: KvDtype::F32,
            },
        )
        .unwrap();
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        EngineCore::new(None, scheduler, runner, num_blocks, stats)
    }

    fn submit(
        core: &mut EngineCore<'_>,
        id: ReqId,
        prompt: &[u32],
        max_tokens: usize,
    ) -> UnboundedReceiver<RequestEvent> {
        let (tx, rx) = unbounded_channel();
        let params = SamplingParams {
            max_tokens,
            ignore_eos: true,
            ..SamplingParams::greedy()
        };
        let req = GenerationRequest {
            prompt_ids: prompt.to_vec(),
            params,
            choice: 0,
            constraint: None,
        };
        core.add(id, id, req, tx);
        rx
    }

    fn drained(rx: &mut UnboundedReceiver<RequestEvent>) -> Vec<RequestEvent> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    #[test]
    fn plan_schedules_every_prompt_and_lists_its_sampling_rows() {
        let mut core = tiny_core();
        assert!(core.plan_step().is_none(), "nothing to schedule");
        let mut a = submit(&mut core, 1, &[1, 17, 523], 4);
        let mut b = submit(&mut core, 2, &[1, 42, 999, 42, 7], 4);
        let plan = core.plan_step().expect("two prompts to prefill");
        assert_eq!(plan.sampling, vec![1, 2]);
        assert_eq!(plan.out.num_batched_tokens, 8);
        assert!(plan.mask_failures.is_empty());
        assert!(drained(&mut a).is_empty() && drained(&mut b).is_empty());
    }

    #[test]
    fn run_draws_the_oracle_token_and_sends_nothing() {
        let (prompt, greedy) = oracle();
        let mut core = tiny_core();
        let mut rx = submit(&mut core, 1, &prompt, 4);
        let plan = core.plan_step().unwrap();
        let run = core.run_step(&plan);
        let (rows, _) = run.rows.as_ref().expect("the step runs");
        assert_eq!(rows.len(), 1);
        let (id, outcome) = &rows[0];
        let token = outcome.as_ref().unwrap().as_ref().unwrap().token;
        assert_eq!((*id, token), (1, greedy[0]));
        assert!(drained(&mut rx).is_empty(), "run must not deliver");
        assert_eq!(core.scheduler.request(1).unwrap().output(), &[] as &[u32]);
    }

    #[test]
    fn deliver_streams_what_the_run_drew_and_finishes_at_max_tokens() {
        let mut core = tiny_core();
        let mut a = submit(&mut core, 1, &[1, 17, 523], 1);
        let mut b = submit(&mut core, 2, &[1, 42, 999], 3);
        let plan = core.plan_step().unwrap();
        let drawn = |token| {
            Some(Ok(Sampled {
                token,
                logprob: None,
                top_logprobs: Vec::new(),
            }))
        };
        let run = StepRun {
            rows: Ok((vec![(1, drawn(7)), (2, drawn(9))], Vec::new())),
            scores: Vec::new(),
            produced_at: Instant::now(),
            mask_failures: Vec::new(),
        };
        core.deliver_step(plan, run);
        let a = drained(&mut a);
        assert!(matches!(&a[0], RequestEvent::Delta { token_ids, .. } if token_ids == &[7]));
        assert!(matches!(
            &a[1],
            RequestEvent::Finished {
                reason: FinishReason::Length,
                completion_tokens: 1,
                ..
            }
        ));
        let b = drained(&mut b);
        assert_eq!(b.len(), 1, "{b:?}");
        assert!(matches!(&b[0], RequestEvent::Delta { token_ids, .. } if token_ids == &[9]));
        assert_eq!(core.scheduler.request(2).unwrap().output(), &[9]);
        assert!(
            core.scheduler.request(1).is_none(),
            "finished requests leave"
        );
    }

    #[test]
    fn a_mask_failed_on_the_worker_fails_only_its_request() {
        let mut core = tiny_core();
        let mut a = submit(&mut core, 1, &[1, 17, 523], 4);
        let mut b = submit(&mut core, 2, &[1, 42, 999], 4);
        let plan = core.plan_step().unwrap();
        let drawn = |token| {
            Some(Ok(Sampled {
                token,
                logprob: None,
                top_logprobs: Vec::new(),
            }))
        };
        let run = StepRun {
            rows: Ok((vec![(1, drawn(7)), (2, drawn(9))], Vec::new())),
            scores: Vec::new(),
            produced_at: Instant::now(),
            mask_failures: vec![(1, StructuredError::Matcher("injected".into()))],
        };
        core.deliver_step(plan, run);
        let a = drained(&mut a);
        assert!(
            matches!(&a[..], [RequestEvent::Error(e)] if e.to_string().contains("injected")),
            "{a:?}"
        );
        assert!(
            core.scheduler.request(1).is_none(),
            "the failed request is freed"
        );
        let b = drained(&mut b);
        assert!(matches!(&b[0], RequestEvent::Delta { token_ids, .. } if token_ids == &[9]));
        assert_eq!(core.scheduler.request(2).unwrap().output(), &[9]);
    }

    #[test]
    fn a_failed_run_fails_every_request_of_the_step_and_frees_it() {
        let mut core = tiny_core();
        let mut a = submit(&mut core, 1, &[1, 17, 523], 4);
        let mut b = submit(&mut core, 2, &[1, 42, 999], 4);
        let plan = core.plan_step().unwrap();
        let run = StepRun {
            rows: Err(EngineError::Config("injected".into())),
            scores: Vec::new(),
            produced_at: Instant::now(),
            mask_failures: Vec::new(),
        };
        core.deliver_step(plan, run);
        for rx in [&mut a, &mut b] {
            let events = drained(rx);
            assert!(
                matches!(&events[..], [RequestEvent::Error(e)] if e.to_string().contains("injected")),
                "{events:?}"
            );
        }
        assert!(!core.has_work());
    }
}

/// One constrained row's grammar for the mask worker.
struct MaskWork<'a> {
    id: ReqId,
    /// Sampling row, which is also the row of the gate it fills.
    row: usize,
    constraint: &'a mut Constraint,
}

/// What the mask worker did: masks and seconds (for the stats), failed grammars, and when it
/// ran (to record that it overlapped the forward).
#[derive(Default)]
struct MaskReport {
    masks: u64,
    seconds: f64,
    failures: Vec<(ReqId, StructuredError)>,
    span: Option<(Instant, Instant)>,
    overlapped: bool,
}

impl MaskReport {
    /// A worker that panicked or never started: every request it held is failed, none is
    /// lost.
    fn failed(ids: &[ReqId], why: &str) -> MaskReport {
        let failures = ids
            .iter()
            .map(|&id| (id, StructuredError::Matcher(why.to_string())))
            .collect();
        MaskReport {
            failures,
            ..MaskReport::default()
        }
    }
}

/// Fills each work item's gate row with its grammar's mask, then opens the gate (when the fill
/// drops, also on a panic). A failed grammar's row allows every token: its draw is discarded
/// because the request is failed before delivery.
fn fill_gate(gate: &MaskGate, work: Vec<MaskWork<'_>>) -> MaskReport {
    let start = Instant::now();
    let mut report = MaskReport::default();
    let mut fill = gate.fill();
    for w in work {
        let Some(dst) = fill.row_mut(w.row) else {
            report.failures.push((
                w.id,
                StructuredError::Matcher(format!("no mask row {} for this step", w.row)),
            ));
            continue;
        };
        let n = w.constraint.mask_words().min(dst.len());
        let (words, rest) = dst.split_at_mut(n);
        rest.fill(0);
        let before = w.constraint.stats();
        if let Err(e) = w.constraint.fill_mask(words) {
            words.fill(u32::MAX);
            report.failures.push((w.id, e));
        }
        let after = w.constraint.stats();
        report.masks += after.masks - before.masks;
        report.seconds += after.seconds - before.seconds;
    }
    drop(fill);
    report.span = Some((start, Instant::now()));
    report
}
