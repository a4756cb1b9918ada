//! `POST /v1/completions`: text or token-id prompts (one or several), `n` samples each,
//! `echo`, `logprobs`, streamed or whole.
//!
//! Prompt logprobs: `echo` with `logprobs` puts the prompt tokens first in the choice's
//! `logprobs` lists (the first token's logprob and alternatives `null`); vLLM's
//! `prompt_logprobs: k` adds the choice field `prompt_logprobs`. Either makes the engine score
//! every prompt position (bypassing the prefix cache for that request), and allows
//! `max_tokens` 0 (the prompt alone, as evaluation harnesses ask). Streamed, the echoed prompt
//! and its logprobs come in one chunk once the prompt is scored.

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
use crate::protocol::completions::{
    CompletionChoice, CompletionLogprobs, CompletionRequest, CompletionResponse,
    PromptTokenLogprobs, Skip,
};
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
    let vllm_prompt = match req.prompt_logprobs {
        None => None,
        Some(k) if k >= 0 => Some(usize::try_from(k).unwrap_or(usize::MAX)),
        Some(k) => {
            return Err(ApiError::invalid_param(
                "prompt_logprobs",
                format!("`prompt_logprobs` must be at least 0, got {k}"),
            ))
        }
    };
    let echo_logprobs = echo && logprobs.is_some();
    let scoring = match (vllm_prompt, echo_logprobs.then_some(logprobs).flatten()) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let parsed = params::parse_scoring(
        &req.sampling(),
        req.max_tokens,
        "max_tokens",
        logprobs,
        scoring,
    )?;
    let shape = PromptShape {
        echo_logprobs,
        vllm_prompt: vllm_prompt.is_some(),
    };
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
        let writer = Chunks::new(state, header, &run, (echoes, ids), flags, shape);
        return Ok(sse::respond(run, writer));
    }
    let n = run.n;
    let choices = generation::collect(run).await?;
    let prompts = Prompts {
        echoes: &echoes,
        ids: &ids,
    };
    Ok(Json(whole(
        &state,
        header,
        choices,
        n,
        prompts,
        logprobs.is_some(),
        shape,
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

/// Which prompt logprobs a response carries.
#[derive(Clone, Copy, Debug)]
struct PromptShape {
    /// `echo` with `logprobs`: the prompt's tokens lead the `logprobs` lists.
    echo_logprobs: bool,
    /// vLLM's `prompt_logprobs` field.
    vllm_prompt: bool,
}

/// Each prompt's echoed text (empty without `echo`) and token ids.
#[derive(Clone, Copy)]
struct Prompts<'a> {
    echoes: &'a [String],
    ids: &'a [Vec<u32>],
}

/// A choice's prompt logprobs in the shapes asked for: the echoed prompt's `logprobs` lists
/// and vLLM's `prompt_logprobs`.
fn prompt_parts(
    state: &AppState,
    shape: PromptShape,
    ids: &[u32],
    scores: Option<&[Option<oxllm_engine::PromptLogprob>]>,
) -> (
    Option<CompletionLogprobs>,
    Option<Vec<Option<PromptTokenLogprobs>>>,
) {
    let Some(scores) = scores else {
        return (None, None);
    };
    let echoed = shape
        .echo_logprobs
        .then(|| logprobs::echoed_prompt(state, ids, scores, &mut 0));
    let vllm = shape
        .vllm_prompt
        .then(|| logprobs::vllm_prompt(state, scores));
    (echoed, vllm)
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
    prompts: Prompts<'_>,
    want_logprobs: bool,
    shape: PromptShape,
) -> CompletionResponse {
    let usage = generation::usage_of(&choices, n);
    let out = choices
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let p = i / n.max(1);
            let echo = prompts.echoes.get(p).map_or("", String::as_str);
            let ids = prompts.ids.get(p).map_or(&[][..], Vec::as_slice);
            let (echoed, vllm) = prompt_parts(state, shape, ids, c.prompt_logprobs.as_deref());
            let mut offset = echo.chars().count();
            let logprobs = want_logprobs.then(|| {
                let generated = logprobs::completion(state, &c.logprobs, &mut offset);
                match echoed {
                    Some(mut all) => {
                        logprobs::extend(&mut all, generated);
                        all
                    }
                    None => generated,
                }
            });
            CompletionChoice {
                index: i,
                logprobs,
                text: format!("{echo}{}", c.text),
                finish_reason: Some(c.finish_reason),
                prompt_logprobs: vllm,
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
    /// Each prompt's ids (for the echoed prompt's logprobs).
    prompt_ids: Vec<Vec<u32>>,
    shape: PromptShape,
    offsets: Vec<usize>,
    include_usage: bool,
    want_logprobs: bool,
    usage: Vec<(usize, usize, usize)>,
}

impl Chunks {
    /// `prompts`: each prompt's echo (empty without `echo`) and ids; `flags`:
    /// (include_usage, want_logprobs).
    fn new(
        state: AppState,
        header: Header,
        run: &Run,
        prompts: (Vec<String>, Vec<Vec<u32>>),
        flags: (bool, bool),
        shape: PromptShape,
    ) -> Self {
        let (include_usage, want_logprobs) = flags;
        let (echoes, prompt_ids) = prompts;
        Chunks {
            state,
            header,
            n: run.n,
            echoes,
            prompt_ids,
            shape,
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

    /// The chunk of choice `index`'s echoed prompt with its logprobs.
    fn prompt_chunk(
        &mut self,
        index: usize,
        scores: &[Option<oxllm_engine::PromptLogprob>],
    ) -> String {
        let p = index / self.n.max(1);
        let echo = self.echoes.get(p).cloned().unwrap_or_default();
        let ids = self.prompt_ids.get(p).map_or(&[][..], Vec::as_slice);
        let (echoed, vllm) = prompt_parts(&self.state, self.shape, ids, Some(scores));
        if let Some(o) = self.offsets.get_mut(index) {
            *o = echo.chars().count();
        }
        self.chunk(CompletionChoice {
            index,
            text: echo,
            logprobs: echoed,
            finish_reason: None,
            prompt_logprobs: vllm,
        })
    }
}

impl ChunkWriter for Chunks {
    fn start(&mut self, out: &mut VecDeque<String>) {
        if self.shape.echo_logprobs || self.shape.vllm_prompt {
            // The echo goes out with the prompt's logprobs, once the engine has them.
            return;
        }
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
                prompt_logprobs: None,
            }));
        }
    }

    fn event(&mut self, index: usize, ev: RequestEvent, out: &mut VecDeque<String>) {
        match ev {
            RequestEvent::Delta {
                text,
                logprobs,
                prompt_logprobs,
                ..
            } => {
                if let Some(scores) = prompt_logprobs {
                    let chunk = self.prompt_chunk(index, &scores);
                    out.push_back(chunk);
                }
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
                    prompt_logprobs: None,
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
                    prompt_logprobs: None,
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
