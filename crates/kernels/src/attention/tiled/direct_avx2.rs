//! Decode tiles over a half-float cache read in place on CPUs with AVX2 but not AVX-512VL
//! (16 vector registers): the same arithmetic as the widening path, so every score and
//! output lane has the bits `dot4` / `reduce4` and `axpy` give it, without first widening
//! each key and value block to f32 in scratch (at AVX2 that widening, its stores and the
//! loads that read them back were a third of decode attention; docs/BENCHMARKS.md sitting 11).
//!
//! - Scores: keys three at a time (padded with a repeated key, as `dot4` pads to four), each
//!   8-value chunk of each key converted once for every head of the pass (at most
//!   [`MAX_DIRECT_HEADS`]): 9 accumulators, 3 keys and 3 queries in registers. Each key's
//!   accumulator is reduced by `reduce4` with the same tree as in a four-key group.
//! - Values: 8-lane chunks of the head, three at a time, each chunk of a value row converted
//!   once for every head; each lane runs `axpy`'s chain (p ascending from the output's value).
//!
//! Safety contract of both functions: AVX2, FMA and F16C are available; the tile's offsets
//! were bounds-checked for its rows; query, output and weight pointers are as in
//! `Tile::run`.

use std::arch::x86_64::*;

use super::{reduce4, KvElem, Tile, MAX_DIRECT_HEADS};

/// Keys per group of the score pass.
const KEYS: usize = 3;
/// Value chunks (of 8 lanes) per pass over the rows.
const CHUNKS: usize = 3;

/// Scores of the group's heads (`qs`, at most [`MAX_DIRECT_HEADS`]) against keys `p0..pe` of
/// KV head `g`; `rows`: the first head's score row and the stride.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scores<E: KvElem>(
    t: &Tile<'_, E>,
    qs: &[*const f32],
    g: usize,
    keys: (usize, usize),
    rows: (*mut f32, usize),
) {
    unsafe {
        // SAFETY: the module's contract, upheld by the caller.
        match qs.len() {
            1 => scores_n::<E, 1>(t, qs, g, keys, rows),
            2 => scores_n::<E, 2>(t, qs, g, keys, rows),
            _ => scores_n::<E, MAX_DIRECT_HEADS>(t, qs, g, keys, rows),
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_n<E: KvElem, const N: usize>(
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
        let mut p = p0;
        while p < pe {
            // Plain loops: closures would not inherit this function's target features.
            let mut ks = [t.k; KEYS];
            for (u, k) in ks.iter_mut().enumerate() {
                *k = t.k.add(t.offs[(p + u).min(pe - 1)] + g * hd);
            }
            for u in p..(p + KEYS).min(pe) {
                t.prefetch_span::<_MM_HINT_T1>(u, false, g * hd, hd);
            }
            let mut acc = [[_mm256_setzero_ps(); KEYS]; N];
            let mut d = 0;
            while d < hd {
                let mut kv = [_mm256_setzero_ps(); KEYS];
                for (k, src) in kv.iter_mut().zip(ks) {
                    *k = E::load8(src.add(d));
                }
                for (h, acc) in acc.iter_mut().enumerate() {
                    let qv = _mm256_loadu_ps(qs[h].add(d));
                    for (a, k) in acc.iter_mut().zip(kv) {
                        *a = _mm256_fmadd_ps(qv, k, *a);
                    }
                }
                d += 8;
            }
            for (h, acc) in acc.iter().enumerate() {
                // The third key's sums stand in for a fourth: each key's tree is its own.
                let s = reduce4([acc[0], acc[1], acc[2], acc[2]]);
                let row = row0.add(h * stride);
                for (u, &v) in s.iter().enumerate().take((pe - p).min(KEYS)) {
                    *row.add(p + u) = v * t.scale;
                }
            }
            p += KEYS;
        }
    }
}

/// `out_h += w_h(p) * v_p` for keys `p0..pe` of KV head `g` and the group's heads (`outs`, at
/// most [`MAX_DIRECT_HEADS`]); `w`: the first head's weight row and the stride.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn values<E: KvElem>(
    t: &Tile<'_, E>,
    outs: &[*mut f32],
    g: usize,
    keys: (usize, usize),
    w: (*const f32, usize),
) {
    unsafe {
        // SAFETY: the module's contract, upheld by the caller.
        let hd = t.head_dim;
        let mut d0 = 0;
        while d0 < hd {
            let nc = ((hd - d0) / 8).min(CHUNKS);
            let at = (g, d0);
            match (outs.len(), nc) {
                (1, 1) => values_n::<E, 1, 1>(t, outs, at, keys, w),
                (1, 2) => values_n::<E, 1, 2>(t, outs, at, keys, w),
                (1, _) => values_n::<E, 1, CHUNKS>(t, outs, at, keys, w),
                (2, 1) => values_n::<E, 2, 1>(t, outs, at, keys, w),
                (2, 2) => values_n::<E, 2, 2>(t, outs, at, keys, w),
                (2, _) => values_n::<E, 2, CHUNKS>(t, outs, at, keys, w),
                (_, 1) => values_n::<E, MAX_DIRECT_HEADS, 1>(t, outs, at, keys, w),
                (_, 2) => values_n::<E, MAX_DIRECT_HEADS, 2>(t, outs, at, keys, w),
                _ => values_n::<E, MAX_DIRECT_HEADS, CHUNKS>(t, outs, at, keys, w),
            }
            d0 += 8 * nc;
        }
    }
}

/// Lanes `d0..d0 + 8 * NC` of [`values`] for `N` heads.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values_n<E: KvElem, const N: usize, const NC: usize>(
    t: &Tile<'_, E>,
    outs: &[*mut f32],
    (g, d0): (usize, usize),
    (p0, pe): (usize, usize),
    (w0, stride): (*const f32, usize),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let hd = t.head_dim;
        let mut acc = [[_mm256_setzero_ps(); NC]; N];
        for (h, acc) in acc.iter_mut().enumerate() {
            for (c, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(outs[h].add(d0 + 8 * c));
            }
        }
        for p in p0..pe {
            if d0 == 0 {
                t.prefetch_span::<_MM_HINT_T1>(p, true, g * hd, hd);
            }
            let vr = t.v.add(t.offs[p] + g * hd + d0);
            let mut w = [_mm256_setzero_ps(); N];
            for (h, w) in w.iter_mut().enumerate() {
                *w = _mm256_set1_ps(*w0.add(h * stride + p));
            }
            for c in 0..NC {
                let v = E::load8(vr.add(8 * c));
                for (acc, w) in acc.iter_mut().zip(w) {
                    acc[c] = _mm256_fmadd_ps(w, v, acc[c]);
                }
            }
        }
        for (h, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(outs[h].add(d0 + 8 * c), *a);
            }
        }
    }
}
