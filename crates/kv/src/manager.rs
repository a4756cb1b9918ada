//! The KV cache manager: per-request block tables over a [`BlockPool`], prefix-cache lookups and
//! registration, and prefix-cache counters.
//!
//! Guarantees (checked by [`KvCacheManager::check_invariants`] after every mutating call in debug
//! builds, and by property tests):
//! - free + used blocks = all blocks but the null block;
//! - each block's refcount equals the number of block tables that contain it;
//! - no block is both free and in a table, and no table holds a block twice or the null block;
//! - the hash index only points to blocks whose stored tokens hash to the entry;
//! - block tables are append-only while a request lives, and a failed allocation changes nothing;
//! - a prefix hit never covers a request's last token, so that token is always recomputed and
//!   produces the logits to sample from.

use std::collections::HashMap;

use oxllm_core::{BlockId, ReqId, TokenId};

use crate::checkpoints::StateCheckpoints;
use crate::error::{InvariantViolation, KvError};
use crate::hash::{hash_block, BlockHash};
use crate::pool::{BlockPool, NULL_BLOCK};
use crate::state_slots::StateSlots;

/// The result of a prefix lookup: cached blocks a new request can adopt instead of computing.
/// Only the manager creates non-empty ones; `Default` is "no hit".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputedBlocks {
    pub(crate) blocks: Vec<BlockId>,
    pub(crate) hashes: Vec<BlockHash>,
    num_queried_tokens: usize,
    /// Hybrid models: the checkpoint holding the recurrent state after the last hit block.
    pub(crate) restore: Option<(u32, BlockHash)>,
}

impl ComputedBlocks {
    /// The hit blocks, in table order.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }

    /// Tokens whose K/V the hit blocks already hold (whole blocks).
    pub fn num_computed_tokens(&self, block_size: usize) -> usize {
        self.blocks.len() * block_size
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Hybrid models: the checkpoint slot whose recurrent state must be copied into the
    /// request's state slot before its first step.
    pub fn restore_slot(&self) -> Option<u32> {
        self.restore.map(|(slot, _)| slot)
    }
}

/// Prefix-cache counters, in tokens, summed over admissions (a preempted request that is
/// admitted again counts again).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Admissions that looked the prefix cache up.
    pub num_requests: u64,
    /// Tokens looked up.
    pub num_queried_tokens: u64,
    /// Tokens found cached.
    pub num_hit_tokens: u64,
}

impl PrefixCacheStats {
    /// Fraction of queried tokens that were hits (0 before any query).
    pub fn hit_rate(&self) -> f64 {
        if self.num_queried_tokens == 0 {
            0.0
        } else {
            self.num_hit_tokens as f64 / self.num_queried_tokens as f64
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RequestBlocks {
    pub(crate) table: Vec<BlockId>,
    /// Chained hashes of the leading full blocks already offered to the cache.
    pub(crate) block_hashes: Vec<BlockHash>,
}

/// Block tables of live requests over one pool, with automatic prefix caching.
#[derive(Clone, Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    pub(crate) enable_prefix_caching: bool,
    pub(crate) requests: HashMap<ReqId, RequestBlocks>,
    stats: PrefixCacheStats,
    /// Hybrid models: one recurrent-state slot per request holding a table.
    pub(crate) states: Option<StateSlots>,
    /// Hybrid models: recurrent-state checkpoints at block boundaries, for prefix hits.
    pub(crate) checkpoints: Option<StateCheckpoints>,
}

impl KvCacheManager {
    /// A manager over `num_blocks` blocks (block 0 reserved) of `block_size` tokens.
    pub fn new(
        num_blocks: usize,
        block_size: usize,
        enable_prefix_caching: bool,
    ) -> Result<Self, KvError> {
        Ok(KvCacheManager {
            pool: BlockPool::new(num_blocks, block_size)?,
            enable_prefix_caching,
            requests: HashMap::new(),
            stats: PrefixCacheStats::default(),
            states: None,
            checkpoints: None,
        })
    }

    pub fn block_size(&self) -> usize {
        self.pool.block_size()
    }

    pub fn prefix_caching_enabled(&self) -> bool {
        self.enable_prefix_caching
    }

    /// The pool, read-only (refcounts, cached tokens, free order).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks an allocation can take (free, including evictable cached ones).
    pub fn num_free_blocks(&self) -> usize {
        self.pool.num_free_blocks()
    }

    /// Blocks that can ever be handed out (all but the null block).
    pub fn num_usable_blocks(&self) -> usize {
        self.pool.num_usable_blocks()
    }

    /// Fraction of usable blocks referenced by live requests, in [0, 1].
    pub fn usage(&self) -> f64 {
        let usable = self.pool.num_usable_blocks();
        1.0 - self.pool.num_free_blocks() as f64 / usable as f64
    }

    pub fn prefix_cache_stats(&self) -> PrefixCacheStats {
        self.stats
    }

    /// The block table of `req_id`; empty for a request holding no blocks.
    pub fn block_table(&self, req_id: ReqId) -> &[BlockId] {
        self.requests.get(&req_id).map_or(&[], |r| &r.table)
    }

    /// Requests currently holding a table (possibly empty).
    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }

    /// The longest chain of cached full blocks that prefixes `tokens`, stopping before the block
    /// holding the last token (at most `len - 1` tokens, rounded down to whole blocks), so the
    /// last token is always computed and yields logits. With recurrent states (hybrid models)
    /// the hit is cut back to the longest boundary that has a state checkpoint. Read-only:
    /// nothing is reserved until [`Self::allocate_slots`] adopts the result, which it rejects
    /// if the blocks (or the checkpoint) were evicted in between.
    pub fn get_computed_blocks(&self, tokens: &[TokenId], extra: Option<u64>) -> ComputedBlocks {
        if !self.enable_prefix_caching || tokens.is_empty() {
            return ComputedBlocks::default();
        }
        let block_size = self.pool.block_size();
        let max_blocks = (tokens.len() - 1) / block_size;
        let mut hit = ComputedBlocks {
            num_queried_tokens: tokens.len(),
            ..ComputedBlocks::default()
        };
        let mut parent = None;
        for chunk in tokens.chunks_exact(block_size).take(max_blocks) {
            let hash = hash_block(parent, chunk, extra);
            let Some(id) = self.pool.lookup(hash, parent, chunk, extra) else {
                break;
            };
            hit.blocks.push(id);
            hit.hashes.push(hash);
            parent = Some(hash);
        }
        if self.states.is_some() {
            self.cut_to_checkpoint(&mut hit);
        }
        hit
    }

    /// Makes `req_id`'s block table cover `num_tokens` tokens (computed so far plus those to
    /// compute this step). A request without blocks first adopts `prefix` (from
    /// [`Self::get_computed_blocks`]; pass `ComputedBlocks::default()` for none), and its
    /// prefix-cache query is counted then.
    ///
    /// With recurrent states, a request without a table also takes a state slot.
    ///
    /// Returns the newly allocated blocks, or `Ok(None)` with nothing changed when the pool has
    /// too few free blocks (or no free state slot). Errors (also changing nothing) on a prefix for a request that already
    /// has blocks, a stale prefix, or a prefix longer than `num_tokens`.
    pub fn allocate_slots(
        &mut self,
        req_id: ReqId,
        num_tokens: usize,
        prefix: &ComputedBlocks,
    ) -> Result<Option<Vec<BlockId>>, KvError> {
        let block_size = self.pool.block_size();
        let current = self.block_table(req_id).len();
        if !prefix.is_empty() {
            if current > 0 {
                return Err(KvError::PrefixForLiveRequest(req_id));
            }
            for (&id, &hash) in prefix.blocks.iter().zip(&prefix.hashes) {
                if self.pool.cached_hash(id) != Some(hash) {
                    return Err(KvError::StalePrefix(id));
                }
            }
            if let Some((slot, hash)) = prefix.restore {
                if !self
                    .checkpoints
                    .as_ref()
                    .is_some_and(|c| c.holds(slot, hash))
                {
                    return Err(KvError::StaleCheckpoint(slot));
                }
            }
            let prefix_tokens = prefix.num_computed_tokens(block_size);
            if prefix_tokens > num_tokens {
                return Err(KvError::PrefixLongerThanRequest {
                    prefix: prefix_tokens,
                    requested: num_tokens,
                });
            }
        }
        let have = current + prefix.blocks.len();
        let num_new = num_tokens.div_ceil(block_size).saturating_sub(have);
        // Hit blocks sitting in the free list leave it when adopted: they must not be counted as
        // room for the new blocks too.
        let free_hits = prefix
            .blocks
            .iter()
            .filter(|&&id| self.pool.ref_count(id) == Some(0))
            .count();
        if num_new + free_hits > self.pool.num_free_blocks() {
            return Ok(None);
        }
        let needs_state = !self.requests.contains_key(&req_id);
        if needs_state && self.states.as_ref().is_some_and(|s| s.num_free() == 0) {
            return Ok(None);
        }
        self.pool.touch(&prefix.blocks)?;
        let Some(new_blocks) = self.pool.allocate(num_new) else {
            // Unreachable after the count check; undo the touch to keep "no side effects".
            self.pool.release(&prefix.blocks)?;
            return Ok(None);
        };
        if needs_state {
            if let Some(states) = self.states.as_mut() {
                states.acquire(req_id);
            }
        }
        if let (Some((slot, _)), Some(cp)) = (prefix.restore, self.checkpoints.as_mut()) {
            cp.touch(slot);
        }
        let is_new = current == 0;
        let entry = self.requests.entry(req_id).or_default();
        if is_new && prefix.num_queried_tokens > 0 {
            self.stats.num_requests += 1;
            self.stats.num_queried_tokens += prefix.num_queried_tokens as u64;
            self.stats.num_hit_tokens += prefix.num_computed_tokens(block_size) as u64;
        }
        entry.table.extend_from_slice(&prefix.blocks);
        entry.block_hashes.extend_from_slice(&prefix.hashes);
        entry.table.extend_from_slice(&new_blocks);
        self.debug_check();
        Ok(Some(new_blocks))
    }

    /// Offers `req_id`'s newly full blocks to the prefix cache: those among the first
    /// `num_computed_tokens` of `tokens` (the request's whole token sequence, prompt then
    /// output, which must only ever grow between calls) not offered before. A block whose hash
    /// another block already holds stays private.
    pub fn cache_full_blocks(
        &mut self,
        req_id: ReqId,
        tokens: &[TokenId],
        num_computed_tokens: usize,
        extra: Option<u64>,
    ) -> Result<(), KvError> {
        if !self.enable_prefix_caching {
            return Ok(());
        }
        let block_size = self.pool.block_size();
        let entry = self
            .requests
            .get_mut(&req_id)
            .ok_or(KvError::UnknownRequest(req_id))?;
        if num_computed_tokens > tokens.len() {
            return Err(KvError::MoreComputedThanKnown {
                computed: num_computed_tokens,
                known: tokens.len(),
            });
        }
        let num_full = num_computed_tokens / block_size;
        if num_full > entry.table.len() {
            return Err(KvError::TableTooShort {
                req_id,
                blocks: entry.table.len(),
                tokens: num_computed_tokens,
            });
        }
        for i in entry.block_hashes.len()..num_full {
            let parent = i.checked_sub(1).map(|p| entry.block_hashes[p]);
            let chunk = &tokens[i * block_size..(i + 1) * block_size];
            let (hash, _) = self.pool.register(entry.table[i], parent, chunk, extra)?;
            entry.block_hashes.push(hash);
        }
        self.debug_check();
        Ok(())
    }

    /// Releases all of `req_id`'s blocks, tail first, so that when they are evicted the later
    /// blocks go before the shared prefix, and its state slot. Returns false for a request
    /// holding no blocks.
    pub fn free(&mut self, req_id: ReqId) -> bool {
        if let Some(states) = self.states.as_mut() {
            states.release(req_id);
        }
        let Some(entry) = self.requests.remove(&req_id) else {
            return false;
        };
        let tail_first: Vec<BlockId> = entry.table.iter().rev().copied().collect();
        // Cannot fail: each table entry holds one reference (the refcount invariant).
        let released = self.pool.release(&tail_first);
        debug_assert!(released.is_ok(), "{released:?}");
        self.debug_check();
        true
    }

    /// Forgets all cached prefixes (and state checkpoints). Returns how many cached blocks were
    /// dropped.
    pub fn reset_prefix_cache(&mut self) -> usize {
        if let Some(cp) = self.checkpoints.as_mut() {
            cp.clear();
        }
        let dropped = self.pool.reset_prefix_cache();
        self.debug_check();
        dropped
    }

    /// Starts recording KV-cache events (see [`crate::KvEvent`]; off by default) and records a
    /// snapshot of what is cached now (`AllBlocksCleared`, then each cached block as stored), so
    /// a consumer starting here mirrors the whole cache. Call it again for each new consumer.
    pub fn enable_events(&mut self) {
        self.pool.enable_events();
    }

    /// The KV-cache events since the last call, oldest first.
    pub fn take_events(&mut self) -> Vec<crate::KvEvent> {
        self.pool.take_events()
    }

    fn debug_check(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check_invariants() {
            panic!("{e}");
        }
    }

    /// Checks every invariant in the module header that a snapshot can show (append-only tables
    /// are checked by the property tests across snapshots).
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        self.pool.check_invariants()?;
        self.check_state_invariants()?;
        let mut refs = vec![0u32; self.pool.num_blocks()];
        for (req_id, entry) in &self.requests {
            for &id in &entry.table {
                if id == NULL_BLOCK || id as usize >= refs.len() {
                    return Err(InvariantViolation(format!(
                        "request {req_id} holds invalid block {id}"
                    )));
                }
                refs[id as usize] += 1;
            }
            let mut sorted = entry.table.clone();
            sorted.sort_unstable();
            if sorted.windows(2).any(|w| w[0] == w[1]) {
                return Err(InvariantViolation(format!(
                    "request {req_id} holds a block twice"
                )));
            }
            if entry.block_hashes.len() > entry.table.len() {
                return Err(InvariantViolation(format!(
                    "request {req_id} has more block hashes than blocks"
                )));
            }
        }
        for (id, &count) in refs.iter().enumerate().skip(1) {
            if self.pool.ref_count(id as BlockId) != Some(count) {
                return Err(InvariantViolation(format!(
                    "block {id} has refcount {:?} but is in {count} tables",
                    self.pool.ref_count(id as BlockId)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize, salt: u32) -> Vec<TokenId> {
        (0..n as u32).map(|i| i * 7 + salt).collect()
    }

    #[test]
    fn prefix_hit_is_capped_before_the_last_token() {
        let mut kv = KvCacheManager::new(10, 4, true).unwrap();
        let prompt = tokens(8, 0);
        let none = kv.get_computed_blocks(&prompt, None);
        assert!(none.is_empty());
        kv.allocate_slots(1, 8, &none).unwrap().unwrap();
        kv.cache_full_blocks(1, &prompt, 8, None).unwrap();
        // Exactly two full blocks cached, but a same prompt may reuse only the first: its last
        // token must be recomputed.
        let hit = kv.get_computed_blocks(&prompt, None);
        assert_eq!(hit.blocks(), &kv.block_table(1)[..1]);
        assert_eq!(hit.num_computed_tokens(4), 4);
        // A longer prompt reuses both.
        let mut longer = prompt.clone();
        longer.push(99);
        let hit = kv.get_computed_blocks(&longer, None);
        assert_eq!(hit.blocks(), kv.block_table(1));
        kv.allocate_slots(2, 9, &hit).unwrap().unwrap();
        assert_eq!(&kv.block_table(2)[..2], kv.block_table(1));
        assert_eq!(kv.pool().ref_count(kv.block_table(1)[0]), Some(2));
        let stats = kv.prefix_cache_stats();
        assert_eq!((stats.num_queried_tokens, stats.num_hit_tokens), (17, 8));
    }

    #[test]
    fn failed_allocation_changes_nothing() {
        let mut kv = KvCacheManager::new(4, 4, true).unwrap();
        kv.allocate_slots(1, 8, &ComputedBlocks::default())
            .unwrap()
            .unwrap();
        let before = kv.block_table(1).to_vec();
        assert_eq!(
            kv.allocate_slots(1, 16, &ComputedBlocks::default()),
            Ok(None)
        );
        assert_eq!(kv.block_table(1), &before[..]);
        assert_eq!(kv.num_free_blocks(), 1);
        assert_eq!(
            kv.allocate_slots(2, 8, &ComputedBlocks::default()),
            Ok(None)
        );
        assert_eq!(kv.num_requests(), 1);
    }

    #[test]
    fn free_releases_tail_first_and_hits_revive_cached_blocks() {
        let mut kv = KvCacheManager::new(5, 2, true).unwrap();
        let prompt = tokens(5, 3);
        kv.allocate_slots(1, 5, &ComputedBlocks::default())
            .unwrap()
            .unwrap();
        kv.cache_full_blocks(1, &prompt, 5, None).unwrap();
        let table = kv.block_table(1).to_vec();
        assert!(kv.free(1));
        assert!(!kv.free(1));
        assert_eq!(kv.num_free_blocks(), 4);
        // Eviction order: unused block first, then the request's tail before its head.
        let order: Vec<_> = kv.pool().free_blocks().collect();
        let tail_first: Vec<_> = table.iter().rev().copied().collect();
        assert_eq!(&order[1..], &tail_first[..]);
        let hit = kv.get_computed_blocks(&prompt, None);
        assert_eq!(hit.blocks(), &table[..2]);
        kv.allocate_slots(2, 5, &hit).unwrap().unwrap();
        assert_eq!(kv.block_table(2).len(), 3);
        assert_eq!(kv.num_free_blocks(), 1);
    }

    #[test]
    fn stale_prefix_is_rejected() {
        let mut kv = KvCacheManager::new(3, 2, true).unwrap();
        let prompt = tokens(3, 1);
        kv.allocate_slots(1, 3, &ComputedBlocks::default())
            .unwrap()
            .unwrap();
        kv.cache_full_blocks(1, &prompt, 3, None).unwrap();
        kv.free(1);
        let hit = kv.get_computed_blocks(&prompt, None);
        assert_eq!(hit.blocks().len(), 1);
        // Someone else takes every free block, evicting the hit.
        kv.allocate_slots(2, 4, &ComputedBlocks::default())
            .unwrap()
            .unwrap();
        assert_eq!(
            kv.allocate_slots(3, 3, &hit),
            Err(KvError::StalePrefix(hit.blocks()[0]))
        );
        assert_eq!(
            kv.allocate_slots(2, 4, &hit),
            Err(KvError::PrefixForLiveRequest(2))
        );
    }

    #[test]
    fn disabled_caching_never_hits() {
        let mut kv = KvCacheManager::new(5, 2, false).unwrap();
        let prompt = tokens(5, 0);
        kv.allocate_slots(1, 5, &ComputedBlocks::default())
            .unwrap()
            .unwrap();
        kv.cache_full_blocks(1, &prompt, 5, None).unwrap();
        assert!(kv.get_computed_blocks(&prompt, None).is_empty());
        assert_eq!(kv.pool().num_cached_blocks(), 0);
    }
}
