//! Admission control: a request is refused (503) when accepting it would leave more than
//! `max_waiting` engine requests waiting for a slot.
//!
//! The waiting count is estimated as the larger of the engine's last published count and the
//! requests in flight beyond `max_num_seqs`, so a burst that arrives before the engine thread
//! has published anything is still counted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::ApiError;

#[derive(Debug, Default)]
pub struct Admission {
    in_flight: Arc<AtomicUsize>,
}

/// Holds `n` admitted engine requests; dropping it releases them.
#[derive(Debug)]
pub struct AdmitGuard {
    in_flight: Arc<AtomicUsize>,
    n: usize,
}

impl Drop for AdmitGuard {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(self.n, Ordering::AcqRel);
    }
}

impl Admission {
    /// Engine requests admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Admits `n` engine requests or answers 503.
    pub fn try_admit(
        &self,
        n: usize,
        engine_waiting: usize,
        max_num_seqs: usize,
        max_waiting: usize,
    ) -> Result<AdmitGuard, ApiError> {
        let mut cur = self.in_flight.load(Ordering::Acquire);
        loop {
            let after = cur.saturating_add(n);
            let waiting = engine_waiting.max(after.saturating_sub(max_num_seqs));
            if waiting > max_waiting {
                return Err(ApiError::overloaded(format!(
                    "the server is busy: {waiting} requests would be waiting (limit {max_waiting}); retry later"
                )));
            }
            match self
                .in_flight
                .compare_exchange(cur, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(AdmitGuard {
                        in_flight: Arc::clone(&self.in_flight),
                        n,
                    })
                }
                Err(actual) => cur = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_waiting_limit_and_releases_on_drop() {
        let a = Admission::default();
        let g1 = a.try_admit(2, 0, 2, 1).unwrap();
        let g2 = a.try_admit(1, 0, 2, 1).unwrap();
        let e = a.try_admit(1, 0, 2, 1).unwrap_err();
        assert_eq!(e.status.as_u16(), 503);
        assert_eq!(e.retry_after, Some(1));
        assert_eq!(a.in_flight(), 3);
        drop(g1);
        assert_eq!(a.in_flight(), 1);
        let _g3 = a.try_admit(2, 0, 2, 1).unwrap();
        drop(g2);
        assert!(a.try_admit(1, 5, 64, 4).is_err(), "engine says 5 wait");
    }
}
