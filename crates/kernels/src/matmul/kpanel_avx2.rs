//! The AVX2 k-quant panel kernel: half a panel of `kpanel` (8 of its 16 weight rows) against
//! up to [`CALL_ROWS`] Q8_K activation rows, every super-block of the row, giving the scalar
//! reference's bits (`kpanel::kpanel_dot_ref`) for every output whatever the batch.
//!
//! Per super-block and 4-quant dword `(j, k)` (sub-block `j` of 32, dword `k` in it), the 8
//! rows' quants are decoded once into one register of unsigned bytes (Q4_K nibbles `0..=15`,
//! Q5_K with the fifth bit `0..=31`, Q6_K six bits `0..=63`), and each activation row's dword
//! is broadcast into one `vpmaddubsw`: i16 pairs of at most `2 * 63 * 128`. Pairs add up in
//! i16 over [`flush`] dwords (the most that cannot overflow: 8 for Q4_K, 4 for Q5_K, 2 for
//! Q6_K), then one `vpmaddwd` by the lanes' scale (both i16 of a lane) makes the exact i32
//! `scale * sum`. Q6_K's `-32` offset is `-32 * sum_g sc_g * bsum_g`, and the Q4_K/Q5_K mins
//! `sum_j mn_j * (bsum_2j + bsum_2j+1)`, both exact from Q8_K's `bsums` with `vpmaddwd`. Then
//! per row one convert, one multiply by the scales and one fma (mins: a second, negated).
//!
//! Safety contract of every `unsafe fn` here: the CPU has AVX2, FMA and F16C (a plan is built
//! only after `quant::detected_isa()` said so), the panel pointer addresses `nb` records of the
//! format, each activation row pointer addresses `nb` Q8_K blocks, and each `out[c] + col` is
//! valid for the lanes set in `bits`.

use std::arch::x86_64::*;

use super::kpanel::{KPanelFormat, A_BSUMS, A_BYTES, A_QS, Q4K, Q5K, Q6K};
use super::panel::P;

/// Activation rows per kernel call: each keeps an accumulator, an i32 sum and an i16 sum
/// beside the weight and constant registers; 16 ymm registers hold them for 4 rows. At 8 some
/// spill, which costs less than unpacking every half panel four times at batch 16 instead of
/// twice: single-thread m = 16, 2048x768, AVX2, best of 500 (docs/BENCHMARKS.md, sitting 9):
/// Q6_K 458-461 us against 525-541 us at 4, Q4_K and Q5_K within the noise.
pub(crate) const CALL_ROWS: usize = 8;

/// Quant dwords whose `vpmaddubsw` pairs may add up in i16 before a `vpmaddwd` (see the
/// module doc; activations are at most 128 in magnitude). Q6_K's 2 is `q6_k_sums`' pairs.
const fn flush(kind: u8) -> usize {
    match kind {
        Q4K => 8,
        Q5K => 4,
        _ => 2,
    }
}

/// Half `h` of the k-panel at `panel` (format `f`, kind `K`) against the `C` activation rows
/// `acts` (`C <= CALL_ROWS`); lanes `bits` go to columns `col..col + 8` of each `out` row.
/// Block `b` of the panel at `ahead` (null: none) is asked for alongside block `b` of this
/// one, never read.
///
/// # Safety
/// See the module's contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn kpanel_half<const C: usize, const K: u8>(
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
                for j in 0..8 {
                    let mut s16 = [_mm256_setzero_si256(); C];
                    for k in 0..8 {
                        let w = quants::<K>(f, r, half, j, k, low);
                        each_row!(C, c => {
                            let x = _mm256_set1_epi32(a[c].add(A_QS + 32 * j + 4 * k).cast::<i32>().read_unaligned());
                            s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(w, x));
                        });
                        if (k + 1).is_multiple_of(flush(K)) {
                            // One scale per sub-block.
                            let s = r.add(f.sc + j * P + 8 * h);
                            let sc = dup_pairs(s, s, false);
                            each_row!(C, c => {
                                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], sc));
                                s16[c] = _mm256_setzero_si256();
                            });
                        }
                    }
                }
            }
            block_end::<C, K>(f, r, h, &a, isum, &mut acc);
        }
        store(out, col, bits, &acc);
    }
}

/// The end of super-block `r` for half `h` once `isum` holds each row's `sum scale * q * a`
/// over the quants as stored (Q6_K's unsigned, `0..=63`): Q6_K's `-32` offset from `bsums`,
/// then the reference's float steps into `acc` (Q4_K/Q5_K: and the mins). Shared by the AVX2
/// and AVX-VNNI kernels, which differ only in how they build `isum`.
#[inline(always)]
pub(crate) unsafe fn block_end<const C: usize, const K: u8>(
    f: &KPanelFormat,
    r: *const u8,
    h: usize,
    a: &[*const u8; C],
    mut isum: [__m256i; C],
    acc: &mut [__m256; C],
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        if K == Q6K {
            // -32 * sum_g sc_g * bsum_g, by pairs of groups.
            let mut off = [_mm256_setzero_si256(); C];
            for i in 0..8 {
                let s = r.add(f.sc + 2 * i * P + 8 * h);
                let sc = dup_pairs(s, s.add(P), true);
                each_row!(C, c => {
                    let bs = _mm256_set1_epi32(a[c].add(A_BSUMS + 4 * i).cast::<i32>().read_unaligned());
                    off[c] = _mm256_add_epi32(off[c], _mm256_madd_epi16(sc, bs));
                });
            }
            each_row!(C, c => {
                isum[c] = _mm256_sub_epi32(isum[c], _mm256_slli_epi32::<5>(off[c]));
            });
        }
        let dw = _mm256_cvtph_ps(_mm_loadu_si128(r.add(f.d + 16 * h).cast()));
        each_row!(C, c => {
            let da = _mm256_set1_ps(a[c].cast::<f32>().read_unaligned());
            let s = _mm256_mul_ps(dw, da);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), s, acc[c]);
        });
        if K != Q6K {
            // sum_j mn_j * (bsum_2j + bsum_2j+1): each lane's min in both i16 of its dword
            // against the broadcast dword of the two bsums.
            let mut imin = [_mm256_setzero_si256(); C];
            for j in 0..8 {
                let m = r.add(f.mn + j * P + 8 * h);
                let mn = dup_pairs(m, m, false);
                each_row!(C, c => {
                    let bs = _mm256_set1_epi32(a[c].add(A_BSUMS + 4 * j).cast::<i32>().read_unaligned());
                    imin[c] = _mm256_add_epi32(imin[c], _mm256_madd_epi16(mn, bs));
                });
            }
            let dm = _mm256_cvtph_ps(_mm_loadu_si128(r.add(f.dmin + 16 * h).cast()));
            each_row!(C, c => {
                let da = _mm256_set1_ps(a[c].cast::<f32>().read_unaligned());
                let s = _mm256_mul_ps(dm, da);
                acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin[c]), s, acc[c]);
            });
        }
    }
}

/// Q6_K's `sum scale * q * a` per lane of half `h` of the record at `r`, added to `isum`.
/// Its i16 pairs must go to i32 after every second dword, so each row's two dwords are summed
/// and scaled at once: no i16 sums live across rows, and the `C` i32 sums stay in registers
/// (with per-row i16 sums beside them, 8 rows spilled to the stack at every dword).
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
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pair, sc));
                });
            }
        }
    }
}

/// The 8 lanes' unsigned quants of dword `k` of sub-block `j` in the record at `r`.
#[inline(always)]
pub(crate) unsafe fn quants<const K: u8>(
    f: &KPanelFormat,
    r: *const u8,
    half: usize,
    j: usize,
    k: usize,
    low: __m256i,
) -> __m256i {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let ld = |at: usize| _mm256_loadu_si256(r.add(at + half).cast::<__m256i>());
        if K == Q6K {
            // Low nibbles of ql dword 16(j/4) + 8(j%4 & 1) + k (high nibbles for j%4 >= 2),
            // bits 2(j%4).. of qh dword 8(j/4) + k as bits 4 and 5.
            let (hh, jj) = (j / 4, j % 4);
            let ql = ld(f.qs + 64 * (16 * hh + 8 * (jj & 1) + k));
            let lo = if jj < 2 {
                ql
            } else {
                _mm256_srli_epi16::<4>(ql)
            };
            let qh = ld(f.qh + 64 * (8 * hh + k));
            let shift = _mm_cvtsi32_si128(2 * jj as i32);
            let hi = _mm256_slli_epi16::<4>(_mm256_srl_epi16(qh, shift));
            _mm256_or_si256(
                _mm256_and_si256(lo, low),
                _mm256_and_si256(hi, _mm256_set1_epi8(0x30)),
            )
        } else {
            // Sub-block j: the low nibbles of qs dword 8(j/2) + k for even j, high for odd.
            let x = ld(f.qs + 64 * (8 * (j / 2) + k));
            let x = if j.is_multiple_of(2) {
                x
            } else {
                _mm256_srli_epi16::<4>(x)
            };
            let q = _mm256_and_si256(x, low);
            if K == Q5K {
                // Bit j of qh dword k as bit 4.
                let qh = ld(f.qh + 64 * k);
                let shift = _mm_cvtsi32_si128(j as i32);
                let hi = _mm256_slli_epi16::<4>(_mm256_srl_epi16(qh, shift));
                _mm256_or_si256(q, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)))
            } else {
                q
            }
        }
    }
}

/// 8 lanes' bytes at `p0` and `p1` as i16 pairs `(p0[l], p1[l])` in dword `l` (`signed`:
/// bytes are i8, else u8).
#[inline(always)]
pub(crate) unsafe fn dup_pairs(p0: *const u8, p1: *const u8, signed: bool) -> __m256i {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        let (x0, x1) = (
            _mm_loadl_epi64(p0.cast::<__m128i>()),
            _mm_loadl_epi64(p1.cast::<__m128i>()),
        );
        let bytes = _mm_unpacklo_epi8(x0, x1);
        if signed {
            _mm256_cvtepi8_epi16(bytes)
        } else {
            _mm256_cvtepu8_epi16(bytes)
        }
    }
}

/// Writes lanes `bits` of each row's accumulator to `out[c] + col`.
#[inline(always)]
pub(crate) unsafe fn store<const C: usize>(
    out: &[*mut f32; C],
    col: usize,
    bits: u8,
    acc: &[__m256; C],
) {
    unsafe {
        // SAFETY: the operations below rely only on this fn's contract (the CPU features it is
        // compiled for; pointers and lengths inside the buffers it is given), which its caller upholds.
        if bits == u8::MAX {
            for (o, a) in out.iter().zip(acc) {
                _mm256_storeu_ps(o.add(col), *a);
            }
        } else {
            // Masked lanes are neither written nor touched (no fault past the row's end).
            let pick = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
            let set = _mm256_and_si256(_mm256_set1_epi32(bits as i32), pick);
            let mask = _mm256_cmpeq_epi32(set, pick);
            for (o, a) in out.iter().zip(acc) {
                _mm256_maskstore_ps(o.wrapping_add(col), mask, *a);
            }
        }
    }
}

/// Asks for bytes `at..at + len` of the panel at `p` (null: nothing) into the caches, without
/// waiting for them.
#[inline(always)]
pub(crate) fn ask_for(p: *const u8, at: usize, len: usize) {
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
