//! One step's token budget: the tokens the step may carry, and within them the share prompt
//! tokens may take while the step carries a decode (the prefill cap).
//!
//! Guarantees: a grant never exceeds the tokens left; a step that carries a decode (one pending
//! token) carries at most `cap` prompt tokens (chunks of more than one pending token), whether
//! the decode was running when the step began or is a resumed request admitted during it. A
//! decode is held back only when the step already carries more than `cap` prompt tokens, which
//! can happen only if no request was decoding when the step began.

/// What is left of a step's budget while the scheduler fills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StepBudget {
    /// Tokens the step may still carry.
    tokens: usize,
    /// Prompt tokens a step carrying a decode may hold (`None`: unbounded).
    cap: Option<usize>,
    /// Prompt tokens granted so far this step.
    prefill_spent: usize,
    /// Whether the step carries a decode (or one was running when it began).
    decoding: bool,
}

impl StepBudget {
    /// A step of `tokens` tokens; `decoding` says whether a running request waits for its next
    /// token as the step begins.
    pub(crate) fn new(tokens: usize, cap: Option<usize>, decoding: bool) -> Self {
        Self {
            tokens,
            cap,
            prefill_spent: 0,
            decoding,
        }
    }

    /// Tokens the step may still carry.
    pub(crate) fn tokens_left(&self) -> usize {
        self.tokens
    }

    /// How many of `pending` tokens a request gets this step (0: none).
    pub(crate) fn grant(&self, pending: usize) -> usize {
        let cap = self.cap.unwrap_or(usize::MAX);
        if pending <= 1 {
            if self.prefill_spent > cap {
                return 0;
            }
            return pending.min(self.tokens);
        }
        let share = if self.decoding {
            cap.saturating_sub(self.prefill_spent)
        } else {
            usize::MAX
        };
        pending.min(self.tokens).min(share)
    }

    /// Takes the `n` tokens granted to a request with `pending` tokens off the budget.
    pub(crate) fn spend(&mut self, n: usize, pending: usize) {
        self.tokens -= n;
        if pending > 1 {
            self.prefill_spent += n;
        } else if n > 0 {
            self.decoding = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_ignore_the_prefill_share_and_prompts_respect_it() {
        let mut b = StepBudget::new(10, Some(3), true);
        assert_eq!(b.grant(8), 3);
        b.spend(3, 8);
        assert_eq!(b.grant(5), 0, "the prefill share is spent");
        assert_eq!(b.grant(1), 1, "a decode still fits the token budget");
        b.spend(1, 1);
        assert_eq!(b.tokens_left(), 6);
        let full = StepBudget::new(4, None, true);
        assert_eq!(full.grant(9), 4);
    }

    #[test]
    fn a_decode_admitted_mid_step_bounds_the_prompt_tokens() {
        // No decode at the start: prompts take what the token budget allows...
        let mut b = StepBudget::new(10, Some(3), false);
        assert_eq!(b.grant(4), 4);
        b.spend(4, 4);
        // ...and then a resumed request with one pending token cannot join this step.
        assert_eq!(b.grant(1), 0, "4 prompt tokens are over the cap of 3");
        // Within the cap, it joins and closes the share.
        let mut b = StepBudget::new(10, Some(3), false);
        b.spend(2, 2);
        assert_eq!(b.grant(1), 1);
        b.spend(1, 1);
        assert_eq!(b.grant(5), 1, "one prompt token left of the cap");
    }
}
