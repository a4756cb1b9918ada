//! What a client submits and what it receives back.

use std::sync::Arc;
use std::time::Instant;

use oxllm_core::{FinishReason, ReqId};
use oxllm_sample::SamplingParams;
use oxllm_structured::Constraint;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::EngineError;

/// A request as the engine takes it: token ids (already templated and tokenized by the caller)
/// and sampling parameters.
#[derive(Clone, Debug)]
pub struct GenerationRequest {
    pub prompt_ids: Vec<u32>,
    pub params: SamplingParams,
    /// Which of `n` choices this is (gives each choice its own random stream).
    pub choice: usize,
    /// Constrained decoding: the grammar the output must follow (compiled at admission;
    /// boxed so requests stay small on the engine's channel).
    pub constraint: Option<Box<Constraint>>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One prompt token's logprob given the tokens before it (its rank and top alternatives too).
pub type PromptLogprob = oxllm_sample::ScoredToken;

/// One message on a request's stream. A stream ends with exactly one `Finished` or `Error`.
#[derive(Clone, Debug)]
pub enum RequestEvent {
    /// New tokens and the text they completed (text may be empty while a UTF-8 character or a
    /// possible stop string is held back).
    Delta {
        token_ids: Vec<u32>,
        text: String,
        logprobs: Vec<TokenLogprob>,
        /// On a request's first delta when it asked for prompt logprobs: one entry per prompt
        /// token, `None` for the first (nothing precedes it).
        prompt_logprobs: Option<Vec<Option<PromptLogprob>>>,
        /// When the engine had these tokens (right after the step that sampled them), so a
        /// benchmark's timing does not depend on when a reader thread got to run.
        produced_at: Instant,
    },
    Finished {
        reason: FinishReason,
        /// Text released at the end (held-back bytes), possibly empty.
        text: String,
        prompt_tokens: usize,
        completion_tokens: usize,
        cached_tokens: usize,
    },
    /// Why the request failed; one error shared by every request a failed step carried.
    Error(Arc<EngineError>),
}

/// The receiving end of one request. Dropping it aborts the request.
pub struct RequestStream {
    pub id: ReqId,
    pub prompt_tokens: usize,
    pub(crate) rx: UnboundedReceiver<RequestEvent>,
}

impl RequestStream {
    /// Next event, blocking the calling (non-async) thread.
    pub fn blocking_next(&mut self) -> Option<RequestEvent> {
        self.rx.blocking_recv()
    }

    /// Next event, for async callers.
    pub async fn next(&mut self) -> Option<RequestEvent> {
        self.rx.recv().await
    }

    /// Collects the whole stream: (token ids, text, finish reason).
    pub fn collect_blocking(mut self) -> Result<(Vec<u32>, String, FinishReason), String> {
        let (mut ids, mut text) = (Vec::new(), String::new());
        while let Some(ev) = self.blocking_next() {
            match ev {
                RequestEvent::Delta {
                    token_ids, text: t, ..
                } => {
                    ids.extend(token_ids);
                    text.push_str(&t);
                }
                RequestEvent::Finished {
                    reason, text: t, ..
                } => {
                    text.push_str(&t);
                    return Ok((ids, text, reason));
                }
                RequestEvent::Error(e) => return Err(e.to_string()),
            }
        }
        Err("the engine stopped before the request finished".into())
    }
}
