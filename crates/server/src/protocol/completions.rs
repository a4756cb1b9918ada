//! `POST /v1/completions` bodies.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{request_with_sampling, Usage};

/// `prompt`: text, token ids, or a list of either (one entry per prompt).
#[derive(Clone, Debug)]
pub enum PromptInput {
    Text(String),
    Ids(Vec<u32>),
    Texts(Vec<String>),
    IdLists(Vec<Vec<u32>>),
}

const PROMPT_SHAPES: &str =
    "`prompt` must be a string, a list of strings, a list of token ids, or a list of lists of token ids";

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items
        .iter()
        .map(|v| v.as_u64().and_then(|id| u32::try_from(id).ok()))
        .collect()
}

impl<'de> Deserialize<'de> for PromptInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let shape = || serde::de::Error::custom(PROMPT_SHAPES);
        let items = match Value::deserialize(d)? {
            Value::String(s) => return Ok(PromptInput::Text(s)),
            Value::Array(items) => items,
            _ => return Err(shape()),
        };
        match items.first() {
            None => Ok(PromptInput::Texts(Vec::new())),
            Some(Value::String(_)) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(shape()),
                })
                .collect::<Result<_, _>>()
                .map(PromptInput::Texts),
            Some(Value::Array(_)) => items
                .iter()
                .map(|v| {
                    v.as_array()
                        .and_then(|ids| token_ids(ids))
                        .ok_or_else(shape)
                })
                .collect::<Result<_, _>>()
                .map(PromptInput::IdLists),
            Some(_) => token_ids(&items).map(PromptInput::Ids).ok_or_else(shape),
        }
    }
}

request_with_sampling! {
    pub struct CompletionRequest {
        pub prompt: PromptInput,
        pub echo: Option<bool>,
        pub logprobs: Option<i64>,
        /// vLLM's extension: each prompt token's logprob and this many top alternatives.
        pub prompt_logprobs: Option<i64>,
        pub best_of: Option<i64>,
        pub suffix: Option<String>,
        pub response_format: Option<serde_json::Value>,
        pub structured_outputs: Option<serde_json::Value>,
        pub guided_json: Option<serde_json::Value>,
        pub guided_regex: Option<String>,
        pub guided_choice: Option<Vec<String>>,
        pub guided_grammar: Option<String>,
    }
}

impl CompletionRequest {
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

impl crate::json::RequestBody for CompletionRequest {
    const FIELDS: &'static [&'static str] = Self::FIELD_NAMES;
    const REQUIRED: &'static [&'static str] = &["prompt"];
}

/// The completions `logprobs` object (parallel lists, one entry per token).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<serde_json::Map<String, serde_json::Value>>>,
    pub text_offset: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionChoice {
    pub index: usize,
    pub text: String,
    pub logprobs: Option<CompletionLogprobs>,
    pub finish_reason: Option<&'static str>,
    /// vLLM's `prompt_logprobs`: `null` for the first prompt token, then per position the
    /// prompt token and the top alternatives by token id. Only when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Vec<Option<PromptTokenLogprobs>>>,
}

/// One prompt position in vLLM's `prompt_logprobs` shape: token id (as a JSON key) ->
/// `{logprob, rank, decoded_token}`.
pub type PromptTokenLogprobs = std::collections::BTreeMap<u32, PromptLogprobEntry>;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PromptLogprobEntry {
    pub logprob: f32,
    pub rank: usize,
    pub decoded_token: String,
}

/// A whole response (`object: "text_completion"`), and also one streamed chunk of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Skip::skip")]
    pub usage: Skip<Usage>,
}

/// A field that is left out, written as `null`, or written with a value (OpenAI streams omit
/// `usage` unless `include_usage`, then send it as `null` on every chunk but the last).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Skip<T> {
    #[default]
    Absent,
    Null,
    Value(T),
}

impl<T> Skip<T> {
    pub fn skip(&self) -> bool {
        matches!(self, Skip::Absent)
    }
}

impl<T: Serialize> Serialize for Skip<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Skip::Value(v) => v.serialize(s),
            _ => s.serialize_none(),
        }
    }
}
