//! Chained block hashes: a full block is named by `h(parent_hash, its tokens, extra)`, so equal
//! hashes mean equal whole prefixes (up to collisions, which lookups guard against by comparing
//! the stored tokens).
//!
//! The scheme is fixed and documented (docs/DEPLOY.md, "KV-cache events"), so a router can
//! compute the hashes of a prompt's blocks itself and match them against the hashes a replica
//! publishes. Version 1:
//!
//! ```text
//! ROOT  = SHA-256("oxllm-kv-block-hash-v1")[0..16]          (the first block's parent)
//! msg   = parent (16 bytes) || u32le(number of tokens) || u32le(token) for each token
//!         || 0x00                     (no extra key)
//!          | 0x01 || u64le(extra)     (an extra key: a LoRA adapter, images; unused today)
//! hash  = SHA-256(msg)[0..16]
//! ```
//!
//! 128 bits keep collisions out of reach (a lookup also compares the block's tokens, parent and
//! extra key, so a collision would only be a miss, except through a colliding parent); SHA-256
//! makes them infeasible to craft, which a seeded-per-process hash had bought before. The hash
//! runs once per full block when it is cached and once per looked-up block at admission.

use sha2::{Digest, Sha256};

use oxllm_core::TokenId;

/// The chained hash of one full block and, through its parent, of all blocks before it: the
/// first 16 bytes of a SHA-256 digest, read big-endian (so its hex form is the digest's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub u128);

impl BlockHash {
    /// The parent of the first block: `SHA-256("oxllm-kv-block-hash-v1")[0..16]`.
    pub const ROOT: BlockHash = BlockHash(0x704f_d8f1_1f2e_994f_59e1_8ec4_852a_38d9);

    /// The domain string whose digest is [`Self::ROOT`].
    pub const SCHEME: &'static str = "oxllm-kv-block-hash-v1";

    /// The 16 bytes the scheme feeds to a child's hash and publishes (as hex) in events.
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// 32 lowercase hex digits: the form KV-cache events carry.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }
}

impl std::fmt::Display for BlockHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Hash of a block holding `tokens`, following the block hashed `parent` (None for the first
/// block, which chains from [`BlockHash::ROOT`]). `extra` salts the hash for inputs the tokens
/// do not show (a LoRA adapter, images).
pub fn hash_block(parent: Option<BlockHash>, tokens: &[TokenId], extra: Option<u64>) -> BlockHash {
    let mut sha = Sha256::new();
    sha.update(parent.unwrap_or(BlockHash::ROOT).to_bytes());
    // A block never holds 2^32 tokens (block ids and sizes are u32-bounded); saturate anyway.
    sha.update(
        u32::try_from(tokens.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    // Tokens go in through a stack buffer: one `update` per 64 tokens instead of per token.
    let mut buf = [0u8; 256];
    for chunk in tokens.chunks(64) {
        for (dst, &t) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        sha.update(&buf[..chunk.len() * 4]);
    }
    match extra {
        None => sha.update([0u8]),
        Some(e) => {
            sha.update([1u8]);
            sha.update(e.to_le_bytes());
        }
    }
    let digest = sha.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    BlockHash(u128::from_be_bytes(first))
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

    #[test]
    fn root_is_the_digest_of_the_scheme_name() {
        let digest = Sha256::digest(BlockHash::SCHEME.as_bytes());
        assert_eq!(BlockHash::ROOT.to_bytes()[..], digest[..16]);
        assert_eq!(BlockHash::ROOT.to_hex(), "704fd8f11f2e994f59e18ec4852a38d9");
    }

    #[test]
    fn the_stack_buffer_matches_one_plain_message() {
        // Longer than one 64-token chunk, so the chunked feeding is exercised.
        let tokens: Vec<TokenId> = (0..150).map(|i| i * 7919 + 3).collect();
        let parent = hash_block(None, &[9], None);
        let mut msg = parent.to_bytes().to_vec();
        msg.extend_from_slice(&150u32.to_le_bytes());
        for t in &tokens {
            msg.extend_from_slice(&t.to_le_bytes());
        }
        msg.push(1);
        msg.extend_from_slice(&42u64.to_le_bytes());
        let digest = Sha256::digest(&msg);
        let got = hash_block(Some(parent), &tokens, Some(42));
        assert_eq!(got.to_bytes()[..], digest[..16]);
    }
}
