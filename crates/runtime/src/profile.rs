//! Per-op times of one profiled replay (`Backend::replay_profiled`).

use std::time::Duration;

/// Time spent per op name in one profiled replay, in first-seen order.
#[derive(Clone, Debug, Default)]
pub struct OpProfile {
    pub ops: Vec<(&'static str, usize, Duration)>,
}

impl OpProfile {
    pub(crate) fn add(&mut self, name: &'static str, d: Duration) {
        match self.ops.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, count, total)) => {
                *count += 1;
                *total += d;
            }
            None => self.ops.push((name, 1, d)),
        }
    }

    pub fn total(&self) -> Duration {
        self.ops.iter().map(|(_, _, d)| *d).sum()
    }
}
