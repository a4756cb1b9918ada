//! Property tests: random add / step / abort / finish sequences over a small pool, with prompts
//! sharing prefixes, keep every KV invariant after every operation, and the KV-cache events
//! replayed by a mirror (as a router would) always give exactly the pool's cached hashes.

use std::collections::{BTreeMap, BTreeSet};

use oxllm_core::{ReqId, TokenId};
use oxllm_kv::{hash_block, BlockHash, ComputedBlocks, KvCacheManager, KvEvent};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// A request whose prompt starts with `prefix_len` tokens of shared prefix `which`.
    Add {
        which: u8,
        prefix_len: usize,
        suffix: Vec<TokenId>,
        chunk: usize,
    },
    /// Computes up to `chunk` more tokens of a live request (or decodes one sampled token).
    Step {
        pick: usize,
        chunk: usize,
        sampled: TokenId,
    },
    Abort {
        pick: usize,
    },
    ResetCache,
    /// A new event consumer: the log records a snapshot of the cache.
    Snapshot,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0usize..20, prop::collection::vec(0u32..4, 0..6), 1usize..12).prop_map(
            |(which, prefix_len, suffix, chunk)| Op::Add { which, prefix_len, suffix, chunk }
        ),
        6 => (any::<usize>(), 1usize..8, 0u32..4)
            .prop_map(|(pick, chunk, sampled)| Op::Step { pick, chunk, sampled }),
        1 => any::<usize>().prop_map(|pick| Op::Abort { pick }),
        1 => Just(Op::ResetCache),
        1 => Just(Op::Snapshot),
    ]
}

struct Live {
    tokens: Vec<TokenId>,
    computed: usize,
    table: Vec<u32>,
}

fn shared_prefix(which: u8, len: usize) -> Vec<TokenId> {
    (0..len as u32)
        .map(|i| (i * 31 + u32::from(which) * 1000) % 97)
        .collect()
}

fn check(kv: &KvCacheManager, live: &mut BTreeMap<ReqId, Live>) -> Result<(), TestCaseError> {
    if let Err(e) = kv.check_invariants() {
        return Err(TestCaseError::fail(e.to_string()));
    }
    let bs = kv.block_size();
    let mut used = std::collections::BTreeSet::new();
    for (id, req) in live.iter_mut() {
        let table = kv.block_table(*id);
        prop_assert!(
            table.starts_with(&req.table),
            "table of {} not append-only",
            id
        );
        prop_assert!(
            table.len() * bs >= req.computed,
            "table of {} too short",
            id
        );
        req.table = table.to_vec();
        used.extend(table.iter().copied());
    }
    prop_assert_eq!(kv.num_free_blocks() + used.len(), kv.num_usable_blocks());
    Ok(())
}

/// Applies the events since the last call to `mirror`, checking each stored chain's hashes
/// against a recomputation from its parent and tokens, then compares with the pool's index.
fn replay_events(
    kv: &mut KvCacheManager,
    mirror: &mut BTreeSet<BlockHash>,
) -> Result<(), TestCaseError> {
    for event in kv.take_events() {
        match event {
            KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                extra,
            } => {
                prop_assert_eq!(block_size, kv.block_size());
                prop_assert_eq!(token_ids.len(), block_hashes.len() * block_size);
                let mut parent = parent_block_hash;
                for (hash, chunk) in block_hashes.iter().zip(token_ids.chunks_exact(block_size)) {
                    prop_assert_eq!(*hash, hash_block(parent, chunk, extra));
                    prop_assert!(mirror.insert(*hash), "stored twice: {}", hash);
                    parent = Some(*hash);
                }
            }
            KvEvent::BlockRemoved { block_hashes } => {
                for hash in block_hashes {
                    prop_assert!(mirror.remove(&hash), "removed unknown {}", hash);
                }
            }
            KvEvent::AllBlocksCleared => mirror.clear(),
        }
    }
    let pool = kv.pool();
    let cached: BTreeSet<BlockHash> = (1..pool.num_blocks() as u32)
        .filter_map(|id| pool.cached_hash(id))
        .collect();
    prop_assert_eq!(&cached, mirror);
    Ok(())
}

fn run(
    num_blocks: usize,
    block_size: usize,
    caching: bool,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut kv = KvCacheManager::new(num_blocks, block_size, caching).unwrap();
    kv.enable_events();
    let mut mirror = BTreeSet::new();
    let mut live: BTreeMap<ReqId, Live> = BTreeMap::new();
    let mut next_id: ReqId = 0;
    for op in ops {
        match op {
            Op::Add {
                which,
                prefix_len,
                suffix,
                chunk,
            } => {
                let mut tokens = shared_prefix(which, prefix_len);
                tokens.extend(suffix);
                if tokens.is_empty() {
                    continue;
                }
                let id = next_id;
                next_id += 1;
                let hit = kv.get_computed_blocks(&tokens, None);
                let hit_tokens = hit.num_computed_tokens(block_size);
                prop_assert!(
                    hit_tokens < tokens.len(),
                    "the last token must be recomputed"
                );
                for (i, &b) in hit.blocks().iter().enumerate() {
                    let want = &tokens[i * block_size..(i + 1) * block_size];
                    prop_assert_eq!(kv.pool().cached_tokens(b), Some(want));
                }
                let n = chunk.min(tokens.len() - hit_tokens);
                let free_before = kv.num_free_blocks();
                match kv.allocate_slots(id, hit_tokens + n, &hit).unwrap() {
                    None => {
                        prop_assert_eq!(kv.num_free_blocks(), free_before);
                        prop_assert!(kv.block_table(id).is_empty());
                    }
                    Some(_) => {
                        prop_assert_eq!(&kv.block_table(id)[..hit.blocks().len()], hit.blocks());
                        let computed = hit_tokens + n;
                        kv.cache_full_blocks(id, &tokens, computed, None).unwrap();
                        live.insert(
                            id,
                            Live {
                                tokens,
                                computed,
                                table: Vec::new(),
                            },
                        );
                    }
                }
            }
            Op::Step {
                pick,
                chunk,
                sampled,
            } => {
                let Some(&id) = live.keys().nth(pick % live.len().max(1)) else {
                    continue;
                };
                let req = live.get_mut(&id).unwrap();
                if req.computed == req.tokens.len() {
                    req.tokens.push(sampled);
                }
                let n = chunk.min(req.tokens.len() - req.computed);
                let before = kv.block_table(id).to_vec();
                match kv
                    .allocate_slots(id, req.computed + n, &ComputedBlocks::default())
                    .unwrap()
                {
                    // Out of blocks: preempt it, as a scheduler would.
                    None => {
                        prop_assert_eq!(kv.block_table(id), &before[..]);
                        kv.free(id);
                        live.remove(&id);
                    }
                    Some(_) => {
                        req.computed += n;
                        kv.cache_full_blocks(id, &req.tokens, req.computed, None)
                            .unwrap();
                    }
                }
            }
            Op::Abort { pick } => {
                let Some(&id) = live.keys().nth(pick % live.len().max(1)) else {
                    continue;
                };
                prop_assert!(kv.free(id));
                live.remove(&id);
            }
            Op::ResetCache => {
                kv.reset_prefix_cache();
            }
            Op::Snapshot => {
                // A consumer starting here, from an empty mirror, must rebuild the whole index.
                replay_events(&mut kv, &mut mirror)?;
                kv.enable_events();
                mirror = BTreeSet::from([BlockHash(u128::MAX)]);
            }
        }
        check(&kv, &mut live)?;
        replay_events(&mut kv, &mut mirror)?;
    }
    for id in live.keys() {
        kv.free(*id);
    }
    prop_assert_eq!(kv.num_free_blocks(), kv.num_usable_blocks());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn invariants_hold_with_prefix_caching(
        num_blocks in 2usize..24,
        block_size in 1usize..5,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        run(num_blocks, block_size, true, ops)?;
    }

    #[test]
    fn invariants_hold_without_prefix_caching(
        num_blocks in 2usize..24,
        block_size in 1usize..5,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        run(num_blocks, block_size, false, ops)?;
    }
}
