//! Pointwise activations and residual adds.

#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `gate[i] = silu(gate[i]) * up[i]`: the SiLU-gated MLP's elementwise part.
pub fn silu_mul_in_place(gate: &mut [f32], up: &[f32]) {
    debug_assert_eq!(gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

/// `acc[i] += x[i]`.
pub fn add_in_place(acc: &mut [f32], x: &[f32]) {
    debug_assert_eq!(acc.len(), x.len());
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_values() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((silu(-20.0)).abs() < 1e-7);
        let mut g = vec![1.0, 0.0, -1.0];
        silu_mul_in_place(&mut g, &[2.0, 5.0, 1.0]);
        assert!((g[0] - 1.462_117_2).abs() < 1e-6);
        assert_eq!(g[1], 0.0);
        assert!((g[2] + 0.268_941_4).abs() < 1e-6);
    }
}
