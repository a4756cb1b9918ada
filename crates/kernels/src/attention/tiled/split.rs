//! Decode attention split finer than one work item per (sequence, KV head), for steps whose
//! decode rows give the pool too few of those items: batch 1 of a model with 3 KV heads on 2
//! threads makes 3 items, so one thread does two while the other waits; with 8 KV heads on 16
//! threads half the cores wait.
//!
//! One join of the pool runs two kinds of items from one list:
//! - scores: (row, KV head, range of keys). Every key's score is computed alone (its own fma
//!   chain and reduction tree, whatever keys share its pass), so the ranges change no bit. The
//!   thread that finishes the last range of a KV group then runs the softmax of the group's
//!   heads over their whole rows: the call, on the same values, that the unsplit tile makes.
//! - values: (row, KV head), all heads and lanes of the group as in the unsplit tile (each
//!   lane's fma chain over the keys is sequential, so cutting lanes apart only shortened the
//!   independent chains per pass and measured slower). A value item waits for its group's
//!   softmax; it is listed `threads` score items after the group's last range, so by the time
//!   a thread takes it the ranges are done in the common case, and the score ranges of later
//!   groups fill the threads around the value items.
//!
//! So a split row has the bits of the unsplit tile at any thread count (tested against one
//! thread, a batch of decode rows and the same query in a prefill chunk). Taken only by steps
//! of decode rows alone with grouped heads (2 to 8 heads per KV head, the decode tiles), with
//! fewer than [`ITEMS_PER_THREAD`] KV groups per thread, at most [`MAX_ROWS`] rows and a
//! context of at least [`MIN_CONTEXT`] keys; half-float caches are read in place by the
//! decode tiles' kernels, f32 caches by the f32 tile's. Everything it keeps between calls is
//! sized by a warm step.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};

use super::{
    direct_available, direct_avx2, scores_direct, scores_rows, values_direct, values_rows,
    AttnMetadata, AttnShape, Direct, KvElem, Tile, GROUP_MAX, KB, MAX_DIRECT_HEADS,
};
use crate::ops::softmax_in_place;
use crate::pool::{SharedMut, ThreadPool};
use crate::scratch::Scratch;

/// A step is split when it has fewer KV groups (rows × KV heads) than this per thread.
const ITEMS_PER_THREAD: usize = 2;
/// ... and its longest row sees at least this many keys: below, the split's own costs (the
/// offsets listed by one thread, the softmax waits) outweighed the balance on 2 threads
/// (SmolLM2's shape, `attention_b16_best`: 2-4% slower at 256 keys, mixed at 128, up to 5%
/// faster at 512; docs/BENCHMARKS.md, "split decode attention").
pub(in crate::attention) const MIN_CONTEXT: usize = 512;
/// Rows a split step takes at most: its score rows are one buffer on the calling thread, which
/// a warm step sizes for this many rows at the longest context the block tables allow (with a
/// single KV head and 16 threads the groups bound alone would allow 31 rows).
const MAX_ROWS: usize = 4;
/// Key-range items per thread the score items aim at (the last ones balance the threads).
const RANGES_PER_THREAD: usize = 4;
/// Marks a value item (`[row, VALUES | KV head, 0, 0]`).
const VALUES: u32 = 1 << 31;

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
    /// Score items `[row, KV head, first key, end key]` and value items, in the order threads
    /// take them.
    items: Vec<[u32; 4]>,
    /// Per (row, KV head): 1 + its key ranges not finished yet; 0 once its softmax is done.
    left: Vec<AtomicU32>,
    /// Per (row, KV head): score items listed up to its last one.
    ends: Vec<usize>,
}

thread_local! {
    static PLAN: RefCell<Plan> = const {
        RefCell::new(Plan {
            rows: Vec::new(),
            items: Vec::new(),
            left: Vec::new(),
            ends: Vec::new(),
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

/// Whether steps may be split: on unless `OXLLM_ATTN_SPLIT=0`, or as last set by
/// [`set_allowed`] (both for A/B runs).
pub(in crate::attention) fn allowed() -> bool {
    let v = ALLOWED.load(Ordering::Relaxed);
    if v != UNSET {
        return v == 1;
    }
    let on = std::env::var("OXLLM_ATTN_SPLIT").map_or(true, |v| v != "0");
    let _ = ALLOWED.compare_exchange(UNSET, u8::from(on), Ordering::Relaxed, Ordering::Relaxed);
    ALLOWED.load(Ordering::Relaxed) == 1
}

const UNSET: u8 = 2;
static ALLOWED: AtomicU8 = AtomicU8::new(UNSET);

/// Allows or forbids split steps for the whole process from now on.
pub(in crate::attention) fn set_allowed(on: bool) {
    ALLOWED.store(u8::from(on), Ordering::Relaxed);
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
    if threads < 2 || !(2..=GROUP_MAX).contains(&group) || !allowed() {
        return false;
    }
    let cap = meta.block_table_stride * meta.block_size;
    // Fewer than ITEMS_PER_THREAD * threads groups, and at most MAX_ROWS.
    let max_rows = ((ITEMS_PER_THREAD * threads - 1) / n_kv_heads).min(MAX_ROWS);
    PLAN.with_borrow_mut(|plan| {
        // Bounds of every list below (items: see `plan_items`), reserved on every call so
        // that a warm step leaves them large enough for any later one.
        plan.rows.clear();
        plan.items.clear();
        plan.left.clear();
        plan.ends.clear();
        plan.rows.reserve(max_rows);
        plan.items
            .reserve((RANGES_PER_THREAD + 2 * ITEMS_PER_THREAD) * threads);
        plan.left.reserve(ITEMS_PER_THREAD * threads);
        plan.ends.reserve(ITEMS_PER_THREAD * threads);
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

/// Fills the items of `plan.rows`: with G groups (< ITEMS_PER_THREAD * T), at most
/// `G * ceil(RANGES_PER_THREAD * T / G)` score items and G value items, within the capacity
/// `run` reserves. Group k's value item comes `threads` score items after its last range
/// (or at the end).
fn plan_items(plan: &mut Plan, shape: AttnShape, threads: usize) {
    let n_kv_heads = shape.n_kv_heads;
    let Plan {
        rows,
        items,
        left,
        ends,
    } = plan;
    let ranges = (RANGES_PER_THREAD * threads).div_ceil(rows.len() * n_kv_heads);
    let values = |k: usize| {
        [
            (k / n_kv_heads) as u32,
            VALUES | (k % n_kv_heads) as u32,
            0,
            0,
        ]
    };
    // Groups before `due` have their value item listed; score items listed so far.
    let (mut due, mut scores) = (0, 0);
    for (i, r) in rows.iter().enumerate() {
        let len = r
            .ctx
            .div_ceil(ranges.min(r.ctx.div_ceil(KB)))
            .next_multiple_of(KB);
        for g in 0..n_kv_heads {
            left.push(AtomicU32::new(1 + r.ctx.div_ceil(len) as u32));
            for k0 in (0..r.ctx).step_by(len) {
                let k1 = (k0 + len).min(r.ctx);
                items.push([i as u32, g as u32, k0 as u32, k1 as u32]);
                scores += 1;
                while due < ends.len() && ends[due] + threads <= scores {
                    items.push(values(due));
                    due += 1;
                }
            }
            ends.push(scores);
        }
    }
    items.extend((due..ends.len()).map(values));
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
    let direct = match (E::IS_F32, direct_available()) {
        (true, _) => Direct::No,
        (false, true) => Direct::Avx512,
        (false, false) => Direct::Avx2,
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
        period: 1,
        head_dim: hd,
        scale,
        offs: &offs[r.offs..][..r.ctx],
        k: k_cache.as_ptr(),
        v: v_cache.as_ptr(),
        stride: r.ctx,
        direct,
    };
    // The group's heads a pass takes, from `h`: (first, count); the in-place half-float
    // kernels take at most MAX_DIRECT_HEADS, the f32 ones every head of the group.
    let per_pass = if direct == Direct::No {
        group
    } else {
        MAX_DIRECT_HEADS
    };
    let batches = move |g: usize| {
        (g * group..(g + 1) * group)
            .step_by(per_pass)
            .map(move |h| (h, per_pass.min((g + 1) * group - h)))
    };

    let scores = SharedMut::new(&mut scores[..n_heads * last]);
    let out = SharedMut::new(out);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    pool.run_dynamic(|_, _| loop {
        let _unwinding = Failed(&failed);
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&[r, g, k0, k1]) = plan.items.get(i) else {
            break;
        };
        let (r, k0, k1) = (r as usize, k0 as usize, k1 as usize);
        let row = &plan.rows[r];
        let t = tile(row);
        if g & VALUES != 0 {
            let g = (g & !VALUES) as usize;
            wait_for_softmax(&plan.left[r * n_kv_heads + g], &failed);
            for p0 in (0..row.ctx).step_by(KB) {
                let pe = (p0 + KB).min(row.ctx);
                for (h, n) in batches(g) {
                    let outs: [*mut f32; GROUP_MAX] = std::array::from_fn(|j| {
                        out.ptr_at(row.t * q_width + (h + j.min(n - 1)) * hd)
                    });
                    let w = (
                        scores.ptr_at(row.scores + h * row.ctx).cast_const(),
                        row.ctx,
                    );
                    // SAFETY: AVX2+FMA+F16C checked by the tiled path's caller (AVX-512VL
                    // by `direct_available`); every offset was bounds-checked above; this
                    // item alone writes these heads' output rows (hd floats each, inside
                    // `out`); it reads weight rows (inside `scores`) that nothing writes
                    // after the group's softmax, which it waited for.
                    unsafe {
                        match direct {
                            Direct::Avx512 => values_direct(&t, &outs[..n], g, (p0, pe), w),
                            Direct::Avx2 => direct_avx2::values(&t, &outs[..n], g, (p0, pe), w),
                            Direct::No => values_f32(&t, &outs[..n], g, (p0, pe), w),
                        }
                    }
                }
            }
            continue;
        }
        let g = g as usize;
        for p0 in (k0..k1).step_by(KB) {
            let pe = (p0 + KB).min(k1);
            for (h, n) in batches(g) {
                let qs: [*const f32; GROUP_MAX] = std::array::from_fn(|j| {
                    q[row.t * q_width + (h + j.min(n - 1)) * hd..].as_ptr()
                });
                let rows = (scores.ptr_at(row.scores + h * row.ctx), row.ctx);
                // SAFETY: as for the values; each query row holds hd floats; this item
                // alone writes keys k0..k1 of these heads' score rows, inside `scores`.
                unsafe {
                    match direct {
                        Direct::Avx512 => scores_direct(&t, &qs[..n], g, (p0, pe), rows),
                        Direct::Avx2 => direct_avx2::scores(&t, &qs[..n], g, (p0, pe), rows),
                        Direct::No => scores_f32(&t, &qs[..n], g, (p0, pe), rows),
                    }
                }
            }
        }
        // The last range of the group to finish runs its softmax; AcqRel makes every other
        // range's scores visible to it, and the Release store its weights to value items.
        let left = &plan.left[r * n_kv_heads + g];
        if left.fetch_sub(1, Ordering::AcqRel) == 2 {
            for h in g * group..(g + 1) * group {
                // SAFETY: every range of this group has finished writing, and its value
                // item reads these rows only after the store below.
                softmax_in_place(unsafe { scores.slice(row.scores + h * row.ctx, row.ctx) });
            }
            left.store(0, Ordering::Release);
        }
    });
}

/// Sets its flag when dropped by a panic: an item of the step failed.
struct Failed<'a>(&'a AtomicBool);

impl Drop for Failed<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// Waits until a group's softmax is done. Its ranges were all taken before its value item
/// (the list's order), by threads that are running them, so the wait ends, unless one of
/// them panics (`failed`): then this panics too, and the pool passes the first panic on. It
/// spins first (the ranges usually finish within microseconds), then yields the core.
fn wait_for_softmax(left: &AtomicU32, failed: &AtomicBool) {
    let mut spins = 0u32;
    while left.load(Ordering::Acquire) != 0 {
        if failed.load(Ordering::Relaxed) {
            panic!("a score item of the split decode attention panicked");
        }
        if spins < 1 << 12 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Scores of one KV group's heads `qs` against keys `p0..pe` of an f32 cache, read in place,
/// by the unsplit tile's own loop (`scores_rows`): every score has its bits. `rows`: the
/// first head's score row and stride.
///
/// # Safety
/// AVX2, FMA and F16C; `E` is `f32`; the tile's offsets were bounds-checked for whole cache
/// rows; query rows hold `head_dim` floats; the score rows hold `pe` floats.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_f32<E: KvElem>(
    t: &Tile<'_, E>,
    qs: &[*const f32],
    g: usize,
    keys: (usize, usize),
    rows: (*mut f32, usize),
) {
    unsafe {
        // SAFETY: this fn's contract, upheld by the caller.
        let (hd, k) = (t.head_dim, t.k.cast::<f32>());
        let krow = |p: usize| k.add(t.offs[p] + g * hd);
        scores_rows::<2>(qs, |_| keys.1, krow, (hd, t.scale), keys.0, rows);
    }
}

/// `out_h += w_h(p) * v_p` for keys `p0..pe` of an f32 cache and one KV group's heads `outs`,
/// by the unsplit tile's own loop (`values_rows`): every lane runs its chain. `w`: the first
/// head's weight row and stride.
///
/// # Safety
/// As [`scores_f32`]; output rows hold `head_dim` floats, weight rows `pe`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_f32<E: KvElem>(
    t: &Tile<'_, E>,
    outs: &[*mut f32],
    g: usize,
    keys: (usize, usize),
    w: (*const f32, usize),
) {
    unsafe {
        // SAFETY: this fn's contract, upheld by the caller.
        let (hd, v) = (t.head_dim, t.v.cast::<f32>());
        let vrow = |p: usize, d0: usize| v.add(t.offs[p] + g * hd + d0);
        values_rows::<2>(outs, |_| keys.1, vrow, hd, keys.0, w);
    }
}
