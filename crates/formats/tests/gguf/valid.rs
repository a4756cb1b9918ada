//! Valid GGUF files parse to exactly what was written.

use oxllm_formats::{DType, FormatError, GgufFile, MetaValue};

use super::writer::{bytes, Builder};
use super::{all_values, sample, small, F32, Q8_0};

fn check_sample(version: u32, alignment: u32) {
    let b = sample(version, alignment);
    let f = GgufFile::from_bytes(b.build()).unwrap();
    assert_eq!(f.version(), version);
    assert_eq!(f.alignment(), alignment as u64);
    assert_eq!(f.data_offset() % alignment as u64, 0);

    // Metadata: file order, exact values.
    let keys: Vec<&str> = f.metadata().iter().map(|(k, _)| k.as_str()).collect();
    let mut expected = vec!["general.architecture", "general.alignment"];
    expected.extend(all_values().iter().map(|(k, _)| *k));
    assert_eq!(keys, expected);
    for (k, v) in all_values() {
        assert_eq!(f.meta(k), Some(&v), "{k}");
    }

    // Tensors: shapes reversed, offsets aligned, bytes exact.
    let shapes: Vec<(&str, DType, Vec<usize>)> = f
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.dtype, t.shape.clone()))
        .collect();
    assert_eq!(
        shapes,
        vec![
            ("a.f32", DType::F32, vec![2, 3]),
            ("b.q4_1", DType::Q4_1, vec![3, 64]),
            ("c.q8_0", DType::Q8_0, vec![32]),
            ("d.q6k", DType::Q6K, vec![1, 2, 256]),
            ("e.f16", DType::F16, vec![5]),
        ]
    );
    for ((t, spec), off) in f.tensors().iter().zip(&b.tensors).zip(b.offsets()) {
        assert_eq!(t.offset, off as u64);
        assert_eq!(t.offset % alignment as u64, 0);
        let v = f.tensor(&t.name).unwrap();
        assert_eq!(v.name, t.name);
        assert_eq!(v.dtype, t.dtype);
        assert_eq!(v.shape, &t.shape[..]);
        assert_eq!(v.data, &spec.data[..]);
        assert_eq!(v.numel(), t.numel());
        assert_eq!(t.n_bytes(), spec.data.len());
    }
    assert_eq!(f.tensor("d.q6k").unwrap().numel(), 512);
}

#[test]
fn v3_every_value_type_and_dtype() {
    check_sample(3, 32);
}

#[test]
fn v2_every_value_type_and_dtype() {
    check_sample(2, 32);
}

#[test]
fn custom_alignments() {
    for a in [1, 8, 64, 256, 4096] {
        check_sample(3, a);
    }
}

#[test]
fn default_alignment_is_32() {
    let f = GgufFile::from_bytes(small()).unwrap();
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.data_offset() % 32, 0);
    assert_eq!(f.tensor("w").unwrap().shape, &[2, 32]);
}

#[test]
fn no_tensors_and_no_metadata() {
    let f = GgufFile::from_bytes(Builder::new(3).build()).unwrap();
    assert!(f.metadata().is_empty());
    assert!(f.tensors().is_empty());
}

#[test]
fn zero_dim_and_empty_tensors() {
    let f = GgufFile::from_bytes(
        Builder::new(3)
            .tensor("scalar", &[], F32, bytes(4, 1))
            .tensor("empty", &[0, 7], Q8_0, vec![])
            .tensor("last", &[1], F32, bytes(4, 2))
            .build(),
    )
    .unwrap();
    let s = f.tensor("scalar").unwrap();
    assert_eq!((s.shape, s.numel(), s.data.len()), (&[][..], 1, 4));
    let e = f.tensor("empty").unwrap();
    assert_eq!((e.shape, e.numel(), e.data.len()), (&[7, 0][..], 0, 0));
}

#[test]
fn empty_tensor_in_a_file_that_ends_before_the_data_section() {
    // Header (24) + one entry: name (8 + 1), n_dims (4), ne (2 * 8), type (4), offset (8) = 65
    // bytes; the data section would start at 96, past the end. (Fuzz regression.)
    let full = Builder::new(3).tensor("e", &[0, 7], F32, vec![]).build();
    assert_eq!(full.len(), 96);
    let f = GgufFile::from_bytes(full[..65].to_vec()).unwrap();
    assert_eq!(f.data_offset(), 96);
    let e = f.tensor("e").unwrap();
    assert_eq!((e.shape, e.data), (&[7, 0][..], &[][..]));
}

#[test]
fn meta_value_helpers() {
    use MetaValue::*;
    assert_eq!(U8(7).as_u64(), Some(7));
    assert_eq!(I8(7).as_u64(), Some(7));
    assert_eq!(I8(-1).as_u64(), None);
    assert_eq!(I64(-1).as_i64(), Some(-1));
    assert_eq!(U64(u64::MAX).as_i64(), None);
    assert_eq!(I32(5).as_u64(), Some(5));
    assert_eq!(U64(u64::MAX).as_u64(), Some(u64::MAX));
    assert_eq!(F32(1.0).as_u64(), None);
    assert_eq!(F64(0.5).as_f32(), Some(0.5));
    assert_eq!(U32(1).as_f32(), None);
    assert_eq!(String("x".into()).as_str(), Some("x"));
    assert_eq!(Bool(true).as_bool(), Some(true));
    assert_eq!(U8(1).as_bool(), None);
    assert_eq!(Array(vec![U8(1)]).as_array(), Some(&[U8(1)][..]));
}

#[test]
fn typed_getters_name_the_key() {
    let f = GgufFile::from_bytes(sample(3, 32).build()).unwrap();
    assert_eq!(f.meta_u64("t.u16").unwrap(), 60000);
    assert_eq!(f.meta_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.meta_f32("t.f32").unwrap(), 1.5e-5);
    assert_eq!(f.meta_f32("t.f64").unwrap(), -2.25);
    assert_eq!(f.meta_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.meta_array("t.array").unwrap().len(), 3);
    assert!(f.meta_bool("t.bool").unwrap());
    match f.meta_u64("nope").unwrap_err() {
        FormatError::MissingKey { key } => assert_eq!(key, "nope"),
        e => panic!("{e}"),
    }
    match f.meta_u64("t.i8").unwrap_err() {
        FormatError::WrongType { key, found, .. } => assert_eq!((&*key, found), ("t.i8", "i8")),
        e => panic!("{e}"),
    }
    let e = f.meta_str("t.u8").unwrap_err();
    assert!(e.to_string().contains("t.u8"), "{e}");
    match f.tensor("nope").unwrap_err() {
        FormatError::MissingTensor(n) => assert_eq!(n, "nope"),
        e => panic!("{e}"),
    }
}

#[test]
fn open_maps_a_file_and_names_the_path_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.gguf");
    std::fs::write(&good, sample(3, 64).build()).unwrap();
    let f = GgufFile::open(&good).unwrap();
    assert_eq!(f.tensors().len(), 5);
    assert_eq!(f.tensor("c.q8_0").unwrap().data.len(), 34);

    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGML\x03\0\0\0").unwrap();
    let e = GgufFile::open(&bad).unwrap_err();
    assert!(matches!(e, FormatError::InFile { .. }));
    assert!(matches!(e.root(), FormatError::BadMagic { .. }));
    assert!(e.to_string().contains("bad.gguf"), "{e}");

    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err();
    assert!(matches!(e.root(), FormatError::Truncated { .. }), "{e}");

    let missing = dir.path().join("missing.gguf");
    match GgufFile::open(&missing).unwrap_err() {
        FormatError::MissingFile { path } => assert_eq!(path, missing),
        e => panic!("{e}"),
    }
}
