//! The block hash's cost per full block (16 and 256 tokens), beside the per-process seeded
//! SipHash pair it replaced (the peer, measured in the same run).
//! Run: `cargo bench -p oxllm-kv --bench block_hash`.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use oxllm_kv::{hash_block, BlockHash};

/// The former scheme: two randomly keyed SipHash-1-3 instances over the same fields.
fn siphash_pair(seeds: &(RandomState, RandomState), parent: u128, tokens: &[u32]) -> u128 {
    let feed = |mut h: std::collections::hash_map::DefaultHasher| {
        h.write_u8(1);
        h.write_u128(parent);
        h.write_usize(tokens.len());
        for &t in tokens {
            h.write_u32(t);
        }
        h.write_u8(0);
        h.finish()
    };
    let lo = feed(seeds.0.build_hasher());
    let hi = feed(seeds.1.build_hasher());
    (u128::from(hi) << 64) | u128::from(lo)
}

fn bench(c: &mut Criterion) {
    let seeds = (RandomState::new(), RandomState::new());
    let mut g = c.benchmark_group("block_hash");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    for block_size in [16usize, 256] {
        let tokens: Vec<u32> = (0..block_size as u32).map(|i| i * 7919 % 49152).collect();
        let parent = BlockHash(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        g.bench_function(format!("sha256_v1/{block_size}"), |b| {
            b.iter(|| hash_block(black_box(Some(parent)), black_box(&tokens), None))
        });
        g.bench_function(format!("siphash_pair/{block_size}"), |b| {
            b.iter(|| siphash_pair(&seeds, black_box(parent.0), black_box(&tokens)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
