//! [`StopStrings`]: a request's stop strings, shared (one `Arc`) by all its choices and the
//! stop checkers that match them, so `n` choices never copy the list; and the bounds
//! ([`MAX_STOP_STRINGS`], [`MAX_STOP_BYTES`]) that keep matching cheap on the engine thread.
//!
//! The list carries its Aho-Corasick automaton ([`crate::stop_automaton`]), built when the list
//! is made (by the server, off the engine thread), so a [`crate::StopChecker::push`] costs at
//! most two steps per new byte (amortized) whatever the list; the bounds keep the automaton's
//! memory small (at most `MAX_STOP_BYTES + 1` nodes).

use std::ops::Deref;
use std::sync::Arc;

use crate::stop_automaton::StopAutomaton;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most stop strings one request may carry (OpenAI allows 4; lm-evaluation-harness sends a few).
pub const MAX_STOP_STRINGS: usize = 64;
/// Most bytes of all a request's stop strings together.
pub const MAX_STOP_BYTES: usize = 4096;

/// An immutable, cheaply cloned list of stop strings and its automaton.
#[derive(Clone, Debug)]
pub struct StopStrings(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    strings: Box<[String]>,
    automaton: StopAutomaton,
}

impl Default for StopStrings {
    fn default() -> Self {
        Vec::new().into()
    }
}

impl PartialEq for StopStrings {
    fn eq(&self, other: &Self) -> bool {
        self.0.strings == other.0.strings
    }
}

impl Eq for StopStrings {}

impl StopStrings {
    /// The matcher of these strings.
    pub(crate) fn automaton(&self) -> &StopAutomaton {
        &self.0.automaton
    }

    /// Bytes of all the strings together.
    pub fn total_bytes(&self) -> usize {
        self.0.strings.iter().map(String::len).sum()
    }

    /// Whether `other` is the same shared list (not a copy).
    pub fn shares_with(&self, other: &StopStrings) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Deref for StopStrings {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.0.strings
    }
}

impl From<Vec<String>> for StopStrings {
    fn from(v: Vec<String>) -> Self {
        let automaton = StopAutomaton::new(&v);
        StopStrings(Arc::new(Inner {
            strings: v.into(),
            automaton,
        }))
    }
}

impl Serialize for StopStrings {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.strings.serialize(s)
    }
}

impl<'de> Deserialize<'de> for StopStrings {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(StopStrings::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    #[test]
    fn clones_share_one_list() {
        let p = SamplingParams {
            stop: vec!["a".to_string(); 8].into(),
            ..SamplingParams::default()
        };
        let choices: Vec<SamplingParams> = (0..4).map(|_| p.clone()).collect();
        assert!(choices.iter().all(|c| c.stop.shares_with(&p.stop)));
        let copy: StopStrings = p.stop.to_vec().into();
        assert!(!copy.shares_with(&p.stop) && copy == p.stop);
        let json = serde_json::to_string(&p.stop).unwrap();
        assert_eq!(serde_json::from_str::<StopStrings>(&json).unwrap(), p.stop);
    }
}
