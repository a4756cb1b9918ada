//! vLLM's `POST /tokenize` (a prompt, or chat messages through the template),
//! `GET /tokenizer_info` and
//! `POST /detokenize`.

use axum::extract::State;
use axum::Json;

use crate::error::ApiError;
use crate::json::ApiJson;
use crate::prompt::{self, blocking, ChatOptions};
use crate::protocol::tokenize::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};
use crate::state::AppState;
use crate::tools;

pub async fn tokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    state.check_model(req.model.as_deref())?;
    let tokens = match (req.prompt, &req.messages) {
        (Some(text), None) => {
            let tok = state.tokenizer()?;
            let special = req.add_special_tokens.unwrap_or(true);
            blocking(move || {
                tok.encode(&text, special)
                    .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))
            })
            .await?
        }
        (None, Some(messages)) => {
            // Rendered as a chat request with these tools renders it.
            let format = state.tool_format();
            let plan = tools::plan(req.tools.as_ref(), None, None, format)?;
            let messages = match &plan {
                Some(p) => p.messages(messages),
                None => tools::history(messages, format),
            };
            let continue_final = req.continue_final_message.unwrap_or(false);
            let opts = ChatOptions {
                add_generation_prompt: req.add_generation_prompt.unwrap_or(!continue_final),
                continue_final_message: continue_final,
                add_special_tokens: req.add_special_tokens.unwrap_or(false),
                tools: plan.as_ref().and_then(|p| p.template_tools()),
                kwargs: req.chat_template_kwargs.clone(),
            };
            prompt::encode_chat(&state, &messages, opts).await?
        }
        _ => {
            return Err(ApiError::bad_request(
                "send exactly one of `prompt` and `messages`",
            ))
        }
    };
    let token_strs = req.return_token_strs.unwrap_or(false).then(|| {
        tokens
            .iter()
            .map(|&t| state.token_text(t).to_string())
            .collect()
    });
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: state.context_limit(),
        tokens,
        token_strs,
    }))
}

pub async fn detokenize(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    state.check_model(req.model.as_deref())?;
    let tok = state.tokenizer()?;
    let tokens = req.tokens;
    let prompt = blocking(move || {
        tok.decode(&tokens, false)
            .map_err(|e| ApiError::invalid_param("tokens", e.to_string()))
    })
    .await?;
    Ok(Json(DetokenizeResponse { prompt }))
}

/// vLLM's `GET /tokenizer_info`: the special tokens and the chat template, which clients that
/// tokenize through this server read (lm-evaluation-harness's `remote` tokenizer backend,
/// which then encodes and decodes with `/tokenize` and `/detokenize`).
pub async fn tokenizer_info(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let tok = state.tokenizer()?;
    let spelling = |id: Option<u32>| id.and_then(|i| tok.id_to_token(i));
    let template = state.template_source();
    Ok(Json(serde_json::json!({
        "tokenizer_class": "oxllm",
        "bos_token": spelling(tok.bos_id()),
        "eos_token": spelling(tok.eos_ids().first().copied()),
        "pad_token": null,
        "chat_template": (!template.is_empty()).then_some(template),
        "model_max_length": state.context_limit(),
    })))
}
