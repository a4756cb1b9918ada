//! Prompts to token ids, off the async runtime: completion prompts (text or ids) and chat
//! messages rendered through the model's template.

use serde_json::{Map, Value};

use oxllm_tok::{ChatTemplateError, ChatTemplateInputs};

use crate::content_tokens::encode_with_text_contents;
use crate::error::ApiError;
use crate::protocol::chat::ChatMessage;
use crate::protocol::completions::PromptInput;
use crate::state::AppState;

/// One tokenized prompt and the text it came from (for `echo`).
#[derive(Clone, Debug)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub text: Option<String>,
}

/// Runs `f` on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("tokenization task failed: {e}")))?
}

/// Completion prompts: text is encoded with the tokenizer's special tokens (BOS as declared).
pub async fn encode_prompts(state: &AppState, input: PromptInput) -> Result<Vec<Prompt>, ApiError> {
    let (texts, ids): (Vec<String>, Vec<Vec<u32>>) = match input {
        PromptInput::Text(t) => (vec![t], vec![]),
        PromptInput::Texts(t) => (t, vec![]),
        PromptInput::Ids(i) => (vec![], vec![i]),
        PromptInput::IdLists(i) => (vec![], i),
    };
    if texts.is_empty() && ids.is_empty() {
        return Err(ApiError::invalid_param(
            "prompt",
            "`prompt` must not be empty",
        ));
    }
    if ids.is_empty() {
        let tok = state.tokenizer()?;
        return blocking(move || {
            texts
                .into_iter()
                .map(|t| {
                    let ids = tok
                        .encode(&t, true)
                        .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))?;
                    Ok(Prompt { ids, text: Some(t) })
                })
                .collect()
        })
        .await;
    }
    Ok(ids
        .into_iter()
        .map(|ids| Prompt { ids, text: None })
        .collect())
}

/// How chat messages are rendered.
#[derive(Clone, Debug, Default)]
pub struct ChatOptions {
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    pub add_special_tokens: bool,
    pub tools: Option<Value>,
    pub kwargs: Option<Map<String, Value>>,
}

/// Renders `messages` with the model's template and encodes the result.
pub async fn encode_chat(
    state: &AppState,
    messages: &[ChatMessage],
    opts: ChatOptions,
) -> Result<Vec<u32>, ApiError> {
    if opts.add_generation_prompt && opts.continue_final_message {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "continue_final_message and add_generation_prompt cannot both be true",
        ));
    }
    let template = state.template()?;
    let tok = state.tokenizer()?;
    let json = messages_json(messages)?;
    let last_content = match json.as_array().and_then(|a| a.last()) {
        Some(m) => m.get("content").and_then(Value::as_str).map(str::to_owned),
        None => {
            return Err(ApiError::invalid_param(
                "messages",
                "`messages` must not be empty",
            ))
        }
    };
    let allow_specials = state.config().special_tokens_in_content;
    let state_specials = state.special_token_strings();
    blocking(move || {
        let mut text = template
            .render(&ChatTemplateInputs {
                messages: &json,
                add_generation_prompt: opts.add_generation_prompt,
                tools: opts.tools.as_ref(),
                kwargs: opts.kwargs.as_ref(),
            })
            .map_err(|e| match e {
                ChatTemplateError::Invalid(m) => ApiError::internal(m),
                other => ApiError::invalid_param("messages", other.to_string()),
            })?;
        if opts.continue_final_message {
            let content = last_content.unwrap_or_default();
            match text.rfind(&content) {
                Some(at) if !content.is_empty() => text.truncate(at + content.len()),
                _ => {
                    return Err(ApiError::invalid_param(
                        "continue_final_message",
                        "the final message's content does not appear in the rendered prompt",
                    ))
                }
            }
        }
        if allow_specials {
            return tok
                .encode(&text, opts.add_special_tokens)
                .map_err(|e| ApiError::invalid_param("messages", e.to_string()));
        }
        let contents: Vec<String> = json
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                m.get("content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        encode_with_text_contents(
            &tok,
            &text,
            &contents,
            &state_specials,
            opts.add_special_tokens,
        )
    })
    .await
}

/// Messages as the template sees them: checked, `content` flattened to a string (text parts
/// joined by newlines) or null.
pub fn messages_json(messages: &[ChatMessage]) -> Result<Value, ApiError> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if !m.get("role").is_some_and(Value::is_string) {
            return Err(ApiError::invalid_param(
                format!("messages[{i}].role"),
                "every message needs a string `role`",
            ));
        }
        let content = match m.get("content") {
            None | Some(Value::Null) => Value::Null,
            Some(Value::String(t)) => Value::String(t.clone()),
            Some(Value::Array(parts)) => {
                let mut texts = Vec::with_capacity(parts.len());
                for (j, p) in parts.iter().enumerate() {
                    let kind = p.get("type").and_then(Value::as_str);
                    match (kind, p.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => texts.push(t),
                        _ => {
                            return Err(ApiError::invalid_param(
                                format!("messages[{i}].content[{j}]"),
                                format!(
                                    "only text content parts ({{\"type\": \"text\", \"text\": ...}}) are supported, got type {}",
                                    kind.unwrap_or("(none)")
                                ),
                            ))
                        }
                    }
                }
                Value::String(texts.join("\n"))
            }
            Some(_) => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].content"),
                    "`content` must be a string, a list of text parts, or null",
                ))
            }
        };
        let mut obj = m.clone();
        obj.insert("content".into(), content);
        out.push(Value::Object(obj));
    }
    Ok(Value::Array(out))
}
