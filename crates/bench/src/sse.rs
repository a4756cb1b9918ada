//! Server-sent events: an incremental parser fed with whatever bytes the socket delivers.
//!
//! Lines end with `\n` or `\r\n`; `data:` lines (one optional space after the colon) accumulate
//! into an event that a blank line dispatches; `event:` names it; `:` lines are comments. Servers
//! that report a mid-stream failure with a bare `error: {...}` line (llama.cpp does) get an event
//! named `error`. Bytes split anywhere, even inside a UTF-8 character, are handled.

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

#[derive(Default)]
pub struct SseParser {
    buf: Vec<u8>,
    cur: SseEvent,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(off) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + off;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            self.line(&line, &mut out);
        }
        self.buf.drain(..start);
        out
    }

    /// The end of the stream: an event left without its blank line is still returned.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest).into_owned();
            let mut out = Vec::new();
            self.line(line.trim_end_matches('\r'), &mut out);
            if let Some(e) = out.pop() {
                return Some(e);
            }
        }
        self.take()
    }

    fn take(&mut self) -> Option<SseEvent> {
        if !self.has_data {
            self.cur = SseEvent::default();
            return None;
        }
        self.has_data = false;
        Some(std::mem::take(&mut self.cur))
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if let Some(e) = self.take() {
                out.push(e);
            }
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.cur.data.push('\n');
                }
                self.cur.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.cur.event = Some(value.to_string()),
            "error" => {
                // Non-standard, self-contained: dispatch at once.
                out.push(SseEvent {
                    event: Some("error".into()),
                    data: value.to_string(),
                });
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    /// Chunks as recorded from an OpenAI-style completions stream.
    const RECORDED: &str = "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\" Paris\",\"finish_reason\":null}]}\n\n\
data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\". \u{00e9}t\u{00e9}\",\"finish_reason\":\"length\"}]}\n\n\
data: {\"id\":\"cmpl-1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn whole_stream() {
        let mut p = SseParser::new();
        let ev = p.feed(RECORDED.as_bytes());
        assert_eq!(ev.len(), 4);
        assert_eq!(ev[3].data, "[DONE]");
        assert!(ev[1].data.contains("été"));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn split_at_every_byte_gives_the_same_events() {
        let whole = SseParser::new().feed(RECORDED.as_bytes());
        for split in 1..RECORDED.len() {
            let bytes = RECORDED.as_bytes();
            let mut p = SseParser::new();
            let mut ev = p.feed(&bytes[..split]);
            ev.extend(p.feed(&bytes[split..]));
            assert_eq!(ev, whole, "split at {split}");
        }
        // One byte at a time.
        let mut p = SseParser::new();
        let ev: Vec<_> = RECORDED.bytes().flat_map(|b| p.feed(&[b])).collect();
        assert_eq!(ev, whole);
    }

    #[test]
    fn crlf_comments_multiline_and_named_events() {
        let s = ": keep-alive\r\n\r\nevent: msg\r\ndata: a\r\ndata:b\r\n\r\nid: 7\ndata: c\n\n";
        let ev = SseParser::new().feed(s.as_bytes());
        assert_eq!(data(&ev), ["a\nb", "c"]);
        assert_eq!(ev[0].event.as_deref(), Some("msg"));
        assert_eq!(ev[1].event, None);
    }

    #[test]
    fn error_lines_and_unterminated_last_event() {
        let mut p = SseParser::new();
        let ev = p.feed(b"error: {\"message\":\"boom\"}\n\ndata: [DONE]");
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].event.as_deref(), Some("error"));
        assert_eq!(p.finish().map(|e| e.data), Some("[DONE]".to_string()));
    }
}
