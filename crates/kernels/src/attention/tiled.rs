//! AVX2+FMA paged attention over query tiles (x86_64, `head_dim % 8 == 0`).
//!
//! A work item is (sequence, query head, up to [`QT`] consecutive queries of that sequence) or,
//! with enough of them for the pool, (sequence, KV head, every head of its group over up to
//! [`QT`] consecutive queries: each widened key or value block serves them all), or,
//! for a sequence with a single query row (decode), (sequence, KV head) with the heads of that
//! KV group as the tile's queries, so K/V rows are read once per group. A step of too few
//! decode rows for the pool runs [`split`] instead (its scores over key ranges).
//! Keys are visited in blocks of [`KB`], which stay in L1 while the tile's queries pass over
//! them two at a time (four with AVX-512VL's registers), each K or V load serving them all
//! (`scores_rows`, `values_rows`: one query's fma chains alone wait on their latency). Prefill
//! tiles score a key block laid out eight keys to a vector at AVX2 ([`keys_t`], value rows
//! three queries at a time) and sixteen to a 512-bit vector with AVX-512 ([`zmm`], value
//! rows in 512-bit lanes). Per query the computation is fixed:
//! - score(p) = reduce(fma chain over head_dim in 8-lane chunks of q·k_p) * scale, with the
//!   reduction tree of [`dot4`] (keys are taken four at a time, padded with a repeated key, so a
//!   key's score never depends on its neighbours);
//! - softmax over its own `0..=pos` scores (`ops::softmax_in_place`);
//! - out = lane-wise fma over p ascending of weight(p) * v_p, starting from 0.
//!
//! None of these depend on which other queries share the tile or the batch, so results are
//! batch invariant bit for bit.
//!
//! Half-float caches: query tiles widen each key or value block to f32 once for their queries,
//! asking for the block after it into L2 while they widen ([`Tile::block`]);
//! decode tiles read the half floats in place instead: on CPUs with AVX-512VL
//! ([`scores_direct`]: the same 256-bit operations, with enough registers to convert each chunk
//! once for up to three heads and four keys; [`values_direct`]: 512-bit lanes, each running
//! the same chain), elsewhere with AVX2's 16 registers ([`direct_avx2`]: three keys, three
//! value chunks at a time). A decode row at batch 16 was mostly waiting on the widening's
//! loads and stores. While a direct tile computes on one cache row it asks for the row a
//! block ahead ([`KB`] rows, keys then values; into L1 with AVX-512, into L2 with AVX2), a
//! few lines per key: one burst per block filled the line-fill buffers and stalled the
//! arithmetic behind it.

use std::arch::x86_64::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{AttnMetadata, AttnShape, KvElem};
use crate::ops::softmax_in_place;
use crate::pool::{SharedMut, ThreadPool};
use crate::scratch::Scratch;

mod direct_avx2;
mod keys_t;
mod lanes;
mod split;
mod zmm;

pub(super) use split::set_allowed as set_split_allowed;

#[cfg(test)]
pub(super) use split::{allowed as split_allowed, splits_here, MIN_CONTEXT as SPLIT_MIN_CONTEXT};

/// Consecutive queries of one head per prefill tile: each widened key or value block serves
/// them all (at 8 every block was widened twice as often: docs/BENCHMARKS.md, "Prefill
/// attention").
const QT: usize = 16;
/// The most heads per KV head that a decode item takes as one tile (and the split batches).
const GROUP_MAX: usize = 8;
/// Queries of a tile that takes every head of one decode token.
const MAXQ: usize = 64;
/// Keys per block (K and V rows of a block stay in L1 while the tile passes over them).
const KB: usize = 32;
/// Marks an item whose queries are the heads of one KV group (decode rows).
const HEAD_GROUP: u32 = 1 << 31;
/// With [`HEAD_GROUP`]: the item is every KV group of its sequence, one after the other.
const ALL_KV_HEADS: u32 = 1 << 30;
/// Marks a prefill item whose queries are every head of one KV head over a run of positions,
/// so each widened key or value block serves all of them.
const KV_TILE: u32 = 1 << 29;

pub(super) fn paged_attention_tiled<E: KvElem>(
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
        ..
    } = shape;
    assert!(head_dim.is_multiple_of(8) && n_kv_heads > 0 && n_heads % n_kv_heads == 0);
    assert_eq!(out.len(), q.len());
    assert_eq!(q.len() % (n_heads * head_dim), 0);
    // Rows of no sequence (padding) and of empty sequences stay zero.
    out.fill(0.0);
    if split::run(pool, q, k_cache, v_cache, meta, shape, out) {
        return;
    }
    ITEMS.with_borrow_mut(|items| {
        items.clear();
        tiled_items(pool, q, k_cache, v_cache, meta, shape, out, items);
    });
}

thread_local! {
    /// Work items of the last call on this thread, kept for their capacity.
    static ITEMS: std::cell::RefCell<Vec<[u32; 4]>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
fn tiled_items<E: KvElem>(
    pool: &ThreadPool,
    q: &[f32],
    k_cache: &[E],
    v_cache: &[E],
    meta: &AttnMetadata<'_>,
    shape: AttnShape,
    out: &mut [f32],
    items: &mut Vec<[u32; 4]>,
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
    let num_seqs = meta.seq_lens.len();
    let mut max_len = 0usize;
    // Scratch is sized by the longest context the block tables can address, not by this
    // step's, and the item list by the step's shape: sizes a warm-up step already reaches, so
    // a replay at a longer context allocates nothing.
    let cap = meta.block_table_stride * meta.block_size;
    let n_tokens = q.len() / q_width.max(1);
    items.reserve((n_tokens.div_ceil(QT) + num_seqs) * n_heads);
    // With many decode rows, one item takes all KV heads of a sequence: a K/V cache row holds
    // every KV head, so one core then reads each row (from memory, at batch 16 the cache does
    // not stay in L3 between steps) instead of both cores reading parts of the same lines.
    // With few rows, items stay per KV head so every thread has work.
    let decode_rows = (0..num_seqs)
        .filter(|&s| meta.query_start_loc[s + 1] == meta.query_start_loc[s] + 1)
        .count();
    let whole_seq = decode_rows >= 4 * pool.n_threads().max(1) && n_heads <= MAXQ;
    // Positions per item where an item takes every head of a KV head (`KV_TILE`): as many as
    // fit the tile's queries (none for one head per KV head, or more than a tile holds).
    let per_group = if group > 1 && group <= MAXQ {
        QT.min(MAXQ / group)
    } else {
        0
    };
    for s in 0..num_seqs {
        let (a, b) = (
            meta.query_start_loc[s] as usize,
            meta.query_start_loc[s + 1] as usize,
        );
        let seq_len = meta.seq_lens[s] as usize;
        if seq_len == 0 || b <= a {
            continue;
        }
        assert!(seq_len >= b - a, "sequence {s}: more queries than context");
        assert!(
            b * q_width <= q.len(),
            "sequence {s}: query rows out of range"
        );
        max_len = max_len.max(seq_len);
        if b - a == 1 && group > 1 && group <= GROUP_MAX {
            // A single query row (decode): the heads sharing a KV head form one tile, so each
            // K/V row and block-table entry is read once for the whole group.
            if whole_seq {
                items.push([s as u32, a as u32, group as u32, HEAD_GROUP | ALL_KV_HEADS]);
                continue;
            }
            for kvh in 0..n_kv_heads {
                items.push([s as u32, a as u32, group as u32, HEAD_GROUP | kvh as u32]);
            }
            continue;
        }
        // KV tiles, unless they would leave threads idle (then one head per item).
        if per_group > 0 && (b - a).div_ceil(per_group) * n_kv_heads >= 4 * pool.n_threads().max(1)
        {
            for t0 in (a..b).step_by(per_group) {
                let nq = (b - t0).min(per_group);
                for kvh in 0..n_kv_heads {
                    items.push([s as u32, t0 as u32, nq as u32, KV_TILE | kvh as u32]);
                }
            }
            continue;
        }
        for t0 in (a..b).step_by(QT) {
            let nq = (b - t0).min(QT);
            for h in 0..n_heads {
                items.push([s as u32, t0 as u32, nq as u32, h as u32]);
            }
        }
    }
    if items.is_empty() && !pool.all_join() {
        return;
    }
    assert!(max_len <= cap, "a sequence is longer than its block table");
    let direct = match (E::IS_F32, direct_available()) {
        (true, _) => Direct::No,
        (false, true) => Direct::Avx512,
        (false, false) => Direct::Avx2,
    };
    // AVX-512VL's 32 registers hold four queries' chains (the same 256-bit operations).
    let wide_regs = direct_available();
    let next = AtomicUsize::new(0);
    let out_ptr = SharedMut::new(out);
    pool.run_dynamic(|_, _| {
        // Every score, offset and widened row is written before it is read.
        // Score rows for the most queries a tile of this shape takes (a step's shape only, so
        // a warm step reaches it).
        let tile_queries = QT.max(n_heads).max(per_group * group);
        let mut scores = Scratch::<f32>::take_dirty(tile_queries * cap);
        let mut offs = Scratch::<usize>::take_dirty(cap);
        // Half-float caches: one key block (or value block) widened once for every query.
        // Prefill tiles also lay each key block out transposed there (`keys_t`).
        let mut wide = Scratch::<f32>::take_dirty(KB * kv_width);
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= items.len() {
                break;
            }
            let [s, t0, nq, item_h] = items[i].map(|x| x as usize);
            // Every KV group of one decode token in one tile: the block loop then reads each
            // cache row whole (all KV heads), in slot order.
            let all = item_h & ALL_KV_HEADS as usize != 0;
            let (h, nq, groups) = if all {
                (HEAD_GROUP as usize, n_heads, n_kv_heads)
            } else {
                (item_h, nq, 1)
            };
            {
                // Head-grouped item: queries are heads kvh*group.. of one token, all at one position.
                let heads = h & HEAD_GROUP as usize != 0;
                // KV tile: `positions` consecutive tokens of each head kvh*group.., head-major.
                let kv_tile = h & KV_TILE as usize != 0;
                let (kvh, step) = if heads {
                    (h & !(HEAD_GROUP as usize), 0)
                } else if kv_tile {
                    (h & !(KV_TILE as usize), 1)
                } else {
                    (h / group, 1)
                };
                let (positions, nq) = if kv_tile { (nq, nq * group) } else { (nq, nq) };
                let q_start = meta.query_start_loc[s] as usize;
                let q_len = meta.query_start_loc[s + 1] as usize - q_start;
                let seq_len = meta.seq_lens[s] as usize;
                let first_pos = seq_len - q_len + (t0 - q_start);
                let ctx_max = first_pos + 1 + (positions.min(nq) - 1) * step;
                let table = &meta.block_tables[s * meta.block_table_stride..];
                // Block by block: no division per key, one bounds check per block.
                let bs = meta.block_size;
                let cache_len = k_cache.len().min(v_cache.len());
                let row_width = groups * head_dim;
                for (bi, chunk) in offs[..ctx_max].chunks_mut(bs).enumerate() {
                    let first = table[bi] as usize * bs * kv_width + kvh * head_dim;
                    let last = first + (chunk.len() - 1) * kv_width;
                    assert!(last + row_width <= cache_len, "K/V slot outside the cache");
                    for (i, o) in chunk.iter_mut().enumerate() {
                        *o = first + i * kv_width;
                    }
                }
                // Query j: token t0 + j of head h, head kvh*group + j of token t0, or token
                // t0 + j % positions of head kvh*group + j / positions.
                let row_of = |j: usize| {
                    let j = j.min(nq - 1);
                    if heads {
                        t0 * q_width + (kvh * group + j) * head_dim
                    } else if kv_tile {
                        let (t, hh) = (t0 + j % positions, kvh * group + j / positions);
                        t * q_width + hh * head_dim
                    } else {
                        (t0 + j) * q_width + h * head_dim
                    }
                };
                let qs: [*const f32; MAXQ] =
                    std::array::from_fn(|j| q[row_of(j)..][..head_dim].as_ptr());
                let outs: [*mut f32; MAXQ] = std::array::from_fn(|j| {
                    if j >= nq {
                        return std::ptr::null_mut();
                    }
                    // SAFETY: each (token, head) output row belongs to exactly one item.
                    unsafe { out_ptr.slice(row_of(j), head_dim).as_mut_ptr() }
                });
                let tile = Tile {
                    nq,
                    groups,
                    first_ctx: first_pos + 1,
                    ctx_step: step,
                    period: positions,
                    head_dim,
                    scale,
                    offs: &offs[..ctx_max],
                    k: k_cache.as_ptr(),
                    v: v_cache.as_ptr(),
                    stride: max_len,
                    direct: if step == 0 { direct } else { Direct::No },
                };
                // SAFETY: AVX2+FMA checked by the caller; every offset was bounds-checked above,
                // query/output rows hold head_dim floats, scores hold nq * max_len floats.
                unsafe {
                    if wide_regs {
                        tile.run_avx512(&qs, &outs, &mut scores, &mut wide)
                    } else {
                        tile.run(&qs, &outs, &mut scores, &mut wide)
                    }
                };
            }
        }
    });
}

struct Tile<'a, E> {
    nq: usize,
    /// KV heads the tile covers (heads mode only; 1 otherwise): queries `g * nq / groups..`
    /// read KV head `g`, at `g * head_dim` into each cache row.
    groups: usize,
    /// Context of the tile's first query (`pos + 1`); query j sees
    /// `first_ctx + (j % period) * ctx_step` keys (step 1: consecutive tokens of one head, or of
    /// each head of a KV head in turn; step 0: heads of one token).
    first_ctx: usize,
    ctx_step: usize,
    /// Queries per head along the tile: query j is position `j % period` of its head.
    period: usize,
    head_dim: usize,
    scale: f32,
    offs: &'a [usize],
    k: *const E,
    v: *const E,
    stride: usize,
    /// Decode heads over a half-float cache read in place, not widened first: how.
    direct: Direct,
}

/// How a tile reads a half-float cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direct {
    /// Blocks widened to f32 first (f32 caches, query tiles).
    No,
    /// In place, 16 registers ([`direct_avx2`]).
    Avx2,
    /// In place, the 32 registers of AVX-512VL ([`scores_direct`], [`values_direct`]).
    Avx512,
}

/// A tile's whole computation, stamped out once per instruction set: `$group` queries share
/// each key load and `$values` queries each value load where their ends allow (`scores_rows`
/// or, for prefill queries at AVX2, `keys_t::scores_rows_t`; `values_rows`); `$zmm`: prefill
/// queries take the 512-bit paths of [`zmm`] instead.
macro_rules! tile_run {
    ($(#[$attr:meta])* $name:ident, $group:literal, $values:literal, $zmm:literal) => {
        $(#[$attr])*
    unsafe fn $name(
        &self,
        qs: &[*const f32; MAXQ],
        outs: &[*mut f32; MAXQ],
        scores: &mut [f32],
        wide: &mut [f32],
    ) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let (nq, hd) = (self.nq, self.head_dim);
            let gs = nq / self.groups;
            let ctx = |j: usize| self.first_ctx + (j % self.period) * self.ctx_step;
            let ctx_max = ctx(nq.min(self.period) - 1);
            let sc = scores.as_mut_ptr();
            // Scores, one block of keys at a time.
            for p0 in (0..ctx_max).step_by(KB) {
                let p1 = (p0 + KB).min(ctx_max);
                if self.direct != Direct::No {
                    let pe = p1.min(self.first_ctx);
                    for g in 0..self.groups {
                        for h in (g * gs..(g + 1) * gs).step_by(MAX_DIRECT_HEADS) {
                            let heads = &qs[h..(h + MAX_DIRECT_HEADS).min((g + 1) * gs)];
                            let rows = (sc.add(h * self.stride), self.stride);
                            if self.direct == Direct::Avx512 {
                                scores_direct(self, heads, g, (p0, pe), rows);
                            } else {
                                direct_avx2::scores(self, heads, g, (p0, pe), rows);
                            }
                        }
                    }
                    continue;
                }
                if self.ctx_step == 1 && $zmm {
                    // Prefill queries with AVX-512: sixteen keys to a vector.
                    for g in 0..self.groups {
                        self.keys_t::<{ zmm::W }>(g, p0, p1, wide);
                        let (ja, jb) = (g * gs, (g + 1) * gs);
                        let pe = |j: usize| p1.min(ctx(ja + j));
                        let rows = (sc.add(ja * self.stride), self.stride);
                        let at = (hd, self.scale);
                        zmm::scores_rows(&qs[ja..jb], pe, wide.as_ptr(), at, p0, rows);
                    }
                    continue;
                }
                if self.ctx_step == 1 && $group == 2 {
                    // Prefill queries at AVX2: the block transposed once for all of them.
                    for g in 0..self.groups {
                        self.keys_t::<8>(g, p0, p1, wide);
                        let (ja, jb) = (g * gs, (g + 1) * gs);
                        let pe = |j: usize| p1.min(ctx(ja + j));
                        let rows = (sc.add(ja * self.stride), self.stride);
                        let at = (hd, self.scale);
                        keys_t::scores_rows_t(&qs[ja..jb], pe, wide.as_ptr(), at, p0, rows);
                    }
                    continue;
                }
                let rows = self.block(false, p0, p1, wide);
                for g in 0..self.groups {
                    let krow = |p: usize| rows(p).add(g * hd);
                    let (ja, jb) = (g * gs, (g + 1) * gs);
                    let pe = |j: usize| p1.min(ctx(ja + j));
                    let rows = (sc.add(ja * self.stride), self.stride);
                    scores_rows::<$group>(&qs[ja..jb], pe, krow, (hd, self.scale), p0, rows);
                }
            }
            for j in 0..nq {
                softmax_in_place(&mut scores[j * self.stride..][..ctx(j)]);
            }
            let sc = scores.as_ptr();
            // Values: out_j += w_j(p) * v_p, p ascending, outputs start at zero.
            for p0 in (0..ctx_max).step_by(KB) {
                let p1 = (p0 + KB).min(ctx_max);
                if self.direct != Direct::No {
                    let pe = p1.min(self.first_ctx);
                    for g in 0..self.groups {
                        for h in (g * gs..(g + 1) * gs).step_by(MAX_DIRECT_HEADS) {
                            let heads = &outs[h..(h + MAX_DIRECT_HEADS).min((g + 1) * gs)];
                            let w = (sc.add(h * self.stride), self.stride);
                            if self.direct == Direct::Avx512 {
                                values_direct(self, heads, g, (p0, pe), w);
                            } else {
                                direct_avx2::values(self, heads, g, (p0, pe), w);
                            }
                        }
                    }
                    continue;
                }
                let rows = self.block(true, p0, p1, wide);
                for g in 0..self.groups {
                    let vrow = |p: usize| rows(p).add(g * hd);
                    let (ja, jb) = (g * gs, (g + 1) * gs);
                    let pe = |j: usize| p1.min(ctx(ja + j));
                    let w = (sc.add(ja * self.stride), self.stride);
                    let vrow = |p: usize, d0: usize| vrow(p).add(d0);
                    if self.ctx_step == 1 && $zmm {
                        zmm::values_rows(&outs[ja..jb], pe, vrow, hd, p0, w);
                    } else {
                        values_rows::<$values>(&outs[ja..jb], pe, vrow, hd, p0, w);
                    }
                }
            }
        }
    }
    };
}

impl<E: KvElem> Tile<'_, E> {
    tile_run!(
        /// The tile on AVX2's 16 registers: pairs of queries over transposed key blocks
        /// (8 fma chains), threes over value rows (12 chains, each value load feeding three).
        #[target_feature(enable = "avx2,fma,f16c")]
        run,
        2,
        3,
        false
    );
    tile_run!(
        /// [`Tile::run`] with AVX-512VL's 32 registers, where fours of queries (16 fma chains)
        /// fit: the same 256-bit operations, so the same bits; prefill queries in 512-bit
        /// lanes, each lane computing what a 256-bit lane does.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
        run_avx512,
        4,
        4,
        true
    );

    /// Asks for KV head `g`'s part of the cache row [`KB`] rows after row `p` in the order a
    /// direct tile reads them (its keys, then its values; `values`: `p` is a value row), so
    /// the loads of the next block are spread over this one's arithmetic.
    #[inline(always)]
    unsafe fn prefetch_ahead(&self, p: usize, g: usize, values: bool) {
        unsafe {
            // SAFETY: as `prefetch_span`'s.
            self.prefetch_span::<_MM_HINT_T0>(p, values, g * self.head_dim, self.head_dim);
        }
    }

    /// Asks for `len` values from `at` into the cache row [`KB`] rows after row `p`, in the
    /// order tiles read rows (keys, then values; `values`: `p` is a value row), into the
    /// cache level `HINT` names. A prefetch never faults; the address is computed in bounds
    /// (`offs` was bounds-checked, and `at + len` is at most the tile's row width).
    #[inline(always)]
    unsafe fn prefetch_span<const HINT: i32>(&self, p: usize, values: bool, at: usize, len: usize) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let ctx = self.offs.len();
            let ahead = p + KB;
            let (cache, q) = match (values, ahead < ctx) {
                (false, true) => (self.k, ahead),
                (false, false) => (self.v, ahead - ctx),
                (true, _) => (self.v, ahead),
            };
            if q >= ctx {
                return;
            }
            let start = cache.add(self.offs[q] + at) as usize;
            let end = start + len * std::mem::size_of::<E>();
            let mut line = start & !63;
            while line < end {
                _mm_prefetch::<HINT>(line as *const i8);
                line += 64;
            }
        }
    }

    /// Row `p` (in `p0..p1`) of one block of the K (`values`: V) cache as f32 (the tile's
    /// `groups` KV heads, `groups * head_dim` values): the cache row itself for an f32 cache;
    /// otherwise the block is first widened into `wide` (exactly) and rows point there.
    ///
    /// While widening a row it asks for the row a block ahead (keys, then values), as the
    /// direct tiles do, but into L2: at batch 16 the half-float cache of every sequence and
    /// layer no longer fits a core's L2, the widening waited on each row's loads, and a
    /// block's worth of L1 prefetches stalled on the line-fill buffers themselves
    /// (AVX2, docs/BENCHMARKS.md sitting 11).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn block(
        &self,
        values: bool,
        p0: usize,
        p1: usize,
        wide: &mut [f32],
    ) -> impl Fn(usize) -> *const f32 + '_ {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let rw = self.groups * self.head_dim;
            let cache = if values { self.v } else { self.k };
            if !E::IS_F32 {
                for p in p0..p1 {
                    self.prefetch_span::<_MM_HINT_T1>(p, values, 0, rw);
                    let src = cache.add(self.offs[p]);
                    let dst = wide.as_mut_ptr().add((p - p0) * rw);
                    for d in (0..rw).step_by(8) {
                        _mm256_storeu_ps(dst.add(d), E::load8(src.add(d)));
                    }
                }
            }
            let (base, wide) = (cache.cast::<f32>(), wide.as_ptr());
            move |p| {
                if E::IS_F32 {
                    base.add(self.offs[p])
                } else {
                    wide.add((p - p0) * rw)
                }
            }
        }
    }
}

/// Heads of one KV group a direct tile takes at once (their accumulators and the shared key
/// or value registers fit the 32 vector registers AVX-512VL gives 256-bit code).
const MAX_DIRECT_HEADS: usize = 3;

/// Whether the direct decode path runs here: the same 256-bit arithmetic as the widening path,
/// with the 32 registers of AVX-512VL so that each half-float key or value chunk is
/// converted once for every head of its group.
fn direct_available() -> bool {
    #[cfg(test)]
    if AVX2_TILES.get() {
        return false;
    }
    crate::quant::avx512_allowed()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512vl")
}

#[cfg(test)]
thread_local! {
    /// Set by [`with_avx2_tiles`]: read on the calling thread when a step picks its tiles.
    static AVX2_TILES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the tiles and in-place kernels of CPUs without AVX-512VL on this thread's
/// attention calls, so that a test on an AVX-512 machine checks them too.
#[cfg(test)]
pub(super) fn with_avx2_tiles<T>(f: impl FnOnce() -> T) -> T {
    AVX2_TILES.set(true);
    let r = f();
    AVX2_TILES.set(false);
    r
}

/// Scores of the group's heads (`qs`, at most [`MAX_DIRECT_HEADS`]) against keys `p0..pe` of KV
/// head `g`, read in place: per four keys (padded with a repeated key, as `dot4`), each
/// 8-value chunk of each key converted once and fed to every head's chain for that key. Every
/// score has the bits `dot4` gives it. `rows`: the first head's score row and the stride.
///
/// # Safety
/// AVX2, FMA, F16C, AVX-512F/VL; as [`Tile::run`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
unsafe fn scores_direct<E: KvElem>(
    t: &Tile<'_, E>,
    qs: &[*const f32],
    g: usize,
    (p0, pe): (usize, usize),
    (row0, stride): (*mut f32, usize),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let hd = t.head_dim;
        let n = qs.len();
        let mut p = p0;
        while p < pe {
            // Plain loops: closures would not inherit this function's target features.
            let mut ks = [t.k; 4];
            for (u, k) in ks.iter_mut().enumerate() {
                *k = t.k.add(t.offs[(p + u).min(pe - 1)] + g * hd);
            }
            for u in p..(p + 4).min(pe) {
                t.prefetch_ahead(u, g, false);
            }
            let mut acc = [[_mm256_setzero_ps(); 4]; MAX_DIRECT_HEADS];
            let mut d = 0;
            while d < hd {
                let mut kv = [_mm256_setzero_ps(); 4];
                for (k, src) in kv.iter_mut().zip(ks) {
                    *k = E::load8(src.add(d));
                }
                for (h, acc) in acc.iter_mut().enumerate().take(n) {
                    let qv = _mm256_loadu_ps(qs[h].add(d));
                    for (a, k) in acc.iter_mut().zip(kv) {
                        *a = _mm256_fmadd_ps(qv, k, *a);
                    }
                }
                d += 8;
            }
            for (h, acc) in acc.iter().enumerate().take(n) {
                let s = reduce4(*acc);
                let row = row0.add(h * stride);
                for (u, &v) in s.iter().enumerate().take(pe - p) {
                    *row.add(p + u) = v * t.scale;
                }
            }
            p += 4;
        }
    }
}

/// `out_h += w_h(p) * v_p` for keys `p0..pe` of KV head `g` and the group's heads (`outs`, at
/// most [`MAX_DIRECT_HEADS`]), values read in place 64 lanes at a time in 512-bit chunks, each
/// chunk converted once for every head. Every lane runs `axpy`'s fma chain (p ascending from
/// the output's value), so the lane width changes no bit. `w`: the first head's weight row and
/// the stride.
///
/// # Safety
/// As [`scores_direct`].
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
#[allow(clippy::needless_range_loop)] // `acc[h][c]`: one value chunk feeds every head
unsafe fn values_direct<E: KvElem>(
    t: &Tile<'_, E>,
    outs: &[*mut f32],
    g: usize,
    (p0, pe): (usize, usize),
    (w0, stride): (*const f32, usize),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        const NC: usize = 4;
        let hd = t.head_dim;
        let n = outs.len();
        let mut d0 = 0;
        while d0 + 16 <= hd {
            let nc = ((hd - d0) / 16).min(NC);
            let mut acc = [[_mm512_setzero_ps(); NC]; MAX_DIRECT_HEADS];
            for (h, acc) in acc.iter_mut().enumerate().take(n) {
                for (c, a) in acc.iter_mut().enumerate().take(nc) {
                    *a = _mm512_loadu_ps(outs[h].add(d0 + 16 * c));
                }
            }
            for p in p0..pe {
                if d0 == 0 {
                    t.prefetch_ahead(p, g, true);
                }
                let vr = t.v.add(t.offs[p] + g * hd + d0);
                let mut w = [_mm512_setzero_ps(); MAX_DIRECT_HEADS];
                for (h, w) in w.iter_mut().enumerate().take(n) {
                    *w = _mm512_set1_ps(*w0.add(h * stride + p));
                }
                for c in 0..nc {
                    let v = E::load16(vr.add(16 * c));
                    for h in 0..n {
                        acc[h][c] = _mm512_fmadd_ps(w[h], v, acc[h][c]);
                    }
                }
            }
            for (h, acc) in acc.iter().enumerate().take(n) {
                for (c, a) in acc.iter().enumerate().take(nc) {
                    _mm512_storeu_ps(outs[h].add(d0 + 16 * c), *a);
                }
            }
            d0 += 16 * nc;
        }
        if d0 < hd {
            // The last 8 lanes of a head size that is an odd multiple of 8.
            let mut acc = [_mm256_setzero_ps(); MAX_DIRECT_HEADS];
            for (h, a) in acc.iter_mut().enumerate().take(n) {
                *a = _mm256_loadu_ps(outs[h].add(d0));
            }
            for p in p0..pe {
                let v = E::load8(t.v.add(t.offs[p] + g * hd + d0));
                for (h, a) in acc.iter_mut().enumerate().take(n) {
                    *a = _mm256_fmadd_ps(_mm256_set1_ps(*w0.add(h * stride + p)), v, *a);
                }
            }
            for (h, a) in acc.iter().enumerate().take(n) {
                _mm256_storeu_ps(outs[h].add(d0), *a);
            }
        }
    }
}

/// `o[0..8 * NC] += w[p] * row(p)[0..8 * NC]` for p in `p0..pe`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy<const NC: usize>(
    o: *mut f32,
    w: *const f32,
    p0: usize,
    pe: usize,
    row: impl Fn(usize) -> *const f32,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc: [__m256; NC] = std::array::from_fn(|c| _mm256_loadu_ps(o.add(8 * c)));
        for p in p0..pe {
            let wv = _mm256_set1_ps(*w.add(p));
            let vr = row(p);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(vr.add(8 * c)), *a);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * c), *a);
        }
    }
}

/// Scores of queries `qs` of one KV group against keys `p0..pe(j)` (query `j`'s own end: the
/// same for the heads of a decode token, one more per query along a prefill tile),
/// `krow(p)` the group's part of key row `p`. Queries go in groups of up to `Q` that share each
/// key load ([`dot4_n`]: `4 Q` independent fma chains, where one query's 4 wait on their
/// latency; `Q` = 2 in AVX2's 16 registers, where threes ran no faster, 4 in AVX-512VL's 32)
/// over the keys all of them see, then each alone (`dot4`) over the rest;
/// every score has `dot4`'s bits, times `scale`, whatever its grouping. `(row0, stride)`: the
/// first query's score row and the stride between rows. Shared by the tiles and the key-range
/// split (`split`), so a score never depends on which computed it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_rows<const Q: usize>(
    qs: &[*const f32],
    pe: impl Fn(usize) -> usize,
    krow: impl Fn(usize) -> *const f32,
    (hd, scale): (usize, f32),
    p0: usize,
    (row0, stride): (*mut f32, usize),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut j = 0;
        while j < qs.len() {
            let n = (qs.len() - j).min(Q);
            let at = (row0, stride);
            let p = match n {
                4 => scores_shared::<4>(j, qs, &pe, &krow, (hd, scale), p0, at),
                3 => scores_shared::<3>(j, qs, &pe, &krow, (hd, scale), p0, at),
                2 => scores_shared::<2>(j, qs, &pe, &krow, (hd, scale), p0, at),
                _ => p0,
            };
            for (i, &q) in qs.iter().enumerate().skip(j).take(n) {
                // Each query alone over the keys past the shared ones.
                let (end, row) = (pe(i), row0.add(i * stride));
                let mut p = p;
                while p < end {
                    let ks: [*const f32; 4] = std::array::from_fn(|u| krow((p + u).min(end - 1)));
                    let d = dot4(q, ks, hd);
                    for (u, &dv) in d.iter().enumerate().take(end - p) {
                        *row.add(p + u) = dv * scale;
                    }
                    p += 4;
                }
            }
            j += n;
        }
    }
}

/// The scores of queries `j..j + N` over the keys from `p0` that all of them see, by
/// [`dot4_n`]; returns the first key it left (every query's end where the ends are equal).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_shared<const N: usize>(
    j: usize,
    qs: &[*const f32],
    pe: &impl Fn(usize) -> usize,
    krow: &impl Fn(usize) -> *const f32,
    (hd, scale): (usize, f32),
    p0: usize,
    (row0, stride): (*mut f32, usize),
) -> usize {
    unsafe {
        // SAFETY: as `scores_rows`'.
        let ends: [usize; N] = std::array::from_fn(|i| pe(j + i));
        let least = ends.iter().copied().min().unwrap_or(p0).max(p0);
        // A last partial quad pads with the query's last key: shared only by equal ends.
        let both = if ends.iter().all(|&e| e == ends[0]) {
            least
        } else {
            p0 + ((least - p0) & !3)
        };
        let q: [*const f32; N] = std::array::from_fn(|i| qs[j + i]);
        let rows: [*mut f32; N] = std::array::from_fn(|i| row0.add((j + i) * stride));
        let mut p = p0;
        while p < both {
            let ks: [*const f32; 4] = std::array::from_fn(|u| krow((p + u).min(both - 1)));
            let d = dot4_n::<N>(q, ks, hd);
            for (row, d) in rows.iter().zip(&d) {
                for (u, &dv) in d.iter().enumerate().take(both - p) {
                    *row.add(p + u) = dv * scale;
                }
            }
            p += 4;
        }
        p
    }
}

/// `out_j += w_j(p) * v_p` for queries `outs` of one KV group and keys `p0..pe(j)` (as in
/// [`scores_rows`]), `vrow(p, d0)` the group's part of value row `p` from dimension `d0`:
/// queries go in groups of up to `Q` that share each value load ([`axpy_n`]) over the keys all
/// of them see, then each alone (`axpy`) over the rest, so every lane runs `axpy`'s chain
/// over `p` ascending. `(w0, stride)`: the first query's weight row and the stride between
/// rows. Shared by the tiles and the key-range split (`split`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_rows<const Q: usize>(
    outs: &[*mut f32],
    pe: impl Fn(usize) -> usize,
    vrow: impl Fn(usize, usize) -> *const f32,
    hd: usize,
    p0: usize,
    (w0, stride): (*const f32, usize),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut j = 0;
        while j < outs.len() {
            let n = (outs.len() - j).min(Q);
            let both = (j..j + n).map(&pe).min().unwrap_or(p0).max(p0);
            if n > 1 && both > p0 {
                let at = (j, w0, stride);
                match n {
                    4 => values_shared::<4>(at, outs, &vrow, hd, (p0, both)),
                    3 => values_shared::<3>(at, outs, &vrow, hd, (p0, both)),
                    _ => values_shared::<2>(at, outs, &vrow, hd, (p0, both)),
                }
            }
            let from = if n > 1 { both } else { p0 };
            for (i, &o) in outs.iter().enumerate().skip(j).take(n) {
                // Each query alone over the keys past the shared ones.
                let (w, end) = (w0.add(i * stride), pe(i));
                if end <= from {
                    continue;
                }
                let mut d0 = 0;
                while d0 + 64 <= hd {
                    axpy::<8>(o.add(d0), w, from, end, |p| vrow(p, d0));
                    d0 += 64;
                }
                while d0 < hd {
                    axpy::<1>(o.add(d0), w, from, end, |p| vrow(p, d0));
                    d0 += 8;
                }
            }
            j += n;
        }
    }
}

/// `out += w(p) * v_p` for queries `j..j + N` (`at`: `j`, the first query's weight row and
/// the stride between rows) over keys `p0..both`, which all of them see, by [`axpy_n`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_shared<const N: usize>(
    (j, w0, stride): (usize, *const f32, usize),
    outs: &[*mut f32],
    vrow: &impl Fn(usize, usize) -> *const f32,
    hd: usize,
    (p0, both): (usize, usize),
) {
    unsafe {
        // SAFETY: as `values_rows`'.
        let o = |d0: usize| std::array::from_fn(|i| outs[j + i].add(d0));
        let w: [*const f32; N] = std::array::from_fn(|i| w0.add((j + i) * stride));
        let mut d0 = 0;
        while d0 + 32 <= hd {
            axpy_n::<N, 4>(o(d0), w, p0, both, |p| vrow(p, d0));
            d0 += 32;
        }
        while d0 < hd {
            axpy_n::<N, 1>(o(d0), w, p0, both, |p| vrow(p, d0));
            d0 += 8;
        }
    }
}

/// [`axpy`] for `N` outputs with their own weights over the same rows (each row load serves
/// them all), in 256-bit lanes (`lanes::axpy_v`): each lane runs the same fma chain it runs
/// in `axpy`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_n<const N: usize, const NC: usize>(
    o: [*mut f32; N],
    w: [*const f32; N],
    p0: usize,
    pe: usize,
    row: impl Fn(usize) -> *const f32,
) {
    unsafe {
        // SAFETY: this fn's contract (AVX2, FMA; the outputs, weights and rows it is given).
        lanes::axpy_v::<__m256, N, NC>(o, w, p0, pe, row)
    }
}

/// [`dot4`] of `N` queries against the same four keys, sharing each key load (`4 N`
/// independent fma chains); every (query, key) result has `dot4`'s bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4_n<const N: usize>(
    q: [*const f32; N],
    k: [*const f32; 4],
    hd: usize,
) -> [[f32; 4]; N] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [[_mm256_setzero_ps(); 4]; N];
        let mut d = 0;
        while d < hd {
            let x: [__m256; N] = std::array::from_fn(|i| _mm256_loadu_ps(q[i].add(d)));
            for u in 0..4 {
                let kv = _mm256_loadu_ps(k[u].add(d));
                for i in 0..N {
                    acc[i][u] = _mm256_fmadd_ps(x[i], kv, acc[i][u]);
                }
            }
            d += 8;
        }
        acc.map(|a| reduce4(a))
    }
}

/// The per-key sums of four accumulators: ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn reduce4(acc: [__m256; 4]) -> [f32; 4] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let h01 = _mm256_hadd_ps(acc[0], acc[1]);
        let h23 = _mm256_hadd_ps(acc[2], acc[3]);
        let h = _mm256_hadd_ps(h01, h23);
        let s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let mut r = [0f32; 4];
        _mm_storeu_ps(r.as_mut_ptr(), s);
        r
    }
}

/// Dots of `q` with four key rows (`hd` floats each, `hd % 8 == 0`): one fma chain per key over
/// 8-lane chunks, then the same pairwise reduction tree for every key.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot4(q: *const f32, k: [*const f32; 4], hd: usize) -> [f32; 4] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut d = 0;
        while d < hd {
            let qv = _mm256_loadu_ps(q.add(d));
            for (a, kp) in acc.iter_mut().zip(k) {
                *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kp.add(d)), *a);
            }
            d += 8;
        }
        reduce4(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, m: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * m % 97) as f32 - 48.0) * 0.013)
            .collect()
    }

    /// The two-, three- and four-query forms give each query exactly the single-query bits.
    #[test]
    fn paired_queries_match_single_queries_bit_for_bit() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            eprintln!("AVX2+FMA not available");
            return;
        }
        let hd = 72;
        let (q0, q1) = (data(hd, 7), data(hd, 11));
        let keys: Vec<Vec<f32>> = (0..4).map(|u| data(hd, 13 + u)).collect();
        let k: [*const f32; 4] = std::array::from_fn(|u| keys[u].as_ptr());
        // SAFETY: features checked; every pointer addresses hd floats.
        let (pair, single) = unsafe {
            (
                dot4_n::<2>([q0.as_ptr(), q1.as_ptr()], k, hd),
                (dot4(q0.as_ptr(), k, hd), dot4(q1.as_ptr(), k, hd)),
            )
        };
        assert_eq!(pair[0].map(f32::to_bits), single.0.map(f32::to_bits));
        assert_eq!(pair[1].map(f32::to_bits), single.1.map(f32::to_bits));
        let q2 = data(hd, 29);
        // SAFETY: as above.
        let (three, alone) = unsafe {
            (
                dot4_n::<3>([q0.as_ptr(), q1.as_ptr(), q2.as_ptr()], k, hd),
                dot4(q2.as_ptr(), k, hd),
            )
        };
        assert_eq!(three[0].map(f32::to_bits), single.0.map(f32::to_bits));
        assert_eq!(three[1].map(f32::to_bits), single.1.map(f32::to_bits));
        assert_eq!(three[2].map(f32::to_bits), alone.map(f32::to_bits));
        let q3 = data(hd, 37);
        // SAFETY: as above.
        let (four, last) = unsafe {
            (
                dot4_n::<4>([q0.as_ptr(), q1.as_ptr(), q2.as_ptr(), q3.as_ptr()], k, hd),
                dot4(q3.as_ptr(), k, hd),
            )
        };
        assert_eq!(four[2].map(f32::to_bits), alone.map(f32::to_bits));
        assert_eq!(four[3].map(f32::to_bits), last.map(f32::to_bits));

        let rows: Vec<Vec<f32>> = (0..9).map(|p| data(hd, 17 + p)).collect();
        let (w0, w1) = (data(9, 3), data(9, 5));
        let (mut a, mut b) = (data(hd, 19), data(hd, 23));
        let (mut a1, mut b1) = (a.clone(), b.clone());
        // SAFETY: as above; outputs hold hd floats, weights 9.
        unsafe {
            let row = |p: usize| rows[p].as_ptr();
            axpy_n::<2, 4>(
                [a.as_mut_ptr(), b.as_mut_ptr()],
                [w0.as_ptr(), w1.as_ptr()],
                2,
                9,
                row,
            );
            axpy::<4>(a1.as_mut_ptr(), w0.as_ptr(), 2, 9, row);
            axpy::<4>(b1.as_mut_ptr(), w1.as_ptr(), 2, 9, row);
        }
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            a1.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b1.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        let (mut c, w2) = (data(hd, 31), data(9, 7));
        let mut c1 = c.clone();
        let (mut a2, mut b2) = (data(hd, 19), data(hd, 23));
        // SAFETY: as above.
        unsafe {
            let row = |p: usize| rows[p].as_ptr();
            axpy_n::<3, 4>(
                [a2.as_mut_ptr(), b2.as_mut_ptr(), c.as_mut_ptr()],
                [w0.as_ptr(), w1.as_ptr(), w2.as_ptr()],
                2,
                9,
                row,
            );
            axpy::<4>(c1.as_mut_ptr(), w2.as_ptr(), 2, 9, row);
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a2), bits(&a1));
        assert_eq!(bits(&b2), bits(&b1));
        assert_eq!(bits(&c), bits(&c1));
    }
}
