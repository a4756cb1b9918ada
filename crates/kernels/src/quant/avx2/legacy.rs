//! AVX2 dots of the 32-element formats: Q4_0 x Q8_0, Q4_1 x Q8_1, Q8_0 x Q8_0, single-row
//! (two blocks per iteration, two FMA chains) and four-row (one activation block loaded once,
//! four weight rows).
//!
//! Per block: an exact integer dot (maddubs -> madd, i32 lanes), converted to f32 and
//! FMA-accumulated with the f32 product of the two f16 scales; Q4_1 adds `m * s` (Q8_1's
//! `s` = d * sum(q)). Results differ from the scalar reference only by f32 summation order.

use super::super::blocks::{view_n, BlockQ4_0, BlockQ4_1, BlockQ8_0, BlockQ8_1, QK};
use super::*;
use std::arch::x86_64::*;

// ---- per-block integer dots, as 8 f32 partial sums -------------------------------------

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_block(x: &BlockQ4_0, yq: __m256i) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let q = _mm256_sub_epi8(nibbles_32(x.qs.as_ptr()), _mm256_set1_epi8(8));
        mul_sum_i8_pairs_ps(q, yq)
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_block(x: &BlockQ4_1, yq: __m256i) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        mul_sum_us8_pairs_ps(nibbles_32(x.qs.as_ptr()), yq)
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_block(x: &BlockQ8_0, yq: __m256i) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        mul_sum_i8_pairs_ps(_mm256_loadu_si256(x.qs.as_ptr().cast()), yq)
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_q(qs: &[i8; QK]) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_loadu_si256(qs.as_ptr().cast())
    }
}

// ---- single row -------------------------------------------------------------------------

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_inner(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut wp = w.chunks_exact(2);
        let mut ap = a.chunks_exact(2);
        for (x, y) in (&mut wp).zip(&mut ap) {
            let d0 = _mm256_broadcastss_ps(f16_mul(x[0].d, y[0].d));
            let d1 = _mm256_broadcastss_ps(f16_mul(x[1].d, y[1].d));
            acc0 = _mm256_fmadd_ps(d0, q4_0_block(&x[0], load_q(&y[0].qs)), acc0);
            acc1 = _mm256_fmadd_ps(d1, q4_0_block(&x[1], load_q(&y[1].qs)), acc1);
        }
        for (x, y) in wp.remainder().iter().zip(ap.remainder()) {
            let d = _mm256_broadcastss_ps(f16_mul(x.d, y.d));
            acc0 = _mm256_fmadd_ps(d, q4_0_block(x, load_q(&y.qs)), acc0);
        }
        hsum_ps(_mm256_add_ps(acc0, acc1))
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_inner(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        // Lane 1 accumulates m * s; lane 0 holds d * d of the current block.
        let mut accm = _mm_setzero_ps();
        let mut wp = w.chunks_exact(2);
        let mut ap = a.chunks_exact(2);
        for (x, y) in (&mut wp).zip(&mut ap) {
            let p0 = dm_prod(&x[0], &y[0]);
            let p1 = dm_prod(&x[1], &y[1]);
            accm = _mm_add_ps(accm, _mm_add_ps(p0, p1));
            let s0 = q4_1_block(&x[0], load_q(&y[0].qs));
            let s1 = q4_1_block(&x[1], load_q(&y[1].qs));
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p0), s0, acc0);
            acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p1), s1, acc1);
        }
        for (x, y) in wp.remainder().iter().zip(ap.remainder()) {
            let p = dm_prod(x, y);
            accm = _mm_add_ps(accm, p);
            acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), q4_1_block(x, load_q(&y.qs)), acc0);
        }
        hsum_ps(_mm256_add_ps(acc0, acc1)) + _mm_cvtss_f32(_mm_movehdup_ps(accm))
    }
}

/// [d_w * d_a, m_w * s_a, _, _] from the leading f16 pairs of a Q4_1 and a Q8_1 block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dm_prod(x: &BlockQ4_1, y: &BlockQ8_1) -> __m128 {
    let xb = u32::from_le_bytes([x.d[0], x.d[1], x.m[0], x.m[1]]) as i32;
    let yb = u32::from_le_bytes([y.d[0], y.d[1], y.s[0], y.s[1]]) as i32;
    let xv = _mm_cvtph_ps(_mm_cvtsi32_si128(xb));
    let yv = _mm_cvtph_ps(_mm_cvtsi32_si128(yb));
    _mm_mul_ps(xv, yv)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_inner(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut wp = w.chunks_exact(2);
        let mut ap = a.chunks_exact(2);
        for (x, y) in (&mut wp).zip(&mut ap) {
            let d0 = _mm256_broadcastss_ps(f16_mul(x[0].d, y[0].d));
            let d1 = _mm256_broadcastss_ps(f16_mul(x[1].d, y[1].d));
            acc0 = _mm256_fmadd_ps(d0, q8_0_block(&x[0], load_q(&y[0].qs)), acc0);
            acc1 = _mm256_fmadd_ps(d1, q8_0_block(&x[1], load_q(&y[1].qs)), acc1);
        }
        for (x, y) in wp.remainder().iter().zip(ap.remainder()) {
            let d = _mm256_broadcastss_ps(f16_mul(x.d, y.d));
            acc0 = _mm256_fmadd_ps(d, q8_0_block(x, load_q(&y.qs)), acc0);
        }
        hsum_ps(_mm256_add_ps(acc0, acc1))
    }
}

// ---- four rows --------------------------------------------------------------------------

/// Zips the activation blocks with the four rows' blocks (all the same length).
macro_rules! rows4 {
    ($a:expr, $w:expr) => {
        $a.iter()
            .zip($w[0])
            .zip($w[1])
            .zip($w[2])
            .zip($w[3])
            .map(|((((y, x0), x1), x2), x3)| (y, [x0, x1, x2, x3]))
    };
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0_x4_inner(w: [&[BlockQ4_0]; 4], a: &[BlockQ8_0]) -> [f32; 4] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); 4];
        for (y, xs) in rows4!(a, w) {
            let yq = load_q(&y.qs);
            for (acc, x) in acc.iter_mut().zip(xs) {
                let d = _mm256_broadcastss_ps(f16_mul(x.d, y.d));
                *acc = _mm256_fmadd_ps(d, q4_0_block(x, yq), *acc);
            }
        }
        [
            hsum_ps(acc[0]),
            hsum_ps(acc[1]),
            hsum_ps(acc[2]),
            hsum_ps(acc[3]),
        ]
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1_x4_inner(w: [&[BlockQ4_1]; 4], a: &[BlockQ8_1]) -> [f32; 4] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut accm = [_mm_setzero_ps(); 4];
        for (y, xs) in rows4!(a, w) {
            let yq = load_q(&y.qs);
            for ((acc, accm), x) in acc.iter_mut().zip(accm.iter_mut()).zip(xs) {
                let p = dm_prod(x, y);
                *accm = _mm_add_ps(*accm, p);
                *acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(p), q4_1_block(x, yq), *acc);
            }
        }
        let mut out = [0f32; 4];
        for r in 0..4 {
            out[r] = hsum_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(accm[r]));
        }
        out
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_x4_inner(w: [&[BlockQ8_0]; 4], a: &[BlockQ8_0]) -> [f32; 4] {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); 4];
        for (y, xs) in rows4!(a, w) {
            let yq = load_q(&y.qs);
            for (acc, x) in acc.iter_mut().zip(xs) {
                let d = _mm256_broadcastss_ps(f16_mul(x.d, y.d));
                *acc = _mm256_fmadd_ps(d, q8_0_block(x, yq), *acc);
            }
        }
        [
            hsum_ps(acc[0]),
            hsum_ps(acc[1]),
            hsum_ps(acc[2]),
            hsum_ps(acc[3]),
        ]
    }
}

// ---- safe wrappers (only handed out after the CPU check) --------------------------------

macro_rules! wrap {
    ($name:ident, $name4:ident, $W:ty, $A:ty, $inner:ident, $inner4:ident) => {
        pub(crate) fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let nb = n / QK;
            let (w, a) = (view_n::<$W>(w, nb), view_n::<$A>(a, nb));
            // SAFETY: AVX2+FMA+F16C were detected before this fn was handed out.
            unsafe { $inner(w, a) }
        }

        pub(crate) fn $name4(n: usize, w: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            let nb = n / QK;
            let a = view_n::<$A>(a, nb);
            let w = w.map(|r| view_n::<$W>(r, nb));
            // SAFETY: as above; every row holds `nb` blocks (view_n panics otherwise).
            unsafe { $inner4(w, a) }
        }
    };
}

wrap!(
    q4_0,
    q4_0_x4,
    BlockQ4_0,
    BlockQ8_0,
    q4_0_inner,
    q4_0_x4_inner
);
wrap!(
    q4_1,
    q4_1_x4,
    BlockQ4_1,
    BlockQ8_1,
    q4_1_inner,
    q4_1_x4_inner
);
wrap!(
    q8_0,
    q8_0_x4,
    BlockQ8_0,
    BlockQ8_0,
    q8_0_inner,
    q8_0_x4_inner
);
