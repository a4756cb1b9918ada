//! Quant kernels: vec_dot per weight type, scalar vs AVX2, at n = 576 / 1536 / 4096 (K-quants:
//! 512 / 1536 / 4096); the 4-row kernels vs four single-row calls; quantize_row.
//! Run: `cargo bench -p oxllm-kernels --bench quant_dot` (short measurement windows).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use oxllm_kernels::quant::{
    activation_dtype, detected_isa, quantize_row, vec_dot4_for, vec_dot_for, DType, Isa,
};
use std::time::Duration;

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

/// Random weight row: random bytes with small positive f16 scales (and finite floats).
fn weight_row(rng: &mut Lcg, dt: DType, n: usize) -> Vec<u8> {
    let len = dt.row_bytes(n).expect("whole blocks");
    match dt {
        DType::F32 => (0..n).flat_map(|_| rng.f().to_le_bytes()).collect(),
        DType::F16 => (0..n)
            .flat_map(|_| half::f16::from_f32(rng.f()).to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => (0..n)
            .flat_map(|_| half::bf16::from_f32(rng.f()).to_bits().to_le_bytes())
            .collect(),
        _ => {
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
            for blk in b.chunks_exact_mut(dt.type_size()) {
                match dt {
                    DType::Q6K => blk[208..210].copy_from_slice(&scale),
                    DType::Q4_1 | DType::Q4K | DType::Q5K => {
                        blk[0..2].copy_from_slice(&scale);
                        blk[2..4].copy_from_slice(&scale);
                    }
                    _ => blk[0..2].copy_from_slice(&scale),
                }
            }
            b
        }
    }
}

fn act_row(rng: &mut Lcg, dt: DType, n: usize) -> Vec<u8> {
    let adt = activation_dtype(dt).expect("weight type");
    let x: Vec<f32> = (0..n).map(|_| rng.f()).collect();
    let mut a = vec![0u8; adt.row_bytes(n).expect("whole blocks")];
    quantize_row(adt, &x, &mut a).expect("sizes match");
    a
}

fn isas() -> Vec<Isa> {
    if detected_isa() == Isa::Avx2 {
        vec![Isa::Scalar, Isa::Avx2]
    } else {
        vec![Isa::Scalar]
    }
}

fn bench_vec_dot(c: &mut Criterion) {
    let mut rng = Lcg(7);
    let types = [
        DType::Q4_1,
        DType::Q4_0,
        DType::Q8_0,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::F32,
        DType::F16,
        DType::BF16,
    ];
    for dt in types {
        let sizes: [usize; 3] = if dt.block_size() == 256 {
            [512, 1536, 4096]
        } else {
            [576, 1536, 4096]
        };
        for n in sizes {
            let w = weight_row(&mut rng, dt, n);
            let a = act_row(&mut rng, dt, n);
            for isa in isas() {
                let f = vec_dot_for(dt, isa).expect("kernel");
                c.bench_function(&format!("vec_dot/{dt}/{isa:?}/{n}"), |b| {
                    b.iter(|| f(black_box(n), black_box(&w), black_box(&a)))
                });
            }
        }
    }
}

fn bench_vec_dot4(c: &mut Criterion) {
    let mut rng = Lcg(8);
    for dt in [DType::Q4_1, DType::Q4_0, DType::Q8_0] {
        for n in [576usize, 4096] {
            let rows: Vec<Vec<u8>> = (0..4).map(|_| weight_row(&mut rng, dt, n)).collect();
            let a = act_row(&mut rng, dt, n);
            for isa in isas() {
                let f1 = vec_dot_for(dt, isa).expect("kernel");
                let f4 = vec_dot4_for(dt, isa).expect("kernel");
                c.bench_function(&format!("vec_dot4/{dt}/{isa:?}/{n}/4x1"), |b| {
                    b.iter(|| {
                        let a = black_box(&a);
                        [
                            f1(n, &rows[0], a),
                            f1(n, &rows[1], a),
                            f1(n, &rows[2], a),
                            f1(n, &rows[3], a),
                        ]
                    })
                });
                c.bench_function(&format!("vec_dot4/{dt}/{isa:?}/{n}/x4"), |b| {
                    b.iter(|| f4(n, [&rows[0], &rows[1], &rows[2], &rows[3]], black_box(&a)))
                });
            }
        }
    }
}

fn bench_quantize(c: &mut Criterion) {
    let mut rng = Lcg(9);
    for adt in [DType::Q8_0, DType::Q8_1, DType::Q8K] {
        for n in [1536usize, 4096] {
            let x: Vec<f32> = (0..n).map(|_| rng.f()).collect();
            let mut q = vec![0u8; adt.row_bytes(n).expect("whole blocks")];
            c.bench_function(&format!("quantize_row/{adt}/{n}"), |b| {
                b.iter(|| quantize_row(adt, black_box(&x), &mut q))
            });
            c.bench_function(&format!("quantize_row_scalar/{adt}/{n}"), |b| {
                b.iter(|| oxllm_kernels::quant::quantize_row_scalar(adt, black_box(&x), &mut q))
            });
        }
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_millis(300))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = bench_vec_dot, bench_vec_dot4, bench_quantize
}
criterion_main!(benches);
