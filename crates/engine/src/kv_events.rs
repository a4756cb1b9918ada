//! KV-cache events out of the engine thread, for routers that send a request to the replica
//! already holding its prefix.
//!
//! The engine records nothing until the first [`crate::EngineHandle::subscribe_kv_events`];
//! from then on, after each step, the step's events (`oxllm_kv::KvEvent`, merged) go out as
//! one [`KvEventBatch`] numbered by a sequence that grows by one per batch. Each subscription
//! also makes the engine publish a snapshot batch (`AllBlocksCleared`, then every cached block
//! as stored), so a new subscriber mirrors the whole cache and the others' mirrors stay as
//! they were. The channel is a
//! bounded broadcast ring ([`KV_EVENT_BUFFER`] batches): publishing never waits, a subscriber
//! that falls behind loses the oldest batches (its receiver reports how many, and the sequence
//! shows the gap), and with no subscriber the batch is dropped. So no consumer can slow or
//! stall the engine.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

pub use oxllm_kv::{BlockHash, KvEvent};
use tokio::sync::broadcast;

/// Batches a subscriber may fall behind by before it loses the oldest.
pub const KV_EVENT_BUFFER: usize = 1024;

/// One step's KV-cache events.
#[derive(Clone, Debug, PartialEq)]
pub struct KvEventBatch {
    /// Starts at 0 and grows by one per batch published; a jump means batches were missed.
    pub seq: u64,
    /// When the step ended, in seconds since the Unix epoch.
    pub ts: f64,
    pub events: Vec<KvEvent>,
}

/// What a subscriber reads batches from.
pub type KvEventReceiver = broadcast::Receiver<Arc<KvEventBatch>>;

/// The engine thread's end of the event channel.
pub(crate) struct KvEventPublisher {
    tx: broadcast::Sender<Arc<KvEventBatch>>,
    next_seq: u64,
}

impl KvEventPublisher {
    pub(crate) fn new() -> Self {
        let (tx, _) = broadcast::channel(KV_EVENT_BUFFER);
        KvEventPublisher { tx, next_seq: 0 }
    }

    /// A sender for handles to subscribe through.
    pub(crate) fn sender(&self) -> broadcast::Sender<Arc<KvEventBatch>> {
        self.tx.clone()
    }

    /// Sends `events` as the next batch, unless there are none. Never blocks.
    pub(crate) fn publish(&mut self, events: Vec<KvEvent>) {
        if events.is_empty() {
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let batch = KvEventBatch {
            seq: self.next_seq,
            ts,
            events,
        };
        self.next_seq += 1;
        // An error only means nobody listens right now: the batch is dropped, by design.
        let _ = self.tx.send(Arc::new(batch));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast::error::TryRecvError;

    fn stored(n: u128) -> Vec<KvEvent> {
        vec![KvEvent::BlockRemoved {
            block_hashes: vec![BlockHash(n)],
        }]
    }

    #[test]
    fn a_slow_subscriber_loses_the_oldest_batches_and_sees_the_gap() {
        let mut publisher = KvEventPublisher::new();
        // Nobody listens: dropped, but numbered.
        publisher.publish(stored(0));
        let mut rx = publisher.sender().subscribe();
        publisher.publish(Vec::new());
        for i in 0..KV_EVENT_BUFFER as u128 + 5 {
            publisher.publish(stored(i));
        }
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Lagged(5));
        let first = rx.try_recv().unwrap();
        // Batch 0 went to nobody and empty steps publish nothing, so 1..=5 were lost.
        assert_eq!(first.seq, 6);
        let mut last = first.seq;
        while let Ok(b) = rx.try_recv() {
            assert_eq!(b.seq, last + 1);
            last = b.seq;
        }
        assert_eq!(last, KV_EVENT_BUFFER as u64 + 5);
    }
}
