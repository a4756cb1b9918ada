//! Dequantization and activation quantization against fixtures produced by gguf-py
//! (`scripts/oracle/quant_fixtures.py`, stored in tests/fixtures/quant/). Comparisons are
//! bit-exact.

use oxllm_kernels::quant::{dequantize_row, quantize_row, quantize_row_scalar, DType};
use std::path::PathBuf;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/quant")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn dequantize_matches_gguf_py_bit_exact() {
    let cases = [
        ("f16", DType::F16),
        ("bf16", DType::BF16),
        ("q4_0", DType::Q4_0),
        ("q4_1", DType::Q4_1),
        ("q8_0", DType::Q8_0),
        ("q4_k", DType::Q4K),
        ("q5_k", DType::Q5K),
        ("q6_k", DType::Q6K),
    ];
    for (name, dt) in cases {
        let q = fixture(&format!("{name}.q.bin"));
        let want = f32s(&fixture(&format!("{name}.f32.bin")));
        assert_eq!(
            dt.row_bytes(want.len()).unwrap(),
            q.len(),
            "{name} fixture size"
        );
        let mut got = vec![0f32; want.len()];
        dequantize_row(dt, &q, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name}[{i}]: {g} != {w}");
        }
    }
}

#[test]
fn q8_0_activation_quantization_matches_gguf_py() {
    let src = f32s(&fixture("act_q8_0.src.f32.bin"));
    let want = fixture("act_q8_0.q.bin");
    let mut got = vec![0u8; want.len()];
    quantize_row(DType::Q8_0, &src, &mut got).unwrap();
    assert_eq!(got, want, "dispatching quantize_row");
    got.fill(0);
    quantize_row_scalar(DType::Q8_0, &src, &mut got).unwrap();
    assert_eq!(got, want, "scalar quantize_row");
}

#[test]
fn q8_1_activation_is_q8_0_plus_sum() {
    // gguf-py has no Q8_1 quantizer: d and qs must equal its Q8_0, s = f16(d_f32 * sum(qs)).
    let src = f32s(&fixture("act_q8_0.src.f32.bin"));
    let q80 = fixture("act_q8_0.q.bin");
    let mut got = vec![0u8; DType::Q8_1.row_bytes(src.len()).unwrap()];
    quantize_row(DType::Q8_1, &src, &mut got).unwrap();
    let mut sc = vec![0u8; got.len()];
    quantize_row_scalar(DType::Q8_1, &src, &mut sc).unwrap();
    assert_eq!(got, sc, "AVX2 == scalar");
    for (b, (g, w)) in got.chunks_exact(36).zip(q80.chunks_exact(34)).enumerate() {
        assert_eq!(g[0..2], w[0..2], "block {b} d");
        assert_eq!(g[4..], w[2..], "block {b} qs");
        let x = &src[32 * b..32 * b + 32];
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let sum: i32 = g[4..].iter().map(|&q| q as i8 as i32).sum();
        let s = half::f16::from_f32(sum as f32 * (amax / 127.0));
        assert_eq!(g[2..4], s.to_bits().to_le_bytes(), "block {b} s");
    }
}

#[test]
fn q8_k_activation_round_trip_and_bsums() {
    let mut src: Vec<f32> = (0..1024)
        .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.01)
        .collect();
    src[256..512].fill(0.0);
    src[600] = 9.0; // block 2: positive max, so -max maps to +127 (clamped)
    src[601] = -9.0;
    let mut q = vec![0u8; DType::Q8K.row_bytes(src.len()).unwrap()];
    quantize_row(DType::Q8K, &src, &mut q).unwrap();
    let mut qs = vec![0u8; q.len()];
    quantize_row_scalar(DType::Q8K, &src, &mut qs).unwrap();
    assert_eq!(q, qs, "dispatch == scalar");
    let mut back = vec![0f32; src.len()];
    dequantize_row(DType::Q8K, &q, &mut back).unwrap();
    for (b, blk) in q.chunks_exact(292).enumerate() {
        let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
        let qv: Vec<i32> = blk[4..260].iter().map(|&v| v as i8 as i32).collect();
        for g in 0..16 {
            let bs = i16::from_le_bytes([blk[260 + 2 * g], blk[261 + 2 * g]]) as i32;
            assert_eq!(
                bs,
                qv[16 * g..16 * g + 16].iter().sum::<i32>(),
                "bsum {b}/{g}"
            );
        }
        for i in 0..256 {
            let (x, y) = (src[256 * b + i], back[256 * b + i]);
            assert!(
                (x - y).abs() <= d.abs() * 0.5001 + 1e-7,
                "block {b}[{i}]: {x} vs {y}"
            );
        }
    }
    assert_eq!(q[2 * 292 + 4 + 600 - 512] as i8, -127);
    assert_eq!(q[2 * 292 + 4 + 601 - 512] as i8, 127);
}

#[test]
fn length_and_type_errors() {
    let mut out = vec![0f32; 32];
    assert!(dequantize_row(DType::Q4_0, &[0u8; 17], &mut out).is_err());
    assert!(dequantize_row(DType::Q2K, &[0u8; 84], &mut [0f32; 256]).is_err());
    let mut dst = [0u8; 34];
    assert!(quantize_row(DType::Q8_0, &[0f32; 32], &mut dst[..33]).is_err());
    assert!(quantize_row(DType::Q8_0, &[0f32; 31], &mut dst[..34]).is_err());
    assert!(quantize_row(DType::Q4_0, &[0f32; 32], &mut dst[..18]).is_err());
    let mut f = vec![0u8; 12];
    quantize_row(DType::F32, &[1.0, -2.0, 3.5], &mut f).unwrap();
    let mut back = [0f32; 3];
    dequantize_row(DType::F32, &f, &mut back).unwrap();
    assert_eq!(back, [1.0, -2.0, 3.5]);
}
