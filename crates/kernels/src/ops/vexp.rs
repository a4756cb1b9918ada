//! `exp` on 8 lanes for softmax and the SiLU gate, with a scalar reference that performs the
//! same operations one lane at a time.
//!
//! Why: softmax over attention scores and the SiLU of the MLP gate called libm's scalar `expf`
//! once per element; in a batch-16 decode step that is about two million calls, a few percent
//! of the step, and the SiLU part runs on one thread between parallel matmuls.
//!
//! Method (Cephes `expf`): clamp to [-87, 88], n = round-to-even(x·log2 e), r = x - n·ln 2 in
//! two fma steps, e^r by a degree-7 polynomial (Horner with fma), times 2^n built in the exponent
//! bits. Inputs below -87 give 0 (e^-87 is 1.6e-38; softmax and SiLU lose nothing). Relative
//! error about 1e-7 against the true value (tested). NaN inputs are not supported.
//!
//! Every step is a correctly rounded IEEE operation (fma included), so [`exp_ref`] and the AVX2
//! lanes give identical bits (tested): a result never depends on which lane or which tail path
//! computed it.

const HI: f32 = 88.0;
const LO: f32 = -87.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^9.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

/// Scalar reference of the vector `exp`: the same sequence of IEEE operations.
pub fn exp_ref(x: f32) -> f32 {
    let c = x.clamp(LO, HI);
    let n = (c * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, c);
    let r = n.mul_add(-LN2_LO, r);
    let z = r * r;
    let mut y = P[0];
    for &p in &P[1..] {
        y = y.mul_add(r, p);
    }
    let y = y.mul_add(z, r) + 1.0;
    let pow2n = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < LO {
        0.0
    } else {
        y * pow2n
    }
}

/// `x[i] = exp(x[i])` for every element: 8 AVX2 lanes at a time where the CPU has them,
/// [`exp_ref`] otherwise and for the tail; the same bits either way.
pub fn exp_in_place(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::quant::detected_isa() == crate::quant::Isa::Avx2 {
        // SAFETY: `detected_isa` checked AVX2 and FMA.
        unsafe { avx2::exp_slice(x) };
        return;
    }
    x.iter_mut().for_each(|v| *v = exp_ref(*v));
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// `exp` of 8 lanes, lane for lane bit-identical to [`exp_ref`].
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp8(x: __m256) -> __m256 {
        let c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LO)), _mm256_set1_ps(HI));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(c, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), c);
        let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
        let z = _mm256_mul_ps(r, r);
        let mut y = _mm256_set1_ps(P[0]);
        for &p in &P[1..] {
            y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(p));
        }
        let y = _mm256_add_ps(_mm256_fmadd_ps(y, z, r), _mm256_set1_ps(1.0));
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        ));
        let v = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        // Lanes below LO (compare is false for them) become 0.
        _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(LO)))
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn exp_slice(x: &mut [f32]) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut chunks = x.chunks_exact_mut(8);
            for c in &mut chunks {
                _mm256_storeu_ps(c.as_mut_ptr(), exp8(_mm256_loadu_ps(c.as_ptr())));
            }
            for v in chunks.into_remainder() {
                *v = exp_ref(*v);
            }
        }
    }

    /// Loads `x.len() <= 8` floats into the low lanes, `fill` elsewhere.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn load_partial(x: &[f32], fill: f32) -> __m256 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut buf = [fill; 8];
            buf[..x.len()].copy_from_slice(x);
            _mm256_loadu_ps(buf.as_ptr())
        }
    }

    /// Stores the low `x.len() <= 8` lanes of `v` to `x`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn store_partial(x: &mut [f32], v: __m256) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut buf = [0f32; 8];
            _mm256_storeu_ps(buf.as_mut_ptr(), v);
            let n = x.len();
            x.copy_from_slice(&buf[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.0625).collect();
        v.extend((0..5000).map(|i| (i as f32 * 0.618_034).sin() * 30.0));
        v.extend([
            0.0, -0.0, 1e-30, -1e-30, 88.0, 88.5, -87.0, -87.01, -1e4, 1e4,
        ]);
        v.extend([f32::NEG_INFINITY, f32::INFINITY]);
        v
    }

    #[test]
    fn reference_is_close_to_exp() {
        for x in inputs() {
            let got = exp_ref(x) as f64;
            let want = (x.clamp(-1e3, HI) as f64).exp();
            if x < LO {
                assert_eq!(got, 0.0, "{x}");
            } else {
                assert!((got - want).abs() <= 2.5e-7 * want, "{x}: {got} vs {want}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx2_lanes_are_bit_identical_to_reference() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            eprintln!("AVX2+FMA not available");
            return;
        }
        let xs = inputs();
        for chunk in xs.chunks(8) {
            let mut out = [0f32; 8];
            // SAFETY: features checked above; buffers hold 8 floats.
            unsafe {
                let v = avx2::load_partial(chunk, 0.0);
                avx2::store_partial(&mut out[..chunk.len()], avx2::exp8(v));
            }
            for (x, o) in chunk.iter().zip(out) {
                assert_eq!(o.to_bits(), exp_ref(*x).to_bits(), "{x}");
            }
        }
    }

    /// The slice form (vector body, scalar tail) gives the reference's bits at every length.
    #[test]
    fn exp_in_place_matches_reference_at_every_length() {
        let xs: Vec<f32> = inputs().into_iter().step_by(37).collect();
        for len in [0, 1, 7, 8, 9, 23, xs.len()] {
            let mut got = xs[..len].to_vec();
            exp_in_place(&mut got);
            for (x, g) in xs.iter().zip(&got) {
                assert_eq!(g.to_bits(), exp_ref(*x).to_bits(), "{x} at length {len}");
            }
        }
    }
}
