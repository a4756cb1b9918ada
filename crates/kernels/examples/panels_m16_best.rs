//! One AVX2 panel matmul at m = 16 (a batch-16 decode step's shape; `M` rows if given, e.g.
//! 128 for a prefill tile) on one thread, timed call by call; prints the best call of `ITERS`. On a shared, noisy machine the best call is what
//! the kernel can do when nothing preempts it, which the mean of a 2-thread criterion run is
//! not. Random weights (scales set to keep sums small), random activations; prints a checksum
//! of the outputs so two builds can be checked to compute the same thing.
//!
//! `cargo run --release -p oxllm-kernels --example panels_m16_best -- q4_1|q8_0|head|q4_k|q5_k|q6_k ITERS [M] [COPIES] [KERNEL]`
//! (`head`: SmolLM2's Q8_0 49152x576 output head with 16-bit activations; q4_1 / q8_0
//! 1536x576; k-quants 2048x768; `q4_1:192x576` and the like name another shape). Run it with `OXLLM_ISA=avx2` on AVX-512 hosts as well: the
//! panels are packed the same way, and the AVX2 kernel is named explicitly. With `COPIES`
//! (default 1) an iteration runs the call on each of that many copies of the matrix in turn
//! and the best iteration is divided by `COPIES`: with enough copies the weights no longer
//! sit in the core's L2 between calls, as in a model's step, where every matrix is read once.
//! `KERNEL` (default `avx2`) names the panel kernel family: `avx2`, `avxvnni` or `avx512vnni`.

use std::process::ExitCode;
use std::time::Instant;

use oxllm_kernels::matmul::{
    matmul_panels_with, quantize_acts, PanelKernel, QMatrix, WeightLayout,
};
use oxllm_kernels::pool::ThreadPool;
use oxllm_kernels::quant::DType;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `NAME` or `NAME:NxK` (another shape of the same format).
    let (name, dims) = match args.first().map(|a| a.split_once(':')) {
        Some(Some((name, dims))) => (Some(name), Some(dims)),
        _ => (args.first().map(String::as_str), None),
    };
    let shape = match name {
        Some("q4_1") => Some((DType::Q4_1, 1536, 576, false)),
        Some("q8_0") => Some((DType::Q8_0, 1536, 576, false)),
        Some("head") => Some((DType::Q8_0, 49152, 576, true)),
        Some("q4_k") => Some((DType::Q4K, 2048, 768, false)),
        Some("q5_k") => Some((DType::Q5K, 2048, 768, false)),
        Some("q6_k") => Some((DType::Q6K, 2048, 768, false)),
        _ => None,
    };
    let shape = match (shape, dims.map(|d| d.split_once('x'))) {
        (s, None) => s,
        (Some((dtype, ..)), Some(Some((n, k)))) => match (n.parse(), k.parse()) {
            (Ok(n), Ok(k)) => Some((dtype, n, k, false)),
            _ => None,
        },
        _ => None,
    };
    let iters = args.get(1).and_then(|s| s.parse::<usize>().ok());
    let m = args.get(2).map_or(Some(16), |s| s.parse::<usize>().ok());
    let copies = args.get(3).map_or(Some(1), |s| s.parse::<usize>().ok());
    let kernel = match args.get(4).map(String::as_str) {
        None | Some("avx2") => Some(PanelKernel::Avx2),
        Some("avxvnni") => Some(PanelKernel::AvxVnni),
        Some("avx512vnni") => Some(PanelKernel::Avx512Vnni),
        Some(_) => None,
    };
    let (Some((dtype, n, k, head)), Some(iters), Some(m), Some(copies), Some(kernel)) = (
        shape,
        iters.filter(|&i| i > 0),
        m.filter(|&m| m > 0),
        copies.filter(|&c| c > 0),
        kernel,
    ) else {
        eprintln!(
            "usage: panels_m16_best q4_1|q8_0|head|q4_k|q5_k|q6_k ITERS [M] [COPIES] \
             [avx2|avxvnni|avx512vnni] (numbers > 0)"
        );
        return ExitCode::FAILURE;
    };
    if !kernel.available() {
        eprintln!("panels_m16_best: this CPU (or OXLLM_ISA) does not run {kernel:?}");
        return ExitCode::FAILURE;
    }
    match run(dtype, (n, k, head), iters, (m, copies), kernel) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("panels_m16_best: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    dtype: DType,
    (n, k, head): (usize, usize, bool),
    iters: usize,
    (m, copies): (usize, usize),
    kernel: PanelKernel,
) -> Result<(), Box<dyn std::error::Error>> {
    let pool = ThreadPool::new(1);
    let mut state = 17u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let len = dtype.row_bytes(k)? * n;
    let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
    let kquant = matches!(dtype, DType::Q4K | DType::Q5K | DType::Q6K);
    let scale = half::f16::from_f32(if kquant { 1e-4 } else { 0.01 })
        .to_bits()
        .to_le_bytes();
    for blk in bytes.chunks_exact_mut(dtype.type_size()) {
        if dtype == DType::Q6K {
            blk[208..210].copy_from_slice(&scale);
        } else {
            blk[0..2].copy_from_slice(&scale);
            if dtype != DType::Q8_0 {
                blk[2..4].copy_from_slice(&scale);
            }
        }
    }
    let mut ws = Vec::with_capacity(copies);
    for _ in 0..copies {
        let mut w = QMatrix::with_layout(dtype, n, k, bytes.clone(), WeightLayout::Panels)?;
        if head {
            w = w.with_f32_activations();
        }
        if !w.is_panels() {
            return Err("no panel kernel on this CPU".into());
        }
        ws.push(w);
    }
    let w = &ws[0];
    let x: Vec<f32> = (0..m * k)
        .map(|_| next() as f32 / (1u64 << 31) as f32 - 0.5)
        .collect();
    let adt = if head {
        DType::F32
    } else {
        w.activation_dtype()
    };
    let acts = quantize_acts(&pool, &x, m, k, adt)?;
    let mut out = vec![0f32; m * n];
    let mut best = f64::INFINITY;
    for _ in 0..iters {
        let t = Instant::now();
        for w in &ws {
            matmul_panels_with(kernel, &pool, w, &acts, &mut out)?;
        }
        best = best.min(t.elapsed().as_secs_f64() / copies as f64);
    }
    let macs = (m * n * k) as f64;
    let sum: f64 = out.iter().map(|&v| f64::from(v)).sum();
    println!(
        "{dtype} {n}x{k} m={m}, {copies} copies, 1 thread, {kernel:?} panels: best of {iters} {:.1} us, {:.1} GMAC/s, checksum {sum}",
        best * 1e6,
        macs / best / 1e9
    );
    Ok(())
}
