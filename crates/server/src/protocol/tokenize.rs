//! vLLM's `POST /tokenize` and `POST /detokenize` bodies.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::chat::ChatMessage;

/// Either `prompt` (completion form) or `messages` (chat form).
#[derive(Clone, Debug, Deserialize)]
pub struct TokenizeRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub messages: Option<Vec<ChatMessage>>,
    /// Default: true for `prompt`, false for `messages` (the template writes them).
    pub add_special_tokens: Option<bool>,
    pub add_generation_prompt: Option<bool>,
    pub continue_final_message: Option<bool>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    pub tools: Option<Value>,
    pub return_token_strs: Option<bool>,
}

impl crate::json::RequestBody for TokenizeRequest {
    const FIELDS: &'static [&'static str] = &[
        "model",
        "prompt",
        "messages",
        "add_special_tokens",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template_kwargs",
        "tools",
        "return_token_strs",
    ];
}

#[derive(Clone, Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    pub token_strs: Option<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct DetokenizeRequest {
    pub model: Option<String>,
    pub tokens: Vec<u32>,
}

impl crate::json::RequestBody for DetokenizeRequest {
    const FIELDS: &'static [&'static str] = &["model", "tokens"];
    const REQUIRED: &'static [&'static str] = &["tokens"];
}

#[derive(Clone, Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
