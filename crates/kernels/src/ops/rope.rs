//! Rotary position embeddings with precomputed inverse frequencies.
//!
//! Two pairings exist in the wild: `Interleaved` rotates adjacent pairs `(2i, 2i+1)` (GGML's
//! normal mode, which llama.cpp's Llama GGUFs expect because the converter permutes Q/K rows),
//! `SplitHalf` rotates `(i, i + d/2)` (Hugging Face and GGML NeoX mode: Qwen, HF Llama). Only the
//! first `rotary_dim` dimensions of a head are rotated (partial rotary), the rest pass through.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeLayout {
    Interleaved,
    SplitHalf,
}

#[derive(Clone, Debug)]
pub struct Rope {
    layout: RopeLayout,
    head_dim: usize,
    rotary_dim: usize,
    inv_freq: Vec<f32>,
}

impl Rope {
    /// `inv_freq[i] = theta^(-2i/rotary_dim)`, optionally divided by per-frequency factors
    /// (Llama 3 style scaling supplies them).
    pub fn new(
        layout: RopeLayout,
        head_dim: usize,
        rotary_dim: usize,
        theta: f32,
        freq_factors: Option<&[f32]>,
    ) -> Rope {
        let half = rotary_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                let f = 1.0 / (theta as f64).powf(2.0 * i as f64 / rotary_dim as f64);
                let factor = freq_factors.and_then(|f| f.get(i)).copied().unwrap_or(1.0);
                (f / factor as f64) as f32
            })
            .collect();
        Rope {
            layout,
            head_dim,
            rotary_dim,
            inv_freq,
        }
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// Whether pairs are (i, i + rotary_dim / 2) rather than adjacent.
    pub fn is_split_half(&self) -> bool {
        self.layout == RopeLayout::SplitHalf
    }

    /// The `rotary_dim / 2` inverse frequencies (the angle at position p is `p as f32 * f`).
    pub fn inv_freq(&self) -> &[f32] {
        &self.inv_freq
    }

    /// Rotates every head of one token's vector `x` (`n_heads * head_dim`) for position `pos`.
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        self.apply_all(&mut [x], pos);
    }

    /// Rotates every head of each of one token's vectors (its q and its k) for position
    /// `pos`: the angles are formed once for all of them; each vector gets [`Rope::apply`]'s
    /// bits.
    pub fn apply_all(&self, xs: &mut [&mut [f32]], pos: usize) {
        let half = self.rotary_dim / 2;
        // The angle is formed in f32 as the reference implementations do, so positions far
        // into a long context round the same way.
        let mut stack = [(0f32, 0f32); 128];
        let mut heap = Vec::new();
        let cs: &mut [(f32, f32)] = if half <= stack.len() {
            &mut stack[..half]
        } else {
            heap.resize(half, (0.0, 0.0));
            &mut heap
        };
        for (c, &f) in cs.iter_mut().zip(&self.inv_freq) {
            let angle = pos as f32 * f;
            *c = (angle.cos(), angle.sin());
        }
        for x in xs.iter_mut() {
            self.rotate(x, cs);
        }
    }

    fn rotate(&self, x: &mut [f32], cs: &[(f32, f32)]) {
        let half = self.rotary_dim / 2;
        for head in x.chunks_exact_mut(self.head_dim) {
            match self.layout {
                RopeLayout::Interleaved => {
                    for (i, &(c, s)) in cs.iter().enumerate() {
                        let (a, b) = (head[2 * i], head[2 * i + 1]);
                        head[2 * i] = a * c - b * s;
                        head[2 * i + 1] = a * s + b * c;
                    }
                }
                RopeLayout::SplitHalf => {
                    for (i, &(c, s)) in cs.iter().enumerate() {
                        let (a, b) = (head[i], head[i + half]);
                        head[i] = a * c - b * s;
                        head[i + half] = a * s + b * c;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_norm_is_preserved() {
        for layout in [RopeLayout::Interleaved, RopeLayout::SplitHalf] {
            let rope = Rope::new(layout, 8, 8, 10000.0, None);
            let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.1 - 0.5).collect();
            let mut x = orig.clone();
            rope.apply(&mut x, 0);
            assert_eq!(x, orig);
            rope.apply(&mut x, 17);
            for h in 0..2 {
                let n0: f32 = orig[h * 8..h * 8 + 8].iter().map(|v| v * v).sum();
                let n1: f32 = x[h * 8..h * 8 + 8].iter().map(|v| v * v).sum();
                assert!((n0 - n1).abs() < 1e-5);
            }
        }
    }

    /// One token's q and k rotated together get the bits each gets alone.
    #[test]
    fn apply_all_matches_apply_per_vector() {
        for layout in [RopeLayout::Interleaved, RopeLayout::SplitHalf] {
            let rope = Rope::new(layout, 16, 12, 10000.0, None);
            let q0: Vec<f32> = (0..48).map(|i| (i as f32 * 0.37).sin()).collect();
            let k0: Vec<f32> = (0..16).map(|i| (i as f32 * 0.91).cos()).collect();
            let (mut q1, mut k1) = (q0.clone(), k0.clone());
            rope.apply(&mut q1, 1234);
            rope.apply(&mut k1, 1234);
            let (mut q2, mut k2) = (q0.clone(), k0.clone());
            rope.apply_all(&mut [&mut q2, &mut k2], 1234);
            assert_ne!(q1, q0);
            assert_eq!(q1, q2);
            assert_eq!(k1, k2);
        }
    }

    #[test]
    fn interleaved_equals_split_half_on_permuted_dims() {
        let d = 8;
        let a = Rope::new(RopeLayout::Interleaved, d, d, 500.0, None);
        let b = Rope::new(RopeLayout::SplitHalf, d, d, 500.0, None);
        let x: Vec<f32> = (0..d).map(|i| (i as f32).sin()).collect();
        // interleaved index 2i <-> split index i, 2i+1 <-> i + d/2
        let mut xi = x.clone();
        let mut xs = vec![0.0; d];
        for i in 0..d / 2 {
            xs[i] = x[2 * i];
            xs[i + d / 2] = x[2 * i + 1];
        }
        a.apply(&mut xi, 5);
        b.apply(&mut xs, 5);
        for i in 0..d / 2 {
            assert!((xi[2 * i] - xs[i]).abs() < 1e-6);
            assert!((xi[2 * i + 1] - xs[i + d / 2]).abs() < 1e-6);
        }
    }

    #[test]
    fn partial_rotary_leaves_tail_untouched() {
        let rope = Rope::new(RopeLayout::SplitHalf, 8, 4, 10000.0, None);
        let orig: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        let mut x = orig.clone();
        rope.apply(&mut x, 3);
        assert_eq!(&x[4..], &orig[4..]);
        assert_ne!(&x[..4], &orig[..4]);
    }
}
