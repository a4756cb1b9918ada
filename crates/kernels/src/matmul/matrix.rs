//! Weight matrix storage: [`QMatrix`] holds a `[out features, in features]` matrix in its file
//! format, as row-major blocks or repacked at load into panels (`panel`) where the CPU runs
//! the panel kernels; [`QMatrix::row`] gives row-major blocks either way.

use oxllm_core::DType;

use super::{kpanel, panel};
use crate::quant::{self, QuantError};
use crate::weight_bytes::WeightBytes;

/// A 2-D weight matrix `[rows = out features, cols = in features]` in its storage format.
#[derive(Clone, Debug)]
pub struct QMatrix {
    pub(super) dtype: DType,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) row_bytes: usize,
    /// Row-major blocks, or panels (`panel`) when `panels` is set; in huge-page memory where
    /// the OS allows (`weight_bytes`).
    pub(super) data: WeightBytes,
    pub(super) panels: Option<&'static panel::PanelFormat>,
    /// Set when `data` holds k-quant panels (`kpanel`) instead.
    pub(super) kpanels: Option<&'static kpanel::KPanelFormat>,
    /// Keep activations in f32 for this matrix (see `weight_dot`).
    pub(super) f32_activations: bool,
}

/// How a backend stores quantized weight matrices: a choice of the backend that owns them
/// (`CpuOptions` in `oxllm-runtime`, `--weight-layout` on the command line), not of the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightLayout {
    /// Repacked into panels where the CPU runs the panel kernels (AVX2 / AVX-512), row-major
    /// blocks elsewhere: the fast default.
    #[default]
    Panels,
    /// Row-major blocks as in the file, whatever the CPU (for A/B measurements).
    Rows,
}

impl WeightLayout {
    /// Whether matrices in this layout are packed into panels on this CPU.
    fn packs(self) -> bool {
        self == WeightLayout::Panels && panel::PanelKernel::best().is_some()
    }
}

impl std::str::FromStr for WeightLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "panels" => Ok(WeightLayout::Panels),
            "rows" => Ok(WeightLayout::Rows),
            _ => Err(format!(
                "unknown weight layout `{s}` (expected `panels` or `rows`)"
            )),
        }
    }
}

impl std::fmt::Display for WeightLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WeightLayout::Panels => "panels",
            WeightLayout::Rows => "rows",
        })
    }
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
    /// A matrix from row-major blocks in the default layout ([`WeightLayout::Panels`]).
    pub fn new(dtype: DType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, MatrixError> {
        Self::with_layout(dtype, rows, cols, data, WeightLayout::default())
    }

    /// A matrix from row-major blocks stored in `layout`. With [`WeightLayout::Panels`],
    /// Q4_0, Q4_1 and Q8_0 are repacked into panels, and Q4_K, Q5_K and Q6_K into k-panels,
    /// where the CPU runs the panel kernels (about the same memory; [`QMatrix::row`] still
    /// gives row-major blocks).
    pub fn with_layout(
        dtype: DType,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
        layout: WeightLayout,
    ) -> Result<Self, MatrixError> {
        let row_bytes = Self::check(dtype, rows, cols, data.len())?;
        let packs = layout.packs();
        let panels = panel::PanelFormat::of(dtype).filter(|_| packs);
        let kpanels = kpanel::KPanelFormat::of(dtype).filter(|_| packs);
        // Packed straight from `data`: a row-major copy first would strand its bytes.
        let data = match (panels, kpanels) {
            (Some(f), _) => panel::pack(f, rows, cols, &data),
            (None, Some(f)) => kpanel::pack(f, rows, cols, &data),
            (None, None) => WeightBytes::from_vec(data),
        };
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data,
            panels,
            kpanels,
            f32_activations: false,
        })
    }

    /// [`QMatrix::new`] without repacking (benches and tests of the row-major kernels).
    pub fn new_row_major(
        dtype: DType,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self, MatrixError> {
        let row_bytes = Self::check(dtype, rows, cols, data.len())?;
        Ok(QMatrix {
            dtype,
            rows,
            cols,
            row_bytes,
            data: WeightBytes::from_vec(data),
            panels: None,
            kpanels: None,
            f32_activations: false,
        })
    }

    /// Bytes per row of a `rows x cols` matrix of `dtype` holding `len` bytes, or why not.
    fn check(dtype: DType, rows: usize, cols: usize, len: usize) -> Result<usize, MatrixError> {
        let row_bytes = dtype
            .row_bytes(cols)
            .map_err(|_| MatrixError::PartialBlock { dtype, cols })?;
        let expected = row_bytes * rows;
        if len != expected {
            return Err(MatrixError::Length {
                dtype,
                rows,
                cols,
                expected,
                got: len,
            });
        }
        // Fail at load time, not at the first forward, when a format has no kernel.
        quant::vec_dot(dtype)?;
        Ok(row_bytes)
    }

    #[cfg(test)]
    pub(super) fn into_panels(mut self) -> Self {
        if let (None, Some(f)) = (self.panels, panel::PanelFormat::of(self.dtype)) {
            self.data = panel::pack(f, self.rows, self.cols, &self.data);
            self.panels = Some(f);
        }
        if let (None, Some(f)) = (self.kpanels, kpanel::KPanelFormat::of(self.dtype)) {
            self.data = kpanel::pack(f, self.rows, self.cols, &self.data);
            self.kpanels = Some(f);
        }
        self
    }

    fn into_row_major(mut self) -> Self {
        if self.is_panels() {
            let data: Vec<u8> = (0..self.rows)
                .flat_map(|r| self.row(r).into_owned())
                .collect();
            self.data = WeightBytes::from_vec(data);
            self.panels = None;
            self.kpanels = None;
        }
        self
    }

    /// Whether the matrix is stored as panels.
    pub fn is_panels(&self) -> bool {
        self.panels.is_some() || self.kpanels.is_some()
    }

    /// Computes this matrix against f32 activations, dequantizing weights on the fly: exact up
    /// to the weight quantization, slower than the integer path. Meant for the output head.
    ///
    /// Q8_0 is repacked into wide panels where the CPU runs the panel kernels: activations
    /// are then rounded to 16 bits per 32-value block (relative error about 1.5e-5 of the
    /// block's largest value, 256 times finer than the 8-bit path) and the products run as
    /// exact integer pair products (`vpdpwssd`, or `vpmaddwd` on AVX2). A matrix built in
    /// [`WeightLayout::Rows`] stays row-major.
    pub fn with_f32_activations(self) -> Self {
        // Q8_0 has a panel format, so it is packed exactly when its layout asked for panels.
        let wants_panels = self.is_panels();
        let mut m = self.into_row_major();
        m.f32_activations = true;
        if m.dtype == DType::Q8_0 && wants_panels {
            let f = panel::PanelFormat::wide_q8_0();
            m.data = panel::pack(f, m.rows, m.cols, &m.data);
            m.panels = Some(f);
        }
        m
    }

    /// The output head's form: f32 activations ([`QMatrix::with_f32_activations`]) where the
    /// weights are floats or Q8_0 (16-bit activations on the wide panels), which have fast
    /// kernels for them; every other quantized format (Q4_0, Q4_1 and the k-quants, e.g. the
    /// Q6_K head of most Q4_K_M files) keeps the integer kernels of the layers and their 8-bit
    /// activations, as llama.cpp computes such heads. Their f32-activation dot has only the
    /// scalar reference, which made the head of a 1.7B Q4_K_M model cost 4x the rest of the
    /// decode step (docs/BENCHMARKS.md, sitting 13).
    pub fn for_output_head(self) -> Self {
        match self.dtype {
            DType::Q8_0 | DType::F32 | DType::F16 | DType::BF16 => self.with_f32_activations(),
            _ => self,
        }
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
    /// Row `r` as row-major blocks (gathered from the panels when packed).
    pub fn row(&self, r: usize) -> std::borrow::Cow<'_, [u8]> {
        match (&self.panels, &self.kpanels) {
            (Some(f), _) => {
                let mut row = vec![0u8; self.row_bytes];
                panel::unpack_row(f, &self.data, self.cols, r, &mut row);
                std::borrow::Cow::Owned(row)
            }
            (None, Some(f)) => {
                let mut row = vec![0u8; self.row_bytes];
                for (b, blk) in row.chunks_exact_mut(f.w_bytes).enumerate() {
                    kpanel::unpack_block(f, &self.data, self.cols, r, b, blk);
                }
                std::borrow::Cow::Owned(row)
            }
            (None, None) => {
                std::borrow::Cow::Borrowed(&self.data[r * self.row_bytes..][..self.row_bytes])
            }
        }
    }
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Dequantizes row `r` (e.g. one token's embedding) into `out`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        if !self.is_panels() {
            return quant::dequantize_row(self.dtype, self.row(r).as_ref(), out);
        }
        // Block by block through a stack buffer: embedding lookups run inside captured plans,
        // which must not allocate.
        if out.len() != self.cols {
            return Err(QuantError::Length {
                dtype: self.dtype,
                n: out.len(),
                block: self.dtype.block_size(),
                got: self.row_bytes,
            });
        }
        let Some(f) = &self.panels else {
            return self.dequantize_kpanel_row(r, out);
        };
        let mut blk = [0u8; panel::MAX_BLOCK_BYTES];
        for (b, dst) in out.chunks_exact_mut(quant::QK).enumerate() {
            panel::unpack_block(f, &self.data, self.cols, r, b, &mut blk[..f.w_bytes]);
            quant::dequantize_row(self.dtype, &blk[..f.w_bytes], dst)?;
        }
        Ok(())
    }

    /// [`QMatrix::dequantize_row`] of a k-panel matrix, super-block by super-block.
    fn dequantize_kpanel_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        let Some(f) = self.kpanels else {
            return Err(QuantError::Unsupported(self.dtype));
        };
        let mut blk = [0u8; kpanel::MAX_BLOCK_BYTES];
        for (b, dst) in out.chunks_exact_mut(quant::QK_K).enumerate() {
            kpanel::unpack_block(f, &self.data, self.cols, r, b, &mut blk[..f.w_bytes]);
            quant::dequantize_row(self.dtype, &blk[..f.w_bytes], dst)?;
        }
        Ok(())
    }

    pub fn activation_dtype(&self) -> DType {
        if self.f32_activations {
            return DType::F32;
        }
        // `new` checked that a kernel exists, so the format has an activation partner.
        quant::activation_dtype(self.dtype).unwrap_or(DType::F32)
    }
}
