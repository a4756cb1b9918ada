//! KV-cache events: what changes in the prefix cache's index, in vLLM's event vocabulary
//! (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`), so a router can mirror which prefixes a
//! replica holds and send a request where its prefix is warm.
//!
//! Guarantees, when recording is on (off by default: then nothing is kept and nothing costs):
//! - replaying the events in order on an empty set of hashes gives exactly the hashes the
//!   pool's index holds (a block is "stored" when it becomes findable by hash, "removed" when
//!   it is evicted for reuse, and all are "cleared" on a prefix-cache reset; freeing a block
//!   removes nothing, since it stays findable until reused);
//! - a `BlockStored` lists consecutive blocks of one chain: each block's parent is the previous
//!   one's hash, the first's is `parent_block_hash` (None: the first block of a sequence), and
//!   `token_ids` holds `block_size` tokens per block, in order.

use oxllm_core::TokenId;

use crate::hash::BlockHash;

/// One change to the set of cached block hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Blocks that became findable, in chain order.
    BlockStored {
        block_hashes: Vec<BlockHash>,
        /// The parent of the first block; None when it starts a sequence.
        parent_block_hash: Option<BlockHash>,
        /// `block_size` tokens per block.
        token_ids: Vec<TokenId>,
        block_size: usize,
        /// The extra key the blocks were hashed with (None today).
        extra: Option<u64>,
    },
    /// Blocks evicted from the cache.
    BlockRemoved { block_hashes: Vec<BlockHash> },
    /// Every cached block forgotten.
    AllBlocksCleared,
}

/// The pool's pending events; merges neighbours so a step's changes stay few events.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventLog {
    enabled: bool,
    events: Vec<KvEvent>,
}

impl EventLog {
    pub(crate) fn enable(&mut self) {
        self.enabled = true;
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// A block became findable as `hash`.
    pub(crate) fn stored(
        &mut self,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[TokenId],
        extra: Option<u64>,
    ) {
        if !self.enabled {
            return;
        }
        // Extend the last event when this block continues its chain.
        if let Some(KvEvent::BlockStored {
            block_hashes,
            token_ids,
            block_size,
            extra: last_extra,
            ..
        }) = self.events.last_mut()
        {
            if parent.is_some()
                && block_hashes.last().copied() == parent
                && *last_extra == extra
                && *block_size == tokens.len()
            {
                block_hashes.push(hash);
                token_ids.extend_from_slice(tokens);
                return;
            }
        }
        self.events.push(KvEvent::BlockStored {
            block_hashes: vec![hash],
            parent_block_hash: parent,
            token_ids: tokens.to_vec(),
            block_size: tokens.len(),
            extra,
        });
    }

    /// The block cached as `hash` was evicted.
    pub(crate) fn removed(&mut self, hash: BlockHash) {
        if !self.enabled {
            return;
        }
        if let Some(KvEvent::BlockRemoved { block_hashes }) = self.events.last_mut() {
            block_hashes.push(hash);
            return;
        }
        self.events.push(KvEvent::BlockRemoved {
            block_hashes: vec![hash],
        });
    }

    pub(crate) fn cleared(&mut self) {
        if self.enabled {
            self.events.push(KvEvent::AllBlocksCleared);
        }
    }

    /// The events since the last call, oldest first.
    pub(crate) fn take(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_log_keeps_nothing() {
        let mut log = EventLog::default();
        log.stored(BlockHash(1), None, &[1, 2], None);
        log.removed(BlockHash(1));
        log.cleared();
        assert!(log.take().is_empty());
    }

    #[test]
    fn chains_merge_and_breaks_start_a_new_event() {
        let mut log = EventLog::default();
        log.enable();
        log.stored(BlockHash(1), None, &[1, 2], None);
        log.stored(BlockHash(2), Some(BlockHash(1)), &[3, 4], None);
        // Not a child of the last block: a new event.
        log.stored(BlockHash(3), Some(BlockHash(9)), &[5, 6], None);
        log.removed(BlockHash(1));
        log.removed(BlockHash(2));
        // A removal in between keeps the order: no merge across it.
        log.stored(BlockHash(4), Some(BlockHash(3)), &[7, 8], None);
        let events = log.take();
        assert_eq!(
            events,
            vec![
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(1), BlockHash(2)],
                    parent_block_hash: None,
                    token_ids: vec![1, 2, 3, 4],
                    block_size: 2,
                    extra: None,
                },
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(3)],
                    parent_block_hash: Some(BlockHash(9)),
                    token_ids: vec![5, 6],
                    block_size: 2,
                    extra: None,
                },
                KvEvent::BlockRemoved {
                    block_hashes: vec![BlockHash(1), BlockHash(2)],
                },
                KvEvent::BlockStored {
                    block_hashes: vec![BlockHash(4)],
                    parent_block_hash: Some(BlockHash(3)),
                    token_ids: vec![7, 8],
                    block_size: 2,
                    extra: None,
                },
            ]
        );
        assert!(log.take().is_empty());
    }
}
