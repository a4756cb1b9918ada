//! paged_attention: a 512-token prefill, the last 512-token chunk of a 2048-token prefill and a
//! decode step at context 512 with SmolLM2's shape
//! (9 heads, 3 kv heads, head_dim 64, block size 16), the tiled AVX2 path against the scalar
//! path and the tiled path over an f16 cache, 2 threads; then the softmax of one score row (context 192) and the SiLU gate of a
//! batch-16 MLP (16 x 1536), vector `exp` against the scalar libm references; and a batch-16
//! decode step's attention at context 192 over 30 layers' f16 caches with shuffled blocks
//! (about 71 MB, more than a core's L2, as in the engine; `-- decode_b16`). Run:
//! `cargo bench -p oxllm-kernels --bench attention` (with `OXLLM_ISA=avx2` for the path of
//! CPUs without AVX-512).

use criterion::{criterion_group, criterion_main, Criterion};
use oxllm_kernels::attention::{
    paged_attention, paged_attention_scalar, store_kv, AttnMetadata, AttnShape,
};
use oxllm_kernels::pool::ThreadPool;
use std::time::Duration;

fn bench(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    let shape = AttnShape {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
    };
    // The cache holds 2048 tokens; a case reads the first `len` of them.
    let (qw, kw, bs, len) = (9 * 64, 3 * 64, 16, 2048usize);
    let val = |i: usize, m: usize| ((i * m % 61) as f32 - 30.0) * 0.01;
    let k: Vec<f32> = (0..len * kw).map(|i| val(i, 7)).collect();
    let v: Vec<f32> = (0..len * kw).map(|i| val(i, 11)).collect();
    // Blocks in reverse order, so the table matters.
    let n_blocks = len / bs;
    let table: Vec<u32> = (0..n_blocks as u32).rev().collect();
    let slots: Vec<i32> = (0..len)
        .map(|p| (table[p / bs] as usize * bs + p % bs) as i32)
        .collect();
    let mut kc = vec![0f32; len * kw];
    let mut vc = vec![0f32; len * kw];
    store_kv(&mut kc, &mut vc, &slots, &k, &v, kw);
    let mut kh = vec![half::f16::ZERO; len * kw];
    let mut vh = vec![half::f16::ZERO; len * kw];
    store_kv(&mut kh, &mut vh, &slots, &k, &v, kw);
    let mut g = c.benchmark_group("attention");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    // (context, queries at its end): a 512-token prefill, the last 512-token chunk of a
    // 2048-token prompt (where a long prefill spends its attention time), a decode step.
    for (ctx, q_len, id) in [
        (512, 512, "prefill512"),
        (2048, 512, "prefill512_ctx2048"),
        (512, 1, "decode_ctx512"),
    ] {
        let q: Vec<f32> = (0..q_len * qw).map(|i| val(i, 13)).collect();
        let qsl = [0, q_len as u32];
        let lens = [ctx as u32];
        let meta = AttnMetadata {
            query_start_loc: &qsl,
            seq_lens: &lens,
            block_tables: &table,
            block_table_stride: n_blocks,
            block_size: bs,
        };
        let mut out = vec![0f32; q.len()];
        g.bench_function(format!("tiled/{id}"), |b| {
            b.iter(|| paged_attention(&pool, &q, &kc, &vc, &meta, shape, &mut out))
        });
        g.bench_function(format!("tiled_f16/{id}"), |b| {
            b.iter(|| paged_attention(&pool, &q, &kh, &vh, &meta, shape, &mut out))
        });
        g.bench_function(format!("scalar/{id}"), |b| {
            b.iter(|| paged_attention_scalar(&pool, &q, &kc, &vc, &meta, shape, &mut out))
        });
    }
    g.finish();
}

fn bench_exp_ops(c: &mut Criterion) {
    use oxllm_kernels::ops::{silu_mul_in_place, silu_mul_scalar, softmax_scalar, softmax_vexp};
    let mut g = c.benchmark_group("exp_ops");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let scores: Vec<f32> = (0..192)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.7)
        .collect();
    let mut row = scores.clone();
    g.bench_function("softmax_vexp/192", |b| {
        b.iter(|| {
            row.copy_from_slice(&scores);
            softmax_vexp(&mut row)
        })
    });
    g.bench_function("softmax_scalar/192", |b| {
        b.iter(|| {
            row.copy_from_slice(&scores);
            softmax_scalar(&mut row)
        })
    });
    let n = 16 * 1536;
    let gate: Vec<f32> = (0..n)
        .map(|i| ((i * 29 % 41) as f32 - 20.0) * 0.3)
        .collect();
    let up: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.3).collect();
    let mut buf = gate.clone();
    g.bench_function("silu_mul/16x1536", |b| {
        b.iter(|| {
            buf.copy_from_slice(&gate);
            silu_mul_in_place(&mut buf, &up)
        })
    });
    g.bench_function("silu_mul_scalar/16x1536", |b| {
        b.iter(|| {
            buf.copy_from_slice(&gate);
            silu_mul_scalar(&mut buf, &up)
        })
    });
    g.finish();
}

/// Attention of a batch-16 decode step at context 192: 30 layers, each with its own f16 K/V
/// cache, every sequence's blocks shuffled over the pool (the shape of
/// `examples/attention_b16_best.rs`, which times the same step on one thread).
fn bench_decode_b16(c: &mut Criterion) {
    const LAYERS: usize = 30;
    let pool = ThreadPool::new(2);
    let shape = AttnShape {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
    };
    let (qw, kw, bs, ctx, batch) = (9 * 64, 3 * 64, 16, 192usize, 16usize);
    let per_seq = ctx / bs;
    let n_blocks = batch * per_seq;
    // A fixed shuffle (multiplication by a unit mod n_blocks).
    let table: Vec<u32> = (0..n_blocks).map(|i| (i * 97 % n_blocks) as u32).collect();
    let slots: Vec<i32> = (0..batch * ctx)
        .map(|t| (table[t / bs] as usize * bs + t % bs) as i32)
        .collect();
    let val = |i: usize, m: usize| ((i * m % 61) as f32 - 30.0) * 0.01;
    let caches: Vec<(Vec<half::f16>, Vec<half::f16>)> = (0..LAYERS)
        .map(|l| {
            let k: Vec<f32> = (0..batch * ctx * kw).map(|i| val(i + l, 7)).collect();
            let v: Vec<f32> = (0..batch * ctx * kw).map(|i| val(i + l, 11)).collect();
            let mut kc = vec![half::f16::ZERO; n_blocks * bs * kw];
            let mut vc = vec![half::f16::ZERO; n_blocks * bs * kw];
            store_kv(&mut kc, &mut vc, &slots, &k, &v, kw);
            (kc, vc)
        })
        .collect();
    let q: Vec<f32> = (0..batch * qw).map(|i| val(i, 13)).collect();
    let qsl: Vec<u32> = (0..=batch as u32).collect();
    let lens = vec![ctx as u32; batch];
    let meta = AttnMetadata {
        query_start_loc: &qsl,
        seq_lens: &lens,
        block_tables: &table,
        block_table_stride: per_seq,
        block_size: bs,
    };
    let mut out = vec![0f32; q.len()];
    let mut g = c.benchmark_group("attention");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    g.bench_function("tiled_f16/decode_b16_ctx192_30layers", |b| {
        b.iter(|| {
            for (kc, vc) in &caches {
                paged_attention(&pool, &q, kc, vc, &meta, shape, &mut out);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench, bench_exp_ops, bench_decode_b16);
criterion_main!(benches);
