//! Scalar reference quantization of f32 activation rows to Q8_0, Q8_1 and Q8_K.
//!
//! Guarantees: Q8_0 is bit-identical to ggml's `quantize_row_q8_0_ref` / gguf-py
//! (d = amax/127, q = roundf(x * (1/d)), half-away-from-zero); Q8_1 adds `s = f16(d * sum(q))`
//! with the unrounded f32 `d`, as ggml's reference does; Q8_K follows ggml's reference
//! (scale from the signed element of largest magnitude, round-half-even, clamp at 127, exact
//! `bsums`). The AVX2 versions in `avx2::quantize` produce identical bytes.

use super::blocks::*;

/// Q8_0 scale and reciprocal for a block with largest magnitude `amax`.
#[inline(always)]
pub(crate) fn q8_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

pub(crate) fn q8_0(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.iter_mut()) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d, id) = q8_scale(amax);
        y.d = f16_to_le(d);
        for (q, v) in y.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
    }
}

pub(crate) fn q8_1(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.iter_mut()) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d, id) = q8_scale(amax);
        let mut sum = 0i32;
        for (q, v) in y.qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
            sum += *q as i32;
        }
        y.d = f16_to_le(d);
        y.s = f16_to_le(sum as f32 * d);
    }
}

pub(crate) fn q8_k(src: &[f32], dst: &mut [BlockQ8K]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            y.d = 0.0f32.to_le_bytes();
            y.qs = [0; QK_K];
            y.bsums = [[0; 2]; QK_K / 16];
            continue;
        }
        let iscale = -127.0 / max;
        for (q, &v) in y.qs.iter_mut().zip(x) {
            *q = ((iscale * v).round_ties_even() as i32).min(127) as i8;
        }
        for (s, g) in y.bsums.iter_mut().zip(y.qs.chunks_exact(16)) {
            *s = (g.iter().map(|&q| q as i16).sum::<i16>()).to_le_bytes();
        }
        y.d = (1.0 / iscale).to_le_bytes();
    }
}
