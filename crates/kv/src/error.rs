//! Errors of the KV bookkeeping. Running out of blocks is not an error (allocation returns
//! `None`); these are misuses by the caller, reported without changing any state.

use oxllm_core::{BlockId, ReqId};
use thiserror::Error;

/// A request to the pool or the manager that cannot be honoured; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KvError {
    #[error("a block pool needs at least 2 blocks (block 0 is the reserved null block), got {0}")]
    TooFewBlocks(usize),
    #[error("a block pool holds at most {max} blocks, got {got}")]
    TooManyBlocks { got: usize, max: usize },
    #[error("block size must be at least 1 token")]
    ZeroBlockSize,
    #[error("block {0} is not a usable block of this pool (the null block or out of range)")]
    InvalidBlock(BlockId),
    #[error("block {0} is free and holds no cached tokens, so it cannot be shared")]
    NotCached(BlockId),
    #[error("block {0} is released more often than it is referenced")]
    NotReferenced(BlockId),
    #[error("a cached block must hold exactly {expected} tokens, got {got}")]
    WrongBlockLength { expected: usize, got: usize },
    #[error("request {0} holds no blocks")]
    UnknownRequest(ReqId),
    #[error("prefix blocks given for request {0}, which already has a block table")]
    PrefixForLiveRequest(ReqId),
    #[error("prefix block {0} was evicted or re-cached after the lookup; look up again")]
    StalePrefix(BlockId),
    #[error("state checkpoint {0} was evicted after the lookup; look up again")]
    StaleCheckpoint(u32),
    #[error("invalid recurrent-state configuration: {0}")]
    InvalidStateConfig(String),
    #[error("the prefix covers {prefix} tokens but only {requested} were asked for")]
    PrefixLongerThanRequest { prefix: usize, requested: usize },
    #[error("{computed} computed tokens but only {known} tokens given")]
    MoreComputedThanKnown { computed: usize, known: usize },
    #[error("request {req_id} has {blocks} blocks, too few for {tokens} computed tokens")]
    TableTooShort {
        req_id: ReqId,
        blocks: usize,
        tokens: usize,
    },
}

/// A broken internal invariant, found by `check_invariants`; always a bug in this crate or in
/// how it is driven.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("KV cache invariant violated: {0}")]
pub struct InvariantViolation(pub String);
