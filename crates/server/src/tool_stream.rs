//! [`ToolStream`]: tool calls parsed out of an answer's text as it arrives, in the Hermes
//! (`<tool_call>{...}</tool_call>` blocks amid text) or the generic (`{"tool_calls": [...]}`
//! as the whole answer) format, as [`Piece`]s: content, then per call its start (id and name)
//! and its arguments' text in fragments.
//!
//! Guarantees: the same pieces come out however the text is split into pushes; content is
//! trimmed at both ends and around calls; a block that never names a function is content.

use crate::answer_stream::{Piece, Trimmed};
use crate::call_scan::CallScanner;
use crate::ids::new_id;
use crate::tools::ToolFormat;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// The generic format's opening, as literals with optional whitespace between them.
const GENERIC_LEAD: [&str; 4] = ["{", "\"tool_calls\"", ":", "["];

#[derive(Clone, Debug)]
enum State {
    /// Hermes: text, holding a possible start of `<tool_call>`.
    Text(String),
    /// A call object being read (Hermes after `<tool_call>`, generic inside the list).
    Call {
        scan: CallScanner,
        /// The text fed to `scan`, for a block that turns out not to be a call.
        raw: String,
        index: Option<usize>,
    },
    /// Hermes: after a call's object, up to `</tool_call>`.
    Close(String),
    /// Generic: the answer's start, while it may still open `{"tool_calls": [`.
    Lead(String),
    /// Generic: inside the list, between calls.
    Items,
    /// Generic: after the list; nothing more is read.
    Tail,
    /// Generic: the answer is plain content.
    Plain,
}

#[derive(Clone, Debug)]
pub struct ToolStream {
    format: ToolFormat,
    state: State,
    content: Trimmed,
    calls: usize,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> Self {
        let state = match format {
            ToolFormat::Hermes => State::Text(String::new()),
            ToolFormat::Generic => State::Lead(String::new()),
        };
        ToolStream {
            format,
            state,
            content: Trimmed::new(true),
            calls: 0,
        }
    }

    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        let mut rest = text.to_string();
        while let Some(next) = self.step(&rest, out) {
            rest = next;
        }
    }

    /// Handles `text` in the current state; `Some(rest)` when the state changed with text left.
    fn step(&mut self, text: &str, out: &mut Vec<Piece>) -> Option<String> {
        match &mut self.state {
            State::Text(pending) => {
                pending.push_str(text);
                if let Some(at) = pending.find(OPEN) {
                    let rest = pending[at + OPEN.len()..].to_string();
                    let before = pending[..at].to_string();
                    self.emit_content(&before, out);
                    self.state = new_call();
                    return Some(rest);
                }
                let keep = partial_suffix(pending, OPEN);
                let safe = pending[..pending.len() - keep].to_string();
                pending.drain(..pending.len() - keep);
                self.emit_content(&safe, out);
                None
            }
            State::Call { scan, raw, index } => {
                let (used, news) = scan.feed(text);
                raw.push_str(&text[..used]);
                if let Some(name) = news.name {
                    // Whitespace before a call is not content.
                    self.content.drop_held();
                    let i = self.calls;
                    self.calls += 1;
                    *index = Some(i);
                    out.push(Piece::CallStart {
                        index: i,
                        id: new_id("call_"),
                        name,
                    });
                }
                if let (Some(i), false) = (*index, news.arguments.is_empty()) {
                    out.push(Piece::CallArguments {
                        index: i,
                        text: news.arguments,
                    });
                }
                if !scan.finished() {
                    return None;
                }
                let rest = text[used..].to_string();
                let unnamed = index.is_none().then(|| std::mem::take(raw));
                self.state = match (self.format, unnamed) {
                    (ToolFormat::Hermes, Some(raw)) => {
                        self.emit_content(&format!("{OPEN}{raw}"), out);
                        State::Text(String::new())
                    }
                    (ToolFormat::Hermes, None) => State::Close(String::new()),
                    (ToolFormat::Generic, _) => State::Items,
                };
                Some(rest)
            }
            State::Close(pending) => {
                pending.push_str(text);
                let at = pending.find(CLOSE)?;
                let rest = pending[at + CLOSE.len()..].to_string();
                self.content.drop_leading();
                self.state = State::Text(String::new());
                Some(rest)
            }
            State::Lead(buf) => {
                buf.push_str(text);
                match lead_match(buf) {
                    Lead::Partial => None,
                    Lead::Full(used) => {
                        let rest = buf[used..].to_string();
                        self.state = State::Items;
                        Some(rest)
                    }
                    Lead::No => {
                        let all = std::mem::take(buf);
                        self.state = State::Plain;
                        Some(all)
                    }
                }
            }
            State::Items => {
                let start = text.find(|c: char| !c.is_whitespace() && c != ',')?;
                let rest = text[start..].to_string();
                self.state = if rest.starts_with('{') {
                    new_call()
                } else {
                    State::Tail
                };
                Some(rest)
            }
            State::Tail => None,
            State::Plain => {
                self.emit_content(text, out);
                None
            }
        }
    }

    /// Flushes what is held at the answer's end.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        match std::mem::replace(&mut self.state, State::Tail) {
            State::Text(pending) | State::Lead(pending) => self.emit_content(&pending, out),
            State::Call {
                raw, index: None, ..
            } if self.format == ToolFormat::Hermes => {
                self.emit_content(&format!("{OPEN}{raw}"), out)
            }
            _ => {}
        }
    }

    /// Whether any call was started.
    pub fn called(&self) -> bool {
        self.calls > 0
    }

    fn emit_content(&mut self, text: &str, out: &mut Vec<Piece>) {
        if let Some(t) = self.content.push(text) {
            out.push(Piece::Content(t));
        }
    }
}

fn new_call() -> State {
    State::Call {
        scan: CallScanner::default(),
        raw: String::new(),
        index: None,
    }
}

/// Bytes at the end of `text` that could begin `tag` (held until the next text decides).
pub(crate) fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

enum Lead {
    /// Bytes of the opening `{"tool_calls": [`.
    Full(usize),
    Partial,
    No,
}

/// Whether `buf` opens the generic call list.
fn lead_match(buf: &str) -> Lead {
    let mut pos = 0;
    for lit in GENERIC_LEAD {
        let skipped = buf[pos..].len() - buf[pos..].trim_start().len();
        pos += skipped;
        let rest = &buf[pos..];
        if rest.len() < lit.len() {
            return if lit.starts_with(rest) {
                Lead::Partial
            } else {
                Lead::No
            };
        }
        if !rest.starts_with(lit) {
            return Lead::No;
        }
        pos += lit.len();
    }
    Lead::Full(pos)
}
