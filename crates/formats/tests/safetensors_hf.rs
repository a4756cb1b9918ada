//! safetensors files and Hugging Face model directories (single-file and sharded): round trips
//! and each error case.

use std::path::Path;

use oxllm_formats::{DType, FormatError, HfModelDir, SafetensorsFile};
use serde_json::json;

/// Test-only safetensors writer: tensors as (name, dtype, shape, bytes), laid out in order.
fn st_bytes(
    tensors: &[(&str, &str, &[usize], Vec<u8>)],
    metadata: Option<serde_json::Value>,
) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            name.to_string(),
            json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]}),
        );
    }
    if let Some(m) = metadata {
        header.insert("__metadata__".into(), m);
    }
    with_header(&serde_json::Value::Object(header).to_string(), &data)
}

fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn sample() -> Vec<u8> {
    st_bytes(
        &[
            (
                "w.f32",
                "F32",
                &[2, 3],
                f32_bytes(&[1., 2., 3., 4., 5., 6.]),
            ),
            // Odd lengths so later tensors start unaligned.
            (
                "w.f16",
                "F16",
                &[3],
                vec![0x00, 0x3c, 0x00, 0x40, 0x00, 0xc0],
            ),
            ("w.bf16", "BF16", &[1, 1, 1], vec![0x80, 0x3f]),
            ("pos", "I64", &[2], vec![0; 16]),
            ("mask", "BOOL", &[3], vec![1, 0, 1]),
            ("scalar", "F32", &[], f32_bytes(&[7.0])),
        ],
        Some(json!({"format": "pt"})),
    )
}

fn err(b: Vec<u8>) -> FormatError {
    SafetensorsFile::from_bytes(b).unwrap_err()
}

#[test]
fn round_trip_f32_f16_bf16() {
    let f = SafetensorsFile::from_bytes(sample()).unwrap();
    assert_eq!(f.metadata().get("format").map(String::as_str), Some("pt"));
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["w.f32", "w.f16", "w.bf16", "pos", "mask", "scalar"]);

    let w = f.tensor("w.f32").unwrap();
    assert_eq!((w.dtype, w.shape, w.numel()), (DType::F32, &[2, 3][..], 6));
    assert_eq!(w.data, &f32_bytes(&[1., 2., 3., 4., 5., 6.])[..]);
    let h = f.tensor("w.f16").unwrap();
    assert_eq!((h.dtype, h.data.len()), (DType::F16, 6));
    assert_eq!(h.data, &[0x00, 0x3c, 0x00, 0x40, 0x00, 0xc0]);
    let b = f.tensor("w.bf16").unwrap();
    assert_eq!(
        (b.dtype, b.shape, b.data),
        (DType::BF16, &[1, 1, 1][..], &[0x80, 0x3f][..])
    );
    let s = f.tensor("scalar").unwrap();
    assert_eq!(
        (s.shape, s.numel(), s.data),
        (&[][..], 1, &7f32.to_le_bytes()[..])
    );
}

#[test]
fn non_float_tensors_are_listed_but_not_weights() {
    let f = SafetensorsFile::from_bytes(sample()).unwrap();
    let pos = f.tensor_info("pos").unwrap();
    assert_eq!((pos.dtype_name.as_str(), pos.dtype), ("I64", None));
    match f.tensor("pos").unwrap_err() {
        FormatError::UnsupportedDtype { tensor, dtype } => {
            assert_eq!((&*tensor, &*dtype), ("pos", "I64"))
        }
        e => panic!("{e}"),
    }
    assert!(matches!(
        f.tensor("mask"),
        Err(FormatError::UnsupportedDtype { .. })
    ));
    assert!(matches!(f.tensor("nope"), Err(FormatError::MissingTensor(n)) if n == "nope"));
}

#[test]
fn header_errors() {
    assert!(matches!(err(vec![1, 2, 3]), FormatError::Truncated { .. }));
    let mut b = sample();
    b[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(err(b), FormatError::HeaderOutOfBounds { len, .. } if len == 1 << 40));
    let mut b = sample();
    b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(err(b), FormatError::HeaderOutOfBounds { .. }));
    assert!(matches!(
        err(with_header("{not json", &[])),
        FormatError::BadHeader { .. }
    ));
    assert!(matches!(
        err(with_header("[1]", &[])),
        FormatError::BadHeader { .. }
    ));
    assert!(matches!(
        err(with_header(r#"{"__metadata__": {"a": 1}}"#, &[])),
        FormatError::BadHeader { .. }
    ));
    // Trailing-space padding is allowed.
    assert!(SafetensorsFile::from_bytes(with_header("{}    ", &[])).is_ok());
}

#[test]
fn entry_errors_name_the_tensor() {
    let cases = [
        r#"{"t": {"shape": [1], "data_offsets": [0, 4]}}"#,
        r#"{"t": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}"#,
        r#"{"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}"#,
        r#"{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}"#,
        r#"{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}"#,
        r#"{"t": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 4]}}"#,
    ];
    for h in cases {
        match err(with_header(h, &[0; 4])) {
            FormatError::BadTensorEntry { tensor, .. } => assert_eq!(tensor, "t", "{h}"),
            e => panic!("{h}: {e}"),
        }
    }
    for h in [
        r#"{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}"#,
        r#"{"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}"#,
    ] {
        match err(with_header(h, &[0; 4])) {
            FormatError::TensorOutOfBounds { tensor, .. } => assert_eq!(tensor, "t", "{h}"),
            e => panic!("{h}: {e}"),
        }
    }
}

#[test]
fn truncation_and_corruption_never_panic() {
    let full = sample();
    for len in 0..full.len() {
        let _ = SafetensorsFile::from_bytes(full[..len].to_vec());
    }
    for i in 0..full.len() {
        for x in [0u8, 0xFF, b'"', b'9'] {
            let mut b = full.clone();
            b[i] = x;
            if let Ok(f) = SafetensorsFile::from_bytes(b) {
                for t in f.tensors() {
                    let _ = f.tensor(&t.name);
                }
            }
        }
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn config() -> Vec<u8> {
    br#"{"model_type": "llama", "hidden_size": 8}"#.to_vec()
}

#[test]
fn single_file_dir() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "config.json", &config());
    write(d.path(), "model.safetensors", &sample());
    let m = HfModelDir::open(d.path()).unwrap();
    assert_eq!(m.path(), d.path());
    assert_eq!(m.config()["hidden_size"], 8);
    let names: Vec<&str> = m.tensor_names().collect();
    assert_eq!(names, ["mask", "pos", "scalar", "w.bf16", "w.f16", "w.f32"]);
    assert_eq!(m.tensor("w.f32").unwrap().shape, &[2, 3]);
    assert!(matches!(m.tensor("x"), Err(FormatError::MissingTensor(_))));
}

fn sharded(d: &Path) {
    write(d, "config.json", &config());
    write(
        d,
        "model-00001-of-00002.safetensors",
        &st_bytes(
            &[
                ("a", "F32", &[2], f32_bytes(&[1., 2.])),
                ("b", "F16", &[1], vec![0, 0x3c]),
            ],
            None,
        ),
    );
    write(
        d,
        "model-00002-of-00002.safetensors",
        &st_bytes(&[("c", "BF16", &[2, 1], vec![1, 2, 3, 4])], None),
    );
    let index = json!({
        "metadata": {"total_size": 14},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00001-of-00002.safetensors",
            "c": "model-00002-of-00002.safetensors",
        }
    });
    write(
        d,
        "model.safetensors.index.json",
        index.to_string().as_bytes(),
    );
}

#[test]
fn sharded_dir() {
    let d = tempfile::tempdir().unwrap();
    sharded(d.path());
    let m = HfModelDir::open(d.path()).unwrap();
    assert_eq!(m.tensor_names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(m.tensor("a").unwrap().data, &f32_bytes(&[1., 2.])[..]);
    assert_eq!(m.tensor("b").unwrap().dtype, DType::F16);
    let c = m.tensor("c").unwrap();
    assert_eq!(
        (c.dtype, c.shape, c.data),
        (DType::BF16, &[2, 1][..], &[1, 2, 3, 4][..])
    );
}

#[test]
fn dir_errors_name_the_file() {
    let d = tempfile::tempdir().unwrap();
    match HfModelDir::open(d.path()).unwrap_err() {
        FormatError::MissingFile { path } => assert_eq!(path, d.path().join("config.json")),
        e => panic!("{e}"),
    }
    write(d.path(), "config.json", b"{oops");
    match HfModelDir::open(d.path()).unwrap_err() {
        FormatError::Json { path, .. } => assert_eq!(path, d.path().join("config.json")),
        e => panic!("{e}"),
    }
    write(d.path(), "config.json", &config());
    assert!(matches!(
        HfModelDir::open(d.path()),
        Err(FormatError::MissingWeights { .. })
    ));

    // Missing shard, shard without the tensor, path escape, missing weight_map, corrupt shard.
    sharded(d.path());
    std::fs::remove_file(d.path().join("model-00002-of-00002.safetensors")).unwrap();
    match HfModelDir::open(d.path()).unwrap_err() {
        FormatError::MissingFile { path } => {
            assert_eq!(path, d.path().join("model-00002-of-00002.safetensors"))
        }
        e => panic!("{e}"),
    }
    let bad_index = |v: serde_json::Value| {
        write(
            d.path(),
            "model.safetensors.index.json",
            v.to_string().as_bytes(),
        );
        HfModelDir::open(d.path()).unwrap_err()
    };
    let e = bad_index(json!({"weight_map": {"zz": "model-00001-of-00002.safetensors"}}));
    assert!(
        matches!(e, FormatError::BadIndex { .. }) && e.to_string().contains("zz"),
        "{e}"
    );
    let e = bad_index(json!({"weight_map": {"a": "../model-00001-of-00002.safetensors"}}));
    assert!(matches!(e, FormatError::BadIndex { .. }), "{e}");
    let e = bad_index(json!({"metadata": {}}));
    assert!(matches!(e, FormatError::BadIndex { .. }), "{e}");

    write(
        d.path(),
        "model-00001-of-00002.safetensors",
        b"\xff\xff\xff\xff\xff\xff\xff\xff{}",
    );
    let e = bad_index(json!({"weight_map": {"a": "model-00001-of-00002.safetensors"}}));
    assert!(
        matches!(e.root(), FormatError::HeaderOutOfBounds { .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("model-00001-of-00002.safetensors"),
        "{e}"
    );
}
