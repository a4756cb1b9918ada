//! The AVX512-VNNI panel kernel: one panel of 16 weight rows against a chunk of up to
//! [`CH`] activation rows, every block of the row (see `panel` for the layout and the
//! arithmetic it reproduces bit for bit).
//!
//! Per block the panel's quants are loaded (and, for Q4, split into nibbles) once, then each
//! activation row takes 8 `vpdpbusd` against broadcast dwords of its block, in two chains of
//! four summed exactly, one convert, one scale multiply and one (Q4_1: two) fma into a
//! register of 16 outputs.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX512F/BW/VL/VNNI (checked by
//! [`available`] before a plan is built), the panel pointer addresses `nb` records of the
//! format, each activation row `nb` blocks, and the per-row terms `nb` values.

use std::arch::x86_64::*;

/// Activation rows per kernel call.
pub(crate) const CH: usize = 16;

/// Whether this CPU runs the panel kernel.
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Where one chunk's inputs and outputs are.
pub(crate) struct Chunk<const C: usize> {
    /// First byte of each activation row's quantized blocks.
    pub acts: [*const u8; C],
    /// Per-row act terms (`panel::act_terms`), `nb` each.
    pub ad: [*const f32; C],
    pub sa: [*const f32; C],
    pub corr: [*const i32; C],
    /// Each output row; a call writes the lanes of `mask` at column `col`.
    pub out: [*mut f32; C],
}

/// The panel at `panel` (`nb` records of `rec` bytes, scales first) against the chunk.
///
/// # Safety
/// See the module's contract; `out[c] + col` is valid for the lanes set in `mask`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn panel_chunk<
    const C: usize,
    const MIN: bool,
    const NIB: bool,
    const BIAS: bool,
>(
    nb: usize,
    rec: usize,
    scale_bytes: usize,
    a_bytes: usize,
    a_qs: usize,
    panel: *const u8,
    ch: &Chunk<C>,
    (col, mask): (usize, u16),
) {
    let mut acc = [_mm512_setzero_ps(); C];
    let low = _mm512_set1_epi8(0x0F);
    for b in 0..nb {
        let r = panel.add(b * rec);
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
        let mw = if MIN {
            _mm512_cvtph_ps(_mm256_loadu_si256(r.add(32).cast()))
        } else {
            _mm512_setzero_ps()
        };
        let q = r.add(scale_bytes);
        let mut wq = [_mm512_setzero_si512(); 8];
        if NIB {
            for j in 0..4 {
                let x = _mm512_loadu_si512(q.add(64 * j).cast());
                wq[j] = _mm512_and_si512(x, low);
                wq[j + 4] = _mm512_and_si512(_mm512_srli_epi16::<4>(x), low);
            }
        } else {
            for (j, w) in wq.iter_mut().enumerate() {
                *w = _mm512_loadu_si512(q.add(64 * j).cast());
            }
        }
        for (c, acc) in acc.iter_mut().enumerate() {
            let a = ch.acts[c].add(b * a_bytes + a_qs).cast::<i32>();
            let dword = |j: usize| _mm512_set1_epi32(a.add(j).read_unaligned());
            let mut lo = if BIAS {
                _mm512_set1_epi32(*ch.corr[c].add(b))
            } else {
                _mm512_setzero_si512()
            };
            let mut hi = _mm512_setzero_si512();
            for j in 0..4 {
                lo = _mm512_dpbusd_epi32(lo, wq[j], dword(j));
                hi = _mm512_dpbusd_epi32(hi, wq[j + 4], dword(j + 4));
            }
            let isum = _mm512_add_epi32(lo, hi);
            let s = _mm512_mul_ps(dw, _mm512_set1_ps(*ch.ad[c].add(b)));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, *acc);
            if MIN {
                *acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(*ch.sa[c].add(b)), *acc);
            }
        }
    }
    for (out, acc) in ch.out.iter().zip(acc) {
        _mm512_mask_storeu_ps(out.add(col), mask, acc);
    }
}

/// Where one chunk of 16-bit activation rows and its outputs are (the wide kernel).
pub(crate) struct WideChunk<const C: usize> {
    /// Each row's `panel::quantize_act16` pairs (`16 * nb` i32) and scales (`nb`).
    pub pairs: [*const i32; C],
    pub ad: [*const f32; C],
    /// Each output row; a call writes the lanes of `mask` at column `col`.
    pub out: [*mut f32; C],
}

/// A wide Q8_0 panel (`nb` records of `rec` bytes) against a chunk of 16-bit activation rows:
/// per block 16 registers of sign-extended weight pairs, then per row 16 `vpdpwssd` (two
/// chains of eight summed exactly), one convert, one multiply and one fma.
///
/// # Safety
/// See the module's contract; `out[c] + col` is valid for the lanes set in `mask`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn wide_chunk<const C: usize>(
    nb: usize,
    rec: usize,
    panel: *const u8,
    ch: &WideChunk<C>,
    (col, mask): (usize, u16),
) {
    let mut acc = [_mm512_setzero_ps(); C];
    for b in 0..nb {
        let r = panel.add(b * rec);
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(r.cast()));
        let q = r.add(32);
        let wq: [__m512i; 16] =
            std::array::from_fn(|j| _mm512_cvtepi8_epi16(_mm256_loadu_si256(q.add(32 * j).cast())));
        for (c, acc) in acc.iter_mut().enumerate() {
            let a = ch.pairs[c].add(b * 16);
            let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            for j in 0..8 {
                lo = _mm512_dpwssd_epi32(lo, wq[j], _mm512_set1_epi32(*a.add(j)));
                hi = _mm512_dpwssd_epi32(hi, wq[j + 8], _mm512_set1_epi32(*a.add(j + 8)));
            }
            let isum = _mm512_add_epi32(lo, hi);
            let s = _mm512_mul_ps(dw, _mm512_set1_ps(*ch.ad[c].add(b)));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, *acc);
        }
    }
    for (out, acc) in ch.out.iter().zip(acc) {
        _mm512_mask_storeu_ps(out.add(col), mask, acc);
    }
}
