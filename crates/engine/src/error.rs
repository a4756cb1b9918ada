//! Engine errors: rejected submissions and failures of the engine thread, typed so a server can
//! answer each by its variant (a client's mistake, an overloaded or stopped engine, a bug).

use std::fmt;

/// What bounds a request's prompt + completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextBound {
    /// The model's maximum context length.
    ModelContext,
    /// The whole paged KV cache (smaller than the model's context on this server).
    KvCache,
}

impl fmt::Display for ContextBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ContextBound::ModelContext => "the model's maximum context length",
            ContextBound::KvCache => "the KV cache's capacity",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("token id {token} is outside the vocabulary of {vocab_size} tokens")]
    TokenOutOfVocabulary { token: u32, vocab_size: usize },
    #[error(
        "prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds {bound} of {limit} tokens"
    )]
    ContextTooLong {
        prompt_tokens: usize,
        max_tokens: usize,
        limit: usize,
        bound: ContextBound,
    },
    #[error(transparent)]
    Sampling(#[from] oxllm_sample::SamplingError),
    #[error(transparent)]
    Scheduler(#[from] oxllm_sched::SchedError),
    #[error(transparent)]
    Model(#[from] oxllm_models::ModelError),
    /// A constrained request's grammar failed mid-generation.
    #[error(transparent)]
    Structured(#[from] oxllm_structured::StructuredError),
    /// One request's sampler or detokenizer failed (an engine bug).
    #[error("{0}")]
    RequestFailed(String),
    #[error("invalid engine config: {0}")]
    Config(String),
    /// The CUDA backend could not start (no driver, no GPU, kernels failed to compile).
    #[error(transparent)]
    Cuda(#[from] oxllm_cuda::CudaError),
    #[error("the engine has stopped")]
    Stopped,
}
