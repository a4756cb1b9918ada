//! Plans and tiles of the k-quant panel GEMM (`kpanel`; kernels `kpanel_avx2`, where the CPU
//! has AVX-VNNI `kpanel_avxvnni`, and where it has AVX512-VNNI `kpanel_avx512`, all with the
//! reference's bits): tiles of (whole panels of weight rows) x (activation rows) are handed
//! out like the other plans' tiles; inside a tile each panel (AVX2 and AVX-VNNI: each half
//! panel) passes over the tile's rows in kernel calls of up to the kernel's `CALL_ROWS`,
//! staying in L1 between calls. Activations are read in place (Q8_K rows).

use super::kpanel::{KPanelFormat, Q4K, Q5K, Q6K};
use super::kpanel_avx2::{kpanel_half, CALL_ROWS};
use super::kpanel_avx512::{kpanel_full, CALL_ROWS as FULL_CALL_ROWS};
use super::kpanel_avxvnni::{kpanel_half_vnni, CALL_ROWS as VNNI_CALL_ROWS};
use super::panel::{PanelKernel, P};
use super::{QMatrix, QuantizedActs};
use crate::pool::{SharedMut, ThreadPool};
use crate::quant::{self, QK_K};

pub(super) struct KPanelPlan<'a> {
    f: &'static KPanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    nb: usize,
    /// Weight rows (a multiple of [`P`]) and activation rows per tile.
    wt: usize,
    at: usize,
    n_wt: usize,
    pub(super) tiles: usize,
    run: unsafe fn(&KPanelPlan<'_>, usize, usize, usize, &SharedMut<f32>),
}

/// Whether this CPU runs a k-panel kernel.
pub(super) fn available() -> bool {
    quant::detected_isa() == quant::Isa::Avx2
}

/// The k-panel kernel family `matmul` runs on this CPU: AVX512-VNNI where it may, else
/// AVX-VNNI, else AVX2.
pub(super) fn best() -> PanelKernel {
    [PanelKernel::Avx512Vnni, PanelKernel::AvxVnni]
        .into_iter()
        .find(|k| k.available())
        .unwrap_or(PanelKernel::Avx2)
}

/// The plan of `w` (a k-panel matrix of format `f`) against `acts` (Q8_K rows) on `kernel`,
/// which the CPU must run.
pub(super) fn kpanel_plan<'a>(
    pool: &ThreadPool,
    f: &'static KPanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    kernel: PanelKernel,
) -> KPanelPlan<'a> {
    assert!(
        available() && kernel.available(),
        "k-quant panels on a CPU without their kernel"
    );
    let nb = w.cols / QK_K;
    let (m, n) = (acts.rows, w.rows);
    assert_eq!(
        acts.row_bytes,
        nb * super::kpanel::A_BYTES,
        "activation format"
    );
    let (wt, at) = if m <= 32 {
        // About 4 tiles per thread, at most 512 weight rows each; every activation row.
        let per_tile = n.div_ceil(P).div_ceil(4 * pool.n_threads().max(1));
        ((per_tile * P).min(512), m.max(1))
    } else {
        // About 16 KiB of panels per tile against 128 activation rows.
        let panel_bytes = nb * f.record;
        ((16 * 1024 / panel_bytes.max(1)).clamp(1, 4) * P, 128)
    };
    let n_wt = n.div_ceil(wt);
    let tiles = if m == 0 { 0 } else { n_wt * m.div_ceil(at) };
    type Run = unsafe fn(&KPanelPlan<'_>, usize, usize, usize, &SharedMut<f32>);
    let run: Run = match (kernel, f.kind) {
        (PanelKernel::Avx2, Q4K) => tile::<Q4K, false>,
        (PanelKernel::Avx2, Q5K) => tile::<Q5K, false>,
        (PanelKernel::Avx2, _) => tile::<Q6K, false>,
        (PanelKernel::AvxVnni, Q4K) => tile::<Q4K, true>,
        (PanelKernel::AvxVnni, Q5K) => tile::<Q5K, true>,
        (PanelKernel::AvxVnni, _) => tile::<Q6K, true>,
        (PanelKernel::Avx512Vnni, Q4K) => tile_full::<Q4K>,
        (PanelKernel::Avx512Vnni, Q5K) => tile_full::<Q5K>,
        (PanelKernel::Avx512Vnni, _) => tile_full::<Q6K>,
    };
    KPanelPlan {
        f,
        w,
        acts,
        nb,
        wt,
        at,
        n_wt,
        tiles,
        run,
    }
}

impl KPanelPlan<'_> {
    /// Computes tile `t` (`t < tiles`) into `out`.
    pub(super) fn run_tile(&self, t: usize, out: &SharedMut<f32>) {
        let (wi, ai) = (t % self.n_wt, t / self.n_wt);
        let i0 = ai * self.at;
        let rows = ((ai + 1) * self.at).min(self.acts.rows) - i0;
        // SAFETY: the plan exists only where its kernel is available (asserted in
        // `kpanel_plan`); tiles write disjoint outputs.
        unsafe { (self.run)(self, wi, i0, rows, out) };
    }
}

/// Each panel of weight tile `wi`: its first row `j`, its pointer, the next panel of the tile
/// (null: none) and the mask of its live rows.
fn each_panel(
    p: &KPanelPlan<'_>,
    wi: usize,
    mut visit: impl FnMut(usize, *const u8, *const u8, u16),
) {
    let (n, rec) = (p.w.rows, p.f.record);
    let end = ((wi + 1) * p.wt).min(n);
    let panel_at = |j: usize| p.w.data[(j / P) * p.nb * rec..].as_ptr();
    let mut j = wi * p.wt;
    while j < end {
        let next = if j + P < end {
            panel_at(j + P)
        } else {
            std::ptr::null()
        };
        let live = (n - j).min(P);
        let mask: u16 = if live == P { u16::MAX } else { (1 << live) - 1 };
        visit(j, panel_at(j), next, mask);
        j += P;
    }
}

/// Weight tile `wi` against activation rows `i0..i0 + rows`: each half panel passes over the
/// rows [`CALL_ROWS`] (`VNNI`: [`VNNI_CALL_ROWS`]) at a time on the AVX2 (`VNNI`: AVX-VNNI)
/// kernel; the first call of a panel asks for the next panel's weights.
///
/// # Safety
/// The CPU runs the kernel; `out` is the plan's output (`m * n` floats).
unsafe fn tile<const K: u8, const VNNI: bool>(
    p: &KPanelPlan<'_>,
    wi: usize,
    i0: usize,
    rows: usize,
    out: &SharedMut<f32>,
) {
    each_panel(p, wi, |j, panel, next, mask| {
        for h in 0..2 {
            let bits = (mask >> (8 * h)) as u8;
            if bits == 0 {
                continue;
            }
            let per_call = if VNNI { VNNI_CALL_ROWS } else { CALL_ROWS };
            let mut r0 = 0;
            while r0 < rows {
                let ahead = if h == 0 && r0 == 0 {
                    next
                } else {
                    std::ptr::null()
                };
                let at = (panel, h, ahead);
                let dst = (j + 8 * h, bits);
                let first = i0 + r0;
                // SAFETY: this fn's contract (the CPU runs the kernel, `out` is the plan's).
                unsafe {
                    match (rows - r0).min(per_call) {
                        1 => call::<1, K, VNNI>(p, at, first, dst, out),
                        2 => call::<2, K, VNNI>(p, at, first, dst, out),
                        3 => call::<3, K, VNNI>(p, at, first, dst, out),
                        4 => call::<4, K, VNNI>(p, at, first, dst, out),
                        5 => call::<5, K, VNNI>(p, at, first, dst, out),
                        6 => call::<6, K, VNNI>(p, at, first, dst, out),
                        7 => call::<7, K, VNNI>(p, at, first, dst, out),
                        _ => call::<8, K, VNNI>(p, at, first, dst, out),
                    }
                }
                r0 += per_call;
            }
        }
    });
}

/// [`tile`] on the AVX512-VNNI kernel: each whole panel passes over the rows
/// [`FULL_CALL_ROWS`] at a time.
///
/// # Safety
/// The CPU runs the AVX512-VNNI kernel; `out` is the plan's output (`m * n` floats).
unsafe fn tile_full<const K: u8>(
    p: &KPanelPlan<'_>,
    wi: usize,
    i0: usize,
    rows: usize,
    out: &SharedMut<f32>,
) {
    each_panel(p, wi, |j, panel, next, mask| {
        let mut r0 = 0;
        while r0 < rows {
            let at = (panel, if r0 == 0 { next } else { std::ptr::null() });
            let (first, dst) = (i0 + r0, (j, mask));
            // SAFETY: this fn's contract (the CPU runs the kernel, `out` is the plan's).
            unsafe {
                match (rows - r0).min(FULL_CALL_ROWS) {
                    1 => call_full::<1, K>(p, at, first, dst, out),
                    2 => call_full::<2, K>(p, at, first, dst, out),
                    3 => call_full::<3, K>(p, at, first, dst, out),
                    4 => call_full::<4, K>(p, at, first, dst, out),
                    5 => call_full::<5, K>(p, at, first, dst, out),
                    6 => call_full::<6, K>(p, at, first, dst, out),
                    7 => call_full::<7, K>(p, at, first, dst, out),
                    _ => call_full::<8, K>(p, at, first, dst, out),
                }
            }
            r0 += FULL_CALL_ROWS;
        }
    });
}

/// Activation rows `first..first + C` against a whole panel (AVX512-VNNI).
#[inline(always)]
unsafe fn call_full<const C: usize, const K: u8>(
    p: &KPanelPlan<'_>,
    at: (*const u8, *const u8),
    first: usize,
    dst: (usize, u16),
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let n = p.w.rows;
        let acts: [*const u8; C] = std::array::from_fn(|c| p.acts.row(first + c).as_ptr());
        let outs: [*mut f32; C] = std::array::from_fn(|c| out.ptr_at((first + c) * n));
        kpanel_full::<C, K>(p.f, p.nb, at, &acts, &outs, dst);
    }
}

/// Activation rows `first..first + C` against half a panel (`VNNI`: on AVX-VNNI).
#[inline(always)]
unsafe fn call<const C: usize, const K: u8, const VNNI: bool>(
    p: &KPanelPlan<'_>,
    at: (*const u8, usize, *const u8),
    first: usize,
    dst: (usize, u8),
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let n = p.w.rows;
        let acts: [*const u8; C] = std::array::from_fn(|c| p.acts.row(first + c).as_ptr());
        // Row starts of the output: this tile writes only its own columns of them.
        let outs: [*mut f32; C] = std::array::from_fn(|c| out.ptr_at((first + c) * n));
        if VNNI {
            kpanel_half_vnni::<C, K>(p.f, p.nb, at, &acts, &outs, dst);
        } else {
            kpanel_half::<C, K>(p.f, p.nb, at, &acts, &outs, dst);
        }
    }
}
