//! The AVX512-VNNI panel kernels: a pair of panels (2 x 16 weight rows) against up to 8
//! activation rows of a chunk, every block of the row (see `panel` for the layouts and the
//! arithmetic they reproduce bit for bit).
//!
//! Why pairs: on this class of CPU a broadcast from memory into a zmm register (like any
//! 512-bit load) issues about once per cycle, `vpdpbusd` about twice. With one panel per call
//! every `vpdpbusd` needed its own broadcast activation dword and the loads bound the kernel;
//! with two, each broadcast feeds both panels. Per block and quant dword `j`, both panels'
//! weight registers are loaded (Q4: split into nibbles) once, then every row broadcasts its
//! dword `j` and adds it into one exact integer sum per panel; after the block, per row and
//! panel one convert, one scale multiply and one (Q4_1: two) fma into 16 outputs. The rows'
//! activations are packed chunk-major (`panel::pack_acts`) so that a row's dwords and terms
//! sit at fixed offsets from one pointer per block, and the per-row code is expanded per row
//! (`each_row!`, defined in `matmul`) so its sums and accumulators are registers.
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX512F/BW/VL/VNNI (checked by
//! [`available`] before a plan is built), each panel pointer addresses `nb` records of the
//! format, and the chunk pointers address `nb` blocks of the packed activations.

use std::arch::x86_64::*;

use crate::quant::QK;

/// Activation rows per kernel call, and per chunk of the packed activations.
pub(crate) const CH: usize = 16;

/// Whether this CPU runs the panel kernel.
pub(crate) fn available() -> bool {
    crate::quant::avx512_allowed()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// Where one chunk's inputs (`panel::pack_acts` layout) and outputs are.
pub(crate) struct Chunk<const C: usize> {
    /// The chunk's quants: per block, [`CH`] rows of 32 bytes.
    pub qs: *const u8,
    /// Per block, [`CH`] activation scales then [`CH`] block sums (`sa`).
    pub terms: *const f32,
    /// Per block, [`CH`] bias corrections (formats with a bias only).
    pub corr: *const i32,
    /// Each output row; a call writes lanes `masks[k]` of panel `k` at column `cols[k]`.
    pub out: [*mut f32; C],
}

/// Activation rows per call of [`panel_pair`] and [`wide_pair`]: 8 rows' two integer sums
/// and two accumulators take the 32 vector registers (the accumulators, touched once per
/// block, are the ones that spill); fewer rows per call reload the weights more often.
pub(crate) const PAIR_ROWS: usize = 8;

/// Two panels (`panels`, each `nb` records of `rec` bytes, scales first) against the chunk's
/// first `C` rows (`C <= PAIR_ROWS`); output lanes `masks[k]` of panel `k` go to column
/// `cols[k]` of each output row. Block `b` of the pair `ahead` (nulls: none) is asked for
/// alongside block `b` of this pair, never read.
///
/// # Safety
/// See the module's contract; `out[c] + cols[k]` is valid for the lanes set in `masks[k]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn panel_pair<
    const C: usize,
    const MIN: bool,
    const NIB: bool,
    const BIAS: bool,
>(
    nb: usize,
    rec: usize,
    scale_bytes: usize,
    [panels, ahead]: [[*const u8; 2]; 2],
    ch: &Chunk<C>,
    (cols, masks): ([usize; 2], [u16; 2]),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [[_mm512_setzero_ps(); C]; 2];
        let low = _mm512_set1_epi8(0x0F);
        for b in 0..nb {
            let (r0, r1) = (panels[0].add(b * rec), panels[1].add(b * rec));
            ask_for(ahead, b * rec, rec);
            let (q0, q1) = (r0.add(scale_bytes), r1.add(scale_bytes));
            let (qs, terms) = (ch.qs.add(b * CH * QK), ch.terms.add(b * 2 * CH));
            let corr = ch.corr.add(b * CH);
            let mut isum = [[_mm512_setzero_si512(); C]; 2];
            if BIAS {
                each_row!(C, c => {
                    isum[0][c] = _mm512_set1_epi32(*corr.add(c));
                    isum[1][c] = isum[0][c];
                });
            }
            // Quant dwords j (and j + 4 for nibbles) of both panels, each activation dword
            // broadcast once for the two.
            let steps = if NIB { 4 } else { 8 };
            for j in 0..steps {
                let x0 = _mm512_loadu_si512(q0.add(64 * j).cast());
                let x1 = _mm512_loadu_si512(q1.add(64 * j).cast());
                let (w0, w1) = if NIB {
                    (_mm512_and_si512(x0, low), _mm512_and_si512(x1, low))
                } else {
                    (x0, x1)
                };
                each_row!(C, c => {
                    let a = qs.add(c * QK).cast::<i32>();
                    let x = _mm512_set1_epi32(a.add(j).read_unaligned());
                    isum[0][c] = _mm512_dpbusd_epi32(isum[0][c], w0, x);
                    isum[1][c] = _mm512_dpbusd_epi32(isum[1][c], w1, x);
                });
                if NIB {
                    let h0 = _mm512_and_si512(_mm512_srli_epi16::<4>(x0), low);
                    let h1 = _mm512_and_si512(_mm512_srli_epi16::<4>(x1), low);
                    each_row!(C, c => {
                        let a = qs.add(c * QK).cast::<i32>();
                        let x = _mm512_set1_epi32(a.add(j + 4).read_unaligned());
                        isum[0][c] = _mm512_dpbusd_epi32(isum[0][c], h0, x);
                        isum[1][c] = _mm512_dpbusd_epi32(isum[1][c], h1, x);
                    });
                }
            }
            let dw = [
                _mm512_cvtph_ps(_mm256_loadu_si256(r0.cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(r1.cast())),
            ];
            each_row!(C, c => {
                let ad = _mm512_set1_ps(*terms.add(c));
                for k in 0..2 {
                    let s = _mm512_mul_ps(dw[k], ad);
                    acc[k][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k][c]), s, acc[k][c]);
                }
            });
            if MIN {
                let mw = [
                    _mm512_cvtph_ps(_mm256_loadu_si256(r0.add(32).cast())),
                    _mm512_cvtph_ps(_mm256_loadu_si256(r1.add(32).cast())),
                ];
                each_row!(C, c => {
                    let sa = _mm512_set1_ps(*terms.add(CH + c));
                    for k in 0..2 {
                        acc[k][c] = _mm512_fmadd_ps(mw[k], sa, acc[k][c]);
                    }
                });
            }
        }
        for k in 0..2 {
            for (out, acc) in ch.out.iter().zip(acc[k]) {
                _mm512_mask_storeu_ps(out.add(cols[k]), masks[k], acc);
            }
        }
    }
}

/// Where one chunk of 16-bit activation rows (`panel::pack_act16` layout) and its outputs are
/// (the wide kernel).
pub(crate) struct WideChunk<const C: usize> {
    /// The rows' pairs: per block, [`CH`] rows of 16 i32 (this call's first row at the start).
    pub pairs: *const i32,
    /// Per block, [`CH`] activation scales (likewise).
    pub ad: *const f32,
    /// Each output row; a call writes lanes `masks[k]` of panel `k` at column `cols[k]`.
    pub out: [*mut f32; C],
}

/// Two wide Q8_0 panels against the chunk's first `C` rows (`C <= PAIR_ROWS`), output lanes
/// `masks[k]` of panel `k` to column `cols[k]`: per block and pair dword `j`, both panels'
/// weight pairs are sign-extended once and every row's dword broadcast once for the two
/// `vpdpwssd`; then per row and panel one convert, one multiply and one fma. `ahead` as in
/// [`panel_pair`].
///
/// # Safety
/// See the module's contract; `out[c] + cols[k]` is valid for the lanes set in `masks[k]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(crate) unsafe fn wide_pair<const C: usize>(
    nb: usize,
    rec: usize,
    [panels, ahead]: [[*const u8; 2]; 2],
    ch: &WideChunk<C>,
    (cols, masks): ([usize; 2], [u16; 2]),
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = [[_mm512_setzero_ps(); C]; 2];
        for b in 0..nb {
            let (r0, r1) = (panels[0].add(b * rec), panels[1].add(b * rec));
            ask_for(ahead, b * rec, rec);
            let (pairs, ad) = (ch.pairs.add(b * CH * QK / 2), ch.ad.add(b * CH));
            let mut isum = [[_mm512_setzero_si512(); C]; 2];
            for j in 0..QK / 2 {
                let w0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(r0.add(32 + 32 * j).cast()));
                let w1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(r1.add(32 + 32 * j).cast()));
                each_row!(C, c => {
                    let x = _mm512_set1_epi32(*pairs.add(c * QK / 2 + j));
                    isum[0][c] = dpwssd_reg(isum[0][c], w0, x);
                    isum[1][c] = dpwssd_reg(isum[1][c], w1, x);
                });
            }
            let dw = [
                _mm512_cvtph_ps(_mm256_loadu_si256(r0.cast())),
                _mm512_cvtph_ps(_mm256_loadu_si256(r1.cast())),
            ];
            each_row!(C, c => {
                let a = _mm512_set1_ps(*ad.add(c));
                for k in 0..2 {
                    let s = _mm512_mul_ps(dw[k], a);
                    acc[k][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[k][c]), s, acc[k][c]);
                }
            });
        }
        for k in 0..2 {
            for (out, acc) in ch.out.iter().zip(acc[k]) {
                _mm512_mask_storeu_ps(out.add(cols[k]), masks[k], acc);
            }
        }
    }
}

/// Asks for bytes `at..at + len` of both panels of `pair` (a null pair: nothing) into the
/// caches, without waiting for them.
#[inline(always)]
fn ask_for(pair: [*const u8; 2], at: usize, len: usize) {
    for p in pair {
        if p.is_null() {
            return;
        }
        let start = p.wrapping_add(at) as usize;
        let mut line = start & !63;
        while line < start + len {
            // SAFETY: a prefetch is a hint that never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            line += 64;
        }
    }
}

/// `acc + vpdpwssd(w, x)` as one instruction. Written out because LLVM otherwise splits it
/// into `vpmaddwd` + `vpaddd` (two instructions on the ports that bound this kernel),
/// trading throughput for a shorter dependency chain.
///
/// # Safety
/// AVX512-VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpwssd_reg(acc: __m512i, w: __m512i, x: __m512i) -> __m512i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let mut acc = acc;
        std::arch::asm!(
            "vpdpwssd {acc}, {w}, {x}",
            acc = inout(zmm_reg) acc,
            w = in(zmm_reg) w,
            x = in(zmm_reg) x,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    }
}
