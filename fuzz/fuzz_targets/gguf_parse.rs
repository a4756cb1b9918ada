//! Fuzz target: parse arbitrary bytes as GGUF; any panic, overflow or hang is a bug.
//! When the bytes parse, every tensor view must be obtainable and the right size.

#![no_main]

use libfuzzer_sys::fuzz_target;
use oxllm_formats::GgufFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_bytes(data.to_vec()) {
        for t in f.tensors() {
            let v = f.tensor(&t.name).expect("listed tensor must be viewable");
            assert_eq!(v.data.len(), t.n_bytes());
        }
        for (k, _) in f.metadata() {
            assert!(f.meta(k).is_some());
        }
    }
});
