//! AVX2 activation quantization to Q8_0, Q8_1 and Q8_K, byte-identical to the scalar
//! reference.
//!
//! Same f32 operations as `quant::quantize` (amax is an exact max; d and 1/d are computed
//! in scalar f32; x * id is one IEEE multiply); roundf (half away from zero) is computed as
//! trunc(v + copysign(0.49999997, v)), which equals roundf for every |v| < 2^23. Q8_K picks
//! the first element of largest magnitude (as the reference's strict `>` scan does, NaN never
//! taken), rounds half to even with `vroundps` (NaN to 0), clamps at 127 and sums each 16
//! quants exactly.

use super::super::blocks::{as_blocks_mut, f16_to_le, BlockQ8K, BlockQ8_0, BlockQ8_1, QK, QK_K};
use super::super::quantize::q8_scale;
use super::super::DType;
use super::hsum_i32;
use std::arch::x86_64::*;

/// Quantizes with AVX2 if `dtype` has an AVX2 path and returns true; false otherwise (the
/// caller falls back to scalar). Lengths are already checked; AVX2 support already detected.
pub(crate) fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> bool {
    match dtype {
        DType::Q8_0 => match as_blocks_mut::<BlockQ8_0>(dst) {
            Some(b) if b.len() * QK == src.len() => {
                for (x, y) in src.chunks_exact(QK).zip(b) {
                    // SAFETY: AVX2 detected by the caller; `x` has 32 elements.
                    let (d, _) = unsafe { block(x, &mut y.qs) };
                    y.d = f16_to_le(d);
                }
                true
            }
            _ => false,
        },
        DType::Q8_1 => match as_blocks_mut::<BlockQ8_1>(dst) {
            Some(b) if b.len() * QK == src.len() => {
                for (x, y) in src.chunks_exact(QK).zip(b) {
                    // SAFETY: as above.
                    let (d, sum) = unsafe { block(x, &mut y.qs) };
                    y.d = f16_to_le(d);
                    y.s = f16_to_le(sum as f32 * d);
                }
                true
            }
            _ => false,
        },
        DType::Q8K => match as_blocks_mut::<BlockQ8K>(dst) {
            Some(b) if b.len() * QK_K == src.len() => {
                for (x, y) in src.chunks_exact(QK_K).zip(b) {
                    // SAFETY: AVX2 detected by the caller; `x` has 256 elements.
                    unsafe { block_q8_k(x, y) };
                }
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// Quantizes 256 floats into one Q8_K block (the reference's bytes).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_q8_k(x: &[f32], y: &mut BlockQ8K) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        debug_assert_eq!(x.len(), QK_K);
        let p = x.as_ptr();
        let sign = _mm256_set1_ps(-0.0);
        // max(|v|, m) keeps m where |v| is NaN, as the reference's `>` does.
        let mut m = _mm256_setzero_ps();
        for i in 0..QK_K / 8 {
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * i))), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if amax == 0.0 {
            y.d = 0.0f32.to_le_bytes();
            y.qs = [0; QK_K];
            y.bsums = [[0; 2]; QK_K / 16];
            return;
        }
        // The first element whose magnitude is amax gives the scale its sign.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in 0..QK_K / 8 {
            let v = _mm256_loadu_ps(p.add(8 * i));
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(
                _mm256_andnot_ps(sign, v),
                target,
            ));
            if hit != 0 {
                max = x[8 * i + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let isv = _mm256_set1_ps(iscale);
        let top = _mm256_set1_epi32(127);
        let ones8 = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for c in 0..QK_K / 32 {
            let q: [__m256i; 4] = std::array::from_fn(|k| {
                let s = _mm256_mul_ps(_mm256_loadu_ps(p.add(32 * c + 8 * k)), isv);
                let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(s);
                // NaN (a NaN input, or 0 * inf) quantizes to 0, as the reference's cast does.
                let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(r, r));
                _mm256_min_epi32(_mm256_cvtps_epi32(r), top)
            });
            let i8s = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            // packs work per 128-bit lane: restore element order.
            let ordered = _mm256_permutevar8x32_epi32(i8s, order);
            _mm256_storeu_si256(y.qs.as_mut_ptr().add(32 * c).cast(), ordered);
            // Sums of 4 quants per dword, then of 16 in dword 0 of each 128-bit lane.
            let quads = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, ordered), ones16);
            let pairs = _mm256_hadd_epi32(quads, quads);
            let sums = _mm256_hadd_epi32(pairs, pairs);
            let lo = _mm256_cvtsi256_si32(sums) as i16;
            let hi = _mm256_extract_epi32::<4>(sums) as i16;
            y.bsums[2 * c] = lo.to_le_bytes();
            y.bsums[2 * c + 1] = hi.to_le_bytes();
        }
        y.d = (1.0 / iscale).to_le_bytes();
    }
}

/// Quantizes 32 floats into `qs`; returns (d, sum of qs).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block(x: &[f32], qs: &mut [i8; QK]) -> (f32, i32) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        debug_assert_eq!(x.len(), QK);
        let p = x.as_ptr();
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_andnot_ps(sign, v[0]);
        for &vi in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, vi));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let (d, id) = q8_scale(_mm_cvtss_f32(m4));
        let idv = _mm256_set1_ps(id);
        let half = _mm256_set1_ps(0.499_999_97);
        let q = v.map(|vi| {
            let s = _mm256_mul_ps(vi, idv);
            let h = _mm256_or_ps(half, _mm256_and_ps(s, sign));
            _mm256_cvttps_epi32(_mm256_add_ps(s, h))
        });
        let sum = hsum_i32(_mm256_add_epi32(
            _mm256_add_epi32(q[0], q[1]),
            _mm256_add_epi32(q[2], q[3]),
        ));
        let i16s = [
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        ];
        let i8s = _mm256_packs_epi16(i16s[0], i16s[1]);
        // packs work per 128-bit lane: restore element order.
        let ordered = _mm256_permutevar8x32_epi32(i8s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(qs.as_mut_ptr().cast(), ordered);
        (d, sum)
    }
}
