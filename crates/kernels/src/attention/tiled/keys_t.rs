//! Prefill scores over a transposed key block: eight keys to a vector, so no score waits on a
//! horizontal reduction.
//!
//! A decode row's score is `dot4`'s: lane `l` of an 8-lane accumulator runs the fma chain over
//! `d = 8c + l` (c ascending, from zero), then the lanes are summed by the tree
//! ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), three `vhaddps` per four keys. A prefill tile sees
//! each key block with many queries, so it first lays the block out dimension-major, eight
//! keys to a vector ([`Tile::keys_t`]); then accumulator `A_l` holds lane `l`'s chain for eight
//! keys at once (the same products in the same order: a broadcast query value times eight
//! keys' values) and the tree is seven vertical adds. Every score keeps `dot4`'s bits, so a
//! prefill row equals the decode row of the same query.
//!
//! Queries go in pairs sharing each key vector's loads (as `scores_rows`), the accumulators of
//! lanes 0-3 then 4-7 (8 chains at a time in AVX2's 16 registers). The layout is built once
//! per block for all of a tile's queries (16 to 48). This is the AVX2 tile's path; with
//! AVX-512 the same layout sixteen keys wide feeds 512-bit vectors (`zmm`; eight keys wide in
//! fours of queries measured slower there than `scores_rows`: docs/BENCHMARKS.md,
//! "Transposed key blocks").

use std::arch::x86_64::*;

use super::lanes;
use super::{KvElem, Tile};

/// Keys per vector of a transposed block.
pub(super) const LANES: usize = 8;

impl<E: KvElem> Tile<'_, E> {
    /// KV head `g`'s keys `p0..p1` laid out for [`scores_rows_t`] (`W` = 8) or
    /// `zmm::scores_rows` (`W` = 16): vector `v` holds keys `p0 + W v ..`, at
    /// `kt[(v * head_dim + d) * W + lane]` = key `p0 + W v + lane`, value `d` (a last partial
    /// vector repeats the block's last key; its lanes are never stored). While it reads a
    /// block it asks for the block after it into L2, as `block` does.
    ///
    /// # Safety
    /// As [`Tile::run`]; `kt` holds `(p1 - p0).next_multiple_of(W) * head_dim` floats.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn keys_t<const W: usize>(
        &self,
        g: usize,
        p0: usize,
        p1: usize,
        kt: &mut [f32],
    ) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let hd = self.head_dim;
            assert!(W.is_multiple_of(LANES) && kt.len() >= (p1 - p0).next_multiple_of(W) * hd);
            let dst = kt.as_mut_ptr();
            for v in 0..(p1 - p0).div_ceil(W) {
                for half in 0..W / LANES {
                    let first = p0 + v * W + half * LANES;
                    if !E::IS_F32 {
                        for p in first..(first + LANES).min(p1) {
                            self.prefetch_span::<_MM_HINT_T1>(p, false, g * hd, hd);
                        }
                    }
                    let rows: [*const E; LANES] = std::array::from_fn(|u| {
                        self.k.add(self.offs[(first + u).min(p1 - 1)] + g * hd)
                    });
                    for d in (0..hd).step_by(LANES) {
                        let cols = transpose8(rows.map(|r| E::load8(r.add(d))));
                        for (i, c) in cols.iter().enumerate() {
                            _mm256_storeu_ps(dst.add((v * hd + d + i) * W + half * LANES), *c);
                        }
                    }
                }
            }
        }
    }
}

/// Rows of an 8x8 block as its columns.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Scores of queries `qs` against keys `p0..pe(j)` of a block laid out by [`Tile::keys_t`] at
/// `kt`, in pairs of queries: `lanes::scores_rows_t` in 256-bit lanes.
///
/// # Safety
/// AVX2, FMA; as `lanes::scores_rows_t`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scores_rows_t(
    qs: &[*const f32],
    pe: impl Fn(usize) -> usize,
    kt: *const f32,
    at: (usize, f32),
    p0: usize,
    rows: (*mut f32, usize),
) {
    unsafe {
        // SAFETY: this fn's contract.
        lanes::scores_rows_t::<__m256, 2>(qs, pe, kt, at, p0, rows)
    }
}
