//! K-quant weight panels: Q4_K, Q5_K and Q6_K matrices repacked at load so that one AVX2
//! register holds 4 quants of each of 8 weight rows (half a panel of [`P`] rows), and the
//! GEMM broadcasts each activation dword into all rows at once, with no horizontal sums.
//!
//! Layout: rows are grouped in panels of [`P`] (the last padded with zero rows); a panel is
//! `nb` records, one per 256-column super-block. In a record every per-row byte string of the
//! row-major block is interleaved by dwords: dword `m` of lane `r` sits at `(m * P + r) * 4`,
//! so the 32 bytes at `64 m + 32 h` are dword `m` of rows `8h..8h + 8`. Scales are unpacked to
//! one byte per (sub-block, lane) at `j * P + r`:
//! - Q4_K: `[d: 16 x f16][dmin: 16 x f16][sc: 8 x 16][mn: 8 x 16][qs: 32 dwords]` (2368 bytes,
//!   2.8% more than the file's 16 blocks: the 6-bit scales take a byte each);
//! - Q5_K: Q4_K's record then `[qh: 8 dwords]` (2880 bytes, +2.3%);
//! - Q6_K: `[d: 16 x f16][scales: 16 x 16][ql: 32 dwords][qh: 16 dwords]` (3360 bytes, as the
//!   file's).
//!
//! Arithmetic, the same for every output whatever the batch, and in the scalar reference
//! [`kpanel_dot_ref`] (bit-identical to the kernels, tested): per super-block `b` in order,
//! `acc = fma(f32(isum_b), dw_b * da_b, acc)` with `isum_b` the exact integer dot
//! `sum_e scale(e) * w(e) * a(e)` of the true quants (Q6_K: `q - 32`), then for Q4_K/Q5_K
//! `acc = fma(f32(imin_b), -(dmin_b * da_b), acc)` with `imin_b = sum_j mn_j * (a's sum over
//! sub-block j)` (Q8_K's `bsums`).

use oxllm_core::DType;

use super::panel::P;
use crate::quant::blocks::{k_scales_mins, QK_K};

/// Bytes of one Q8_K activation block and where its parts are.
pub(crate) const A_BYTES: usize = 292;
pub(crate) const A_QS: usize = 4;
pub(crate) const A_BSUMS: usize = 260;

/// Which k-quant a panel matrix holds (the kernels' const parameter).
pub(crate) const Q4K: u8 = 0;
pub(crate) const Q5K: u8 = 1;
pub(crate) const Q6K: u8 = 2;

/// The panel form of one k-quant format: record offsets of each part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KPanelFormat {
    pub dtype: DType,
    /// [`Q4K`], [`Q5K`] or [`Q6K`].
    pub kind: u8,
    /// Row-major block bytes.
    pub w_bytes: usize,
    pub d: usize,
    /// Q4_K/Q5_K only.
    pub dmin: usize,
    /// Scales (one byte per sub-block and lane; Q6_K: i8 per 16-element group).
    pub sc: usize,
    /// Q4_K/Q5_K only: 6-bit mins, one byte per sub-block and lane.
    pub mn: usize,
    /// Low quant bits (Q4_K/Q5_K `qs`, Q6_K `ql`), interleaved by dwords.
    pub qs: usize,
    /// High quant bits (Q5_K/Q6_K `qh`), interleaved by dwords.
    pub qh: usize,
    pub record: usize,
}

static Q4_K_PANEL: KPanelFormat = KPanelFormat {
    dtype: DType::Q4K,
    kind: Q4K,
    w_bytes: 144,
    d: 0,
    dmin: 2 * P,
    sc: 4 * P,
    mn: 12 * P,
    qs: 20 * P,
    qh: 0,
    record: 20 * P + 128 * P,
};

static Q5_K_PANEL: KPanelFormat = KPanelFormat {
    dtype: DType::Q5K,
    kind: Q5K,
    w_bytes: 176,
    qh: 148 * P,
    record: 148 * P + 32 * P,
    ..Q4_K_PANEL
};

static Q6_K_PANEL: KPanelFormat = KPanelFormat {
    dtype: DType::Q6K,
    kind: Q6K,
    w_bytes: 210,
    d: 0,
    dmin: 0,
    sc: 2 * P,
    mn: 0,
    qs: 18 * P,
    qh: 146 * P,
    record: 210 * P,
};

/// Row-major block offsets of the k-quant parts (GGML's layouts, see `quant::blocks`).
mod block {
    pub const Q4_SCALES: usize = 4;
    pub const Q4_QS: usize = 16;
    pub const Q5_QH: usize = 16;
    pub const Q5_QS: usize = 48;
    pub const Q6_QL: usize = 0;
    pub const Q6_QH: usize = 128;
    pub const Q6_SCALES: usize = 192;
    pub const Q6_D: usize = 208;
}

impl KPanelFormat {
    pub(crate) fn of(dtype: DType) -> Option<&'static KPanelFormat> {
        match dtype {
            DType::Q4K => Some(&Q4_K_PANEL),
            DType::Q5K => Some(&Q5_K_PANEL),
            DType::Q6K => Some(&Q6_K_PANEL),
            _ => None,
        }
    }

    /// Where each interleaved byte string of a block comes from: (record offset, block
    /// offset, bytes per row); a length of 0 is no string.
    fn strings(&self) -> [(usize, usize, usize); 2] {
        match self.kind {
            Q4K => [(self.qs, block::Q4_QS, 128), (0, 0, 0)],
            Q5K => [(self.qs, block::Q5_QS, 128), (self.qh, block::Q5_QH, 32)],
            _ => [(self.qs, block::Q6_QL, 128), (self.qh, block::Q6_QH, 64)],
        }
    }
}

/// Bytes of a k-panel matrix of `rows x cols` (rows padded to whole panels).
pub(crate) fn packed_len(f: &KPanelFormat, rows: usize, cols: usize) -> usize {
    rows.div_ceil(P) * (cols / QK_K) * f.record
}

/// Repacks row-major blocks (`rows * nb * w_bytes` bytes) into k-panels.
pub(crate) fn pack(
    f: &KPanelFormat,
    rows: usize,
    cols: usize,
    src: &[u8],
) -> crate::weight_bytes::WeightBytes {
    let nb = cols / QK_K;
    let mut out = crate::weight_bytes::WeightBytes::zeroed(packed_len(f, rows, cols));
    for r in 0..rows {
        let (panel, lane) = (r / P, r % P);
        for b in 0..nb {
            let blk = &src[(r * nb + b) * f.w_bytes..][..f.w_bytes];
            let dst = &mut out[(panel * nb + b) * f.record..][..f.record];
            pack_block(f, blk, lane, dst);
        }
    }
    out
}

fn pack_block(f: &KPanelFormat, blk: &[u8], lane: usize, dst: &mut [u8]) {
    if f.kind == Q6K {
        dst[f.d + 2 * lane..][..2].copy_from_slice(&blk[block::Q6_D..block::Q6_D + 2]);
        for g in 0..16 {
            dst[f.sc + g * P + lane] = blk[block::Q6_SCALES + g];
        }
    } else {
        dst[f.d + 2 * lane..][..2].copy_from_slice(&blk[0..2]);
        dst[f.dmin + 2 * lane..][..2].copy_from_slice(&blk[2..4]);
        let scales: &[u8; 12] = blk[block::Q4_SCALES..block::Q4_SCALES + 12]
            .try_into()
            .unwrap_or(&[0; 12]);
        let (sc, mn) = k_scales_mins(scales);
        for j in 0..8 {
            dst[f.sc + j * P + lane] = sc[j];
            dst[f.mn + j * P + lane] = mn[j];
        }
    }
    for (at, from, len) in f.strings() {
        for m in 0..len / 4 {
            dst[at + (m * P + lane) * 4..][..4].copy_from_slice(&blk[from + 4 * m..][..4]);
        }
    }
}

/// Bytes of the largest row-major block a k-panel format stores (Q6_K).
pub(crate) const MAX_BLOCK_BYTES: usize = 210;

/// Super-block `b` of row `r` of a k-panel matrix, as the row-major block (`f.w_bytes` bytes):
/// the inverse of [`pack`] for one block.
pub(crate) fn unpack_block(
    f: &KPanelFormat,
    packed: &[u8],
    cols: usize,
    r: usize,
    b: usize,
    blk: &mut [u8],
) {
    let nb = cols / QK_K;
    let (panel, lane) = (r / P, r % P);
    let src = &packed[(panel * nb + b) * f.record..][..f.record];
    if f.kind == Q6K {
        blk[block::Q6_D..block::Q6_D + 2].copy_from_slice(&src[f.d + 2 * lane..][..2]);
        for g in 0..16 {
            blk[block::Q6_SCALES + g] = src[f.sc + g * P + lane];
        }
    } else {
        blk[0..2].copy_from_slice(&src[f.d + 2 * lane..][..2]);
        blk[2..4].copy_from_slice(&src[f.dmin + 2 * lane..][..2]);
        let sc: [u8; 8] = std::array::from_fn(|j| src[f.sc + j * P + lane]);
        let mn: [u8; 8] = std::array::from_fn(|j| src[f.mn + j * P + lane]);
        blk[block::Q4_SCALES..block::Q4_SCALES + 12].copy_from_slice(&pack_scales(&sc, &mn));
    }
    for (at, to, len) in f.strings() {
        for m in 0..len / 4 {
            blk[to + 4 * m..][..4].copy_from_slice(&src[at + (m * P + lane) * 4..][..4]);
        }
    }
}

/// The inverse of [`k_scales_mins`]: every bit of the 12 bytes holds one scale or min bit,
/// so a block's scales survive unpacking and packing again exactly.
fn pack_scales(sc: &[u8; 8], mn: &[u8; 8]) -> [u8; 12] {
    let mut s = [0u8; 12];
    for i in 0..4 {
        s[i] = (sc[i] & 63) | ((sc[i + 4] >> 4) << 6);
        s[i + 4] = (mn[i] & 63) | ((mn[i + 4] >> 4) << 6);
        s[i + 8] = (sc[i + 4] & 15) | ((mn[i + 4] & 15) << 4);
    }
    s
}

/// Weight quant `e` (0..256) of lane `lane` in record `rec` (the true value: Q6_K's less 32)
/// and the integer scale it is multiplied by.
#[cfg(test)]
fn quant_at(f: &KPanelFormat, rec: &[u8], lane: usize, e: usize) -> (i32, i32) {
    let byte = |at: usize, i: usize| rec[at + ((i / 4) * P + lane) * 4 + i % 4];
    let (j, l) = (e / 32, e % 32);
    match f.kind {
        Q6K => {
            let (h, jj) = (j / 4, j % 4);
            let lb = byte(f.qs, 64 * h + 32 * (jj & 1) + l);
            let lo = if jj < 2 { lb & 15 } else { lb >> 4 };
            let hi = (byte(f.qh, 32 * h + l) >> (2 * jj)) & 3;
            let sc = rec[f.sc + (e / 16) * P + lane] as i8 as i32;
            ((lo | (hi << 4)) as i32 - 32, sc)
        }
        _ => {
            let q = byte(f.qs, 32 * (j / 2) + l) >> (4 * (j % 2)) & 15;
            let high = if f.kind == Q5K {
                ((byte(f.qh, l) >> j) & 1) << 4
            } else {
                0
            };
            ((q | high) as i32, rec[f.sc + j * P + lane] as i32)
        }
    }
}

/// Scalar reference of the k-panel kernels: the 16 outputs of panel `panel` (its `nb`
/// records) against one Q8_K activation row.
#[cfg(test)]
pub(crate) fn kpanel_dot_ref(
    f: &KPanelFormat,
    panel: &[u8],
    nb: usize,
    act_row: &[u8],
) -> [f32; P] {
    let f16 = |b: &[u8], at: usize| half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32();
    let mut acc = [0f32; P];
    for b in 0..nb {
        let rec = &panel[b * f.record..][..f.record];
        let a = &act_row[b * A_BYTES..][..A_BYTES];
        let da = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
        let bsum =
            |g: usize| i16::from_le_bytes([a[A_BSUMS + 2 * g], a[A_BSUMS + 2 * g + 1]]) as i32;
        for (lane, acc) in acc.iter_mut().enumerate() {
            let isum: i32 = (0..QK_K)
                .map(|e| {
                    let (w, sc) = quant_at(f, rec, lane, e);
                    sc * w * a[A_QS + e] as i8 as i32
                })
                .sum();
            *acc = (isum as f32).mul_add(f16(rec, f.d + 2 * lane) * da, *acc);
            if f.kind != Q6K {
                let imin: i32 = (0..8)
                    .map(|j| rec[f.mn + j * P + lane] as i32 * (bsum(2 * j) + bsum(2 * j + 1)))
                    .sum();
                *acc = (imin as f32).mul_add(-(f16(rec, f.dmin + 2 * lane) * da), *acc);
            }
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{self, vec_dot_for, Isa};

    fn rng(seed: &mut u64) -> u32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*seed >> 33) as u32
    }

    /// Random k-quant weights with sane scales (random quant and scale bits).
    fn weights(dtype: DType, rows: usize, cols: usize, seed: &mut u64) -> Vec<u8> {
        weights_of(dtype, rows, cols, seed, false)
    }

    /// [`weights`], or with `extreme` every quant and scale bit set: the largest quants and
    /// scales, which against activations of one sign make the kernels' i16 sums largest.
    fn weights_of(
        dtype: DType,
        rows: usize,
        cols: usize,
        seed: &mut u64,
        extreme: bool,
    ) -> Vec<u8> {
        let f = KPanelFormat::of(dtype).unwrap();
        let mut w: Vec<u8> = (0..rows * cols / QK_K * f.w_bytes)
            .map(|_| if extreme { 0xFF } else { rng(seed) as u8 })
            .collect();
        for blk in w.chunks_exact_mut(f.w_bytes) {
            let d = half::f16::from_f32(1e-4 + (rng(seed) % 100) as f32 * 1e-5);
            let at = if f.kind == Q6K { block::Q6_D } else { 0 };
            blk[at..at + 2].copy_from_slice(&d.to_le_bytes());
            if f.kind != Q6K {
                let m = half::f16::from_f32((rng(seed) % 100) as f32 * 1e-5);
                blk[2..4].copy_from_slice(&m.to_le_bytes());
            }
        }
        w
    }

    #[test]
    fn pack_then_unpack_gives_every_block_back() {
        for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
            let f = KPanelFormat::of(dtype).unwrap();
            let (rows, cols) = (37, 512);
            let mut seed = 7 + dtype as u64;
            let w = weights(dtype, rows, cols, &mut seed);
            let packed = pack(f, rows, cols, &w);
            assert_eq!(packed.len(), 3 * 2 * f.record);
            let mut blk = vec![0u8; f.w_bytes];
            for r in 0..rows {
                for b in 0..2 {
                    unpack_block(f, &packed, cols, r, b, &mut blk);
                    let want = &w[(r * 2 + b) * f.w_bytes..][..f.w_bytes];
                    assert_eq!(blk, want, "{dtype} row {r} block {b}");
                }
            }
        }
    }

    /// The reference's arithmetic is the plain dot of the quantized row pair: it agrees with
    /// the row-major scalar `vec_dot` to rounding.
    #[test]
    fn reference_agrees_with_the_row_major_dot() {
        for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
            let f = KPanelFormat::of(dtype).unwrap();
            let (rows, cols) = (16, 768);
            let nb = cols / QK_K;
            let mut seed = 11 + dtype as u64;
            let w = weights(dtype, rows, cols, &mut seed);
            let packed = pack(f, rows, cols, &w);
            let x: Vec<f32> = (0..cols)
                .map(|_| (rng(&mut seed) % 2000) as f32 / 500.0 - 2.0)
                .collect();
            let mut a = vec![0u8; DType::Q8K.row_bytes(cols).unwrap()];
            quant::quantize_row(DType::Q8K, &x, &mut a).unwrap();
            let got = kpanel_dot_ref(f, &packed, nb, &a);
            let dot = vec_dot_for(dtype, Isa::Scalar).unwrap();
            let rb = nb * f.w_bytes;
            for r in 0..rows {
                let want = dot(cols, &w[r * rb..(r + 1) * rb], &a);
                let mut wf = vec![0f32; cols];
                quant::dequantize_row(dtype, &w[r * rb..(r + 1) * rb], &mut wf).unwrap();
                let mag: f32 = wf.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum();
                assert!(
                    (got[r] - want).abs() <= 1e-5 * mag + 1e-6,
                    "{dtype} row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
    }

    /// Each kernel family this CPU runs (AVX2; AVX-VNNI and AVX512-VNNI where allowed), through
    /// `matmul_panels_with` on a packed matrix, and `matmul`'s own dispatch, give the
    /// reference's bits for every output: each format; 1 to 40 activation rows (every
    /// rows-per-call remainder, decode- and prefill-sized tiles); one to six super-blocks;
    /// panel counts with partial last panels (fewer and more than 8 live rows); and the extreme
    /// quants against all-positive and all-negative activation rows (the AVX2 kernel's i16
    /// sums at their bound). Run again under `OXLLM_ISA=avx2` / `OXLLM_ISA=avxvnni` for the
    /// dispatch at AVX2 / AVX-VNNI.
    #[test]
    fn every_kernel_is_bit_identical_to_the_reference() {
        use crate::matmul::{matmul, matmul_panels_with, quantize_acts, PanelKernel, QMatrix};
        let kernels: Vec<PanelKernel> = [
            PanelKernel::Avx2,
            PanelKernel::AvxVnni,
            PanelKernel::Avx512Vnni,
        ]
        .into_iter()
        .filter(|k| k.available())
        .collect();
        if kernels.is_empty() {
            eprintln!("no AVX2 on this CPU: nothing to compare");
            return;
        }
        eprintln!("k-panel kernels compared: {kernels:?}");
        let pool = crate::pool::ThreadPool::new(2);
        for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
            let f = KPanelFormat::of(dtype).unwrap();
            let shapes = [(16, 256), (45, 512), (100, 1536), (36, 256), (4, 768)];
            for (extreme, (n, cols)) in [false, true]
                .into_iter()
                .flat_map(|e| shapes.map(|s| (e, s)))
            {
                let nb = cols / QK_K;
                let mut seed = 3 + n as u64 + dtype as u64;
                let w = weights_of(dtype, n, cols, &mut seed, extreme);
                let packed = pack(f, n, cols, &w);
                let w = QMatrix::new_row_major(dtype, n, cols, w)
                    .unwrap()
                    .into_panels();
                assert!(w.is_panels());
                for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 16, 17, 19, 40] {
                    let x: Vec<f32> = (0..m * cols)
                        .map(|e| match (extreme, (e / cols) % 2) {
                            (false, _) => (rng(&mut seed) % 2000) as f32 / 300.0 - 3.3,
                            (true, 0) => 1.0,
                            (true, _) => -1.0,
                        })
                        .collect();
                    let acts = quantize_acts(&pool, &x, m, cols, DType::Q8K).unwrap();
                    let outs: Vec<Vec<f32>> = kernels
                        .iter()
                        .map(|&k| {
                            let mut out = vec![f32::NAN; m * n];
                            matmul_panels_with(k, &pool, &w, &acts, &mut out).unwrap();
                            out
                        })
                        .collect();
                    let mut dispatched = vec![f32::NAN; m * n];
                    matmul(&pool, &w, &acts, &mut dispatched).unwrap();
                    for i in 0..m {
                        let a = acts.row(i);
                        for p in 0..n.div_ceil(P) {
                            let want = kpanel_dot_ref(f, &packed[p * nb * f.record..], nb, a);
                            for (l, want) in want.iter().enumerate().take((n - p * P).min(P)) {
                                let j = p * P + l;
                                let at = format!("{dtype} n={n} cols={cols} m={m}: ({i}, {j})");
                                for (k, out) in kernels.iter().zip(&outs) {
                                    let got = out[i * n + j];
                                    assert_eq!(
                                        got.to_bits(),
                                        want.to_bits(),
                                        "{at} {k:?} {got} vs {want}"
                                    );
                                }
                                let via = dispatched[i * n + j];
                                assert_eq!(via.to_bits(), want.to_bits(), "{at} matmul");
                            }
                        }
                    }
                }
            }
        }
    }

    /// A k-quant matrix is stored as panels where the CPU runs them, and reads back (rows,
    /// dequantized rows) exactly as its row-major blocks.
    #[test]
    fn new_matrices_are_panels_that_read_back_as_blocks() {
        use crate::matmul::QMatrix;
        for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
            let (rows, cols) = (21, 512);
            let mut seed = 99 + dtype as u64;
            let w = weights(dtype, rows, cols, &mut seed);
            let m = QMatrix::new(dtype, rows, cols, w.clone()).unwrap();
            let row_major = QMatrix::new_row_major(dtype, rows, cols, w).unwrap();
            assert_eq!(m.is_panels(), crate::matmul::PanelKernel::best().is_some());
            let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
            for r in 0..rows {
                assert_eq!(m.row(r), row_major.row(r), "{dtype} row {r}");
                m.dequantize_row(r, &mut a).unwrap();
                row_major.dequantize_row(r, &mut b).unwrap();
                assert_eq!(a, b, "{dtype} row {r}");
            }
        }
    }
}
