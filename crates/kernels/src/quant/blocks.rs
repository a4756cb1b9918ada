//! GGML block layouts as `#[repr(C)]`, alignment-1 structs, and safe views of byte slices as
//! block slices.
//!
//! Guarantees: every struct has exactly GGML's size (checked at compile time), alignment 1, no
//! padding, and every bit pattern is a valid value, so viewing any `&[u8]` whose length is a
//! whole number of blocks as `&[Block]` is sound regardless of the slice's alignment. Multi-byte
//! fields are stored as little-endian byte arrays and decoded through accessors.

use half::f16;
use std::mem::{align_of, size_of};

/// Elements per block of the legacy formats (Q4_0, Q4_1, Q8_0, Q8_1).
pub const QK: usize = 32;
/// Elements per K-quant super-block (Q4_K, Q5_K, Q6_K, Q8_K).
pub const QK_K: usize = 256;

#[inline(always)]
pub(crate) fn f16_le(b: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(b)).to_f32()
}

#[inline(always)]
pub(crate) fn f16_to_le(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

/// Q4_0: 32 elements, value = (nibble - 8) * d; low nibbles are elements 0..16, high 16..32.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// Q4_1: 32 elements, value = nibble * d + m.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; QK / 2],
}

/// Q8_0: 32 elements, value = qs * d.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; QK],
}

/// Q8_1: 32 elements, value = qs * d; `s` = d * sum(qs) (stored as f16).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; QK],
}

/// Q4_K: 256 elements in 8 sub-blocks of 32 with 6-bit scales and mins;
/// value = d * sc[j] * nibble - dmin * m[j]. `qs` holds 4 chunks of 32 bytes; chunk c carries
/// sub-block 2c in its low nibbles and 2c+1 in its high nibbles.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ4K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: as Q4_K plus a fifth bit per element: bit j of `qh[l]` is the high bit of element l of
/// sub-block j.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ5K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; QK_K / 8],
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: 256 elements, value = d * scales[i / 16] * (q - 32) with 6-bit q split into 4 low bits
/// (`ql`) and 2 high bits (`qh`). Each 128-element half h uses ql[64h..64h+64] and
/// qh[32h..32h+32]; its 32-element group j (0..4) takes low nibbles of ql[64h + 32(j&1) + l] for
/// j < 2 and high nibbles for j >= 2, and bits 2j..2j+2 of qh[32h + l].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ6K {
    pub ql: [u8; QK_K / 2],
    pub qh: [u8; QK_K / 4],
    pub scales: [i8; QK_K / 16],
    pub d: [u8; 2],
}

/// Q8_K: 256 elements, value = qs * d (d is f32); `bsums[i]` = sum of qs[16i..16i+16].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BlockQ8K {
    pub d: [u8; 4],
    pub qs: [i8; QK_K],
    pub bsums: [[u8; 2]; QK_K / 16],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
const _: () = assert!(size_of::<BlockQ4_1>() == 20);
const _: () = assert!(size_of::<BlockQ8_0>() == 34);
const _: () = assert!(size_of::<BlockQ8_1>() == 36);
const _: () = assert!(size_of::<BlockQ4K>() == 144);
const _: () = assert!(size_of::<BlockQ5K>() == 176);
const _: () = assert!(size_of::<BlockQ6K>() == 210);
const _: () = assert!(size_of::<BlockQ8K>() == 292);
const _: () = assert!(align_of::<BlockQ4_0>() == 1);
const _: () = assert!(align_of::<BlockQ4_1>() == 1);
const _: () = assert!(align_of::<BlockQ8_0>() == 1);
const _: () = assert!(align_of::<BlockQ8_1>() == 1);
const _: () = assert!(align_of::<BlockQ4K>() == 1);
const _: () = assert!(align_of::<BlockQ5K>() == 1);
const _: () = assert!(align_of::<BlockQ6K>() == 1);
const _: () = assert!(align_of::<BlockQ8K>() == 1);

/// A block type that may be viewed from raw bytes.
///
/// # Safety
/// Implementors must be `#[repr(C)]` with alignment 1, no padding, and no invalid bit patterns.
pub unsafe trait Block: Copy {
    const ELEMS: usize;
}

// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ4_0 {
    const ELEMS: usize = QK;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ4_1 {
    const ELEMS: usize = QK;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ8_0 {
    const ELEMS: usize = QK;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ8_1 {
    const ELEMS: usize = QK;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ4K {
    const ELEMS: usize = QK_K;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ5K {
    const ELEMS: usize = QK_K;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ6K {
    const ELEMS: usize = QK_K;
}
// SAFETY: `#[repr(C)]` of integer and f16 fields, alignment 1 and no padding (the asserts
// above), so every bit pattern is a valid block.
unsafe impl Block for BlockQ8K {
    const ELEMS: usize = QK_K;
}

/// Views `bytes` as blocks; `None` unless the length is a whole number of blocks.
pub fn as_blocks<B: Block>(bytes: &[u8]) -> Option<&[B]> {
    let sz = size_of::<B>();
    let nb = bytes.len() / sz;
    if nb * sz != bytes.len() {
        return None;
    }
    // SAFETY: `Block` guarantees alignment 1, no padding and all bit patterns valid; the length
    // is a whole number of blocks, so the view covers exactly the borrowed bytes.
    Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), nb) })
}

/// Mutable counterpart of [`as_blocks`].
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> Option<&mut [B]> {
    let sz = size_of::<B>();
    let nb = bytes.len() / sz;
    if nb * sz != bytes.len() {
        return None;
    }
    // SAFETY: as in `as_blocks`; any value written through the view is valid bytes.
    Some(unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), nb) })
}

impl BlockQ4_0 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
}

impl BlockQ4_1 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
    pub fn m(&self) -> f32 {
        f16_le(self.m)
    }
}

impl BlockQ8_0 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
}

impl BlockQ8_1 {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
    pub fn s(&self) -> f32 {
        f16_le(self.s)
    }
}

/// Unpacks the 12-byte K-quant scale field into 8 six-bit scales and 8 six-bit mins.
/// Sub-blocks 0..4 keep scale/min in the low 6 bits of bytes 0..4 / 4..8; sub-blocks 4..8 take
/// their low 4 bits from byte 8+i (scale: low nibble, min: high nibble) and their top 2 bits from
/// the top 2 bits of bytes i / 4+i.
#[inline]
pub fn k_scales_mins(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for i in 0..4 {
        sc[i] = s[i] & 63;
        mn[i] = s[i + 4] & 63;
        sc[i + 4] = (s[i + 8] & 0x0F) | ((s[i] >> 6) << 4);
        mn[i + 4] = (s[i + 8] >> 4) | ((s[i + 4] >> 6) << 4);
    }
    (sc, mn)
}

impl BlockQ4K {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
    pub fn dmin(&self) -> f32 {
        f16_le(self.dmin)
    }
}

impl BlockQ5K {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
    pub fn dmin(&self) -> f32 {
        f16_le(self.dmin)
    }
}

impl BlockQ6K {
    pub fn d(&self) -> f32 {
        f16_le(self.d)
    }
    /// The 6-bit value (0..64, before subtracting 32) of element `i` (0..256).
    #[inline(always)]
    pub fn q(&self, i: usize) -> u8 {
        let h = i / 128;
        let r = i % 128;
        let j = r / 32;
        let l = r % 32;
        let lb = self.ql[64 * h + 32 * (j & 1) + l];
        let lo = if j < 2 { lb & 0x0F } else { lb >> 4 };
        let hi = (self.qh[32 * h + l] >> (2 * j)) & 3;
        lo | (hi << 4)
    }
}

impl BlockQ8K {
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes(self.bsums[i])
    }
}

/// The first `nb` blocks of `bytes`.
///
/// # Panics
/// If `bytes` holds fewer than `nb` blocks.
#[inline(always)]
pub(crate) fn view_n<B: Block>(bytes: &[u8], nb: usize) -> &[B] {
    let bytes = &bytes[..nb * size_of::<B>()];
    // SAFETY: `Block` guarantees alignment 1, no padding and all bit patterns valid; `bytes`
    // is exactly `nb` blocks long.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), nb) }
}
