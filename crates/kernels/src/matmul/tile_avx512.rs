//! The row-chunk tile kernels of `tile_avx2` with the integer block dot done by AVX512-VNNI:
//! `vpdpbusd` on 256-bit registers (EVEX-encoded, needs `avx512vnni` + `avx512vl`).
//!
//! Why a separate variant: AVX-VNNI (the VEX form `tile_avx2` uses) is absent on AMD Zen 4 and
//! on Intel server parts before Sapphire Rapids, which have the same instruction under
//! AVX512-VNNI instead. Without either, the block dot takes `vpmaddubsw` + `vpmaddwd`.
//!
//! Same bits: the block dot is exact in both (no i16 saturation is possible, see `tile_avx2`),
//! and the float sequence per output is the shared `row_chunk_fn!` body, so an output does not
//! depend on which of the three variants a CPU runs (tested in `matmul`). Compiling that body
//! with AVX-512VL also gives it 32 vector registers, which the chunk of 8 accumulators uses.
//!
//! Safety contract: as `tile_avx2`'s, and the CPU has `avx512vnni` and `avx512vl`.

use std::arch::x86_64::*;

// `hsum` and `CH` are named by the shared `row_chunk_fn!` body.
use super::tile_avx2::{hsum, row_chunk_fn, Format, CH, Q4_0Q8_0, Q4_1Q8_1, Q8_0Q8_0};

pub(crate) struct Q4_1Q8_1Vnni512;
pub(crate) struct Q4_0Q8_0Vnni512;
pub(crate) struct Q8_0Q8_0Vnni512;

/// Unsigned bytes `x` times signed bytes at `y`, summed in 8 i32 lanes.
#[inline(always)]
unsafe fn idot_unsigned(x: __m256i, y: *const u8) -> __m256i {
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), x, _mm256_loadu_si256(y.cast()))
}

/// Signed bytes `x` times signed bytes at `y` (no -128 in y), summed in 8 i32 lanes: the sign
/// of `x` moves onto `y` so `vpdpbusd` sees `|x|` as unsigned.
#[inline(always)]
unsafe fn idot_signed(x: __m256i, y: *const u8) -> __m256i {
    let y = _mm256_loadu_si256(y.cast());
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    _mm256_dpbusd_epi32(_mm256_setzero_si256(), ax, sy)
}

macro_rules! vnni512_format {
    ($name:ident, $base:ident, $idot:ident) => {
        impl Format for $name {
            const W_BYTES: usize = $base::W_BYTES;
            const A_BYTES: usize = $base::A_BYTES;
            const A_QS: usize = $base::A_QS;
            const HAS_MIN: bool = $base::HAS_MIN;
            const VNNI512: bool = true;
            #[inline(always)]
            unsafe fn w_scales(p: *const u8) -> (f32, f32) {
                $base::w_scales(p)
            }
            #[inline(always)]
            unsafe fn w_prep(p: *const u8) -> __m256i {
                $base::w_prep(p)
            }
            #[inline(always)]
            unsafe fn idot(wq: __m256i, a_qs: *const u8) -> __m256i {
                $idot(wq, a_qs)
            }
        }
    };
}
vnni512_format!(Q4_1Q8_1Vnni512, Q4_1Q8_1, idot_unsigned);
vnni512_format!(Q4_0Q8_0Vnni512, Q4_0Q8_0, idot_signed);
vnni512_format!(Q8_0Q8_0Vnni512, Q8_0Q8_0, idot_signed);

/// Whether the CPU can run the `*Vnni512` formats.
pub(crate) fn has_avx512_vnni() -> bool {
    is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
}

row_chunk_fn!(
    /// `tile_avx2::row_chunk` for the `*Vnni512` formats: the same operation sequence,
    /// compiled with AVX512-VNNI+VL so their `idot` inlines.
    ///
    /// # Safety
    /// As `tile_avx2::row_chunk`, and the CPU has `avx512vnni` and `avx512vl`.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512vnni")]
    row_chunk_vnni512
);
