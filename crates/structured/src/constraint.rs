//! [`Constraint`]: one request's grammar state; fills the token mask of its next step and
//! advances with each sampled token.
//!
//! Guarantees: end-of-sequence ids are allowed exactly where the grammar accepts (every EOS
//! id of the model, not only the first); a constraint set to start after a marker (the end of
//! a reasoning block) leaves the row unmasked until the marker's tokens were generated.

use std::sync::Arc;
use std::time::Instant;

use llguidance::Matcher;

use crate::StructuredError;

/// Time spent computing masks and advancing the grammar, for `oxllm bench`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MaskStats {
    pub masks: u64,
    pub seconds: f64,
    /// Sampled tokens the grammar consumed, and the seconds [`Constraint::advance`] took.
    pub advances: u64,
    pub advance_seconds: f64,
}

#[derive(Clone)]
pub struct Constraint {
    /// Boxed: the matcher is large and requests move through channels.
    matcher: Box<Matcher>,
    eos_ids: Arc<[u32]>,
    logits_vocab: usize,
    /// Tokens that must be generated before the grammar applies; empty once it does.
    start_after: Vec<u32>,
    /// How many of `start_after` the output currently ends with.
    marker_matched: usize,
    stats: MaskStats,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("active", &self.is_active())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Constraint {
    pub(crate) fn new(matcher: Matcher, eos_ids: Arc<[u32]>, logits_vocab: usize) -> Self {
        Constraint {
            matcher: Box::new(matcher),
            eos_ids,
            logits_vocab,
            start_after: Vec::new(),
            marker_matched: 0,
            stats: MaskStats::default(),
        }
    }

    /// The grammar applies only after `marker` (token ids, e.g. `</think>`) was generated.
    pub fn start_after(mut self, marker: Vec<u32>) -> Self {
        self.start_after = marker;
        self.marker_matched = 0;
        self
    }

    /// Whether the next token is constrained.
    pub fn is_active(&self) -> bool {
        self.start_after.is_empty()
    }

    /// Words of the mask [`Constraint::fill_mask`] fills.
    pub fn mask_words(&self) -> usize {
        self.logits_vocab.div_ceil(32)
    }

    pub fn stats(&self) -> MaskStats {
        self.stats
    }

    /// Writes the allowed tokens of the next step into `words` (bit `t % 32` of word `t / 32`).
    pub fn fill_mask(&mut self, words: &mut [u32]) -> Result<(), StructuredError> {
        let start = Instant::now();
        let vob = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| StructuredError::Matcher(e.to_string()))?;
        let bits = vob.as_slice();
        let n = bits.len().min(words.len());
        words[..n].copy_from_slice(&bits[..n]);
        words[n..].fill(0);
        if let Some(&last) = words.last() {
            // Bits past the vocabulary stay clear.
            let tail = self.logits_vocab % 32;
            if tail != 0 {
                let len = words.len();
                words[len - 1] = last & ((1u32 << tail) - 1);
            }
        }
        let accepts = self.eos_ids.iter().any(|&t| {
            words
                .get(t as usize / 32)
                .is_some_and(|w| w & (1 << (t % 32)) != 0)
        });
        for &t in self.eos_ids.iter() {
            if let Some(w) = words.get_mut(t as usize / 32) {
                if accepts {
                    *w |= 1 << (t % 32);
                } else {
                    *w &= !(1 << (t % 32));
                }
            }
        }
        self.stats.masks += 1;
        self.stats.seconds += start.elapsed().as_secs_f64();
        Ok(())
    }

    /// Advances past the sampled `token`. An end-of-sequence id ends the request, so the
    /// grammar does not need to see it.
    pub fn advance(&mut self, token: u32) -> Result<(), StructuredError> {
        if !self.is_active() {
            self.track_marker(token);
            return Ok(());
        }
        if self.eos_ids.contains(&token) {
            return Ok(());
        }
        let start = Instant::now();
        let consumed = self
            .matcher
            .consume_token(token)
            .map_err(|e| StructuredError::Matcher(e.to_string()));
        self.stats.advances += 1;
        self.stats.advance_seconds += start.elapsed().as_secs_f64();
        consumed
    }

    fn track_marker(&mut self, token: u32) {
        if self.start_after.get(self.marker_matched) == Some(&token) {
            self.marker_matched += 1;
        } else {
            self.marker_matched = usize::from(self.start_after.first() == Some(&token));
        }
        if self.marker_matched == self.start_after.len() {
            self.start_after.clear();
            self.marker_matched = 0;
        }
    }
}
