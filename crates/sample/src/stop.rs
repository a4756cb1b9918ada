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

use crate::stop_automaton::ROOT;
use crate::StopStrings;

/// Incremental stop-string matcher for one request.
#[derive(Clone, Debug)]
pub struct StopChecker {
    stops: StopStrings,
    /// The list's automaton state after all text pushed so far.
    state: u32,
    /// Text received but not emitted: the automaton's current prefix (a proper prefix of some
    /// stop string).
    held: String,
    /// Automaton steps taken so far (the matching work; at most twice the bytes pushed).
    steps: u64,
    stopped: Option<usize>,
}

impl StopChecker {
    /// A checker for `stops`; empty stop strings are ignored (they keep their index, so reported
    /// indices always refer to the list given here).
    pub fn new<S: AsRef<str>>(stops: &[S]) -> Self {
        let stops: Vec<String> = stops.iter().map(|s| s.as_ref().to_owned()).collect();
        Self::shared(stops.into())
    }

    /// A checker over a shared list (a request's choices each hold one, none copies the list
    /// or its automaton).
    pub fn shared(stops: StopStrings) -> Self {
        StopChecker {
            stops,
            state: ROOT,
            held: String::new(),
            steps: 0,
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

    /// Matching work done so far: automaton steps, at most twice the bytes pushed whatever the
    /// stop list (the engine counts it, so a test can check that bound through the server).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Feeds the next text delta. Only the delta's bytes are scanned; the held text is not
    /// looked at again.
    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stopped.is_some() {
            return StopOutcome {
                text: String::new(),
                stopped: self.stopped,
            };
        }
        let automaton = self.stops.automaton();
        let mut buf = std::mem::take(&mut self.held);
        let before = buf.len();
        for (i, b) in delta.bytes().enumerate() {
            self.state = automaton.step(self.state, b, &mut self.steps);
            // The first byte that completes a stop ends the earliest-completing occurrence;
            // the longest stop ending there is the one starting first.
            if let Some((len, index)) = automaton.found(self.state) {
                let start = before + i + 1 - len;
                buf.push_str(&delta[..i + 1]);
                buf.truncate(start);
                self.stopped = Some(index);
                return StopOutcome {
                    text: buf,
                    stopped: Some(index),
                };
            }
        }
        buf.push_str(delta);
        let keep_from = buf.len() - automaton.depth(self.state);
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
