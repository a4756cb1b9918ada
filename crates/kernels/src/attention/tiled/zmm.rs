//! Prefill tiles on CPUs with AVX-512: sixteen keys to a 512-bit vector in the score pass,
//! sixteen value lanes to a vector in the value pass, every lane computing exactly what its
//! 256-bit counterpart computes.
//!
//! - Scores: the key block laid out by `Tile::keys_t::<16>`; lane `l`'s chains over
//!   `d = 8c + l` for sixteen keys at once (the broadcast query value rides in the fma as a
//!   memory operand), then `dot4`'s tree by vertical adds, as [`keys_t`](super::keys_t) does for
//!   eight keys: every score has `dot4`'s bits, so a prefill row equals its decode row.
//! - Values: `axpy`'s chain per lane (p ascending from the output's value), sixteen lanes to
//!   an fma; a head size that is an odd multiple of 8 ends with `axpy_n`'s 8-lane chunk.
//!
//! Queries go in groups of up to four that share each key or value load over the keys all of
//! them see, then each alone over the rest (as `scores_rows`, `values_rows`).
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA, F16C and AVX-512F/VL;
//! pointers as in `Tile::run` (each query and output row holds `hd` floats, each score row
//! its query's keys up to its end, `kt` the block's vectors).

use std::arch::x86_64::*;

use super::axpy_n;
use super::lanes::{axpy_v, scores_rows_t};

/// Keys (or value lanes) per vector.
pub(super) const W: usize = 16;

/// Scores of queries `qs` against keys `p0..pe(j)` of a block laid out by `Tile::keys_t::<16>`
/// at `kt`, in fours of queries: `lanes::scores_rows_t` in 512-bit lanes.
///
/// # Safety
/// See the module's contract.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(super) unsafe fn scores_rows(
    qs: &[*const f32],
    pe: impl Fn(usize) -> usize,
    kt: *const f32,
    at: (usize, f32),
    p0: usize,
    rows: (*mut f32, usize),
) {
    unsafe {
        // SAFETY: this fn's contract.
        scores_rows_t::<__m512, 4>(qs, pe, kt, at, p0, rows)
    }
}

/// `out_j += w_j(p) * v_p` for queries `outs` and keys `p0..pe(j)`, `vrow(p, d0)` value row
/// `p` from dimension `d0`; `(w0, stride)`: the first query's weight row and the stride.
///
/// # Safety
/// See the module's contract.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
pub(super) unsafe fn values_rows(
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
        let w = |j: usize| w0.add(j * stride);
        let mut j = 0;
        while j < outs.len() {
            let n = (outs.len() - j).min(4);
            let both = (j..j + n).map(&pe).min().unwrap_or(p0).max(p0);
            if both > p0 {
                let keys = (p0, both);
                match n {
                    4 => values_n::<4>(
                        std::array::from_fn(|i| (outs[j + i], w(j + i))),
                        &vrow,
                        hd,
                        keys,
                    ),
                    3 => values_n::<3>(
                        std::array::from_fn(|i| (outs[j + i], w(j + i))),
                        &vrow,
                        hd,
                        keys,
                    ),
                    2 => values_n::<2>(
                        std::array::from_fn(|i| (outs[j + i], w(j + i))),
                        &vrow,
                        hd,
                        keys,
                    ),
                    _ => values_n::<1>([(outs[j], w(j))], &vrow, hd, keys),
                }
            }
            for (i, &o) in outs.iter().enumerate().skip(j).take(n) {
                // Each query alone over the keys past the shared ones.
                let end = pe(i);
                if end > both {
                    values_n::<1>([(o, w(i))], &vrow, hd, (both, end));
                }
            }
            j += n;
        }
    }
}

/// `out += w(p) * v_p` for `N` (output, weight row) pairs over keys `p0..pe`, which all of
/// them see: 64 lanes at a time, then 16, then a last 8 in 256-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl")]
unsafe fn values_n<const N: usize>(
    ow: [(*mut f32, *const f32); N],
    vrow: &impl Fn(usize, usize) -> *const f32,
    hd: usize,
    (p0, pe): (usize, usize),
) {
    unsafe {
        // SAFETY: as `values_rows`'.
        let o = |d0: usize| ow.map(|(o, _)| o.add(d0));
        let w = ow.map(|(_, w)| w);
        let mut d0 = 0;
        while d0 + 4 * W <= hd {
            axpy_v::<__m512, N, 4>(o(d0), w, p0, pe, |p| vrow(p, d0));
            d0 += 4 * W;
        }
        while d0 + W <= hd {
            axpy_v::<__m512, N, 1>(o(d0), w, p0, pe, |p| vrow(p, d0));
            d0 += W;
        }
        if d0 < hd {
            axpy_n::<N, 1>(o(d0), w, p0, pe, |p| vrow(p, d0));
        }
    }
}
