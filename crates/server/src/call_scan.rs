//! [`CallScanner`]: reads one tool call object, `{"name": ..., "arguments": {...}}`, as its
//! text arrives, so the call can be streamed: the name as soon as its string closes, then the
//! arguments' JSON text fragment by fragment, exactly as the model wrote it.
//!
//! Guarantees: the fragments concatenate to the arguments value's text (a string-valued
//! `arguments` is decoded first, as OpenAI's clients expect a JSON text); nothing of the
//! arguments is reported before the name (fragments written before it are held); keys other
//! than `name` and `arguments` are skipped. Text that breaks the object's syntax ends the scan.

use serde_json::Value;

/// What one piece of text told about the call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallNews {
    /// The function name, on the piece that completed it.
    pub name: Option<String>,
    /// Arguments text to report (only once the name is known).
    pub arguments: String,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum At {
    /// Before the object's `{`.
    Open,
    /// Inside the object, where a key (or `}`) comes next.
    Key,
    InKey,
    Colon,
    /// Where a value starts.
    Value,
    InValue,
    /// After a value: `,` or `}`.
    Next,
    /// The object closed.
    Done,
    /// The text stopped being a JSON object.
    Broken,
}

/// End detection for one JSON value, fed a char at a time.
#[derive(Clone, Debug, Default)]
struct ValueEnd {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// A number or literal: it ends at the first char that cannot belong to it.
    scalar: bool,
    started: bool,
}

impl ValueEnd {
    /// `Some(true)`: `c` completed the value; `Some(false)`: the value ended before `c`
    /// (a scalar's delimiter); `None`: the value goes on.
    fn feed(&mut self, c: char) -> Option<bool> {
        if !self.started {
            self.started = true;
            match c {
                '{' | '[' => self.depth = 1,
                '"' => self.in_string = true,
                _ => self.scalar = true,
            }
            return None;
        }
        if self.scalar {
            return (matches!(c, ',' | '}' | ']') || c.is_whitespace()).then_some(false);
        }
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '"' {
                self.in_string = false;
                return (self.depth == 0).then_some(true);
            }
            return None;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth -= 1;
                if self.depth == 0 {
                    return Some(true);
                }
            }
            _ => {}
        }
        None
    }
}

#[derive(Clone, Debug)]
pub struct CallScanner {
    at: At,
    key: String,
    key_escaped: bool,
    value: String,
    end: ValueEnd,
    name: Option<String>,
    /// Arguments text written before the name.
    held_arguments: String,
}

impl Default for CallScanner {
    fn default() -> Self {
        CallScanner {
            at: At::Open,
            key: String::new(),
            key_escaped: false,
            value: String::new(),
            end: ValueEnd::default(),
            name: None,
            held_arguments: String::new(),
        }
    }
}

impl CallScanner {
    /// Whether the object closed (or broke off): later text is not part of it.
    pub fn finished(&self) -> bool {
        matches!(self.at, At::Done | At::Broken)
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Feeds `text`; returns how many bytes of it the scan consumed (up to and including the
    /// char that closed or broke the object; the rest follows it) and what they told.
    pub fn feed(&mut self, text: &str) -> (usize, CallNews) {
        let mut news = CallNews::default();
        for (at, c) in text.char_indices() {
            if self.finished() {
                return (at, news);
            }
            self.step(c, &mut news);
        }
        (text.len(), news)
    }

    fn step(&mut self, c: char, news: &mut CallNews) {
        match self.at {
            At::Open => match c {
                '{' => self.at = At::Key,
                c if c.is_whitespace() => {}
                _ => self.at = At::Broken,
            },
            At::Key => match c {
                '"' => {
                    self.key.clear();
                    self.key.push('"');
                    self.key_escaped = false;
                    self.at = At::InKey;
                }
                '}' => self.at = At::Done,
                c if c.is_whitespace() => {}
                _ => self.at = At::Broken,
            },
            At::InKey => {
                self.key.push(c);
                if self.key_escaped {
                    self.key_escaped = false;
                } else if c == '\\' {
                    self.key_escaped = true;
                } else if c == '"' {
                    self.at = At::Colon;
                }
            }
            At::Colon => match c {
                ':' => self.at = At::Value,
                c if c.is_whitespace() => {}
                _ => self.at = At::Broken,
            },
            At::Value => {
                if !c.is_whitespace() {
                    self.value.clear();
                    self.end = ValueEnd::default();
                    self.at = At::InValue;
                    self.value_char(c, news);
                }
            }
            At::InValue => self.value_char(c, news),
            At::Next => match c {
                ',' => self.at = At::Key,
                '}' => self.at = At::Done,
                c if c.is_whitespace() => {}
                _ => self.at = At::Broken,
            },
            At::Done | At::Broken => {}
        }
    }

    fn value_char(&mut self, c: char, news: &mut CallNews) {
        match self.end.feed(c) {
            None => {
                self.value.push(c);
                self.stream_arguments(&c.to_string(), news);
            }
            Some(true) => {
                self.value.push(c);
                self.stream_arguments(&c.to_string(), news);
                self.value_done(news);
                self.at = At::Next;
            }
            Some(false) => {
                self.value_done(news);
                self.at = At::Next;
                self.step(c, news);
            }
        }
    }

    fn key_is(&self, name: &str) -> bool {
        serde_json::from_str::<String>(&self.key).is_ok_and(|k| k == name)
    }

    /// Arguments written as JSON (not as a string holding JSON) are reported as they come.
    fn stream_arguments(&mut self, piece: &str, news: &mut CallNews) {
        if !self.key_is("arguments") || self.value.starts_with('"') {
            return;
        }
        if self.name.is_some() {
            news.arguments.push_str(piece);
        } else {
            self.held_arguments.push_str(piece);
        }
    }

    fn value_done(&mut self, news: &mut CallNews) {
        if self.key_is("name") && self.name.is_none() {
            if let Ok(Value::String(name)) = serde_json::from_str::<Value>(&self.value) {
                news.name = Some(name.clone());
                self.name = Some(name);
                news.arguments
                    .insert_str(0, &std::mem::take(&mut self.held_arguments));
            }
        } else if self.key_is("arguments") && self.value.starts_with('"') {
            let text = serde_json::from_str::<String>(&self.value).unwrap_or_default();
            if self.name.is_some() {
                news.arguments.push_str(&text);
            } else {
                self.held_arguments.push_str(&text);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `text` in pieces of `step` chars; returns (name, arguments, bytes consumed).
    fn scan(text: &str, step: usize) -> (Option<String>, String, usize) {
        let mut s = CallScanner::default();
        let (mut name, mut args, mut used) = (None, String::new(), 0);
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(step) {
            let piece: String = piece.iter().collect();
            let (n, news) = s.feed(&piece);
            used += n;
            name = name.or(news.name);
            args.push_str(&news.arguments);
            if s.finished() {
                break;
            }
        }
        (name, args, used)
    }

    #[test]
    fn arguments_stream_verbatim_in_any_split() {
        let call =
            r#"{"name": "get_weather", "arguments": {"city": "Pa\"ris}", "n": [1, {"a": 2}]}}"#;
        for step in [1, 2, 3, 7, 100] {
            let (name, args, used) = scan(&format!("{call}\n</tool_call>"), step);
            assert_eq!(name.as_deref(), Some("get_weather"));
            assert_eq!(args, r#"{"city": "Pa\"ris}", "n": [1, {"a": 2}]}"#);
            assert_eq!(used, call.len(), "step {step}");
        }
    }

    #[test]
    fn arguments_before_the_name_are_held_then_reported() {
        let (name, args, _) = scan(r#"{"arguments": {"x": 1}, "id": 7, "name": "f"}"#, 1);
        assert_eq!(name.as_deref(), Some("f"));
        assert_eq!(args, r#"{"x": 1}"#);
    }

    #[test]
    fn string_arguments_are_decoded() {
        let (name, args, _) = scan(r#"{"name": "f", "arguments": "{\"x\": 1}"}"#, 4);
        assert_eq!(name.as_deref(), Some("f"));
        assert_eq!(args, r#"{"x": 1}"#);
    }

    #[test]
    fn text_that_is_not_an_object_breaks_off() {
        let mut s = CallScanner::default();
        let (used, news) = s.feed("hello");
        assert!(s.finished() && news.name.is_none() && used == 1);
    }
}
