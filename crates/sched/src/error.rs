//! Scheduler errors: rejected submissions and misuse of the step protocol. None leaves the
//! scheduler changed.

use oxllm_core::ReqId;
use oxllm_kv::KvError;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SchedError {
    #[error("invalid scheduler config: {0}")]
    InvalidConfig(String),
    #[error("request {0}: the prompt is empty")]
    EmptyPrompt(ReqId),
    #[error("request {0}: max_tokens must be at least 1")]
    ZeroMaxTokens(ReqId),
    #[error(
        "request {req_id}: prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceeds the \
         model's maximum length of {max_model_len} tokens"
    )]
    ExceedsMaxModelLen {
        req_id: ReqId,
        prompt: usize,
        max_tokens: usize,
        max_model_len: usize,
    },
    #[error(
        "request {req_id}: needs {needed} KV token slots but the whole cache holds {capacity}"
    )]
    ExceedsKvCache {
        req_id: ReqId,
        needed: usize,
        capacity: usize,
    },
    #[error("request {0} already exists")]
    DuplicateRequest(ReqId),
    #[error("a step is in flight: call update_from_output before scheduling again")]
    StepInFlight,
    #[error("output of step {got} does not match the step in flight ({expected:?})")]
    WrongStep { got: u64, expected: Option<u64> },
    #[error("request {0}: sampled token given but this step does not sample it")]
    UnexpectedSample(ReqId),
    #[error("request {0}: this step samples it but no sampled token was given")]
    MissingSample(ReqId),
    #[error("request {req_id}: block table of {blocks} blocks cannot hold position {pos}")]
    BlockTableTooShort {
        req_id: ReqId,
        blocks: usize,
        pos: usize,
    },
    #[error("invalid recurrent-state metadata: {0}")]
    InvalidStateMetadata(String),
    #[error("KV cache: {0}")]
    Kv(#[from] KvError),
}
