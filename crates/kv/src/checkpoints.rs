//! Recurrent-state checkpoints for prefix caching on hybrid models.
//!
//! A checkpoint is a copy of a sequence's whole recurrent state (every linear layer's conv state
//! and recurrent matrix) right after a block boundary, named by the chained hash of the block
//! ending there: equal hashes mean equal prefixes, so the state is the same for every sequence
//! starting with them. The pool is bounded (`capacity` slots of the model's state pool, with ids
//! `first_slot..first_slot + capacity`) and evicts the least recently used checkpoint.
//!
//! A checkpoint's life: [`StateCheckpoints::reserve`] when a step is planned that crosses the
//! boundary (the slot is *pending*: invisible to lookups, never evicted), the forward pass
//! copies the state into it, then [`StateCheckpoints::commit`] makes it findable once the step
//! is done (or [`StateCheckpoints::discard`] frees it if the step did not complete).
//!
//! Guarantees (checked by [`StateCheckpoints::check_invariants`]): free + pending + committed
//! slots = capacity, pairwise disjoint; the hash index and the LRU order hold exactly the
//! committed slots; a hash names at most one committed or pending slot.

use std::collections::{BTreeMap, HashMap};

use crate::error::InvariantViolation;
use crate::hash::BlockHash;

/// Counters of the checkpoint pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    pub capacity: usize,
    pub committed: usize,
    pub pending: usize,
    /// Checkpoints dropped to make room, since start.
    pub evictions: u64,
}

#[derive(Clone, Debug)]
pub struct StateCheckpoints {
    first_slot: u32,
    capacity: usize,
    /// Checkpoint every this many blocks.
    interval_blocks: usize,
    free: Vec<u32>,
    pending: HashMap<u32, BlockHash>,
    by_hash: HashMap<BlockHash, u32>,
    /// Committed slot -> (its hash, its last-use tick).
    committed: HashMap<u32, (BlockHash, u64)>,
    /// Last-use tick -> committed slot; the first entry is evicted first.
    lru: BTreeMap<u64, u32>,
    tick: u64,
    evictions: u64,
}

impl StateCheckpoints {
    /// `capacity` checkpoint slots with ids from `first_slot`, one checkpoint every
    /// `interval_blocks` (at least 1) blocks.
    pub fn new(first_slot: u32, capacity: usize, interval_blocks: usize) -> StateCheckpoints {
        StateCheckpoints {
            first_slot,
            capacity,
            interval_blocks: interval_blocks.max(1),
            free: (first_slot..first_slot + capacity as u32).rev().collect(),
            pending: HashMap::new(),
            by_hash: HashMap::new(),
            committed: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            evictions: 0,
        }
    }

    pub fn interval_blocks(&self) -> usize {
        self.interval_blocks
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> CheckpointStats {
        CheckpointStats {
            capacity: self.capacity,
            committed: self.committed.len(),
            pending: self.pending.len(),
            evictions: self.evictions,
        }
    }

    /// The committed checkpoint named `hash`. Read-only.
    pub fn lookup(&self, hash: BlockHash) -> Option<u32> {
        let slot = *self.by_hash.get(&hash)?;
        self.committed.contains_key(&slot).then_some(slot)
    }

    /// Whether `slot` still holds the committed checkpoint `hash`.
    pub fn holds(&self, slot: u32, hash: BlockHash) -> bool {
        self.committed.get(&slot).is_some_and(|&(h, _)| h == hash)
    }

    /// Marks a committed checkpoint as just used (last to be evicted).
    pub fn touch(&mut self, slot: u32) {
        let Some(entry) = self.committed.get_mut(&slot) else {
            return;
        };
        self.lru.remove(&entry.1);
        self.tick += 1;
        entry.1 = self.tick;
        self.lru.insert(self.tick, slot);
    }

    /// A pending slot for a new checkpoint named `hash`, evicting the least recently used one
    /// if none is free. `None` when `hash` is already checkpointed (or pending) or every slot is
    /// pending.
    pub fn reserve(&mut self, hash: BlockHash) -> Option<u32> {
        if self.by_hash.contains_key(&hash) || self.pending.values().any(|&h| h == hash) {
            return None;
        }
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let (_, victim) = self.lru.pop_first()?;
                if let Some((h, _)) = self.committed.remove(&victim) {
                    self.by_hash.remove(&h);
                }
                self.evictions += 1;
                victim
            }
        };
        self.pending.insert(slot, hash);
        Some(slot)
    }

    /// Makes a pending checkpoint findable (its state has been written).
    pub fn commit(&mut self, slot: u32) {
        let Some(hash) = self.pending.remove(&slot) else {
            return;
        };
        self.tick += 1;
        self.by_hash.insert(hash, slot);
        self.committed.insert(slot, (hash, self.tick));
        self.lru.insert(self.tick, slot);
    }

    /// Frees a pending checkpoint whose state was not written.
    pub fn discard(&mut self, slot: u32) {
        if self.pending.remove(&slot).is_some() {
            self.free.push(slot);
        }
    }

    /// Drops every committed checkpoint (pending ones stay). Returns how many were dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.committed.len();
        self.free.extend(self.committed.keys().copied());
        self.committed.clear();
        self.by_hash.clear();
        self.lru.clear();
        n
    }

    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |m: String| Err(InvariantViolation(m));
        let mut seen = vec![false; self.capacity];
        let all = self
            .free
            .iter()
            .chain(self.pending.keys())
            .chain(self.committed.keys());
        for &slot in all {
            let i = slot.wrapping_sub(self.first_slot) as usize;
            match seen.get_mut(i) {
                None => return fail(format!("checkpoint slot {slot} outside the pool")),
                Some(true) => return fail(format!("checkpoint slot {slot} in two states")),
                Some(s) => *s = true,
            }
        }
        let total = self.free.len() + self.pending.len() + self.committed.len();
        if total != self.capacity {
            return fail(format!(
                "{total} checkpoint slots accounted for, capacity {}",
                self.capacity
            ));
        }
        if self.by_hash.len() != self.committed.len() || self.lru.len() != self.committed.len() {
            return fail("checkpoint index or LRU out of step with the committed set".into());
        }
        for (&slot, &(hash, tick)) in &self.committed {
            if self.by_hash.get(&hash) != Some(&slot) || self.lru.get(&tick) != Some(&slot) {
                return fail(format!("committed checkpoint {slot} not indexed"));
            }
        }
        let mut pending: Vec<_> = self.pending.values().collect();
        pending.sort_unstable();
        if pending.windows(2).any(|w| w[0] == w[1])
            || pending.iter().any(|h| self.by_hash.contains_key(h))
        {
            return fail("a hash names two checkpoints".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_commit_lookup_and_lru_eviction() {
        let mut c = StateCheckpoints::new(10, 2, 1);
        let (h1, h2, h3) = (BlockHash(1), BlockHash(2), BlockHash(3));
        let s1 = c.reserve(h1).unwrap();
        assert_eq!(c.lookup(h1), None, "pending is invisible");
        assert_eq!(c.reserve(h1), None, "no duplicate while pending");
        c.commit(s1);
        assert_eq!(c.lookup(h1), Some(s1));
        let s2 = c.reserve(h2).unwrap();
        c.commit(s2);
        c.touch(s1);
        // Full: h2 is the least recently used.
        let s3 = c.reserve(h3).unwrap();
        assert_eq!(s3, s2);
        assert_eq!(c.lookup(h2), None);
        assert_eq!(c.lookup(h1), Some(s1));
        c.discard(s3);
        assert_eq!(c.lookup(h3), None);
        assert_eq!(c.stats().evictions, 1);
        c.check_invariants().unwrap();
        // All pending: nothing to evict.
        let a = c.reserve(h2).unwrap();
        let b = c.reserve(h3).unwrap();
        assert_eq!(c.reserve(BlockHash(4)), None);
        assert!(a >= 10 && b >= 10 && a != b);
        c.check_invariants().unwrap();
    }
}
