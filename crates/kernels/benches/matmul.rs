//! matmul: Q4_1 weights (576x576, 1536x576, 576x1536 as out x in) at m = 1 (decode) and
//! m = 512 (prefill), the register-blocked path (`matmul`) against the pairwise baseline
//! (`matmul_pairwise`), 2 threads; then each tile kernel variant the CPU has (AVX2, AVX-VNNI,
//! AVX512-VNNI) at m = 1, 16 (batch-16 decode) and 512; then the f32-activation output head
//! (Q8_0, 49152x576, SmolLM2's) at m = 1 and 16, whose weight-row pairs run on AVX-512; and
//! the weight panels against the same weights row-major (`WeightLayout::Panels` against
//! `WeightLayout::Rows`, the backend option `--weight-layout`) at m = 1 and 16; and each panel kernel
//! family the CPU has (AVX2, AVX-VNNI, AVX512-VNNI) against the AVX2 row tiles at m = 1, 16 and 128,
//! Q4_1 and Q8_0, plus the wide output head at m = 1 and 16; and the k-quant panels (Q4_K,
//! Q5_K, Q6_K; each kernel family the CPU has: AVX2, AVX-VNNI, AVX512-VNNI) against the same
//! weights row-major (one AVX2 dot per row pair) at m = 1, 16 and 128 (`-- kquant_panels`
//! runs only these; `OXLLM_BENCH_THREADS=1` runs them on one thread, default 2). Run:
//! `cargo bench -p oxllm-kernels --bench matmul`.

use criterion::{criterion_group, criterion_main, Criterion};
use oxllm_kernels::matmul::{
    matmul, matmul_pairwise, matmul_panels_with, matmul_tiled_with, quantize_acts, PanelKernel,
    QMatrix, TileKernel, WeightLayout,
};
use oxllm_kernels::pool::ThreadPool;
use oxllm_kernels::quant::DType;
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

/// Random Q4_1 weights; `row_major` keeps them out of panels (the tile kernels' layout).
fn q4_1_matrix(rng: &mut Lcg, rows: usize, cols: usize, row_major: bool) -> QMatrix {
    let len = DType::Q4_1.row_bytes(cols).unwrap() * rows;
    let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for blk in b.chunks_exact_mut(20) {
        blk[0..2].copy_from_slice(&scale);
        blk[2..4].copy_from_slice(&scale);
    }
    let layout = if row_major {
        WeightLayout::Rows
    } else {
        WeightLayout::Panels
    };
    QMatrix::with_layout(DType::Q4_1, rows, cols, b, layout).unwrap()
}

fn bench(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(7);
    let mut g = c.benchmark_group("matmul_q4_1");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for (n, k) in [(576, 576), (1536, 576), (576, 1536)] {
        let w = q4_1_matrix(&mut rng, n, k, false);
        for m in [1usize, 512] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
            let acts = quantize_acts(&pool, &x, m, k, DType::Q8_1).unwrap();
            let mut out = vec![0f32; m * n];
            let id = format!("{n}x{k}_m{m}");
            g.bench_function(format!("tiled/{id}"), |b| {
                b.iter(|| matmul(&pool, &w, &acts, &mut out).unwrap())
            });
            g.bench_function(format!("pairwise/{id}"), |b| {
                b.iter(|| matmul_pairwise(&pool, &w, &acts, &mut out).unwrap())
            });
        }
    }
    g.finish();
}

fn bench_tile_kernels(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(11);
    let mut g = c.benchmark_group("tile_kernels_q4_1");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    let kernels = [
        TileKernel::Avx2,
        TileKernel::AvxVnni,
        TileKernel::Avx512Vnni,
    ];
    for (n, k) in [(1536, 576), (576, 1536)] {
        let w = q4_1_matrix(&mut rng, n, k, true);
        for m in [1usize, 16, 512] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
            let acts = quantize_acts(&pool, &x, m, k, DType::Q8_1).unwrap();
            let mut out = vec![0f32; m * n];
            for kernel in kernels.into_iter().filter(|k| k.available()) {
                g.bench_function(format!("{kernel:?}/{n}x{k}_m{m}"), |b| {
                    b.iter(|| matmul_tiled_with(kernel, &pool, &w, &acts, &mut out).unwrap())
                });
            }
        }
    }
    g.finish();
}

/// The weight-panel layout (16 rows interleaved, the best panel kernel) against the same weights
/// row-major on the best tile kernel, through `matmul`, at m = 1 and 16 (decode).
fn bench_panels(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(13);
    let mut g = c.benchmark_group("panels_vs_rows_q4_1");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for (n, k) in [(576, 576), (1536, 576), (576, 1536)] {
        let rows = q4_1_matrix(&mut Lcg(n as u64 * 7 + k as u64), n, k, true);
        let panels = q4_1_matrix(&mut Lcg(n as u64 * 7 + k as u64), n, k, false);
        if !panels.is_panels() {
            eprintln!("panels: this CPU has no panel kernel");
            return;
        }
        for m in [1usize, 16] {
            let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
            let acts = quantize_acts(&pool, &x, m, k, DType::Q8_1).unwrap();
            let mut out = vec![0f32; m * n];
            for (name, w) in [("rows", &rows), ("panels", &panels)] {
                g.bench_function(format!("{name}/{n}x{k}_m{m}"), |b| {
                    b.iter(|| matmul(&pool, w, &acts, &mut out).unwrap())
                });
            }
        }
    }
    g.finish();
}

/// Random weights of `dtype` (Q4_1 or Q8_0) with small scales, as raw row-major blocks.
fn weight_bytes(rng: &mut Lcg, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let len = dtype.row_bytes(cols).unwrap() * rows;
    let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for blk in b.chunks_exact_mut(dtype.type_size()) {
        blk[0..2].copy_from_slice(&scale);
        if dtype == DType::Q4_1 {
            blk[2..4].copy_from_slice(&scale);
        }
    }
    b
}

/// Each panel kernel family this CPU runs against the AVX2 row tiles on the same weights, at
/// m = 1 (decode), 16 (batch-16 decode) and 128 (prefill), on SmolLM2's layer shapes; and the
/// wide output head (Q8_0 against f32 activations) per family at m = 1 and 16. Threads: 2, or
/// `OXLLM_BENCH_THREADS` (1 compares the kernels alone, without the pool's balance).
fn bench_panel_kernels(c: &mut Criterion) {
    let threads = std::env::var("OXLLM_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let pool = ThreadPool::new(threads);
    let mut rng = Lcg(17);
    let mut g = c.benchmark_group("panel_kernels");
    g.warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    let families = [
        PanelKernel::Avx2,
        PanelKernel::AvxVnni,
        PanelKernel::Avx512Vnni,
    ];
    for dtype in [DType::Q4_1, DType::Q8_0] {
        for (n, k) in [(1536, 576), (576, 1536)] {
            let b = weight_bytes(&mut rng, dtype, n, k);
            let rows = QMatrix::with_layout(dtype, n, k, b.clone(), WeightLayout::Rows).unwrap();
            let panels = QMatrix::with_layout(dtype, n, k, b, WeightLayout::Panels).unwrap();
            if !panels.is_panels() {
                eprintln!("panels: none on this CPU");
                return;
            }
            for m in [1usize, 16, 128] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
                let acts = quantize_acts(&pool, &x, m, k, rows.activation_dtype()).unwrap();
                let mut out = vec![0f32; m * n];
                let id = format!("{dtype}/{n}x{k}_m{m}");
                g.bench_function(format!("rows_avx2/{id}"), |b| {
                    b.iter(|| {
                        matmul_tiled_with(TileKernel::Avx2, &pool, &rows, &acts, &mut out).unwrap()
                    })
                });
                for f in families.into_iter().filter(|f| f.available()) {
                    g.bench_function(format!("panels_{f:?}/{id}"), |b| {
                        b.iter(|| matmul_panels_with(f, &pool, &panels, &acts, &mut out).unwrap())
                    });
                }
            }
        }
    }
    let (n, k) = (49152, 576);
    let head = QMatrix::new(DType::Q8_0, n, k, weight_bytes(&mut rng, DType::Q8_0, n, k))
        .unwrap()
        .with_f32_activations();
    for m in [1usize, 16] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
        let acts = quantize_acts(&pool, &x, m, k, DType::F32).unwrap();
        let mut out = vec![0f32; m * n];
        for f in families.into_iter().filter(|f| f.available()) {
            g.bench_function(format!("head_{f:?}/{n}x{k}_m{m}"), |b| {
                b.iter(|| matmul_panels_with(f, &pool, &head, &acts, &mut out).unwrap())
            });
        }
    }
    g.finish();
}

/// Random k-quant weights (random quant and scale bits, small super-block scales).
fn kquant_bytes(rng: &mut Lcg, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let len = dtype.row_bytes(cols).unwrap() * rows;
    let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let scale = half::f16::from_f32(1e-4).to_bits().to_le_bytes();
    for blk in b.chunks_exact_mut(dtype.type_size()) {
        if dtype == DType::Q6K {
            blk[208..210].copy_from_slice(&scale);
        } else {
            blk[0..2].copy_from_slice(&scale);
            blk[2..4].copy_from_slice(&scale);
        }
    }
    b
}

/// The k-quant panels (AVX2 kernel, on every CPU with AVX2) against the same weights
/// row-major, where `matmul` runs one AVX2 dot per (activation row, weight row), at m = 1
/// (decode), 16 (batch-16 decode) and 128 (prefill); rows and panels alternate per shape.
fn bench_kquant_panels(c: &mut Criterion) {
    // OXLLM_BENCH_THREADS=1 gives single-thread figures (a kernel's own speed, no split).
    let threads = std::env::var("OXLLM_BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let pool = ThreadPool::new(threads);
    let mut rng = Lcg(19);
    let mut g = c.benchmark_group("kquant_panels");
    g.warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(1))
        .sample_size(10);
    for dtype in [DType::Q4K, DType::Q5K, DType::Q6K] {
        for (n, k) in [(2048, 768), (768, 2048), (512, 8192)] {
            let b = kquant_bytes(&mut rng, dtype, n, k);
            let rows = QMatrix::with_layout(dtype, n, k, b.clone(), WeightLayout::Rows).unwrap();
            let panels = QMatrix::with_layout(dtype, n, k, b, WeightLayout::Panels).unwrap();
            if !panels.is_panels() {
                eprintln!("k-quant panels: none on this CPU");
                return;
            }
            for m in [1usize, 16, 128] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
                let acts = quantize_acts(&pool, &x, m, k, DType::Q8K).unwrap();
                let mut out = vec![0f32; m * n];
                let id = format!("{dtype}/{n}x{k}_m{m}");
                g.bench_function(format!("rows/{id}"), |b| {
                    b.iter(|| matmul(&pool, &rows, &acts, &mut out).unwrap())
                });
                for kernel in [
                    PanelKernel::Avx2,
                    PanelKernel::AvxVnni,
                    PanelKernel::Avx512Vnni,
                ] {
                    if !kernel.available() {
                        continue;
                    }
                    g.bench_function(format!("panels_{kernel:?}/{id}"), |b| {
                        b.iter(|| {
                            matmul_panels_with(kernel, &pool, &panels, &acts, &mut out).unwrap()
                        })
                    });
                }
            }
        }
    }
    g.finish();
}

fn bench_output_head(c: &mut Criterion) {
    let pool = ThreadPool::new(2);
    let mut rng = Lcg(11);
    let (n, k) = (49152, 576);
    let rb = DType::Q8_0.row_bytes(k).unwrap();
    let mut b: Vec<u8> = (0..n * rb).map(|_| (rng.next() % 200) as u8).collect();
    let scale = half::f16::from_f32(0.01).to_bits().to_le_bytes();
    for blk in b.chunks_exact_mut(34) {
        blk[0..2].copy_from_slice(&scale);
    }
    let w = QMatrix::new(DType::Q8_0, n, k, b)
        .unwrap()
        .with_f32_activations();
    let mut g = c.benchmark_group("output_head_q8_0_f32_acts");
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(3))
        .sample_size(10);
    for m in [1usize, 16] {
        let x: Vec<f32> = (0..m * k).map(|_| rng.f()).collect();
        let acts = quantize_acts(&pool, &x, m, k, DType::F32).unwrap();
        let mut out = vec![0f32; m * n];
        g.bench_function(format!("{n}x{k}_m{m}"), |b| {
            b.iter(|| matmul(&pool, &w, &acts, &mut out).unwrap())
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench,
    bench_tile_kernels,
    bench_panels,
    bench_output_head,
    bench_panel_kernels,
    bench_kquant_panels
);
criterion_main!(benches);
