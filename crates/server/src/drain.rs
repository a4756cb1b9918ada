//! The drain state of a graceful stop, shared by every handler.
//!
//! Two one-way switches: `draining` (set on the first stop signal: `/health` answers 503 and new
//! generation requests get 503, so a load balancer stops sending while running requests finish)
//! and `expired` (set when the shutdown grace ends: every [`crate::generation::Run`] still in
//! flight ends at once, a stream with an error chunk and `[DONE]`, a whole request with a 503).
//! Neither switch ever turns back.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use crate::error::ApiError;

#[derive(Debug)]
pub struct Drain {
    draining: AtomicBool,
    expired: watch::Sender<bool>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            draining: AtomicBool::new(false),
            expired: watch::Sender::new(false),
        }
    }
}

impl Drain {
    /// Starts draining.
    pub fn start(&self) {
        self.draining.store(true, Ordering::Release);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Ends the grace: requests still in flight stop now.
    pub fn expire(&self) {
        self.start();
        self.expired.send_replace(true);
    }

    /// A watcher of the grace's end, for one request.
    pub fn watch_expiry(&self) -> GraceWatch {
        GraceWatch(self.expired.subscribe())
    }
}

/// Completes when the shutdown grace has ended.
#[derive(Debug)]
pub struct GraceWatch(watch::Receiver<bool>);

impl GraceWatch {
    pub fn has_expired(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits for the grace to end (forever, if the server state is gone without ending it).
    pub async fn expired(&mut self) {
        if self.0.wait_for(|&e| e).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What a request still running when the grace ends gets.
pub fn grace_expired() -> ApiError {
    ApiError::shutting_down(
        "the server is shutting down and this request did not finish within the shutdown grace period; retry it on another replica",
    )
}

/// What a request arriving while the server drains gets.
pub fn refused_while_draining() -> ApiError {
    ApiError::shutting_down(
        "the server is shutting down and takes no new requests; retry on another replica",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn expiry_wakes_watchers_and_implies_draining() {
        let d = Drain::default();
        let mut w = d.watch_expiry();
        assert!(!d.is_draining() && !w.has_expired());
        d.start();
        assert!(d.is_draining() && !w.has_expired());
        let waiter = tokio::spawn(async move {
            w.expired().await;
            w.has_expired()
        });
        d.expire();
        assert!(waiter.await.unwrap());
        assert!(d.watch_expiry().has_expired(), "a late watcher sees it too");
    }
}
