//! Decode attention split finer than one work item per (sequence, KV head), for steps whose
//! decode rows give the pool too few of those items: batch 1 of a model with 3 KV heads on 2
//! threads makes 3 items, so one thread does two while the other waits; with 8 KV heads on 16
//! threads half the cores wait.
//!
//! A split step runs in two joins of the pool:
//! - scores: an item is (row, KV head, range of keys); every key's score is computed alone
//!   (its own fma chain and reduction tree, whatever keys share its pass), so the ranges
//!   change no bit. The thread that finishes the last key range of a KV group then runs the
//!   softmax of the group's heads over their whole rows: the call, on the same values, that
//!   the unsplit tile makes.
//! - values: an item is (row, KV head, range of head lanes); every output lane is its own fma
//!   chain over the keys in ascending order starting from zero, so which lanes share a pass
//!   changes no bit.
//!
//! So a split row has the bits of the unsplit tile at any thread count (tested against one
//! thread, a batch of decode rows and the same query in a prefill chunk). Taken only by steps
//! of decode rows alone, over a half-float cache with grouped heads (the tiles that read the
//! cache in place), with fewer than [`ITEMS_PER_THREAD`] KV groups per thread and a context of
//! at least [`MIN_CONTEXT`] keys; everything it keeps between calls is sized by a warm step.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use super::{
    direct_available, direct_avx2, scores_direct, values_direct, AttnMetadata, AttnShape, Direct,
    KvElem, Tile, KB, MAX_DIRECT_HEADS, QT,
};
use crate::ops::softmax_in_place;
use crate::pool::{SharedMut, ThreadPool};
use crate::scratch::Scratch;

/// A step is split when it has fewer KV groups (rows × KV heads) than this per thread.
const ITEMS_PER_THREAD: usize = 2;
/// ... and its longest row sees at least this many keys.
const MIN_CONTEXT: usize = 0;
/// Key-range items per thread the score part aims at (the last ones balance the threads).
const RANGES_PER_THREAD: usize = 4;
/// Lane-range items per thread the value part aims at.
const PARTS_PER_THREAD: usize = 2;

/// One decode row of a split step.
struct Row {
    /// Its sequence and query row.
    s: usize,
    t: usize,
    /// Keys it sees.
    ctx: usize,
    /// Where its key offsets and its score rows (one per head, `ctx` long) start.
    offs: usize,
    scores: usize,
}

/// A split step's work, kept per calling thread for its capacity.
struct Plan {
    rows: Vec<Row>,
    /// Score items: [row, KV head, first key, end key].
    keys: Vec<[u32; 4]>,
    /// Value items: [row, KV head, first lane, end lane].
    lanes: Vec<[u32; 4]>,
    /// Key ranges of each (row, KV head) not finished yet.
    left: Vec<AtomicU32>,
}

thread_local! {
    static PLAN: RefCell<Plan> = const {
        RefCell::new(Plan {
            rows: Vec::new(),
            keys: Vec::new(),
            lanes: Vec::new(),
            left: Vec::new(),
        })
    };
}

#[cfg(test)]
thread_local! {
    /// Split steps run by this thread (tests check that a split really ran).
    static SPLITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Split steps this thread has run.
#[cfg(test)]
pub(in crate::attention) fn splits_here() -> usize {
    SPLITS.with(|c| c.get())
}

/// Runs the step split if it is one this module takes (see the module doc) and says whether
/// it did; otherwise it has written nothing. `out` is zero on entry.
#[allow(clippy::too_many_arguments)]
pub(super) fn run<E: KvElem>(
    pool: &ThreadPool,
    q: &[f32],
    k_cache: &[E],
    v_cache: &[E],
    meta: &AttnMetadata<'_>,
    shape: AttnShape,
    out: &mut [f32],
) -> bool {
    let threads = pool.n_threads();
    let AttnShape {
        n_heads,
        n_kv_heads,
        ..
    } = shape;
    let group = n_heads / n_kv_heads;
    if E::IS_F32 || threads < 2 || group < 2 || group > QT {
        return false;
    }
    let cap = meta.block_table_stride * meta.block_size;
    // Fewer than ITEMS_PER_THREAD * threads groups: at most this many rows.
    let max_rows = (ITEMS_PER_THREAD * threads - 1) / n_kv_heads;
    PLAN.with_borrow_mut(|plan| {
        // Bounds of every list below (items: see `plan_items`), reserved on every call so
        // that a warm step leaves them large enough for any later one.
        plan.rows.clear();
        plan.keys.clear();
        plan.lanes.clear();
        plan.left.clear();
        plan.rows.reserve(max_rows);
        plan.left.reserve(ITEMS_PER_THREAD * threads);
        plan.keys
            .reserve((RANGES_PER_THREAD + ITEMS_PER_THREAD) * threads);
        plan.lanes
            .reserve(2 * (PARTS_PER_THREAD + ITEMS_PER_THREAD) * threads);
        if pool.all_join() && max_rows > 0 {
            // A warm step: grow this thread's spares to the split's shared buffers now.
            let _scores = Scratch::<f32>::take_dirty(max_rows * n_heads * cap);
            let _offs = Scratch::<usize>::take_dirty(max_rows * cap);
        }
        if !plan_rows(plan, q, meta, shape, threads, max_rows) {
            return false;
        }
        plan_items(plan, shape, threads);
        #[cfg(test)]
        SPLITS.with(|c| c.set(c.get() + 1));
        run_plan(pool, plan, q, k_cache, v_cache, meta, shape, out);
        true
    })
}

/// Fills `plan.rows` if the step is one to split.
fn plan_rows(
    plan: &mut Plan,
    q: &[f32],
    meta: &AttnMetadata<'_>,
    shape: AttnShape,
    threads: usize,
    max_rows: usize,
) -> bool {
    let q_width = shape.n_heads * shape.head_dim;
    let cap = meta.block_table_stride * meta.block_size;
    let (mut rows, mut longest) = (0, 0);
    for s in 0..meta.seq_lens.len() {
        let (a, b) = (
            meta.query_start_loc[s] as usize,
            meta.query_start_loc[s + 1] as usize,
        );
        let ctx = meta.seq_lens[s] as usize;
        if ctx == 0 || b <= a {
            continue;
        }
        // A prefill chunk (its query tiles keep the threads busy), or metadata the tiled
        // path rejects with its message.
        if b - a != 1 || ctx > cap || b * q_width > q.len() {
            return false;
        }
        rows += 1;
        longest = longest.max(ctx);
    }
    if rows == 0
        || rows > max_rows
        || rows * shape.n_kv_heads >= ITEMS_PER_THREAD * threads
        || longest < MIN_CONTEXT
    {
        return false;
    }
    let (mut offs, mut scores) = (0, 0);
    for s in 0..meta.seq_lens.len() {
        let a = meta.query_start_loc[s] as usize;
        let ctx = meta.seq_lens[s] as usize;
        if ctx == 0 || meta.query_start_loc[s + 1] as usize <= a {
            continue;
        }
        plan.rows.push(Row {
            s,
            t: a,
            ctx,
            offs,
            scores,
        });
        offs += ctx;
        scores += shape.n_heads * ctx;
    }
    true
}

/// Fills the score and value items of `plan.rows`: with G groups (< ITEMS_PER_THREAD * T),
/// at most `G * ceil(RANGES_PER_THREAD * T / G)` key ranges and `2 * G * ceil(PARTS_PER_THREAD
/// * T / G)` lane ranges, within the capacity `run` reserves.
fn plan_items(plan: &mut Plan, shape: AttnShape, threads: usize) {
    let (n_kv_heads, hd) = (shape.n_kv_heads, shape.head_dim);
    let groups = plan.rows.len() * n_kv_heads;
    let ranges = (RANGES_PER_THREAD * threads).div_ceil(groups);
    // Lanes in units a value pass takes whole: AVX-512 16-lane chunks; AVX2 passes of
    // three 8-lane chunks (each pass reads the value rows again, so a cut there is free).
    let unit = if direct_available() { 16 } else { 24 };
    let units = hd.div_ceil(unit);
    let parts = (PARTS_PER_THREAD * threads).div_ceil(groups).min(units);
    let part = unit * (units / parts);
    for (i, r) in plan.rows.iter().enumerate() {
        let len = r
            .ctx
            .div_ceil(ranges.min(r.ctx.div_ceil(KB)))
            .next_multiple_of(KB);
        for g in 0..n_kv_heads {
            plan.left.push(AtomicU32::new(r.ctx.div_ceil(len) as u32));
            for k0 in (0..r.ctx).step_by(len) {
                let k1 = (k0 + len).min(r.ctx);
                plan.keys.push([i as u32, g as u32, k0 as u32, k1 as u32]);
            }
            for d0 in (0..hd).step_by(part) {
                let d1 = (d0 + part).min(hd);
                plan.lanes.push([i as u32, g as u32, d0 as u32, d1 as u32]);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_plan<E: KvElem>(
    pool: &ThreadPool,
    plan: &Plan,
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
        head_dim: hd,
        scale,
    } = shape;
    let group = n_heads / n_kv_heads;
    let q_width = n_heads * hd;
    let kv_width = n_kv_heads * hd;
    let direct = if direct_available() {
        Direct::Avx512
    } else {
        Direct::Avx2
    };
    let last = plan.rows.last().map_or(0, |r| r.offs + r.ctx);
    // Every offset and every score is written before it is read.
    let mut offs = Scratch::<usize>::take_dirty(last);
    let mut scores = Scratch::<f32>::take_dirty(n_heads * last);
    // Offsets of whole cache rows (KV head 0; a tile adds its head's), bounds-checked here.
    let bs = meta.block_size;
    let cache_len = k_cache.len().min(v_cache.len());
    for r in &plan.rows {
        let table = &meta.block_tables[r.s * meta.block_table_stride..];
        for (bi, chunk) in offs[r.offs..][..r.ctx].chunks_mut(bs).enumerate() {
            let first = table[bi] as usize * bs * kv_width;
            let end = first + chunk.len() * kv_width;
            assert!(end <= cache_len, "K/V slot outside the cache");
            for (i, o) in chunk.iter_mut().enumerate() {
                *o = first + i * kv_width;
            }
        }
    }
    let offs = &offs[..];
    let tile = |r: &Row| Tile {
        nq: n_heads,
        groups: n_kv_heads,
        first_ctx: r.ctx,
        ctx_step: 0,
        head_dim: hd,
        scale,
        offs: &offs[r.offs..][..r.ctx],
        k: k_cache.as_ptr(),
        v: v_cache.as_ptr(),
        stride: r.ctx,
        direct,
    };
    // The group's heads from `h`, at most MAX_DIRECT_HEADS: (first, count).
    let batches = |g: usize| {
        (g * group..(g + 1) * group)
            .step_by(MAX_DIRECT_HEADS)
            .map(move |h| (h, MAX_DIRECT_HEADS.min((g + 1) * group - h)))
    };

    let shared = SharedMut::new(&mut scores[..n_heads * last]);
    let next = AtomicUsize::new(0);
    pool.run_dynamic(|_, _| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&item) = plan.keys.get(i) else {
            break;
        };
        let [r, g, k0, k1] = item.map(|x| x as usize);
        let row = &plan.rows[r];
        let t = tile(row);
        for p0 in (k0..k1).step_by(KB) {
            let pe = (p0 + KB).min(k1);
            for (h, n) in batches(g) {
                let qs: [*const f32; MAX_DIRECT_HEADS] = std::array::from_fn(|j| {
                    q[row.t * q_width + (h + j.min(n - 1)) * hd..].as_ptr()
                });
                let rows = (shared.ptr_at(row.scores + h * row.ctx), row.ctx);
                // SAFETY: AVX2+FMA+F16C checked by the tiled path's caller (AVX-512VL by
                // `direct_available`); every offset was bounds-checked above; each query row
                // holds hd floats; this item alone writes keys k0..k1 of these heads' score
                // rows, which lie inside the shared buffer.
                unsafe {
                    if direct == Direct::Avx512 {
                        scores_direct(&t, &qs[..n], g, (p0, pe), rows);
                    } else {
                        direct_avx2::scores(&t, &qs[..n], g, (p0, pe), rows);
                    }
                }
            }
        }
        // The last key range of the group to finish runs its softmax; AcqRel makes every
        // other range's scores visible to it.
        if plan.left[r * n_kv_heads + g].fetch_sub(1, Ordering::AcqRel) == 1 {
            for h in g * group..(g + 1) * group {
                // SAFETY: every key range of this group has finished writing, and nothing
                // else touches these rows until the pool's join.
                softmax_in_place(unsafe { shared.slice(row.scores + h * row.ctx, row.ctx) });
            }
        }
    });

    let scores = &scores[..];
    let out = SharedMut::new(out);
    let next = AtomicUsize::new(0);
    pool.run_dynamic(|_, _| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&item) = plan.lanes.get(i) else {
            break;
        };
        let [r, g, d0, d1] = item.map(|x| x as usize);
        let row = &plan.rows[r];
        let t = tile(row);
        for p0 in (0..row.ctx).step_by(KB) {
            let pe = (p0 + KB).min(row.ctx);
            for (h, n) in batches(g) {
                let outs: [*mut f32; MAX_DIRECT_HEADS] =
                    std::array::from_fn(|j| out.ptr_at(row.t * q_width + (h + j.min(n - 1)) * hd));
                let w = scores[row.scores + h * row.ctx..].as_ptr();
                // SAFETY: as for the scores; this item alone writes lanes d0..d1 of these
                // heads' output rows (hd floats each, inside `out`), and reads weights the
                // score part finished before its join.
                unsafe {
                    if direct == Direct::Avx512 {
                        values_direct(&t, &outs[..n], g, (p0, pe), (w, row.ctx), (d0, d1));
                    } else {
                        direct_avx2::values(&t, &outs[..n], g, (p0, pe), (w, row.ctx), (d0, d1));
                    }
                }
            }
        }
    });
}
