//! Bookkeeping of a paged KV cache, without tensors.
//!
//! The cache is a fixed pool of blocks of `block_size` token slots each. A request owns a block
//! table (the blocks its tokens' K/V live in, in order); full blocks are named by a chained hash of
//! their tokens so a later request with the same prefix can share them instead of recomputing.
//!
//! - [`BlockPool`] owns the blocks: refcounts, the free list in eviction order, the hash map of
//!   cached blocks (lazily evicted: a freed cached block stays findable until it is reused).
//! - [`hash_block`] computes the chained block hash, a fixed documented SHA-256 scheme that a
//!   router can recompute (docs/DEPLOY.md).
//! - [`KvEvent`]s (opt-in) record every change to the prefix-cache index, for routers that
//!   mirror it.
//! - [`KvCacheManager`] is what a scheduler talks to: prefix lookups, slot allocation, caching
//!   newly full blocks, freeing a request's blocks.
//!
//! - [`StateSlots`] and [`StateCheckpoints`] (hybrid models): one recurrent-state slot per
//!   running request, counted like blocks, and a bounded LRU pool of state checkpoints at block
//!   boundaries so prefix hits can restore the state; both owned by the manager.
//!
//! Block 0 is the null block ([`NULL_BLOCK`]): never handed out, so a runner can pad block tables
//! with it.

#![forbid(unsafe_code)]

mod checkpoints;
mod error;
mod events;
mod free_list;
mod hash;
mod manager;
mod pool;
mod recurrent;
mod state_slots;

pub use checkpoints::{CheckpointStats, StateCheckpoints};

pub use error::{InvariantViolation, KvError};
pub use events::KvEvent;
pub use hash::{hash_block, BlockHash};
pub use manager::{ComputedBlocks, KvCacheManager, PrefixCacheStats};
pub use pool::{BlockPool, NULL_BLOCK};
pub use recurrent::PlannedCheckpoint;
pub use state_slots::StateSlots;
