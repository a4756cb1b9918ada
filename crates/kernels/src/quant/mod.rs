//! Weight/activation block formats and their dot-product kernels.
//!
//! Weights: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K. Activations are quantized to
//! [`activation_dtype`] of the weight type (Q8_0, Q8_1, Q8_K, or F32 for float weights) with
//! [`quantize_row`], then dotted with a weight row by a [`VecDotFn`] from [`vec_dot`].
//!
//! Guarantees:
//! - Scalar dequantization is bit-identical to gguf-py/ggml's reference.
//! - `quantize_row` gives identical bytes on every ISA (the AVX2 path equals the scalar one).
//! - AVX2 kernels are only handed out after a runtime check for AVX2+FMA+F16C; their results
//!   equal the scalar kernels' up to f32 summation order (tested at a relative tolerance of
//!   1e-5 of `sum |w_i * a_i|`).
//! - Byte slices may have any alignment.

pub mod blocks;
mod dequant;
mod dot_scalar;
mod quantize;

#[cfg(target_arch = "x86_64")]
mod avx2;

pub use blocks::{QK, QK_K};
pub use oxllm_core::DType;

use blocks::*;
use std::mem::size_of;
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("unsupported weight type {0}")]
    Unsupported(DType),
    #[error("{n} elements of {dtype} do not fit a {got}-byte buffer (need a whole number of {block}-element blocks and exactly row_bytes(n) bytes)")]
    Length {
        dtype: DType,
        n: usize,
        block: usize,
        got: usize,
    },
}

/// Dot of one weight row (`w`, n elements of the weight dtype) with one activation row (`a`,
/// n elements of `activation_dtype(w)`). Slices must have the exact byte lengths
/// (debug-asserted; a slice shorter than `n` elements panics, it is never read out of bounds).
pub type VecDotFn = fn(n: usize, w: &[u8], a: &[u8]) -> f32;

/// Dot of four weight rows with one activation row (the activation is loaded once per block).
pub type VecDot4Fn = fn(n: usize, w_rows: [&[u8]; 4], a: &[u8]) -> [f32; 4];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    Avx2,
}

/// `Avx2` iff the CPU has AVX2, FMA and F16C (checked once, cached).
pub fn detected_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    })
}

/// The instruction sets kernels may use beyond AVX2+FMA+F16C, capped by the environment's
/// `OXLLM_ISA` (read once): `avx2` allows neither AVX-VNNI nor AVX-512 (the kernels a Zen 3
/// runs), `avxvnni` allows AVX-VNNI but no AVX-512 (an Alder Lake / Sierra Forest class CPU);
/// unset or `native` allows all the CPU has (binaries refuse other values:
/// [`check_isa_cap_env`]). A cap changes speed, never a result: every
/// kernel family gives its reference's bits (see `matmul`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IsaCap {
    Avx2,
    AvxVnni,
    Native,
}

/// `OXLLM_ISA` names no cap this build knows (a typo would otherwise measure the native kernels
/// while the user believes otherwise).
#[derive(Debug, thiserror::Error)]
#[error(
    "OXLLM_ISA={0:?} names no kernel cap: use `avx2`, `avxvnni` or `native` (or leave it unset)"
)]
pub struct UnknownIsaCap(pub String);

/// The cap `OXLLM_ISA` names (unset or empty: none).
fn isa_cap_from_env() -> Result<IsaCap, UnknownIsaCap> {
    match std::env::var("OXLLM_ISA").as_deref() {
        Ok("avx2") => Ok(IsaCap::Avx2),
        Ok("avxvnni") => Ok(IsaCap::AvxVnni),
        Ok("native") | Ok("") | Err(_) => Ok(IsaCap::Native),
        Ok(other) => Err(UnknownIsaCap(other.to_string())),
    }
}

/// Checks `OXLLM_ISA` for binaries to refuse a value no kernel choice reads (kernels read it
/// as no cap).
pub fn check_isa_cap_env() -> Result<(), UnknownIsaCap> {
    isa_cap_from_env().map(|_| ())
}

fn isa_cap() -> IsaCap {
    static CAP: OnceLock<IsaCap> = OnceLock::new();
    *CAP.get_or_init(|| isa_cap_from_env().unwrap_or(IsaCap::Native))
}

/// Whether kernels may use AVX-512 where the CPU has it (see [`IsaCap`]: not under
/// `OXLLM_ISA=avx2` or `OXLLM_ISA=avxvnni`).
pub fn avx512_allowed() -> bool {
    isa_cap() == IsaCap::Native
}

/// Whether kernels may use AVX-VNNI (VEX `vpdpbusd` on ymm) where the CPU has it (see
/// [`IsaCap`]: not under `OXLLM_ISA=avx2`).
pub fn avx_vnni_allowed() -> bool {
    isa_cap() != IsaCap::Avx2
}

/// The dtype activations are quantized to before a dot with weights of `w`: Q4_0/Q8_0 -> Q8_0,
/// Q4_1 -> Q8_1, Q4_K/Q5_K/Q6_K -> Q8_K, F32/F16/BF16 -> F32. Err for others.
pub fn activation_dtype(w: DType) -> Result<DType, QuantError> {
    Ok(match w {
        DType::Q4_0 | DType::Q8_0 => DType::Q8_0,
        DType::Q4_1 => DType::Q8_1,
        DType::Q4K | DType::Q5K | DType::Q6K => DType::Q8K,
        DType::F32 | DType::F16 | DType::BF16 => DType::F32,
        other => return Err(QuantError::Unsupported(other)),
    })
}

fn check_len(dtype: DType, n: usize, got: usize) -> Result<(), QuantError> {
    match dtype.row_bytes(n) {
        Ok(b) if b == got => Ok(()),
        _ => Err(QuantError::Length {
            dtype,
            n,
            block: dtype.block_size(),
            got,
        }),
    }
}

/// Views a length-checked byte row as blocks. Lengths are validated before, so this cannot fail.
fn blocks_of<B: Block>(bytes: &[u8]) -> &[B] {
    view_n(bytes, bytes.len() / size_of::<B>())
}

fn blocks_of_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    let nb = bytes.len() / size_of::<B>();
    match as_blocks_mut(&mut bytes[..nb * size_of::<B>()]) {
        Some(b) => b,
        None => unreachable!("exact multiple of the block size"),
    }
}

/// Quantize one row of f32 into `dst` (`dst.len() == dtype.row_bytes(src.len())`); `dtype` is
/// Q8_0, Q8_1, Q8_K or F32 (plain copy as f32 LE bytes). Uses AVX2 where available (Q8_0,
/// Q8_1, Q8_K); every ISA produces identical bytes.
pub fn quantize_row(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    if !matches!(dtype, DType::F32 | DType::Q8_0 | DType::Q8_1 | DType::Q8K) {
        return Err(QuantError::Unsupported(dtype));
    }
    check_len(dtype, src.len(), dst.len())?;
    #[cfg(target_arch = "x86_64")]
    if detected_isa() == Isa::Avx2 && avx2::quantize::quantize_row(dtype, src, dst) {
        return Ok(());
    }
    quantize_row_scalar(dtype, src, dst)
}

/// Scalar reference of [`quantize_row`] (same contract, same bytes).
pub fn quantize_row_scalar(dtype: DType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check_len(dtype, src.len(), dst.len())?;
    match dtype {
        DType::F32 => {
            for (o, v) in dst.chunks_exact_mut(4).zip(src) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::Q8_0 => quantize::q8_0(src, blocks_of_mut(dst)),
        DType::Q8_1 => quantize::q8_1(src, blocks_of_mut(dst)),
        DType::Q8K => quantize::q8_k(src, blocks_of_mut(dst)),
        other => return Err(QuantError::Unsupported(other)),
    }
    Ok(())
}

/// Scalar reference dequantization of one row of any supported weight/activation type (F32,
/// F16, BF16, Q4_0, Q4_1, Q8_0, Q8_1, Q4_K, Q5_K, Q6_K, Q8_K); `dst.len()` is the element
/// count and `src.len()` must be exactly `dtype.row_bytes(dst.len())`.
pub fn dequantize_row(dtype: DType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let supported = matches!(
        dtype,
        DType::F32
            | DType::F16
            | DType::BF16
            | DType::Q4_0
            | DType::Q4_1
            | DType::Q8_0
            | DType::Q8_1
            | DType::Q4K
            | DType::Q5K
            | DType::Q6K
            | DType::Q8K
    );
    if !supported {
        return Err(QuantError::Unsupported(dtype));
    }
    check_len(dtype, dst.len(), src.len())?;
    match dtype {
        DType::F32 => dequant::f32_row(src, dst),
        DType::F16 => dequant::f16_row(src, dst),
        DType::BF16 => dequant::bf16_row(src, dst),
        DType::Q4_0 => dequant::q4_0(blocks_of(src), dst),
        DType::Q4_1 => dequant::q4_1(blocks_of(src), dst),
        DType::Q8_0 => dequant::q8_0(blocks_of(src), dst),
        DType::Q8_1 => dequant::q8_1(blocks_of(src), dst),
        DType::Q4K => dequant::q4_k(blocks_of(src), dst),
        DType::Q5K => dequant::q5_k(blocks_of(src), dst),
        DType::Q6K => dequant::q6_k(blocks_of(src), dst),
        DType::Q8K => dequant::q8_k(blocks_of(src), dst),
        other => return Err(QuantError::Unsupported(other)),
    }
    Ok(())
}

/// Debug check of the exact byte lengths of a (weight, activation) row pair.
#[inline(always)]
fn debug_check(w_dtype: DType, n: usize, w: &[u8], a: &[u8]) {
    if cfg!(debug_assertions) {
        let ad = activation_dtype(w_dtype).ok();
        debug_assert_eq!(
            w_dtype.row_bytes(n).ok(),
            Some(w.len()),
            "{w_dtype} weight row"
        );
        debug_assert_eq!(
            ad.and_then(|d| d.row_bytes(n).ok()),
            Some(a.len()),
            "{w_dtype} activation row"
        );
    }
}

/// Scalar wrappers: block views of the first `n` elements (a short slice panics).
macro_rules! scalar_block_dot {
    ($name:ident, $dt:expr, $W:ty, $A:ty, $kernel:path) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            debug_check($dt, n, w, a);
            let nb = n / <$W as Block>::ELEMS;
            $kernel(view_n::<$W>(w, nb), view_n::<$A>(a, nb))
        }
    };
}

scalar_block_dot!(
    sc_q4_0,
    DType::Q4_0,
    BlockQ4_0,
    BlockQ8_0,
    dot_scalar::q4_0_q8_0
);
scalar_block_dot!(
    sc_q4_1,
    DType::Q4_1,
    BlockQ4_1,
    BlockQ8_1,
    dot_scalar::q4_1_q8_1
);
scalar_block_dot!(
    sc_q8_0,
    DType::Q8_0,
    BlockQ8_0,
    BlockQ8_0,
    dot_scalar::q8_0_q8_0
);
scalar_block_dot!(
    sc_q4_k,
    DType::Q4K,
    BlockQ4K,
    BlockQ8K,
    dot_scalar::q4_k_q8_k
);
scalar_block_dot!(
    sc_q5_k,
    DType::Q5K,
    BlockQ5K,
    BlockQ8K,
    dot_scalar::q5_k_q8_k
);
scalar_block_dot!(
    sc_q6_k,
    DType::Q6K,
    BlockQ6K,
    BlockQ8K,
    dot_scalar::q6_k_q8_k
);

macro_rules! scalar_float_dot {
    ($name:ident, $dt:expr, $wsz:expr, $kernel:path) => {
        fn $name(n: usize, w: &[u8], a: &[u8]) -> f32 {
            debug_check($dt, n, w, a);
            $kernel(n, &w[..n * $wsz], &a[..n * 4])
        }
    };
}

scalar_float_dot!(sc_f32, DType::F32, 4, dot_scalar::f32_f32);
scalar_float_dot!(sc_f16, DType::F16, 2, dot_scalar::f16_f32);
scalar_float_dot!(sc_bf16, DType::BF16, 2, dot_scalar::bf16_f32);

fn scalar_dot(w: DType) -> Result<VecDotFn, QuantError> {
    Ok(match w {
        DType::F32 => sc_f32,
        DType::F16 => sc_f16,
        DType::BF16 => sc_bf16,
        DType::Q4_0 => sc_q4_0,
        DType::Q4_1 => sc_q4_1,
        DType::Q8_0 => sc_q8_0,
        DType::Q4K => sc_q4_k,
        DType::Q5K => sc_q5_k,
        DType::Q6K => sc_q6_k,
        other => return Err(QuantError::Unsupported(other)),
    })
}

/// The dot kernel for weight type `w` on `isa`. `Err(Unsupported)` if the type has no kernel
/// or `isa` is not available on this CPU (Avx2 is never returned on a CPU without it).
pub fn vec_dot_for(w: DType, isa: Isa) -> Result<VecDotFn, QuantError> {
    match isa {
        Isa::Scalar => scalar_dot(w),
        Isa::Avx2 => {
            #[cfg(target_arch = "x86_64")]
            if detected_isa() == Isa::Avx2 {
                if let Some(f) = avx2::vec_dot(w) {
                    return Ok(f);
                }
            }
            Err(QuantError::Unsupported(w))
        }
    }
}

/// The fastest available dot kernel for weight type `w` (AVX2 if detected, else scalar).
pub fn vec_dot(w: DType) -> Result<VecDotFn, QuantError> {
    vec_dot_for(w, detected_isa()).or_else(|_| vec_dot_for(w, Isa::Scalar))
}

macro_rules! scalar_dot4 {
    ($name:ident, $one:ident) => {
        fn $name(n: usize, w: [&[u8]; 4], a: &[u8]) -> [f32; 4] {
            [
                $one(n, w[0], a),
                $one(n, w[1], a),
                $one(n, w[2], a),
                $one(n, w[3], a),
            ]
        }
    };
}

scalar_dot4!(sc4_q4_0, sc_q4_0);
scalar_dot4!(sc4_q4_1, sc_q4_1);
scalar_dot4!(sc4_q8_0, sc_q8_0);

/// Four-row kernel for weight type `w` on `isa` (Q4_0, Q4_1, Q8_0); same rules as
/// [`vec_dot_for`].
pub fn vec_dot4_for(w: DType, isa: Isa) -> Result<VecDot4Fn, QuantError> {
    match isa {
        Isa::Scalar => Ok(match w {
            DType::Q4_0 => sc4_q4_0,
            DType::Q4_1 => sc4_q4_1,
            DType::Q8_0 => sc4_q8_0,
            other => return Err(QuantError::Unsupported(other)),
        }),
        Isa::Avx2 => {
            #[cfg(target_arch = "x86_64")]
            if detected_isa() == Isa::Avx2 {
                if let Some(f) = avx2::vec_dot4(w) {
                    return Ok(f);
                }
            }
            Err(QuantError::Unsupported(w))
        }
    }
}

/// The fastest available four-row kernel for `w` (Q4_0, Q4_1, Q8_0).
pub fn vec_dot4(w: DType) -> Result<VecDot4Fn, QuantError> {
    vec_dot4_for(w, detected_isa()).or_else(|_| vec_dot4_for(w, Isa::Scalar))
}
