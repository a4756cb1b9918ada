//! One step's token budget: the tokens the step may carry, and within them the share prompt
//! tokens may take (the prefill cap while requests decode).
//!
//! Guarantees: a grant never exceeds what is left of either; a decode (one pending token) is
//! never held back by the prefill share, only by the token budget.

/// What is left of a step's budget while the scheduler fills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StepBudget {
    /// Tokens the step may still carry.
    pub(crate) tokens: usize,
    /// Prompt tokens (chunks of more than one pending token) the step may still carry.
    pub(crate) prefill: usize,
}

impl StepBudget {
    /// How many of `pending` tokens a request gets this step (0: none).
    pub(crate) fn grant(&self, pending: usize) -> usize {
        if pending <= 1 {
            return pending.min(self.tokens);
        }
        pending.min(self.tokens).min(self.prefill)
    }

    /// Takes the `n` tokens granted to a request with `pending` tokens off the budget.
    pub(crate) fn spend(&mut self, n: usize, pending: usize) {
        self.tokens -= n;
        if pending > 1 {
            self.prefill = self.prefill.saturating_sub(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_ignore_the_prefill_share_and_prompts_respect_it() {
        let mut b = StepBudget {
            tokens: 10,
            prefill: 3,
        };
        assert_eq!(b.grant(8), 3);
        b.spend(3, 8);
        assert_eq!(b.grant(5), 0, "the prefill share is spent");
        assert_eq!(b.grant(1), 1, "a decode still fits the token budget");
        b.spend(1, 1);
        assert_eq!(b.prefill, 0);
        assert_eq!(b.tokens, 6);
        let full = StepBudget {
            tokens: 4,
            prefill: usize::MAX,
        };
        assert_eq!(full.grant(9), 4);
    }
}
