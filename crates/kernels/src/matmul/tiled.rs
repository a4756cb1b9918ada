//! The row-major tile kernels' driver: plans of tiles of (weight rows) x (chunks of 8
//! activation rows) run by `tile_avx2` / `tile_avx512` kernels (one weight row, or a pair on
//! AVX512-VNNI, against a chunk), and the choice between their variants ([`TileKernel`]).

use oxllm_core::DType;

use super::{check_shapes, decode_tile_rows, execute, tile_avx2, tile_avx512, Plan};
use super::{QMatrix, QuantizedActs};
use crate::pool::{SharedMut, ThreadPool};
use crate::quant::{self, QuantError};
use crate::scratch::Scratch;

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
    if kernel.available() && !w.f32_activations && !w.is_panels() {
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
pub(super) fn tiled_plan_for<'a>(
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

/// A prepared register-blocked product: tiles of (`wt` weight rows) x (`at` chunks of 8
/// activation rows); inside a tile each chunk of activation rows stays in L1 while the tile's
/// weight rows (sized to fit L1 too) pass over it, one weight row at a time against the whole
/// chunk.
#[cfg(target_arch = "x86_64")]
pub(super) struct TiledPlan<'a> {
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
    pub(super) tiles: usize,
    pub(super) run: unsafe fn(&TiledPlan<'_>, usize, &SharedMut<f32>),
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
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
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
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let a: [*const u8; C] = std::array::from_fn(|c| rows[c]);
        let (mut o0, mut o1) = ([0f32; C], [0f32; C]);
        tile_avx512::row_pair_chunk_vnni512::<F, C>(nb, wp, &a, ad, asum, corr, &mut o0, &mut o1);
        for c in 0..C {
            out.slice((r0 + c) * n + j, 2)
                .copy_from_slice(&[o0[c], o1[c]]);
        }
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
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matmul::quantize_acts;

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
}
