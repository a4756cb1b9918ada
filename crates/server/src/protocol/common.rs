//! Request fields and response pieces shared by `/v1/completions` and `/v1/chat/completions`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `stop`: one string or a list.
#[derive(Clone, Debug)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

impl StopInput {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopInput::One(s) => vec![s],
            StopInput::Many(v) => v,
        }
    }
}

impl<'de> Deserialize<'de> for StopInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::String(s) => Ok(StopInput::One(s)),
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    _ => Err(serde::de::Error::custom(
                        "`stop` must be a string or a list of strings",
                    )),
                })
                .collect::<Result<_, _>>()
                .map(StopInput::Many),
            _ => Err(serde::de::Error::custom(
                "`stop` must be a string or a list of strings",
            )),
        }
    }
}

/// `stream_options`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// The sampling and stopping fields both endpoints accept (OpenAI's plus vLLM's extensions).
/// Numbers are parsed wide so an out-of-range value gets a range error naming the field rather
/// than a type error.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SamplingFields {
    pub model: Option<String>,
    pub n: Option<i64>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<StopInput>,
    pub stop_token_ids: Option<Vec<u32>>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub ignore_eos: Option<bool>,
    pub logit_bias: Option<Map<String, Value>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
}

/// Declares a request body with the [`SamplingFields`] inline (not `#[serde(flatten)]`, which
/// would hide the path of a mistyped field) plus its own fields, and `sampling()` to read them.
macro_rules! request_with_sampling {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $f:ident : $t:ty,)* }) => {
        $(#[$m])*
        #[derive(Clone, Debug, serde::Deserialize)]
        pub struct $name {
            pub model: Option<String>,
            pub n: Option<i64>,
            pub max_tokens: Option<i64>,
            pub temperature: Option<f64>,
            pub top_p: Option<f64>,
            pub top_k: Option<i64>,
            pub min_p: Option<f64>,
            pub seed: Option<i64>,
            pub stop: Option<$crate::protocol::common::StopInput>,
            pub stop_token_ids: Option<Vec<u32>>,
            pub presence_penalty: Option<f64>,
            pub frequency_penalty: Option<f64>,
            pub repetition_penalty: Option<f64>,
            pub ignore_eos: Option<bool>,
            pub logit_bias: Option<serde_json::Map<String, serde_json::Value>>,
            pub stream: Option<bool>,
            pub stream_options: Option<$crate::protocol::common::StreamOptions>,
            $($(#[$fm])* pub $f: $t,)*
        }

        impl $name {
            /// Every top-level field, for [`crate::json::RequestBody::FIELDS`].
            pub const FIELD_NAMES: &'static [&'static str] = &[
                "model", "n", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
                "stop", "stop_token_ids", "presence_penalty", "frequency_penalty",
                "repetition_penalty", "ignore_eos", "logit_bias", "stream", "stream_options",
                $(stringify!($f),)*
            ];

            pub fn sampling(&self) -> $crate::protocol::common::SamplingFields {
                $crate::protocol::common::SamplingFields {
                    model: self.model.clone(),
                    n: self.n,
                    max_tokens: self.max_tokens,
                    temperature: self.temperature,
                    top_p: self.top_p,
                    top_k: self.top_k,
                    min_p: self.min_p,
                    seed: self.seed,
                    stop: self.stop.clone(),
                    stop_token_ids: self.stop_token_ids.clone(),
                    presence_penalty: self.presence_penalty,
                    frequency_penalty: self.frequency_penalty,
                    repetition_penalty: self.repetition_penalty,
                    ignore_eos: self.ignore_eos,
                    logit_bias: self.logit_bias.clone(),
                    stream: self.stream,
                    stream_options: self.stream_options.clone(),
                }
            }
        }
    };
}
pub(crate) use request_with_sampling;

/// `usage`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
    pub prompt_tokens_details: PromptTokensDetails,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PromptTokensDetails {
    pub cached_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize, cached_tokens: usize) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens },
        }
    }
}
