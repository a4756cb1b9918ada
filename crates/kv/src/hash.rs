//! Chained block hashes: a full block is named by `h(parent_hash, its tokens, extra)`, so equal
//! hashes mean equal whole prefixes (up to collisions, which lookups guard against by comparing
//! the stored tokens).
//!
//! The hash is 128 bits, from two SipHash instances keyed by a random seed drawn once per process:
//! deterministic within a process (a prefix hashes the same for every request), unpredictable
//! across processes (a client cannot craft collisions offline).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use oxllm_core::TokenId;

/// The chained hash of one full block and, through its parent, of all blocks before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

/// Two independently keyed hashers; drawn once so hashes agree across the whole process.
fn process_seeds() -> &'static (RandomState, RandomState) {
    static SEEDS: OnceLock<(RandomState, RandomState)> = OnceLock::new();
    // Each `RandomState::new()` gets different keys, so the two halves are independent.
    SEEDS.get_or_init(|| (RandomState::new(), RandomState::new()))
}

fn feed(
    mut hasher: impl Hasher,
    parent: Option<BlockHash>,
    tokens: &[TokenId],
    extra: Option<u64>,
) -> u64 {
    // Tags and the length keep (None, x) and (Some(..), x) and different splits apart.
    match parent {
        None => hasher.write_u8(0),
        Some(p) => {
            hasher.write_u8(1);
            hasher.write_u128(p.0);
        }
    }
    hasher.write_usize(tokens.len());
    for &t in tokens {
        hasher.write_u32(t);
    }
    match extra {
        None => hasher.write_u8(0),
        Some(e) => {
            hasher.write_u8(1);
            hasher.write_u64(e);
        }
    }
    hasher.finish()
}

/// Hash of a block holding `tokens`, following the block hashed `parent` (None for the first
/// block). `extra` salts the hash for inputs the tokens do not show (a LoRA adapter, images).
pub fn hash_block(parent: Option<BlockHash>, tokens: &[TokenId], extra: Option<u64>) -> BlockHash {
    let (lo_seed, hi_seed) = process_seeds();
    let lo = feed(lo_seed.build_hasher(), parent, tokens, extra);
    let hi = feed(hi_seed.build_hasher(), parent, tokens, extra);
    BlockHash((u128::from(hi) << 64) | u128::from(lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_chained() {
        let a = hash_block(None, &[1, 2, 3], None);
        assert_eq!(a, hash_block(None, &[1, 2, 3], None));
        assert_ne!(a, hash_block(None, &[1, 2, 4], None));
        assert_ne!(a, hash_block(None, &[1, 2, 3], Some(0)));
        let b = hash_block(Some(a), &[4, 5, 6], None);
        assert_ne!(b, hash_block(None, &[4, 5, 6], None));
        assert_ne!(b, hash_block(Some(b), &[4, 5, 6], None));
    }
}
