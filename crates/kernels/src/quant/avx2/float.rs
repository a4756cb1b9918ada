//! AVX2 dots of F32/F16/BF16 weight rows with f32 activations: F16C conversion for f16, a
//! 16-bit shift for bf16, four FMA accumulators (32 elements per iteration), scalar tail.

use super::hsum_ps;
use std::arch::x86_64::*;

macro_rules! float_dot {
    ($name:ident, $inner:ident, $wsz:expr, $load:ident, $scalar:ident) => {
        pub(crate) fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            let (w, a) = (&w[..n * $wsz], &a[..n * 4]);
            // SAFETY: handed out only after the AVX2+FMA+F16C check; slices hold n elements.
            unsafe { $inner(n, w, a) }
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $inner(n: usize, w: &[u8], a: &[u8]) -> f32 {
            unsafe {
                // SAFETY: every operation below relies only on this fn's contract
                // (the CPU features it is compiled for; pointers and lengths inside
                // the buffers it is given), which its caller upholds.
                let (wp, ap) = (w.as_ptr(), a.as_ptr());
                let mut acc = [_mm256_setzero_ps(); 4];
                let mut i = 0;
                while i + 32 <= n {
                    for (k, acc) in acc.iter_mut().enumerate() {
                        let e = i + 8 * k;
                        let x = $load(wp.add(e * $wsz));
                        let y = _mm256_loadu_ps(ap.add(e * 4).cast());
                        *acc = _mm256_fmadd_ps(x, y, *acc);
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    let x = $load(wp.add(i * $wsz));
                    acc[0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(ap.add(i * 4).cast()), acc[0]);
                    i += 8;
                }
                let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
                let mut sum = hsum_ps(s);
                if i < n {
                    sum += super::super::dot_scalar::$scalar(n - i, &w[i * $wsz..], &a[i * 4..]);
                }
                sum
            }
        }
    };
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32(p: *const u8) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_loadu_ps(p.cast())
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16(p: *const u8) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_bf16(p: *const u8) -> __m256 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let v = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v))
    }
}

float_dot!(f32_f32, f32_inner, 4, load_f32, f32_f32);
float_dot!(f16_f32, f16_inner, 2, load_f16, f16_f32);
float_dot!(bf16_f32, bf16_inner, 2, load_bf16, bf16_f32);
