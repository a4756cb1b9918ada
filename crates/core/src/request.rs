//! Identifiers and outcomes of requests, shared by the scheduler, the engine and the server.

/// A request's id, unique within one engine for its lifetime.
pub type ReqId = u64;

/// A KV block's index in the block pool.
pub type BlockId = u32;

/// Why a request stopped producing tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-sequence token, a stop token id or a stop string.
    Stop,
    /// `max_tokens` reached (or the context is full).
    Length,
    /// Cancelled by the client (or its connection dropped).
    Abort,
}

impl FinishReason {
    /// The OpenAI API's spelling (`abort` has none there; servers report it as `abort`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}
