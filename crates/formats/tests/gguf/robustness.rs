//! Malformed input never panics: every truncation, byte corruption (exhaustive and random),
//! and every committed fuzz regression input returns `Ok` or `Err`.

use std::path::Path;

use oxllm_formats::GgufFile;
use proptest::prelude::*;

use super::{sample, small};

/// Parses `bytes` both ways; a panic fails the test. When it parses, every tensor is viewable.
fn parse(bytes: &[u8]) -> bool {
    let ok = GgufFile::validate(bytes).is_ok();
    match GgufFile::from_bytes(bytes.to_vec()) {
        Ok(f) => {
            assert!(ok);
            for t in f.tensors() {
                let v = f.tensor(&t.name).unwrap();
                assert_eq!(v.data.len(), t.n_bytes());
            }
            true
        }
        Err(_) => {
            assert!(!ok);
            false
        }
    }
}

#[test]
fn every_truncation_is_an_error() {
    for full in [small(), sample(2, 64).build()] {
        assert!(parse(&full));
        for len in 0..full.len() {
            assert!(!parse(&full[..len]), "prefix of {len} bytes parsed");
        }
    }
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let full = small();
    for i in 0..full.len() {
        for x in [0x00, 0xFF, 0x80, 0x01, 0x09, 0x7F] {
            let mut b = full.clone();
            b[i] = x;
            parse(&b);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_corruption_never_panics(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut b = sample(3, 32).build();
        for (i, x) in flips {
            let i = i.index(b.len());
            b[i] = x;
        }
        if truncate {
            b.truncate(cut.index(b.len()));
        }
        parse(&b);
    }

    #[test]
    fn random_bytes_never_panic(mut b in prop::collection::vec(any::<u8>(), 0..512)) {
        if b.len() >= 8 && b[0] & 1 == 0 {
            // Make half the inputs get past the magic and version checks.
            b[..8].copy_from_slice(b"GGUF\x03\0\0\0");
        }
        parse(&b);
    }
}

#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            continue;
        }
        parse(&std::fs::read(&path).unwrap());
        n += 1;
    }
    eprintln!("{n} fuzz regression inputs parsed without panicking");
}

/// `OXLLM_WRITE_FUZZ_SEED=$PWD/fuzz/seeds cargo test -p oxllm-formats write_fuzz_seed`
/// regenerates the fuzzer's seed files.
#[test]
fn write_fuzz_seed() {
    if let Some(dir) = std::env::var_os("OXLLM_WRITE_FUZZ_SEED") {
        let dir = Path::new(&dir);
        std::fs::write(dir.join("small.gguf"), small()).unwrap();
        std::fs::write(dir.join("all_types.gguf"), sample(3, 64).build()).unwrap();
    }
}
