//! The reference matrix product: one thread, scalar dot products, one output at a time.
//!
//! It shares no code path with the tiled SIMD kernels, so the reference backend can cross-check
//! them on whole models. Results agree with [`super::matmul`] to rounding, not bit for bit
//! (the SIMD kernels sum in a different order).

use oxllm_core::DType;

use super::{QMatrix, QuantizedActs};
use crate::quant::{self, Isa, QuantError};

/// `out[i * w.rows() + j] = dot(x_i, w_j)` with the scalar dot of the weight's format.
pub fn matmul_reference(
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    super::check_shapes(w, acts, out);
    let dot = if w.f32_activations {
        crate::weight_dot::vec_dot_f32_acts_for(w.dtype, Isa::Scalar)?
    } else {
        quant::vec_dot_for(w.dtype, Isa::Scalar)?
    };
    for (i, out_row) in out
        .chunks_exact_mut(w.rows.max(1))
        .enumerate()
        .take(acts.rows)
    {
        let a = acts.row(i);
        for (j, o) in out_row.iter_mut().enumerate() {
            *o = dot(w.cols, &w.row(j), a);
        }
    }
    Ok(())
}

/// [`super::quantize_acts_into`] with the scalar quantizers, on the calling thread.
pub fn quantize_acts_reference(
    x: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
    out: &mut QuantizedActs,
) -> Result<(), QuantError> {
    let row_bytes = out.reset(x.len(), rows, cols, dtype)?;
    for (src, dst) in x
        .chunks_exact(cols.max(1))
        .zip(out.data.chunks_exact_mut(row_bytes.max(1)))
    {
        quant::quantize_row_scalar(dtype, src, dst)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::{matmul, quantize_acts};
    use crate::pool::ThreadPool;

    #[test]
    fn reference_matmul_agrees_with_the_fast_kernels() {
        let (rows, cols, n) = (40, 64, 5);
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let wf: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
        let x: Vec<f32> = (0..n * cols).map(|_| next()).collect();
        let pool = ThreadPool::new(2);
        for dtype in [DType::Q8_0, DType::F32] {
            let rb = dtype.row_bytes(cols).unwrap();
            let mut bytes = vec![0u8; rb * rows];
            for (src, dst) in wf.chunks_exact(cols).zip(bytes.chunks_exact_mut(rb)) {
                quant::quantize_row_scalar(dtype, src, dst).unwrap();
            }
            let w = QMatrix::new(dtype, rows, cols, bytes).unwrap();
            let acts = quantize_acts(&pool, &x, n, cols, w.activation_dtype()).unwrap();
            let mut fast = vec![0f32; n * rows];
            matmul(&pool, &w, &acts, &mut fast).unwrap();
            let mut ref_acts = QuantizedActs::with_capacity(0);
            quantize_acts_reference(&x, n, cols, w.activation_dtype(), &mut ref_acts).unwrap();
            assert_eq!(
                ref_acts.data, acts.data,
                "{dtype}: quantized activations differ"
            );
            let mut slow = vec![0f32; n * rows];
            matmul_reference(&w, &ref_acts, &mut slow).unwrap();
            for (a, b) in fast.iter().zip(&slow) {
                assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{dtype}: {a} vs {b}"
                );
            }
        }
    }
}
