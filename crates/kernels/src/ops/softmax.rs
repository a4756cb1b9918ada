//! Numerically stable softmax (max-subtracted) over one row.

pub fn softmax_in_place(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return;
    }
    let mut sum = 0.0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_to_one_and_survives_large_values() {
        let mut x = vec![1000.0, 1001.0, 999.0];
        softmax_in_place(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[1] > x[0] && x[0] > x[2]);
        let e = [(-1.0f32).exp(), 1.0, (-2.0f32).exp()];
        let s: f32 = e.iter().sum();
        for i in 0..3 {
            assert!((x[i] - e[i] / s).abs() < 1e-6);
        }
    }
}
