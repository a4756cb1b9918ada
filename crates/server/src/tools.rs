//! Tool calling: `tools`, `tool_choice` and `parallel_tool_calls` checked, the call format
//! chosen, `required` / named choices enforced by a grammar (the output is parsed back into
//! `tool_calls` by [`crate::tool_stream`]).
//!
//! Two formats:
//! - **Hermes** (Qwen2.5 / Qwen3 and other templates that render `tools` and `<tool_call>`):
//!   the tools go to the template as `apply_chat_template(tools=...)` does; a call is
//!   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
//! - **Generic** (templates that know no tools, such as SmolLM2's): the tools and the call
//!   format are described in the system message (prepended, or added to the first system
//!   message); a call is the whole answer as one JSON object
//!   `{"tool_calls": [{"name": ..., "arguments": {...}}]}`. Earlier calls in the history are
//!   rendered in the same shape, and `tool` messages keep their role.
//!
//! The format follows the template unless `--tool-call-parser` names one.

use oxllm_structured::{with_compact_json, ConstraintSpec};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::protocol::chat::ChatMessage;

/// How tool calls are written by the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Generic,
}

impl ToolFormat {
    /// `hermes` or `generic` (for `--tool-call-parser`).
    pub fn parse(name: &str) -> Option<ToolFormat> {
        match name {
            "hermes" => Some(ToolFormat::Hermes),
            "generic" => Some(ToolFormat::Generic),
            _ => None,
        }
    }

    /// The format a chat template speaks: Hermes when it renders `tools` and `<tool_call>`.
    pub fn of_template(source: &str) -> ToolFormat {
        if source.contains("tools") && source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else {
            ToolFormat::Generic
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Choice {
    Auto,
    Required,
    Named(String),
}

/// One request's tools, validated.
#[derive(Clone, Debug)]
pub struct ToolPlan {
    /// `(name, parameters schema)` per tool.
    tools: Vec<(String, Value)>,
    /// The `tools` list as sent (for the template).
    raw: Value,
    choice: Choice,
    parallel: bool,
    pub format: ToolFormat,
}

/// Checks `tools`, `tool_choice` and `parallel_tool_calls`; `None` when no tool may be called.
pub fn plan(
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
    parallel: Option<bool>,
    format: ToolFormat,
) -> Result<Option<ToolPlan>, ApiError> {
    let list = match tools {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(ApiError::invalid_param("tools", "`tools` must be a list")),
    };
    let mut parsed = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = |f: &str| format!("tools[{i}]{f}");
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::invalid_param(
                at(".type"),
                "a tool's `type` must be \"function\"",
            ));
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ApiError::invalid_param(at(".function"), "a tool needs a `function` object")
            })?;
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| {
                !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
            })
            .ok_or_else(|| {
                ApiError::invalid_param(
                    at(".function.name"),
                    "a function needs a `name` of letters, digits, `_`, `-` or `.`",
                )
            })?;
        if parsed.iter().any(|(n, _): &(String, Value)| n == name) {
            return Err(ApiError::invalid_param(
                at(".function.name"),
                format!("two tools are named `{name}`"),
            ));
        }
        if f.get("description")
            .is_some_and(|d| !d.is_string() && !d.is_null())
        {
            return Err(ApiError::invalid_param(
                at(".function.description"),
                "a function's `description` must be a string",
            ));
        }
        if f.get("strict")
            .is_some_and(|d| !d.is_boolean() && !d.is_null())
        {
            return Err(ApiError::invalid_param(
                at(".function.strict"),
                "a function's `strict` must be a boolean",
            ));
        }
        let params = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object"}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => {
                return Err(ApiError::invalid_param(
                    at(".function.parameters"),
                    "`parameters` must be a JSON schema object",
                ))
            }
        };
        parsed.push((name.to_string(), params));
    }
    let choice = match tool_choice {
        None | Some(Value::Null) => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    format!(
                        "`tool_choice` must be none, auto, required or a function, got {other}"
                    ),
                ))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid_param(
                        "tool_choice.function.name",
                        "a named `tool_choice` is {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    )
                })?;
            if !parsed.iter().any(|(n, _)| n == name) {
                return Err(ApiError::invalid_param(
                    "tool_choice.function.name",
                    format!("`tool_choice` names `{name}`, which is not in `tools`"),
                ));
            }
            Choice::Named(name.to_string())
        }
        Some(_) => {
            return Err(ApiError::invalid_param(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ))
        }
    };
    if parsed.is_empty() {
        return match choice {
            Choice::Auto => Ok(None),
            _ => Err(ApiError::invalid_param(
                "tool_choice",
                "`tool_choice` needs `tools`",
            )),
        };
    }
    Ok(Some(ToolPlan {
        tools: parsed,
        raw: Value::Array(list),
        choice,
        parallel: parallel.unwrap_or(true),
        format,
    }))
}

impl ToolPlan {
    /// The `tools` value for the template (Hermes), or `None` (generic: described in the
    /// system message instead).
    pub fn template_tools(&self) -> Option<Value> {
        (self.format == ToolFormat::Hermes).then(|| self.raw.clone())
    }

    /// Each tool's parameters as a schema to compile at admission, with the field it came
    /// from: a schema the engine cannot enforce is the client's error even under `auto`.
    pub fn parameter_schemas(&self) -> Vec<(String, ConstraintSpec)> {
        self.tools
            .iter()
            .enumerate()
            .map(|(i, (_, params))| {
                (
                    format!("tools[{i}].function.parameters"),
                    ConstraintSpec::JsonSchema(params.clone()),
                )
            })
            .collect()
    }

    /// The grammar that forces a call (`required` or a named function); `None` for `auto`.
    pub fn constraint(&self) -> Option<ConstraintSpec> {
        let allowed: Vec<&(String, Value)> = match &self.choice {
            Choice::Auto => return None,
            Choice::Required => self.tools.iter().collect(),
            Choice::Named(n) => self.tools.iter().filter(|(t, _)| t == n).collect(),
        };
        let call = json!({"anyOf": allowed.iter().map(|(name, params)| json!({
            "type": "object",
            "properties": {"name": {"const": name}, "arguments": params},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        })).collect::<Vec<_>>()});
        let max_calls = if self.parallel { 8 } else { 1 };
        Some(match self.format {
            ToolFormat::Generic => ConstraintSpec::JsonSchema(json!({
                "type": "object",
                "properties": {"tool_calls": {
                    "type": "array", "items": call, "minItems": 1, "maxItems": max_calls,
                }},
                "required": ["tool_calls"],
                "additionalProperties": false,
            })),
            ToolFormat::Hermes => {
                let call = with_compact_json(call);
                let one = format!("\"<tool_call>\\n\" %json {call} \"\\n</tool_call>\"");
                let more = if self.parallel { "(\"\\n\" call)*" } else { "" };
                ConstraintSpec::Lark(format!("start: call {more}\ncall: {one}\n"))
            }
        })
    }

    /// The messages as the template should see them: for the generic format, the tools and
    /// call format in the system message and earlier calls spelled as the model writes them.
    pub fn messages(&self, messages: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out = history(messages, self.format);
        if self.format == ToolFormat::Generic {
            let intro = self.generic_system_prompt();
            match out.first_mut() {
                Some(m) if m.get("role").and_then(Value::as_str) == Some("system") => {
                    let old = m
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    m.insert("content".into(), Value::String(format!("{old}\n\n{intro}")));
                }
                _ => {
                    let mut sys = Map::new();
                    sys.insert("role".into(), "system".into());
                    sys.insert("content".into(), Value::String(intro));
                    out.insert(0, sys);
                }
            }
        }
        out
    }

    fn generic_system_prompt(&self) -> String {
        let list: Vec<Value> = self
            .raw
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t.get("function").cloned())
                    .collect()
            })
            .unwrap_or_default();
        format!(
            "You can call these tools:\n{}\n\nTo call tools, answer with only a JSON object of the form \
             {{\"tool_calls\": [{{\"name\": \"<tool name>\", \"arguments\": {{<arguments>}}}}]}}. \
             Otherwise answer normally. Tool results come back in `tool` messages.",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        )
    }
}

/// The messages with earlier tool calls spelled for `format` (also when this request offers
/// no tools: a history with calls must still render).
pub fn history(messages: &[ChatMessage], format: ToolFormat) -> Vec<ChatMessage> {
    messages.iter().map(|m| rewrite_calls(m, format)).collect()
}

/// An assistant message's `tool_calls` as the template expects: arguments as objects
/// (Hermes templates serialise them), or the generic JSON answer as its content.
fn rewrite_calls(m: &ChatMessage, format: ToolFormat) -> ChatMessage {
    let mut m = m.clone();
    let Some(Value::Array(calls)) = m.get("tool_calls").cloned() else {
        return m;
    };
    let calls: Vec<Value> = calls
        .iter()
        .map(|c| {
            let f = c.get("function").unwrap_or(c);
            let args = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                }
                Some(v) => v.clone(),
                None => json!({}),
            };
            json!({"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args})
        })
        .collect();
    match format {
        ToolFormat::Hermes => {
            let wrapped: Vec<Value> = calls
                .into_iter()
                .map(|c| json!({"type": "function", "function": c}))
                .collect();
            m.insert("tool_calls".into(), Value::Array(wrapped));
        }
        ToolFormat::Generic => {
            m.remove("tool_calls");
            m.insert(
                "content".into(),
                Value::String(json!({"tool_calls": calls}).to_string()),
            );
        }
    }
    m
}
