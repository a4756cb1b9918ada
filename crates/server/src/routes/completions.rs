//! `POST /v1/completions`: text or token-id prompts (one or several), `n` samples each,
//! `echo`, `logprobs`, streamed or whole.

use std::collections::VecDeque;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxllm_engine::RequestEvent;

use crate::error::ApiError;
use crate::generation::{self, Collected, Run};
use crate::ids::{new_id, unix_now};
use crate::json::ApiJson;
use crate::logprobs;
use crate::params::{self, fit_to_context};
use crate::prompt::{self, blocking, Prompt};
use crate::protocol::common::Usage;
use crate::protocol::completions::{CompletionChoice, CompletionRequest, CompletionResponse, Skip};
use crate::sse::{self, ChunkWriter};
use crate::state::AppState;
use crate::structured;

/// Default `max_tokens` of OpenAI's completions endpoint.
const DEFAULT_MAX_TOKENS: usize = 16;

pub async fn completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.model.as_deref())?;
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param("suffix", "suffix is not supported"));
    }
    let logprobs = match req.logprobs {
        None => None,
        Some(l) if l >= 0 => Some(usize::try_from(l).unwrap_or(usize::MAX)),
        Some(l) => {
            return Err(ApiError::invalid_param(
                "logprobs",
                format!("`logprobs` must be at least 0, got {l}"),
            ))
        }
    };
    let echo = req.echo.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::invalid_param(
            "echo",
            "echo together with logprobs is not supported (prompt logprobs are not computed)",
        ));
    }
    let parsed = params::parse(&req.sampling(), req.max_tokens, "max_tokens", logprobs)?;
    let constraint = match req.structured().spec()? {
        Some(r) => Some(structured::compile(&state, r).await?),
        None => None,
    };
    if let Some(b) = req.best_of {
        if b != parsed.params.n as i64 {
            return Err(ApiError::invalid_param(
                "best_of",
                "best_of is not supported unless it equals n",
            ));
        }
    }
    let mut prompts = prompt::encode_prompts(&state, req.prompt).await?;
    if prompts.len() * parsed.params.n > oxllm_sample::MAX_N {
        return Err(ApiError::invalid_param(
            "prompt",
            format!(
                "at most {} choices per request (prompts × n)",
                oxllm_sample::MAX_N
            ),
        ));
    }
    let ctx = state.context();
    let mut per_prompt = Vec::with_capacity(prompts.len());
    for p in &prompts {
        if p.ids.is_empty() {
            return Err(ApiError::invalid_param("prompt", "the prompt is empty"));
        }
        per_prompt.push(fit_to_context(
            &parsed,
            p.ids.len(),
            Some(DEFAULT_MAX_TOKENS),
            &ctx,
            "prompt",
        )?);
    }
    if echo {
        prompts = with_echo_text(&state, prompts).await?;
    }
    let ids: Vec<Vec<u32>> = prompts.iter().map(|p| p.ids.clone()).collect();
    let run =
        generation::submit_constrained(&state, &ids, &per_prompt, "prompt", constraint.as_ref())?;
    let echoes: Vec<String> = prompts
        .into_iter()
        .map(|p| {
            if echo {
                p.text.unwrap_or_default()
            } else {
                String::new()
            }
        })
        .collect();
    let header = Header {
        id: new_id("cmpl-"),
        created: unix_now(),
        model: state.config().served_model_name.clone(),
    };
    if parsed.stream {
        let flags = (parsed.include_usage, logprobs.is_some());
        let writer = Chunks::new(state, header, &run, echoes, flags);
        return Ok(sse::respond(run, writer));
    }
    let n = run.n;
    let choices = generation::collect(run).await?;
    Ok(Json(whole(
        &state,
        header,
        choices,
        n,
        &echoes,
        logprobs.is_some(),
    ))
    .into_response())
}

/// Fills in the text of token-id prompts (for `echo`).
async fn with_echo_text(state: &AppState, prompts: Vec<Prompt>) -> Result<Vec<Prompt>, ApiError> {
    if prompts.iter().all(|p| p.text.is_some()) || !state.has_tokenizer() {
        return Ok(prompts);
    }
    let tok = state.tokenizer()?;
    blocking(move || {
        prompts
            .into_iter()
            .map(|mut p| {
                if p.text.is_none() {
                    p.text = Some(
                        tok.decode(&p.ids, false)
                            .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))?,
                    );
                }
                Ok(p)
            })
            .collect()
    })
    .await
}

struct Header {
    id: String,
    created: u64,
    model: String,
}

fn response(h: &Header, choices: Vec<CompletionChoice>, usage: Skip<Usage>) -> CompletionResponse {
    CompletionResponse {
        id: h.id.clone(),
        object: "text_completion",
        created: h.created,
        model: h.model.clone(),
        choices,
        usage,
    }
}

fn whole(
    state: &AppState,
    h: Header,
    choices: Vec<Collected>,
    n: usize,
    echoes: &[String],
    want_logprobs: bool,
) -> CompletionResponse {
    let usage = generation::usage_of(&choices, n);
    let out = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let echo = echoes.get(i / n.max(1)).map_or("", String::as_str);
            let mut offset = echo.chars().count();
            CompletionChoice {
                index: i,
                logprobs: want_logprobs
                    .then(|| logprobs::completion(state, &c.logprobs, &mut offset)),
                text: format!("{echo}{}", c.text),
                finish_reason: Some(c.finish_reason),
            }
        })
        .collect();
    response(&h, out, Skip::Value(usage))
}

/// Streaming: one chunk per delta with text (or logprobs), one with each `finish_reason`.
struct Chunks {
    state: AppState,
    header: Header,
    n: usize,
    echoes: Vec<String>,
    offsets: Vec<usize>,
    include_usage: bool,
    want_logprobs: bool,
    usage: Vec<(usize, usize, usize)>,
}

impl Chunks {
    /// `flags`: (include_usage, want_logprobs).
    fn new(
        state: AppState,
        header: Header,
        run: &Run,
        echoes: Vec<String>,
        flags: (bool, bool),
    ) -> Self {
        let (include_usage, want_logprobs) = flags;
        Chunks {
            state,
            header,
            n: run.n,
            echoes,
            offsets: vec![0; run.len],
            include_usage,
            want_logprobs,
            usage: vec![(0, 0, 0); run.len],
        }
    }

    fn chunk(&self, choice: CompletionChoice) -> String {
        let usage = if self.include_usage {
            Skip::Null
        } else {
            Skip::Absent
        };
        sse::to_json(&response(&self.header, vec![choice], usage))
    }
}

impl ChunkWriter for Chunks {
    fn start(&mut self, out: &mut VecDeque<String>) {
        for i in 0..self.offsets.len() {
            let echo = self
                .echoes
                .get(i / self.n.max(1))
                .cloned()
                .unwrap_or_default();
            if echo.is_empty() {
                continue;
            }
            self.offsets[i] = echo.chars().count();
            out.push_back(self.chunk(CompletionChoice {
                index: i,
                text: echo,
                logprobs: None,
                finish_reason: None,
            }));
        }
    }

    fn event(&mut self, index: usize, ev: RequestEvent, out: &mut VecDeque<String>) {
        match ev {
            RequestEvent::Delta { text, logprobs, .. } => {
                if text.is_empty() && logprobs.is_empty() {
                    return;
                }
                let lp = (self.want_logprobs && !logprobs.is_empty()).then(|| {
                    let mut offset = self.offsets.get(index).copied().unwrap_or(0);
                    let lp = logprobs::completion(&self.state, &logprobs, &mut offset);
                    if let Some(o) = self.offsets.get_mut(index) {
                        *o = offset;
                    }
                    lp
                });
                out.push_back(self.chunk(CompletionChoice {
                    index,
                    text,
                    logprobs: lp,
                    finish_reason: None,
                }));
            }
            RequestEvent::Finished {
                reason,
                text,
                prompt_tokens,
                completion_tokens,
                cached_tokens,
            } => {
                if let Some(u) = self.usage.get_mut(index) {
                    *u = (prompt_tokens, completion_tokens, cached_tokens);
                }
                out.push_back(self.chunk(CompletionChoice {
                    index,
                    text,
                    logprobs: None,
                    finish_reason: Some(reason.as_str()),
                }));
            }
            RequestEvent::Error(_) => {}
        }
    }

    fn finish(&mut self, out: &mut VecDeque<String>) {
        if !self.include_usage {
            return;
        }
        let step = self.n.max(1);
        let prompt = self.usage.iter().step_by(step).map(|u| u.0).sum();
        let cached = self.usage.iter().step_by(step).map(|u| u.2).sum();
        let completion = self.usage.iter().map(|u| u.1).sum();
        let usage = Usage::new(prompt, completion, cached);
        out.push_back(sse::to_json(&response(
            &self.header,
            vec![],
            Skip::Value(usage),
        )));
    }
}
