//! AVX2+FMA+F16C kernels (x86_64 only).
//!
//! Guarantees: every `unsafe fn` here is `#[target_feature(enable = "avx2,fma,f16c")]`; the safe
//! wrappers (`vec_dot` / `vec_dot4` tables) are private and only reachable through
//! `super::vec_dot_for` / `super::vec_dot4_for`, which hand them out only after
//! `detected_isa()` found all three features. Loads are unaligned and stay inside the block
//! slices, which the wrappers size from `n` (a short slice panics before any load).

pub(crate) mod float;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod quantize;

use super::{DType, VecDot4Fn, VecDotFn};
use std::arch::x86_64::*;

pub(crate) fn vec_dot(w: DType) -> Option<VecDotFn> {
    Some(match w {
        DType::F32 => float::f32_f32,
        DType::F16 => float::f16_f32,
        DType::BF16 => float::bf16_f32,
        DType::Q4_0 => legacy::q4_0,
        DType::Q4_1 => legacy::q4_1,
        DType::Q8_0 => legacy::q8_0,
        DType::Q4K => kquants::q4_k,
        DType::Q5K => kquants::q5_k,
        DType::Q6K => kquants::q6_k,
        _ => return None,
    })
}

pub(crate) fn vec_dot4(w: DType) -> Option<VecDot4Fn> {
    Some(match w {
        DType::Q4_0 => legacy::q4_0_x4,
        DType::Q4_1 => legacy::q4_1_x4,
        DType::Q8_0 => legacy::q8_0_x4,
        _ => return None,
    })
}

/// Horizontal sum of 8 f32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Horizontal sum of 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// Lane 0 = f16(a) * f16(b) (exact f16 -> f32 conversion, one f32 multiply).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_mul(a: [u8; 2], b: [u8; 2]) -> __m128 {
    let bits = u16::from_le_bytes(a) as i32 | ((u16::from_le_bytes(b) as i32) << 16);
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    _mm_mul_ps(v, _mm_movehdup_ps(v))
}

/// One f16 (little-endian bytes) to f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn f16_one(a: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(
        _mm_cvtsi32_si128(u16::from_le_bytes(a) as i32),
    ))
}

/// 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..16, high nibbles 16..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nibbles_32(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let lo = _mm_loadu_si128(p.cast());
        let hi = _mm_srli_epi16::<4>(lo);
        _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
    }
}

/// Sum of adjacent pairs of i16 lanes as 8 f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn sum_i16_pairs_ps(x: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_madd_epi16(x, _mm256_set1_epi16(1)))
}

/// Dot of unsigned bytes `ax` with signed bytes `sy`, in 8 f32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mul_sum_us8_pairs_ps(ax: __m256i, sy: __m256i) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        sum_i16_pairs_ps(_mm256_maddubs_epi16(ax, sy))
    }
}

/// Dot of signed bytes `x` (any value) with signed bytes `y` (no -128), in 8 f32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn mul_sum_i8_pairs_ps(x: __m256i, y: __m256i) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        mul_sum_us8_pairs_ps(ax, sy)
    }
}
