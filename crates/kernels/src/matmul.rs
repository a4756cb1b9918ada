//! Matrix products `out = x · Wᵀ` of f32 activations with weights in any supported format:
//! the entry points and the dispatch of each product to a kernel family.
//!
//! Activations are quantized once per row into the dot partner format of the weight
//! (`acts`), and can be reused across several weights of the same format (Q, K and V share
//! one quantized input). Each product becomes a plan (panel kernels for matrices stored as
//! panels, row-major tile kernels, or one dot per pair of rows) whose tiles of weight rows are
//! handed out by an atomic counter so uneven threads balance; a tile of weight rows stays in
//! L1 while every activation row streams past it, which is what makes prefill compute-bound
//! instead of bandwidth-bound.
//!
//! Files: `matrix` (storage), `acts` (activation quantization), `pairwise` / `tiled` /
//! `panel_run` (plans of each kernel family), `tile_*` and `panel_*` (the SIMD kernels),
//! `reference` (the scalar cross-check).

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::pool::{SharedMut, ThreadPool};
use crate::quant::QuantError;

// Defined before the kernel modules, which use it (macros are scoped by text order).
/// Expands `$body` once for each row `$c` in `0..$n` (at most 16), `$c` a literal: per-row
/// values are then addressed at constant offsets and the accumulators stay in registers (as a
/// loop over rows, they lived on the stack: a load and a store per row and block).
macro_rules! each_row {
    ($n:expr, $c:ident => $body:block) => {
        each_row!(@ $n, $c, $body; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15)
    };
    (@ $n:expr, $c:ident, $body:block; $($i:literal)*) => {
        $( if $i < $n { let $c: usize = $i; $body } )*
    };
}

mod acts;
mod kpanel;
#[cfg(target_arch = "x86_64")]
mod kpanel_avx2;
#[cfg(target_arch = "x86_64")]
mod kpanel_avx512;
#[cfg(target_arch = "x86_64")]
mod kpanel_avxvnni;
#[cfg(target_arch = "x86_64")]
mod kpanel_run;
mod matrix;
mod pairwise;
mod panel;
#[cfg(target_arch = "x86_64")]
mod panel_avx2;
#[cfg(target_arch = "x86_64")]
mod panel_avx512;
#[cfg(target_arch = "x86_64")]
mod panel_avxvnni;
#[cfg(target_arch = "x86_64")]
mod panel_run;
mod reference;
#[cfg(target_arch = "x86_64")]
mod tile_avx2;
#[cfg(target_arch = "x86_64")]
mod tile_avx512;
mod tiled;

pub use acts::{quantize_acts, quantize_acts_into, QuantizedActs};
pub use matrix::{MatrixError, QMatrix, WeightLayout};
pub use panel::PanelKernel;
pub use reference::{matmul_reference, quantize_acts_reference};
pub use tiled::{matmul_tiled_with, TileKernel};

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
        let n = group.len();
        let mut plans: [Option<Plan<'_>>; MAX_MANY] = [const { None }; MAX_MANY];
        let mut outs: [Option<SharedMut<'_, f32>>; MAX_MANY] = [const { None }; MAX_MANY];
        for ((plan_slot, out_slot), (w, acts, out)) in
            plans.iter_mut().zip(outs.iter_mut()).zip(group.iter_mut())
        {
            let (w, acts): (&QMatrix, &QuantizedActs) = (w, acts);
            check_shapes(w, acts, out);
            *plan_slot = Some(plan(pool, w, acts, false)?);
            *out_slot = Some(SharedMut::new(out));
        }
        if compute {
            execute(pool, &plans[..n], &outs[..n]);
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

/// [`matmul`] of a matrix stored as panels, forced onto one panel kernel family (benches,
/// tests). Err where the CPU lacks the family or the matrix is not stored as panels.
#[doc(hidden)]
pub fn matmul_panels_with(
    kernel: PanelKernel,
    pool: &ThreadPool,
    w: &QMatrix,
    acts: &QuantizedActs,
    out: &mut [f32],
) -> Result<(), QuantError> {
    check_shapes(w, acts, out);
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(f)) = (kernel.available(), w.panels) {
        let plan = Plan::Panel(panel_run::panel_plan(pool, *f, w, acts, kernel));
        execute(pool, &[Some(plan)], &[Some(SharedMut::new(out))]);
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(f)) = (kernel.available(), w.kpanels) {
        let plan = Plan::KPanel(kpanel_run::kpanel_plan(pool, f, w, acts, kernel));
        execute(pool, &[Some(plan)], &[Some(SharedMut::new(out))]);
        return Ok(());
    }
    let _ = (kernel, pool);
    Err(QuantError::Unsupported(w.dtype))
}

/// How one product's tiles run.
enum Plan<'a> {
    #[cfg(target_arch = "x86_64")]
    Tiled(tiled::TiledPlan<'a>),
    #[cfg(target_arch = "x86_64")]
    Panel(panel_run::PanelPlan<'a>),
    #[cfg(target_arch = "x86_64")]
    KPanel(kpanel_run::KPanelPlan<'a>),
    Pairwise(pairwise::PairwisePlan<'a>),
}

fn plan<'a>(
    pool: &ThreadPool,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    force_pairwise: bool,
) -> Result<Plan<'a>, QuantError> {
    #[cfg(target_arch = "x86_64")]
    if let (false, Some(f), Some(k)) = (force_pairwise, w.panels, PanelKernel::best()) {
        return Ok(Plan::Panel(panel_run::panel_plan(pool, *f, w, acts, k)));
    }
    #[cfg(target_arch = "x86_64")]
    if let (false, Some(f), true) = (force_pairwise, w.kpanels, kpanel_run::available()) {
        let kernel = kpanel_run::best();
        return Ok(Plan::KPanel(kpanel_run::kpanel_plan(
            pool, f, w, acts, kernel,
        )));
    }
    #[cfg(target_arch = "x86_64")]
    if !force_pairwise && !w.f32_activations && !w.is_panels() {
        if let Some(p) = TileKernel::best().and_then(|k| tiled::tiled_plan_for(k, pool, w, acts)) {
            return Ok(Plan::Tiled(p));
        }
    }
    let _ = force_pairwise;
    Ok(Plan::Pairwise(pairwise::pairwise_plan(pool, w, acts)?))
}

impl Plan<'_> {
    fn tiles(&self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            Plan::Tiled(p) => p.tiles,
            #[cfg(target_arch = "x86_64")]
            Plan::Panel(p) => p.tiles,
            #[cfg(target_arch = "x86_64")]
            Plan::KPanel(p) => p.tiles,
            Plan::Pairwise(p) => p.tiles,
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
            #[cfg(target_arch = "x86_64")]
            Plan::KPanel(p) => p.run_tile(t, out),
            Plan::Pairwise(p) => p.run_tile(t, out),
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

/// Adds `bias` to every row of `out` (rows of `bias.len()`).
pub fn add_bias(out: &mut [f32], bias: &[f32]) {
    for row in out.chunks_exact_mut(bias.len()) {
        crate::ops::add_in_place(row, bias);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant;
    use oxllm_core::DType;

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
