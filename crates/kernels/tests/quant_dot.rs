//! Dot-product kernels: scalar vs an f64 dot of the dequantized rows, and every available ISA
//! (AVX2 when detected) vs scalar, over many seeded random rows.
//!
//! Tolerances (relative to `sum |w_i * a_i|` of the dequantized rows, plus absolute 1e-30):
//! - scalar vs f64: 1e-5, plus for Q4_1 the f16 rounding of Q8_1's `s` (ggml's format stores
//!   d*sum(q) as f16): `sum_b |m_b * s_b| * 2^-10`.
//! - AVX2 vs scalar (single-row and 4-row kernels): 1e-5.

use oxllm_kernels::quant::{
    activation_dtype, dequantize_row, detected_isa, quantize_row, vec_dot, vec_dot4, vec_dot4_for,
    vec_dot_for, DType, Isa,
};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unif(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.unif().max(1e-7), self.unif());
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn f16(&mut self, lo: f32, hi: f32, signed: bool) -> [u8; 2] {
        let mut v = lo + (hi - lo) * self.unif();
        if signed && self.next() & 1 == 1 {
            v = -v;
        }
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }
}

const WEIGHTS: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q8_0,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

/// A random weight row: random payload bytes with sane f16 scales.
fn weight_row(rng: &mut Rng, dt: DType, n: usize) -> Vec<u8> {
    let mut b = rng.bytes(dt.row_bytes(n).unwrap());
    match dt {
        DType::F32 => {
            for c in b.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.normal().to_le_bytes());
            }
        }
        DType::F16 => {
            for c in b.chunks_exact_mut(2) {
                c.copy_from_slice(&half::f16::from_f32(rng.normal()).to_bits().to_le_bytes());
            }
        }
        DType::BF16 => {
            for c in b.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(rng.normal()).to_bits().to_le_bytes());
            }
        }
        DType::Q4_0 | DType::Q8_0 => {
            for c in b.chunks_exact_mut(dt.type_size()) {
                c[0..2].copy_from_slice(&rng.f16(0.001, 0.1, true));
            }
        }
        DType::Q4_1 => {
            for c in b.chunks_exact_mut(20) {
                c[0..2].copy_from_slice(&rng.f16(0.001, 0.1, false));
                c[2..4].copy_from_slice(&rng.f16(0.0, 0.8, true));
            }
        }
        DType::Q4K | DType::Q5K => {
            for c in b.chunks_exact_mut(dt.type_size()) {
                c[0..2].copy_from_slice(&rng.f16(0.001, 0.1, false));
                c[2..4].copy_from_slice(&rng.f16(0.001, 0.1, false));
            }
        }
        DType::Q6K => {
            for c in b.chunks_exact_mut(210) {
                c[208..210].copy_from_slice(&rng.f16(0.001, 0.1, true));
            }
        }
        _ => unreachable!(),
    }
    b
}

fn act_row(rng: &mut Rng, adt: DType, n: usize) -> (Vec<f32>, Vec<u8>) {
    let scale = 0.1 + 3.0 * rng.unif();
    let off = if rng.next() & 3 == 0 { 0.5 } else { 0.0 };
    let x: Vec<f32> = (0..n).map(|_| rng.normal() * scale + off).collect();
    let mut q = vec![0u8; adt.row_bytes(n).unwrap()];
    quantize_row(adt, &x, &mut q).unwrap();
    (x, q)
}

fn sizes(dt: DType) -> &'static [usize] {
    match dt.block_size() {
        1 => &[1, 7, 8, 31, 64, 65, 576, 1000, 1536],
        32 => &[32, 64, 96, 576, 1536, 4096],
        _ => &[256, 512, 1536, 4096],
    }
}

/// (f64 dot of dequantized rows, sum |w*a|, extra tolerance for Q4_1's f16 `s`).
fn reference(dt: DType, n: usize, w: &[u8], a: &[u8]) -> (f64, f64, f64) {
    let adt = activation_dtype(dt).unwrap();
    let mut wf = vec![0f32; n];
    let mut af = vec![0f32; n];
    dequantize_row(dt, w, &mut wf).unwrap();
    dequantize_row(adt, a, &mut af).unwrap();
    let dot: f64 = wf.iter().zip(&af).map(|(&x, &y)| x as f64 * y as f64).sum();
    let mag: f64 = wf
        .iter()
        .zip(&af)
        .map(|(&x, &y)| (x as f64 * y as f64).abs())
        .sum();
    let mut extra = 0.0;
    if dt == DType::Q4_1 {
        for (wb, ab) in w.chunks_exact(20).zip(a.chunks_exact(36)) {
            let m = half::f16::from_bits(u16::from_le_bytes([wb[2], wb[3]])).to_f64();
            let s = half::f16::from_bits(u16::from_le_bytes([ab[2], ab[3]])).to_f64();
            extra += (m * s).abs() / 1024.0;
        }
    }
    (dot, mag, extra)
}

#[test]
fn scalar_dot_matches_f64_dot_of_dequantized_rows() {
    let mut rng = Rng(1);
    for dt in WEIGHTS {
        let f = vec_dot_for(dt, Isa::Scalar).unwrap();
        let adt = activation_dtype(dt).unwrap();
        for &n in sizes(dt) {
            for _ in 0..8 {
                let w = weight_row(&mut rng, dt, n);
                let (_, a) = act_row(&mut rng, adt, n);
                let (want, mag, extra) = reference(dt, n, &w, &a);
                let got = f(n, &w, &a) as f64;
                let tol = 1e-5 * mag + extra + 1e-30;
                assert!(
                    (got - want).abs() <= tol,
                    "{dt} n={n}: {got} vs {want} (tol {tol})"
                );
            }
        }
    }
}

#[test]
fn every_isa_matches_scalar() {
    let isas: Vec<Isa> = if detected_isa() == Isa::Avx2 {
        vec![Isa::Scalar, Isa::Avx2]
    } else {
        eprintln!("AVX2+FMA+F16C not detected: skipping AVX2 kernel comparisons");
        vec![Isa::Scalar]
    };
    let mut rng = Rng(2);
    for dt in WEIGHTS {
        let sc = vec_dot_for(dt, Isa::Scalar).unwrap();
        let adt = activation_dtype(dt).unwrap();
        for &isa in &isas {
            let f = vec_dot_for(dt, isa).unwrap_or_else(|e| panic!("{dt} {isa:?}: {e}"));
            for &n in sizes(dt) {
                for _ in 0..12 {
                    let w = weight_row(&mut rng, dt, n);
                    let (_, a) = act_row(&mut rng, adt, n);
                    let (_, mag, _) = reference(dt, n, &w, &a);
                    let (got, want) = (f(n, &w, &a) as f64, sc(n, &w, &a) as f64);
                    let tol = 1e-5 * mag + 1e-30;
                    assert!(
                        (got - want).abs() <= tol,
                        "{dt} {isa:?} n={n}: {got} vs {want}"
                    );
                }
            }
        }
        // The dispatching entry point is one of them.
        let w = weight_row(&mut rng, dt, sizes(dt)[2]);
        let (_, a) = act_row(&mut rng, adt, sizes(dt)[2]);
        let n = sizes(dt)[2];
        let (_, mag, _) = reference(dt, n, &w, &a);
        let d = (vec_dot(dt).unwrap()(n, &w, &a) - sc(n, &w, &a)).abs() as f64;
        assert!(d <= 1e-5 * mag + 1e-30);
    }
}

#[test]
fn four_row_kernels_match_single_row() {
    let mut rng = Rng(3);
    let isas: &[Isa] = if detected_isa() == Isa::Avx2 {
        &[Isa::Scalar, Isa::Avx2]
    } else {
        &[Isa::Scalar]
    };
    for dt in [DType::Q4_0, DType::Q4_1, DType::Q8_0] {
        let sc = vec_dot_for(dt, Isa::Scalar).unwrap();
        let adt = activation_dtype(dt).unwrap();
        for &isa in isas {
            let f4 = vec_dot4_for(dt, isa).unwrap();
            for &n in sizes(dt) {
                let rows: Vec<Vec<u8>> = (0..4).map(|_| weight_row(&mut rng, dt, n)).collect();
                let (_, a) = act_row(&mut rng, adt, n);
                let got = f4(n, [&rows[0], &rows[1], &rows[2], &rows[3]], &a);
                for r in 0..4 {
                    let (_, mag, _) = reference(dt, n, &rows[r], &a);
                    let want = sc(n, &rows[r], &a);
                    let d = (got[r] - want).abs() as f64;
                    assert!(d <= 1e-5 * mag + 1e-30, "{dt} {isa:?} n={n} row {r}");
                }
            }
        }
        assert!(vec_dot4(dt).is_ok());
    }
    assert!(vec_dot4_for(DType::Q6K, Isa::Scalar).is_err());
}

#[test]
fn quantize_row_is_identical_across_isas() {
    // quantize_row dispatches to AVX2 when detected; it must equal the scalar reference,
    // including exact .5 ties (amax = 127 makes the scale 1) and all-zero blocks.
    let mut rng = Rng(4);
    for adt in [DType::Q8_0, DType::Q8_1, DType::Q8K, DType::F32] {
        for n in [256usize, 512, 1536, 4096] {
            for case in 0..6 {
                let mut x: Vec<f32> = (0..n).map(|_| rng.normal() * 2.0).collect();
                match case {
                    0 => x[..n / 2].fill(0.0),
                    1 => {
                        for (i, v) in x.iter_mut().enumerate() {
                            *v = if i % 32 == 0 {
                                127.0
                            } else {
                                (i % 255) as f32 * 0.5 - 63.5
                            };
                        }
                    }
                    2 => x.iter_mut().for_each(|v| *v *= 1e-30),
                    // Largest magnitude twice with opposite signs (Q8_K's scale takes the
                    // sign of the first), and for Q8_K a NaN its scan must pass over.
                    3 => {
                        for b in x.chunks_exact_mut(256) {
                            b[3] = -40.0;
                            b[200] = 40.0;
                            if adt == DType::Q8K {
                                b[7] = f32::NAN;
                                b[100] = if n == 512 { f32::INFINITY } else { b[100] };
                            }
                        }
                    }
                    4 => {
                        for b in x.chunks_exact_mut(256) {
                            b[250] = -40.0;
                            b[9] = 40.0;
                        }
                    }
                    _ => {}
                }
                let mut a = vec![0u8; adt.row_bytes(n).unwrap()];
                let mut b = vec![0u8; a.len()];
                quantize_row(adt, &x, &mut a).unwrap();
                oxllm_kernels::quant::quantize_row_scalar(adt, &x, &mut b).unwrap();
                assert_eq!(a, b, "{adt} n={n} case {case}");
            }
        }
    }
}

#[test]
fn isa_availability() {
    for dt in WEIGHTS {
        assert!(vec_dot_for(dt, Isa::Scalar).is_ok(), "{dt} scalar");
        assert!(vec_dot(dt).is_ok(), "{dt}");
        // Avx2 is handed out exactly when detected.
        assert_eq!(
            vec_dot_for(dt, Isa::Avx2).is_ok(),
            detected_isa() == Isa::Avx2,
            "{dt}"
        );
    }
    for dt in [DType::Q2K, DType::Q8_1, DType::Q8K, DType::I8] {
        assert!(vec_dot_for(dt, Isa::Scalar).is_err());
        assert!(vec_dot_for(dt, Isa::Avx2).is_err());
        assert!(activation_dtype(dt).is_err());
    }
    #[cfg(target_arch = "x86_64")]
    {
        let has = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        assert_eq!(detected_isa() == Isa::Avx2, has);
    }
}
