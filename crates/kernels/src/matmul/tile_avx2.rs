//! AVX2+FMA+F16C row-chunk kernels for the prefill GEMM: one weight row against a chunk of up
//! to [`CH`] activation rows. The weight block is unpacked once per chunk and reused for every
//! activation row; activation quants are read as memory operands, so a chunk of 8 rows keeps 8
//! f32x8 accumulators plus one min-term accumulator in registers.
//!
//! Batch invariance (the reason for this shape): the value of output `(i, j)` is computed by
//! the same sequence of IEEE operations whatever the chunk size and the row's position in it:
//! for every block `b` in order, `acc = fma(dw_b * da_b, f32(int lanes of block b), acc)` with
//! one accumulator per output, the min term `ms += mw_b * sa_b` (lane-wise, so identical in a
//! vector of 8 or of 1), then `hsum(acc) + ms`. `m = 1` (decode) runs the chunk kernel with
//! `C = 1`, so a row alone and a row in a batch give bit-identical results.
//!
//! Safety contract of every `unsafe fn` here: AVX2, FMA and F16C are available (the driver in
//! `matmul` checks `detected_isa()`), `w` points at `nb` weight blocks, each `a[c]` at `nb`
//! activation blocks, and `ad`/`asum` at `nb * CH` floats.

use std::arch::x86_64::*;

/// Activation rows per chunk (lanes of the transposed activation scales).
pub(crate) const CH: usize = 8;

/// One (weight block format, activation block format) pair.
pub(crate) trait Format {
    /// Bytes of one weight block / one activation block (32 elements each).
    const W_BYTES: usize;
    const A_BYTES: usize;
    /// Offset of the 32 quants inside an activation block.
    const A_QS: usize;
    /// The activation block carries `s = d * sum(q)` and the weight a min `m` (Q4_1 x Q8_1).
    const HAS_MIN: bool;
    /// `idot` uses AVX-VNNI (`vpdpbusd`): run through [`row_chunk_vnni`], only where the CPU
    /// has `avxvnni`.
    const VNNI: bool = false;
    /// `idot` uses AVX512-VNNI+VL (the same `vpdpbusd` on ymm, EVEX-encoded): run through
    /// `tile_avx512::row_chunk_vnni512`, only where the CPU has `avx512vnni` and `avx512vl`.
    const VNNI512: bool = false;
    /// The zmm pair kernel (`tile_avx512::row_pair_chunk_vnni512`) takes the weight quants as
    /// unsigned bytes `w + BIAS` and subtracts `BIAS * a` per lane from its accumulator start,
    /// which keeps every i32 lane equal to [`Format::idot`]'s.
    const BIAS: i32 = 0;
    /// (d, m) of a weight block as f32 (m = 0 without a min).
    unsafe fn w_scales(p: *const u8) -> (f32, f32);
    /// The weight block's quants, ready for [`Format::idot`].
    unsafe fn w_prep(p: *const u8) -> __m256i;
    /// The weight block's quants as unsigned bytes `w + BIAS` (only the zmm pair kernel calls
    /// it).
    unsafe fn w_prep_unsigned(p: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            Self::w_prep(p)
        }
    }
    /// Exact integer dot of a prepared weight block and 32 activation quants, as 8 i32 lanes.
    unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i;
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let bits = u16::from_le_bytes([*p, *p.add(1)]) as i32;
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn nibbles(p: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let lo = _mm_loadu_si128(p.cast());
        let hi = _mm_srli_epi16::<4>(lo);
        _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0F))
    }
}

/// Signed bytes `x` times signed bytes at `y` (no -128 in y), summed in 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn idot_signed(x: __m256i, y: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let y = _mm256_loadu_si256(y.cast());
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
    }
}

pub(crate) struct Q4_1Q8_1;
pub(crate) struct Q4_0Q8_0;
pub(crate) struct Q8_0Q8_0;

impl Format for Q4_1Q8_1 {
    const W_BYTES: usize = 20;
    const A_BYTES: usize = 36;
    const A_QS: usize = 4;
    const HAS_MIN: bool = true;
    #[inline(always)]
    unsafe fn w_scales(p: *const u8) -> (f32, f32) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let bits = u32::from_le_bytes([*p, *p.add(1), *p.add(2), *p.add(3)]) as i32;
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
            (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
        }
    }
    #[inline(always)]
    unsafe fn w_prep(p: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            nibbles(p.add(4))
        }
    }
    #[inline(always)]
    unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            let y = _mm256_loadu_si256(a_qs.cast());
            _mm256_madd_epi16(_mm256_maddubs_epi16(wq, y), _mm256_set1_epi16(1))
        }
    }
}

impl Format for Q4_0Q8_0 {
    const W_BYTES: usize = 18;
    const A_BYTES: usize = 34;
    const A_QS: usize = 2;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn w_scales(p: *const u8) -> (f32, f32) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            (f16_at(p), 0.0)
        }
    }
    #[inline(always)]
    unsafe fn w_prep(p: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8))
        }
    }
    #[inline(always)]
    unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            idot_signed(wq, a_qs)
        }
    }
}

impl Format for Q8_0Q8_0 {
    const W_BYTES: usize = 34;
    const A_BYTES: usize = 34;
    const A_QS: usize = 2;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn w_scales(p: *const u8) -> (f32, f32) {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            (f16_at(p), 0.0)
        }
    }
    #[inline(always)]
    unsafe fn w_prep(p: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            _mm256_loadu_si256(p.add(2).cast())
        }
    }
    #[inline(always)]
    unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
        unsafe {
            // SAFETY: every operation below relies only on this fn's contract
            // (the CPU features it is compiled for; pointers and lengths inside
            // the buffers it is given), which its caller upholds.
            idot_signed(wq, a_qs)
        }
    }
}

/// The same formats with the integer block dot done by one AVX-VNNI `vpdpbusd` instead of
/// `vpmaddubsw` + `vpmaddwd`. The products are at most 2 * 127 * 127 per i16 pair in the old
/// path (no saturation), so both give the same exact i32 sums and every output keeps its bits.
pub(crate) struct Q4_1Q8_1Vnni;
pub(crate) struct Q4_0Q8_0Vnni;
pub(crate) struct Q8_0Q8_0Vnni;

/// Unsigned bytes `x` times signed bytes at `y`, summed in 8 i32 lanes (AVX-VNNI).
#[inline(always)]
unsafe fn idot_vnni_unsigned(x: __m256i, y: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), x, _mm256_loadu_si256(y.cast()))
    }
}

/// Signed bytes `x` times signed bytes at `y` (no -128 in y), summed in 8 i32 lanes (AVX-VNNI).
#[inline(always)]
unsafe fn idot_vnni_signed(x: __m256i, y: *const u8) -> __m256i {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        let y = _mm256_loadu_si256(y.cast());
        let ax = _mm256_sign_epi8(x, x);
        let sy = _mm256_sign_epi8(y, x);
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sy)
    }
}

macro_rules! vnni_format {
    ($name:ident, $base:ident, $idot:ident) => {
        impl Format for $name {
            const W_BYTES: usize = $base::W_BYTES;
            const A_BYTES: usize = $base::A_BYTES;
            const A_QS: usize = $base::A_QS;
            const HAS_MIN: bool = $base::HAS_MIN;
            const VNNI: bool = true;
            #[inline(always)]
            unsafe fn w_scales(p: *const u8) -> (f32, f32) {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $base::w_scales(p)
                }
            }
            #[inline(always)]
            unsafe fn w_prep(p: *const u8) -> __m256i {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $base::w_prep(p)
                }
            }
            #[inline(always)]
            unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
                unsafe {
                    // SAFETY: every operation below relies only on this fn's contract
                    // (the CPU features it is compiled for; pointers and lengths inside
                    // the buffers it is given), which its caller upholds.
                    $idot(wq, a_qs)
                }
            }
        }
    };
}
vnni_format!(Q4_1Q8_1Vnni, Q4_1Q8_1, idot_vnni_unsigned);
vnni_format!(Q4_0Q8_0Vnni, Q4_0Q8_0, idot_vnni_signed);
vnni_format!(Q8_0Q8_0Vnni, Q8_0Q8_0, idot_vnni_signed);

/// Whether the CPU can run the `*Vnni` formats (and `OXLLM_ISA` allows them).
pub(crate) fn has_avx_vnni() -> bool {
    crate::quant::avx_vnni_allowed() && is_x86_feature_detected!("avxvnni")
}

/// Fills the transposed activation scales of one chunk: `ad[b * CH + c]` = d of block `b` of
/// row `c`, `asum[..]` = its `s` (Q8_1) or 0; lanes `c >= rows.len()` stay 0.
///
/// # Safety
/// CPU contract above; every row pointer addresses `nb` activation blocks; `ad`/`asum` hold
/// `nb * CH` floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn act_scales<F: Format>(
    nb: usize,
    rows: &[*const u8],
    ad: &mut [f32],
    asum: &mut [f32],
) {
    unsafe {
        // SAFETY: every operation below relies only on this fn's contract
        // (the CPU features it is compiled for; pointers and lengths inside
        // the buffers it is given), which its caller upholds.
        assert!(ad.len() >= nb * CH && asum.len() >= nb * CH && rows.len() <= CH);
        for (c, &row) in rows.iter().enumerate() {
            for b in 0..nb {
                let p = row.add(b * F::A_BYTES);
                ad[b * CH + c] = f16_at(p);
                if F::HAS_MIN {
                    asum[b * CH + c] = f16_at(p.add(2));
                }
            }
        }
    }
}

macro_rules! row_chunk_fn {
    ($(#[$attr:meta])* $name:ident) => {
        $(#[$attr])*
        pub(crate) unsafe fn $name<F: Format, const C: usize>(
    nb: usize,
    w: *const u8,
    a: &[*const u8; C],
    ad: *const f32,
    asum: *const f32,
    out: &mut [f32; C],
) { unsafe {
    // SAFETY: every operation below relies only on this fn's contract
    // (the CPU features it is compiled for; pointers and lengths inside
    // the buffers it is given), which its caller upholds.
    let mut acc = [_mm256_setzero_ps(); C];
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        let wb = w.add(b * F::W_BYTES);
        let (dw, mw) = F::w_scales(wb);
        let wq = F::w_prep(wb);
        let dd = _mm256_mul_ps(_mm256_set1_ps(dw), _mm256_loadu_ps(ad.add(b * CH)));
        let mut ddv = [0f32; CH];
        _mm256_storeu_ps(ddv.as_mut_ptr(), dd);
        if F::HAS_MIN {
            let ms = _mm256_mul_ps(_mm256_set1_ps(mw), _mm256_loadu_ps(asum.add(b * CH)));
            accm = _mm256_add_ps(accm, ms);
        }
        for c in 0..C {
            let isum = F::idot(wq, a[c].add(b * F::A_BYTES + F::A_QS));
            acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(ddv[c]), _mm256_cvtepi32_ps(isum), acc[c]);
        }
    }
    let mut mv = [0f32; CH];
    _mm256_storeu_ps(mv.as_mut_ptr(), accm);
    for c in 0..C {
        let s = hsum(acc[c]);
        out[c] = if F::HAS_MIN { s + mv[c] } else { s };
    }
}}
    };
}
/// Shared with `tile_avx512`, which compiles the same body for its formats.
pub(crate) use row_chunk_fn;

row_chunk_fn!(
    /// `out[c] = dot(weight row w, activation row a[c])` for `c < C`.
    ///
    /// # Safety
    /// See the module's safety contract; `ad`/`asum` are this chunk's [`act_scales`].
    #[target_feature(enable = "avx2,fma,f16c")]
    row_chunk
);
row_chunk_fn!(
    /// [`row_chunk`] for the `*Vnni` formats: the same operation sequence, compiled with
    /// AVX-VNNI so their `idot` inlines.
    ///
    /// # Safety
    /// As [`row_chunk`], and the CPU has `avxvnni`.
    #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
    row_chunk_vnni
);

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}
