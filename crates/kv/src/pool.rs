//! The block pool: every block's refcount and cached identity, the free list, and the map from
//! block hash to cached block.
//!
//! Guarantees:
//! - block 0 ([`NULL_BLOCK`]) is never handed out, referenced, freed or cached;
//! - a block is in the free list exactly when its refcount is 0;
//! - freed blocks join the tail of the free list and are reused from its head (LRU eviction);
//! - eviction is lazy: a free block keeps its cached identity, and stays findable by hash, until
//!   it is taken for reuse, which drops its hash entry then;
//! - the hash map only points to blocks whose stored key (parent hash, tokens, extra) hashes to
//!   the entry's hash, and a lookup compares the stored key with the query, so a hash collision is
//!   a miss, never a wrong hit;
//! - every public method that can fail checks its input first and changes nothing on error;
//! - with events on, every change to the hash index is recorded as a [`KvEvent`], in order.

use std::collections::HashMap;

use oxllm_core::{BlockId, TokenId};

use crate::error::{InvariantViolation, KvError};
use crate::events::{EventLog, KvEvent};
use crate::free_list::FreeList;
use crate::hash::{hash_block, BlockHash};

/// The reserved block that is never allocated; runners pad block tables with it.
pub const NULL_BLOCK: BlockId = 0;

/// What a cached block holds: enough to recompute its hash and to verify a hit.
#[derive(Clone, Debug)]
struct CachedKey {
    hash: BlockHash,
    parent: Option<BlockHash>,
    tokens: Box<[TokenId]>,
    extra: Option<u64>,
}

#[derive(Clone, Debug, Default)]
struct BlockState {
    ref_count: u32,
    cached: Option<CachedKey>,
}

/// A fixed set of KV blocks with refcounts, an LRU free list and a prefix-cache index.
#[derive(Clone, Debug)]
pub struct BlockPool {
    block_size: usize,
    blocks: Vec<BlockState>,
    free: FreeList,
    cached: HashMap<BlockHash, BlockId>,
    events: EventLog,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (including the null block) of `block_size` tokens, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self, KvError> {
        if num_blocks < 2 {
            return Err(KvError::TooFewBlocks(num_blocks));
        }
        // Ids are u32 and u32::MAX marks "no link" in the free list.
        let max = u32::MAX as usize;
        if num_blocks > max {
            return Err(KvError::TooManyBlocks {
                got: num_blocks,
                max,
            });
        }
        if block_size == 0 {
            return Err(KvError::ZeroBlockSize);
        }
        let mut free = FreeList::new(num_blocks);
        for id in 1..num_blocks as BlockId {
            free.push_back(id);
        }
        Ok(BlockPool {
            block_size,
            blocks: vec![BlockState::default(); num_blocks],
            free,
            cached: HashMap::new(),
            events: EventLog::default(),
        })
    }

    /// All blocks, the null block included.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks that can ever be handed out (all but the null block).
    pub fn num_usable_blocks(&self) -> usize {
        self.blocks.len() - 1
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks with refcount 0, cached or not: what an allocation can take.
    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Number of entries in the prefix-cache index.
    pub fn num_cached_blocks(&self) -> usize {
        self.cached.len()
    }

    /// The refcount of `id`, or None if it is not a block of this pool.
    pub fn ref_count(&self, id: BlockId) -> Option<u32> {
        self.blocks.get(id as usize).map(|b| b.ref_count)
    }

    /// The hash under which `id` is cached, if it is.
    pub fn cached_hash(&self, id: BlockId) -> Option<BlockHash> {
        self.blocks
            .get(id as usize)?
            .cached
            .as_ref()
            .map(|k| k.hash)
    }

    /// The tokens `id` is cached with, if it is.
    pub fn cached_tokens(&self, id: BlockId) -> Option<&[TokenId]> {
        self.blocks
            .get(id as usize)?
            .cached
            .as_ref()
            .map(|k| &k.tokens[..])
    }

    /// The cached block named `hash` whose stored key equals (`parent`, `tokens`, `extra`).
    pub fn lookup(
        &self,
        hash: BlockHash,
        parent: Option<BlockHash>,
        tokens: &[TokenId],
        extra: Option<u64>,
    ) -> Option<BlockId> {
        let &id = self.cached.get(&hash)?;
        let key = self.blocks[id as usize].cached.as_ref()?;
        // Equal hashes with a different key are a collision: treat as a miss.
        let same = key.parent == parent && key.extra == extra && *key.tokens == *tokens;
        same.then_some(id)
    }

    /// Takes `n` blocks from the head of the free list with refcount 1, evicting their cached
    /// identity. None, with nothing changed, if fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free.len() {
            return None;
        }
        let mut taken = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.free.pop_front()?;
            let block = &mut self.blocks[id as usize];
            if let Some(key) = block.cached.take() {
                // Lazy eviction happens here, when the block's slots are about to be overwritten.
                if self.cached.get(&key.hash) == Some(&id) {
                    self.cached.remove(&key.hash);
                    self.events.removed(key.hash);
                }
            }
            block.ref_count = 1;
            taken.push(id);
        }
        Some(taken)
    }

    /// Adds a reference to each block (a prefix hit sharing them). A free block must be cached;
    /// it leaves the free list.
    pub fn touch(&mut self, ids: &[BlockId]) -> Result<(), KvError> {
        for &id in ids {
            let block = self.usable(id)?;
            if block.ref_count == 0 && block.cached.is_none() {
                return Err(KvError::NotCached(id));
            }
        }
        for &id in ids {
            let block = &mut self.blocks[id as usize];
            if block.ref_count == 0 {
                self.free.remove(id);
            }
            block.ref_count += 1;
        }
        Ok(())
    }

    /// Drops one reference from each block, in order; blocks reaching 0 join the free list's
    /// tail in that order, so pass a request's table tail first to keep its prefix longest.
    pub fn release(&mut self, ids: &[BlockId]) -> Result<(), KvError> {
        let mut drops: HashMap<BlockId, u32> = HashMap::new();
        for &id in ids {
            let refs = self.usable(id)?.ref_count;
            let n = drops.entry(id).or_insert(0);
            *n += 1;
            if *n > refs {
                return Err(KvError::NotReferenced(id));
            }
        }
        for &id in ids {
            let block = &mut self.blocks[id as usize];
            block.ref_count -= 1;
            if block.ref_count == 0 {
                self.free.push_back(id);
            }
        }
        Ok(())
    }

    /// Makes the referenced block `id` findable as (`parent`, `tokens`, `extra`) and returns
    /// its hash, and whether it was registered: false, changing nothing, if the block is already
    /// cached or another block already holds this hash (two requests computed the same block;
    /// the first stays the shared one).
    pub fn register(
        &mut self,
        id: BlockId,
        parent: Option<BlockHash>,
        tokens: &[TokenId],
        extra: Option<u64>,
    ) -> Result<(BlockHash, bool), KvError> {
        let block = self.usable(id)?;
        if block.ref_count == 0 {
            return Err(KvError::NotReferenced(id));
        }
        if tokens.len() != self.block_size {
            return Err(KvError::WrongBlockLength {
                expected: self.block_size,
                got: tokens.len(),
            });
        }
        let hash = hash_block(parent, tokens, extra);
        if block.cached.is_some() || self.cached.contains_key(&hash) {
            return Ok((hash, false));
        }
        self.blocks[id as usize].cached = Some(CachedKey {
            hash,
            parent,
            tokens: tokens.into(),
            extra,
        });
        self.cached.insert(hash, id);
        self.events.stored(hash, parent, tokens, extra);
        Ok((hash, true))
    }

    /// Forgets every cached identity (blocks in use keep their contents and refcounts).
    /// Returns how many entries were dropped.
    pub fn reset_prefix_cache(&mut self) -> usize {
        let dropped = self.cached.len();
        self.cached.clear();
        for block in &mut self.blocks {
            block.cached = None;
        }
        self.events.cleared();
        dropped
    }

    /// Starts recording [`KvEvent`]s, if not yet, and records a snapshot of the index: an
    /// `AllBlocksCleared`, then every cached block as stored, each after its parent when that is
    /// cached too. A consumer that starts reading here (a new subscriber) thus builds the whole
    /// index, and one that was already reading ends up with the same set.
    pub fn enable_events(&mut self) {
        self.events.enable();
        self.events.cleared();
        // Children of each cached hash (None: blocks whose parent is not cached), by block id
        // so the snapshot's order does not depend on the hash map's.
        let mut children: HashMap<Option<BlockHash>, Vec<BlockId>> = HashMap::new();
        for &id in self.cached.values() {
            if let Some(key) = &self.blocks[id as usize].cached {
                let parent = key.parent.filter(|p| self.cached.contains_key(p));
                children.entry(parent).or_default().push(id);
            }
        }
        for ids in children.values_mut() {
            ids.sort_unstable_by(|a, b| b.cmp(a));
        }
        // Depth first, parents before children, so chains merge into few events.
        let mut stack = children.remove(&None).unwrap_or_default();
        while let Some(id) = stack.pop() {
            let Some(key) = &self.blocks[id as usize].cached else {
                continue;
            };
            self.events
                .stored(key.hash, key.parent, &key.tokens, key.extra);
            if let Some(kids) = children.remove(&Some(key.hash)) {
                stack.extend(kids);
            }
        }
    }

    pub fn events_enabled(&self) -> bool {
        self.events.is_enabled()
    }

    /// The events recorded since the last call, oldest first (empty while recording is off).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events.take()
    }

    fn usable(&self, id: BlockId) -> Result<&BlockState, KvError> {
        match self.blocks.get(id as usize) {
            Some(block) if id != NULL_BLOCK => Ok(block),
            _ => Err(KvError::InvalidBlock(id)),
        }
    }

    /// Checks the pool's own invariants (see the module header); the manager adds the ones that
    /// relate refcounts to block tables.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let fail = |msg: String| Err(InvariantViolation(msg));
        if let Err(msg) = self.free.check() {
            return fail(msg);
        }
        let null = &self.blocks[NULL_BLOCK as usize];
        if null.ref_count != 0 || null.cached.is_some() || self.free.contains(NULL_BLOCK) {
            return fail("the null block is referenced, cached or free".into());
        }
        let mut used = 0;
        for (i, block) in self.blocks.iter().enumerate().skip(1) {
            let id = i as BlockId;
            let free = self.free.contains(id);
            if free == (block.ref_count > 0) {
                return fail(format!(
                    "block {id} has refcount {} but free-list membership {free}",
                    block.ref_count
                ));
            }
            used += usize::from(block.ref_count > 0);
            if let Some(key) = &block.cached {
                if self.cached.get(&key.hash) != Some(&id) {
                    return fail(format!("block {id} is cached but not indexed"));
                }
            }
        }
        if used + self.free.len() != self.num_usable_blocks() {
            return fail(format!(
                "{used} used + {} free != {} usable blocks",
                self.free.len(),
                self.num_usable_blocks()
            ));
        }
        for (&hash, &id) in &self.cached {
            let Some(key) = self.blocks.get(id as usize).and_then(|b| b.cached.as_ref()) else {
                return fail(format!("hash index points to uncached block {id}"));
            };
            if key.hash != hash
                || key.tokens.len() != self.block_size
                || hash_block(key.parent, &key.tokens, key.extra) != hash
            {
                return fail(format!("block {id}'s stored tokens do not match its hash"));
            }
        }
        Ok(())
    }

    /// The free blocks, first to evict first.
    pub fn free_blocks(&self) -> impl Iterator<Item = BlockId> + '_ {
        self.free.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_never_handed_out() {
        let mut pool = BlockPool::new(4, 2).unwrap();
        assert_eq!(pool.num_free_blocks(), 3);
        let got = pool.allocate(3).unwrap();
        assert!(!got.contains(&NULL_BLOCK));
        assert_eq!(pool.allocate(1), None);
        assert_eq!(pool.touch(&[NULL_BLOCK]), Err(KvError::InvalidBlock(0)));
        assert_eq!(pool.release(&[NULL_BLOCK]), Err(KvError::InvalidBlock(0)));
        pool.check_invariants().unwrap();
    }

    #[test]
    fn lazy_eviction_keeps_freed_blocks_findable_until_reused() {
        let mut pool = BlockPool::new(3, 2).unwrap();
        let ids = pool.allocate(2).unwrap();
        let hash = hash_block(None, &[7, 8], None);
        assert!(pool.register(ids[0], None, &[7, 8], None).unwrap().1);
        pool.release(&[ids[1], ids[0]]).unwrap();
        assert_eq!(pool.lookup(hash, None, &[7, 8], None), Some(ids[0]));
        // A hit revives the block from the middle... here the tail of the free list.
        pool.touch(&[ids[0]]).unwrap();
        assert_eq!(pool.num_free_blocks(), 1);
        pool.release(&[ids[0]]).unwrap();
        // Reusing both blocks evicts the uncached one first, then the cached one.
        assert_eq!(pool.allocate(1), Some(vec![ids[1]]));
        assert_eq!(pool.lookup(hash, None, &[7, 8], None), Some(ids[0]));
        assert_eq!(pool.allocate(1), Some(vec![ids[0]]));
        assert_eq!(pool.lookup(hash, None, &[7, 8], None), None);
        assert_eq!(pool.num_cached_blocks(), 0);
        pool.check_invariants().unwrap();
    }

    #[test]
    fn lookup_with_a_different_key_is_a_miss() {
        let mut pool = BlockPool::new(3, 2).unwrap();
        let ids = pool.allocate(1).unwrap();
        pool.register(ids[0], None, &[1, 2], None).unwrap();
        let hash = hash_block(None, &[1, 2], None);
        // Same hash (forged), other tokens: must not hit.
        assert_eq!(pool.lookup(hash, None, &[1, 3], None), None);
        assert_eq!(pool.lookup(hash, None, &[1, 2], Some(9)), None);
        assert_eq!(pool.lookup(hash, None, &[1, 2], None), Some(ids[0]));
    }

    #[test]
    fn errors_change_nothing() {
        let mut pool = BlockPool::new(4, 2).unwrap();
        let ids = pool.allocate(1).unwrap();
        assert_eq!(
            pool.release(&[ids[0], ids[0]]),
            Err(KvError::NotReferenced(ids[0]))
        );
        assert_eq!(pool.ref_count(ids[0]), Some(1));
        assert_eq!(pool.touch(&[ids[0], 3]), Err(KvError::NotCached(3)));
        assert_eq!(pool.ref_count(ids[0]), Some(1));
        assert_eq!(
            pool.register(ids[0], None, &[1], None),
            Err(KvError::WrongBlockLength {
                expected: 2,
                got: 1
            })
        );
        pool.check_invariants().unwrap();
        assert!(BlockPool::new(1, 2).is_err());
        assert!(BlockPool::new(2, 0).is_err());
    }
}
