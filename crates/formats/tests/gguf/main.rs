//! GGUF reader tests: valid files of every value type and several dtypes, each validation
//! error, robustness against truncation and corruption, fuzz regressions, and the real model.

mod invalid;
mod real_model;
mod robustness;
mod valid;
mod writer;

use oxllm_formats::MetaValue;
use writer::{bytes, Builder};

/// GGML type ids used by the tests.
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const Q4_1: u32 = 3;
pub const Q8_0: u32 = 8;
pub const Q6K: u32 = 14;

/// One metadata value of every type, including nested arrays.
pub fn all_values() -> Vec<(&'static str, MetaValue)> {
    use MetaValue::*;
    vec![
        ("t.u8", U8(200)),
        ("t.i8", I8(-100)),
        ("t.u16", U16(60000)),
        ("t.i16", I16(-30000)),
        ("t.u32", U32(4_000_000_000)),
        ("t.i32", I32(-2_000_000_000)),
        ("t.f32", F32(1.5e-5)),
        ("t.bool", Bool(true)),
        ("t.string", String("héllo wörld".into())),
        ("t.array", Array(vec![U32(1), U32(2), U32(3)])),
        ("t.u64", U64(u64::MAX)),
        ("t.i64", I64(i64::MIN)),
        ("t.f64", F64(-2.25)),
        ("t.empty", Array(vec![])),
        (
            "t.strings",
            Array(vec![
                String("a".into()),
                String("".into()),
                String("ccc".into()),
            ]),
        ),
        (
            "t.nested",
            Array(vec![
                Array(vec![I16(1), I16(-2)]),
                Array(vec![]),
                Array(vec![I16(3)]),
            ]),
        ),
        ("t.bools", Array(vec![Bool(false), Bool(true)])),
    ]
}

/// A valid file: every value type, custom alignment, tensors of several dtypes.
pub fn sample(version: u32, alignment: u32) -> Builder {
    let mut b = Builder::new(version)
        .kv("general.architecture", MetaValue::String("llama".into()))
        .with_alignment(alignment);
    for (k, v) in all_values() {
        b = b.kv(k, v);
    }
    b.tensor("a.f32", &[3, 2], F32, bytes(24, 1))
        .tensor("b.q4_1", &[64, 3], Q4_1, bytes(2 * 20 * 3, 2))
        .tensor("c.q8_0", &[32], Q8_0, bytes(34, 3))
        .tensor("d.q6k", &[256, 2, 1], Q6K, bytes(210 * 2, 4))
        .tensor("e.f16", &[5], F16, bytes(10, 5))
}

/// A small valid file (for seeds and quick loops).
pub fn small() -> Vec<u8> {
    Builder::new(3)
        .kv("general.architecture", MetaValue::String("llama".into()))
        .kv(
            "n",
            MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::U8(1)])]),
        )
        .kv("f", MetaValue::F32(0.5))
        .tensor("w", &[32, 2], Q8_0, bytes(68, 7))
        .tensor("b", &[2], F32, bytes(8, 8))
        .build()
}
