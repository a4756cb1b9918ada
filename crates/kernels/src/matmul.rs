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

use crate::pool::{SharedMut, ThreadPool};
use crate::quant::{self, QuantError, VecDotFn};
#[cfg(target_arch = "x86_64")]
use crate::scratch::Scratch;

mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_avx512;
#[cfg(target_arch = "x86_64")]
mod panel_run;
mod reference;
#[cfg(target_arch = "x86_64")]
mod tile_avx2;
#[cfg(target_arch = "x86_64")]
mod tile_avx512;

pub use reference::{matmul_reference, quantize_acts_reference};

/// A 2-D weight matrix `[rows = out features, cols = in features]` in its storage format.
#[derive(Clone, Debug)]
pub struct QMatrix {
    dtype: DType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    /// Row-major blocks, or panels (`panel`) when `panels` is set.
    data: Vec<u8>,
    panels: Option<&'static panel::PanelFormat>,
    /// Keep activations in f32 for this matrix (see `weight_dot`).
    f32_activations: bool,
}

/// Whether new matrices are packed into panels where the CPU has the panel kernel
/// (`OXLLM_MATMUL_PANELS=0` keeps row-major blocks: for A/B measurements).
fn panels_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::env::var("OXLLM_MATMUL_PANELS").map_or(true, |v| v != "0")
                && quant::detected_isa() == quant::Isa::Avx2
                && panel_avx512::available()
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
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
    /// A matrix from row-major blocks. Q4_0, Q4_1 and Q8_0 are repacked into panels where
    /// the CPU runs the panel kernel (same memory; [`QMatrix::row`] still gives row-major
    /// blocks).
    pub fn new(dtype: DType, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, MatrixError> {
        let m = Self::new_row_major(dtype, rows, cols, data)?;
        Ok(if panels_enabled() { m.into_panels() } else { m })
    }

    /// [`QMatrix::new`] without repacking (benches and tests of the row-major kernels).
    pub fn new_row_major(
        dtype: DType,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self, MatrixError> {
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
            panels: None,
            f32_activations: false,
        })
    }

    fn into_panels(mut self) -> Self {
        if let (None, Some(f)) = (self.panels, panel::PanelFormat::of(self.dtype)) {
            self.data = panel::pack(f, self.rows, self.cols, &self.data);
            self.panels = Some(f);
        }
        self
    }

    fn into_row_major(mut self) -> Self {
        if self.panels.is_some() {
            let data: Vec<u8> = (0..self.rows)
                .flat_map(|r| self.row(r).into_owned())
                .collect();
            self.data = data;
            self.panels = None;
        }
        self
    }

    /// Whether the matrix is stored as panels.
    pub fn is_panels(&self) -> bool {
        self.panels.is_some()
    }

    /// Computes this matrix against f32 activations, dequantizing weights on the fly: exact up
    /// to the weight quantization, slower than the integer path. Meant for the output head.
    ///
    /// Q8_0 is repacked into wide panels where the CPU runs the panel kernels: activations
    /// are then rounded to 16 bits per 32-value block (relative error about 1.5e-5 of the
    /// block's largest value, 256 times finer than the 8-bit path) and the products run as
    /// integer `vpdpwssd`.
    pub fn with_f32_activations(self) -> Self {
        let mut m = self.into_row_major();
        m.f32_activations = true;
        if m.dtype == DType::Q8_0 && panels_enabled() {
            let f = panel::PanelFormat::wide_q8_0();
            m.data = panel::pack(f, m.rows, m.cols, &m.data);
            m.panels = Some(f);
        }
        m
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
        match &self.panels {
            None => std::borrow::Cow::Borrowed(&self.data[r * self.row_bytes..][..self.row_bytes]),
            Some(f) => {
                let mut row = vec![0u8; self.row_bytes];
                panel::unpack_row(f, &self.data, self.cols, r, &mut row);
                std::borrow::Cow::Owned(row)
            }
        }
    }
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Dequantizes row `r` (e.g. one token's embedding) into `out`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), QuantError> {
        let Some(f) = &self.panels else {
            return quant::dequantize_row(self.dtype, self.row(r).as_ref(), out);
        };
        // Block by block through a stack buffer: embedding lookups run inside captured plans,
        // which must not allocate.
        if out.len() != self.cols {
            return Err(QuantError::Length {
                dtype: self.dtype,
                n: out.len(),
                block: quant::QK,
                got: self.row_bytes,
            });
        }
        let mut blk = [0u8; panel::MAX_BLOCK_BYTES];
        for (b, dst) in out.chunks_exact_mut(quant::QK).enumerate() {
            panel::unpack_block(f, &self.data, self.cols, r, b, &mut blk[..f.w_bytes]);
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
    fn reset(
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

const TILE_ROWS: usize = 16;

/// Weight rows per tile for a few activation rows (decode): about 8 tiles per thread, so two
/// threads balance while the shared tile counter is touched only a few dozen times per call
/// (the 49152-row output head would otherwise bounce its cache line 3072 times per token).
fn decode_tile_rows(n: usize, threads: usize) -> usize {
    n.div_ceil(8 * threads.max(1))
        .next_multiple_of(TILE_ROWS)
        .clamp(TILE_ROWS, 512)
}

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
    matmul_many(pool, &mut [(w, acts, out)])
}

/// Several products `out_k = acts_k · w_kᵀ` in one pool dispatch (e.g. Q, K and V of one
/// quantized input, or gate and up): one barrier instead of one per matrix, which is most of
/// the per-op cost of a decode step. Each output is bit-identical to [`matmul`]'s.
pub fn matmul_many(
    pool: &ThreadPool,
    jobs: &mut [(&QMatrix, &QuantizedActs, &mut [f32])],
) -> Result<(), QuantError> {
    matmul_many_with(pool, jobs, true)
}

/// What [`matmul_many`] takes (its plans and their scratch, on the calling thread) without
/// computing a product: for warm-up steps that size buffers at a shape whose products nobody
/// reads.
pub fn matmul_many_prepare(
    pool: &ThreadPool,
    jobs: &mut [(&QMatrix, &QuantizedActs, &mut [f32])],
) -> Result<(), QuantError> {
    matmul_many_with(pool, jobs, false)
}

fn matmul_many_with(
    pool: &ThreadPool,
    jobs: &mut [(&QMatrix, &QuantizedActs, &mut [f32])],
    compute: bool,
) -> Result<(), QuantError> {
    // Plans live on the stack (no allocation per call); larger lists go in groups.
    for group in jobs.chunks_mut(MAX_MANY) {
        let mut plans: [Option<Plan<'_>>; MAX_MANY] = [const { None }; MAX_MANY];
        for (slot, (w, acts, out)) in plans.iter_mut().zip(group.iter()) {
            check_shapes(w, acts, out);
            *slot = Some(plan(pool, w, acts, false)?);
        }
        let mut outs: [Option<SharedMut<f32>>; MAX_MANY] = [const { None }; MAX_MANY];
        for (slot, job) in outs.iter_mut().zip(group.iter_mut()) {
            *slot = Some(SharedMut::new(job.2));
        }
        if compute {
            execute(pool, &plans[..group.len()], &outs[..group.len()]);
        }
    }
    Ok(())
}

/// Products per pool dispatch in [`matmul_many`].
const MAX_MANY: usize = 4;

fn check_shapes(w: &QMatrix, acts: &QuantizedActs, out: &[f32]) {
    assert_eq!(acts.cols, w.cols, "inner dimension");
    assert_eq!(acts.dtype, w.activation_dtype(), "activation format");
    assert_eq!(out.len(), acts.rows * w.rows, "output shape");
}

/// The plain path of [`matmul`]: one `vec_dot` per (activation row, weight row) pair, tiles of
/// weight rows handed out by an atomic counter. Works for every format; batch invariant
/// because each output is one call of the same dot function. Kept public as the baseline of
/// the benches and the reference of the tests.
pub fn matmul_pairwise(
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_shapes(w, acts, out);
    let plan = plan(pool, w, acts, true)?;
    execute(pool, &[Some(plan)], &[Some(SharedMut::new(out))]);
    Ok(())
}

/// The register-blocked tile kernels; all give the same bits (tested), they differ in how the
/// exact integer block dots are computed. Public only so benches can compare them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileKernel {
    /// `vpmaddubsw` + `vpmaddwd` (AVX2+FMA+F16C).
    Avx2,
    /// `vpdpbusd`, VEX form (AVX-VNNI).
    AvxVnni,
    /// `vpdpbusd` on ymm, EVEX form (AVX512-VNNI + AVX512-VL).
    Avx512Vnni,
}

impl TileKernel {
    /// Whether this CPU can run the variant.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            quant::detected_isa() == quant::Isa::Avx2
                && match self {
                    TileKernel::Avx2 => true,
                    TileKernel::AvxVnni => tile_avx2::has_avx_vnni(),
                    TileKernel::Avx512Vnni => tile_avx512::has_avx512_vnni(),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The variant [`matmul`] uses on this CPU (the one-instruction block dot where there is
    /// one), or `None` where the CPU has no tile kernel.
    pub fn best() -> Option<TileKernel> {
        static BEST: std::sync::OnceLock<Option<TileKernel>> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            [
                TileKernel::AvxVnni,
                TileKernel::Avx512Vnni,
                TileKernel::Avx2,
            ]
            .into_iter()
            .find(|k| k.available())
        })
    }
}

/// [`matmul`] forced onto one tile kernel variant (benches, tests). Err where the CPU lacks
/// it or the weight format has no tile kernel.
#[doc(hidden)]
pub fn matmul_tiled_with(
    kernel: TileKernel,
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_shapes(w, acts, out);
    #[cfg(target_arch = "x86_64")]
    if kernel.available() && !w.f32_activations && w.panels.is_none() {
        if let Some(p) = tiled_plan_for(kernel, pool, w, acts) {
            execute(pool, &[Some(Plan::Tiled(p))], &[Some(SharedMut::new(out))]);
            return Ok(());
        }
    }
    let _ = (kernel, pool);
    Err(QuantError::Unsupported(w.dtype))
}

/// The tiled plan of `kernel` for `w`, or `None` for formats without tile kernels.
#[cfg(target_arch = "x86_64")]
fn tiled_plan_for<'a>(
    kernel: TileKernel,
    pool: &ThreadPool,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
) -> Option<TiledPlan<'a>> {
    use tile_avx2::{Q4_0Q8_0Vnni, Q4_1Q8_1Vnni, Q8_0Q8_0Vnni, Q4_0Q8_0, Q4_1Q8_1, Q8_0Q8_0};
    use tile_avx512::{Q4_0Q8_0Vnni512, Q4_1Q8_1Vnni512, Q8_0Q8_0Vnni512};
    use TileKernel::*;
    Some(match (kernel, w.dtype) {
        (Avx2, DType::Q4_1) => tiled_plan::<Q4_1Q8_1>(pool, w, acts),
        (Avx2, DType::Q4_0) => tiled_plan::<Q4_0Q8_0>(pool, w, acts),
        (Avx2, DType::Q8_0) => tiled_plan::<Q8_0Q8_0>(pool, w, acts),
        (AvxVnni, DType::Q4_1) => tiled_plan::<Q4_1Q8_1Vnni>(pool, w, acts),
        (AvxVnni, DType::Q4_0) => tiled_plan::<Q4_0Q8_0Vnni>(pool, w, acts),
        (AvxVnni, DType::Q8_0) => tiled_plan::<Q8_0Q8_0Vnni>(pool, w, acts),
        (Avx512Vnni, DType::Q4_1) => tiled_plan::<Q4_1Q8_1Vnni512>(pool, w, acts),
        (Avx512Vnni, DType::Q4_0) => tiled_plan::<Q4_0Q8_0Vnni512>(pool, w, acts),
        (Avx512Vnni, DType::Q8_0) => tiled_plan::<Q8_0Q8_0Vnni512>(pool, w, acts),
        _ => return None,
    })
}

/// How one product's tiles run.
enum Plan<'a> {
    #[cfg(target_arch = "x86_64")]
    Tiled(TiledPlan<'a>),
    #[cfg(target_arch = "x86_64")]
    Panel(panel_run::PanelPlan<'a>),
    Pairwise {
        w: &'a QMatrix,
        acts: &'a QuantizedActs,
        dot: VecDotFn,
        /// Several activation rows per weight row at once (same bits as `dot`).
        rows_dot: Option<crate::weight_dot::DotRowsFn>,
        /// Two weight rows against every activation row at once (same bits as `dot`).
        rows_dot2: Option<crate::weight_dot::DotRows2Fn>,
        tile_rows: usize,
        tiles: usize,
    },
}

fn plan<'a>(
    pool: &ThreadPool,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    force_pairwise: bool,
) -> Result<Plan<'a>, QuantError> {
    #[cfg(target_arch = "x86_64")]
    if let (false, Some(f)) = (force_pairwise, w.panels) {
        return Ok(Plan::Panel(panel_run::panel_plan(pool, *f, w, acts)));
    }
    #[cfg(target_arch = "x86_64")]
    if !force_pairwise && !w.f32_activations && w.panels.is_none() {
        if let Some(p) = TileKernel::best().and_then(|k| tiled_plan_for(k, pool, w, acts)) {
            return Ok(Plan::Tiled(p));
        }
    }
    let _ = force_pairwise;
    let dot: VecDotFn = if w.f32_activations {
        crate::weight_dot::vec_dot_f32_acts(w.dtype)?
    } else {
        quant::vec_dot(w.dtype)?
    };
    let tile_rows = if acts.rows <= 8 {
        decode_tile_rows(w.rows, pool.n_threads())
    } else {
        TILE_ROWS
    };
    let tiles = if acts.rows == 0 {
        0
    } else {
        w.rows.div_ceil(tile_rows)
    };
    let rows_dot = if w.f32_activations && acts.rows > 1 {
        crate::weight_dot::dot_rows_f32_acts(w.dtype)
    } else {
        None
    };
    let rows_dot2 = if w.f32_activations {
        crate::weight_dot::dot_rows2_f32_acts(w.dtype)
    } else {
        None
    };
    Ok(Plan::Pairwise {
        w,
        acts,
        dot,
        rows_dot,
        rows_dot2,
        tile_rows,
        tiles,
    })
}

impl Plan<'_> {
    fn tiles(&self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Plan::Tiled(p) => p.tiles,
            #[cfg(target_arch = "x86_64")]
            Plan::Panel(p) => p.tiles,
            Plan::Pairwise { tiles, .. } => *tiles,
        }
    }

    /// Computes tile `t`. Tiles of one plan write disjoint outputs.
    fn run_tile(&self, t: usize, out: &SharedMut<f32>) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a tiled plan exists only after the AVX2 check; `t < tiles`.
            Plan::Tiled(p) => unsafe { (p.run)(p, t, out) },
            #[cfg(target_arch = "x86_64")]
            Plan::Panel(p) => p.run_tile(t, out),
            Plan::Pairwise {
                w,
                acts,
                dot,
                rows_dot,
                rows_dot2,
                tile_rows,
                ..
            } => {
                let n_out = w.rows;
                let j0 = t * tile_rows;
                let j1 = (j0 + tile_rows).min(n_out);
                if let Some(rows_dot2) = rows_dot2 {
                    const G: usize = 8;
                    for i0 in (0..acts.rows).step_by(G) {
                        let g = (acts.rows - i0).min(G);
                        let rows: [&[u8]; G] = std::array::from_fn(|i| acts.row(i0 + i.min(g - 1)));
                        let (mut c0, mut c1) = ([0f32; G], [0f32; G]);
                        let mut j = j0;
                        while j < j1 {
                            // An odd last row pairs with itself (computed twice, written once).
                            let j_next = (j + 1).min(j1 - 1);
                            let (a, b) = (w.row(j), w.row(j_next));
                            let (a, b) = (&*a, &*b);
                            rows_dot2(w.cols, a, b, &rows[..g], &mut c0[..g], &mut c1[..g]);
                            for i in 0..g {
                                // SAFETY: columns j..=j_next of each output row belong to this
                                // tile.
                                let dst =
                                    unsafe { out.slice((i0 + i) * n_out + j, j_next + 1 - j) };
                                dst[0] = c0[i];
                                if j_next > j {
                                    dst[1] = c1[i];
                                }
                            }
                            j += 2;
                        }
                    }
                    return;
                }
                if let Some(rows_dot) = rows_dot {
                    // Groups of activation rows on the stack; each row gets the single-row
                    // kernel's bits whatever group it is in. A group of 8 f32 rows (18 KB at
                    // 576 columns) stays in L1 while the tile's weight rows pass over it.
                    const G: usize = 8;
                    for i0 in (0..acts.rows).step_by(G) {
                        let g = (acts.rows - i0).min(G);
                        let rows: [&[u8]; G] = std::array::from_fn(|i| acts.row(i0 + i.min(g - 1)));
                        let mut col = [0f32; G];
                        for j in j0..j1 {
                            rows_dot(w.cols, &w.row(j), &rows[..g], &mut col[..g]);
                            for (i, v) in col[..g].iter().enumerate() {
                                // SAFETY: column j of each output row belongs to this tile.
                                unsafe { out.slice((i0 + i) * n_out + j, 1)[0] = *v };
                            }
                        }
                    }
                    return;
                }
                for i in 0..acts.rows {
                    let a = acts.row(i);
                    // SAFETY: tiles are disjoint column ranges of each output row.
                    let dst = unsafe { out.slice(i * n_out + j0, j1 - j0) };
                    for (d, j) in dst.iter_mut().zip(j0..j1) {
                        *d = dot(w.cols, &w.row(j), a);
                    }
                }
            }
        }
    }
}

/// Runs every tile of every plan in one pool dispatch, handed out by one atomic counter.
fn execute(pool: &ThreadPool, plans: &[Option<Plan<'_>>], outs: &[Option<SharedMut<f32>>]) {
    let mut ends = [0usize; MAX_MANY];
    let mut total = 0;
    for (end, p) in ends.iter_mut().zip(plans) {
        total += p.as_ref().map_or(0, |p| p.tiles());
        *end = total;
    }
    if total == 0 {
        return;
    }
    let next = AtomicUsize::new(0);
    let run = |t: usize| {
        let k = ends[..plans.len()].iter().position(|&e| t < e).unwrap_or(0);
        let start = if k == 0 { 0 } else { ends[k - 1] };
        if let (Some(p), Some(out)) = (&plans[k], &outs[k]) {
            p.run_tile(t - start, out);
        }
    };
    if total == 1 {
        run(0);
        return;
    }
    pool.run_dynamic(|_, _| loop {
        let t = next.fetch_add(1, Ordering::Relaxed);
        if t >= total {
            break;
        }
        run(t);
    });
}

/// A prepared register-blocked product: tiles of (`wt` weight rows) x (`at` chunks of 8
/// activation rows); inside a tile each chunk of activation rows stays in L1 while the tile's
/// weight rows (sized to fit L1 too) pass over it, one weight row at a time against the whole
/// chunk.
#[cfg(target_arch = "x86_64")]
struct TiledPlan<'a> {
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    /// Activation scales as f32, transposed per chunk: `[chunk][block][lane]`.
    ad: Scratch<f32>,
    asum: Scratch<f32>,
    /// The pair kernel's bias correction per chunk, `[chunk][block][lane][8]` (formats with a
    /// weight bias on AVX512-VNNI only; empty otherwise).
    corr: Scratch<i32>,
    nb: usize,
    wt: usize,
    at: usize,
    n_wt: usize,
    tiles: usize,
    run: unsafe fn(&TiledPlan<'_>, usize, &SharedMut<f32>),
}

#[cfg(target_arch = "x86_64")]
fn tiled_plan<'a, F: tile_avx2::Format>(
    pool: &ThreadPool,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
) -> TiledPlan<'a> {
    use tile_avx2::CH;
    let nb = w.cols / quant::QK;
    let (m, n) = (acts.rows, w.rows);
    assert!(w.row_bytes == nb * F::W_BYTES && acts.row_bytes == nb * F::A_BYTES);
    let chunks = m.div_ceil(CH);
    let mut ad = Scratch::<f32>::take(chunks * nb * CH);
    let mut asum = Scratch::<f32>::take(chunks * nb * CH);
    let with_corr = F::VNNI512 && F::BIAS != 0;
    let mut corr = Scratch::<i32>::take(if with_corr { chunks * nb * CH * 8 } else { 0 });
    for ch in 0..chunks {
        let r0 = ch * CH;
        let live = (r0 + CH).min(m) - r0;
        let rows: [*const u8; CH] =
            std::array::from_fn(|i| acts.data[(r0 + i.min(live - 1)) * acts.row_bytes..].as_ptr());
        let span = ch * nb * CH..(ch + 1) * nb * CH;
        // SAFETY: AVX2+FMA+F16C checked by the caller; each row holds nb blocks (assert above).
        unsafe {
            tile_avx2::act_scales::<F>(nb, &rows[..live], &mut ad[span.clone()], &mut asum[span])
        };
        if with_corr {
            let span = ch * nb * CH * 8..(ch + 1) * nb * CH * 8;
            // SAFETY: as above (plain loads).
            unsafe { tile_avx512::act_bias_correction::<F>(nb, &rows[..live], &mut corr[span]) };
        }
    }
    let wt = if m <= CH {
        decode_tile_rows(n, pool.n_threads())
    } else {
        ((12 * 1024) / w.row_bytes.max(1)).clamp(8, 64) / 4 * 4
    };
    let at = 8; // chunks per tile: 64 activation rows
    let n_wt = n.div_ceil(wt);
    let tiles = if m == 0 {
        0
    } else {
        n_wt * chunks.div_ceil(at)
    };
    TiledPlan {
        w,
        acts,
        ad,
        asum,
        corr,
        nb,
        wt,
        at,
        n_wt,
        tiles,
        run: tiled_tile::<F>,
    }
}

/// # Safety
/// AVX2+FMA+F16C available; `t < p.tiles`; `out` is the plan's output.
#[cfg(target_arch = "x86_64")]
unsafe fn tiled_tile<F: tile_avx2::Format>(p: &TiledPlan<'_>, t: usize, out: &SharedMut<f32>) {
    use tile_avx2::CH;
    let (w, acts, nb, wt, at) = (p.w, p.acts, p.nb, p.wt, p.at);
    let (m, n) = (acts.rows, w.rows);
    let chunks = m.div_ceil(CH);
    let (wi, ai) = (t % p.n_wt, t / p.n_wt);
    let (j0, j1) = (wi * wt, (wi * wt + wt).min(n));
    let act_row = |i: usize| acts.data[i * acts.row_bytes..].as_ptr();
    for ch in ai * at..(ai * at + at).min(chunks) {
        let r0 = ch * CH;
        let rows: [*const u8; CH] = std::array::from_fn(|c| act_row((r0 + c).min(m - 1)));
        let scales = (
            p.ad[ch * nb * CH..].as_ptr(),
            p.asum[ch * nb * CH..].as_ptr(),
        );
        let corr = if p.corr.is_empty() {
            std::ptr::null()
        } else {
            p.corr[ch * nb * CH * 8..].as_ptr()
        };
        let mut j = j0;
        // Pairs of weight rows share one zmm register on AVX512-VNNI (same bits as singles).
        if F::VNNI512 {
            while j + 1 < j1 {
                let wp = (
                    w.data[j * w.row_bytes..].as_ptr(),
                    w.data[(j + 1) * w.row_bytes..].as_ptr(),
                );
                let s = (scales.0, scales.1, corr);
                match m - r0 {
                    1 => pair::<F, 1>(nb, wp, &rows, s, out, n, r0, j),
                    2 => pair::<F, 2>(nb, wp, &rows, s, out, n, r0, j),
                    3 => pair::<F, 3>(nb, wp, &rows, s, out, n, r0, j),
                    4 => pair::<F, 4>(nb, wp, &rows, s, out, n, r0, j),
                    5 => pair::<F, 5>(nb, wp, &rows, s, out, n, r0, j),
                    6 => pair::<F, 6>(nb, wp, &rows, s, out, n, r0, j),
                    7 => pair::<F, 7>(nb, wp, &rows, s, out, n, r0, j),
                    _ => pair::<F, 8>(nb, wp, &rows, s, out, n, r0, j),
                }
                j += 2;
            }
        }
        for j in j..j1 {
            let wp = w.data[j * w.row_bytes..].as_ptr();
            // Pointers address whole rows of nb blocks; the outputs (r0 + c, j) of this tile
            // are written by this tile only.
            match m - r0 {
                1 => chunk::<F, 1>(nb, wp, &rows, scales, out, n, r0, j),
                2 => chunk::<F, 2>(nb, wp, &rows, scales, out, n, r0, j),
                3 => chunk::<F, 3>(nb, wp, &rows, scales, out, n, r0, j),
                4 => chunk::<F, 4>(nb, wp, &rows, scales, out, n, r0, j),
                5 => chunk::<F, 5>(nb, wp, &rows, scales, out, n, r0, j),
                6 => chunk::<F, 6>(nb, wp, &rows, scales, out, n, r0, j),
                7 => chunk::<F, 7>(nb, wp, &rows, scales, out, n, r0, j),
                _ => chunk::<F, 8>(nb, wp, &rows, scales, out, n, r0, j),
            }
        }
    }
}

/// Weight rows `j` and `j + 1` against activation rows `r0..r0 + C` (AVX512-VNNI formats).
///
/// # Safety
/// As `tile_avx512::row_pair_chunk_vnni512`; the outputs must be in bounds and owned by the
/// caller's tile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn pair<F: tile_avx2::Format, const C: usize>(
    nb: usize,
    wp: (*const u8, *const u8),
    rows: &[*const u8; tile_avx2::CH],
    (ad, asum, corr): (*const f32, *const f32, *const i32),
    out: &SharedMut<f32>,
    n: usize,
    r0: usize,
    j: usize,
) {
    let a: [*const u8; C] = std::array::from_fn(|c| rows[c]);
    let (mut o0, mut o1) = ([0f32; C], [0f32; C]);
    tile_avx512::row_pair_chunk_vnni512::<F, C>(nb, wp, &a, ad, asum, corr, &mut o0, &mut o1);
    for c in 0..C {
        out.slice((r0 + c) * n + j, 2)
            .copy_from_slice(&[o0[c], o1[c]]);
    }
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
    if F::VNNI512 {
        tile_avx512::row_chunk_vnni512::<F, C>(nb, wp, &a, ad, asum, &mut o);
    } else if F::VNNI {
        tile_avx2::row_chunk_vnni::<F, C>(nb, wp, &a, ad, asum, &mut o);
    } else {
        tile_avx2::row_chunk::<F, C>(nb, wp, &a, ad, asum, &mut o);
    }
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

    /// The AVX-VNNI tile kernels must give the same bits as the AVX2 ones (both compute exact
    /// integer block dots, then the same float sequence), so results do not depend on which
    /// of the two a CPU runs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vnni_tiles_are_bit_identical_to_avx2_tiles() {
        use tile_avx2::*;
        if quant::detected_isa() != quant::Isa::Avx2 || !has_avx_vnni() {
            eprintln!("AVX2 or AVX-VNNI not available: nothing to compare");
            return;
        }
        fn run<F: Format>(pool: &ThreadPool, w: &QMatrix, a: &QuantizedActs) -> Vec<f32> {
            let mut out = vec![0f32; a.rows * w.rows];
            let plan = Plan::Tiled(tiled_plan::<F>(pool, w, a));
            execute(pool, &[Some(plan)], &[Some(SharedMut::new(&mut out))]);
            out
        }
        let pool = ThreadPool::new(2);
        let (n, k) = (40, 96);
        for dtype in [DType::Q4_1, DType::Q4_0, DType::Q8_0] {
            let rb = dtype.row_bytes(k).unwrap();
            let mut wq = vec![0u8; n * rb];
            for j in 0..n {
                let row: Vec<f32> = (0..k)
                    .map(|c| (((j * 31 + c * 17) % 23) as f32 - 11.0) * 0.03)
                    .collect();
                let dst = &mut wq[j * rb..(j + 1) * rb];
                if quant::quantize_row(dtype, &row, dst).is_err() {
                    // Q4 formats have no activation quantizer: write valid blocks by hand.
                    for (b, blk) in dst.chunks_exact_mut(dtype.type_size()).enumerate() {
                        for (i, byte) in blk.iter_mut().enumerate() {
                            *byte = ((i * 7 + b * 13 + j) % 251) as u8;
                        }
                        blk[..2]
                            .copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
                        if dtype == DType::Q4_1 {
                            blk[2..4].copy_from_slice(
                                &half::f16::from_f32(-0.05).to_bits().to_le_bytes(),
                            );
                        }
                    }
                }
            }
            let w = QMatrix::new_row_major(dtype, n, k, wq).unwrap();
            for m in [1, 5, 8, 13] {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.11)
                    .collect();
                let a = quantize_acts(&pool, &x, m, k, w.activation_dtype()).unwrap();
                let (plain, vnni) = match dtype {
                    DType::Q4_1 => (
                        run::<Q4_1Q8_1>(&pool, &w, &a),
                        run::<Q4_1Q8_1Vnni>(&pool, &w, &a),
                    ),
                    DType::Q4_0 => (
                        run::<Q4_0Q8_0>(&pool, &w, &a),
                        run::<Q4_0Q8_0Vnni>(&pool, &w, &a),
                    ),
                    _ => (
                        run::<Q8_0Q8_0>(&pool, &w, &a),
                        run::<Q8_0Q8_0Vnni>(&pool, &w, &a),
                    ),
                };
                let same = plain
                    .iter()
                    .zip(&vnni)
                    .all(|(p, v)| p.to_bits() == v.to_bits());
                assert!(same, "{dtype} m={m}: VNNI differs from AVX2");
            }
        }
    }

    /// The AVX512-VNNI tile kernels must give the AVX2 ones' bits, at every chunk size (m up
    /// to 13 covers full and partial chunks of 8, m = 1 the decode path).
    #[test]
    fn avx512_vnni_tiles_are_bit_identical_to_avx2_tiles() {
        if !TileKernel::Avx512Vnni.available() {
            eprintln!("AVX512-VNNI+VL not available: nothing to compare");
            return;
        }
        let pool = ThreadPool::new(2);
        // An odd row count leaves one weight row outside the zmm pairs.
        for (n, dtype) in [40, 41]
            .into_iter()
            .flat_map(|n| [DType::Q4_1, DType::Q4_0, DType::Q8_0].map(|d| (n, d)))
        {
            let k = 96;
            let rb = dtype.row_bytes(k).unwrap();
            // Any bytes with small finite f16 scales are valid blocks of these formats.
            let mut wq: Vec<u8> = (0..n * rb)
                .map(|i| ((i * 7 + i / 97) % 251) as u8)
                .collect();
            for blk in wq.chunks_exact_mut(dtype.type_size()) {
                blk[..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
                if dtype == DType::Q4_1 {
                    blk[2..4].copy_from_slice(&half::f16::from_f32(-0.05).to_bits().to_le_bytes());
                }
            }
            let w = QMatrix::new_row_major(dtype, n, k, wq).unwrap();
            for m in 1..=13 {
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 7 % 19) as f32 - 9.0) * 0.11)
                    .collect();
                let a = quantize_acts(&pool, &x, m, k, w.activation_dtype()).unwrap();
                let mut plain = vec![f32::NAN; m * n];
                let mut vnni = vec![f32::NAN; m * n];
                matmul_tiled_with(TileKernel::Avx2, &pool, &w, &a, &mut plain).unwrap();
                matmul_tiled_with(TileKernel::Avx512Vnni, &pool, &w, &a, &mut vnni).unwrap();
                let same = plain
                    .iter()
                    .zip(&vnni)
                    .all(|(p, v)| p.to_bits() == v.to_bits());
                assert!(same, "{dtype} n={n} m={m}: AVX512-VNNI differs from AVX2");
            }
        }
    }

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
