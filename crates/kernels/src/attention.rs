//! Causal grouped-query attention over a paged K/V cache, for a flat batch that mixes prefill
//! chunks and decode steps of many sequences.
//!
//! Layout: one layer's cache is `[num_slots, n_kv_heads * head_dim]` for K and for V, where a
//! slot is `block * block_size + offset`. Sequence `s` owns query rows
//! `query_start_loc[s]..query_start_loc[s + 1]`; those are the last tokens of its context of
//! `seq_lens[s]` tokens, so query `j` of `q_len` sits at position `seq_len - q_len + j` and sees
//! keys `0..=position`. Keys are found through `block_tables[s * stride + pos / block_size]`.
//! Rows with slot -1 in `store_kv` are padding and are skipped; a sequence with length 0 is
//! skipped by attention. No branch depends on tensor values.

use std::sync::atomic::{AtomicUsize, Ordering};

use oxllm_core::DType;

use crate::ops::softmax_in_place;
use crate::pool::{SharedMut, ThreadPool};
use crate::quant;

#[cfg(target_arch = "x86_64")]
mod tiled;

/// Allows (the default, unless the environment sets `OXLLM_ATTN_SPLIT=0`) or forbids, for the
/// whole process, splitting a decode step's attention scores over key ranges when its rows
/// are too few for the pool. Results are the same bits either way; for A/B timings only.
pub fn set_decode_split(on: bool) {
    #[cfg(target_arch = "x86_64")]
    tiled::set_split_allowed(on);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = on;
}

/// Where each sequence's tokens live, in the flat form a runner keeps in plain buffers.
#[derive(Clone, Copy, Debug)]
pub struct AttnMetadata<'a> {
    /// `num_seqs + 1` offsets into the batch's token rows.
    pub query_start_loc: &'a [u32],
    /// Context length of each sequence after this step (cached + new tokens).
    pub seq_lens: &'a [u32],
    /// Block ids, `block_table_stride` per sequence.
    pub block_tables: &'a [u32],
    pub block_table_stride: usize,
    pub block_size: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

/// The element type of a K/V cache: `f32`, or `f16` at half the bytes (rounded to nearest on
/// store, widened exactly on load; attention itself computes in f32 either way). At batch 16
/// a decode step reads more K/V than weights, so the half-width cache is what keeps attention
/// from being bandwidth-bound.
pub trait KvElem: Copy + Default + Send + Sync + 'static {
    /// `Self` is `f32` (rows are read in place, not widened).
    const IS_F32: bool;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    /// `dst[i] = from_f32(src[i])`, vectorised where the type allows.
    fn store_row(dst: &mut [Self], src: &[f32]) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = Self::from_f32(x);
        }
    }
    /// Eight values at `p` as f32 lanes.
    ///
    /// # Safety
    /// AVX2 and F16C are available; `p` is valid for 8 elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
    /// Sixteen values at `p` as f32 lanes.
    ///
    /// # Safety
    /// AVX-512F is available; `p` is valid for 16 elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self) -> std::arch::x86_64::__m512;
}

impl KvElem for f32 {
    const IS_F32: bool = true;
    #[inline(always)]
    fn from_f32(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            std::arch::x86_64::_mm256_loadu_ps(p)
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            std::arch::x86_64::_mm512_loadu_ps(p)
        }
    }
}

impl KvElem for half::f16 {
    const IS_F32: bool = false;
    #[inline(always)]
    fn from_f32(x: f32) -> half::f16 {
        half::f16::from_f32(x)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
    fn store_row(dst: &mut [half::f16], src: &[f32]) {
        use half::slice::HalfFloatSliceExt;
        // F16C's round-to-nearest-even where the CPU has it: the same bits as `from_f32`.
        dst.convert_from_f32_slice(src);
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const half::f16) -> std::arch::x86_64::__m256 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            use std::arch::x86_64::*;
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const half::f16) -> std::arch::x86_64::__m512 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            use std::arch::x86_64::*;
            _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
        }
    }
}

/// Writes each token's K and V rows (`kv_width` values) into its slot; slot -1 is skipped.
pub fn store_kv<E: KvElem>(
    k_cache: &mut [E],
    v_cache: &mut [E],
    slot_mapping: &[i32],
    k: &[f32],
    v: &[f32],
    kv_width: usize,
) {
    for (t, &slot) in slot_mapping.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let dst = slot as usize * kv_width;
        let rows = [(&mut *k_cache, k), (&mut *v_cache, v)];
        for (cache, src) in rows {
            E::store_row(
                &mut cache[dst..dst + kv_width],
                &src[t * kv_width..(t + 1) * kv_width],
            );
        }
    }
}

/// `out[t, h] = softmax(q[t, h] · K[0..=pos]ᵀ * scale) · V[0..=pos]` for each token and head.
///
/// Batch invariant: a query's output is bit-identical whatever the other queries and
/// sequences of the batch (each query's scores, softmax and value sum run the same operations
/// in the same order, whatever tile it lands in). On AVX2 with `head_dim % 8 == 0`, work items
/// are (sequence, head, tile of up to 8 consecutive queries): the tile shares every K and V
/// row it loads, one block of keys at a time; decode rows too few for the pool are split
/// further, over key ranges (same bits; see `tiled/split.rs`); elsewhere
/// [`paged_attention_scalar`].
pub fn paged_attention<E: KvElem>(
    pool: &ThreadPool,
    q: &[f32],
    k_cache: &[E],
    v_cache: &[E],
    meta: &AttnMetadata<'_>,
    shape: AttnShape,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if shape.head_dim.is_multiple_of(8)
        && shape.head_dim > 0
        && crate::quant::detected_isa() == crate::quant::Isa::Avx2
    {
        tiled::paged_attention_tiled(pool, q, k_cache, v_cache, meta, shape, out);
        return;
    }
    paged_attention_scalar(pool, q, k_cache, v_cache, meta, shape, out);
}

/// Reference path of [`paged_attention`]: one (token, head) per work item, a `vec_dot` per key
/// and a scalar loop per value row. Any head size and CPU; kept as the benches' baseline.
pub fn paged_attention_scalar<E: KvElem>(
    pool: &ThreadPool,
    q: &[f32],
    k_cache: &[E],
    v_cache: &[E],
    meta: &AttnMetadata<'_>,
    shape: AttnShape,
    out: &mut [f32],
) {
    let AttnShape {
        n_heads,
        n_kv_heads,
        head_dim,
        scale,
    } = shape;
    let q_width = n_heads * head_dim;
    let kv_width = n_kv_heads * head_dim;
    let group = n_heads / n_kv_heads;
    let n_tokens = q.len() / q_width;
    assert_eq!(out.len(), q.len());
    let num_seqs = meta.seq_lens.len();
    // Map each token row to its sequence once; work items are (token, head).
    let mut token_seq = vec![u32::MAX; n_tokens];
    for s in 0..num_seqs {
        let (a, b) = (
            meta.query_start_loc[s] as usize,
            meta.query_start_loc[s + 1] as usize,
        );
        for t in token_seq.iter_mut().take(b).skip(a) {
            *t = s as u32;
        }
    }
    let max_len = meta.seq_lens.iter().copied().max().unwrap_or(0) as usize;
    let dot = quant::vec_dot(DType::F32).unwrap_or(dot_f32_bytes_scalar);
    let items = n_tokens * n_heads;
    const CHUNK: usize = 4;
    let next = AtomicUsize::new(0);
    let out_ptr = SharedMut::new(out);
    pool.run_dynamic(|_, _| {
        let mut scores = vec![0f32; max_len];
        let mut acc = vec![0f32; head_dim];
        let mut key = vec![0f32; head_dim];
        loop {
            let start = next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= items {
                break;
            }
            for item in start..(start + CHUNK).min(items) {
                let (t, h) = (item / n_heads, item % n_heads);
                // SAFETY: each (token, head) output row is written by exactly one item.
                let o = unsafe { out_ptr.slice(t * q_width + h * head_dim, head_dim) };
                let s = token_seq[t];
                if s == u32::MAX || meta.seq_lens[s as usize] == 0 {
                    o.fill(0.0);
                    continue;
                }
                let s = s as usize;
                let q_start = meta.query_start_loc[s] as usize;
                let q_len = meta.query_start_loc[s + 1] as usize - q_start;
                let seq_len = meta.seq_lens[s] as usize;
                let pos = seq_len - q_len + (t - q_start);
                let table = &meta.block_tables[s * meta.block_table_stride..];
                let kvh = h / group;
                let qv = as_bytes(&q[t * q_width + h * head_dim..][..head_dim]);
                let ctx = pos + 1;
                for (p, sc) in scores[..ctx].iter_mut().enumerate() {
                    let slot =
                        table[p / meta.block_size] as usize * meta.block_size + p % meta.block_size;
                    let kr = &k_cache[slot * kv_width + kvh * head_dim..][..head_dim];
                    for (d, &x) in key.iter_mut().zip(kr) {
                        *d = x.to_f32();
                    }
                    *sc = dot(head_dim, qv, as_bytes(&key)) * scale;
                }
                softmax_in_place(&mut scores[..ctx]);
                acc.fill(0.0);
                for (p, &w) in scores[..ctx].iter().enumerate() {
                    let slot =
                        table[p / meta.block_size] as usize * meta.block_size + p % meta.block_size;
                    let vr = &v_cache[slot * kv_width + kvh * head_dim..][..head_dim];
                    for (a, &v) in acc.iter_mut().zip(vr) {
                        *a += w * v.to_f32();
                    }
                }
                o.copy_from_slice(&acc);
            }
        }
    });
}

fn as_bytes(x: &[f32]) -> &[u8] {
    // SAFETY: any f32 bit pattern is valid bytes; u8 has alignment 1.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), std::mem::size_of_val(x)) }
}

fn dot_f32_bytes_scalar(n: usize, a: &[u8], b: &[u8]) -> f32 {
    (0..n)
        .map(|i| {
            let x = f32::from_le_bytes([a[4 * i], a[4 * i + 1], a[4 * i + 2], a[4 * i + 3]]);
            let y = f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
            x * y
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense causal attention over contiguous K/V, as the reference.
    fn dense(q: &[f32], k: &[f32], v: &[f32], shape: AttnShape, offset: usize) -> Vec<f32> {
        let AttnShape {
            n_heads,
            n_kv_heads,
            head_dim,
            scale,
        } = shape;
        let qw = n_heads * head_dim;
        let kw = n_kv_heads * head_dim;
        let n = q.len() / qw;
        let mut out = vec![0.0; q.len()];
        for t in 0..n {
            let pos = offset + t;
            for h in 0..n_heads {
                let kvh = h / (n_heads / n_kv_heads);
                let mut s: Vec<f32> = (0..=pos)
                    .map(|p| {
                        (0..head_dim)
                            .map(|d| q[t * qw + h * head_dim + d] * k[p * kw + kvh * head_dim + d])
                            .sum::<f32>()
                            * scale
                    })
                    .collect();
                softmax_in_place(&mut s);
                for d in 0..head_dim {
                    out[t * qw + h * head_dim + d] = (0..=pos)
                        .map(|p| s[p] * v[p * kw + kvh * head_dim + d])
                        .sum();
                }
            }
        }
        out
    }

    #[test]
    fn paged_matches_dense_with_scattered_blocks_two_seqs_and_padding() {
        let pool = ThreadPool::new(2);
        let shape = AttnShape {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 8,
            scale: 0.35,
        };
        let (qw, kw, bs) = (32, 16, 4);
        let val = |i: usize, m: usize| ((i * m % 29) as f32 - 14.0) * 0.07;
        // seq A: 10 cached tokens + 3 new (prefill chunk); seq B: decode of 1 token at pos 6.
        let (a_len, a_new, b_len) = (13usize, 3usize, 7usize);
        let ka: Vec<f32> = (0..a_len * kw).map(|i| val(i, 7)).collect();
        let va: Vec<f32> = (0..a_len * kw).map(|i| val(i, 11)).collect();
        let kb: Vec<f32> = (0..b_len * kw).map(|i| val(i, 5)).collect();
        let vb: Vec<f32> = (0..b_len * kw).map(|i| val(i, 3)).collect();
        let table_a = [5u32, 0, 7, 2];
        let table_b = [3u32, 6, 0, 0];
        let mut kc = vec![0.0; 8 * bs * kw];
        let mut vc = vec![0.0; 8 * bs * kw];
        let slot = |table: &[u32], p: usize| (table[p / bs] as usize * bs + p % bs) as i32;
        let slots_a: Vec<i32> = (0..a_len).map(|p| slot(&table_a, p)).collect();
        let slots_b: Vec<i32> = (0..b_len).map(|p| slot(&table_b, p)).collect();
        store_kv(&mut kc, &mut vc, &slots_a, &ka, &va, kw);
        store_kv(&mut kc, &mut vc, &slots_b, &kb, &vb, kw);
        // padding row must not touch the cache
        let before = kc.clone();
        store_kv(&mut kc, &mut vc, &[-1], &vec![9.0; kw], &vec![9.0; kw], kw);
        assert_eq!(before, kc);

        let qa: Vec<f32> = (0..a_new * qw).map(|i| val(i, 13)).collect();
        let qb: Vec<f32> = (0..qw).map(|i| val(i, 17)).collect();
        let pad: Vec<f32> = vec![1.0; qw];
        let q = [qa.clone(), qb.clone(), pad].concat();
        let tables = [table_a, table_b, [0; 4]].concat();
        let meta = AttnMetadata {
            query_start_loc: &[0, 3, 4, 5],
            seq_lens: &[a_len as u32, b_len as u32, 0],
            block_tables: &tables,
            block_table_stride: 4,
            block_size: bs,
        };
        let mut out = vec![f32::NAN; q.len()];
        paged_attention(&pool, &q, &kc, &vc, &meta, shape, &mut out);
        let want_a = dense(&qa, &ka, &va, shape, a_len - a_new);
        let want_b = dense(&qb, &kb, &vb, shape, b_len - 1);
        for (i, w) in want_a.iter().chain(&want_b).enumerate() {
            assert!(
                (out[i] - w).abs() < 1e-5,
                "row value {i}: {} vs {w}",
                out[i]
            );
        }
        assert!(
            out[4 * qw..].iter().all(|&x| x == 0.0),
            "padded row is zero"
        );
    }

    /// (keys, values, block table, query count, query rows) of one sequence.
    type Seq<'a> = (&'a [f32], &'a [f32], &'a [u32], usize, &'a [f32]);

    /// Builds a paged cache holding `seqs` (each: keys, values, block table) and runs attention
    /// over the given query rows of each sequence (the last `q_len` positions).
    fn run_seqs(shape: AttnShape, bs: usize, seqs: &[Seq<'_>], scalar: bool) -> Vec<f32> {
        run_seqs_in::<f32>(shape, bs, seqs, scalar)
    }

    /// [`run_seqs`] with a cache of element type `E`.
    fn run_seqs_in<E: KvElem>(
        shape: AttnShape,
        bs: usize,
        seqs: &[Seq<'_>],
        scalar: bool,
    ) -> Vec<f32> {
        run_seqs_on::<E>(&ThreadPool::new(2), shape, bs, seqs, scalar)
    }

    /// [`run_seqs_in`] on the given pool.
    fn run_seqs_on<E: KvElem>(
        pool: &ThreadPool,
        shape: AttnShape,
        bs: usize,
        seqs: &[Seq<'_>],
        scalar: bool,
    ) -> Vec<f32> {
        let kw = shape.n_kv_heads * shape.head_dim;
        let stride = seqs.iter().map(|s| s.2.len()).max().unwrap();
        let n_blocks = seqs.iter().flat_map(|s| s.2.iter()).max().unwrap() + 1;
        let mut kc = vec![E::default(); n_blocks as usize * bs * kw];
        let mut vc = kc.clone();
        let (mut qsl, mut lens, mut tables, mut q) = (vec![0u32], vec![], vec![], vec![]);
        for (k, v, table, q_len, qs) in seqs {
            let len = k.len() / kw;
            let slots: Vec<i32> = (0..len)
                .map(|p| (table[p / bs] as usize * bs + p % bs) as i32)
                .collect();
            store_kv(&mut kc, &mut vc, &slots, k, v, kw);
            qsl.push(qsl.last().unwrap() + *q_len as u32);
            lens.push(len as u32);
            let mut t = table.to_vec();
            t.resize(stride, 0);
            tables.extend(t);
            q.extend_from_slice(qs);
        }
        let meta = AttnMetadata {
            query_start_loc: &qsl,
            seq_lens: &lens,
            block_tables: &tables,
            block_table_stride: stride,
            block_size: bs,
        };
        let mut out = vec![f32::NAN; q.len()];
        if scalar {
            paged_attention_scalar(pool, &q, &kc, &vc, &meta, shape, &mut out);
        } else {
            paged_attention(pool, &q, &kc, &vc, &meta, shape, &mut out);
        }
        out
    }

    /// Twelve decode rows at once (the tiled path then gives each sequence's KV heads to one
    /// item) give each sequence the bits it gets alone, and match the scalar path.
    #[test]
    fn many_decode_rows_match_each_alone() {
        let shape = AttnShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 16,
            scale: 0.2,
        };
        let (qw, kw, bs) = (6 * 16, 2 * 16, 4);
        let val = |i: usize, m: usize| ((i * m % 53) as f32 - 26.0) * 0.04;
        type Owned = (Vec<f32>, Vec<f32>, Vec<u32>, Vec<f32>);
        let data: Vec<Owned> = (0..12)
            .map(|s| {
                let len = 3 + 5 * s;
                let k = (0..len * kw).map(|i| val(i + s, 7)).collect();
                let v = (0..len * kw).map(|i| val(i + s, 11)).collect();
                let table = (0..len.div_ceil(bs) as u32)
                    .map(|b| b * 12 + s as u32)
                    .collect();
                let q = (0..qw).map(|i| val(i + 3 * s, 13)).collect();
                (k, v, table, q)
            })
            .collect();
        let seqs: Vec<Seq<'_>> = data
            .iter()
            .map(|(k, v, t, q)| (&k[..], &v[..], &t[..], 1, &q[..]))
            .collect();
        let all = run_seqs(shape, bs, &seqs, false);
        let scalar = run_seqs(shape, bs, &seqs, true);
        for (g, w) in all.iter().zip(&scalar) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
        for (s, seq) in seqs.iter().enumerate() {
            let alone = run_seqs(shape, bs, &[*seq], false);
            let same = all[s * qw..(s + 1) * qw]
                .iter()
                .zip(&alone)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "sequence {s} differs alone and among 12");
        }
    }

    /// The vectorised f16 row store rounds exactly like the scalar conversion.
    #[test]
    fn f16_store_row_rounds_like_from_f32() {
        let src: Vec<f32> = (0..77)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * [1e-3, 0.37, 61.0, 3e-6][i % 4])
            .chain([65504.0, 70000.0, -1e-8, 0.0, -0.0])
            .collect();
        let mut got = vec![half::f16::ZERO; src.len()];
        half::f16::store_row(&mut got, &src);
        for (g, &x) in got.iter().zip(&src) {
            assert_eq!(g.to_bits(), half::f16::from_f32(x).to_bits(), "{x}");
        }
    }

    /// A half-float cache: the tiled path matches dense attention over the f16-rounded K/V and
    /// the scalar path, and a decode row gets the same bits alone and among others.
    #[test]
    fn f16_cache_matches_dense_over_rounded_kv_and_is_batch_invariant() {
        let shape = AttnShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 64,
            scale: 0.125,
        };
        let (qw, kw, bs) = (6 * 64, 2 * 64, 16);
        let val = |i: usize, m: usize| ((i * m % 61) as f32 - 30.0) * 0.031;
        let round = |x: &Vec<f32>| -> Vec<f32> {
            x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
        };
        let (a_len, a_new) = (70usize, 9usize);
        let ka: Vec<f32> = (0..a_len * kw).map(|i| val(i, 7)).collect();
        let va: Vec<f32> = (0..a_len * kw).map(|i| val(i, 11)).collect();
        let qa: Vec<f32> = (0..a_new * qw).map(|i| val(i, 13)).collect();
        let ta: Vec<u32> = vec![4, 0, 2, 6, 8];
        let kb: Vec<f32> = (0..33 * kw).map(|i| val(i, 5)).collect();
        let vb: Vec<f32> = (0..33 * kw).map(|i| val(i, 3)).collect();
        let qb: Vec<f32> = (0..qw).map(|i| val(i, 17)).collect();
        let tb: Vec<u32> = vec![1, 3, 5];
        let a = (&ka[..], &va[..], &ta[..], a_new, &qa[..]);
        let b = (&kb[..], &vb[..], &tb[..], 1, &qb[..]);
        let mixed = run_seqs_in::<half::f16>(shape, bs, &[a, b], false);
        let want = [
            dense(&qa, &round(&ka), &round(&va), shape, a_len - a_new),
            dense(&qb, &round(&kb), &round(&vb), shape, 32),
        ]
        .concat();
        for (i, (g, w)) in mixed.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{i}: {g} vs {w}");
        }
        let exact = run_seqs(shape, bs, &[a, b], false);
        let worst = mixed
            .iter()
            .zip(&exact)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        assert!(worst > 0.0 && worst < 5e-3, "f16 vs f32 cache: {worst}");
        let scalar = run_seqs_in::<half::f16>(shape, bs, &[a, b], true);
        for (g, w) in mixed.iter().zip(&scalar) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
        let alone = run_seqs_in::<half::f16>(shape, bs, &[b], false);
        let same = mixed[a_new * qw..]
            .iter()
            .zip(&alone)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "the decode row differs alone and in the batch");
    }

    /// A query's bits do not depend on whether it runs as a decode row (whose half-float keys
    /// and values are read in place: with AVX-512VL's registers where the CPU has them, with
    /// AVX2's otherwise) or as a row of a prefill chunk (whose blocks are widened first, and
    /// at AVX2 whose key blocks are transposed), for every row of the chunk: groups of 2, 3 and
    /// 4 heads, head sizes 24 to 128, contexts that end inside a key block; half-float and f32
    /// caches; the tiles of this CPU and those of CPUs without AVX-512.
    #[test]
    fn decode_rows_match_the_same_query_in_a_prefill_chunk() {
        decode_rows_match_prefill_rows::<half::f16>();
        decode_rows_match_prefill_rows::<f32>();
        #[cfg(target_arch = "x86_64")]
        tiled::with_avx2_tiles(|| {
            decode_rows_match_prefill_rows::<half::f16>();
            decode_rows_match_prefill_rows::<f32>();
        });
    }

    fn decode_rows_match_prefill_rows<E: KvElem>() {
        for (n_heads, n_kv_heads, head_dim, len) in
            // Head sizes 72 and 24: the value pass ends with an 8-lane chunk. Groups of 3, 4
            // (3 + 1 heads in place) and 2 heads; head sizes of 3, 5, 8, 9 and 16 chunks (the
            // AVX2 in-place pass takes 3 chunks at a time).
            [
                (9, 3, 64, 45),
                (8, 2, 128, 70),
                (6, 2, 64, 33),
                (6, 2, 72, 40),
                (4, 1, 24, 37),
                (4, 2, 40, 29),
            ]
        {
            let shape = AttnShape {
                n_heads,
                n_kv_heads,
                head_dim,
                scale: 0.11,
            };
            let (qw, kw, bs) = (n_heads * head_dim, n_kv_heads * head_dim, 16);
            let val = |i: usize, m: usize| ((i * m % 59) as f32 - 29.0) * 0.037;
            let k: Vec<f32> = (0..len * kw).map(|i| val(i, 7)).collect();
            let v: Vec<f32> = (0..len * kw).map(|i| val(i, 11)).collect();
            let table: Vec<u32> = (0..len.div_ceil(bs) as u32).rev().collect();
            // Long enough that some shapes take prefill tiles of a whole KV group.
            let chunk = len.min(64);
            let q: Vec<f32> = (0..chunk * qw).map(|i| val(i, 13)).collect();
            let last = &q[(chunk - 1) * qw..];
            let prefill = run_seqs_in::<E>(shape, bs, &[(&k, &v, &table, chunk, &q)], false);
            let decode = run_seqs_in::<E>(shape, bs, &[(&k, &v, &table, 1, last)], false);
            let (p, d) = (&prefill[(chunk - 1) * qw..], &decode[..]);
            assert!(
                p.iter().zip(d).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{n_heads}/{n_kv_heads} heads of {head_dim}: decode and prefill bits differ"
            );
            // Every row of the chunk (queries paired in a tile or alone, each seeing one key
            // more than the one before) has the bits of its own decode row.
            for i in 0..chunk - 1 {
                let n = len - chunk + i + 1;
                let row = (
                    &k[..n * kw],
                    &v[..n * kw],
                    &table[..],
                    1,
                    &q[i * qw..][..qw],
                );
                let decode = run_seqs_in::<E>(shape, bs, &[row], false);
                assert!(
                    prefill[i * qw..][..qw]
                        .iter()
                        .zip(&decode)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{n_heads}/{n_kv_heads} heads of {head_dim}: chunk row {i} differs from decode"
                );
            }
            // Among other decode rows (one item per sequence) the same bits again.
            let other: Vec<f32> = (0..qw).map(|i| val(i, 17)).collect();
            let rows: Vec<Seq<'_>> = (0..12)
                .map(|s| {
                    (
                        &k[..],
                        &v[..],
                        &table[..],
                        1,
                        if s == 5 { last } else { &other[..] },
                    )
                })
                .collect();
            let many = run_seqs_in::<E>(shape, bs, &rows, false);
            assert!(
                many[5 * qw..6 * qw]
                    .iter()
                    .zip(d)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{n_heads}/{n_kv_heads} heads of {head_dim}: differs among 12 decode rows"
            );
        }
    }

    #[test]
    fn long_context_matches_dense_and_is_batch_invariant() {
        let shape = AttnShape {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 72,
            scale: 0.12,
        };
        let (qw, kw, bs) = (6 * 72, 2 * 72, 16);
        let val = |i: usize, m: usize| ((i * m % 61) as f32 - 30.0) * 0.03;
        // A: 75 keys, the last 19 are queries (crosses query tiles and key blocks).
        let (a_len, a_new) = (75usize, 19usize);
        let ka: Vec<f32> = (0..a_len * kw).map(|i| val(i, 7)).collect();
        let va: Vec<f32> = (0..a_len * kw).map(|i| val(i, 11)).collect();
        let qa: Vec<f32> = (0..a_new * qw).map(|i| val(i, 13)).collect();
        let ta: Vec<u32> = vec![9, 2, 4, 0, 7];
        // B: a decode step at position 40; C: a 5-token chunk ending at 21.
        let kb: Vec<f32> = (0..41 * kw).map(|i| val(i, 5)).collect();
        let vb: Vec<f32> = (0..41 * kw).map(|i| val(i, 3)).collect();
        let qb: Vec<f32> = (0..qw).map(|i| val(i, 17)).collect();
        let tb: Vec<u32> = vec![1, 3, 5];
        let kc: Vec<f32> = (0..21 * kw).map(|i| val(i, 19)).collect();
        let vc: Vec<f32> = (0..21 * kw).map(|i| val(i, 23)).collect();
        let qc: Vec<f32> = (0..5 * qw).map(|i| val(i, 29)).collect();
        let tc: Vec<u32> = vec![6, 8];
        let a = (&ka[..], &va[..], &ta[..], a_new, &qa[..]);
        let b = (&kb[..], &vb[..], &tb[..], 1, &qb[..]);
        let c = (&kc[..], &vc[..], &tc[..], 5, &qc[..]);
        let alone = run_seqs(shape, bs, &[a], false);
        let want = dense(&qa, &ka, &va, shape, a_len - a_new);
        for (i, (g, w)) in alone.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "{i}: {g} vs {w}");
        }
        let scalar = run_seqs(shape, bs, &[c, a, b], true);
        let mixed = run_seqs(shape, bs, &[c, a, b], false);
        for (g, w) in mixed.iter().zip(&scalar) {
            assert!((g - w).abs() < 1e-5);
        }
        let a_in_mix = &mixed[5 * qw..(5 + a_new) * qw];
        assert!(
            a_in_mix
                .iter()
                .zip(&alone)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "sequence A differs alone and in a batch"
        );
        let b_alone = run_seqs(shape, bs, &[b], false);
        assert!(mixed[(5 + a_new) * qw..]
            .iter()
            .zip(&b_alone)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        // A split in two chunks (chunked prefill): the later chunk's rows are unchanged.
        let a_tail = (&ka[..], &va[..], &ta[..], 7, &qa[12 * qw..]);
        let tail = run_seqs(shape, bs, &[b, a_tail], false);
        assert!(tail[qw..]
            .iter()
            .zip(&alone[12 * qw..])
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        // The last row of A as a decode step (one query row: heads of a KV group share a tile)
        // equals that row computed inside A's prefill tile.
        let a_last = (&ka[..], &va[..], &ta[..], 1, &qa[(a_new - 1) * qw..]);
        let last = run_seqs(shape, bs, &[a_last, c], false);
        assert!(
            last[..qw]
                .iter()
                .zip(&alone[(a_new - 1) * qw..])
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "a decode row differs from the same row in a prefill tile"
        );
    }

    /// Panics naming the first output whose bits differ.
    fn assert_bits(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths");
        if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
            panic!("{what}: output {i} is {} not {}", got[i], want[i]);
        }
    }

    /// Decode rows too few for the pool are split over key ranges (the tiled path's `split`):
    /// at 2, 3 and 4 threads every output has the bits of one thread (never split), of the same
    /// row among 12 decode rows (one item per sequence), of the same query as the last row of
    /// a prefill chunk (query tiles), and of each row alone when two split rows share a step;
    /// and it matches the scalar reference. Half-float caches (read in place) and f32 caches;
    /// groups of 3 (SmolLM2's 9 / 3), 4 (3 + 1 heads a pass in place) and 2 heads, head sizes
    /// 64, 128, 72 and 24 (a last 8-lane chunk), contexts that end inside a key block; a padding
    /// row beside split rows stays zero.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn split_decode_rows_keep_every_bit() {
        if !(crate::quant::detected_isa() == crate::quant::Isa::Avx2) {
            eprintln!("no tiled attention on this CPU");
            return;
        }
        split_rows_keep_every_bit::<half::f16>();
        split_rows_keep_every_bit::<f32>();
    }

    #[cfg(target_arch = "x86_64")]
    fn split_rows_keep_every_bit<E: KvElem>() {
        let pools: Vec<ThreadPool> = (1..=4).map(ThreadPool::new).collect();
        for (n_heads, n_kv_heads, head_dim, len) in [
            (9, 3, 64, 1000),
            (8, 2, 128, 613),
            (6, 2, 72, 517),
            (4, 1, 24, 530),
            (12, 4, 64, 700),
        ] {
            assert!(len >= tiled::SPLIT_MIN_CONTEXT, "long enough to split");
            let shape = AttnShape {
                n_heads,
                n_kv_heads,
                head_dim,
                scale: 0.09,
            };
            let (qw, kw, bs) = (n_heads * head_dim, n_kv_heads * head_dim, 16);
            let val = |i: usize, m: usize| ((i * m % 67) as f32 - 33.0) * 0.029;
            let k: Vec<f32> = (0..len * kw).map(|i| val(i, 7)).collect();
            let v: Vec<f32> = (0..len * kw).map(|i| val(i, 11)).collect();
            // Blocks out of order, so offsets come from the table.
            let table: Vec<u32> = (0..len.div_ceil(bs) as u32).rev().collect();
            let chunk = 3;
            let qs: Vec<f32> = (0..chunk * qw).map(|i| val(i, 13)).collect();
            let last = &qs[(chunk - 1) * qw..];
            let row = (&k[..], &v[..], &table[..], 1, last);
            let name = format!(
                "{n_heads}/{n_kv_heads} heads of {head_dim}, {len} keys, {}",
                std::any::type_name::<E>()
            );

            let one = run_seqs_on::<E>(&pools[0], shape, bs, &[row], false);
            let scalar = run_seqs_on::<E>(&pools[0], shape, bs, &[row], true);
            for (g, w) in one.iter().zip(&scalar) {
                assert!((g - w).abs() < 1e-5, "{name}: {g} vs scalar {w}");
            }
            let prefill =
                run_seqs_on::<E>(&pools[1], shape, bs, &[(&k, &v, &table, chunk, &qs)], false);
            assert_bits(
                &prefill[(chunk - 1) * qw..],
                &one,
                &format!("{name}: prefill"),
            );
            let other: Vec<f32> = (0..qw).map(|i| val(i, 17)).collect();
            let many: Vec<Seq<'_>> = (0..12)
                .map(|s| {
                    (
                        &k[..],
                        &v[..],
                        &table[..],
                        1,
                        if s == 5 { last } else { &other[..] },
                    )
                })
                .collect();
            let batch = run_seqs_on::<E>(&pools[1], shape, bs, &many, false);
            assert_bits(&batch[5 * qw..6 * qw], &one, &format!("{name}: among 12"));

            // A second, shorter row and the same pair of rows at every thread count.
            let short = (
                &k[..(len / 2) * kw],
                &v[..(len / 2) * kw],
                &table[..],
                1,
                &other[..],
            );
            let short_alone = run_seqs_on::<E>(&pools[0], shape, bs, &[short], false);
            for (t, pool) in pools.iter().enumerate().skip(1) {
                let before = tiled::splits_here();
                let split = run_seqs_on::<E>(pool, shape, bs, &[row], false);
                // Split below 2 KV groups per thread (unless OXLLM_ATTN_SPLIT=0 forbids it).
                let expect = usize::from(n_kv_heads < 2 * (t + 1) && tiled::split_allowed());
                assert_eq!(
                    tiled::splits_here(),
                    before + expect,
                    "{name}: {} threads",
                    t + 1
                );
                assert_bits(&split, &one, &format!("{name}: {} threads", t + 1));
                // With a padding row (no context) after them, which stays zero.
                let pad = (&[][..], &[][..], &[][..], 1, &other[..]);
                let pair = run_seqs_on::<E>(pool, shape, bs, &[short, row, pad], false);
                assert!(pair[2 * qw..].iter().all(|&x| x == 0.0), "{name}: padding");
                assert_bits(
                    &pair[..qw],
                    &short_alone,
                    &format!("{name}: pair, {} threads", t + 1),
                );
                assert_bits(
                    &pair[qw..2 * qw],
                    &one,
                    &format!("{name}: pair, {} threads", t + 1),
                );
            }
        }
    }
}
