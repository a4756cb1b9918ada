//! Pins the documented block-hash scheme (docs/DEPLOY.md, "KV-cache events"): these values were
//! computed independently, in Python with hashlib, from the scheme's text. A change here breaks
//! every router that recomputes hashes, so it must come with a new scheme version.

use oxllm_core::TokenId;
use oxllm_kv::{hash_block, BlockHash, KvCacheManager, KvEvent};

fn first_32() -> (Vec<TokenId>, Vec<TokenId>) {
    ((1..=16).collect(), (17..=32).collect())
}

#[test]
fn hashes_match_the_documented_scheme() {
    let (a, b) = first_32();
    let first = hash_block(None, &a, None);
    assert_eq!(first.to_hex(), "398a1835b6a076436e3dea9d500bc1b5");
    let second = hash_block(Some(first), &b, None);
    assert_eq!(second.to_hex(), "e451c62e0ab4670d32ecd51cf15a3fd4");
    assert_eq!(
        hash_block(None, &a, Some(7)).to_hex(),
        "63ef7d36f8a76f197e228544ebfc0bc1"
    );
    // The first block's parent is the root: naming it explicitly changes nothing.
    assert_eq!(hash_block(Some(BlockHash::ROOT), &a, None), first);
}

#[test]
fn the_cache_names_blocks_by_the_documented_hashes() {
    let (a, b) = first_32();
    let prompt: Vec<TokenId> = a.iter().chain(&b).copied().chain([99]).collect();
    let mut kv = KvCacheManager::new(8, 16, true).unwrap();
    kv.enable_events();
    kv.allocate_slots(1, prompt.len(), &Default::default())
        .unwrap()
        .unwrap();
    kv.cache_full_blocks(1, &prompt, prompt.len(), None)
        .unwrap();
    let table = kv.block_table(1).to_vec();
    let hashes: Vec<String> = table[..2]
        .iter()
        .map(|&id| kv.pool().cached_hash(id).unwrap().to_hex())
        .collect();
    assert_eq!(
        hashes,
        [
            "398a1835b6a076436e3dea9d500bc1b5",
            "e451c62e0ab4670d32ecd51cf15a3fd4"
        ]
    );
    assert_eq!(
        kv.pool().cached_hash(table[2]),
        None,
        "the partial block is not cached"
    );
    let events = kv.take_events();
    let stored = KvEvent::BlockStored {
        block_hashes: vec![
            kv.pool().cached_hash(table[0]).unwrap(),
            kv.pool().cached_hash(table[1]).unwrap(),
        ],
        parent_block_hash: None,
        token_ids: prompt[..32].to_vec(),
        block_size: 16,
        extra: None,
    };
    // Enabling records a snapshot of the (empty) cache first; then one chain, one event.
    assert_eq!(events, [KvEvent::AllBlocksCleared, stored.clone()]);
    // A later consumer's snapshot names the same blocks.
    kv.enable_events();
    assert_eq!(kv.take_events(), [KvEvent::AllBlocksCleared, stored]);
}

/// A rough per-block cost, printed for the record (run with `--nocapture`); the assertion is
/// only a sanity bound far above any healthy machine, loaded or not. The bench
/// (`cargo bench -p oxllm-kv --bench block_hash`) is the measurement.
#[test]
fn hashing_a_block_is_cheap() {
    let tokens: Vec<TokenId> = (0..16).map(|i| i * 7919).collect();
    let n = 20_000;
    let start = std::time::Instant::now();
    let mut parent = None;
    for _ in 0..n {
        parent = Some(hash_block(parent, &tokens, None));
    }
    let per_block = start.elapsed() / n;
    println!("block hash (16 tokens): {per_block:?} per block, {parent:?}");
    assert!(
        per_block < std::time::Duration::from_micros(50),
        "{per_block:?}"
    );
}
