//! The scheduler: request admission, the per-step token-budget loop and preemption, aborts.
//!
//! Guarantees of every [`SchedulerOutput`] (checked by [`Scheduler::check_invariants`] and the
//! property tests):
//! - at most `max_num_batched_tokens` tokens and `max_num_seqs` running requests;
//! - each scheduled request's block table covers its computed plus scheduled tokens;
//! - only running requests hold blocks; waiting and preempted ones hold none;
//! - the oldest running request is never preempted while others run, and a lone request always
//!   fits the pool (checked at submission), so with no new arrivals every request finishes;
//! - admission is fair between submission groups (`fairness`: the least-served group first,
//!   a group above its share of slots preempted for one below it); within a group, and
//!   between groups running equally many requests, it is FIFO: a waiting request is never
//!   overtaken by a later one;
//! - hybrid models: a running request holds exactly one recurrent-state slot and a waiting one
//!   none; a scheduled request carries its slot, and a restore only on its first step after a
//!   prefix hit.

use std::collections::{HashMap, VecDeque};

use oxllm_core::{FinishReason, ReqId};
use oxllm_kv::{ComputedBlocks, KvCacheManager, PrefixCacheStats};

use crate::budget::StepBudget;
use crate::config::SchedulerConfig;
use crate::error::SchedError;
use crate::fairness;
use crate::output::{ScheduledSeq, SchedulerOutput};
use crate::request::{Request, RequestStatus};

/// Owns all request state the scheduling decisions need, and the KV cache bookkeeping.
#[derive(Debug)]
pub struct Scheduler {
    pub(crate) config: SchedulerConfig,
    pub(crate) kv: KvCacheManager,
    pub(crate) requests: HashMap<ReqId, Request>,
    /// Admission order; preempted requests return to the front.
    pub(crate) waiting: VecDeque<ReqId>,
    /// Admission order: the last one is the newest, the first to be preempted.
    pub(crate) running: Vec<ReqId>,
    /// Finished or aborted since the last output, reported in the next one.
    pub(crate) finished_since_output: Vec<ReqId>,
    pub(crate) next_arrival: u64,
    pub(crate) next_step: u64,
    /// The step whose output the runner holds, until `update_from_output`.
    pub(crate) step_in_flight: Option<u64>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Result<Self, SchedError> {
        config.validate()?;
        let mut kv = KvCacheManager::new(
            config.num_blocks,
            config.block_size,
            config.enable_prefix_caching,
        )?;
        if let Some(r) = &config.recurrent_states {
            kv = kv.with_recurrent_states(
                r.num_slots,
                r.num_checkpoints,
                r.checkpoint_interval_blocks,
            )?;
        }
        Ok(Scheduler {
            config,
            kv,
            requests: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            finished_since_output: Vec::new(),
            next_arrival: 0,
            next_step: 0,
            step_in_flight: None,
        })
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Queues a request, or rejects at once one that could never complete: an empty prompt,
    /// `max_tokens` 0, prompt + `max_tokens` over `max_model_len`, or more tokens than the
    /// whole KV pool holds.
    pub fn add_request(&mut self, mut req: Request) -> Result<(), SchedError> {
        let req_id = req.id();
        if self.requests.contains_key(&req_id) {
            return Err(SchedError::DuplicateRequest(req_id));
        }
        if req.prompt().is_empty() {
            return Err(SchedError::EmptyPrompt(req_id));
        }
        if req.max_tokens() == 0 {
            return Err(SchedError::ZeroMaxTokens(req_id));
        }
        let total = req.prompt().len().saturating_add(req.max_tokens());
        if total > self.config.max_model_len {
            return Err(SchedError::ExceedsMaxModelLen {
                req_id,
                prompt: req.prompt().len(),
                max_tokens: req.max_tokens(),
                max_model_len: self.config.max_model_len,
            });
        }
        // The last sampled token is never computed, so a request holds at most total - 1.
        let needed = total - 1;
        let capacity = self.config.max_tokens_in_pool();
        if needed > capacity {
            return Err(SchedError::ExceedsKvCache {
                req_id,
                needed,
                capacity,
            });
        }
        req.status = RequestStatus::Waiting;
        req.num_computed_tokens = 0;
        req.arrival = self.next_arrival;
        self.next_arrival += 1;
        self.requests.insert(req_id, req);
        self.waiting.push_back(req_id);
        Ok(())
    }

    /// Plans one step. Fails only if the previous step's output has not been given back through
    /// [`Self::update_from_output`].
    pub fn schedule(&mut self) -> Result<SchedulerOutput, SchedError> {
        if self.step_in_flight.is_some() {
            return Err(SchedError::StepInFlight);
        }
        let mut out = SchedulerOutput {
            step: self.next_step,
            ..SchedulerOutput::default()
        };
        self.preempt_for_fairness(&mut out);
        let mut budget = StepBudget::new(
            self.config.max_num_batched_tokens,
            self.config.max_prefill_beside_decode,
            self.any_decoding(),
        );
        let preempted_for_fairness = out.preempted.len();
        self.schedule_running(&mut budget, &mut out)?;
        // Admitting while preempting for blocks would only thrash: the blocks just freed are
        // needed by the requests already running.
        if out.preempted.len() == preempted_for_fairness {
            self.schedule_waiting(&mut budget, &mut out)?;
        }
        out.num_batched_tokens = self.config.max_num_batched_tokens - budget.tokens_left();
        out.finished = std::mem::take(&mut self.finished_since_output);
        self.next_step += 1;
        self.step_in_flight = Some(out.step);
        self.debug_check();
        Ok(out)
    }

    /// Whether a running request is past its prompt, waiting for its next token.
    fn any_decoding(&self) -> bool {
        self.running.iter().any(|id| {
            self.requests
                .get(id)
                .is_some_and(|r| r.num_pending_tokens() == 1)
        })
    }

    fn schedule_running(
        &mut self,
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) -> Result<(), SchedError> {
        let mut index = 0;
        while index < self.running.len() && budget.tokens_left() > 0 {
            let req_id = self.running[index];
            let Some(req) = self.requests.get(&req_id) else {
                index += 1;
                continue;
            };
            let pending = req.num_pending_tokens();
            let num_new = budget.grant(pending);
            if num_new == 0 {
                index += 1;
                continue;
            }
            let num_tokens = req.num_computed_tokens + num_new;
            let none = ComputedBlocks::default();
            let (mut scheduled, mut preempted_self) = (false, false);
            loop {
                if self.kv.allocate_slots(req_id, num_tokens, &none)?.is_some() {
                    scheduled = true;
                    break;
                }
                // Out of blocks: take them from a request not scheduled yet this step (the
                // loop runs oldest first), possibly this one: the newest of the group running
                // the most requests.
                let counts = fairness::running_counts(&self.running, &self.requests);
                let Some(pos) =
                    fairness::block_victim(&self.running[index..], &self.requests, &counts)
                else {
                    break;
                };
                let victim = self.running.remove(index + pos);
                self.preempt(victim);
                out.preempted.push(victim);
                if victim == req_id {
                    preempted_self = true;
                    break;
                }
            }
            if preempted_self {
                // The next request moved into this index; it may still fit.
                continue;
            }
            if !scheduled {
                break;
            }
            self.push_scheduled(req_id, num_new, None, out)?;
            budget.spend(num_new, pending);
            index += 1;
        }
        Ok(())
    }

    fn schedule_waiting(
        &mut self,
        budget: &mut StepBudget,
        out: &mut SchedulerOutput,
    ) -> Result<(), SchedError> {
        let mut counts = fairness::running_counts(&self.running, &self.requests);
        while budget.tokens_left() > 0 && self.running.len() < self.config.max_num_seqs {
            let Some((pos, req_id)) =
                fairness::next_waiting(&self.waiting, &self.requests, &counts)
            else {
                break;
            };
            let Some(req) = self.requests.get(&req_id) else {
                self.waiting.remove(pos);
                continue;
            };
            let group = req.group();
            // A waiting request holds no blocks; a preempted one recomputes prompt + output.
            // Without a free state slot (hybrids) allocation fails like without blocks.
            let hit = self.prefix_hit(req);
            let num_cached = hit.num_computed_tokens(self.config.block_size);
            let pending = req.num_tokens() - num_cached;
            let num_new = budget.grant(pending);
            if num_new == 0 {
                // The prefill share of this step is spent (or, for a resumed request with one token
                // left, the step already carries more prompt tokens than a decode may sit beside);
                // the request waits for the next.
                break;
            }
            if self
                .kv
                .allocate_slots(req_id, num_cached + num_new, &hit)?
                .is_none()
            {
                // The fairest request waits; no later one overtakes it.
                break;
            }
            self.waiting.remove(pos);
            if let Some(req) = self.requests.get_mut(&req_id) {
                req.num_computed_tokens = num_cached;
                req.status = RequestStatus::Running;
            }
            self.running.push(req_id);
            *counts.entry(group).or_default() += 1;
            self.push_scheduled(req_id, num_new, hit.restore_slot(), out)?;
            budget.spend(num_new, pending);
        }
        Ok(())
    }

    /// Preempts running requests of groups above their fair share while the request to admit
    /// next belongs to a group below its share and could not be admitted (`fairness`).
    fn preempt_for_fairness(&mut self, out: &mut SchedulerOutput) {
        if self.waiting.is_empty() {
            return;
        }
        let share = fairness::fair_share(
            self.config.max_num_seqs,
            fairness::num_live_groups(&self.requests),
        );
        let mut counts = fairness::running_counts(&self.running, &self.requests);
        loop {
            let Some((_, next)) = fairness::next_waiting(&self.waiting, &self.requests, &counts)
            else {
                return;
            };
            let Some(req) = self.requests.get(&next) else {
                return;
            };
            if counts.get(&req.group()).copied().unwrap_or(0) >= share
                || (self.running.len() < self.config.max_num_seqs && self.could_admit(req))
            {
                return;
            }
            let Some(pos) = fairness::share_victim(&self.running, &self.requests, &counts, share)
            else {
                return;
            };
            let victim = self.running.remove(pos);
            if let Some(group) = self.requests.get(&victim).map(Request::group) {
                if let Some(c) = counts.get_mut(&group) {
                    *c -= 1;
                }
            }
            self.preempt(victim);
            out.preempted.push(victim);
        }
    }

    /// Whether the pool has the blocks (and, for hybrids, the state slot) for `req`'s first
    /// step now; an estimate that only decides whether to preempt for it.
    fn could_admit(&self, req: &Request) -> bool {
        if self
            .kv
            .state_slots()
            .is_some_and(|states| states.num_free() == 0)
        {
            return false;
        }
        let block_size = self.config.block_size;
        let hit = self.prefix_hit(req);
        let num_cached = hit.num_computed_tokens(block_size);
        let first_step = (req.num_tokens() - num_cached).min(self.config.max_num_batched_tokens);
        let blocks = (num_cached + first_step).div_ceil(block_size);
        blocks.saturating_sub(hit.blocks().len()) <= self.kv.num_free_blocks()
    }

    /// The cached prefix `req` may adopt (none for a request that skips the prefix cache).
    fn prefix_hit(&self, req: &Request) -> ComputedBlocks {
        if req.skips_prefix_cache() {
            return ComputedBlocks::default();
        }
        self.kv.get_computed_blocks(req.all_tokens(), None)
    }

    fn push_scheduled(
        &mut self,
        req_id: ReqId,
        num_new: usize,
        restore_from: Option<u32>,
        out: &mut SchedulerOutput,
    ) -> Result<(), SchedError> {
        let Some(req) = self.requests.get(&req_id) else {
            return Ok(());
        };
        let start = req.num_computed_tokens;
        let end = start + num_new;
        let checkpoints = self
            .kv
            .plan_checkpoints(req_id, req.all_tokens(), start, end, None)?;
        out.scheduled.push(ScheduledSeq {
            req_id,
            token_ids: req.all_tokens()[start..end].to_vec(),
            start_pos: start,
            block_table: self.kv.block_table(req_id).to_vec(),
            needs_sample: end == req.num_tokens(),
            state_slot: self.kv.state_slot(req_id),
            restore_from,
            checkpoints,
        });
        Ok(())
    }

    /// Frees the request's blocks and queues it first for recompute from scratch.
    fn preempt(&mut self, req_id: ReqId) {
        self.kv.free(req_id);
        if let Some(req) = self.requests.get_mut(&req_id) {
            req.num_computed_tokens = 0;
            req.status = RequestStatus::Preempted;
        }
        // Victims are taken newest first, so pushing each to the front keeps arrival order.
        self.waiting.push_front(req_id);
    }

    /// Cancels a request at once, freeing its blocks. False for an unknown (or already
    /// finished) id.
    pub fn abort(&mut self, req_id: ReqId) -> bool {
        self.finish_with(req_id, FinishReason::Abort)
    }

    /// Finishes a request for a reason found outside the scheduler (a stop string, an abort),
    /// freeing its blocks at once. False for an unknown (or already finished) id.
    pub fn finish_with(&mut self, req_id: ReqId, reason: FinishReason) -> bool {
        if self.finish(req_id, reason).is_none() {
            return false;
        }
        self.debug_check();
        true
    }

    /// Removes a live request, frees its blocks, and reports it in the next output.
    pub(crate) fn finish(&mut self, req_id: ReqId, reason: FinishReason) -> Option<Request> {
        let mut req = self.requests.remove(&req_id)?;
        req.status = RequestStatus::Finished(reason);
        self.kv.free(req_id);
        self.running.retain(|&id| id != req_id);
        self.waiting.retain(|&id| id != req_id);
        self.finished_since_output.push(req_id);
        Some(req)
    }

    /// A live (waiting, preempted or running) request.
    pub fn request(&self, req_id: ReqId) -> Option<&Request> {
        self.requests.get(&req_id)
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Waiting requests, preempted ones included.
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// True while any request is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Running request ids, oldest admission first.
    pub fn running_ids(&self) -> &[ReqId] {
        &self.running
    }

    /// Waiting request ids, next to admit first.
    pub fn waiting_ids(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.waiting.iter().copied()
    }

    /// The KV cache bookkeeping, read-only.
    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    pub fn num_free_blocks(&self) -> usize {
        self.kv.num_free_blocks()
    }

    pub fn kv_usage(&self) -> f64 {
        self.kv.usage()
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.kv.prefix_cache_stats()
    }

    /// Forgets all cached prefixes; returns how many cached blocks were dropped.
    pub fn reset_prefix_cache(&mut self) -> usize {
        self.kv.reset_prefix_cache()
    }

    /// Starts recording KV-cache events (`oxllm_kv::KvEvent`) for routers (off by default),
    /// beginning with a snapshot of the cache for a new consumer.
    pub fn enable_kv_events(&mut self) {
        self.kv.enable_events();
    }

    /// The KV-cache events since the last call, oldest first (empty while recording is off).
    pub fn take_kv_events(&mut self) -> Vec<oxllm_kv::KvEvent> {
        self.kv.take_events()
    }

    pub(crate) fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check_invariants() {
            panic!("scheduler invariant violated: {e}");
        }
    }

    /// Checks the scheduler's invariants (module header) and the KV cache's.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.kv.check_invariants().map_err(|e| e.to_string())?;
        if self.running.len() > self.config.max_num_seqs {
            return Err(format!(
                "{} running > max_num_seqs {}",
                self.running.len(),
                self.config.max_num_seqs
            ));
        }
        if self.running.len() + self.waiting.len() != self.requests.len() {
            return Err("a live request is neither running nor waiting (or is both)".into());
        }
        let block_size = self.config.block_size;
        for &id in &self.running {
            let req = self
                .requests
                .get(&id)
                .ok_or(format!("running {id} unknown"))?;
            if req.status != RequestStatus::Running {
                return Err(format!("running request {id} has status {:?}", req.status));
            }
            let covered = self.kv.block_table(id).len() * block_size;
            if covered < req.num_computed_tokens {
                return Err(format!(
                    "request {id}: {} computed tokens but blocks for {covered}",
                    req.num_computed_tokens
                ));
            }
        }
        for &id in &self.waiting {
            let req = self
                .requests
                .get(&id)
                .ok_or(format!("waiting {id} unknown"))?;
            if !self.kv.block_table(id).is_empty() || req.num_computed_tokens != 0 {
                return Err(format!(
                    "waiting request {id} holds blocks or computed tokens"
                ));
            }
            if !matches!(
                req.status,
                RequestStatus::Waiting | RequestStatus::Preempted
            ) {
                return Err(format!("waiting request {id} has status {:?}", req.status));
            }
        }
        if self.kv.num_requests() > self.running.len() {
            return Err("a request that is not running holds blocks".into());
        }
        if let Some(states) = self.kv.state_slots() {
            if states.num_used() != self.running.len()
                || self
                    .running
                    .iter()
                    .any(|&id| self.kv.state_slot(id).is_none())
            {
                return Err(format!(
                    "{} running requests but {} hold state slots",
                    self.running.len(),
                    states.num_used()
                ));
            }
        }
        Ok(())
    }
}
