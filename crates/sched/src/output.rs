//! What one step hands to the model runner, and what comes back to the engine per request.

use oxllm_core::{BlockId, FinishReason, ReqId, TokenId};
use oxllm_kv::PlannedCheckpoint;

/// One request's share of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledSeq {
    pub req_id: ReqId,
    /// Tokens to compute this step: a prompt chunk, a recompute chunk, or the last sampled token.
    pub token_ids: Vec<TokenId>,
    /// Position of `token_ids[0]`: the tokens already in the cache before this step.
    pub start_pos: usize,
    /// The request's whole block table, covering `start_pos + token_ids.len()` tokens.
    pub block_table: Vec<BlockId>,
    /// True when this step computes the request's last known token, so its logits are sampled.
    pub needs_sample: bool,
    /// Hybrid models: the request's recurrent-state slot (held from its first step until it
    /// finishes or is preempted); `None` for attention-only models.
    pub state_slot: Option<u32>,
    /// Hybrid models, first step after a prefix hit: the checkpoint slot whose state is copied
    /// into `state_slot` before the step (the state after the `start_pos` cached tokens).
    pub restore_from: Option<u32>,
    /// Hybrid models: checkpoints to take inside this step (boundaries in
    /// `(start_pos, start_pos + token_ids.len()]`, ascending).
    pub checkpoints: Vec<PlannedCheckpoint>,
}

/// Everything the runner needs for one step; the only seam between scheduler and runner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// Step number, checked by `update_from_output`.
    pub step: u64,
    pub scheduled: Vec<ScheduledSeq>,
    /// Requests that lost their blocks this step (drop their runner state; they return later
    /// with a fresh start).
    pub preempted: Vec<ReqId>,
    /// Requests finished or aborted since the previous output (drop their runner state).
    pub finished: Vec<ReqId>,
    /// Sum of `token_ids.len()` over `scheduled`; at most the token budget.
    pub num_batched_tokens: usize,
}

impl SchedulerOutput {
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty()
    }
}

/// What a step did to one request, for the engine to forward to its client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestUpdate {
    pub req_id: ReqId,
    pub new_token_ids: Vec<TokenId>,
    /// Set when the request finished in this update (its blocks are already freed).
    pub finish_reason: Option<FinishReason>,
}
