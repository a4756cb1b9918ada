//! Reasoning output of templates that think (Qwen3 and kin): the `<think>...</think>` part of
//! an answer goes to `reasoning_content`, the rest to `content` (split as it streams, by
//! [`crate::answer_stream`]).
//!
//! A template thinks when it speaks of `</think>`; `chat_template_kwargs: {"enable_thinking":
//! false}` turns it off (the template then closes an empty think block in the prompt itself).
//! A structured-output constraint starts after the `</think>` tokens were generated.

use serde_json::{Map, Value};

pub const OPEN: &str = "<think>";
pub const CLOSE: &str = "</think>";

/// Whether answers rendered by `template_source` with `kwargs` start with reasoning.
pub fn thinks(template_source: &str, kwargs: Option<&Map<String, Value>>) -> bool {
    let disabled = kwargs
        .and_then(|k| k.get("enable_thinking"))
        .is_some_and(|v| v == &Value::Bool(false));
    template_source.contains(CLOSE) && !disabled
}

/// Whether the rendered prompt ends inside an open `<think>` block (the template opened it
/// for the model, as some thinking templates do).
pub fn opened_in_prompt(prompt_tail: &str) -> bool {
    prompt_tail.trim_end().ends_with(OPEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enable_thinking_false_turns_it_off() {
        let tpl = "{% if enable_thinking %}<think>{% endif %}</think>";
        let mut k = Map::new();
        assert!(thinks(tpl, Some(&k)));
        k.insert("enable_thinking".into(), Value::Bool(false));
        assert!(!thinks(tpl, Some(&k)));
        assert!(!thinks("no reasoning here", None));
    }
}
