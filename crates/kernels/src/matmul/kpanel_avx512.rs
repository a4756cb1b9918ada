//! The AVX512-VNNI k-quant panel kernel: a whole panel of `kpanel` (its 16 weight rows, one
//! zmm register per quant dword) against up to [`CALL_ROWS`] Q8_K activation rows, every
//! super-block of the row, giving the scalar reference's bits (`kpanel::kpanel_dot_ref`) like
//! the AVX2 kernel (`kpanel_avx2`), so an output never depends on which of them a CPU runs.
//!
//! The integer sums are exact in both kernels, only built differently: here `vpdpbusd` adds
//! each dword's four products of the 16 rows' unsigned quants (Q4_K `0..=15`, Q5_K `0..=31`,
//! Q6_K `0..=63`, decoded as in `kpanel_avx2`) and a broadcast activation dword straight into
//! an i32 sum per scale group (a 32-quant sub-block; Q6_K a 16-quant group: at most
//! `32 * 63 * 128` in magnitude), which one `vpmulld` by the group's scale adds into the
//! super-block's `isum`. Q6_K's `-32` offset and the Q4_K/Q5_K mins come from Q8_K's `bsums`
//! by `vpmaddwd`, as in the AVX2 kernel. Then per row one convert, one multiply by the scales
//! and one fma (mins: a second, negated), in the reference's order.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX512F/BW/VL/VNNI, AVX2, FMA and
//! F16C (checked by `panel_avx512::available` before a plan picks this kernel), the panel
//! pointer addresses `nb` records of the format, each activation row pointer addresses `nb`
//! Q8_K blocks, and each `out[c] + col` is valid for the lanes set in `mask`.

use std::arch::x86_64::*;

use super::kpanel::{KPanelFormat, A_BSUMS, A_BYTES, A_QS, Q5K, Q6K};
use super::kpanel_avx2::ask_for;
use super::panel::P;

/// Activation rows per kernel call: each row keeps a group sum, a super-block sum and an
/// accumulator (24 of the 32 zmm registers at 8 rows), beside the weight and constants.
pub(crate) const CALL_ROWS: usize = 8;

/// The panel at `panel` (format `f`, kind `K`) against the `C` activation rows `acts`
/// (`C <= CALL_ROWS`); lanes `mask` go to columns `col..col + 16` of each `out` row. Block
/// `b` of the panel at `ahead` (null: none) is asked for alongside block `b`, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn kpanel_full<const C: usize, const K: u8>(
    f: &KPanelFormat,
    nb: usize,
    (panel, ahead): (*const u8, *const u8),
    acts: &[*const u8; C],
    out: &[*mut f32; C],
    (col, mask): (usize, u16),
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let mut acc = [_mm512_setzero_ps(); C];
        let rec = f.record;
        // Q4_K/Q5_K: 8 sub-blocks of 8 dwords; Q6_K: 16 groups of 4.
        let (groups, dwords) = if K == Q6K { (16, 4) } else { (8, 8) };
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let a: [*const u8; C] = std::array::from_fn(|c| acts[c].add(b * A_BYTES));
            let mut isum = [_mm512_setzero_si512(); C];
            for g in 0..groups {
                let mut group = [_mm512_setzero_si512(); C];
                for d in 0..dwords {
                    // Dword `k` of 32-quant sub-block `j`.
                    let (j, k) = if K == Q6K {
                        (g / 2, 4 * (g % 2) + d)
                    } else {
                        (g, d)
                    };
                    let w = quants::<K>(f, r, j, k);
                    each_row!(C, c => {
                        let x = _mm512_set1_epi32(a[c].add(A_QS + 32 * j + 4 * k).cast::<i32>().read_unaligned());
                        group[c] = _mm512_dpbusd_epi32(group[c], w, x);
                    });
                }
                let s = _mm_loadu_si128(r.add(f.sc + g * P).cast());
                let sc = if K == Q6K {
                    _mm512_cvtepi8_epi32(s)
                } else {
                    _mm512_cvtepu8_epi32(s)
                };
                each_row!(C, c => {
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(group[c], sc));
                });
            }
            if K == Q6K {
                // -32 * sum_g sc_g * bsum_g, by pairs of groups.
                let mut off = [_mm512_setzero_si512(); C];
                for i in 0..8 {
                    let s = r.add(f.sc + 2 * i * P);
                    let sc = pairs(s, s.add(P), true);
                    each_row!(C, c => {
                        let bs = _mm512_set1_epi32(a[c].add(A_BSUMS + 4 * i).cast::<i32>().read_unaligned());
                        off[c] = _mm512_add_epi32(off[c], _mm512_madd_epi16(sc, bs));
                    });
                }
                each_row!(C, c => {
                    isum[c] = _mm512_sub_epi32(isum[c], _mm512_slli_epi32::<5>(off[c]));
                });
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(f.d).cast()));
            each_row!(C, c => {
                let da = _mm512_set1_ps(a[c].cast::<f32>().read_unaligned());
                let s = _mm512_mul_ps(dw, da);
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), s, acc[c]);
            });
            if K != Q6K {
                // sum_j mn_j * (bsum_2j + bsum_2j+1): each lane's min in both i16 of its dword
                // against the broadcast dword of the two bsums.
                let mut imin = [_mm512_setzero_si512(); C];
                for j in 0..8 {
                    let m = r.add(f.mn + j * P);
                    let mn = pairs(m, m, false);
                    each_row!(C, c => {
                        let bs = _mm512_set1_epi32(a[c].add(A_BSUMS + 4 * j).cast::<i32>().read_unaligned());
                        imin[c] = _mm512_add_epi32(imin[c], _mm512_madd_epi16(mn, bs));
                    });
                }
                let dm = _mm512_cvtph_ps(_mm256_loadu_si256(r.add(f.dmin).cast()));
                each_row!(C, c => {
                    let da = _mm512_set1_ps(a[c].cast::<f32>().read_unaligned());
                    let s = _mm512_mul_ps(dm, da);
                    acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin[c]), s, acc[c]);
                });
            }
        }
        for (o, a) in out.iter().zip(&acc) {
            // Masked lanes are neither written nor touched (no fault past the row's end).
            _mm512_mask_storeu_ps(o.wrapping_add(col), mask, *a);
        }
    }
}

/// The 16 lanes' unsigned quants of dword `k` of sub-block `j` in the record at `r` (the
/// decoding of `kpanel_avx2::quants`, both halves at once).
#[inline(always)]
unsafe fn quants<const K: u8>(f: &KPanelFormat, r: *const u8, j: usize, k: usize) -> __m512i {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let ld = |at: usize| _mm512_loadu_si512(r.add(at).cast());
        let low = _mm512_set1_epi8(0x0F);
        if K == Q6K {
            let (hh, jj) = (j / 4, j % 4);
            let ql = ld(f.qs + 64 * (16 * hh + 8 * (jj & 1) + k));
            let lo = if jj < 2 {
                ql
            } else {
                _mm512_srli_epi16::<4>(ql)
            };
            let qh = ld(f.qh + 64 * (8 * hh + k));
            let hi = _mm512_slli_epi16::<4>(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * jj as i32)));
            _mm512_or_si512(
                _mm512_and_si512(lo, low),
                _mm512_and_si512(hi, _mm512_set1_epi8(0x30)),
            )
        } else {
            let x = ld(f.qs + 64 * (8 * (j / 2) + k));
            let x = if j.is_multiple_of(2) {
                x
            } else {
                _mm512_srli_epi16::<4>(x)
            };
            let q = _mm512_and_si512(x, low);
            if K == Q5K {
                let qh = ld(f.qh + 64 * k);
                let hi = _mm512_slli_epi16::<4>(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(j as i32)));
                _mm512_or_si512(q, _mm512_and_si512(hi, _mm512_set1_epi8(0x10)))
            } else {
                q
            }
        }
    }
}

/// 16 lanes' bytes at `p0` and `p1` as i16 pairs `(p0[l], p1[l])` in dword `l` (`signed`:
/// bytes are i8, else u8).
#[inline(always)]
unsafe fn pairs(p0: *const u8, p1: *const u8, signed: bool) -> __m512i {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let (x0, x1) = (
            _mm_loadu_si128(p0.cast::<__m128i>()),
            _mm_loadu_si128(p1.cast::<__m128i>()),
        );
        let (lo, hi) = if signed {
            (_mm512_cvtepi8_epi32(x0), _mm512_cvtepi8_epi32(x1))
        } else {
            (_mm512_cvtepu8_epi32(x0), _mm512_cvtepu8_epi32(x1))
        };
        _mm512_or_si512(
            _mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
            _mm512_slli_epi32::<16>(hi),
        )
    }
}
