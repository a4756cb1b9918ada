//! Engine errors: rejected submissions and failures of the engine thread.

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error(transparent)]
    Sampling(#[from] oxllm_sample::SamplingError),
    #[error(transparent)]
    Scheduler(#[from] oxllm_sched::SchedError),
    #[error(transparent)]
    Model(#[from] oxllm_models::ModelError),
    #[error("invalid engine config: {0}")]
    Config(String),
    #[error("the engine has stopped")]
    Stopped,
}
