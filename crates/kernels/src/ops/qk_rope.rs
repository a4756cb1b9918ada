//! The attention inputs' per-token preparation: per-head RMSNorm of q and k (Qwen3) and their
//! rotary embedding at each row's position, rows shared between the pool's threads.
//!
//! Guarantees: each row's bits are those of [`Rope::apply_all`] on that row alone (after
//! [`rms_norm_rows_in_place`] when norms are given), whatever the thread count.

use crate::ops::{rms_norm_rows_in_place, Rope};
use crate::pool::{for_parts_mut, SharedMut, ThreadPool};

/// Normalizes (when `norms` = (q weight, k weight) is given) and rotates the first
/// `positions.len()` rows of `q` (`q_width` wide) and `k` (`k_width` wide), row t at
/// `positions[t]`. `q` and `k` must hold at least that many rows.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope(
    pool: &ThreadPool,
    q: &mut [f32],
    k: &mut [f32],
    q_width: usize,
    k_width: usize,
    positions: &[u32],
    norms: Option<(&[f32], &[f32])>,
    eps: f32,
    rope: &Rope,
) {
    let rows = positions.len();
    assert!(
        q.len() >= rows * q_width && k.len() >= rows * k_width,
        "qk_norm_rope: fewer q/k rows than positions"
    );
    let k_rows = SharedMut::new(&mut k[..rows * k_width]);
    // Row by row (each row's bits do not depend on the split), rows shared between threads
    // when a batch has several per thread.
    for_parts_mut(pool, &mut q[..rows * q_width], q_width, 4, |off, q_part| {
        let first = off / q_width.max(1);
        for (i, q_row) in q_part.chunks_exact_mut(q_width).enumerate() {
            let t = first + i;
            // SAFETY: row t of k belongs to the part holding row t of q (parts are disjoint),
            // and t < rows, so the range lies inside `k_rows`.
            let k_row = unsafe { k_rows.slice(t * k_width, k_width) };
            if let Some((qn, kn)) = norms {
                rms_norm_rows_in_place(q_row, qn, eps);
                rms_norm_rows_in_place(k_row, kn, eps);
            }
            rope.apply_all(&mut [q_row, k_row], positions[t] as usize);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::RopeLayout;

    /// Any thread count gives the bits of the row-by-row loop.
    #[test]
    fn rows_match_one_by_one_whatever_the_threads() {
        let (heads, kv_heads, hd, rows) = (4, 2, 8, 9);
        let (qw, kw) = (heads * hd, kv_heads * hd);
        let rope = Rope::new(RopeLayout::SplitHalf, hd, hd, 10000.0, None);
        let q0: Vec<f32> = (0..rows * qw).map(|i| (i as f32 * 0.37).sin()).collect();
        let k0: Vec<f32> = (0..rows * kw).map(|i| (i as f32 * 0.91).cos()).collect();
        let (qn, kn): (Vec<f32>, Vec<f32>) = (
            (0..hd).map(|i| 1.0 + i as f32 * 0.1).collect(),
            (0..hd).map(|i| 0.5 + i as f32 * 0.05).collect(),
        );
        let positions: Vec<u32> = (0..rows as u32).map(|t| t * 7 + 3).collect();
        let (mut q1, mut k1) = (q0.clone(), k0.clone());
        for t in 0..rows {
            let (qr, kr) = (&mut q1[t * qw..(t + 1) * qw], &mut k1[t * kw..(t + 1) * kw]);
            rms_norm_rows_in_place(qr, &qn, 1e-6);
            rms_norm_rows_in_place(kr, &kn, 1e-6);
            rope.apply_all(&mut [qr, kr], positions[t] as usize);
        }
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            let (mut q2, mut k2) = (q0.clone(), k0.clone());
            let norms = Some((&qn[..], &kn[..]));
            qk_norm_rope(
                &pool, &mut q2, &mut k2, qw, kw, &positions, norms, 1e-6, &rope,
            );
            assert_ne!(q2, q0);
            assert_eq!(q1, q2, "{threads} threads");
            assert_eq!(k1, k2, "{threads} threads");
        }
    }
}
