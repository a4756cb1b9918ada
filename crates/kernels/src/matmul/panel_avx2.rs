//! The AVX2 panel kernels: the panels of `panel` (16 weight rows interleaved, the same bytes
//! the AVX512-VNNI kernels read) run on CPUs with AVX2+FMA+F16C and no AVX-512, giving the
//! scalar reference's bits (`panel::panel_dot_ref`, `panel::wide_dot_ref`) like every panel
//! kernel, so an output never depends on which kernel a CPU runs.
//!
//! A ymm register holds 8 lanes, half a panel: a call computes one half (rows `8h..8h + 8`,
//! the `h`-th 32 bytes of every 64-byte quant register of a record) against up to
//! [`CALL_ROWS`] ([`WIDE_CALL_ROWS`]) activation rows, every block of the row. Per block,
//! each activation dword is broadcast and multiplied into all 8 lanes at once, so no
//! horizontal sum is needed:
//! - Q4_0 / Q4_1 (nibbles `0..=15`): `vpmaddubsw` of the nibbles by the broadcast signed
//!   activation bytes gives i16 pairs of at most `2 * 15 * 127`; the 8 of a block add up in
//!   i16 without overflow (at most 30480), and one `vpmaddwd` by ones makes the exact i32 sum.
//!   Q4_0's nibbles are `w + 8`: the plan's correction `-8 * sum(a)` is added once per block.
//! - Q8_0 (stored `w ^ 0x80`): the sign bit is flipped back, then `vpmaddubsw(|w|, a * sgn w)`
//!   (pairs of at most `2 * 128 * 127`, no saturation) and `vpmaddwd` per dword: the exact
//!   signed dot, equal to the reference's biased sum plus its correction.
//! - wide Q8_0 (16-bit activations, the output head): weight pairs sign-extended to i16 and
//!   `vpmaddwd` by the broadcast activation pair, the exact sum `vpdpwssd` gives.
//!
//! then per row one convert, one multiply by the scales and one (Q4_1: two) fma, in the
//! reference's order. Activation rows use the chunk layout of `panel::pack_acts` /
//! `panel::pack_act16`, shared with the AVX512-VNNI kernels.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA and F16C (the plan is
//! built only after `quant::detected_isa()` said so), the panel pointer addresses `nb`
//! records of the format, the chunk pointers address `nb` blocks of the packed activations
//! for the call's rows, and each `out[c] + col` is valid for the lanes set in `bits`.

use std::arch::x86_64::*;

use super::panel_avx512::{Chunk, WideChunk, CH};
use crate::quant::QK;

/// Activation rows per call of [`panel_half`]: each row keeps an accumulator and an i16 sum
/// beside the weight and constant registers. 16 ymm registers hold all of that for 6 rows;
/// at 8 a few accumulators spill, touched once per block, which costs less than the weight
/// loads and nibble unpacking saved by two calls (instead of four) per half panel at batch 16:
/// single-thread m = 16 Q4_1 1536x576, AVX2, best of 1000 (docs/BENCHMARKS.md, sitting 9):
/// 157-167 us at 8 rows against 189 us at 4, 182 us at 6.
pub(crate) const CALL_ROWS: usize = 8;

/// Activation rows per call of [`wide_half`]: its 8 i32 sums per row leave room for 6
/// rows without spilling; 8 rows spill into every pair dword and ran no faster than 4.
pub(crate) const WIDE_CALL_ROWS: usize = 6;

/// Lane mask of the set bits of `bits` (lane `i` for bit `i`), for `vmaskmovps`.
#[inline(always)]
unsafe fn lane_mask(bits: u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let pick = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
        _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits as i32), pick), pick)
    }
}

/// Half `h` of the panel at `panel` (format given by `MIN`, `NIB`, `BIAS`: as the AVX512-VNNI
/// `panel_pair`'s; `scale_bytes` and `rec` as in `panel::PanelFormat`) against the chunk's
/// first `C` rows (`C <= CALL_ROWS`); lanes `bits` go to columns `col..col + 8` of each
/// output row. Block `b` of the panel at `ahead` (null: none) is asked for alongside block `b`
/// of this one, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn panel_half<
    const C: usize,
    const MIN: bool,
    const NIB: bool,
    const BIAS: bool,
>(
    nb: usize,
    rec: usize,
    scale_bytes: usize,
    (panel, h, ahead): (*const u8, usize, *const u8),
    ch: &Chunk<C>,
    (col, bits): (usize, u8),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); C];
        let low = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let flip = _mm256_set1_epi8(-128);
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let q = r.add(scale_bytes + 32 * h);
            let (qs, terms) = (ch.qs.add(b * CH * QK), ch.terms.add(b * 2 * CH));
            let mut isum = [_mm256_setzero_si256(); C];
            if NIB {
                // Quant dword j in the low nibbles, j + 4 in the high ones.
                let mut s16 = [_mm256_setzero_si256(); C];
                for j in 0..4 {
                    let x = _mm256_loadu_si256(q.add(64 * j).cast());
                    let lo = _mm256_and_si256(x, low);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
                    each_row!(C, c => {
                        let a = qs.add(c * QK).cast::<i32>();
                        let xl = _mm256_set1_epi32(a.add(j).read_unaligned());
                        let xh = _mm256_set1_epi32(a.add(j + 4).read_unaligned());
                        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, xl));
                        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, xh));
                    });
                }
                each_row!(C, c => {
                    isum[c] = _mm256_madd_epi16(s16[c], ones);
                    if BIAS {
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_set1_epi32(*ch.corr.add(b * CH + c)));
                    }
                });
            } else {
                for j in 0..8 {
                    let w = _mm256_xor_si256(_mm256_loadu_si256(q.add(64 * j).cast()), flip);
                    let aw = _mm256_sign_epi8(w, w);
                    each_row!(C, c => {
                        let a = qs.add(c * QK).cast::<i32>();
                        let x = _mm256_set1_epi32(a.add(j).read_unaligned());
                        let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, ones));
                    });
                }
            }
            add_block::<C, MIN>((r, h), terms, &isum, &mut acc);
        }
        store(&ch.out, col, bits, &acc);
    }
}

/// [`panel_half`] for the wide Q8_0 format against 16-bit activation rows
/// (`panel::pack_act16`): per block and pair dword `j`, the half's 8 weight pairs are
/// sign-extended once and every row's dword broadcast into one `vpmaddwd`.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn wide_half<const C: usize>(
    nb: usize,
    rec: usize,
    (panel, h, ahead): (*const u8, usize, *const u8),
    ch: &WideChunk<C>,
    (col, bits): (usize, u8),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); C];
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let (pairs, ad) = (ch.pairs.add(b * CH * QK / 2), ch.ad.add(b * CH));
            let mut isum = [_mm256_setzero_si256(); C];
            for j in 0..QK / 2 {
                let w = _mm256_cvtepi8_epi16(_mm_loadu_si128(r.add(32 + 32 * j + 16 * h).cast()));
                each_row!(C, c => {
                    let x = _mm256_set1_epi32(*pairs.add(c * QK / 2 + j));
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(w, x));
                });
            }
            add_block::<C, false>((r, h), ad, &isum, &mut acc);
        }
        store(&ch.out, col, bits, &acc);
    }
}

/// Adds block `r`'s products to each row's accumulator, in the reference's order: per row,
/// `acc = fma(f32(isum), dw * da, acc)` with the half `h`'s weight scales, then (`MIN`)
/// `acc = fma(mw, sa, acc)`. `terms` is the block's scales then sums (`panel::pack_acts`).
/// Shared by every half-panel kernel, so all of them round alike.
#[inline(always)]
pub(crate) unsafe fn add_block<const C: usize, const MIN: bool>(
    (r, h): (*const u8, usize),
    terms: *const f32,
    isum: &[__m256i; C],
    acc: &mut [__m256; C],
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(r.add(16 * h).cast()));
        each_row!(C, c => {
            let s = _mm256_mul_ps(dw, _mm256_set1_ps(*terms.add(c)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), s, acc[c]);
        });
        if MIN {
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(r.add(32 + 16 * h).cast()));
            each_row!(C, c => {
                acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(*terms.add(CH + c)), acc[c]);
            });
        }
    }
}

/// Writes lanes `bits` of each row's accumulator to `out[c] + col`.
#[inline(always)]
pub(crate) unsafe fn store<const C: usize>(
    out: &[*mut f32; C],
    col: usize,
    bits: u8,
    acc: &[__m256; C],
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        if bits == u8::MAX {
            for (o, a) in out.iter().zip(acc) {
                _mm256_storeu_ps(o.add(col), *a);
            }
        } else {
            // Masked lanes are neither written nor touched (no fault past the row's end).
            let mask = lane_mask(bits);
            for (o, a) in out.iter().zip(acc) {
                _mm256_maskstore_ps(o.wrapping_add(col), mask, *a);
            }
        }
    }
}

/// Asks for bytes `at..at + len` of the panel at `p` (null: nothing) into the caches, without
/// waiting for them.
#[inline(always)]
pub(crate) fn ask_for(p: *const u8, at: usize, len: usize) {
    if p.is_null() {
        return;
    }
    let start = p.wrapping_add(at) as usize;
    let mut line = start & !63;
    while line < start + len {
        // SAFETY: a prefetch is a hint that never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
        line += 64;
    }
}
