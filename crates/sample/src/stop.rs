//! [`StopChecker`]: stop strings over streamed text.
//!
//! Fed the text deltas of one request, it returns the text safe to emit now and holds back the
//! longest tail that could still be the start of a stop string. When a stop string appears
//! (possibly spread over many deltas), the output ends right before it and nothing after is ever
//! emitted. [`StopChecker::finish`] flushes the held-back tail when generation ends otherwise.
//!
//! Which stop wins: the occurrence that *completes* first in the text (smallest end), and among
//! those the one starting first. This is what a char-by-char stream would see, so the emitted
//! text and the stop found never depend on how the text was split into deltas.

/// What one [`StopChecker::push`] produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopOutcome {
    /// Text that may be sent to the client now (possibly empty).
    pub text: String,
    /// Index in the stop list of the stop string found; once set, the request is finished and
    /// later pushes return nothing.
    pub stopped: Option<usize>,
}

use crate::StopStrings;

/// Incremental stop-string matcher for one request.
#[derive(Clone, Debug)]
pub struct StopChecker {
    stops: StopStrings,
    /// Text received but not emitted: a proper prefix of some stop string.
    held: String,
    /// Bytes of the longest stop string.
    max_len: usize,
    stopped: Option<usize>,
}

impl StopChecker {
    /// A checker for `stops`; empty stop strings are ignored (they keep their index, so reported
    /// indices always refer to the list given here).
    pub fn new<S: AsRef<str>>(stops: &[S]) -> Self {
        let stops: Vec<String> = stops.iter().map(|s| s.as_ref().to_owned()).collect();
        Self::shared(stops.into())
    }

    /// A checker over a shared list (a request's choices each hold one, none copies the list).
    pub fn shared(stops: StopStrings) -> Self {
        let max_len = stops.iter().map(String::len).max().unwrap_or(0);
        StopChecker {
            stops,
            held: String::new(),
            max_len,
            stopped: None,
        }
    }

    /// Whether a stop string has been found.
    pub fn stopped(&self) -> Option<usize> {
        self.stopped
    }

    /// The text currently held back.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feeds the next text delta.
    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stopped.is_some() {
            return StopOutcome {
                text: String::new(),
                stopped: self.stopped,
            };
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.push_str(delta);

        // Earliest-completing occurrence of any stop string; ties go to the earliest start.
        let mut hit: Option<(usize, usize, usize)> = None; // (end, start, index)
        for (index, stop) in self.stops.iter().enumerate() {
            if stop.is_empty() {
                continue;
            }
            if let Some(start) = buf.find(stop.as_str()) {
                let cand = (start + stop.len(), start, index);
                if !matches!(hit, Some(h) if (h.0, h.1) <= (cand.0, cand.1)) {
                    hit = Some(cand);
                }
            }
        }
        if let Some((_, start, index)) = hit {
            buf.truncate(start);
            self.stopped = Some(index);
            return StopOutcome {
                text: buf,
                stopped: Some(index),
            };
        }

        let keep_from = self.hold_start(&buf);
        self.held = buf.split_off(keep_from);
        StopOutcome {
            text: buf,
            stopped: None,
        }
    }

    /// Ends the stream: returns the held-back text (nothing if a stop string was found).
    pub fn finish(&mut self) -> String {
        if self.stopped.is_some() {
            self.held.clear();
        }
        std::mem::take(&mut self.held)
    }

    /// Start of the longest suffix of `buf` that is a proper prefix of some stop string.
    fn hold_start(&self, buf: &str) -> usize {
        if self.max_len <= 1 {
            return buf.len();
        }
        let lowest = buf.len().saturating_sub(self.max_len - 1);
        let candidates = buf
            .char_indices()
            .map(|(i, _)| i)
            .skip_while(|&i| i < lowest);
        for i in candidates {
            let tail = &buf[i..];
            if self
                .stops
                .iter()
                .any(|s| s.len() > tail.len() && s.starts_with(tail))
            {
                return i;
            }
        }
        buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_a_possible_prefix_and_releases_it() {
        let mut c = StopChecker::new(&["END"]);
        let o = c.push("hello E");
        assert_eq!(o.text, "hello ");
        assert_eq!(c.held(), "E");
        let o = c.push("x");
        assert_eq!(o.text, "Ex");
        assert_eq!(c.finish(), "");
    }

    #[test]
    fn no_stops_passes_through() {
        let mut c = StopChecker::new::<&str>(&[]);
        assert_eq!(c.push("abc").text, "abc");
        assert_eq!(c.finish(), "");
    }
}
