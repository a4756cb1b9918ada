//! Plans and tiles of the panel GEMM (`panel`, `panel_avx512`): the activation terms are
//! computed once per call, then tiles of (whole panels of weight rows) x (activation rows) are
//! handed out like the other plans' tiles; inside a tile each chunk of up to 8 activation
//! rows stays in L1 while the tile's panels pass over it.

use super::panel::{act_terms, quantize_act16, PanelFormat, P};
use super::panel_avx512::{panel_chunk, wide_chunk, Chunk, WideChunk, CH};
use super::{decode_tile_rows, QMatrix, QuantizedActs};
use crate::pool::{SharedMut, ThreadPool};
use crate::quant::QK;
use crate::scratch::Scratch;

pub(super) struct PanelPlan<'a> {
    f: PanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    /// Activation terms, `[row][block]`.
    ad: Scratch<f32>,
    sa: Scratch<f32>,
    corr: Scratch<i32>,
    /// 16-bit activation pairs `[row][cols / 2]` (wide format only).
    pairs: Scratch<i32>,
    nb: usize,
    /// Weight rows (a multiple of [`P`]) and activation rows per tile.
    wt: usize,
    at: usize,
    n_wt: usize,
    pub(super) tiles: usize,
    run: unsafe fn(&PanelPlan<'_>, usize, usize, usize, &SharedMut<f32>),
}

/// The plan of `w` (a panel matrix of format `f`) against `acts`; the CPU runs the panel
/// kernel (checked when `w` was packed).
pub(super) fn panel_plan<'a>(
    pool: &ThreadPool,
    f: PanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
) -> PanelPlan<'a> {
    let nb = w.cols / QK;
    let (m, n) = (acts.rows, w.rows);
    let a_bytes = if f.group == 2 { 4 * QK } else { f.a_bytes };
    assert_eq!(acts.row_bytes, nb * a_bytes, "activation format");
    let wide = f.group == 2;
    let mut ad = Scratch::<f32>::take(m * nb);
    let mut sa = Scratch::<f32>::take(if wide { 0 } else { m * nb });
    let mut corr = Scratch::<i32>::take(if wide { 0 } else { m * nb });
    let half = w.cols / 2;
    let mut pairs = Scratch::<i32>::take(if wide { m * half } else { 0 });
    for i in (0..m).filter(|_| wide) {
        let (p, d) = (&mut pairs[i * half..][..half], &mut ad[i * nb..][..nb]);
        quantize_act16(acts.row(i), p, d);
    }
    for i in (0..m).filter(|_| !wide) {
        let span = i * nb..(i + 1) * nb;
        act_terms(
            &f,
            acts.row(i),
            nb,
            &mut ad[span.clone()],
            &mut sa[span.clone()],
            &mut corr[span],
        );
    }
    let (wt, at) = if m <= 2 * CH {
        (decode_tile_rows(n, pool.n_threads()), m.max(1))
    } else {
        // About 16 KiB of panels per tile against 64 activation rows.
        let panel_bytes = nb * f.record_bytes();
        ((16 * 1024 / panel_bytes.max(1)).clamp(1, 4) * P, 8 * CH)
    };
    let n_wt = n.div_ceil(wt);
    let tiles = if m == 0 { 0 } else { n_wt * m.div_ceil(at) };
    let run = match (f.has_min, f.qs_bytes == 256, f.bias != 0) {
        _ if wide => tile_wide,
        (true, true, false) => tile::<true, true, false>,
        (false, true, true) => tile::<false, true, true>,
        _ => tile::<false, false, true>,
    };
    PanelPlan {
        f,
        w,
        acts,
        ad,
        sa,
        corr,
        pairs,
        nb,
        wt,
        at,
        n_wt,
        tiles,
        run: run as unsafe fn(&PanelPlan<'_>, usize, usize, usize, &SharedMut<f32>),
    }
}

impl PanelPlan<'_> {
    /// Computes tile `t` (`t < tiles`) into `out`.
    pub(super) fn run_tile(&self, t: usize, out: &SharedMut<f32>) {
        let (wi, ai) = (t % self.n_wt, t / self.n_wt);
        let m = self.acts.rows;
        for c0 in (ai * self.at..((ai + 1) * self.at).min(m)).step_by(CH) {
            let rows = ((ai + 1) * self.at).min(m).min(c0 + CH) - c0;
            // SAFETY: the plan exists only where `panel_avx512::available()` (the matrix was
            // packed under that check); tiles write disjoint outputs.
            unsafe { (self.run)(self, wi, c0, rows, out) };
        }
    }
}

/// Weight tile `wi` against activation rows `c0..c0 + rows` (`rows <= CH`).
///
/// # Safety
/// The CPU runs the panel kernel; `out` is the plan's output (`m * n` floats).
unsafe fn tile<const MIN: bool, const NIB: bool, const BIAS: bool>(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    rows: usize,
    out: &SharedMut<f32>,
) {
    match rows {
        1 => chunk::<1, MIN, NIB, BIAS>(p, wi, c0, out),
        2 => chunk::<2, MIN, NIB, BIAS>(p, wi, c0, out),
        3 => chunk::<3, MIN, NIB, BIAS>(p, wi, c0, out),
        4 => chunk::<4, MIN, NIB, BIAS>(p, wi, c0, out),
        5 => chunk::<5, MIN, NIB, BIAS>(p, wi, c0, out),
        6 => chunk::<6, MIN, NIB, BIAS>(p, wi, c0, out),
        7 => chunk::<7, MIN, NIB, BIAS>(p, wi, c0, out),
        8 => chunk::<8, MIN, NIB, BIAS>(p, wi, c0, out),
        9 => chunk::<9, MIN, NIB, BIAS>(p, wi, c0, out),
        10 => chunk::<10, MIN, NIB, BIAS>(p, wi, c0, out),
        11 => chunk::<11, MIN, NIB, BIAS>(p, wi, c0, out),
        12 => chunk::<12, MIN, NIB, BIAS>(p, wi, c0, out),
        13 => chunk::<13, MIN, NIB, BIAS>(p, wi, c0, out),
        14 => chunk::<14, MIN, NIB, BIAS>(p, wi, c0, out),
        15 => chunk::<15, MIN, NIB, BIAS>(p, wi, c0, out),
        _ => chunk::<16, MIN, NIB, BIAS>(p, wi, c0, out),
    }
}

#[inline(always)]
unsafe fn chunk<const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    out: &SharedMut<f32>,
) {
    let (n, nb) = (p.w.rows, p.nb);
    let rec = p.f.record_bytes();
    let j1 = ((wi + 1) * p.wt).min(n);
    let ch = Chunk::<C> {
        acts: std::array::from_fn(|c| p.acts.row(c0 + c).as_ptr()),
        ad: std::array::from_fn(|c| p.ad[(c0 + c) * nb..].as_ptr()),
        sa: std::array::from_fn(|c| p.sa[(c0 + c) * nb..].as_ptr()),
        corr: std::array::from_fn(|c| p.corr[(c0 + c) * nb..].as_ptr()),
        // SAFETY: row starts of the output; this tile writes only its own columns.
        out: std::array::from_fn(|c| unsafe { out.ptr_at((c0 + c) * n) }),
    };
    for j in (wi * p.wt..j1).step_by(P) {
        let panel = p.w.data[(j / P) * nb * rec..].as_ptr();
        let (scale_bytes, a) = (p.f.scale_bytes(), (p.f.a_bytes, p.f.a_qs));
        panel_chunk::<C, MIN, NIB, BIAS>(nb, rec, scale_bytes, a.0, a.1, panel, &ch, lanes(n, j));
    }
}

/// Column `j` and the mask of its live lanes (the last panel may be partial).
fn lanes(n: usize, j: usize) -> (usize, u16) {
    let live = (n - j).min(P);
    (
        j,
        if live == P {
            u16::MAX
        } else {
            (1u16 << live) - 1
        },
    )
}

/// [`tile`] for the wide (16-bit activation) format.
///
/// # Safety
/// As [`tile`].
unsafe fn tile_wide(p: &PanelPlan<'_>, wi: usize, c0: usize, rows: usize, out: &SharedMut<f32>) {
    match rows {
        1 => chunk_wide::<1>(p, wi, c0, out),
        2 => chunk_wide::<2>(p, wi, c0, out),
        3 => chunk_wide::<3>(p, wi, c0, out),
        4 => chunk_wide::<4>(p, wi, c0, out),
        5 => chunk_wide::<5>(p, wi, c0, out),
        6 => chunk_wide::<6>(p, wi, c0, out),
        7 => chunk_wide::<7>(p, wi, c0, out),
        8 => chunk_wide::<8>(p, wi, c0, out),
        9 => chunk_wide::<9>(p, wi, c0, out),
        10 => chunk_wide::<10>(p, wi, c0, out),
        11 => chunk_wide::<11>(p, wi, c0, out),
        12 => chunk_wide::<12>(p, wi, c0, out),
        13 => chunk_wide::<13>(p, wi, c0, out),
        14 => chunk_wide::<14>(p, wi, c0, out),
        15 => chunk_wide::<15>(p, wi, c0, out),
        _ => chunk_wide::<16>(p, wi, c0, out),
    }
}

#[inline(always)]
unsafe fn chunk_wide<const C: usize>(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    out: &SharedMut<f32>,
) {
    let (n, nb) = (p.w.rows, p.nb);
    let rec = p.f.record_bytes();
    let half = p.w.cols / 2;
    let j1 = ((wi + 1) * p.wt).min(n);
    let ch = WideChunk::<C> {
        pairs: std::array::from_fn(|c| p.pairs[(c0 + c) * half..].as_ptr()),
        ad: std::array::from_fn(|c| p.ad[(c0 + c) * nb..].as_ptr()),
        // SAFETY: row starts of the output; this tile writes only its own columns.
        out: std::array::from_fn(|c| unsafe { out.ptr_at((c0 + c) * n) }),
    };
    for j in (wi * p.wt..j1).step_by(P) {
        let panel = p.w.data[(j / P) * nb * rec..].as_ptr();
        wide_chunk::<C>(nb, rec, panel, &ch, lanes(n, j));
    }
}
