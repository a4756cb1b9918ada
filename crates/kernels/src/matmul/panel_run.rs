//! Plans and tiles of the panel GEMM (`panel`; kernels `panel_avx512`, `panel_avxvnni`,
//! `panel_avx2`): the activations are packed chunk-major once per call, then tiles of (whole
//! pairs of panels of weight rows) x (activation rows) are handed out like the other plans'
//! tiles; inside a tile each pair of panels (AVX512-VNNI), each panel (AVX-VNNI) or each half
//! panel (AVX2) passes over the tile's rows in kernel calls of up to 8 rows (each family's
//! `CALL_ROWS`, `WIDE_CALL_ROWS`), staying in L1 between calls. The two ymm families share
//! one tiling ([`tile_ymm`]); [`Ymm`] names their kernels.

use super::panel::{pack_act16, pack_acts, PanelFormat, PanelKernel, P};
use super::panel_avx512::{panel_pair, wide_pair, Chunk, WideChunk, CH, PAIR_ROWS};
use super::{QMatrix, QuantizedActs};
use crate::pool::{SharedMut, ThreadPool};
use crate::quant::QK;
use crate::scratch::Scratch;

pub(super) struct PanelPlan<'a> {
    f: PanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    /// The activations in chunks of [`CH`] rows (`panel::pack_acts`): quants, scales and
    /// sums, bias corrections.
    qs: Scratch<u8>,
    terms: Scratch<f32>,
    corr: Scratch<i32>,
    /// Wide format only: 16-bit activation pairs and scales (`panel::pack_act16`).
    pairs: Scratch<i32>,
    ad: Scratch<f32>,
    nb: usize,
    /// Weight rows (a multiple of [`P`]) and activation rows per tile.
    wt: usize,
    at: usize,
    n_wt: usize,
    pub(super) tiles: usize,
    run: unsafe fn(&PanelPlan<'_>, usize, usize, usize, &SharedMut<f32>),
}

/// The plan of `w` (a panel matrix of format `f`) against `acts`, run by `kernel`, which the
/// CPU must have (`PanelKernel::available`).
pub(super) fn panel_plan<'a>(
    pool: &ThreadPool,
    f: PanelFormat,
    w: &'a QMatrix,
    acts: &'a QuantizedActs,
    kernel: PanelKernel,
) -> PanelPlan<'a> {
    assert!(
        kernel.available(),
        "{kernel:?} panels on a CPU without them"
    );
    let nb = w.cols / QK;
    let (m, n) = (acts.rows, w.rows);
    let a_bytes = if f.group == 2 { 4 * QK } else { f.a_bytes };
    assert_eq!(acts.row_bytes, nb * a_bytes, "activation format");
    let wide = f.group == 2;
    // Whole chunks: a kernel reads only its own rows' slots.
    let slots = m.div_ceil(CH) * CH * nb;
    let (narrow, biased) = (if wide { 0 } else { slots }, !wide && f.bias != 0);
    let mut qs = Scratch::<u8>::take_dirty(narrow * QK);
    let mut terms = Scratch::<f32>::take_dirty(2 * narrow);
    let mut corr = Scratch::<i32>::take_dirty(if biased { slots } else { 0 });
    let mut pairs = Scratch::<i32>::take_dirty(if wide { slots * QK / 2 } else { 0 });
    let mut ad = Scratch::<f32>::take_dirty(if wide { slots } else { 0 });
    if wide {
        pack_act16(m, nb, CH, |i| acts.row(i), &mut pairs, &mut ad);
    } else {
        let bufs = (&mut qs[..], &mut terms[..], &mut corr[..]);
        pack_acts(&f, m, nb, CH, |i| acts.row(i), bufs);
    }
    let (wt, at) = if m <= 2 * CH {
        // Whole pairs of panels (`tile`); about 4 tiles per thread (a tile's first pair comes
        // from memory unannounced, later ones were asked for by the pair before), at most 512
        // rows each.
        let per_tile = n.div_ceil(2 * P).div_ceil(4 * pool.n_threads().max(1));
        ((per_tile * 2 * P).min(512), m.max(1))
    } else {
        // About 16 KiB of panels per tile against 128 activation rows.
        let pair_bytes = 2 * nb * f.record_bytes();
        ((16 * 1024 / pair_bytes.max(1)).clamp(1, 2) * 2 * P, 8 * CH)
    };
    let n_wt = n.div_ceil(wt);
    let tiles = if m == 0 { 0 } else { n_wt * m.div_ceil(at) };
    type Run = unsafe fn(&PanelPlan<'_>, usize, usize, usize, &SharedMut<f32>);
    let run: Run = match (kernel, f.has_min, f.qs_bytes == 256, f.bias != 0) {
        (PanelKernel::Avx512Vnni, ..) if wide => tile_wide,
        (PanelKernel::Avx512Vnni, true, true, false) => tile::<true, true, false>,
        (PanelKernel::Avx512Vnni, false, true, true) => tile::<false, true, true>,
        (PanelKernel::Avx512Vnni, ..) => tile::<false, false, true>,
        (PanelKernel::AvxVnni, ..) if wide => tile_wide_ymm::<AvxVnniYmm>,
        (PanelKernel::AvxVnni, true, true, false) => tile_ymm::<AvxVnniYmm, true, true, false>,
        (PanelKernel::AvxVnni, false, true, true) => tile_ymm::<AvxVnniYmm, false, true, true>,
        (PanelKernel::AvxVnni, ..) => tile_ymm::<AvxVnniYmm, false, false, true>,
        (PanelKernel::Avx2, ..) if wide => tile_wide_ymm::<Avx2Ymm>,
        (PanelKernel::Avx2, true, true, false) => tile_ymm::<Avx2Ymm, true, true, false>,
        (PanelKernel::Avx2, false, true, true) => tile_ymm::<Avx2Ymm, false, true, true>,
        (PanelKernel::Avx2, ..) => tile_ymm::<Avx2Ymm, false, false, true>,
    };
    PanelPlan {
        f,
        w,
        acts,
        qs,
        terms,
        corr,
        pairs,
        ad,
        nb,
        wt,
        at,
        n_wt,
        tiles,
        run,
    }
}

impl PanelPlan<'_> {
    /// Computes tile `t` (`t < tiles`) into `out`.
    pub(super) fn run_tile(&self, t: usize, out: &SharedMut<f32>) {
        let (wi, ai) = (t % self.n_wt, t / self.n_wt);
        let m = self.acts.rows;
        for c0 in (ai * self.at..((ai + 1) * self.at).min(m)).step_by(CH) {
            let rows = ((ai + 1) * self.at).min(m).min(c0 + CH) - c0;
            // SAFETY: the plan exists only where its kernel is available (asserted in
            // `panel_plan`); tiles write disjoint outputs.
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
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        for_each_call(p, wi, c0, rows, |at, rest| match rest {
            1 => pair::<1, MIN, NIB, BIAS>(p, at, out),
            2 => pair::<2, MIN, NIB, BIAS>(p, at, out),
            3 => pair::<3, MIN, NIB, BIAS>(p, at, out),
            4 => pair::<4, MIN, NIB, BIAS>(p, at, out),
            5 => pair::<5, MIN, NIB, BIAS>(p, at, out),
            6 => pair::<6, MIN, NIB, BIAS>(p, at, out),
            7 => pair::<7, MIN, NIB, BIAS>(p, at, out),
            _ => pair::<8, MIN, NIB, BIAS>(p, at, out),
        });
    }
}

/// Both panels' first records of the pair starting at weight row `j`. An odd last panel is
/// paired with itself.
#[inline(always)]
fn pair_records(p: &PanelPlan<'_>, j: usize) -> [*const u8; 2] {
    let (n, rec) = (p.w.rows, p.f.record_bytes());
    let second = if j + P < n { j + P } else { j };
    [j, second].map(|r| p.w.data[(r / P) * p.nb * rec..].as_ptr())
}

/// Where the outputs of the pair starting at weight row `j` go: (columns, live lanes); the
/// second copy of an odd last panel writes no lane.
#[inline(always)]
fn pair_outputs(n: usize, j: usize) -> ([usize; 2], [u16; 2]) {
    let second = if j + P < n { j + P } else { j };
    let (a, b) = (lanes(n, j), lanes(n, second));
    ([a.0, b.0], [a.1, if second == j { 0 } else { b.1 }])
}

/// Runs `call` for each kernel call of weight tile `wi` against rows `c0..c0 + rows`, with
/// the rows left from the call's first: each pair of panels passes over the rows
/// [`PAIR_ROWS`] at a time, and its last pass asks for the next pair's weights (the other
/// passes find this pair in L1; the last one's arithmetic then overlaps the next pair's trip
/// from memory).
#[inline(always)]
fn for_each_call(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    rows: usize,
    mut call: impl FnMut(PairAt, usize),
) {
    let n = p.w.rows;
    let end = ((wi + 1) * p.wt).min(n);
    let mut j = wi * p.wt;
    while j < end {
        let (panels, cols) = (pair_records(p, j), pair_outputs(n, j));
        let mut r0 = 0;
        while r0 < rows {
            let ahead = if r0 + PAIR_ROWS >= rows && j + 2 * P < end {
                pair_records(p, j + 2 * P)
            } else {
                [std::ptr::null(); 2]
            };
            call((panels, ahead, c0, r0, cols), rows - r0);
            r0 += PAIR_ROWS;
        }
        j += 2 * P;
    }
}

/// A kernel call's pair of panels, the pair whose weights it asks for (null: none), the chunk
/// start and the first row in it, and where the outputs go (columns, live lanes).
type PairAt = (
    [*const u8; 2],
    [*const u8; 2],
    usize,
    usize,
    ([usize; 2], [u16; 2]),
);

/// The chunk pointers of rows `c0 + r0..` (`c0` starts a chunk).
fn chunk_at<const C: usize>(
    p: &PanelPlan<'_>,
    c0: usize,
    r0: usize,
    out: &SharedMut<f32>,
) -> Chunk<C> {
    // Chunk-major slots (`panel::pack_acts`): rows of a block are consecutive.
    let (n, slot) = (p.w.rows, c0 * p.nb + r0);
    Chunk::<C> {
        qs: p.qs[slot * QK..].as_ptr(),
        terms: p.terms[2 * c0 * p.nb + r0..].as_ptr(),
        corr: p.corr.get(slot..).unwrap_or_default().as_ptr(),
        // Row starts of the output: this tile writes only its own columns of them.
        out: std::array::from_fn(|c| out.ptr_at((c0 + r0 + c) * n)),
    }
}

/// Rows `c0 + r0..c0 + r0 + C` against a pair of panels.
#[inline(always)]
unsafe fn pair<const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
    p: &PanelPlan<'_>,
    (panels, ahead, c0, r0, cols): PairAt,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let ch = chunk_at::<C>(p, c0, r0, out);
        let rec = p.f.record_bytes();
        panel_pair::<C, MIN, NIB, BIAS>(p.nb, rec, p.f.scale_bytes(), [panels, ahead], &ch, cols);
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

/// [`tile`] for the wide (16-bit activation) format: pairs of panels against the chunk in
/// calls of at most [`PAIR_ROWS`] rows (the pair stays in L1 between them).
///
/// # Safety
/// As [`tile`].
unsafe fn tile_wide(p: &PanelPlan<'_>, wi: usize, c0: usize, rows: usize, out: &SharedMut<f32>) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        for_each_call(p, wi, c0, rows, |at, rest| match rest {
            1 => chunk_wide::<1>(p, at, out),
            2 => chunk_wide::<2>(p, at, out),
            3 => chunk_wide::<3>(p, at, out),
            4 => chunk_wide::<4>(p, at, out),
            5 => chunk_wide::<5>(p, at, out),
            6 => chunk_wide::<6>(p, at, out),
            7 => chunk_wide::<7>(p, at, out),
            _ => chunk_wide::<8>(p, at, out),
        });
    }
}

/// Rows `c0 + r0..c0 + r0 + C` (`c0` starts a chunk) against a pair of wide panels.
#[inline(always)]
unsafe fn chunk_wide<const C: usize>(
    p: &PanelPlan<'_>,
    (panels, ahead, c0, r0, cols): PairAt,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let ch = wide_chunk_at::<C>(p, c0, r0, out);
        wide_pair::<C>(p.nb, p.f.record_bytes(), [panels, ahead], &ch, cols);
    }
}

/// The wide chunk pointers of rows `c0 + r0..` (`c0` starts a chunk).
fn wide_chunk_at<const C: usize>(
    p: &PanelPlan<'_>,
    c0: usize,
    r0: usize,
    out: &SharedMut<f32>,
) -> WideChunk<C> {
    let (n, slot) = (p.w.rows, c0 * p.nb + r0);
    WideChunk::<C> {
        pairs: p.pairs[slot * QK / 2..].as_ptr(),
        ad: p.ad[slot..].as_ptr(),
        // Row starts of the output: this tile writes only its own columns of them.
        out: std::array::from_fn(|c| out.ptr_at((c0 + r0 + c) * n)),
    }
}

/// A family of ymm panel kernels (AVX2: half a panel per call; AVX-VNNI: a whole panel, both
/// halves): the tiling of [`tile_ymm`] is the same for both, only the calls differ.
trait Ymm {
    /// Activation rows per call of [`Ymm::narrow`] and of [`Ymm::wide`] (at most 8).
    const ROWS: usize;
    const WIDE_ROWS: usize;
    /// Whether a call computes both halves of the panel (`h` is then 0, `dst` 16 lanes).
    const WHOLE: bool;

    /// The family's kernel for 8-bit activations: rows of `ch` against half `h` of a panel
    /// (`at`: panel, `h`, panel to ask for), or the whole panel where [`Ymm::WHOLE`] (`h` 0);
    /// `dst`: the first output column and the live lanes from it.
    ///
    /// # Safety
    /// The family's kernel contract (`panel_avx2`, `panel_avxvnni`).
    unsafe fn narrow<const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
        p: &PanelPlan<'_>,
        at: (*const u8, usize, *const u8),
        ch: &Chunk<C>,
        dst: (usize, u16),
    );

    /// The family's wide kernel (16-bit activations), called like [`Ymm::narrow`].
    ///
    /// # Safety
    /// As [`Ymm::narrow`].
    unsafe fn wide<const C: usize>(
        p: &PanelPlan<'_>,
        at: (*const u8, usize, *const u8),
        ch: &WideChunk<C>,
        dst: (usize, u16),
    );
}

/// `vpmaddubsw` + `vpmaddwd` (`panel_avx2`).
struct Avx2Ymm;

/// VEX `vpdpbusd` / `vpdpwssd` (`panel_avxvnni`).
struct AvxVnniYmm;

impl Ymm for Avx2Ymm {
    const ROWS: usize = super::panel_avx2::CALL_ROWS;
    const WIDE_ROWS: usize = super::panel_avx2::WIDE_CALL_ROWS;
    const WHOLE: bool = false;

    #[inline(always)]
    unsafe fn narrow<const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
        p: &PanelPlan<'_>,
        at: (*const u8, usize, *const u8),
        ch: &Chunk<C>,
        (col, bits): (usize, u16),
    ) {
        let (rec, sb) = (p.f.record_bytes(), p.f.scale_bytes());
        // SAFETY: the caller upholds the kernel's contract.
        unsafe {
            super::panel_avx2::panel_half::<C, MIN, NIB, BIAS>(
                p.nb,
                rec,
                sb,
                at,
                ch,
                (col, bits as u8),
            )
        }
    }

    #[inline(always)]
    unsafe fn wide<const C: usize>(
        p: &PanelPlan<'_>,
        at: (*const u8, usize, *const u8),
        ch: &WideChunk<C>,
        (col, bits): (usize, u16),
    ) {
        let rec = p.f.record_bytes();
        // SAFETY: the caller upholds the kernel's contract.
        unsafe { super::panel_avx2::wide_half::<C>(p.nb, rec, at, ch, (col, bits as u8)) }
    }
}

impl Ymm for AvxVnniYmm {
    const ROWS: usize = super::panel_avxvnni::CALL_ROWS;
    const WIDE_ROWS: usize = super::panel_avxvnni::WIDE_CALL_ROWS;
    const WHOLE: bool = true;

    #[inline(always)]
    unsafe fn narrow<const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
        p: &PanelPlan<'_>,
        (panel, _, ahead): (*const u8, usize, *const u8),
        ch: &Chunk<C>,
        dst: (usize, u16),
    ) {
        let (rec, sb) = (p.f.record_bytes(), p.f.scale_bytes());
        // SAFETY: the caller upholds the kernel's contract.
        unsafe {
            super::panel_avxvnni::panel_whole::<C, MIN, NIB, BIAS>(
                p.nb,
                rec,
                sb,
                (panel, ahead),
                ch,
                dst,
            )
        }
    }

    #[inline(always)]
    unsafe fn wide<const C: usize>(
        p: &PanelPlan<'_>,
        (panel, _, ahead): (*const u8, usize, *const u8),
        ch: &WideChunk<C>,
        dst: (usize, u16),
    ) {
        let rec = p.f.record_bytes();
        // SAFETY: the caller upholds the kernel's contract.
        unsafe { super::panel_avxvnni::wide_whole::<C>(p.nb, rec, (panel, ahead), ch, dst) }
    }
}

/// A call of a ymm panel kernel: the panel's first record, the half (0 for a whole panel), the
/// panel whose weights it asks for (null: none), the chunk start and the first row in it, and
/// where the outputs go (column of the call's first lane, its live lanes).
type YmmAt = (*const u8, usize, *const u8, usize, usize, (usize, u16));

/// Runs `call` for each ymm kernel call of weight tile `wi` against rows `c0..c0 + rows`,
/// with the rows left from the call's first: each half panel (each panel where `whole`) passes
/// over the rows `step` at a time ([`Ymm::ROWS`], [`Ymm::WIDE_ROWS`]); the first call of a
/// panel asks for the next panel's weights.
#[inline(always)]
fn for_each_ymm_call(
    p: &PanelPlan<'_>,
    (wi, c0, rows, step, whole): (usize, usize, usize, usize, bool),
    mut call: impl FnMut(YmmAt, usize),
) {
    let (n, rec) = (p.w.rows, p.f.record_bytes());
    let end = ((wi + 1) * p.wt).min(n);
    let panel_at = |j: usize| p.w.data[(j / P) * p.nb * rec..].as_ptr();
    let mut j = wi * p.wt;
    while j < end {
        let next = if j + P < end {
            panel_at(j + P)
        } else {
            std::ptr::null()
        };
        let (col, mask) = lanes(n, j);
        for h in 0..if whole { 1 } else { 2 } {
            let bits = if whole {
                mask
            } else {
                (mask >> (8 * h)) & 0xFF
            };
            if bits == 0 {
                continue;
            }
            let mut r0 = 0;
            while r0 < rows {
                let ahead = if h == 0 && r0 == 0 {
                    next
                } else {
                    std::ptr::null()
                };
                call(
                    (panel_at(j), h, ahead, c0, r0, (col + 8 * h, bits)),
                    rows - r0,
                );
                r0 += step;
            }
        }
        j += P;
    }
}

/// [`tile`] on a ymm family.
///
/// # Safety
/// As [`tile`], with `K`'s kernel contract.
unsafe fn tile_ymm<K: Ymm, const MIN: bool, const NIB: bool, const BIAS: bool>(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    rows: usize,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        for_each_ymm_call(
            p,
            (wi, c0, rows, K::ROWS, K::WHOLE),
            |at, rest| match rest.min(K::ROWS) {
                1 => half::<K, 1, MIN, NIB, BIAS>(p, at, out),
                2 => half::<K, 2, MIN, NIB, BIAS>(p, at, out),
                3 => half::<K, 3, MIN, NIB, BIAS>(p, at, out),
                4 => half::<K, 4, MIN, NIB, BIAS>(p, at, out),
                5 => half::<K, 5, MIN, NIB, BIAS>(p, at, out),
                6 => half::<K, 6, MIN, NIB, BIAS>(p, at, out),
                7 => half::<K, 7, MIN, NIB, BIAS>(p, at, out),
                _ => half::<K, 8, MIN, NIB, BIAS>(p, at, out),
            },
        );
    }
}

/// Rows `c0 + r0..c0 + r0 + C` against half a panel (a whole one where `K::WHOLE`).
#[inline(always)]
unsafe fn half<K: Ymm, const C: usize, const MIN: bool, const NIB: bool, const BIAS: bool>(
    p: &PanelPlan<'_>,
    (panel, h, ahead, c0, r0, dst): YmmAt,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let ch = chunk_at::<C>(p, c0, r0, out);
        K::narrow::<C, MIN, NIB, BIAS>(p, (panel, h, ahead), &ch, dst);
    }
}

/// [`tile_wide`] on a ymm family.
///
/// # Safety
/// As [`tile`], with `K`'s kernel contract.
unsafe fn tile_wide_ymm<K: Ymm>(
    p: &PanelPlan<'_>,
    wi: usize,
    c0: usize,
    rows: usize,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        for_each_ymm_call(
            p,
            (wi, c0, rows, K::WIDE_ROWS, K::WHOLE),
            |at, rest| match rest.min(K::WIDE_ROWS) {
                1 => half_wide::<K, 1>(p, at, out),
                2 => half_wide::<K, 2>(p, at, out),
                3 => half_wide::<K, 3>(p, at, out),
                4 => half_wide::<K, 4>(p, at, out),
                5 => half_wide::<K, 5>(p, at, out),
                6 => half_wide::<K, 6>(p, at, out),
                7 => half_wide::<K, 7>(p, at, out),
                _ => half_wide::<K, 8>(p, at, out),
            },
        );
    }
}

/// Rows `c0 + r0..c0 + r0 + C` against half a wide panel (a whole one where `K::WHOLE`).
#[inline(always)]
unsafe fn half_wide<K: Ymm, const C: usize>(
    p: &PanelPlan<'_>,
    (panel, h, ahead, c0, r0, dst): YmmAt,
    out: &SharedMut<f32>,
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let ch = wide_chunk_at::<C>(p, c0, r0, out);
        K::wide::<C>(p, (panel, h, ahead), &ch, dst);
    }
}
