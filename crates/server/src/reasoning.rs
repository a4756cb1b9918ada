//! Reasoning output of templates that think (Qwen3 and kin): the `<think>...</think>` part of
//! an answer goes to `reasoning_content`, the rest to `content`.
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

/// `(reasoning, content)`: everything up to `</think>` is reasoning (an opening `<think>` the
/// model wrote is dropped; the template may have written it in the prompt); an answer that
/// opened `<think>` and was cut before `</think>` is all reasoning; one with neither tag is
/// all content.
pub fn split(text: &str) -> (Option<String>, String) {
    let body = text.trim_start();
    let opened = body.starts_with(OPEN);
    let body = body.strip_prefix(OPEN).unwrap_or(body);
    match body.find(CLOSE) {
        Some(at) => (
            Some(body[..at].trim().to_string()),
            body[at + CLOSE.len()..].trim_start().to_string(),
        ),
        None if opened => (Some(body.trim().to_string()), String::new()),
        None => (None, text.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_reasoning_from_content() {
        assert_eq!(
            split("<think>\nLet me see.\n</think>\n\nParis."),
            (Some("Let me see.".into()), "Paris.".into())
        );
        assert_eq!(split("hmm</think>ok"), (Some("hmm".into()), "ok".into()));
        assert_eq!(
            split("<think>cut off"),
            (Some("cut off".into()), String::new())
        );
        assert_eq!(split("plain answer"), (None, "plain answer".into()));
    }

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
