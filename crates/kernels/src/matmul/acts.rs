//! Activation quantization: f32 activation rows quantized once into the weight's dot-partner
//! format ([`QuantizedActs`]), in parallel over rows, into buffers reused across steps (no
//! allocation once sized, which captured plans rely on).

use std::sync::atomic::{AtomicUsize, Ordering};

use oxllm_core::DType;

use crate::pool::{SharedMut, ThreadPool};
use crate::quant::{self, QuantError};

/// Activation rows quantized into one dot-partner format.
pub struct QuantizedActs {
    pub(super) dtype: DType,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) row_bytes: usize,
    pub(super) data: Vec<u8>,
}

impl QuantizedActs {
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn rows(&self) -> usize {
        self.rows
    }
    pub(super) fn row(&self, r: usize) -> &[u8] {
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
    let mut out = QuantizedActs::with_capacity(0);
    quantize_acts_into(pool, x, rows, cols, dtype, &mut out)?;
    Ok(out)
}

impl QuantizedActs {
    /// An empty buffer that holds `bytes` of quantized rows without reallocating.
    pub fn with_capacity(bytes: usize) -> Self {
        QuantizedActs {
            dtype: DType::F32,
            rows: 0,
            cols: 0,
            row_bytes: 0,
            data: Vec::with_capacity(bytes),
        }
    }

    /// Bytes this buffer holds without reallocating.
    pub fn capacity(&self) -> usize {
        self.data.capacity()
    }

    /// Resizes to `rows` zeroed rows of `cols` values in `dtype` (reusing the capacity) and
    /// returns the bytes per row. Checks the activation shape first.
    pub(super) fn reset(
        &mut self,
        x_len: usize,
        rows: usize,
        cols: usize,
        dtype: DType,
    ) -> Result<usize, QuantError> {
        assert_eq!(x_len, rows * cols, "activation shape");
        let row_bytes = dtype
            .row_bytes(cols)
            .map_err(|_| QuantError::Unsupported(dtype))?;
        self.data.clear();
        self.data.resize(rows * row_bytes, 0);
        self.dtype = dtype;
        self.rows = rows;
        self.cols = cols;
        self.row_bytes = row_bytes;
        Ok(row_bytes)
    }
}

/// [`quantize_acts`] into an existing buffer: it allocates only when `out` is too small, so a
/// buffer sized once serves every later step (what captured plans rely on).
pub fn quantize_acts_into(
    pool: &ThreadPool,
    x: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
    out: &mut QuantizedActs,
) -> Result<(), QuantError> {
    let row_bytes = out.reset(x.len(), rows, cols, dtype)?;
    let data = &mut out.data;
    if rows == 1 {
        quant::quantize_row(dtype, x, data)?;
    } else {
        let out = SharedMut::new(data);
        let failed = std::sync::atomic::AtomicBool::new(false);
        const ROWS_PER_CHUNK: usize = 8;
        let next = AtomicUsize::new(0);
        pool.run_dynamic(|_, _| loop {
            let start = next.fetch_add(ROWS_PER_CHUNK, Ordering::Relaxed);
            if start >= rows {
                break;
            }
            let end = (start + ROWS_PER_CHUNK).min(rows);
            // SAFETY: each chunk of rows is claimed by exactly one thread.
            let dst = unsafe { out.slice(start * row_bytes, (end - start) * row_bytes) };
            for (i, row) in (start..end).enumerate() {
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
    Ok(())
}
