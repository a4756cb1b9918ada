//! The row-chunk tile kernels of `tile_avx2` with the integer block dot done by AVX512-VNNI
//! `vpdpbusd` (EVEX-encoded; needs `avx512vnni`, `avx512vl`, `avx512bw`, `avx512dq`).
//!
//! Two forms: the ymm chunk kernel (one weight row, used for a tile's odd last row), and the
//! zmm pair kernel [`row_pair_chunk_vnni512`] that puts two weight rows in the two halves of
//! one register against the same broadcast activation block: one `vpdpbusd`, one convert, one
//! scale multiply and one FMA per 64 multiply-adds instead of per 32 (measured 1.2-1.5x on
//! the SmolLM2 matrices at 8-32 activation rows, Xeon with AVX512-VNNI).
//!
//! Why a separate variant: AVX-VNNI (the VEX form `tile_avx2` uses) is absent on AMD Zen 4 and
//! on Intel server parts before Sapphire Rapids, which have the same instruction under
//! AVX512-VNNI instead. Without either, the block dot takes `vpmaddubsw` + `vpmaddwd`.
//!
//! Same bits: the block dot is exact in every form (no i16 saturation is possible, see
//! `tile_avx2`; the pair kernel's biased unsigned weights are corrected exactly per i32 lane),
//! and the float sequence per output is the shared `row_chunk_fn!` body's, so an output does
//! not depend on which variant a CPU runs (tested in `matmul`). Compiling that body with
//! AVX-512VL also gives it 32 vector registers, which the chunk of 8 accumulators uses.
//!
//! Safety contract: as `tile_avx2`'s, and the CPU has the AVX-512 features above.

use std::arch::x86_64::*;

// `hsum` and `CH` are named by the shared `row_chunk_fn!` body.
use super::tile_avx2::{hsum, nibbles, row_chunk_fn, Format, CH, Q4_0Q8_0, Q4_1Q8_1, Q8_0Q8_0};

pub(crate) struct Q4_1Q8_1Vnni512;
pub(crate) struct Q4_0Q8_0Vnni512;
pub(crate) struct Q8_0Q8_0Vnni512;

/// Unsigned bytes `x` times signed bytes at `y`, summed in 8 i32 lanes.
#[inline(always)]
unsafe fn idot_unsigned(x: __m256i, y: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, _mm256_loadu_si256(y.cast()))
    }
}

/// Signed bytes `x` times signed bytes at `y` (no -128 in y), summed in 8 i32 lanes: the sign
/// of `x` moves onto `y` so `vpdpbusd` sees `|x|` as unsigned.
#[inline(always)]
unsafe fn idot_signed(x: __m256i, y: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let y = _mm256_loadu_si256(y.cast());
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy)
    }
}

macro_rules! vnni512_format {
    ($name:ident, $base:ident, $idot:ident, $bias:expr, $unsigned:expr) => {
        impl Format for $name {
            const W_BYTES: usize = $base::W_BYTES;
            const A_BYTES: usize = $base::A_BYTES;
            const A_QS: usize = $base::A_QS;
            const HAS_MIN: bool = $base::HAS_MIN;
            const VNNI512: bool = true;
            const BIAS: i32 = $bias;
            #[inline(always)]
            unsafe fn w_prep_unsigned(p: *const u8) -> __m256i {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $unsigned(p)
                }
            }
            #[inline(always)]
            unsafe fn w_scales(p: *const u8) -> (f32, f32) {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $base::w_scales(p)
                }
            }
            #[inline(always)]
            unsafe fn w_prep(p: *const u8) -> __m256i {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $base::w_prep(p)
                }
            }
            #[inline(always)]
            unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $idot(wq, a_qs)
                }
            }
        }
    };
}
// Unsigned weight quants for the pair kernel: Q4_1's nibbles as they are, Q4_0's nibbles
// without the -8 (bias 8), Q8_0's bytes with the sign bit flipped (`w ^ 0x80 == w + 128` read
// as unsigned, bias 128).
#[inline(always)]
unsafe fn q4_1_unsigned(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        nibbles(p.add(4))
    }
}
#[inline(always)]
unsafe fn q4_0_unsigned(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        nibbles(p.add(2))
    }
}
#[inline(always)]
unsafe fn q8_0_unsigned(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_xor_si256(_mm256_loadu_si256(p.add(2).cast()), _mm256_set1_epi8(-128))
    }
}
vnni512_format!(Q4_1Q8_1Vnni512, Q4_1Q8_1, idot_unsigned, 0, q4_1_unsigned);
vnni512_format!(Q4_0Q8_0Vnni512, Q4_0Q8_0, idot_signed, 8, q4_0_unsigned);
vnni512_format!(Q8_0Q8_0Vnni512, Q8_0Q8_0, idot_signed, 128, q8_0_unsigned);

/// Whether the CPU can run the `*Vnni512` formats.
pub(crate) fn has_avx512_vnni() -> bool {
    crate::quant::avx512_allowed()
        && is_x86_feature_detected!("avx512vnni")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512dq")
}

row_chunk_fn!(
    /// `tile_avx2::row_chunk` for the `*Vnni512` formats: the same operation sequence,
    /// compiled with AVX512-VNNI+VL so their `idot` inlines.
    ///
    /// # Safety
    /// As `tile_avx2::row_chunk`, and the CPU has `avx512vnni` and `avx512vl`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    row_chunk_vnni512
);

/// Fills the bias correction of one chunk for [`row_pair_chunk_vnni512`]: for block `b` of row
/// `c`, `corr[(b * CH + c) * 8 + l] = -BIAS * (sum of activation quants 4l..4l+3)`, the amount
/// by which the biased weights overshoot each i32 lane of the exact dot.
///
/// # Safety
/// Every row pointer addresses `nb` activation blocks of `F`; `corr` holds `nb * CH * 8` i32.
pub(crate) unsafe fn act_bias_correction<F: Format>(
    nb: usize,
    rows: &[*const u8],
    corr: &mut [i32],
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        assert!(corr.len() >= nb * CH * 8 && rows.len() <= CH);
        for (c, &row) in rows.iter().enumerate() {
            for b in 0..nb {
                let qs = row.add(b * F::A_BYTES + F::A_QS).cast::<i8>();
                for l in 0..8 {
                    let s: i32 = (0..4).map(|i| *qs.add(4 * l + i) as i32).sum();
                    corr[(b * CH + c) * 8 + l] = -F::BIAS * s;
                }
            }
        }
    }
}

/// Two weight rows `w0`, `w1` against activation rows `a[..C]` at once: the zmm register holds
/// row `w0`'s eight i32 lanes in its low half and row `w1`'s in its high half, the activation
/// block is broadcast to both, so one `vpdpbusd` does 64 multiply-adds. Per output the float
/// operations are exactly `row_chunk`'s (the halves never mix until each is summed by the same
/// `hsum`), so `out0`/`out1` are bit-identical to two calls of the single-row kernels.
///
/// # Safety
/// The CPU has AVX512F/VL/BW/DQ and AVX512-VNNI (and AVX2/FMA/F16C); `w0`, `w1` address `nb`
/// weight blocks, each `a[c]` `nb` activation blocks; `ad`/`asum` hold this chunk's `nb * CH`
/// scales; `corr` this chunk's [`act_bias_correction`] when `F::BIAS != 0`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")]
pub(crate) unsafe fn row_pair_chunk_vnni512<F: Format, const C: usize>(
    nb: usize,
    (w0, w1): (*const u8, *const u8),
    a: &[*const u8; C],
    ad: *const f32,
    asum: *const f32,
    corr: *const i32,
    out0: &mut [f32; C],
    out1: &mut [f32; C],
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm512_setzero_ps(); C];
        let mut accm0 = _mm256_setzero_ps();
        let mut accm1 = _mm256_setzero_ps();
        for b in 0..nb {
            let (p0, p1) = (w0.add(b * F::W_BYTES), w1.add(b * F::W_BYTES));
            let (dw0, mw0) = F::w_scales(p0);
            let (dw1, mw1) = F::w_scales(p1);
            let wq = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(F::w_prep_unsigned(p0)),
                F::w_prep_unsigned(p1),
            );
            let dw = _mm512_insertf32x8::<1>(
                _mm512_castps256_ps512(_mm256_set1_ps(dw0)),
                _mm256_set1_ps(dw1),
            );
            if F::HAS_MIN {
                let sa = _mm256_loadu_ps(asum.add(b * CH));
                accm0 = _mm256_add_ps(accm0, _mm256_mul_ps(_mm256_set1_ps(mw0), sa));
                accm1 = _mm256_add_ps(accm1, _mm256_mul_ps(_mm256_set1_ps(mw1), sa));
            }
            for c in 0..C {
                let aq = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    a[c].add(b * F::A_BYTES + F::A_QS).cast(),
                ));
                let start = if F::BIAS == 0 {
                    _mm512_setzero_si512()
                } else {
                    _mm512_broadcast_i64x4(_mm256_loadu_si256(corr.add((b * CH + c) * 8).cast()))
                };
                let isum = _mm512_dpbusd_epi32(start, wq, aq);
                let dd = _mm512_mul_ps(dw, _mm512_set1_ps(*ad.add(b * CH + c)));
                acc[c] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(isum), acc[c]);
            }
        }
        let mut mv0 = [0f32; CH];
        let mut mv1 = [0f32; CH];
        _mm256_storeu_ps(mv0.as_mut_ptr(), accm0);
        _mm256_storeu_ps(mv1.as_mut_ptr(), accm1);
        for c in 0..C {
            let s0 = hsum(_mm512_castps512_ps256(acc[c]));
            let s1 = hsum(_mm512_extractf32x8_ps::<1>(acc[c]));
            out0[c] = if F::HAS_MIN { s0 + mv0[c] } else { s0 };
            out1[c] = if F::HAS_MIN { s1 + mv1[c] } else { s1 };
        }
    }
}
