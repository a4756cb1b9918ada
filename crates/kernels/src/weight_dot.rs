//! Dot products of quantized weight rows with f32 activations ("weight-only" quantization).
//!
//! The integer kernels in `quant` quantize activations to 8 bits, which costs accuracy where
//! activations have outlier channels. Where precision decides the answer and the work is small
//! (the output projection runs only on the rows that are sampled), oxllm keeps activations in
//! f32 and dequantizes weights on the fly. The result then differs from a float reference only by
//! the weight quantization itself. Only Q8_0 (and floats) have fast kernels here, so only those
//! heads take this path (`QMatrix::for_output_head`); the other formats' dots are the scalar
//! reference, kept for the MoE router and the tests.
//!
//! Guarantees: the AVX2 path equals the scalar reference within f32 summation-order error
//! (relative 1e-5 of the sum of |products|); every weight type with a dequantizer works.

use oxllm_core::DType;

use crate::quant::{self, detected_isa, Isa, QuantError, VecDotFn};

/// Scalar reference: dequantize one block at a time, accumulate in 8 lanes.
pub fn dot_scalar(dtype: DType, n: usize, w: &[u8], a: &[u8]) -> f32 {
    let block = dtype.block_size().max(32);
    let block_bytes = dtype.type_size() * block / dtype.block_size();
    let mut buf = [0f32; 256];
    let mut acc = [0f32; 8];
    for (bi, wb) in w.chunks_exact(block_bytes).enumerate().take(n / block) {
        let vals = &mut buf[..block];
        if quant::dequantize_row(dtype, wb, vals).is_err() {
            return f32::NAN;
        }
        let act = &a[bi * block * 4..(bi + 1) * block * 4];
        for (i, (v, x)) in vals.iter().zip(act.chunks_exact(4)).enumerate() {
            acc[i % 8] += v * f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        }
    }
    acc.iter().sum()
}

macro_rules! scalar_fn {
    ($name:ident, $dt:expr) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            dot_scalar($dt, n, w, a)
        }
    };
}
scalar_fn!(scalar_q4_0, DType::Q4_0);
scalar_fn!(scalar_q4_1, DType::Q4_1);
scalar_fn!(scalar_q8_0, DType::Q8_0);
scalar_fn!(scalar_q4k, DType::Q4K);
scalar_fn!(scalar_q5k, DType::Q5K);
scalar_fn!(scalar_q6k, DType::Q6K);

/// The dot function for weights of `w` against f32 activations on the given ISA.
pub fn vec_dot_f32_acts_for(w: DType, isa: Isa) -> Result<VecDotFn, QuantError> {
    if !w.is_quantized() {
        return quant::vec_dot_for(w, isa);
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx2 && detected_isa() == Isa::Avx2 && w == DType::Q8_0 {
        return Ok(avx2::q8_0);
    }
    if isa == Isa::Avx2 && detected_isa() != Isa::Avx2 {
        return Err(QuantError::Unsupported(w));
    }
    Ok(match w {
        DType::Q4_0 => scalar_q4_0,
        DType::Q4_1 => scalar_q4_1,
        DType::Q8_0 => scalar_q8_0,
        DType::Q4K => scalar_q4k,
        DType::Q5K => scalar_q5k,
        DType::Q6K => scalar_q6k,
        _ => return Err(QuantError::Unsupported(w)),
    })
}

pub fn vec_dot_f32_acts(w: DType) -> Result<VecDotFn, QuantError> {
    vec_dot_f32_acts_for(w, detected_isa()).or_else(|_| vec_dot_f32_acts_for(w, Isa::Scalar))
}

/// One weight row against several activation rows: `out[r] = dot(w, acts[r])`.
pub type DotRowsFn = fn(n: usize, w: &[u8], acts: &[&[u8]], out: &mut [f32]);

/// A multi-row kernel for `w` that reuses each dequantized weight block across activation rows
/// and gives every row exactly the bits of the single-row kernel (so results do not depend on
/// how many rows share a call). `None` where only the single-row kernel exists.
pub fn dot_rows_f32_acts(w: DType) -> Option<DotRowsFn> {
    #[cfg(target_arch = "x86_64")]
    if detected_isa() == Isa::Avx2 && w == DType::Q8_0 {
        return Some(avx2::q8_0_rows);
    }
    let _ = w;
    None
}

/// Two weight rows against several activation rows: `out0[r] = dot(w0, acts[r])`,
/// `out1[r] = dot(w1, acts[r])`, each bit-identical to the single-row kernel.
pub type DotRows2Fn =
    fn(n: usize, w0: &[u8], w1: &[u8], acts: &[&[u8]], out0: &mut [f32], out1: &mut [f32]);

/// The two-weight-row kernel for `w`, where the CPU has one (AVX-512: both rows share a zmm
/// register, each in one half, so every activation load and FMA serves two outputs).
pub fn dot_rows2_f32_acts(w: DType) -> Option<DotRows2Fn> {
    #[cfg(target_arch = "x86_64")]
    if detected_isa() == Isa::Avx2 && w == DType::Q8_0 && avx512::available() {
        return Some(avx512::q8_0_rows2);
    }
    let _ = w;
    None
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    //! The AVX2 multi-row Q8_0 kernel with two weight rows per zmm register: lanes 0-7 carry
    //! row `w0`'s eight accumulation lanes, lanes 8-15 row `w1`'s, and every per-lane operation
    //! is the AVX2 kernel's, so each half holds exactly the single-row kernel's vector.
    use std::arch::x86_64::*;

    const BLOCK_BYTES: usize = 34;

    pub(super) fn available() -> bool {
        crate::quant::avx512_allowed()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512dq")
    }

    pub(super) fn q8_0_rows2(
        n: usize,
        w0: &[u8],
        w1: &[u8],
        acts: &[&[u8]],
        out0: &mut [f32],
        out1: &mut [f32],
    ) {
        let need = n / 32 * BLOCK_BYTES;
        assert!(w0.len() >= need && w1.len() >= need);
        assert!(out0.len() >= acts.len() && out1.len() >= acts.len());
        assert!(acts.iter().all(|a| a.len() >= n * 4));
        let mut r = 0;
        while r < acts.len() {
            let g = (acts.len() - r).min(8);
            let pick = |i: usize| acts[r + i.min(g - 1)];
            let (o0, o1) = (&mut out0[r..r + g], &mut out1[r..r + g]);
            // SAFETY: handed out only where AVX2/FMA/F16C and AVX512F/DQ exist; bounds above.
            // Groups of 1, 2, 4 or 8 rows (a group of 3 repeats its last row once).
            unsafe {
                match g {
                    1 => put(rows2_n::<1>(n, w0, w1, std::array::from_fn(pick)), o0, o1),
                    2 => put(rows2_n::<2>(n, w0, w1, std::array::from_fn(pick)), o0, o1),
                    3 | 4 => put(rows2_n::<4>(n, w0, w1, std::array::from_fn(pick)), o0, o1),
                    _ => put(rows2_n::<8>(n, w0, w1, std::array::from_fn(pick)), o0, o1),
                }
            }
            r += g;
        }
    }

    fn put<const R: usize>((a, b): ([f32; R], [f32; R]), o0: &mut [f32], o1: &mut [f32]) {
        let g = o0.len();
        o0.copy_from_slice(&a[..g]);
        o1.copy_from_slice(&b[..g]);
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512dq")]
    unsafe fn rows2_n<const R: usize>(
        n: usize,
        w0: &[u8],
        w1: &[u8],
        acts: [&[u8]; R],
    ) -> ([f32; R], [f32; R]) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut total = [_mm512_setzero_ps(); R];
            let (p0, p1) = (w0.as_ptr(), w1.as_ptr());
            let ap = acts.map(|a| a.as_ptr() as *const f32);
            let scale = |blk: *const u8| {
                let bits = u16::from_le_bytes([*blk, *blk.add(1)]);
                _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))))
            };
            for b in 0..n / 32 {
                let (b0, b1) = (p0.add(b * BLOCK_BYTES), p1.add(b * BLOCK_BYTES));
                let d = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(scale(b0)), scale(b1));
                let (q0, q1) = (b0.add(2), b1.add(2));
                let mut qf = [_mm512_setzero_ps(); 4];
                for (k, q) in qf.iter_mut().enumerate() {
                    let lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        q0.add(8 * k) as *const __m128i,
                    )));
                    let hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(
                        q1.add(8 * k) as *const __m128i,
                    )));
                    *q = _mm512_insertf32x8::<1>(_mm512_castps256_ps512(lo), hi);
                }
                for r in 0..R {
                    let x = ap[r].add(b * 32);
                    let mut acc = _mm512_setzero_ps();
                    for (k, q) in qf.iter().enumerate() {
                        let xv = _mm512_broadcast_f32x8(_mm256_loadu_ps(x.add(8 * k)));
                        acc = _mm512_fmadd_ps(*q, xv, acc);
                    }
                    total[r] = _mm512_fmadd_ps(d, acc, total[r]);
                }
            }
            let lo = total.map(|t| super::avx2::hsum_pub(_mm512_castps512_ps256(t)));
            let hi = total.map(|t| super::avx2::hsum_pub(_mm512_extractf32x8_ps::<1>(t)));
            (lo, hi)
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    const BLOCK_BYTES: usize = 34;

    pub(super) fn q8_0(n: usize, w: &[u8], a: &[u8]) -> f32 {
        assert!(w.len() >= n / 32 * BLOCK_BYTES && a.len() >= n * 4);
        // SAFETY: handed out only after `detected_isa() == Avx2`; bounds asserted above.
        unsafe { q8_0_impl(n, w, a) }
    }

    pub(super) fn q8_0_rows(n: usize, w: &[u8], acts: &[&[u8]], out: &mut [f32]) {
        assert!(w.len() >= n / 32 * BLOCK_BYTES && out.len() >= acts.len());
        assert!(acts.iter().all(|a| a.len() >= n * 4));
        let mut r = 0;
        let mut eights = acts.chunks_exact(8);
        for g in &mut eights {
            // SAFETY: handed out only after `detected_isa() == Avx2`; bounds asserted above.
            let o = unsafe { q8_0_rows_n::<8>(n, w, std::array::from_fn(|i| g[i])) };
            out[r..r + 8].copy_from_slice(&o);
            r += 8;
        }
        let mut fours = eights.remainder().chunks_exact(4);
        for g in &mut fours {
            // SAFETY: as above.
            let o = unsafe { q8_0_rows_n::<4>(n, w, std::array::from_fn(|i| g[i])) };
            out[r..r + 4].copy_from_slice(&o);
            r += 4;
        }
        for a in fours.remainder() {
            out[r] = q8_0(n, w, a);
            r += 1;
        }
    }

    /// `R` rows with one dequantization per weight block. Per row, the operation sequence is
    /// exactly `q8_0_impl`'s, so each result is bit-identical to the single-row kernel. With
    /// `R = 8` the block's 4 converted vectors, 8 totals and a running sum fill 13 of the 16
    /// AVX2 registers; 8 rows halve the dequantization per row against 4 (the output head of a
    /// 16-sequence decode step runs two passes of 8).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0_rows_n<const R: usize>(n: usize, w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut total = [_mm256_setzero_ps(); R];
            let wp = w.as_ptr();
            let ap = acts.map(|a| a.as_ptr() as *const f32);
            for b in 0..n / 32 {
                let blk = wp.add(b * BLOCK_BYTES);
                let bits = u16::from_le_bytes([*blk, *blk.add(1)]);
                let d = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))));
                let qs = blk.add(2);
                let mut qf = [_mm256_setzero_ps(); 4];
                for (k, q) in qf.iter_mut().enumerate() {
                    let q8 = _mm_loadl_epi64(qs.add(8 * k) as *const __m128i);
                    *q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
                }
                for r in 0..R {
                    let x = ap[r].add(b * 32);
                    let mut acc = _mm256_setzero_ps();
                    for (k, q) in qf.iter().enumerate() {
                        acc = _mm256_fmadd_ps(*q, _mm256_loadu_ps(x.add(8 * k)), acc);
                    }
                    total[r] = _mm256_fmadd_ps(d, acc, total[r]);
                }
            }
            total.map(|t| hsum(t))
        }
    }

    /// [`hsum`] for the AVX-512 kernel, which must reduce its halves the same way.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn hsum_pub(total: __m256) -> f32 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            hsum(total)
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(total: __m256) -> f32 {
        let hi = _mm256_extractf128_ps(total, 1);
        let s = _mm_add_ps(_mm256_castps256_ps128(total), hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q8_0_impl(n: usize, w: &[u8], a: &[u8]) -> f32 {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let mut total = _mm256_setzero_ps();
            let wp = w.as_ptr();
            let ap = a.as_ptr() as *const f32;
            for b in 0..n / 32 {
                let blk = wp.add(b * BLOCK_BYTES);
                let bits = u16::from_le_bytes([*blk, *blk.add(1)]);
                let d = _mm256_set1_ps(_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))));
                let qs = blk.add(2);
                let x = ap.add(b * 32);
                let mut acc = _mm256_setzero_ps();
                for k in 0..4 {
                    let q8 = _mm_loadl_epi64(qs.add(8 * k) as *const __m128i);
                    let qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
                    acc = _mm256_fmadd_ps(qf, _mm256_loadu_ps(x.add(8 * k)), acc);
                }
                total = _mm256_fmadd_ps(d, acc, total);
            }
            hsum(total)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn every_isa_matches_the_dequantized_dot() {
        let n = 576;
        let wf: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let af: Vec<f32> = (0..n)
            .map(|i| ((i * 11 % 29) as f32 - 14.0) * 0.21)
            .collect();
        let a = f32_bytes(&af);
        for dtype in [DType::Q8_0] {
            let mut w = vec![0u8; dtype.row_bytes(n).unwrap()];
            quant::quantize_row(dtype, &wf, &mut w).unwrap();
            let mut deq = vec![0f32; n];
            quant::dequantize_row(dtype, &w, &mut deq).unwrap();
            let want: f64 = deq
                .iter()
                .zip(&af)
                .map(|(x, y)| *x as f64 * *y as f64)
                .sum();
            let mag: f64 = deq
                .iter()
                .zip(&af)
                .map(|(x, y)| (*x as f64 * *y as f64).abs())
                .sum();
            for isa in [Isa::Scalar, Isa::Avx2] {
                let Ok(f) = vec_dot_f32_acts_for(dtype, isa) else {
                    eprintln!("{isa:?} not available here");
                    continue;
                };
                let got = f(n, &w, &a) as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * mag,
                    "{dtype} {isa:?}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn multi_row_kernel_is_bit_identical_to_single_rows() {
        let Some(rows_fn) = dot_rows_f32_acts(DType::Q8_0) else {
            eprintln!("no multi-row kernel on this CPU");
            return;
        };
        let single = vec_dot_f32_acts(DType::Q8_0).unwrap();
        let n = 576;
        let wf: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let mut w = vec![0u8; DType::Q8_0.row_bytes(n).unwrap()];
        quant::quantize_row(DType::Q8_0, &wf, &mut w).unwrap();
        for m in 1..=11 {
            let acts: Vec<Vec<u8>> = (0..m)
                .map(|r| {
                    let a: Vec<f32> = (0..n)
                        .map(|i| ((i * (r + 3) % 31) as f32 - 15.0) * 0.07)
                        .collect();
                    f32_bytes(&a)
                })
                .collect();
            let refs: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
            let mut out = vec![0f32; m];
            rows_fn(n, &w, &refs, &mut out);
            for (r, a) in acts.iter().enumerate() {
                assert_eq!(
                    out[r].to_bits(),
                    single(n, &w, a).to_bits(),
                    "m={m} row {r}"
                );
            }
        }
    }

    #[test]
    fn two_row_kernel_is_bit_identical_to_single_rows() {
        let Some(rows2) = dot_rows2_f32_acts(DType::Q8_0) else {
            eprintln!("no two-row kernel on this CPU");
            return;
        };
        let single = vec_dot_f32_acts(DType::Q8_0).unwrap();
        let n = 576;
        let weight = |salt: usize| {
            let wf: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101 + salt) as f32 - 50.0) * 0.013)
                .collect();
            let mut w = vec![0u8; DType::Q8_0.row_bytes(n).unwrap()];
            quant::quantize_row(DType::Q8_0, &wf, &mut w).unwrap();
            w
        };
        let (w0, w1) = (weight(0), weight(17));
        for m in 1..=13 {
            let acts: Vec<Vec<u8>> = (0..m)
                .map(|r| {
                    let a: Vec<f32> = (0..n)
                        .map(|i| ((i * (r + 3) % 31) as f32 - 15.0) * 0.07)
                        .collect();
                    f32_bytes(&a)
                })
                .collect();
            let refs: Vec<&[u8]> = acts.iter().map(|a| a.as_slice()).collect();
            let (mut o0, mut o1) = (vec![0f32; m], vec![0f32; m]);
            rows2(n, &w0, &w1, &refs, &mut o0, &mut o1);
            for (r, a) in acts.iter().enumerate() {
                assert_eq!(
                    o0[r].to_bits(),
                    single(n, &w0, a).to_bits(),
                    "m={m} row {r}"
                );
                assert_eq!(
                    o1[r].to_bits(),
                    single(n, &w1, a).to_bits(),
                    "m={m} row {r}"
                );
            }
        }
    }

    #[test]
    fn k_quant_scalar_path_matches_dequantized_dot() {
        let n = 512;
        // Random-looking bytes with small f16 scales form valid Q6_K blocks.
        let mut w = vec![0u8; DType::Q6K.row_bytes(n).unwrap()];
        for (i, b) in w.iter_mut().enumerate() {
            *b = (i * 97 % 251) as u8;
        }
        for blk in w.chunks_exact_mut(210) {
            blk[208..210].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        }
        let af: Vec<f32> = (0..n).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
        let mut deq = vec![0f32; n];
        quant::dequantize_row(DType::Q6K, &w, &mut deq).unwrap();
        let want: f32 = deq.iter().zip(&af).map(|(x, y)| x * y).sum();
        let got = vec_dot_f32_acts(DType::Q6K).unwrap()(n, &w, &f32_bytes(&af));
        assert!((got - want).abs() < 1e-3 * want.abs().max(1.0));
    }
}
