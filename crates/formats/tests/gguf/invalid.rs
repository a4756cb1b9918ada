//! Each validation error is detected and reported as the right variant, naming the culprit.

use oxllm_formats::{DType, FormatError, GgufFile, MetaValue};

use super::writer::{bytes, put_kv, put_str, put_u32, put_u64, Builder};
use super::{sample, F32, Q4_1, Q8_0};

fn err(b: Vec<u8>) -> FormatError {
    let e = GgufFile::from_bytes(b.clone()).unwrap_err();
    // `validate` agrees with `from_bytes`.
    assert!(GgufFile::validate(&b).is_err());
    e
}

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    put_u32(&mut b, version);
    put_u64(&mut b, n_tensors);
    put_u64(&mut b, n_kv);
    b
}

/// A file with one key of raw type `ty` followed by `payload`.
fn raw_kv(ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = header(3, 0, 1);
    put_str(&mut b, "key");
    put_u32(&mut b, ty);
    b.extend_from_slice(payload);
    b
}

#[test]
fn bad_magic() {
    let mut b = sample(3, 32).build();
    b[0] = b'X';
    assert!(matches!(err(b), FormatError::BadMagic { found } if &found == b"XGUF"));
}

#[test]
fn unsupported_versions() {
    for v in [0, 1, 4, 0x0300_0000] {
        let mut b = Builder::new(v).build();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        match err(b) {
            FormatError::UnsupportedVersion { version } => assert_eq!(version, v),
            e => panic!("{e}"),
        }
    }
    assert!(err(header(1, 0, 0)).to_string().contains("version 1"));
}

#[test]
fn truncated_header() {
    for len in 0..24 {
        let e = err(header(3, 0, 0)[..len].to_vec());
        assert!(matches!(e, FormatError::Truncated { .. }), "{len}: {e}");
    }
}

#[test]
fn truncated_kv_and_tensor_table_and_data() {
    let full = sample(3, 32).build();
    let f = GgufFile::from_bytes(full.clone()).unwrap();
    let data_offset = f.data_offset() as usize;
    // Cut inside the metadata, inside the tensor table, and inside the data.
    for cut in [30, 200, data_offset - 40, data_offset + 5, full.len() - 1] {
        let e = err(full[..cut].to_vec());
        let ok = if cut < data_offset {
            matches!(e, FormatError::Truncated { .. })
        } else {
            matches!(e, FormatError::TensorOutOfBounds { .. })
        };
        assert!(ok, "cut {cut}: {e}");
    }
}

#[test]
fn huge_counts_fail_without_allocating() {
    let e = err(header(3, u64::MAX, u64::MAX));
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    let e = err(header(3, u64::MAX, 0));
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    let mut payload = Vec::new();
    put_u32(&mut payload, 9); // array of arrays
    put_u64(&mut payload, u64::MAX);
    let e = err(raw_kv(9, &payload));
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
}

#[test]
fn string_length_past_end() {
    let mut payload = Vec::new();
    put_u64(&mut payload, 1 << 40);
    payload.extend_from_slice(b"abc");
    let e = err(raw_kv(8, &payload));
    assert!(
        matches!(e, FormatError::Truncated { needed, .. } if needed == 1 << 40),
        "{e}"
    );
    let mut b = header(3, 0, 1);
    put_u64(&mut b, u64::MAX); // key length
    assert!(matches!(err(b), FormatError::Truncated { .. }));
}

#[test]
fn invalid_utf8() {
    let mut b = header(3, 0, 1);
    put_u64(&mut b, 2);
    b.extend_from_slice(&[0xC3, 0x28]);
    put_u32(&mut b, 0);
    b.push(0);
    assert!(matches!(
        err(b),
        FormatError::InvalidUtf8 { offset: 32, .. }
    ));

    let mut payload = Vec::new();
    put_u64(&mut payload, 1);
    payload.push(0xFF);
    assert!(matches!(
        err(raw_kv(8, &payload)),
        FormatError::InvalidUtf8 { .. }
    ));
}

#[test]
fn unknown_value_types() {
    match err(raw_kv(13, &[0; 8])) {
        FormatError::UnknownValueType { type_id, .. } => assert_eq!(type_id, 13),
        e => panic!("{e}"),
    }
    let mut payload = Vec::new();
    put_u32(&mut payload, 99);
    put_u64(&mut payload, 1);
    payload.extend_from_slice(&[0; 8]);
    match err(raw_kv(9, &payload)) {
        FormatError::UnknownValueType { type_id, .. } => assert_eq!(type_id, 99),
        e => panic!("{e}"),
    }
}

#[test]
fn invalid_bool() {
    assert!(matches!(
        err(raw_kv(7, &[2])),
        FormatError::InvalidBool { value: 2, .. }
    ));
}

fn nested(depth: usize) -> MetaValue {
    (0..depth).fold(MetaValue::U8(1), |v, _| MetaValue::Array(vec![v]))
}

#[test]
fn nesting_depth_is_limited() {
    let ok = Builder::new(3).kv("deep", nested(8)).build();
    let f = GgufFile::from_bytes(ok).unwrap();
    assert_eq!(f.meta("deep"), Some(&nested(8)));
    let e = err(Builder::new(3).kv("deep", nested(9)).build());
    assert!(
        matches!(e, FormatError::NestingTooDeep { max: 8, .. }),
        "{e}"
    );
    // A hostile chain of 100k nested array headers must not overflow the stack.
    let mut payload = Vec::new();
    for _ in 0..100_000 {
        put_u32(&mut payload, 9);
        put_u64(&mut payload, 1);
    }
    assert!(matches!(
        err(raw_kv(9, &payload)),
        FormatError::NestingTooDeep { .. }
    ));
}

#[test]
fn duplicate_keys() {
    let b = Builder::new(3)
        .kv("k", MetaValue::U8(1))
        .kv("k", MetaValue::U8(2))
        .build();
    assert!(matches!(err(b), FormatError::DuplicateKey { key } if key == "k"));
}

#[test]
fn bad_alignment() {
    for a in [0u32, 3, 48] {
        let b = Builder::new(3)
            .kv("general.alignment", MetaValue::U32(a))
            .build();
        match err(b) {
            FormatError::BadAlignment { value } => assert_eq!(value, a as u64),
            e => panic!("{a}: {e}"),
        }
    }
    let b = Builder::new(3)
        .kv("general.alignment", MetaValue::String("32".into()))
        .build();
    assert!(matches!(err(b), FormatError::WrongType { key, .. } if key == "general.alignment"));
    let b = Builder::new(3)
        .kv("general.alignment", MetaValue::U64(1 << 63))
        .tensor("t", &[1], F32, bytes(4, 1))
        .build();
    assert!(GgufFile::from_bytes(b).is_err());
}

#[test]
fn unknown_tensor_type_names_tensor_and_id() {
    let b = Builder::new(3).tensor("weird", &[4], 4, vec![0; 8]).build();
    match err(b) {
        FormatError::UnknownTensorType { tensor, type_id } => {
            assert_eq!((tensor.as_str(), type_id), ("weird", 4))
        }
        e => panic!("{e}"),
    }
}

#[test]
fn too_many_dims() {
    let b = Builder::new(3)
        .tensor("t5", &[1, 1, 1, 1, 1], F32, vec![0; 4])
        .build();
    assert!(matches!(err(b), FormatError::TooManyDims { tensor, n_dims: 5, .. } if tensor == "t5"));
    let mut b = header(3, 1, 0);
    put_str(&mut b, "t");
    put_u32(&mut b, u32::MAX);
    assert!(matches!(err(b), FormatError::TooManyDims { .. }));
}

#[test]
fn dim_overflow() {
    for ne in [
        vec![1u64 << 40, 1 << 40],
        vec![u64::MAX],
        vec![1 << 63],
        vec![4, 1 << 62],
        // numel fits in usize but its byte size does not (once panicked inside row_bytes).
        vec![1 << 62],
    ] {
        let b = Builder::new(3).tensor("big", &ne, F32, vec![0; 4]).build();
        match err(b) {
            FormatError::DimOverflow { tensor, dims } => {
                assert_eq!((tensor.as_str(), dims), ("big", ne))
            }
            e => panic!("{ne:?}: {e}"),
        }
    }
}

#[test]
fn partial_block() {
    let b = Builder::new(3)
        .tensor("q", &[33, 2], Q4_1, vec![0; 80])
        .build();
    match err(b) {
        FormatError::PartialBlock {
            tensor,
            dtype,
            len,
            block,
        } => assert_eq!(
            (tensor.as_str(), dtype, len, block),
            ("q", DType::Q4_1, 33, 32)
        ),
        e => panic!("{e}"),
    }
}

#[test]
fn tensor_past_end_names_tensor() {
    let mut b = Builder::new(3)
        .tensor("ok", &[32], Q8_0, bytes(34, 1))
        .tensor("short", &[64], Q8_0, bytes(68, 2));
    b.tensors[1].data.truncate(60);
    match err(b.build()) {
        FormatError::TensorOutOfBounds { tensor, len, .. } => {
            assert_eq!((tensor.as_str(), len), ("short", 68))
        }
        e => panic!("{e}"),
    }
    let mut b = Builder::new(3).tensor("far", &[1], F32, bytes(4, 1));
    b.tensors[0].offset_override = Some(u64::MAX - 31);
    assert!(
        matches!(err(b.build()), FormatError::TensorOutOfBounds { tensor, .. } if tensor == "far")
    );
}

#[test]
fn misaligned_offset() {
    let mut b = Builder::new(3)
        .with_alignment(64)
        .tensor("m", &[1], F32, bytes(4, 1))
        .tensor("n", &[1], F32, bytes(4, 1));
    b.tensors[0].offset_override = Some(32);
    match err(b.build()) {
        FormatError::MisalignedTensor {
            tensor,
            offset,
            alignment,
        } => assert_eq!((tensor.as_str(), offset, alignment), ("m", 32, 64)),
        e => panic!("{e}"),
    }
}

#[test]
fn duplicate_tensor_names() {
    let b = Builder::new(3)
        .tensor("dup", &[1], F32, bytes(4, 1))
        .tensor("dup", &[1], F32, bytes(4, 2))
        .build();
    assert!(matches!(err(b), FormatError::DuplicateTensor { tensor } if tensor == "dup"));
}

#[test]
fn kv_written_by_hand_matches_writer() {
    // Guards the test writer itself against drifting from the reader.
    let mut b = header(2, 0, 1);
    put_kv(&mut b, "x", &MetaValue::I16(-3));
    let f = GgufFile::from_bytes(b).unwrap();
    assert_eq!(f.meta("x"), Some(&MetaValue::I16(-3)));
}
