//! Scalar reference dequantization of one row of every supported format to f32.
//!
//! Guarantees: results are bit-identical to gguf-py's / ggml's reference dequantization (same
//! f32 operation order: e.g. Q4_1 is `d * q + m` without fusing, K-quants compute `d * sc` and
//! `dmin * m` first). Lengths are checked by the caller (`mod.rs`).

use super::blocks::*;
use half::{bf16, f16};

pub(crate) fn f32_row(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub(crate) fn f16_row(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub(crate) fn bf16_row(src: &[u8], dst: &mut [f32]) {
    for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub(crate) fn q4_0(src: &[BlockQ4_0], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d();
        for (l, &q) in b.qs.iter().enumerate() {
            out[l] = ((q & 0x0F) as i32 - 8) as f32 * d;
            out[l + QK / 2] = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

pub(crate) fn q4_1(src: &[BlockQ4_1], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK)) {
        let (d, m) = (b.d(), b.m());
        for (l, &q) in b.qs.iter().enumerate() {
            out[l] = d * (q & 0x0F) as f32 + m;
            out[l + QK / 2] = d * (q >> 4) as f32 + m;
        }
    }
}

pub(crate) fn q8_0(src: &[BlockQ8_0], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d();
        for (o, &q) in out.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * d;
        }
    }
}

pub(crate) fn q8_1(src: &[BlockQ8_1], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d();
        for (o, &q) in out.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * d;
        }
    }
}

pub(crate) fn q4_k(src: &[BlockQ4K], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d(), b.dmin());
        let (sc, mn) = k_scales_mins(&b.scales);
        for j in 0..8 {
            let dl = d * sc[j] as f32;
            let ml = dmin * mn[j] as f32;
            let chunk = &b.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            for l in 0..32 {
                let q = (chunk[l] >> shift) & 0x0F;
                out[32 * j + l] = dl * q as f32 - ml;
            }
        }
    }
}

pub(crate) fn q5_k(src: &[BlockQ5K], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (b.d(), b.dmin());
        let (sc, mn) = k_scales_mins(&b.scales);
        for j in 0..8 {
            let dl = d * sc[j] as f32;
            let ml = dmin * mn[j] as f32;
            let chunk = &b.qs[32 * (j / 2)..32 * (j / 2) + 32];
            let shift = 4 * (j % 2);
            for l in 0..32 {
                let q = ((chunk[l] >> shift) & 0x0F) | (((b.qh[l] >> j) & 1) << 4);
                out[32 * j + l] = dl * q as f32 - ml;
            }
        }
    }
}

pub(crate) fn q6_k(src: &[BlockQ6K], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (i, o) in out.iter_mut().enumerate() {
            let ds = d * b.scales[i / 16] as f32;
            *o = ds * (b.q(i) as i32 - 32) as f32;
        }
    }
}

pub(crate) fn q8_k(src: &[BlockQ8K], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d();
        for (o, &q) in out.iter_mut().zip(b.qs.iter()) {
            *o = q as f32 * d;
        }
    }
}
