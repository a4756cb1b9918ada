//! The AVX-VNNI panel kernels: the panels of `panel` on CPUs with AVX-VNNI (VEX-encoded
//! `vpdpbusd` / `vpdpwssd` on ymm registers) and no AVX-512, such as Alder Lake and later
//! clients and Sierra Forest. Like every panel kernel they give the scalar reference's bits
//! (`panel::panel_dot_ref`, `panel::wide_dot_ref`), so an output never depends on the kernel.
//!
//! A call takes a whole panel (16 lanes, two ymm halves) against up to [`CALL_ROWS`]
//! activation rows of a chunk, every block of the row: the AVX512-VNNI kernels' pair of panels
//! (`panel_avx512`) at half the width. Why whole panels: with one half per call (the AVX2
//! kernels' shape) every `vpdpbusd` needed its own broadcast activation dword and the loads
//! bound the kernel; with both halves each broadcast feeds two (measured: about a quarter
//! less time at m = 1, docs/BENCHMARKS.md, "AVX-VNNI panels"). Each block's integer sum is
//! one instruction per row and quant dword instead of the AVX2 `vpmaddubsw` + `vpaddw`
//! (+ `vpmaddwd` per block):
//! - Q4_0 / Q4_1: `vpdpbusd` of the unsigned nibbles by the signed activation bytes, started
//!   from the plan's bias correction (Q4_0: `-8 * sum(a)`), as the reference sums.
//! - Q8_0: `vpdpbusd` of the stored bytes as they are (`w ^ 0x80` is `w + 128` unsigned),
//!   started from `-128 * sum(a)`: the reference's own sum. (The AVX2 kernel's sign trick,
//!   `vpsignb` of the activation per row before its product, costs one more instruction per
//!   row and dword for the same sum: Q8_0 took 1.6 to 2x the time with it, measured.)
//! - wide Q8_0 (16-bit activations, the output head): `vpdpwssd` ([`dpwssd_reg`]) of the
//!   sign-extended weight pairs by each row's broadcast pair dword, the exact sum the AVX2
//!   `vpmaddwd` + `vpaddd` give.
//!
//! Every i32 sum is exact: no saturating form is used and none can overflow (at most
//! `32 * 255 * 128` in magnitude for bytes, `32 * 127 * 32767` for pairs).
//!
//! The per-block scaling ([`add_block`]), the stores and the prefetch are the AVX2 kernels'
//! own code, so both families round alike by construction.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA, F16C and AVX-VNNI (the
//! plan is built only after `PanelKernel::AvxVnni.available()` said so), the panel pointer
//! addresses `nb` records of the format, the chunk pointers address `nb` blocks of the packed
//! activations for the call's rows, and each `out[c] + col` is valid for the lanes in `bits`.

use std::arch::x86_64::*;

use super::panel_avx2::{add_block, ask_for, store};
use super::panel_avx512::{Chunk, WideChunk, CH};
use crate::quant::QK;

/// Activation rows per call of [`panel_whole`] and [`wide_whole`]: each row holds two integer
/// sums (one per half) and two accumulators; at 6 rows the sums and the weights fill the 16
/// ymm registers and the accumulators, touched once per block, spill. Measured against 3, 4 and
/// 8 rows (docs/BENCHMARKS.md, "AVX-VNNI panels").
pub(crate) const CALL_ROWS: usize = 6;
pub(crate) const WIDE_CALL_ROWS: usize = 6;

/// The panel at `panel` (format given by `MIN`, `NIB`, `BIAS`, as the AVX2 `panel_half`'s)
/// against the chunk's first `C` rows (`C <= CALL_ROWS`): per block and quant dword, both
/// halves' weights are loaded (Q4: split into nibbles) once, then each row's activation dword is
/// broadcast once for the two halves' `vpdpbusd`. Lanes `bits` (bit `i`: row `i` of the panel)
/// go to columns `col..col + 16` of each output row. Block `b` of the panel at `ahead` (null:
/// none) is asked for alongside block `b` of this one, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn panel_whole<
    const C: usize,
    const MIN: bool,
    const NIB: bool,
    const BIAS: bool,
>(
    nb: usize,
    rec: usize,
    scale_bytes: usize,
    (panel, ahead): (*const u8, *const u8),
    ch: &Chunk<C>,
    (col, bits): (usize, u16),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [[_mm256_setzero_ps(); C]; 2];
        let low = _mm256_set1_epi8(0x0F);
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let q = r.add(scale_bytes);
            let (qs, terms) = (ch.qs.add(b * CH * QK), ch.terms.add(b * 2 * CH));
            let mut isum = [[_mm256_setzero_si256(); C]; 2];
            if BIAS {
                each_row!(C, c => {
                    isum[0][c] = _mm256_set1_epi32(*ch.corr.add(b * CH + c));
                    isum[1][c] = isum[0][c];
                });
            }
            // Quant dword j of the 16 rows (nibbles: dwords j and j + 4).
            let steps = if NIB { 4 } else { 8 };
            for j in 0..steps {
                let x0 = _mm256_loadu_si256(q.add(64 * j).cast());
                let x1 = _mm256_loadu_si256(q.add(64 * j + 32).cast());
                let (w0, w1) = if NIB {
                    (_mm256_and_si256(x0, low), _mm256_and_si256(x1, low))
                } else {
                    (x0, x1)
                };
                each_row!(C, c => {
                    let a = qs.add(c * QK).cast::<i32>();
                    let xa = _mm256_set1_epi32(a.add(j).read_unaligned());
                    isum[0][c] = _mm256_dpbusd_avx_epi32(isum[0][c], w0, xa);
                    isum[1][c] = _mm256_dpbusd_avx_epi32(isum[1][c], w1, xa);
                });
                if NIB {
                    let h0 = _mm256_and_si256(_mm256_srli_epi16::<4>(x0), low);
                    let h1 = _mm256_and_si256(_mm256_srli_epi16::<4>(x1), low);
                    each_row!(C, c => {
                        let a = qs.add(c * QK).cast::<i32>();
                        let xa = _mm256_set1_epi32(a.add(j + 4).read_unaligned());
                        isum[0][c] = _mm256_dpbusd_avx_epi32(isum[0][c], h0, xa);
                        isum[1][c] = _mm256_dpbusd_avx_epi32(isum[1][c], h1, xa);
                    });
                }
            }
            add_block::<C, MIN>((r, 0), terms, &isum[0], &mut acc[0]);
            add_block::<C, MIN>((r, 1), terms, &isum[1], &mut acc[1]);
        }
        store(&ch.out, col, bits as u8, &acc[0]);
        store(&ch.out, col + 8, (bits >> 8) as u8, &acc[1]);
    }
}

/// [`panel_whole`] for the wide Q8_0 format against 16-bit activation rows
/// (`panel::pack_act16`): per block and pair dword `j`, both halves' weight pairs are
/// sign-extended once and each row's dword broadcast once for the two `vpdpwssd`.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn wide_whole<const C: usize>(
    nb: usize,
    rec: usize,
    (panel, ahead): (*const u8, *const u8),
    ch: &WideChunk<C>,
    (col, bits): (usize, u16),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [[_mm256_setzero_ps(); C]; 2];
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let (pairs, ad) = (ch.pairs.add(b * CH * QK / 2), ch.ad.add(b * CH));
            let mut isum = [[_mm256_setzero_si256(); C]; 2];
            for j in 0..QK / 2 {
                let w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(r.add(32 + 32 * j).cast()));
                let w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(r.add(32 + 32 * j + 16).cast()));
                each_row!(C, c => {
                    let x = _mm256_set1_epi32(*pairs.add(c * QK / 2 + j));
                    isum[0][c] = dpwssd_reg(isum[0][c], w0, x);
                    isum[1][c] = dpwssd_reg(isum[1][c], w1, x);
                });
            }
            add_block::<C, false>((r, 0), ad, &isum[0], &mut acc[0]);
            add_block::<C, false>((r, 1), ad, &isum[1], &mut acc[1]);
        }
        store(&ch.out, col, bits as u8, &acc[0]);
        store(&ch.out, col + 8, (bits >> 8) as u8, &acc[1]);
    }
}

/// `acc + vpdpwssd(w, x)` as one VEX instruction. Written out because LLVM otherwise splits
/// `_mm256_dpwssd_avx_epi32` into `vpmaddwd` + `vpaddd` (seen in the disassembly), two
/// instructions where one does (as `panel_avx512`'s `dpwssd_reg` on zmm).
///
/// # Safety
/// AVX-VNNI.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn dpwssd_reg(acc: __m256i, w: __m256i, x: __m256i) -> __m256i {
    let mut acc = acc;
    // SAFETY: a register-only instruction of a feature this fn is compiled for; it reads and
    // writes only the named registers.
    unsafe {
        std::arch::asm!(
            "{{vex}} vpdpwssd {acc}, {w}, {x}",
            acc = inout(ymm_reg) acc,
            w = in(ymm_reg) w,
            x = in(ymm_reg) x,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}
