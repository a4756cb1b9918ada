//! Matrix products `out = x · Wᵀ` of f32 activations with weights in any supported format.
//!
//! Activations are quantized once per row into the dot partner format of the weight
//! (`quant::activation_dtype`), and can be reused across several weights of the same format
//! (Q, K and V share one quantized input). Work is split over weight-row tiles, handed out by
//! an atomic counter so uneven threads balance; a tile of weight rows stays in L1 while every
//! activation row streams past it, which is what makes prefill compute-bound instead of
//! bandwidth-bound.

use std::sync::atomic::{AtomicUsize, Ordering};

use oxllm_core::DType;

use crate::pool::{split_range, SharedMut, ThreadPool};
use crate::quant::{self, QuantError, VecDotFn};

/// A 2-D weight matrix `[rows = out features, cols = in features]` in its storage format.
#[derive(Clone, Debug)]
pub struct QMatrix {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
    /// Keep activations in f32 for this matrix (see `weight_dot`).
    f32_activations: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MatrixError {
    #[error("matrix of {rows}x{cols} {dtype} needs {expected} bytes, got {got}")]
    Length {
        dtype: DType,
        rows: usize,
        cols: usize,
        expected: usize,
        got: usize,
    },
    #[error("{cols} columns of {dtype} is not a whole number of blocks")]
    PartialBlock { dtype: DType, cols: usize },
    #[error(transparent)]
    Quant(#[from] QuantError),
}

impl QMatrix {
    pub fn new(dtype: DType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, MatrixError> {
        let row_bytes = dtype
            .row_bytes(cols)
            .map_err(|_| MatrixError::PartialBlock { dtype, cols })?;
        let expected = row_bytes * rows;
        if data.len() != expected {
            return Err(MatrixError::Length {
                dtype,
                rows,
                cols,
                expected,
                got: data.len(),
            });
        }
        // Fail at load time, not at the first forward, when a format has no kernel.
        quant::vec_dot(dtype)?;
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data,
            f32_activations: false,
        })
    }

    /// Computes this matrix against f32 activations, dequantizing weights on the fly: exact up
    /// to the weight quantization, slower than the integer path. Meant for the output head.
    pub fn with_f32_activations(mut self) -> Self {
        self.f32_activations = true;
        self
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Dequantizes row `r` (e.g. one token's embedding) into `out`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        quant::dequantize_row(self.dtype, self.row(r), out)
    }

    pub fn activation_dtype(&self) -> DType {
        if self.f32_activations {
            return DType::F32;
        }
        // `new` checked that a kernel exists, so the format has an activation partner.
        quant::activation_dtype(self.dtype).unwrap_or(DType::F32)
    }
}

/// Activation rows quantized into one dot-partner format.
pub struct QuantizedActs {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
}

impl QuantizedActs {
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}

/// Quantizes `rows` rows of `x` (each `cols` wide) into `dtype`, in parallel over rows.
pub fn quantize_acts(
    pool: &ThreadPool,
    x: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
) -> Result<QuantizedActs, QuantError> {
    assert_eq!(x.len(), rows * cols, "activation shape");
    let row_bytes = dtype
        .row_bytes(cols)
        .map_err(|_| QuantError::Unsupported(dtype))?;
    let mut data = vec![0u8; rows * row_bytes];
    if rows == 1 {
        quant::quantize_row(dtype, x, &mut data)?;
    } else {
        let out = SharedMut::new(&mut data);
        let failed = std::sync::atomic::AtomicBool::new(false);
        pool.run(|t, n| {
            let r = split_range(rows, t, n);
            let dst = unsafe { out.slice(r.start * row_bytes, r.len() * row_bytes) };
            for (i, row) in r.clone().enumerate() {
                let src = &x[row * cols..(row + 1) * cols];
                if quant::quantize_row(dtype, src, &mut dst[i * row_bytes..(i + 1) * row_bytes])
                    .is_err()
                {
                    failed.store(true, Ordering::Relaxed);
                }
            }
        });
        if failed.load(Ordering::Relaxed) {
            return Err(QuantError::Unsupported(dtype));
        }
    }
    Ok(QuantizedActs {
        dtype,
        rows,
        cols,
        row_bytes,
        data,
    })
}

const TILE_ROWS: usize = 16;

/// `out[i * w.rows() + j] = dot(x_i, w_j)` for every activation row `i` and weight row `j`.
pub fn matmul(
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    assert_eq!(acts.cols, w.cols, "inner dimension");
    assert_eq!(acts.dtype, w.activation_dtype(), "activation format");
    assert_eq!(out.len(), acts.rows * w.rows, "output shape");
    let dot: VecDotFn = if w.f32_activations {
        crate::weight_dot::vec_dot_f32_acts(w.dtype)?
    } else {
        quant::vec_dot(w.dtype)?
    };
    let n_out = w.rows;
    let m = acts.rows;
    let tiles = n_out.div_ceil(TILE_ROWS);
    let next = AtomicUsize::new(0);
    let out_ptr = SharedMut::new(out);
    pool.run(|_, _| loop {
        let tile = next.fetch_add(1, Ordering::Relaxed);
        if tile >= tiles {
            break;
        }
        let j0 = tile * TILE_ROWS;
        let j1 = (j0 + TILE_ROWS).min(n_out);
        for i in 0..m {
            let a = acts.row(i);
            // SAFETY: tiles are disjoint column ranges of each output row.
            let dst = unsafe { out_ptr.slice(i * n_out + j0, j1 - j0) };
            for (d, j) in dst.iter_mut().zip(j0..j1) {
                *d = dot(w.cols, w.row(j), a);
            }
        }
    });
    Ok(())
}

/// Adds `bias` to every row of `out` (rows of `bias.len()`).
pub fn add_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        crate::ops::add_in_place(row, bias);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn f32_matmul_matches_naive_for_many_shapes() {
        let pool = ThreadPool::new(2);
        for (m, n, k) in [(1, 1, 1), (3, 17, 8), (5, 40, 64), (1, 33, 7)] {
            let x: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
                .collect();
            let wv: Vec<f32> = (0..n * k)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.2)
                .collect();
            let w = QMatrix::new(DType::F32, n, k, f32_bytes(&wv)).unwrap();
            let acts = quantize_acts(&pool, &x, m, k, DType::F32).unwrap();
            let mut out = vec![0.0; m * n];
            matmul(&pool, &w, &acts, &mut out).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let want: f32 = (0..k).map(|c| x[i * k + c] * wv[j * k + c]).sum();
                    assert!(
                        (out[i * n + j] - want).abs() < 1e-4,
                        "{m}x{n}x{k} at {i},{j}"
                    );
                }
            }
        }
    }

    #[test]
    fn q8_0_matmul_close_to_dequantized_reference() {
        let pool = ThreadPool::new(2);
        let (m, n, k) = (4, 20, 64);
        let wf: Vec<f32> = (0..n * k)
            .map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.05)
            .collect();
        let mut wq = vec![0u8; n * DType::Q8_0.row_bytes(k).unwrap()];
        let rb = DType::Q8_0.row_bytes(k).unwrap();
        for j in 0..n {
            quant::quantize_row(
                DType::Q8_0,
                &wf[j * k..(j + 1) * k],
                &mut wq[j * rb..(j + 1) * rb],
            )
            .unwrap();
        }
        let w = QMatrix::new(DType::Q8_0, n, k, wq).unwrap();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 3 % 7) as f32 - 3.0) * 0.3)
            .collect();
        let acts = quantize_acts(&pool, &x, m, k, w.activation_dtype()).unwrap();
        let mut out = vec![0.0; m * n];
        matmul(&pool, &w, &acts, &mut out).unwrap();
        let mut row = vec![0.0; k];
        for j in 0..n {
            w.dequantize_row(j, &mut row).unwrap();
            for i in 0..m {
                let want: f32 = (0..k).map(|c| x[i * k + c] * row[c]).sum();
                let mag: f32 = (0..k).map(|c| (x[i * k + c] * row[c]).abs()).sum();
                assert!((out[i * n + j] - want).abs() <= 0.02 * mag + 1e-4);
            }
        }
    }

    #[test]
    fn wrong_length_is_an_error() {
        assert!(matches!(
            QMatrix::new(DType::Q4_1, 2, 32, vec![0; 39]),
            Err(MatrixError::Length { expected: 40, .. })
        ));
        assert!(matches!(
            QMatrix::new(DType::Q4_1, 2, 33, vec![0; 40]),
            Err(MatrixError::PartialBlock { .. })
        ));
    }
}
