//! `TensorView`: a borrowed, format-independent view of one stored tensor.
//!
//! Guarantees: `shape` is row-major with the outermost dimension first (PyTorch order), and
//! `data` is exactly the tensor's stored bytes (`dtype.row_bytes(innermost) * rows`), validated
//! when the file was opened. `data` carries no alignment promise: safetensors data in particular
//! may start at any byte.

use oxllm_core::DType;

/// One tensor's metadata and raw bytes, borrowed from an open file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorView<'a> {
    pub name: &'a str,
    pub dtype: DType,
    /// Outermost dimension first; the last entry is the contiguous (innermost) one.
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// Number of elements (1 for a zero-dimensional tensor).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}
