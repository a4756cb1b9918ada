//! Weight panels: Q4_0, Q4_1 and Q8_0 matrices repacked so that one AVX512-VNNI register holds
//! 4 quants of each of 16 weight rows, and the decode/prefill GEMM needs no horizontal sums.
//!
//! Why: in row-major blocks every (weight row, activation row, block) triple ends in a
//! convert, a scale multiply and an fma of a whole register holding one row's partial sums
//! (see `tile_avx2`), which made batch-16 decode compute-bound at one `vpdpbusd` per five
//! instructions. In a panel, lane `r` of register `j` holds quants `4j..4j+4` of row `r`'s
//! block (Q4: nibbles, low half `j < 4`, high half `j >= 4`), so the 8 `vpdpbusd` of a block
//! against one broadcast activation dword each leave the exact integer dot of all 16 rows in
//! 16 lanes, and one convert, one multiply and one (Q4_1: two) fma finish 512 multiply-adds.
//!
//! Layout: rows are grouped in panels of [`P`] (the last one padded with zero rows); a panel
//! is `nb` records, one per 32-column block, each `[d: 16 x f16][m: 16 x f16, Q4_1 only]
//! [quants]`, the quants unsigned (`w + BIAS`: Q4_0 nibbles as stored, Q8_0 bytes with the
//! sign bit flipped). A record is as large as 16 row-major blocks, so a panel matrix takes
//! the same memory as the file's.
//!
//! Arithmetic, the same for every output whatever the batch (batch invariant) and in the
//! scalar reference [`panel_dot_ref`] (bit-identical, tested): for each block `b` in order,
//! `acc = fma(f32(isum_b), dw_b * da_b, acc)` with `isum_b` the exact integer dot of the true
//! (signed) quants, then for Q4_1 `acc = fma(mw_b, sa_b, acc)` with `sa_b` the activation
//! block's `d * sum(q)`.

use oxllm_core::DType;

use crate::quant::QK;

/// Weight rows per panel (lanes of one zmm of f32, of two ymm).
pub(crate) const P: usize = 16;

/// The kernel families that run panels; all give the reference's bits (tested), so a matrix
/// packed once runs on either. Public only so benches and tests can compare them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelKernel {
    /// Half panels in ymm registers: `vpmaddubsw` + `vpmaddwd` (AVX2+FMA+F16C).
    Avx2,
    /// VEX `vpdpbusd` / `vpdpwssd` (AVX-VNNI, no AVX-512): Q4_0/Q4_1/Q8_0 whole panels in two
    /// ymm registers; k-quant panels half a panel per ymm (`kpanel_avxvnni`).
    AvxVnni,
    /// Pairs of panels in zmm registers: `vpdpbusd` / `vpdpwssd` (AVX512-VNNI).
    Avx512Vnni,
}

impl PanelKernel {
    /// Whether this CPU can run the family.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            crate::quant::detected_isa() == crate::quant::Isa::Avx2
                && match self {
                    PanelKernel::Avx2 => true,
                    PanelKernel::AvxVnni => super::tile_avx2::has_avx_vnni(),
                    PanelKernel::Avx512Vnni => super::panel_avx512::available(),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The family `matmul` runs panels with on this CPU, or `None` where there is none (then
    /// matrices stay row-major).
    pub fn best() -> Option<PanelKernel> {
        static BEST: std::sync::OnceLock<Option<PanelKernel>> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            [
                PanelKernel::Avx512Vnni,
                PanelKernel::AvxVnni,
                PanelKernel::Avx2,
            ]
            .into_iter()
            .find(|k| k.available())
        })
    }
}

/// The panel form of one weight format (with its activation partner: Q8_1 for Q4_1, Q8_0
/// otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PanelFormat {
    pub dtype: DType,
    /// Row-major block bytes and offset of the quants in it.
    pub w_bytes: usize,
    pub w_qs: usize,
    /// Quant bytes of a record (16 rows).
    pub qs_bytes: usize,
    pub has_min: bool,
    /// Added to each signed weight quant to make it unsigned.
    pub bias: i32,
    /// Activation block bytes and offset of its quants (8-bit activations).
    pub a_bytes: usize,
    pub a_qs: usize,
    /// Quants per lane of one register: 4 (bytes for `vpdpbusd`), or 2 (signed bytes widened
    /// to i16 pairs for `vpdpwssd` against 16-bit activations: [`PanelFormat::wide_q8_0`]).
    pub group: usize,
}

const fn format(dtype: DType, w_bytes: usize, has_min: bool, bias: i32) -> PanelFormat {
    PanelFormat {
        dtype,
        w_bytes,
        w_qs: if has_min { 4 } else { 2 },
        qs_bytes: if w_bytes == 34 { 512 } else { 256 },
        has_min,
        bias,
        a_bytes: if has_min { 36 } else { 34 },
        a_qs: if has_min { 4 } else { 2 },
        group: 4,
    }
}

static Q4_0: PanelFormat = format(DType::Q4_0, 18, false, 8);
static Q4_1: PanelFormat = format(DType::Q4_1, 20, true, 0);
static Q8_0: PanelFormat = format(DType::Q8_0, 34, false, 128);
static WIDE_Q8_0: PanelFormat = PanelFormat {
    bias: 0,
    a_bytes: 0,
    a_qs: 0,
    group: 2,
    ..format(DType::Q8_0, 34, false, 0)
};

impl PanelFormat {
    pub(crate) fn of(dtype: DType) -> Option<&'static PanelFormat> {
        match dtype {
            DType::Q4_0 => Some(&Q4_0),
            DType::Q4_1 => Some(&Q4_1),
            DType::Q8_0 => Some(&Q8_0),
            _ => None,
        }
    }

    /// Q8_0 weights against 16-bit activations (the output head, see `head`): signed quants
    /// as stored, two per lane.
    pub(crate) fn wide_q8_0() -> &'static PanelFormat {
        &WIDE_Q8_0
    }

    /// Bytes of the scale part of a record.
    pub(crate) fn scale_bytes(&self) -> usize {
        if self.has_min {
            4 * P
        } else {
            2 * P
        }
    }

    pub(crate) fn record_bytes(&self) -> usize {
        self.scale_bytes() + self.qs_bytes
    }

    #[cfg(test)]
    fn nibbles(&self) -> bool {
        self.qs_bytes == 256
    }

    /// The stored byte of weight quant byte `v` (and back: the map is its own inverse).
    fn stored(&self, v: u8) -> u8 {
        // Q8_0 for `vpdpbusd`: `v ^ 0x80` read as unsigned is `w + 128`.
        if self.bias == 128 {
            v ^ 0x80
        } else {
            v
        }
    }
}

/// Bytes of a panel matrix of `rows x cols` (rows padded to whole panels).
pub(crate) fn packed_len(f: &PanelFormat, rows: usize, cols: usize) -> usize {
    rows.div_ceil(P) * (cols / QK) * f.record_bytes()
}

/// Repacks row-major blocks (`rows * nb * w_bytes` bytes) into panels.
pub(crate) fn pack(
    f: &PanelFormat,
    rows: usize,
    cols: usize,
    src: &[u8],
) -> crate::weight_bytes::WeightBytes {
    let nb = cols / QK;
    let rec = f.record_bytes();
    let mut out = crate::weight_bytes::WeightBytes::zeroed(packed_len(f, rows, cols));
    for r in 0..rows {
        let (panel, lane) = (r / P, r % P);
        for b in 0..nb {
            let blk = &src[(r * nb + b) * f.w_bytes..][..f.w_bytes];
            let dst = &mut out[(panel * nb + b) * rec..][..rec];
            dst[2 * lane..2 * lane + 2].copy_from_slice(&blk[0..2]);
            if f.has_min {
                dst[2 * P + 2 * lane..2 * P + 2 * lane + 2].copy_from_slice(&blk[2..4]);
            }
            let qs = &mut dst[f.scale_bytes()..];
            let wq = &blk[f.w_qs..];
            let g = f.group;
            for j in 0..f.qs_bytes / (g * P) {
                for i in 0..g {
                    qs[(j * P + lane) * g + i] = f.stored(wq[g * j + i]);
                }
            }
        }
    }
    out
}

/// Bytes of the largest row-major block a panel format stores (Q8_0).
pub(crate) const MAX_BLOCK_BYTES: usize = 34;

/// The row-major blocks of row `r` of a panel matrix (the inverse of [`pack`] for one row).
pub(crate) fn unpack_row(f: &PanelFormat, packed: &[u8], cols: usize, r: usize, dst: &mut [u8]) {
    for b in 0..cols / QK {
        unpack_block(
            f,
            packed,
            cols,
            r,
            b,
            &mut dst[b * f.w_bytes..][..f.w_bytes],
        );
    }
}

/// Block `b` of row `r` of a panel matrix, as the row-major block (`f.w_bytes` bytes).
pub(crate) fn unpack_block(
    f: &PanelFormat,
    packed: &[u8],
    cols: usize,
    r: usize,
    b: usize,
    blk: &mut [u8],
) {
    let nb = cols / QK;
    let rec = f.record_bytes();
    let (panel, lane) = (r / P, r % P);
    let src = &packed[(panel * nb + b) * rec..][..rec];
    blk[0..2].copy_from_slice(&src[2 * lane..2 * lane + 2]);
    if f.has_min {
        blk[2..4].copy_from_slice(&src[2 * P + 2 * lane..2 * P + 2 * lane + 2]);
    }
    let qs = &src[f.scale_bytes()..];
    let g = f.group;
    for j in 0..f.qs_bytes / (g * P) {
        for i in 0..g {
            blk[f.w_qs + g * j + i] = f.stored(qs[(j * P + lane) * g + i]);
        }
    }
}

/// Per (activation row, block) values the kernels broadcast: the block's `d` and `s` as f32
/// and `-BIAS * sum(q)`, which turns the unsigned-weight dot back into the signed one.
#[cfg(test)]
pub(crate) fn act_terms(
    f: &PanelFormat,
    row: &[u8],
    nb: usize,
    ad: &mut [f32],
    sa: &mut [f32],
    corr: &mut [i32],
) {
    for b in 0..nb {
        let blk = &row[b * f.a_bytes..][..f.a_bytes];
        ad[b] = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        sa[b] = if f.has_min {
            half::f16::from_le_bytes([blk[2], blk[3]]).to_f32()
        } else {
            0.0
        };
        let sum: i32 = blk[f.a_qs..f.a_qs + QK]
            .iter()
            .map(|&q| q as i8 as i32)
            .sum();
        corr[b] = -f.bias * sum;
    }
}

/// Lays out the activation rows for the panel kernel, in chunks of `ch` rows: per chunk and
/// block, the `ch` rows' 32 quant bytes (`qs`), their scales then their block sums (`terms`,
/// `act_terms`'s `ad` and `sa`) and, for formats with a bias, their corrections (`corr`).
/// A kernel then reaches every row of a block at a fixed offset from one pointer.
/// `rows(i)` is activation row `i` of `m`; buffers are sized for `m.div_ceil(ch)` chunks.
pub(crate) fn pack_acts<'a>(
    f: &PanelFormat,
    m: usize,
    nb: usize,
    ch: usize,
    rows: impl Fn(usize) -> &'a [u8],
    (qs, terms, corr): (&mut [u8], &mut [f32], &mut [i32]),
) {
    let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
    for i in 0..m {
        let (k, c) = (i / ch, i % ch);
        let row = rows(i);
        for (b, blk) in row.chunks_exact(f.a_bytes).take(nb).enumerate() {
            // The same values as `act_terms`, without its sum where no bias needs it.
            let at = (k * nb + b) * ch;
            let q = &blk[f.a_qs..f.a_qs + QK];
            qs[(at + c) * QK..][..QK].copy_from_slice(q);
            terms[2 * at + c] = f16(blk);
            terms[2 * at + ch + c] = if f.has_min { f16(&blk[2..]) } else { 0.0 };
            if f.bias != 0 {
                corr[at + c] = -f.bias * q.iter().map(|&q| q as i8 as i32).sum::<i32>();
            }
        }
    }
}

/// [`quantize_act16`] of each of the `m` rows into the wide kernel's chunk layout: per chunk
/// of `ch` rows and block, the rows' 16 pairs each (`pairs`) and their scales (`ad`).
pub(crate) fn pack_act16<'a>(
    m: usize,
    nb: usize,
    ch: usize,
    rows: impl Fn(usize) -> &'a [u8],
    pairs: &mut [i32],
    ad: &mut [f32],
) {
    let (mut p, mut d) = ([0i32; QK / 2], [0f32; 1]);
    for i in 0..m {
        let (k, c) = (i / ch, i % ch);
        let row = rows(i);
        for b in 0..nb {
            let at = (k * nb + b) * ch;
            quantize_act16(&row[b * 4 * QK..][..4 * QK], &mut p, &mut d);
            pairs[(at + c) * QK / 2..][..QK / 2].copy_from_slice(&p);
            ad[at + c] = d[0];
        }
    }
}

/// Largest 16-bit activation quant.
const Q16_MAX: f32 = 32767.0;

/// Quantizes one f32 activation row for the wide (16-bit) kernel: per 32-value block,
/// `d = amax / 32767` and `q = round(x * (32767 / amax))`; quants are stored in pairs, the
/// even element in the low half of each i32 (the dword `vpdpwssd` broadcasts).
/// `x` is the row as little-endian f32 bytes (how `QuantizedActs` holds f32 rows).
pub(crate) fn quantize_act16(x: &[u8], pairs: &mut [i32], d: &mut [f32]) {
    for (b, bytes) in x.chunks_exact(4 * QK).enumerate() {
        let mut blk = [0f32; QK];
        for (v, b) in blk.iter_mut().zip(bytes.chunks_exact(4)) {
            *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (db, id) = if amax > 0.0 {
            (amax / Q16_MAX, Q16_MAX / amax)
        } else {
            (0.0, 0.0)
        };
        d[b] = db;
        for (i, pair) in blk.chunks_exact(2).enumerate() {
            let q = |v: f32| (v * id).round().clamp(-Q16_MAX, Q16_MAX) as i16 as u16 as u32;
            pairs[b * QK / 2 + i] = (q(pair[0]) | (q(pair[1]) << 16)) as i32;
        }
    }
}

/// Scalar reference of the wide kernel: the 16 outputs of panel `panel` against one row's
/// [`quantize_act16`] pairs and scales: per block `acc = fma(f32(isum), dw * da, acc)`, with
/// `isum` the exact i32 dot (at most 32 * 127 * 32767 in magnitude) rounded once to f32.
#[cfg(test)]
pub(crate) fn wide_dot_ref(
    f: &PanelFormat,
    panel: &[u8],
    nb: usize,
    pairs: &[i32],
    ad: &[f32],
) -> [f32; P] {
    let rec = f.record_bytes();
    let mut acc = [0f32; P];
    for b in 0..nb {
        let r = &panel[b * rec..][..rec];
        let qs = &r[f.scale_bytes()..];
        for (lane, acc) in acc.iter_mut().enumerate() {
            let mut isum = 0i32;
            for j in 0..QK / 2 {
                let a = pairs[b * QK / 2 + j];
                let (a0, a1) = (a as i16 as i32, (a >> 16) as i16 as i32);
                let w = &qs[(j * P + lane) * 2..];
                isum += w[0] as i8 as i32 * a0 + w[1] as i8 as i32 * a1;
            }
            let dw = half::f16::from_le_bytes([r[2 * lane], r[2 * lane + 1]]).to_f32();
            *acc = (isum as f32).mul_add(dw * ad[b], *acc);
        }
    }
    acc
}

/// Scalar reference of the panel kernels: the 16 outputs of panel `panel` (its `nb` records)
/// against one activation row whose [`act_terms`] are `ad`, `sa`, `corr`.
#[cfg(test)]
pub(crate) fn panel_dot_ref(
    f: &PanelFormat,
    panel: &[u8],
    nb: usize,
    act_row: &[u8],
    (ad, sa, corr): (&[f32], &[f32], &[i32]),
) -> [f32; P] {
    let rec = f.record_bytes();
    let mut acc = [0f32; P];
    for b in 0..nb {
        let r = &panel[b * rec..][..rec];
        let aq = &act_row[b * f.a_bytes + f.a_qs..][..QK];
        let qs = &r[f.scale_bytes()..];
        for (lane, acc) in acc.iter_mut().enumerate() {
            let mut isum = corr[b];
            for j in 0..8 {
                for i in 0..4 {
                    let (w, k) = if f.nibbles() {
                        let v = qs[((j % 4) * P + lane) * 4 + i];
                        let w = if j < 4 { v & 0x0F } else { v >> 4 };
                        (w, 4 * j + i)
                    } else {
                        (qs[(j * P + lane) * 4 + i], 4 * j + i)
                    };
                    isum += w as i32 * aq[k] as i8 as i32;
                }
            }
            let dw = half::f16::from_le_bytes([r[2 * lane], r[2 * lane + 1]]).to_f32();
            *acc = (isum as f32).mul_add(dw * ad[b], *acc);
            if f.has_min {
                let mw = half::f16::from_le_bytes([r[2 * P + 2 * lane], r[2 * P + 2 * lane + 1]])
                    .to_f32();
                *acc = mw.mul_add(sa[b], *acc);
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

    fn weights(dtype: DType, rows: usize, cols: usize, seed: &mut u64) -> Vec<u8> {
        let f = PanelFormat::of(dtype).unwrap();
        let mut w: Vec<u8> = (0..rows * cols / QK * f.w_bytes)
            .map(|_| rng(seed) as u8)
            .collect();
        for blk in w.chunks_exact_mut(f.w_bytes) {
            let d = half::f16::from_f32(0.001 + (rng(seed) % 100) as f32 * 1e-4);
            blk[0..2].copy_from_slice(&d.to_le_bytes());
            if f.has_min {
                let m = half::f16::from_f32(-((rng(seed) % 100) as f32) * 1e-3);
                blk[2..4].copy_from_slice(&m.to_le_bytes());
            }
        }
        w
    }

    #[test]
    fn pack_then_unpack_gives_every_row_back() {
        let formats = [DType::Q4_0, DType::Q4_1, DType::Q8_0].map(|d| PanelFormat::of(d).unwrap());
        for f in formats.into_iter().chain([PanelFormat::wide_q8_0()]) {
            let dtype = f.dtype;
            let (rows, cols) = (37, 96);
            let mut seed = 7;
            let w = weights(dtype, rows, cols, &mut seed);
            let packed = pack(f, rows, cols, &w);
            assert_eq!(packed.len(), 3 * 3 * f.record_bytes());
            let rb = cols / QK * f.w_bytes;
            let mut row = vec![0u8; rb];
            for r in 0..rows {
                unpack_row(f, &packed, cols, r, &mut row);
                assert_eq!(row, w[r * rb..(r + 1) * rb], "{dtype} row {r}");
            }
        }
    }

    /// The reference's arithmetic is the plain dot of the quantized row pair: it agrees with
    /// the row-major scalar `vec_dot` to rounding.
    #[test]
    fn reference_agrees_with_the_row_major_dot() {
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
            let f = PanelFormat::of(dtype).unwrap();
            let (rows, cols) = (16, 160);
            let nb = cols / QK;
            let mut seed = 11 + dtype as u64;
            let w = weights(dtype, rows, cols, &mut seed);
            let packed = pack(f, rows, cols, &w);
            let x: Vec<f32> = (0..cols)
                .map(|_| (rng(&mut seed) % 2000) as f32 / 500.0 - 2.0)
                .collect();
            let adt = quant::activation_dtype(dtype).unwrap();
            let mut a = vec![0u8; adt.row_bytes(cols).unwrap()];
            quant::quantize_row(adt, &x, &mut a).unwrap();
            let (mut ad, mut sa, mut corr) = (vec![0f32; nb], vec![0f32; nb], vec![0i32; nb]);
            act_terms(f, &a, nb, &mut ad, &mut sa, &mut corr);
            let got = panel_dot_ref(f, &packed, nb, &a, (&ad, &sa, &corr));
            let dot = vec_dot_for(dtype, Isa::Scalar).unwrap();
            let rb = nb * f.w_bytes;
            for r in 0..rows {
                let want = dot(cols, &w[r * rb..(r + 1) * rb], &a);
                assert!(
                    (got[r] - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{dtype} row {r}: {} vs {want}",
                    got[r]
                );
            }
        }
    }

    /// The AVX512-VNNI kernels give the reference's bits for every output (see
    /// [`assert_kernel_matches_reference`]).
    #[test]
    fn avx512_kernel_is_bit_identical_to_the_reference() {
        assert_kernel_matches_reference(PanelKernel::Avx512Vnni);
    }

    /// The AVX2 kernels give the reference's bits for every output, hence the AVX512-VNNI
    /// kernels' bits too.
    #[test]
    fn avx2_kernel_is_bit_identical_to_the_reference() {
        assert_kernel_matches_reference(PanelKernel::Avx2);
    }

    /// The AVX-VNNI kernels give the reference's bits for every output.
    #[test]
    fn avx_vnni_kernel_is_bit_identical_to_the_reference() {
        assert_kernel_matches_reference(PanelKernel::AvxVnni);
    }

    /// `kernel` (through `matmul_panels_with` on a packed matrix) gives the reference's bits
    /// for every output: each format; 1 to 40 activation rows (every call size of the AVX2
    /// kernels' 8 rows per call and the AVX512-VNNI ones', whole and partial chunks, a
    /// prefill-sized batch); panel counts odd and even, with
    /// partial last panels (fewer and more than 8 live rows).
    fn assert_kernel_matches_reference(kernel: PanelKernel) {
        use crate::matmul::{matmul_panels_with, quantize_acts, QMatrix};
        if !kernel.available() {
            eprintln!("no {kernel:?} on this CPU: nothing to compare");
            return;
        }
        let pool = crate::pool::ThreadPool::new(2);
        for dtype in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
            let f = PanelFormat::of(dtype).unwrap();
            for (n, cols) in [(16, 32), (45, 96), (100, 576), (36, 64)] {
                let nb = cols / QK;
                let mut seed = 3 + n as u64 + dtype as u64;
                let w = weights(dtype, n, cols, &mut seed);
                let packed = pack(f, n, cols, &w);
                let w = QMatrix::new_row_major(dtype, n, cols, w)
                    .unwrap()
                    .into_panels();
                assert!(w.is_panels());
                let adt = quant::activation_dtype(dtype).unwrap();
                for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 16, 17, 19, 40] {
                    let x: Vec<f32> = (0..m * cols)
                        .map(|_| (rng(&mut seed) % 2000) as f32 / 300.0 - 3.3)
                        .collect();
                    let acts = quantize_acts(&pool, &x, m, cols, adt).unwrap();
                    let mut out = vec![f32::NAN; m * n];
                    matmul_panels_with(kernel, &pool, &w, &acts, &mut out).unwrap();
                    for i in 0..m {
                        let a = acts.row(i);
                        let (mut ad, mut sa, mut corr) =
                            (vec![0f32; nb], vec![0f32; nb], vec![0i32; nb]);
                        act_terms(f, a, nb, &mut ad, &mut sa, &mut corr);
                        for p in 0..n.div_ceil(P) {
                            let rec = nb * f.record_bytes();
                            let want =
                                panel_dot_ref(f, &packed[p * rec..], nb, a, (&ad, &sa, &corr));
                            for (l, want) in want.iter().enumerate().take((n - p * P).min(P)) {
                                let got = out[i * n + p * P + l];
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{dtype} n={n} cols={cols} m={m}: ({i}, {}) {got} vs {want}",
                                    p * P + l
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The AVX512-VNNI wide kernel matches the reference (see [`assert_wide_matches_reference`]).
    #[test]
    fn wide_kernel_is_bit_identical_to_the_reference() {
        assert_wide_matches_reference(PanelKernel::Avx512Vnni);
    }

    /// The AVX2 wide kernel matches the reference (see [`assert_wide_matches_reference`]).
    #[test]
    fn avx2_wide_kernel_is_bit_identical_to_the_reference() {
        assert_wide_matches_reference(PanelKernel::Avx2);
    }

    /// The AVX-VNNI wide kernel matches the reference (see [`assert_wide_matches_reference`]).
    #[test]
    fn avx_vnni_wide_kernel_is_bit_identical_to_the_reference() {
        assert_wide_matches_reference(PanelKernel::AvxVnni);
    }

    /// `kernel`'s wide kernel (the output head's: Q8_0 against 16-bit activations, on a
    /// matrix with f32 activations) gives the reference's bits, and is as close to the f32 dot
    /// as its activation rounding allows.
    fn assert_wide_matches_reference(kernel: PanelKernel) {
        use crate::matmul::{matmul_panels_with, quantize_acts, QMatrix};
        if !kernel.available() {
            eprintln!("no {kernel:?} on this CPU: nothing to compare");
            return;
        }
        let pool = crate::pool::ThreadPool::new(2);
        let f = PanelFormat::wide_q8_0();
        for (n, cols) in [(16, 32), (45, 96), (100, 576), (36, 64)] {
            let nb = cols / QK;
            let mut seed = 5 + n as u64;
            let w = weights(DType::Q8_0, n, cols, &mut seed);
            let packed = pack(f, n, cols, &w);
            let w = QMatrix::new(DType::Q8_0, n, cols, w)
                .unwrap()
                .with_f32_activations();
            if !w.is_panels() {
                eprintln!("no panel kernel on this CPU: nothing to compare");
                return;
            }
            let mut wf = vec![0f32; cols];
            for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 16, 19, 40] {
                let x: Vec<f32> = (0..m * cols)
                    .map(|_| (rng(&mut seed) % 2000) as f32 / 300.0 - 3.3)
                    .collect();
                let acts = quantize_acts(&pool, &x, m, cols, DType::F32).unwrap();
                let mut out = vec![f32::NAN; m * n];
                matmul_panels_with(kernel, &pool, &w, &acts, &mut out).unwrap();
                for i in 0..m {
                    let (mut pairs, mut ad) = (vec![0i32; cols / 2], vec![0f32; nb]);
                    quantize_act16(acts.row(i), &mut pairs, &mut ad);
                    for p in 0..n.div_ceil(P) {
                        let rec = nb * f.record_bytes();
                        let want = wide_dot_ref(f, &packed[p * rec..], nb, &pairs, &ad);
                        for (l, want) in want.iter().enumerate().take((n - p * P).min(P)) {
                            let j = p * P + l;
                            let got = out[i * n + j];
                            assert_eq!(got.to_bits(), want.to_bits(), "n={n} m={m} ({i},{j})");
                            w.dequantize_row(j, &mut wf).unwrap();
                            let xi = &x[i * cols..(i + 1) * cols];
                            let exact: f32 = wf.iter().zip(xi).map(|(a, b)| a * b).sum();
                            let mag: f32 = wf.iter().zip(xi).map(|(a, b)| (a * b).abs()).sum();
                            assert!((got - exact).abs() <= 1e-4 * mag + 1e-6, "{got} vs {exact}");
                        }
                    }
                }
            }
        }
    }
}
