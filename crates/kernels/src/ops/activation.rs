//! Pointwise activations and residual adds.

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate[i] = silu(gate[i]) * up[i]`: the SiLU-gated MLP's elementwise part. On AVX2+FMA CPUs
/// with the vector `exp` of `ops::vexp` (every element, tail included, through the same lanes);
/// elsewhere [`silu_mul_scalar`].
pub fn silu_mul_in_place(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    if crate::quant::detected_isa() == crate::quant::Isa::Avx2 {
        // SAFETY: `detected_isa` checked AVX2 and FMA; lengths are equal.
        unsafe { avx2::silu_mul(gate, up) };
        return;
    }
    silu_mul_scalar(gate, up)
}

/// Scalar reference of [`silu_mul_in_place`] (libm `exp`).
pub fn silu_mul_scalar(gate: &mut [f32], up: &[f32]) {
    debug_assert_eq!(gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use crate::ops::vexp::avx2::{exp8, load_partial, store_partial};
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU has AVX2 and FMA; `gate.len() == up.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            #[inline(always)]
            unsafe fn f(g: __m256, u: __m256) -> __m256 {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    let neg = _mm256_sub_ps(_mm256_setzero_ps(), g);
                    let den = _mm256_add_ps(_mm256_set1_ps(1.0), exp8(neg));
                    _mm256_mul_ps(_mm256_div_ps(g, den), u)
                }
            }
            let n8 = gate.len() / 8 * 8;
            for i in (0..n8).step_by(8) {
                let g = _mm256_loadu_ps(gate.as_ptr().add(i));
                let u = _mm256_loadu_ps(up.as_ptr().add(i));
                _mm256_storeu_ps(gate.as_mut_ptr().add(i), f(g, u));
            }
            if n8 < gate.len() {
                let v = f(load_partial(&gate[n8..], 0.0), load_partial(&up[n8..], 0.0));
                store_partial(&mut gate[n8..], v);
            }
        }
    }
}

/// `acc[i] += x[i]`.
pub fn add_in_place(acc: &mut [f32], x: &[f32]) {
    debug_assert_eq!(acc.len(), x.len());
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((silu(-20.0)).abs() < 1e-7);
        let mut g = vec![1.0, 0.0, -1.0];
        silu_mul_in_place(&mut g, &[2.0, 5.0, 1.0]);
        assert!((g[0] - 1.462_117_2).abs() < 1e-6);
        assert_eq!(g[1], 0.0);
        assert!((g[2] + 0.268_941_4).abs() < 1e-6);
    }

    /// The dispatched kernel (AVX2 where available) against the scalar reference, for lengths
    /// with and without a tail.
    #[test]
    fn silu_mul_matches_scalar_reference() {
        for n in [1usize, 5, 8, 13, 64, 1539] {
            let g: Vec<f32> = (0..n)
                .map(|i| ((i * 29 % 41) as f32 - 20.0) * 0.45)
                .collect();
            let u: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.3).collect();
            let mut got = g.clone();
            silu_mul_in_place(&mut got, &u);
            let mut want = g.clone();
            silu_mul_scalar(&mut want, &u);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-6 * b.abs() + 1e-30, "n={n}: {a} vs {b}");
            }
        }
    }
}
