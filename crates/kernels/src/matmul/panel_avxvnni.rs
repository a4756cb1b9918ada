//! The AVX-VNNI panel kernels: the panels of `panel` on CPUs with AVX-VNNI (VEX-encoded
//! `vpdpbusd` / `vpdpwssd` on ymm registers) and no AVX-512, such as Alder Lake and later
//! clients and Sierra Forest. Like every panel kernel they give the scalar reference's bits
//! (`panel::panel_dot_ref`, `panel::wide_dot_ref`), so an output never depends on the kernel.
//!
//! A call is the AVX2 kernels' (`panel_avx2`): half a panel (8 lanes) against up to
//! [`CALL_ROWS`] ([`WIDE_CALL_ROWS`]) activation rows of a chunk, every block of the row, each
//! activation dword broadcast into all 8 lanes. Only each block's integer sum differs: it is
//! the AVX512-VNNI kernels' (`panel_avx512`) on a ymm half, one instruction per row and quant
//! dword instead of the AVX2 `vpmaddubsw` + `vpaddw` (+ `vpmaddwd` per block):
//! - Q4_0 / Q4_1: `vpdpbusd` of the unsigned nibbles by the signed activation bytes, started
//!   from the plan's bias correction (Q4_0: `-8 * sum(a)`), as the reference sums.
//! - Q8_0: `vpdpbusd` of the stored bytes as they are (`w ^ 0x80` is `w + 128` unsigned),
//!   started from `-128 * sum(a)`: the reference's own sum. (The AVX2 kernel's sign trick,
//!   `vpsignb` of the activation per row before its product, costs one more instruction per
//!   row and dword for the same sum; measured in docs/BENCHMARKS.md, "AVX-VNNI panels".)
//! - wide Q8_0 (16-bit activations, the output head): `vpdpwssd` ([`dpwssd_reg`]) of the
//!   sign-extended weight pairs by each row's broadcast pair dword, the exact sum the AVX2
//!   `vpmaddwd` + `vpaddd` give. Every i32 sum is exact: no saturating form is used and no sum can overflow (at most
//!   `32 * 255 * 128` for bytes, `32 * 127 * 32767` for pairs).
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

/// Activation rows per call of [`panel_half`]: each row holds an integer sum and an
/// accumulator (16 ymm registers: 6 rows leave room for the weights and the nibble mask).
/// Chosen by measurement (docs/BENCHMARKS.md, "AVX-VNNI panels").
pub(crate) const CALL_ROWS: usize = 6;

/// Activation rows per call of [`wide_half`] (likewise).
pub(crate) const WIDE_CALL_ROWS: usize = 6;

/// Half `h` of the panel at `panel` (format given by `MIN`, `NIB`, `BIAS`, as the AVX2
/// `panel_half`'s) against the chunk's first `C` rows (`C <= CALL_ROWS`); lanes `bits` go to
/// columns `col..col + 8` of each output row. Block `b` of the panel at `ahead` (null: none)
/// is asked for alongside block `b` of this one, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn panel_half<
    const C: usize,
    const MIN: bool,
    const NIB: bool,
    const BIAS: bool,
>(
    nb: usize,
    rec: usize,
    scale_bytes: usize,
    (panel, h, ahead): (*const u8, usize, *const u8),
    ch: &Chunk<C>,
    (col, bits): (usize, u8),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); C];
        let low = _mm256_set1_epi8(0x0F);
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let q = r.add(scale_bytes + 32 * h);
            let (qs, terms) = (ch.qs.add(b * CH * QK), ch.terms.add(b * 2 * CH));
            let mut isum = [_mm256_setzero_si256(); C];
            if BIAS {
                each_row!(C, c => {
                    isum[c] = _mm256_set1_epi32(*ch.corr.add(b * CH + c));
                });
            }
            // Quant dword j of the half's 8 rows (nibbles: dwords j and j + 4).
            let steps = if NIB { 4 } else { 8 };
            for j in 0..steps {
                let x = _mm256_loadu_si256(q.add(64 * j).cast());
                let w = if NIB { _mm256_and_si256(x, low) } else { x };
                each_row!(C, c => {
                    let a = qs.add(c * QK).cast::<i32>();
                    let xa = _mm256_set1_epi32(a.add(j).read_unaligned());
                    isum[c] = _mm256_dpbusd_avx_epi32(isum[c], w, xa);
                });
                if NIB {
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), low);
                    each_row!(C, c => {
                        let a = qs.add(c * QK).cast::<i32>();
                        let xa = _mm256_set1_epi32(a.add(j + 4).read_unaligned());
                        isum[c] = _mm256_dpbusd_avx_epi32(isum[c], hi, xa);
                    });
                }
            }
            add_block::<C, MIN>((r, h), terms, &isum, &mut acc);
        }
        store(&ch.out, col, bits, &acc);
    }
}

/// [`panel_half`] for the wide Q8_0 format against 16-bit activation rows
/// (`panel::pack_act16`): per block and pair dword `j`, the half's 8 weight pairs are
/// sign-extended once and every row's dword broadcast into one `vpdpwssd`.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn wide_half<const C: usize>(
    nb: usize,
    rec: usize,
    (panel, h, ahead): (*const u8, usize, *const u8),
    ch: &WideChunk<C>,
    (col, bits): (usize, u8),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); C];
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let (pairs, ad) = (ch.pairs.add(b * CH * QK / 2), ch.ad.add(b * CH));
            let mut isum = [_mm256_setzero_si256(); C];
            for j in 0..QK / 2 {
                let w = _mm256_cvtepi8_epi16(_mm_loadu_si128(r.add(32 + 32 * j + 16 * h).cast()));
                each_row!(C, c => {
                    let x = _mm256_set1_epi32(*pairs.add(c * QK / 2 + j));
                    isum[c] = dpwssd_reg(isum[c], w, x);
                });
            }
            add_block::<C, false>((r, h), ad, &isum, &mut acc);
        }
        store(&ch.out, col, bits, &acc);
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
