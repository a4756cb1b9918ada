//! Batch invariance of `matmul`: every output row is bit-identical to computing that
//! activation row alone (m = 1), whatever m and the row's position; and close to the scalar
//! reference dot (dequantized magnitudes as the tolerance scale). Every weight format, both the
//! integer-activation and the f32-activation paths, on whatever ISA this CPU runs.

use oxllm_kernels::matmul::{matmul, matmul_pairwise, quantize_acts, QMatrix};
use oxllm_kernels::pool::ThreadPool;
use oxllm_kernels::quant::{self, DType, Isa};

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    fn f(&mut self) -> f32 {
        self.next() as f32 / (1u64 << 31) as f32 - 0.5
    }
}

/// Random weight matrix: random bytes with small f16 scales (floats: random values).
fn weights(rng: &mut Lcg, dt: DType, rows: usize, k: usize) -> Vec<u8> {
    let len = dt.row_bytes(k).unwrap() * rows;
    match dt {
        DType::F32 => (0..rows * k).flat_map(|_| rng.f().to_le_bytes()).collect(),
        DType::F16 => (0..rows * k)
            .flat_map(|_| half::f16::from_f32(rng.f()).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            for blk in b.chunks_exact_mut(dt.type_size()) {
                let d = half::f16::from_f32(0.002 + 0.02 * (rng.f() + 0.5))
                    .to_bits()
                    .to_le_bytes();
                let m = half::f16::from_f32(-0.1 * (rng.f() + 0.5))
                    .to_bits()
                    .to_le_bytes();
                match dt {
                    DType::Q6K => blk[208..210].copy_from_slice(&d),
                    DType::Q4_1 | DType::Q4K | DType::Q5K => {
                        blk[0..2].copy_from_slice(&d);
                        blk[2..4].copy_from_slice(&m);
                    }
                    _ => blk[0..2].copy_from_slice(&d),
                }
            }
            b
        }
    }
}

fn check(dt: DType, f32_acts: bool, ns: &[usize], k: usize) {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(0x5eed ^ k as u64 ^ ((dt as u64) << 20));
    for &n in ns {
        let mut w = QMatrix::new(dt, n, k, weights(&mut rng, dt, n, k)).unwrap();
        if f32_acts {
            w = w.with_f32_activations();
        }
        let adt = w.activation_dtype();
        let wdeq: Vec<Vec<f32>> = (0..n)
            .map(|j| {
                let mut r = vec![0f32; k];
                w.dequantize_row(j, &mut r).unwrap();
                r
            })
            .collect();
        let scalar = if f32_acts {
            oxllm_kernels::weight_dot::vec_dot_f32_acts_for(dt, Isa::Scalar).unwrap()
        } else {
            quant::vec_dot_for(dt, Isa::Scalar).unwrap()
        };
        for m in 1..=13usize {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f() * 4.0).collect();
            let acts = quantize_acts(&pool, &x, m, k, adt).unwrap();
            let mut out = vec![f32::NAN; m * n];
            matmul(&pool, &w, &acts, &mut out).unwrap();
            let mut pair = vec![f32::NAN; m * n];
            matmul_pairwise(&pool, &w, &acts, &mut pair).unwrap();
            let rb = adt.row_bytes(k).unwrap();
            for i in 0..m {
                let xi = &x[i * k..(i + 1) * k];
                let alone = quantize_acts(&pool, xi, 1, k, adt).unwrap();
                let mut one = vec![f32::NAN; n];
                matmul(&pool, &w, &alone, &mut one).unwrap();
                let row = &out[i * n..(i + 1) * n];
                for j in 0..n {
                    assert_eq!(
                        row[j].to_bits(),
                        one[j].to_bits(),
                        "{dt} f32_acts={f32_acts} m={m} n={n} k={k}: row {i} col {j} differs alone ({} vs {})",
                        row[j],
                        one[j]
                    );
                }
                // Close to the scalar reference dot on the same quantized activations.
                let mut qa = vec![0u8; rb];
                quant::quantize_row(adt, xi, &mut qa).unwrap();
                let mut adeq = vec![0f32; k];
                quant::dequantize_row(adt, &qa, &mut adeq).unwrap();
                for j in 0..n {
                    let want = scalar(k, &w.row(j), &qa);
                    let mag: f32 = wdeq[j].iter().zip(&adeq).map(|(a, b)| (a * b).abs()).sum();
                    let tol = 2e-5 * mag + 1e-5;
                    assert!(
                        (row[j] - want).abs() <= tol,
                        "{dt} m={m} n={n}: ({i},{j}) {} vs scalar {want} (tol {tol})",
                        row[j]
                    );
                    assert!((pair[i * n + j] - want).abs() <= tol, "pairwise path");
                }
            }
        }
    }
}

#[test]
fn q4_1_rows_are_batch_invariant() {
    check(DType::Q4_1, false, &[1, 5, 16, 37], 576);
    check(DType::Q4_1, false, &[20], 32);
}

#[test]
fn q4_0_rows_are_batch_invariant() {
    check(DType::Q4_0, false, &[1, 7, 33], 576);
}

#[test]
fn q8_0_rows_are_batch_invariant() {
    check(DType::Q8_0, false, &[1, 7, 33], 160);
}

#[test]
fn q8_0_f32_acts_rows_are_batch_invariant() {
    check(DType::Q8_0, true, &[3, 17], 576);
}

#[test]
fn k_quant_rows_are_batch_invariant() {
    check(DType::Q4K, false, &[5, 17], 512);
    check(DType::Q6K, false, &[5], 256);
}

#[test]
fn float_rows_are_batch_invariant() {
    check(DType::F32, false, &[1, 9], 40);
    check(DType::F16, false, &[9], 64);
}

/// A chunk of 8+ rows fed to a larger tile: m up to 70 crosses tile and chunk boundaries.
#[test]
fn large_m_matches_rows_alone() {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(99);
    let (n, k) = (40, 1536);
    let w = QMatrix::new(DType::Q4_1, n, k, weights(&mut rng, DType::Q4_1, n, k)).unwrap();
    let m = 70;
    let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
    let acts = quantize_acts(&pool, &x, m, k, DType::Q8_1).unwrap();
    let mut out = vec![0f32; m * n];
    matmul(&pool, &w, &acts, &mut out).unwrap();
    for i in [0, 7, 8, 63, 64, 69] {
        let alone = quantize_acts(&pool, &x[i * k..(i + 1) * k], 1, k, DType::Q8_1).unwrap();
        let mut one = vec![0f32; n];
        matmul(&pool, &w, &alone, &mut one).unwrap();
        assert!(
            out[i * n..(i + 1) * n]
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "row {i}"
        );
    }
}

/// `matmul_many` (one dispatch for several matrices) equals separate `matmul` calls bit for bit.
#[test]
fn matmul_many_equals_separate_calls() {
    use oxllm_kernels::matmul::matmul_many;
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(5);
    let k = 576;
    let wq = QMatrix::new(DType::Q4_1, 64, k, weights(&mut rng, DType::Q4_1, 64, k)).unwrap();
    let wk = QMatrix::new(DType::Q4_1, 24, k, weights(&mut rng, DType::Q4_1, 24, k)).unwrap();
    let wf = QMatrix::new(DType::F16, 9, k, weights(&mut rng, DType::F16, 9, k)).unwrap();
    for m in [1usize, 3, 17] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
        let a8 = quantize_acts(&pool, &x, m, k, DType::Q8_1).unwrap();
        let af = quantize_acts(&pool, &x, m, k, DType::F32).unwrap();
        let (mut q1, mut k1, mut f1) = (vec![0f32; m * 64], vec![0f32; m * 24], vec![0f32; m * 9]);
        matmul(&pool, &wq, &a8, &mut q1).unwrap();
        matmul(&pool, &wk, &a8, &mut k1).unwrap();
        matmul(&pool, &wf, &af, &mut f1).unwrap();
        let (mut q2, mut k2, mut f2) = (vec![0f32; m * 64], vec![0f32; m * 24], vec![0f32; m * 9]);
        matmul_many(
            &pool,
            &mut [
                (&wq, &a8, &mut q2),
                (&wk, &a8, &mut k2),
                (&wf, &af, &mut f2),
            ],
        )
        .unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&q1), bits(&q2));
        assert_eq!(bits(&k1), bits(&k2));
        assert_eq!(bits(&f1), bits(&f2));
    }
}

/// The output head's form (`QMatrix::for_output_head`): f32 activations for Q8_0 and float
/// weights (fast kernels take them), the layers' integer kernels for every other format —
/// bit for bit the same matrix's product, and within 8-bit activation error of the
/// f32-activation product.
#[test]
fn output_head_keeps_f32_activations_only_where_a_fast_kernel_takes_them() {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(21);
    let (n, k, m) = (24, 512, 3);
    for dt in [DType::Q8_0, DType::F32, DType::F16] {
        let w = QMatrix::new(dt, n, k, weights(&mut rng, dt, n, k)).unwrap();
        assert_eq!(w.for_output_head().activation_dtype(), DType::F32, "{dt}");
    }
    for dt in [DType::Q4_0, DType::Q4_1, DType::Q4K, DType::Q5K, DType::Q6K] {
        let bytes = weights(&mut rng, dt, n, k);
        let layer = QMatrix::new(dt, n, k, bytes.clone()).unwrap();
        let head = QMatrix::new(dt, n, k, bytes.clone())
            .unwrap()
            .for_output_head();
        let precise = QMatrix::new(dt, n, k, bytes)
            .unwrap()
            .with_f32_activations();
        let adt = quant::activation_dtype(dt).unwrap();
        assert_eq!(head.activation_dtype(), adt, "{dt}");
        assert_eq!(
            head.is_panels(),
            layer.is_panels(),
            "{dt}: the head keeps the layout"
        );
        let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
        let acts = quantize_acts(&pool, &x, m, k, adt).unwrap();
        let (mut got, mut want) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
        matmul(&pool, &head, &acts, &mut got).unwrap();
        matmul(&pool, &layer, &acts, &mut want).unwrap();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{dt}: the head is not the layer kernels' product"
        );
        let f32_acts = quantize_acts(&pool, &x, m, k, DType::F32).unwrap();
        let mut exact = vec![f32::NAN; m * n];
        matmul(&pool, &precise, &f32_acts, &mut exact).unwrap();
        for i in 0..m {
            for j in 0..n {
                let mut wrow = vec![0f32; k];
                head.dequantize_row(j, &mut wrow).unwrap();
                let mag: f32 = wrow
                    .iter()
                    .zip(&x[i * k..(i + 1) * k])
                    .map(|(a, b)| (a * b).abs())
                    .sum();
                let (g, e) = (got[i * n + j], exact[i * n + j]);
                assert!(
                    (g - e).abs() <= 0.02 * mag,
                    "{dt} ({i},{j}): {g} vs f32 activations {e} (scale {mag})"
                );
            }
        }
    }
}
