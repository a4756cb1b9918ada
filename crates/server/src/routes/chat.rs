//! `POST /v1/chat/completions`: messages rendered with the model's chat template, `n` choices,
//! logprobs, streamed (role chunk, content chunks, finish chunk, optional usage chunk) or whole.

use std::collections::VecDeque;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use oxllm_engine::RequestEvent;

use crate::answer::AnswerShape;
use crate::answer_stream::{AnswerStream, Piece};
use crate::error::ApiError;
use crate::generation::{self, Run};
use crate::ids::{new_id, unix_now};
use crate::json::ApiJson;
use crate::logprobs;
use crate::params::{self, fit_to_context};
use crate::prompt::{self, ChatOptions};
use crate::protocol::chat::{
    AssistantMessage, ChatChoice, ChatChunk, ChatChunkChoice, ChatDelta, ChatRequest, ChatResponse,
    FunctionCallDelta, ToolCallDelta,
};
use crate::protocol::common::Usage;
use crate::protocol::completions::Skip;
use crate::reasoning;
use crate::sse::{self, ChunkWriter};
use crate::state::AppState;
use crate::structured;
use crate::tools;

pub async fn chat_completions(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<ChatRequest>,
) -> Result<Response, ApiError> {
    state.check_model(req.model.as_deref())?;
    let template_source = state.template_source();
    let format = state.tool_format();
    let tool_plan = tools::plan(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        req.parallel_tool_calls,
        format,
    )?;
    let mut shape = AnswerShape {
        reasoning: reasoning::thinks(&template_source, req.chat_template_kwargs.as_ref()),
        opened_in_prompt: false,
        tools: tool_plan.clone(),
    };
    if let Some(plan) = &tool_plan {
        for (field, spec) in plan.parameter_schemas() {
            structured::check(&state, structured::Requested { spec, field }).await?;
        }
    }
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
    if shape.reasoning {
        let tail = &ids[ids.len().saturating_sub(8)..];
        shape.opened_in_prompt = state
            .tokenizer()?
            .decode(tail, false)
            .is_ok_and(|t| reasoning::opened_in_prompt(&t));
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
            streams: (0..run.len).map(|_| shape.stream()).collect(),
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
                finish_reason: Some(finish_of(!shaped.tool_calls.is_empty(), c.finish_reason)),
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

/// `tool_calls` when the answer called tools and ended on its own (a call cut by
/// `max_tokens` stays `length`), else the engine's reason.
fn finish_of(called: bool, reason: &'static str) -> &'static str {
    if called && reason == "stop" {
        "tool_calls"
    } else {
        reason
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
    /// Per choice, its answer shaped as it streams (reasoning, tool calls).
    streams: Vec<AnswerStream>,
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

impl Chunks {
    /// One chunk per delta; logprobs ride on the first (alone when there is no delta).
    fn send(
        &self,
        index: usize,
        deltas: Vec<ChatDelta>,
        mut lp: Option<crate::protocol::chat::ChatLogprobs>,
        finish: Option<&'static str>,
        out: &mut VecDeque<String>,
    ) {
        let deltas = if deltas.is_empty() && lp.is_some() {
            vec![content_delta(String::new())]
        } else {
            deltas
        };
        for delta in deltas {
            let mut choice = self.one(index, delta, finish);
            choice.logprobs = lp.take();
            out.push_back(self.chunk(vec![choice], None));
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
                let lp = (self.want_logprobs && !logprobs.is_empty())
                    .then(|| logprobs::chat(&self.state, &logprobs));
                let deltas = match self.streams.get_mut(index) {
                    Some(stream) if self.shape.is_active() => {
                        stream.push(&text).into_iter().map(delta_of).collect()
                    }
                    _ if text.is_empty() => Vec::new(),
                    _ => vec![content_delta(text)],
                };
                self.send(index, deltas, lp, None, out);
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
                let deltas = match self.streams.get_mut(index) {
                    Some(stream) if self.shape.is_active() => {
                        let mut pieces = stream.push(&text);
                        pieces.extend(stream.finish());
                        reason = finish_of(stream.called(), reason);
                        pieces.into_iter().map(delta_of).collect()
                    }
                    _ if text.is_empty() => Vec::new(),
                    _ => vec![content_delta(text)],
                };
                self.send(index, deltas, None, None, out);
                self.send(index, vec![ChatDelta::default()], None, Some(reason), out);
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

fn content_delta(text: String) -> ChatDelta {
    ChatDelta {
        content: Some(text),
        ..ChatDelta::default()
    }
}

/// A piece of a shaped answer as a stream delta.
fn delta_of(piece: Piece) -> ChatDelta {
    let call = |index, id: Option<String>, name, arguments| ToolCallDelta {
        index,
        kind: id.as_ref().map(|_| "function"),
        id,
        function: FunctionCallDelta { name, arguments },
    };
    match piece {
        Piece::Reasoning(t) => ChatDelta {
            reasoning_content: Some(t),
            ..ChatDelta::default()
        },
        Piece::Content(t) => content_delta(t),
        Piece::CallStart { index, id, name } => ChatDelta {
            tool_calls: Some(vec![call(index, Some(id), Some(name), String::new())]),
            ..ChatDelta::default()
        },
        Piece::CallArguments { index, text } => ChatDelta {
            tool_calls: Some(vec![call(index, None, None, text)]),
            ..ChatDelta::default()
        },
    }
}
