//! `POST /v1/chat/completions` bodies.

use serde::Serialize;
use serde_json::{Map, Value};

use super::common::{request_with_sampling, Usage};
use super::completions::Skip;

/// One message as sent: an object with a string `role` and a `content` that is a string, a list
/// of text parts, or null (checked in `prompt`, so errors can name the exact field); other keys
/// (`name`, `tool_calls`, ...) are handed to the template unchanged.
pub type ChatMessage = Map<String, Value>;

request_with_sampling! {
    pub struct ChatRequest {
        pub messages: Vec<ChatMessage>,
        pub max_completion_tokens: Option<i64>,
        pub logprobs: Option<bool>,
        pub top_logprobs: Option<i64>,
        pub add_generation_prompt: Option<bool>,
        pub continue_final_message: Option<bool>,
        pub chat_template_kwargs: Option<Map<String, Value>>,
        pub tools: Option<Value>,
        pub tool_choice: Option<Value>,
        pub parallel_tool_calls: Option<bool>,
        pub response_format: Option<Value>,
        pub structured_outputs: Option<Value>,
        pub guided_json: Option<Value>,
        pub guided_regex: Option<String>,
        pub guided_choice: Option<Vec<String>>,
        pub guided_grammar: Option<String>,
    }
}

impl ChatRequest {
    pub fn structured(&self) -> crate::structured::StructuredFields {
        crate::structured::StructuredFields {
            response_format: self.response_format.clone(),
            structured_outputs: self.structured_outputs.clone(),
            guided_json: self.guided_json.clone(),
            guided_regex: self.guided_regex.clone(),
            guided_choice: self.guided_choice.clone(),
            guided_grammar: self.guided_grammar.clone(),
        }
    }
}

impl crate::json::RequestBody for ChatRequest {
    const FIELDS: &'static [&'static str] = Self::FIELD_NAMES;
    const REQUIRED: &'static [&'static str] = &["messages"];
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssistantMessage {
    pub role: &'static str,
    /// `null` when the answer is only tool calls.
    pub content: Option<String>,
    pub refusal: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The `<think>` part of a thinking model's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// A function call the model made (`message.tool_calls[i]`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text, as OpenAI sends them.
    pub arguments: String,
}

/// A streamed tool call (`delta.tool_calls[i]`): the first chunk of a call has its id, type
/// and name, later ones fragments of its arguments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallDelta {
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    pub function: FunctionCallDelta,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FunctionCallDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub arguments: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChoice {
    pub index: usize,
    pub message: AssistantMessage,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
    pub system_fingerprint: Option<String>,
}

/// `delta` of a streamed chunk: the role on a choice's first chunk, then content.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChunkChoice {
    pub index: usize,
    pub delta: ChatDelta,
    pub logprobs: Option<ChatLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// One streamed chunk (`object: "chat.completion.chunk"`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChunk {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    pub system_fingerprint: Option<String>,
    #[serde(skip_serializing_if = "Skip::skip")]
    pub usage: Skip<Usage>,
}
