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
use oxllm_sample::{Sampler, StopChecker};
use oxllm_sched::{Request, Scheduler};
use oxllm_structured::{Constraint, StructuredError};
use oxllm_tok::{IncrementalDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::runner::{ModelRunner, SampleJob, ScoreRow, StepResult};
use crate::{EngineError, GenerationRequest, PromptLogprob, RequestEvent, TokenLogprob};

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
}

impl EngineStats {
    /// Blocks held by requests or cached prefixes not yet evicted... minus the null block.
    pub fn num_blocks_used(&self) -> usize {
        self.num_blocks_total
            .saturating_sub(1)
            .saturating_sub(self.num_blocks_free)
    }
}

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
        };
        core.publish_stats();
        core
    }

    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
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

    /// One engine step. Errors of the model are reported to every request in the step, which
    /// are then dropped, so a bad step never hangs a client.
    pub fn step(&mut self) {
        let out = match self.scheduler.schedule() {
            Ok(out) => out,
            Err(e) => {
                self.fail_all(EngineError::Scheduler(e));
                return;
            }
        };
        self.preemptions += out.preempted.len() as u64;
        if out.is_empty() {
            // Nothing could be scheduled (e.g. everything waits for blocks); report and let the
            // caller wait for new input rather than spin.
            let _ = self.scheduler.update_from_output(&out, &[]);
            self.publish_stats();
            return;
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
        // One job per sampling row, in the order of the flat batch's logits rows.
        let sampling: Vec<ReqId> = out
            .scheduled
            .iter()
            .filter(|s| s.needs_sample && !s.token_ids.is_empty())
            .map(|s| s.req_id)
            .collect();
        let row_of: HashMap<ReqId, usize> = sampling
            .iter()
            .enumerate()
            .map(|(i, &id)| (id, i))
            .collect();
        let mask_failures = self.compute_masks(&sampling);
        let scores = self.score_rows(&out);
        let mut jobs: Vec<Option<SampleJob<'_>>> = sampling.iter().map(|_| None).collect();
        for (id, live) in self.live.iter_mut() {
            if mask_failures.iter().any(|(f, _)| f == id) {
                continue;
            }
            if let (Some(&row), Some(req)) = (row_of.get(id), self.scheduler.request(*id)) {
                let constrained = live.constraint.as_ref().is_some_and(|c| c.is_active());
                jobs[row] = Some(SampleJob {
                    sampler: &mut live.sampler,
                    prompt: req.prompt(),
                    output: req.output(),
                    mask: constrained.then_some(live.mask.as_slice()),
                });
            }
        }
        let score_rows: Vec<ScoreRow> = scores.iter().map(|(_, s)| s.row).collect();
        let executed = self.runner.execute(&out, &mut jobs, &score_rows);
        let produced_at = Instant::now();
        drop(jobs);
        for (id, err) in mask_failures {
            self.fail(id, err.into());
        }
        let StepResult {
            arrays,
            outcomes,
            scored,
        } = match executed {
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
        let mut sampled = Vec::with_capacity(arrays.sample_req_ids.len());
        let mut logprobs: HashMap<ReqId, TokenLogprob> = HashMap::new();
        for (&id, outcome) in arrays.sample_req_ids.iter().zip(outcomes) {
            if !self.live.contains_key(&id) {
                continue;
            }
            match outcome {
                Some(Ok(s)) => {
                    let advanced = match self.live.get_mut(&id).and_then(|l| l.constraint.as_mut())
                    {
                        Some(c) => c.advance(s.token),
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
                Err(e) => {
                    self.fail(
                        id,
                        EngineError::RequestFailed(format!("detokenization failed: {e}")),
                    );
                    return;
                }
            }
        }
        let outcome = live.stop.push(&text);
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
                    let o = live.stop.push(&rest);
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
        };
        if let Ok(mut s) = self.stats.lock() {
            *s = snapshot;
        }
    }
}
