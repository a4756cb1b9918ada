//! Scalar reference dot products of one weight row with one activation row.
//!
//! Guarantees: integer block sums are exact (i32); per-block scaling is done in f32 in the
//! same algebraic form as ggml's reference kernels. These are the ground truth the AVX2
//! kernels are tested against. Callers pass slices that hold at least `n` elements (checked by
//! `mod.rs` wrappers); blocks beyond `n` are ignored.

// Explicit indices mirror the documented bit layouts.
#![allow(clippy::needless_range_loop)]

use super::blocks::*;
use half::{bf16, f16};

pub(crate) fn f32_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut s = 0.0f32;
    for (wc, ac) in w.chunks_exact(4).zip(a.chunks_exact(4)).take(n) {
        s += f32::from_le_bytes([wc[0], wc[1], wc[2], wc[3]])
            * f32::from_le_bytes([ac[0], ac[1], ac[2], ac[3]]);
    }
    s
}

pub(crate) fn f16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut s = 0.0f32;
    for (wc, ac) in w.chunks_exact(2).zip(a.chunks_exact(4)).take(n) {
        s += f16::from_bits(u16::from_le_bytes([wc[0], wc[1]])).to_f32()
            * f32::from_le_bytes([ac[0], ac[1], ac[2], ac[3]]);
    }
    s
}

pub(crate) fn bf16_f32(n: usize, w: &[u8], a: &[u8]) -> f32 {
    let mut s = 0.0f32;
    for (wc, ac) in w.chunks_exact(2).zip(a.chunks_exact(4)).take(n) {
        s += bf16::from_bits(u16::from_le_bytes([wc[0], wc[1]])).to_f32()
            * f32::from_le_bytes([ac[0], ac[1], ac[2], ac[3]]);
    }
    s
}

pub(crate) fn q4_0_q8_0(w: &[BlockQ4_0], a: &[BlockQ8_0]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for l in 0..QK / 2 {
            sumi += ((x.qs[l] & 0x0F) as i32 - 8) * y.qs[l] as i32;
            sumi += ((x.qs[l] >> 4) as i32 - 8) * y.qs[l + QK / 2] as i32;
        }
        s += sumi as f32 * (x.d() * y.d());
    }
    s
}

pub(crate) fn q4_1_q8_1(w: &[BlockQ4_1], a: &[BlockQ8_1]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for l in 0..QK / 2 {
            sumi += (x.qs[l] & 0x0F) as i32 * y.qs[l] as i32;
            sumi += (x.qs[l] >> 4) as i32 * y.qs[l + QK / 2] as i32;
        }
        s += (x.d() * y.d()) * sumi as f32 + x.m() * y.s();
    }
    s
}

pub(crate) fn q8_0_q8_0(w: &[BlockQ8_0], a: &[BlockQ8_0]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let sumi: i32 =
            x.qs.iter()
                .zip(&y.qs)
                .map(|(&p, &q)| p as i32 * q as i32)
                .sum();
        s += sumi as f32 * (x.d() * y.d());
    }
    s
}

/// Sum over the 8 sub-blocks of `min[j] * (sum of activations in sub-block j)`, via bsums.
#[inline]
fn mins_dot(mn: &[u8; 8], y: &BlockQ8K) -> i32 {
    (0..8)
        .map(|j| mn[j] as i32 * (y.bsum(2 * j) as i32 + y.bsum(2 * j + 1) as i32))
        .sum()
}

pub(crate) fn q4_k_q8_k(w: &[BlockQ4K], a: &[BlockQ8K]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, mn) = k_scales_mins(&x.scales);
        let mut sumi = 0i32;
        for j in 0..8 {
            let chunk = &x.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            let mut sub = 0i32;
            for l in 0..32 {
                sub += ((chunk[l] >> shift) & 0x0F) as i32 * y.qs[32 * j + l] as i32;
            }
            sumi += sc[j] as i32 * sub;
        }
        let yd = y.d();
        s += (yd * x.d()) * sumi as f32 - (yd * x.dmin()) * mins_dot(&mn, y) as f32;
    }
    s
}

pub(crate) fn q5_k_q8_k(w: &[BlockQ5K], a: &[BlockQ8K]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let (sc, mn) = k_scales_mins(&x.scales);
        let mut sumi = 0i32;
        for j in 0..8 {
            let chunk = &x.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            let mut sub = 0i32;
            for l in 0..32 {
                let q = ((chunk[l] >> shift) & 0x0F) | (((x.qh[l] >> j) & 1) << 4);
                sub += q as i32 * y.qs[32 * j + l] as i32;
            }
            sumi += sc[j] as i32 * sub;
        }
        let yd = y.d();
        s += (yd * x.d()) * sumi as f32 - (yd * x.dmin()) * mins_dot(&mn, y) as f32;
    }
    s
}

pub(crate) fn q6_k_q8_k(w: &[BlockQ6K], a: &[BlockQ8K]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in w.iter().zip(a) {
        let mut sumi = 0i32;
        for g in 0..QK_K / 16 {
            let mut sub = 0i32;
            for i in 16 * g..16 * g + 16 {
                sub += (x.q(i) as i32 - 32) * y.qs[i] as i32;
            }
            sumi += x.scales[g] as i32 * sub;
        }
        s += (x.d() * y.d()) * sumi as f32;
    }
    s
}
