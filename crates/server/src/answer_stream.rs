//! [`AnswerStream`]: one chat answer shaped while it is generated, as [`Piece`]s: the
//! reasoning of templates that think, the content, and tool calls (start, then argument
//! fragments). A whole (non-streamed) answer is the fold of the same pieces
//! ([`crate::answer::AnswerShape::apply`]), so streamed deltas always concatenate to the
//! non-streamed message.
//!
//! Reasoning: the answer starts inside a `<think>` block when it opens one (a leading
//! `<think>` is dropped) or when the rendered prompt already opened it; everything up to
//! `</think>` is reasoning, trimmed at both ends; the rest is the answer, trimmed at its start.

use crate::reasoning::{CLOSE, OPEN};
use crate::tool_stream::{partial_suffix, ToolStream};
use crate::tools::ToolFormat;

/// One step of a shaped answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    CallArguments {
        index: usize,
        text: String,
    },
}

/// Text passed on with its leading whitespace dropped (until something else comes) and, when
/// `trim_end`, whitespace held until more text follows it (so a trailing run is never sent).
#[derive(Clone, Debug)]
pub struct Trimmed {
    drop_leading: bool,
    trim_end: bool,
    held: String,
}

impl Trimmed {
    pub fn new(trim_end: bool) -> Self {
        Trimmed {
            drop_leading: trim_end,
            trim_end,
            held: String::new(),
        }
    }

    /// Drops whitespace at the start of what comes next.
    pub fn drop_leading(&mut self) {
        self.drop_leading = true;
    }

    /// Forgets held whitespace (the text it followed ended).
    pub fn drop_held(&mut self) {
        self.held.clear();
    }

    /// What of `text` can be sent now.
    pub fn push(&mut self, text: &str) -> Option<String> {
        let mut text = text;
        if self.drop_leading {
            text = text.trim_start();
            if text.is_empty() {
                return None;
            }
            self.drop_leading = false;
        }
        if !self.trim_end {
            return (!text.is_empty()).then(|| text.to_string());
        }
        let body = text.trim_end().len();
        if body == 0 {
            self.held.push_str(text);
            return None;
        }
        let mut out = std::mem::take(&mut self.held);
        out.push_str(&text[..body]);
        self.held.push_str(&text[body..]);
        Some(out)
    }
}

#[derive(Clone, Debug)]
enum Think {
    /// The answer's start, while it may still open `<think>`.
    Undecided(String),
    /// Inside the reasoning, holding a possible start of `</think>`.
    Inside(String),
    /// The reasoning is over (or there was none).
    After,
}

#[derive(Clone, Debug)]
pub struct AnswerStream {
    think: Think,
    /// The prompt ended inside an open `<think>` block.
    opened_in_prompt: bool,
    reasoning: Trimmed,
    /// Whether the answer had a reasoning block (the whole message then has
    /// `reasoning_content`, maybe empty).
    thought: bool,
    content: Trimmed,
    tools: Option<ToolStream>,
}

impl AnswerStream {
    /// `reasoning`: the template thinks; `opened_in_prompt`: its prompt ends in `<think>`;
    /// `tools`: the call format, when calls are parsed.
    pub fn new(reasoning: bool, opened_in_prompt: bool, tools: Option<ToolFormat>) -> Self {
        AnswerStream {
            think: if reasoning {
                Think::Undecided(String::new())
            } else {
                Think::After
            },
            opened_in_prompt,
            reasoning: Trimmed::new(true),
            thought: false,
            content: Trimmed::new(false),
            tools: tools.map(ToolStream::new),
        }
    }

    pub fn thought(&self) -> bool {
        self.thought
    }

    pub fn called(&self) -> bool {
        self.tools.as_ref().is_some_and(ToolStream::called)
    }

    /// The pieces `text` (the next part of the answer) completes.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        let answer = self.reason(text, &mut out);
        self.answer(&answer, &mut out);
        out
    }

    /// The pieces held back until the answer ended.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        match std::mem::replace(&mut self.think, Think::After) {
            Think::Undecided(buf) if self.opened_in_prompt => {
                self.thought = true;
                self.emit_reasoning(
                    buf.trim_start().strip_prefix(OPEN).unwrap_or(&buf),
                    &mut out,
                );
            }
            Think::Undecided(buf) => self.answer(&buf, &mut out),
            Think::Inside(pending) => self.emit_reasoning(&pending, &mut out),
            Think::After => {}
        }
        if let Some(tools) = &mut self.tools {
            tools.finish(&mut out);
        }
        out
    }

    /// Takes the reasoning part of `text`; returns the answer part.
    fn reason(&mut self, text: &str, out: &mut Vec<Piece>) -> String {
        let mut text = text.to_string();
        loop {
            match &mut self.think {
                Think::After => return text,
                Think::Undecided(buf) => {
                    buf.push_str(&text);
                    let lead = buf.trim_start();
                    if let Some(rest) = lead.strip_prefix(OPEN) {
                        text = rest.to_string();
                    } else if OPEN.starts_with(lead) {
                        return String::new();
                    } else if self.opened_in_prompt {
                        text = std::mem::take(buf);
                    } else {
                        let all = std::mem::take(buf);
                        self.think = Think::After;
                        return all;
                    }
                    self.thought = true;
                    self.think = Think::Inside(String::new());
                }
                Think::Inside(pending) => {
                    pending.push_str(&text);
                    if let Some(at) = pending.find(CLOSE) {
                        let rest = pending[at + CLOSE.len()..].to_string();
                        let before = pending[..at].to_string();
                        self.think = Think::After;
                        self.emit_reasoning(&before, out);
                        self.content.drop_leading();
                        return rest;
                    }
                    let keep = partial_suffix(pending, CLOSE);
                    let safe: String = pending.drain(..pending.len() - keep).collect();
                    self.emit_reasoning(&safe, out);
                    return String::new();
                }
            }
        }
    }

    fn emit_reasoning(&mut self, text: &str, out: &mut Vec<Piece>) {
        if let Some(t) = self.reasoning.push(text) {
            out.push(Piece::Reasoning(t));
        }
    }

    fn answer(&mut self, text: &str, out: &mut Vec<Piece>) {
        if text.is_empty() {
            return;
        }
        match &mut self.tools {
            Some(tools) => tools.push(text, out),
            None => {
                if let Some(t) = self.content.push(text) {
                    out.push(Piece::Content(t));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pieces of `text` pushed `step` chars at a time, merged per kind for comparison.
    fn shaped(
        stream: AnswerStream,
        text: &str,
        step: usize,
    ) -> (String, String, Vec<(String, String)>) {
        let mut s = stream;
        let mut pieces = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for part in chars.chunks(step) {
            pieces.extend(s.push(&part.iter().collect::<String>()));
        }
        pieces.extend(s.finish());
        let (mut reasoning, mut content, mut calls) = (String::new(), String::new(), Vec::new());
        for p in pieces {
            match p {
                Piece::Reasoning(t) => reasoning.push_str(&t),
                Piece::Content(t) => content.push_str(&t),
                Piece::CallStart { index, name, .. } => {
                    assert_eq!(index, calls.len());
                    calls.push((name, String::new()));
                }
                Piece::CallArguments { index, text } => calls[index].1.push_str(&text),
            }
        }
        (reasoning, content, calls)
    }

    fn every_split(
        make: impl Fn() -> AnswerStream,
        text: &str,
    ) -> (String, String, Vec<(String, String)>) {
        let whole = shaped(make(), text, text.len().max(1));
        for step in 1..8 {
            assert_eq!(shaped(make(), text, step), whole, "step {step} of {text:?}");
        }
        whole
    }

    #[test]
    fn reasoning_splits_from_content() {
        let think = || AnswerStream::new(true, false, None);
        assert_eq!(
            every_split(think, "<think>\nLet me see.\n</think>\n\nParis. "),
            ("Let me see.".into(), "Paris. ".into(), vec![])
        );
        assert_eq!(
            every_split(think, "<think>cut off  "),
            ("cut off".into(), String::new(), vec![])
        );
        assert_eq!(
            every_split(think, "plain <think> answer"),
            (String::new(), "plain <think> answer".into(), vec![])
        );
        let opened = || AnswerStream::new(true, true, None);
        assert_eq!(
            every_split(opened, "hmm </think>ok"),
            ("hmm".into(), "ok".into(), vec![])
        );
    }

    #[test]
    fn hermes_calls_stream_name_then_arguments() {
        let hermes = || AnswerStream::new(true, false, Some(ToolFormat::Hermes));
        let text = "<think>need weather</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
        let (reasoning, content, calls) = every_split(hermes, text);
        assert_eq!(reasoning, "need weather");
        assert_eq!(content, "Let me check.");
        assert_eq!(
            calls,
            vec![
                ("get_weather".into(), "{\"city\": \"Paris\"}".into()),
                ("get_time".into(), "{}".into())
            ]
        );
        let plain = || AnswerStream::new(false, false, Some(ToolFormat::Hermes));
        let (_, content, calls) =
            every_split(plain, "a <tool_call>not json</tool_call> b <tool_ca");
        assert!(calls.is_empty());
        assert_eq!(content, "a <tool_call>not json</tool_call> b <tool_ca");
    }

    #[test]
    fn generic_calls_are_the_whole_answer_or_content() {
        let generic = || AnswerStream::new(false, false, Some(ToolFormat::Generic));
        let (_, content, calls) = every_split(
            generic,
            " {\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}}, {\"name\": \"g\", \"arguments\": {}}]}",
        );
        assert_eq!(content, "");
        assert_eq!(
            calls,
            vec![
                ("f".into(), "{\"x\": [1, 2]}".into()),
                ("g".into(), "{}".into())
            ]
        );
        let (_, content, calls) = every_split(generic, "{\"tool\": 1} is not a call");
        assert!(calls.is_empty());
        assert_eq!(content, "{\"tool\": 1} is not a call");
    }
}
