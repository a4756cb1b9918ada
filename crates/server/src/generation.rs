//! Submitting a request's choices to the engine and reading their events as one stream.
//!
//! A [`Run`] owns the [`RequestStream`]s of all choices (prompt `p`, sample `j` has index
//! `p * n + j`) and the admission guard: dropping it — the client went away, or the response
//! is complete — drops the streams, which makes the engine abort and free their blocks. Each
//! choice's latency and token counts are recorded in the metrics as its events pass. When the
//! shutdown grace ends, a run still in flight yields a 503 instead of its next event.

use std::sync::Arc;
use std::time::Instant;

use futures_util::stream::{self, BoxStream, SelectAll, StreamExt};
use oxllm_engine::{GenerationRequest, PromptLogprob, RequestEvent, RequestStream, TokenLogprob};
use oxllm_sample::SamplingParams;
use oxllm_structured::Constraint;

use crate::admission::AdmitGuard;
use crate::drain::{self, GraceWatch};
use crate::error::ApiError;
use crate::metrics::Finished;
use crate::request_log::RequestLog;
use crate::state::AppState;

/// All choices of one HTTP request in flight.
pub struct Run {
    events: SelectAll<BoxStream<'static, (usize, RequestEvent)>>,
    /// Number of choices.
    pub len: usize,
    /// Samples per prompt.
    pub n: usize,
    /// The request field holding the prompt (`prompt` or `messages`), for engine errors.
    pub prompt_param: &'static str,
    grace: GraceWatch,
    _guard: AdmitGuard,
}

/// Submits `n` samples (`params.n`) for each prompt; `params[p]` belongs to `prompts[p]`, which
/// came from the request field `prompt_param`.
pub fn submit(
    state: &AppState,
    prompts: &[Vec<u32>],
    params: &[SamplingParams],
    prompt_param: &'static str,
) -> Result<Run, ApiError> {
    submit_constrained(state, prompts, params, prompt_param, None)
}

/// [`submit`] with every choice following `constraint` (each gets its own fresh copy).
pub fn submit_constrained(
    state: &AppState,
    prompts: &[Vec<u32>],
    params: &[SamplingParams],
    prompt_param: &'static str,
    constraint: Option<&Constraint>,
) -> Result<Run, ApiError> {
    let n = params.first().map_or(1, |p| p.n);
    let guard = state.admit(prompts.len() * n)?;
    let mut reqs = Vec::with_capacity(prompts.len() * n);
    for (ids, params) in prompts.iter().zip(params) {
        for j in 0..n {
            reqs.push(GenerationRequest {
                prompt_ids: ids.clone(),
                params: params.clone(),
                choice: j,
                constraint: constraint.cloned().map(Box::new),
            });
        }
    }
    // One submission: the engine's scheduler shares running slots fairly between submissions,
    // so one request's many choices cannot starve other clients' requests.
    let streams = state
        .engine()
        .submit_all(reqs)
        .map_err(|e| ApiError::from_engine(&e, prompt_param))?;
    let mut events = SelectAll::new();
    for (i, stream) in streams.into_iter().enumerate() {
        let log = crate::request_log::current();
        events.push(tracked(state.clone(), i, i % n == 0, log, stream));
    }
    Ok(Run {
        events,
        len: prompts.len() * n,
        n,
        prompt_param,
        grace: state.drain().watch_expiry(),
        _guard: guard,
    })
}

impl Run {
    /// The next event of any choice; `None` once every choice has ended; a 503 once the
    /// shutdown grace has ended (the run should then be dropped, which aborts its choices).
    pub async fn next(&mut self) -> Result<Option<(usize, RequestEvent)>, ApiError> {
        if self.grace.has_expired() {
            return Err(drain::grace_expired());
        }
        tokio::select! {
            biased;
            () = self.grace.expired() => Err(drain::grace_expired()),
            ev = self.events.next() => Ok(ev),
        }
    }
}

/// Records one choice's metrics; a choice dropped before it finished counts as aborted.
struct Tracker {
    state: AppState,
    start: Instant,
    first: Option<Instant>,
    last: Option<Instant>,
    done: bool,
    /// The HTTP request's log line; `counts_prompt` on one choice per prompt.
    log: Option<Arc<RequestLog>>,
    counts_prompt: bool,
    /// Tokens streamed so far: what an aborted choice reports as its completion.
    streamed: usize,
}

impl Tracker {
    fn on_event(&mut self, ev: &RequestEvent) {
        match ev {
            RequestEvent::Delta { token_ids, .. } if !token_ids.is_empty() => {
                self.streamed += token_ids.len();
                if let Some(log) = &self.log {
                    log.token();
                }
                let now = Instant::now();
                match self.last {
                    None => {
                        self.first = Some(now);
                        self.state
                            .metrics()
                            .observe_first_token(now.duration_since(self.start));
                        // The first token's wait is the TTFT; the rest of its delta came with it.
                        if token_ids.len() > 1 {
                            let gaps = token_ids.len() - 1;
                            self.state
                                .metrics()
                                .observe_inter_token(std::time::Duration::ZERO, gaps);
                        }
                    }
                    Some(last) => self
                        .state
                        .metrics()
                        .observe_inter_token(now.duration_since(last), token_ids.len()),
                }
                self.last = Some(now);
            }
            RequestEvent::Delta { .. } => {}
            RequestEvent::Finished {
                reason,
                prompt_tokens,
                completion_tokens,
                ..
            } => {
                self.done = true;
                if let Some(log) = &self.log {
                    let prompt = if self.counts_prompt {
                        *prompt_tokens
                    } else {
                        0
                    };
                    log.finished(reason.as_str(), prompt, *completion_tokens);
                }
                self.state.metrics().observe_finished(Finished {
                    reason: reason.as_str(),
                    prompt_tokens: *prompt_tokens,
                    completion_tokens: *completion_tokens,
                    ttft: self.first.map(|f| f.duration_since(self.start)),
                    e2e: self.start.elapsed(),
                });
            }
            RequestEvent::Error(_) => {
                self.done = true;
                self.finish_as("error");
            }
        }
    }

    fn finish_as(&self, reason: &'static str) {
        if let Some(log) = &self.log {
            log.finished(reason, 0, self.streamed);
        }
        self.state.metrics().observe_finished(Finished {
            reason,
            prompt_tokens: 0,
            completion_tokens: 0,
            ttft: None,
            e2e: self.start.elapsed(),
        });
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.done {
            self.finish_as("abort");
        }
    }
}

fn tracked(
    state: AppState,
    index: usize,
    counts_prompt: bool,
    log: Option<Arc<RequestLog>>,
    stream: RequestStream,
) -> BoxStream<'static, (usize, RequestEvent)> {
    let tracker = Tracker {
        state,
        start: Instant::now(),
        first: None,
        last: None,
        done: false,
        log,
        counts_prompt,
        streamed: 0,
    };
    stream::unfold((stream, tracker), move |(mut s, mut t)| async move {
        let ev = s.next().await?;
        t.on_event(&ev);
        Some(((index, ev), (s, t)))
    })
    .boxed()
}

/// One choice, complete.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    pub token_ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    /// When asked for: each prompt token's logprob (the first `None`).
    pub prompt_logprobs: Option<Vec<Option<PromptLogprob>>>,
    pub finish_reason: &'static str,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

/// Waits for every choice; an engine error is answered by its variant.
pub async fn collect(mut run: Run) -> Result<Vec<Collected>, ApiError> {
    let mut out = vec![Collected::default(); run.len];
    while let Some((i, ev)) = run.next().await? {
        let Some(c) = out.get_mut(i) else { continue };
        match ev {
            RequestEvent::Delta {
                token_ids,
                text,
                logprobs,
                prompt_logprobs,
                ..
            } => {
                c.token_ids.extend(token_ids);
                c.text.push_str(&text);
                c.logprobs.extend(logprobs);
                if prompt_logprobs.is_some() {
                    c.prompt_logprobs = prompt_logprobs;
                }
            }
            RequestEvent::Finished {
                reason,
                text,
                prompt_tokens,
                completion_tokens,
                cached_tokens,
            } => {
                c.text.push_str(&text);
                c.finish_reason = reason.as_str();
                c.prompt_tokens = prompt_tokens;
                c.completion_tokens = completion_tokens;
                c.cached_tokens = cached_tokens;
            }
            RequestEvent::Error(e) => return Err(ApiError::from_engine(&e, run.prompt_param)),
        }
    }
    if let Some(i) = out.iter().position(|c| c.finish_reason.is_empty()) {
        return Err(ApiError::internal(format!(
            "the engine stopped before choice {i} finished"
        )));
    }
    Ok(out)
}

/// Usage over choices: each prompt's tokens once, every choice's completion tokens.
pub fn usage_of(choices: &[Collected], n: usize) -> crate::protocol::common::Usage {
    let step = n.max(1);
    let prompt: usize = choices.iter().step_by(step).map(|c| c.prompt_tokens).sum();
    let cached: usize = choices.iter().step_by(step).map(|c| c.cached_tokens).sum();
    let completion = choices.iter().map(|c| c.completion_tokens).sum();
    crate::protocol::common::Usage::new(prompt, completion, cached)
}
