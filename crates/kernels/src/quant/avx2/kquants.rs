//! AVX2 dots of the K-quant formats with Q8_K activations: Q4_K, Q5_K, Q6_K.
//!
//! Per 256-element super-block: exact i32 dots of 32-element groups (maddubs -> madd with the
//! group's integer scale), one f32 FMA with d_w * d_a; mins (Q4_K/Q5_K) and Q6_K's -32 offset
//! come from Q8_K's `bsums` with one madd. Results differ from the scalar reference only by
//! f32 rounding of the per-super-block terms and summation order.

use super::super::blocks::{view_n, BlockQ4K, BlockQ5K, BlockQ6K, BlockQ8K, QK_K};
use super::*;
use std::arch::x86_64::*;

/// The 12-byte packed scales as [sc0..8, mn0..8] (6-bit values), via 32-bit word operations.
#[inline(always)]
fn unpack_scales(s: &[u8; 12]) -> [u8; 16] {
    let w0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let w1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
    let w2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const TOP2: u32 = 0x0303_0303;
    let sc_lo = w0 & LOW6;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4);
    let mn_lo = w1 & LOW6;
    let mn_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4);
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&sc_lo.to_le_bytes());
    out[4..8].copy_from_slice(&sc_hi.to_le_bytes());
    out[8..12].copy_from_slice(&mn_lo.to_le_bytes());
    out[12..16].copy_from_slice(&mn_hi.to_le_bytes());
    out
}

/// sum_j mn[j] * (bsums[2j] + bsums[2j+1]) for the 8 mins in bytes 8..16 of `scm`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn mins_dot(scm: &[u8; 16], y: &BlockQ8K) -> i32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let bs = _mm256_loadu_si256(y.bsums.as_ptr().cast());
        let pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1)); // 8 x i32
        let mins = _mm256_cvtepu8_epi32(_mm_loadl_epi64(scm.as_ptr().add(8).cast()));
        hsum_i32(_mm256_mullo_epi32(pairs, mins))
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn ld(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_loadu_si256(p.cast())
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k_inner(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = _mm256_setzero_ps();
        let mut accm = 0f32;
        let m4 = _mm256_set1_epi8(0x0F);
        for (x, y) in w.iter().zip(a) {
            let scm = unpack_scales(&x.scales);
            let yd = f32::from_le_bytes(y.d);
            let dd = yd * f16_one(x.d);
            let dm = yd * f16_one(x.dmin);
            accm += dm * mins_dot(&scm, y) as f32;
            let mut sumi = _mm256_setzero_si256();
            let yp = y.qs.as_ptr().cast::<u8>();
            for c in 0..4 {
                let q = ld(x.qs.as_ptr().add(32 * c));
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                let plo = _mm256_maddubs_epi16(lo, ld(yp.add(64 * c)));
                let phi = _mm256_maddubs_epi16(hi, ld(yp.add(64 * c + 32)));
                let plo = _mm256_madd_epi16(plo, _mm256_set1_epi16(scm[2 * c] as i16));
                let phi = _mm256_madd_epi16(phi, _mm256_set1_epi16(scm[2 * c + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc) - accm
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k_inner(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = _mm256_setzero_ps();
        let mut accm = 0f32;
        let m4 = _mm256_set1_epi8(0x0F);
        let bit4 = _mm256_set1_epi8(0x10);
        for (x, y) in w.iter().zip(a) {
            let scm = unpack_scales(&x.scales);
            let yd = f32::from_le_bytes(y.d);
            let dd = yd * f16_one(x.d);
            let dm = yd * f16_one(x.dmin);
            accm += dm * mins_dot(&scm, y) as f32;
            let mut sumi = _mm256_setzero_si256();
            let yp = y.qs.as_ptr().cast::<u8>();
            // Bit j of each qh byte is the fifth bit of sub-block j; shift it down one per sub-block.
            let mut hb = ld(x.qh.as_ptr());
            for c in 0..4 {
                let q = ld(x.qs.as_ptr().add(32 * c));
                let lo = _mm256_and_si256(q, m4);
                let lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16::<4>(hb), bit4));
                hb = _mm256_srli_epi16::<1>(hb);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                let hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16::<4>(hb), bit4));
                hb = _mm256_srli_epi16::<1>(hb);
                let plo = _mm256_maddubs_epi16(lo, ld(yp.add(64 * c)));
                let phi = _mm256_maddubs_epi16(hi, ld(yp.add(64 * c + 32)));
                let plo = _mm256_madd_epi16(plo, _mm256_set1_epi16(scm[2 * c] as i16));
                let phi = _mm256_madd_epi16(phi, _mm256_set1_epi16(scm[2 * c + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc) - accm
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k_inner(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = _mm256_setzero_ps();
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x30);
        for (x, y) in w.iter().zip(a) {
            let dd = f32::from_le_bytes(y.d) * f16_one(x.d);
            // 16 scales as i16; the -32 offset: 32 * sum_g sc[g] * bsums[g].
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(x.scales.as_ptr().cast()));
            let bs = _mm256_loadu_si256(y.bsums.as_ptr().cast());
            let off = _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc16, bs));
            let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), off);
            let yp = y.qs.as_ptr().cast::<u8>();
            for h in 0..2 {
                let ql0 = ld(x.ql.as_ptr().add(64 * h));
                let ql1 = ld(x.ql.as_ptr().add(64 * h + 32));
                let qh = ld(x.qh.as_ptr().add(32 * h));
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(qh), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        _mm256_and_si256(qh, m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2),
                    ),
                ];
                for (j, q) in q.into_iter().enumerate() {
                    let g = 4 * h + j;
                    let p = _mm256_maddubs_epi16(q, ld(yp.add(32 * g)));
                    let s = _mm256_set_m128i(
                        _mm_set1_epi16(x.scales[2 * g + 1] as i16),
                        _mm_set1_epi16(x.scales[2 * g] as i16),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
                }
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum_ps(acc)
    }
}

macro_rules! wrap {
    ($name:ident, $W:ty, $inner:ident) => {
        pub(crate) fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = n / QK_K;
            let (w, a) = (view_n::<$W>(w, nb), view_n::<BlockQ8K>(a, nb));
            // SAFETY: AVX2+FMA+F16C were detected before this fn was handed out.
            unsafe { $inner(w, a) }
        }
    };
}

wrap!(q4_k, BlockQ4K, q4_k_inner);
wrap!(q5_k, BlockQ5K, q5_k_inner);
wrap!(q6_k, BlockQ6K, q6_k_inner);
