//! AVX2 activation quantization to Q8_0 and Q8_1, byte-identical to the scalar reference.
//!
//! Same f32 operations as `quant::quantize` (amax is an exact max; d and 1/d are computed
//! in scalar f32; x * id is one IEEE multiply); roundf (half away from zero) is computed as
//! trunc(v + copysign(0.49999997, v)), which equals roundf for every |v| < 2^23. Q8_K uses the
//! scalar path on every ISA.

use super::super::blocks::{as_blocks_mut, f16_to_le, BlockQ8_0, BlockQ8_1, QK};
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
        _ => false,
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
