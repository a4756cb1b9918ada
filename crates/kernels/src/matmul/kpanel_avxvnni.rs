//! The AVX-VNNI k-quant panel kernel: half a panel of `kpanel` (8 of its 16 weight rows, one
//! ymm register per quant dword) against up to [`CALL_ROWS`] Q8_K activation rows, every
//! super-block of the row, giving the scalar reference's bits (`kpanel::kpanel_dot_ref`) like
//! the AVX2 and AVX512-VNNI kernels, for CPUs with AVX-VNNI but no AVX-512 (Alder Lake and
//! later clients, Sierra Forest) or where `OXLLM_ISA=avxvnni` caps the choice.
//!
//! The AVX512-VNNI kernel's algorithm on ymm half panels: the VEX `vpdpbusd` adds each dword's
//! four products of the 8 rows' unsigned quants (decoded by `kpanel_avx2::quants`: Q4_K
//! `0..=15`, Q5_K `0..=31`, Q6_K `0..=63`) and a broadcast activation dword straight into an
//! exact i32 sum per scale group (a 32-quant sub-block; Q6_K a 16-quant group), which one
//! `vpmulld` by the group's scale adds into the super-block's `isum`; no i16 sums, so no
//! flushes. (Group sums of at most 16 quants fit an i16, so a Q4_K sub-block's two halves
//! could be put side by side and scaled by one `vpdpwssd`; it measured no faster at 4 rows and
//! slower at 8, see docs/BENCHMARKS.md.) Q6_K's `-32` offset, the mins and the float steps
//! are the AVX2 kernel's own (`kpanel_avx2::block_end`), in the reference's order.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA, F16C and AVX-VNNI
//! (`PanelKernel::AvxVnni.available()`, checked before a plan picks this kernel), the panel
//! pointer addresses `nb` records of the format, each activation row pointer addresses `nb`
//! Q8_K blocks, and each `out[c] + col` is valid for the lanes set in `bits`.

use std::arch::x86_64::*;

use super::kpanel::{KPanelFormat, A_BYTES, A_QS, Q6K};
use super::kpanel_avx2::{ask_for, block_end, quants, store};
use super::panel::P;

/// Activation rows per kernel call: each keeps a group sum, a super-block sum and an
/// accumulator, 24 registers at 8 rows beside the weights, so some spill; still, 8 beat 4 and
/// 6 for every format (single thread, best of 300 calls, docs/BENCHMARKS.md "AVX-VNNI k-quant
/// panels": Q6_K 2048x768 at m = 128 2.8-3.2 ms against 3.7-4.0 at 4 rows).
pub(crate) const CALL_ROWS: usize = 8;

/// Half `h` of the k-panel at `panel` (format `f`, kind `K`) against the `C` activation rows
/// `acts` (`C <= CALL_ROWS`); lanes `bits` go to columns `col..col + 8` of each `out` row.
/// Block `b` of the panel at `ahead` (null: none) is asked for alongside block `b` of this
/// one, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn kpanel_half_vnni<const C: usize, const K: u8>(
    f: &KPanelFormat,
    nb: usize,
    (panel, h, ahead): (*const u8, usize, *const u8),
    acts: &[*const u8; C],
    out: &[*mut f32; C],
    (col, bits): (usize, u8),
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let mut acc = [_mm256_setzero_ps(); C];
        let low = _mm256_set1_epi8(0x0F);
        let half = 32 * h;
        let rec = f.record;
        // Q4_K/Q5_K: 8 sub-blocks of 8 dwords; Q6_K: 16 groups of 4.
        let (groups, dwords) = if K == Q6K { (16, 4) } else { (8, 8) };
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let a: [*const u8; C] = std::array::from_fn(|c| acts[c].add(b * A_BYTES));
            let mut isum = [_mm256_setzero_si256(); C];
            for g in 0..groups {
                let mut group = [_mm256_setzero_si256(); C];
                for d in 0..dwords {
                    // Dword `k` of 32-quant sub-block `j`.
                    let (j, k) = if K == Q6K {
                        (g / 2, 4 * (g % 2) + d)
                    } else {
                        (g, d)
                    };
                    let w = quants::<K>(f, r, half, j, k, low);
                    each_row!(C, c => {
                        let x = _mm256_set1_epi32(a[c].add(A_QS + 32 * j + 4 * k).cast::<i32>().read_unaligned());
                        group[c] = _mm256_dpbusd_avx_epi32(group[c], w, x);
                    });
                }
                let s = _mm_loadl_epi64(r.add(f.sc + g * P + 8 * h).cast());
                let sc = if K == Q6K {
                    _mm256_cvtepi8_epi32(s)
                } else {
                    _mm256_cvtepu8_epi32(s)
                };
                each_row!(C, c => {
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(group[c], sc));
                });
            }
            block_end::<C, K>(f, r, h, &a, isum, &mut acc);
        }
        store(out, col, bits, &acc);
    }
}
