//! RMSNorm: `y = x / sqrt(mean(x^2) + eps) * w`, per row, accumulated in f64-free f32 with a
//! pairwise-friendly loop (the sum order is fixed, so results are deterministic).

/// Normalises one row `x` into `out` with weight `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), w.len());
    debug_assert_eq!(x.len(), out.len());
    let scale = inv_rms(x, eps);
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * scale * g;
    }
}

/// Normalises every `w.len()`-wide row of `x` in place (used for per-head q/k norms).
pub fn rms_norm_rows_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    debug_assert_eq!(x.len() % d, 0);
    for row in x.chunks_exact_mut(d) {
        let scale = inv_rms(row, eps);
        for (v, &g) in row.iter_mut().zip(w) {
            *v = *v * scale * g;
        }
    }
}

fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for k in 0..8 {
            acc[k] += c[k] * c[k];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for v in tail {
        sum += v * v;
    }
    1.0 / (sum / x.len() as f32 + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_definition() {
        let x: Vec<f32> = (0..19).map(|i| (i as f32 - 7.0) * 0.3).collect();
        let w: Vec<f32> = (0..19).map(|i| 1.0 + i as f32 * 0.01).collect();
        let mut out = vec![0.0; 19];
        rms_norm(&x, &w, 1e-5, &mut out);
        let ms: f64 = x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / 19.0;
        for i in 0..19 {
            let want = x[i] as f64 / (ms + 1e-5).sqrt() * w[i] as f64;
            assert!((out[i] as f64 - want).abs() < 1e-5, "{i}");
        }
        let mut rows = [x.clone(), x.clone()].concat();
        rms_norm_rows_in_place(&mut rows, &w, 1e-5);
        assert_eq!(&rows[..19], &out[..]);
        assert_eq!(&rows[19..], &out[..]);
    }
}
