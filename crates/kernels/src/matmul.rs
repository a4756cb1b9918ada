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

#[cfg(target_arch = "x86_64")]
mod tile_avx2;

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

#[cfg(target_arch = "x86_64")]
type MatmulFn = fn(&ThreadPool, &QMatrix, &QuantizedActs, &mut [f32]);

/// `out[i * w.rows() + j] = dot(x_i, w_j)` for every activation row `i` and weight row `j`.
///
/// Batch invariant: each output element is bit-identical whatever the number of activation
/// rows and wherever the row sits in the batch (every output is reduced by the same sequence of
/// operations; see `tile_avx2`). Q4_0, Q4_1 and Q8_0 weights with 8-bit activations use the
/// register-blocked AVX2 kernels where the CPU has them; other formats (and other CPUs) use one
/// dot per (activation row, weight row) pair ([`matmul_pairwise`]).
pub fn matmul(
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_shapes(w, acts, out);
    #[cfg(target_arch = "x86_64")]
    if !w.f32_activations && quant::detected_isa() == quant::Isa::Avx2 {
        use tile_avx2::{Q4_0Q8_0, Q4_1Q8_1, Q8_0Q8_0};
        let run: Option<MatmulFn> = match w.dtype {
            DType::Q4_1 => Some(tiled::<Q4_1Q8_1>),
            DType::Q4_0 => Some(tiled::<Q4_0Q8_0>),
            DType::Q8_0 => Some(tiled::<Q8_0Q8_0>),
            _ => None,
        };
        if let Some(run) = run {
            run(pool, w, acts, out);
            return Ok(());
        }
    }
    matmul_pairwise(pool, w, acts, out)
}

fn check_shapes(w: &QMatrix, acts: &QuantizedActs, out: &[f32]) {
    assert_eq!(acts.cols, w.cols, "inner dimension");
    assert_eq!(acts.dtype, w.activation_dtype(), "activation format");
    assert_eq!(out.len(), acts.rows * w.rows, "output shape");
}

/// The plain path of [`matmul`]: one `vec_dot` per (activation row, weight row) pair, tiles of
/// 16 weight rows handed out by an atomic counter. Works for every format; batch invariant
/// because each output is one call of the same dot function. Kept public as the baseline of
/// the benches and the reference of the tests.
pub fn matmul_pairwise(
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_shapes(w, acts, out);
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

/// Register-blocked GEMM: tiles of (`wt` weight rows) x (`at` chunks of 8 activation rows),
/// handed out by an atomic counter; inside a tile each chunk of activation rows stays in L1
/// while the tile's weight rows (sized to fit L1 too) pass over it, one weight row at a time
/// against the whole chunk.
#[cfg(target_arch = "x86_64")]
fn tiled<F: tile_avx2::Format>(
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) {
    use tile_avx2::CH;
    let nb = w.cols / quant::QK;
    let (m, n) = (acts.rows, w.rows);
    assert!(w.row_bytes == nb * F::W_BYTES && acts.row_bytes == nb * F::A_BYTES);
    if m == 0 || n == 0 {
        return;
    }
    let chunks = m.div_ceil(CH);
    let act_row = |i: usize| acts.data[i * acts.row_bytes..].as_ptr();
    // Activation scales as f32, transposed per chunk: [chunk][block][lane].
    let mut ad = vec![0f32; chunks * nb * CH];
    let mut asum = vec![0f32; chunks * nb * CH];
    for ch in 0..chunks {
        let rows: Vec<*const u8> = (ch * CH..(ch * CH + CH).min(m)).map(act_row).collect();
        let span = ch * nb * CH..(ch + 1) * nb * CH;
        // SAFETY: AVX2+FMA+F16C checked by the caller; each row holds nb blocks (assert above).
        unsafe { tile_avx2::act_scales::<F>(nb, &rows, &mut ad[span.clone()], &mut asum[span]) };
    }
    let wt = if m <= CH {
        // Decode: small tiles so two threads balance.
        TILE_ROWS
    } else {
        ((12 * 1024) / w.row_bytes.max(1)).clamp(8, 64) / 4 * 4
    };
    let at = 8; // chunks per tile: 64 activation rows
    let (n_wt, n_at) = (n.div_ceil(wt), chunks.div_ceil(at));
    let tiles = n_wt * n_at;
    let next = AtomicUsize::new(0);
    let out_ptr = SharedMut::new(out);
    let (ad, asum) = (&ad[..], &asum[..]);
    pool.run(|_, _| loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= tiles {
            break;
        }
        let (wi, ai) = (t % n_wt, t / n_wt);
        let (j0, j1) = (wi * wt, (wi * wt + wt).min(n));
        for ch in ai * at..(ai * at + at).min(chunks) {
            let r0 = ch * CH;
            let rows: [*const u8; CH] = std::array::from_fn(|c| act_row((r0 + c).min(m - 1)));
            let scales = (ad[ch * nb * CH..].as_ptr(), asum[ch * nb * CH..].as_ptr());
            for j in j0..j1 {
                let wp = w.data[j * w.row_bytes..].as_ptr();
                // SAFETY: CPU checked; pointers address whole rows of nb blocks; the outputs
                // (r0 + c, j) of this tile are written by this tile only.
                unsafe {
                    match m - r0 {
                        1 => chunk::<F, 1>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        2 => chunk::<F, 2>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        3 => chunk::<F, 3>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        4 => chunk::<F, 4>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        5 => chunk::<F, 5>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        6 => chunk::<F, 6>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        7 => chunk::<F, 7>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                        _ => chunk::<F, 8>(nb, wp, &rows, scales, &out_ptr, n, r0, j),
                    }
                }
            }
        }
    });
}

/// One weight row `j` against activation rows `r0..r0 + C`, written to `out[(r0 + c) * n + j]`.
///
/// # Safety
/// As `tile_avx2::row_chunk`; the outputs must be in bounds and owned by the caller's tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn chunk<F: tile_avx2::Format, const C: usize>(
    nb: usize,
    wp: *const u8,
    rows: &[*const u8; tile_avx2::CH],
    (ad, asum): (*const f32, *const f32),
    out: &SharedMut<f32>,
    n: usize,
    r0: usize,
    j: usize,
) {
    let a: [*const u8; C] = std::array::from_fn(|c| rows[c]);
    let mut o = [0f32; C];
    tile_avx2::row_chunk::<F, C>(nb, wp, &a, ad, asum, &mut o);
    for (c, v) in o.into_iter().enumerate() {
        out.slice((r0 + c) * n + j, 1)[0] = v;
    }
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
