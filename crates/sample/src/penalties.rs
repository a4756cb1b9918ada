//! Repetition (HF), presence and frequency (OpenAI) penalties, applied in place to one logits row.
//!
//! Output-token counts are kept incrementally: each call only counts the output ids appended since
//! the previous call, so a step costs O(new tokens + distinct seen tokens), not O(sequence). The
//! prompt's distinct ids (needed by the repetition penalty only) are collected once.
//!
//! Semantics, in this order:
//! - repetition penalty `r` over every distinct token of prompt and output: a logit `> 0` becomes
//!   `logit / r`, any other `logit * r`;
//! - frequency and presence penalties over output tokens only: `logit -= count * frequency
//!   + presence` for each token with `count > 0`.

use std::collections::HashMap;

use crate::{SampleError, SamplingParams};

/// Penalty parameters and the token bookkeeping they need for one request.
#[derive(Clone, Debug)]
pub(crate) struct Penalties {
    repetition: f32,
    presence: f32,
    frequency: f32,
    /// Occurrences of each output token among `output_ids[..counted]`.
    counts: HashMap<u32, u32>,
    counted: usize,
    /// Sorted distinct prompt ids, built for a prompt of length `prompt_len`.
    prompt_seen: Vec<u32>,
    prompt_len: Option<usize>,
}

fn check(token: u32, vocab_size: usize) -> Result<usize, SampleError> {
    let i = token as usize;
    if i < vocab_size {
        Ok(i)
    } else {
        Err(SampleError::TokenOutOfVocab { token, vocab_size })
    }
}

impl Penalties {
    pub(crate) fn new(params: &SamplingParams) -> Self {
        Penalties {
            repetition: params.repetition_penalty,
            presence: params.presence_penalty,
            frequency: params.frequency_penalty,
            counts: HashMap::new(),
            counted: 0,
            prompt_seen: Vec::new(),
            prompt_len: None,
        }
    }

    fn repetition_active(&self) -> bool {
        self.repetition != 1.0
    }

    fn additive_active(&self) -> bool {
        self.presence != 0.0 || self.frequency != 0.0
    }

    /// Whether any penalty changes logits.
    pub(crate) fn is_active(&self) -> bool {
        self.repetition_active() || self.additive_active()
    }

    /// Brings the counts up to date with `output_ids`, which must extend the ids seen by earlier
    /// calls (a shorter history, e.g. after a reset, is recounted from scratch).
    fn update(
        &mut self,
        prompt_ids: &[u32],
        output_ids: &[u32],
        vocab: usize,
    ) -> Result<(), SampleError> {
        if self.repetition_active() && self.prompt_len != Some(prompt_ids.len()) {
            let mut seen = Vec::with_capacity(prompt_ids.len());
            for &t in prompt_ids {
                check(t, vocab)?;
                seen.push(t);
            }
            seen.sort_unstable();
            seen.dedup();
            self.prompt_seen = seen;
            self.prompt_len = Some(prompt_ids.len());
        }
        if output_ids.len() < self.counted {
            self.counts.clear();
            self.counted = 0;
        }
        for &t in &output_ids[self.counted..] {
            check(t, vocab)?;
            *self.counts.entry(t).or_insert(0) += 1;
            self.counted += 1;
        }
        Ok(())
    }

    /// Applies the active penalties to `logits` in place.
    pub(crate) fn apply(
        &mut self,
        logits: &mut [f32],
        prompt_ids: &[u32],
        output_ids: &[u32],
    ) -> Result<(), SampleError> {
        if !self.is_active() {
            return Ok(());
        }
        self.update(prompt_ids, output_ids, logits.len())?;
        if self.repetition_active() {
            let r = self.repetition;
            let penalise = |l: &mut f32| *l = if *l > 0.0 { *l / r } else { *l * r };
            for &t in &self.prompt_seen {
                penalise(&mut logits[t as usize]);
            }
            for &t in self.counts.keys() {
                if self.prompt_seen.binary_search(&t).is_err() {
                    penalise(&mut logits[t as usize]);
                }
            }
        }
        if self.additive_active() {
            for (&t, &c) in &self.counts {
                logits[t as usize] -= c as f32 * self.frequency + self.presence;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pen(rep: f32, pres: f32, freq: f32) -> Penalties {
        Penalties::new(&SamplingParams {
            repetition_penalty: rep,
            presence_penalty: pres,
            frequency_penalty: freq,
            ..SamplingParams::default()
        })
    }

    #[test]
    fn repetition_divides_positive_multiplies_negative_once_per_token() {
        let mut p = pen(2.0, 0.0, 0.0);
        let mut l = vec![4.0, -4.0, 4.0, -1.0, 0.0];
        // token 0 in prompt twice and output once; token 1 in output; 4 in prompt; 2, 3 unseen.
        p.apply(&mut l, &[0, 0, 4], &[0, 1]).unwrap();
        assert_eq!(l, vec![2.0, -8.0, 4.0, -1.0, 0.0]);
    }

    #[test]
    fn presence_and_frequency_over_output_only() {
        let mut p = pen(1.0, 0.5, 0.25);
        let mut l = vec![1.0; 4];
        // token 3 is only in the prompt: untouched. token 0 x3, token 1 x1.
        p.apply(&mut l, &[3, 3], &[0, 1, 0, 0]).unwrap();
        assert_eq!(l, vec![1.0 - 0.75 - 0.5, 1.0 - 0.25 - 0.5, 1.0, 1.0]);
    }

    #[test]
    fn counts_are_incremental_and_reset_on_shorter_history() {
        let mut p = pen(1.0, 0.0, 1.0);
        let mut l = vec![0.0; 3];
        p.apply(&mut l, &[], &[2]).unwrap();
        assert_eq!(l, vec![0.0, 0.0, -1.0]);
        let mut l = vec![0.0; 3];
        p.apply(&mut l, &[], &[2, 2, 1]).unwrap();
        assert_eq!(l, vec![0.0, -1.0, -2.0]);
        assert_eq!(p.counted, 3);
        let mut l = vec![0.0; 3];
        p.apply(&mut l, &[], &[0]).unwrap();
        assert_eq!(l, vec![-1.0, 0.0, 0.0]);
    }

    #[test]
    fn out_of_vocab_ids_are_errors() {
        let mut p = pen(1.5, 0.0, 0.0);
        let mut l = vec![0.0; 3];
        assert_eq!(
            p.apply(&mut l, &[7], &[]),
            Err(SampleError::TokenOutOfVocab {
                token: 7,
                vocab_size: 3
            })
        );
        let mut p = pen(1.0, 1.0, 0.0);
        assert!(p.apply(&mut l, &[], &[3]).is_err());
    }
}
