//! The AVX-VNNI k-quant panel kernel: half a panel of `kpanel` (8 of its 16 weight rows, one
//! ymm register per quant dword) against up to [`CALL_ROWS`] Q8_K activation rows, every
//! super-block of the row, giving the scalar reference's bits (`kpanel::kpanel_dot_ref`) like
//! the AVX2 and AVX512-VNNI kernels, for CPUs with AVX-VNNI but no AVX-512 (Alder Lake and
//! later clients, Sierra Forest) or where `OXLLM_ISA=avxvnni` caps the choice.
//!
//! Q4_K and Q5_K take the AVX512-VNNI kernel's algorithm on ymm half panels: the VEX
//! `vpdpbusd` adds each dword's four products of the 8 rows' unsigned quants (decoded by
//! `kpanel_avx2::quants`: Q4_K `0..=15`, Q5_K `0..=31`) and a broadcast activation dword
//! straight into an exact i32 sum per 32-quant sub-block, which one `vpmulld` by the
//! sub-block's scale adds into the super-block's `isum`: no i16 sums, so no flushes. Q6_K
//! (`0..=63`, a scale per 16 quants) keeps the AVX2 kernel's `vpmaddubsw` pairs of two dwords
//! summed in i16 and scales them into `isum` by one `vpdpwssd` (the `vpmaddwd` and the add in
//! one): its group sums would take a `vpmulld` every 4 dwords and a third register per row,
//! and measured slower than the AVX2 kernel that way. Alternatives measured and not kept
//! (docs/BENCHMARKS.md, "AVX-VNNI k-quant panels"): Q4_K sub-blocks as two 16-quant halves (each
//! an i16) side by side in a dword, scaled by one `vpdpwssd` instead of `vpmulld`; two sums per
//! group to shorten the `vpdpbusd` chains; 4 or 6 rows a call. Q6_K's `-32` offset, the mins
//! and the float steps are the AVX2 kernel's own (`kpanel_avx2::block_end`), in the
//! reference's order.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA, F16C and AVX-VNNI
//! (`PanelKernel::AvxVnni.available()`, checked before a plan picks this kernel), the panel
//! pointer addresses `nb` records of the format, each activation row pointer addresses `nb`
//! Q8_K blocks, and each `out[c] + col` is valid for the lanes set in `bits`.

use std::arch::x86_64::*;

use super::kpanel::{KPanelFormat, A_BYTES, A_QS, Q6K};
use super::kpanel_avx2::{ask_for, block_end, dup_pairs, quants, store};
use super::panel::P;

/// Activation rows per kernel call: at 8, Q4_K/Q5_K keep a sub-block sum, a super-block sum
/// and an accumulator per row, 24 registers beside the weights, so some spill; 8 still beat 4
/// and 6 for every format (single thread, best of 300 calls; docs/BENCHMARKS.md).
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
        for b in 0..nb {
            let r = panel.add(b * rec);
            ask_for(ahead, b * rec, rec);
            let a: [*const u8; C] = std::array::from_fn(|c| acts[c].add(b * A_BYTES));
            let mut isum = [_mm256_setzero_si256(); C];
            if K == Q6K {
                q6_k_sums(f, r, h, &a, &mut isum, low);
            } else {
                // Q4_K/Q5_K: one sum per 32-quant sub-block `j`, scaled by `vpmulld`.
                for j in 0..8 {
                    let mut group = [_mm256_setzero_si256(); C];
                    for k in 0..8 {
                        let w = quants::<K>(f, r, half, j, k, low);
                        each_row!(C, c => {
                            let x = _mm256_set1_epi32(a[c].add(A_QS + 32 * j + 4 * k).cast::<i32>().read_unaligned());
                            group[c] = _mm256_dpbusd_avx_epi32(group[c], w, x);
                        });
                    }
                    let s = _mm_loadl_epi64(r.add(f.sc + j * P + 8 * h).cast());
                    let sc = _mm256_cvtepu8_epi32(s);
                    each_row!(C, c => {
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(group[c], sc));
                    });
                }
            }
            block_end::<C, K>(f, r, h, &a, isum, &mut acc);
        }
        store(out, col, bits, &acc);
    }
}

/// Q6_K's `sum scale * q * a` per lane of half `h` of the record at `r`, added to `isum`, as
/// the AVX2 kernel builds it (`vpmaddubsw` pairs of two dwords summed in i16) but scaled and
/// added by one `vpdpwssd`: only the `C` i32 sums live across dwords.
#[inline(always)]
unsafe fn q6_k_sums<const C: usize>(
    f: &KPanelFormat,
    r: *const u8,
    h: usize,
    a: &[*const u8; C],
    isum: &mut [__m256i; C],
    low: __m256i,
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let half = 32 * h;
        for j in 0..8 {
            for k in (0..8).step_by(2) {
                let w0 = quants::<Q6K>(f, r, half, j, k, low);
                let w1 = quants::<Q6K>(f, r, half, j, k + 1, low);
                // 16-quant groups: scale 2j + k/4.
                let s = r.add(f.sc + (2 * j + k / 4) * P + 8 * h);
                let sc = dup_pairs(s, s, true);
                each_row!(C, c => {
                    let at = a[c].add(A_QS + 32 * j + 4 * k).cast::<i32>();
                    let x0 = _mm256_set1_epi32(at.read_unaligned());
                    let x1 = _mm256_set1_epi32(at.add(1).read_unaligned());
                    let pair = _mm256_add_epi16(
                        _mm256_maddubs_epi16(w0, x0),
                        _mm256_maddubs_epi16(w1, x1),
                    );
                    isum[c] = _mm256_dpwssd_avx_epi32(isum[c], pair, sc);
                });
            }
        }
    }
}
