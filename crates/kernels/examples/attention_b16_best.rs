//! The attention of one batch-16 decode step of SmolLM2's shape (9 heads, 3 KV heads, head
//! size 64, block size 16) at a given context: 30 layers, each with its own half-float K/V
//! cache, every sequence's blocks scattered over the pool, so that, as in the engine, the
//! step reads about 2.4 MB of cache per layer at context 192 and the caches of all layers
//! do not fit a core's L2. Times whole steps (30 calls) on the given threads and prints the best of
//! `ITERS` and a checksum of the last step's outputs (two builds computing the same thing
//! print the same checksum).
//!
//! `cargo run --release -p oxllm-kernels --example attention_b16_best -- ITERS [CONTEXT] [BATCH]
//! [THREADS]` (context 192, batch 16, 1 thread unless given). With `OXLLM_ISA=avx2` on AVX-512 hosts it runs the
//! kernels a CPU without AVX-512 runs.

use std::process::ExitCode;
use std::time::Instant;

use oxllm_kernels::attention::{
    paged_attention, set_decode_split, store_kv, AttnMetadata, AttnShape,
};
use oxllm_kernels::pool::ThreadPool;

const LAYERS: usize = 30;
const BS: usize = 16;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: usize| {
        args.get(i)
            .map_or(Some(default), |s| s.parse::<usize>().ok())
            .filter(|&v| v > 0)
    };
    let (Some(iters), Some(ctx), Some(batch), Some(threads)) = (
        args.first()
            .and_then(|s| s.parse::<usize>().ok())
            .filter(|&v| v > 0),
        num(1, 192),
        num(2, 16),
        num(3, 1),
    ) else {
        eprintln!("usage: attention_b16_best ITERS [CONTEXT] [BATCH] [THREADS] (all > 0)");
        return ExitCode::FAILURE;
    };
    run(iters, ctx, batch, threads);
    ExitCode::SUCCESS
}

fn run(iters: usize, ctx: usize, batch: usize, threads: usize) {
    let pool = ThreadPool::new(threads);
    let shape = AttnShape {
        n_heads: 9,
        n_kv_heads: 3,
        head_dim: 64,
        scale: 0.125,
    };
    let (qw, kw) = (9 * 64, 3 * 64);
    let per_seq = ctx.div_ceil(BS);
    let n_blocks = batch * per_seq;
    let mut state = 23u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    // A fixed shuffle of the pool's blocks: sequence s owns blocks table[s * per_seq..].
    let mut table: Vec<u32> = (0..n_blocks as u32).collect();
    for i in (1..table.len()).rev() {
        table.swap(i, next() as usize % (i + 1));
    }
    let mut val = || (next() % 2001) as f32 / 1000.0 - 1.0;
    let slots: Vec<i32> = (0..batch * ctx)
        .map(|t| {
            let (s, p) = (t / ctx, t % ctx);
            (table[s * per_seq + p / BS] as usize * BS + p % BS) as i32
        })
        .collect();
    let caches: Vec<(Vec<half::f16>, Vec<half::f16>)> = (0..LAYERS)
        .map(|_| {
            let k: Vec<f32> = (0..batch * ctx * kw).map(|_| val()).collect();
            let v: Vec<f32> = (0..batch * ctx * kw).map(|_| val()).collect();
            let mut kc = vec![half::f16::ZERO; n_blocks * BS * kw];
            let mut vc = vec![half::f16::ZERO; n_blocks * BS * kw];
            store_kv(&mut kc, &mut vc, &slots, &k, &v, kw);
            (kc, vc)
        })
        .collect();
    let q: Vec<f32> = (0..batch * qw).map(|_| val()).collect();
    let qsl: Vec<u32> = (0..=batch as u32).collect();
    let lens = vec![ctx as u32; batch];
    let meta = AttnMetadata {
        query_start_loc: &qsl,
        seq_lens: &lens,
        block_tables: &table,
        block_table_stride: per_seq,
        block_size: BS,
    };
    let mut out = vec![0f32; q.len()];
    // Steps alternate between whole and split decode attention (when the split applies), so
    // a noisy machine weighs on both alike.
    let mut best = [f64::INFINITY; 2];
    for i in 0..2 * iters {
        set_decode_split(i % 2 == 1);
        let t = Instant::now();
        for (kc, vc) in &caches {
            paged_attention(&pool, &q, kc, vc, &meta, shape, &mut out);
        }
        best[i % 2] = best[i % 2].min(t.elapsed().as_secs_f64());
    }
    let mut sum = 0f64;
    for (kc, vc) in &caches {
        paged_attention(&pool, &q, kc, vc, &meta, shape, &mut out);
        sum += out.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    let macs = (2 * LAYERS * batch * ctx * qw) as f64;
    println!(
        "attention, {LAYERS} layers, batch {batch}, context {ctx}, f16 cache, {threads} threads: best of {iters} {:.1} us per step whole, {:.1} us split ({:.2} / {:.2} GMAC/s), checksum {sum}",
        best[0] * 1e6,
        best[1] * 1e6,
        macs / best[0] / 1e9,
        macs / best[1] / 1e9
    );
}
