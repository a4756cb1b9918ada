//! A request as the scheduler sees it: its tokens (prompt then output), how many of them have
//! K/V in the cache, its limits and its state. Sampling parameters, detokenizer state and the
//! client channel live with the engine, keyed by [`ReqId`].

use oxllm_core::{FinishReason, ReqId, TokenId};

/// Where a request is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestStatus {
    /// Queued, holding no blocks, never run (or run and preempted: see `Preempted`).
    Waiting,
    /// Holding blocks; scheduled each step until it finishes or is preempted.
    Running,
    /// Was running, lost its blocks to a newer request's need, queued to be recomputed.
    Preempted,
    Finished(FinishReason),
}

/// One generation request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    id: ReqId,
    /// Prompt then output: one vector so prefix hashing and recompute see one sequence.
    tokens: Vec<TokenId>,
    num_prompt_tokens: usize,
    max_tokens: usize,
    stop_token_ids: Vec<TokenId>,
    /// The submission this request came with (the choices of one API request share it); the
    /// unit between which running slots are shared fairly. Its own id unless set.
    group: ReqId,
    /// Computes every token even when a cached prefix holds it (a request that needs each
    /// prompt position's logits, e.g. for prompt logprobs).
    skip_prefix_cache: bool,
    pub(crate) num_computed_tokens: usize,
    pub(crate) status: RequestStatus,
    pub(crate) arrival: u64,
}

impl Request {
    /// A new request. `stop_token_ids` are the EOS ids plus user stop ids; pass an empty list to
    /// ignore EOS.
    pub fn new(
        id: ReqId,
        prompt: Vec<TokenId>,
        max_tokens: usize,
        stop_token_ids: Vec<TokenId>,
    ) -> Self {
        Request {
            id,
            num_prompt_tokens: prompt.len(),
            tokens: prompt,
            max_tokens,
            stop_token_ids,
            group: id,
            skip_prefix_cache: false,
            num_computed_tokens: 0,
            status: RequestStatus::Waiting,
            arrival: 0,
        }
    }

    pub fn id(&self) -> ReqId {
        self.id
    }

    /// Puts the request in submission group `group` (see [`Self::group`]).
    pub fn with_group(mut self, group: ReqId) -> Self {
        self.group = group;
        self
    }

    /// Makes the request compute its whole prompt, never adopting cached blocks (its own
    /// full blocks are still cached for others).
    pub fn without_prefix_cache(mut self) -> Self {
        self.skip_prefix_cache = true;
        self
    }

    /// Whether the request computes its whole prompt whatever the prefix cache holds.
    pub fn skips_prefix_cache(&self) -> bool {
        self.skip_prefix_cache
    }

    /// The submission group: requests sharing it count as one for fair scheduling.
    pub fn group(&self) -> ReqId {
        self.group
    }

    pub fn prompt(&self) -> &[TokenId] {
        &self.tokens[..self.num_prompt_tokens]
    }

    pub fn output(&self) -> &[TokenId] {
        &self.tokens[self.num_prompt_tokens..]
    }

    /// Prompt followed by output.
    pub fn all_tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    pub fn num_tokens(&self) -> usize {
        self.tokens.len()
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn stop_token_ids(&self) -> &[TokenId] {
        &self.stop_token_ids
    }

    /// Tokens whose K/V are in the cache (0 again after a preemption).
    pub fn num_computed_tokens(&self) -> usize {
        self.num_computed_tokens
    }

    /// Tokens known but not yet computed: a prompt (chunk) or the last sampled token.
    pub fn num_pending_tokens(&self) -> usize {
        self.tokens.len() - self.num_computed_tokens
    }

    pub fn status(&self) -> RequestStatus {
        self.status
    }

    /// Submission order, for FIFO admission.
    pub fn arrival(&self) -> u64 {
        self.arrival
    }

    pub(crate) fn push_output(&mut self, token: TokenId) {
        self.tokens.push(token);
    }
}
