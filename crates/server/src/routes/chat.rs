//! `POST /v1/chat/completions`: messages rendered with the model's chat template, `n` choices,
//! logprobs, streamed (role chunk, content chunks, finish chunk, optional usage chunk) or whole.

use std::collections::VecDeque;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxllm_engine::RequestEvent;

use crate::answer::{AnswerShape, Shaped};
use crate::error::ApiError;
use crate::generation::{self, Run};
use crate::ids::{new_id, unix_now};
use crate::json::ApiJson;
use crate::logprobs;
use crate::params::{self, fit_to_context};
use crate::prompt::{self, ChatOptions};
use crate::protocol::chat::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatDelta, ChatRequest, ChatResponse,
    ToolCallDelta,
};
use crate::protocol::common::Usage;
use crate::protocol::completions::Skip;
use crate::reasoning;
use crate::sse::{self, ChunkWriter};
use crate::state::AppState;
use crate::structured;
use crate::tools::{self, ToolFormat};

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.model.as_deref())?;
    let template_source = state
        .tokenizer()
        .ok()
        .and_then(|t| t.chat_template().map(str::to_owned))
        .unwrap_or_default();
    let format = state
        .config()
        .tool_call_parser
        .unwrap_or_else(|| ToolFormat::of_template(&template_source));
    let tool_plan = tools::plan(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
        format,
    )?;
    let shape = AnswerShape {
        reasoning: reasoning::thinks(&template_source, req.chat_template_kwargs.as_ref()),
        tools: tool_plan.clone(),
    };
    let mut requested = req.structured().spec()?;
    if let Some(spec) = tool_plan.as_ref().and_then(|p| p.constraint()) {
        if let Some(other) = &requested {
            return Err(ApiError::invalid_param(
                "tool_choice",
                format!(
                    "a required or named `tool_choice` cannot be combined with `{}`",
                    other.field
                ),
            ));
        }
        requested = Some(structured::Requested {
            spec,
            field: "tools".into(),
        });
    }
    let mut constraint = match requested {
        Some(r) => Some(structured::compile(&state, r).await?),
        None => None,
    };
    if shape.reasoning {
        // The grammar applies to the answer, after the reasoning block closes.
        let close = state
            .tokenizer()?
            .encode(reasoning::CLOSE, false)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        constraint = constraint.map(|c| c.start_after(close));
    }
    let messages = match &tool_plan {
        Some(p) => p.messages(&req.messages),
        None => tools::history(&req.messages, format),
    };
    let want_logprobs = req.logprobs.unwrap_or(false);
    let top = match req.top_logprobs {
        None => 0,
        Some(_) if !want_logprobs => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "top_logprobs requires logprobs to be true",
            ))
        }
        Some(t) if t >= 0 => usize::try_from(t).unwrap_or(usize::MAX),
        Some(t) => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                format!("`top_logprobs` must be in [0, 20], got {t}"),
            ))
        }
    };
    let (max_tokens, max_param) = match req.max_completion_tokens {
        Some(m) => (Some(m), "max_completion_tokens"),
        None => (req.max_tokens, "max_tokens"),
    };
    let parsed = params::parse(
        &req.sampling(),
        max_tokens,
        max_param,
        want_logprobs.then_some(top),
    )
    .map_err(|mut e| {
        if e.param.as_deref() == Some("logprobs") {
            e.param = Some("top_logprobs".into());
            e.message = e.message.replace("`logprobs`", "`top_logprobs`");
        }
        e
    })?;
    let continue_final = req.continue_final_message.unwrap_or(false);
    let opts = ChatOptions {
        add_generation_prompt: req.add_generation_prompt.unwrap_or(!continue_final),
        continue_final_message: continue_final,
        add_special_tokens: false,
        tools: tool_plan.as_ref().and_then(|p| p.template_tools()),
        kwargs: req.chat_template_kwargs.clone(),
    };
    let ids = prompt::encode_chat(&state, &messages, opts).await?;
    if ids.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "the rendered prompt is empty",
        ));
    }
    let params = fit_to_context(&parsed, ids.len(), None, &state.context(), "messages")?;
    let run =
        generation::submit_constrained(&state, &[ids], &[params], "messages", constraint.as_ref())?;
    let header = Header {
        id: new_id("chatcmpl-"),
        created: unix_now(),
        model: state.config().served_model_name.clone(),
    };
    if parsed.stream {
        let writer = Chunks {
            state,
            header,
            len: run.len,
            include_usage: parsed.include_usage,
            want_logprobs,
            usage: vec![(0, 0, 0); run.len],
            held: vec![String::new(); run.len],
            shape,
        };
        return Ok(sse::respond(run, writer));
    }
    whole(&state, header, run, want_logprobs, &shape).await
}

struct Header {
    id: String,
    created: u64,
    model: String,
}

async fn whole(
    state: &AppState,
    h: Header,
    run: Run,
    want_logprobs: bool,
    shape: &AnswerShape,
) -> Result<Response, ApiError> {
    let n = run.n;
    let choices = generation::collect(run).await?;
    let usage = generation::usage_of(&choices, n);
    let choices = choices
        .into_iter()
        .enumerate()
        .map(|(index, c)| {
            let shaped = shape.apply(&c.text);
            ChatChoice {
                index,
                logprobs: want_logprobs.then(|| logprobs::chat(state, &c.logprobs)),
                finish_reason: Some(finish_of(&shaped, c.finish_reason)),
                message: AssistantMessage {
                    role: "assistant",
                    content: shaped.content,
                    refusal: None,
                    tool_calls: shaped.tool_calls,
                    reasoning_content: shaped.reasoning,
                },
            }
        })
        .collect();
    Ok(Json(ChatResponse {
        id: h.id,
        object: "chat.completion",
        created: h.created,
        model: h.model,
        choices,
        usage,
        system_fingerprint: None,
    })
    .into_response())
}

/// `tool_calls` when the answer called tools, else the engine's reason.
fn finish_of(shaped: &Shaped, reason: &'static str) -> &'static str {
    if shaped.tool_calls.is_empty() {
        reason
    } else {
        "tool_calls"
    }
}

struct Chunks {
    state: AppState,
    header: Header,
    len: usize,
    include_usage: bool,
    want_logprobs: bool,
    /// (prompt, completion, cached) tokens per choice.
    usage: Vec<(usize, usize, usize)>,
    /// Text held back per choice while answers are shaped (reasoning, tool calls): it is sent
    /// shaped when the choice finishes.
    held: Vec<String>,
    shape: AnswerShape,
}

impl Chunks {
    fn chunk(&self, choices: Vec<ChatChunkChoice>, usage: Option<Usage>) -> String {
        let usage = match (usage, self.include_usage) {
            (Some(u), _) => Skip::Value(u),
            (None, true) => Skip::Null,
            (None, false) => Skip::Absent,
        };
        sse::to_json(&ChatChunk {
            id: self.header.id.clone(),
            object: "chat.completion.chunk",
            created: self.header.created,
            model: self.header.model.clone(),
            choices,
            system_fingerprint: None,
            usage,
        })
    }

    fn one(&self, index: usize, delta: ChatDelta, finish: Option<&'static str>) -> ChatChunkChoice {
        ChatChunkChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: finish,
        }
    }
}

impl ChunkWriter for Chunks {
    fn start(&mut self, out: &mut VecDeque<String>) {
        for i in 0..self.len {
            let delta = ChatDelta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..ChatDelta::default()
            };
            out.push_back(self.chunk(vec![self.one(i, delta, None)], None));
        }
    }

    fn event(&mut self, index: usize, ev: RequestEvent, out: &mut VecDeque<String>) {
        match ev {
            RequestEvent::Delta { text, logprobs, .. } => {
                let lp = self.want_logprobs && !logprobs.is_empty();
                let text = if self.shape.is_active() {
                    if let Some(h) = self.held.get_mut(index) {
                        h.push_str(&text);
                    }
                    String::new()
                } else {
                    text
                };
                if text.is_empty() && !lp {
                    return;
                }
                let mut choice = self.one(
                    index,
                    ChatDelta {
                        content: Some(text),
                        ..ChatDelta::default()
                    },
                    None,
                );
                if lp {
                    choice.logprobs = Some(logprobs::chat(&self.state, &logprobs));
                }
                out.push_back(self.chunk(vec![choice], None));
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
                let mut reason = reason.as_str();
                if self.shape.is_active() {
                    let mut whole = self
                        .held
                        .get_mut(index)
                        .map(std::mem::take)
                        .unwrap_or_default();
                    whole.push_str(&text);
                    let shaped = self.shape.apply(&whole);
                    reason = finish_of(&shaped, reason);
                    for delta in shaped_deltas(shaped) {
                        out.push_back(self.chunk(vec![self.one(index, delta, None)], None));
                    }
                } else if !text.is_empty() {
                    let delta = ChatDelta {
                        content: Some(text),
                        ..ChatDelta::default()
                    };
                    out.push_back(self.chunk(vec![self.one(index, delta, None)], None));
                }
                let done = self.one(index, ChatDelta::default(), Some(reason));
                out.push_back(self.chunk(vec![done], None));
            }
            RequestEvent::Error(_) => {}
        }
    }

    fn finish(&mut self, out: &mut VecDeque<String>) {
        if !self.include_usage {
            return;
        }
        // One prompt: its tokens count once, whatever n is.
        let prompt = self.usage.first().map_or(0, |u| u.0);
        let cached = self.usage.first().map_or(0, |u| u.2);
        let completion = self.usage.iter().map(|u| u.1).sum();
        out.push_back(self.chunk(vec![], Some(Usage::new(prompt, completion, cached))));
    }
}

/// A shaped answer as stream deltas: reasoning, content, then each tool call whole.
fn shaped_deltas(shaped: Shaped) -> Vec<ChatDelta> {
    let mut out = Vec::new();
    if let Some(r) = shaped.reasoning.filter(|r| !r.is_empty()) {
        out.push(ChatDelta {
            reasoning_content: Some(r),
            ..ChatDelta::default()
        });
    }
    if let Some(c) = shaped.content.filter(|c| !c.is_empty()) {
        out.push(ChatDelta {
            content: Some(c),
            ..ChatDelta::default()
        });
    }
    for (index, call) in shaped.tool_calls.into_iter().enumerate() {
        out.push(ChatDelta {
            tool_calls: Some(vec![ToolCallDelta {
                index,
                id: call.id,
                kind: call.kind,
                function: call.function,
            }]),
            ..ChatDelta::default()
        });
    }
    out
}
