//! Test-only GGUF writer: builds files in memory, including deliberately malformed ones.
//!
//! Guarantees: with default settings the output is a valid GGUF file whose last byte belongs to
//! the last tensor's data, so every strict prefix of it is truncated somewhere that matters.

use oxllm_formats::MetaValue;

pub fn put_u32(buf: &mut Vec<u8>, v: u32) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(&v.to_le_bytes());
}

pub fn put_str(buf: &mut Vec<u8>, s: &str) {
    put_u64(buf, s.len() as u64);
    buf.extend_from_slice(s.as_bytes());
}

/// Writes a value's payload (no type id). Arrays take their element type from the first
/// element (u8 when empty).
pub fn put_value(buf: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => buf.push(*x),
        MetaValue::I8(x) => buf.push(*x as u8),
        MetaValue::U16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => put_u32(buf, *x),
        MetaValue::I32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => buf.push(*x as u8),
        MetaValue::String(s) => put_str(buf, s),
        MetaValue::Array(items) => {
            put_u32(buf, items.first().map_or(0, MetaValue::type_id));
            put_u64(buf, items.len() as u64);
            for item in items {
                put_value(buf, item);
            }
        }
        MetaValue::U64(x) => put_u64(buf, *x),
        MetaValue::I64(x) => buf.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => buf.extend_from_slice(&x.to_le_bytes()),
    }
}

pub fn put_kv(buf: &mut Vec<u8>, key: &str, v: &MetaValue) {
    put_str(buf, key);
    put_u32(buf, v.type_id());
    put_value(buf, v);
}

pub struct Tensor {
    pub name: String,
    /// GGUF order: innermost first.
    pub ne: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
    /// Written instead of the computed offset when set (the data still goes at the computed one).
    pub offset_override: Option<u64>,
}

pub struct Builder {
    pub version: u32,
    /// Layout alignment; `with_alignment` also records it in the metadata.
    pub alignment: u64,
    pub kvs: Vec<(String, MetaValue)>,
    pub tensors: Vec<Tensor>,
}

impl Builder {
    pub fn new(version: u32) -> Builder {
        Builder {
            version,
            alignment: 32,
            kvs: Vec::new(),
            tensors: Vec::new(),
        }
    }

    pub fn kv(mut self, key: &str, v: MetaValue) -> Builder {
        self.kvs.push((key.to_owned(), v));
        self
    }

    pub fn with_alignment(mut self, a: u32) -> Builder {
        self.alignment = a.into();
        self.kv("general.alignment", MetaValue::U32(a))
    }

    pub fn tensor(mut self, name: &str, ne: &[u64], type_id: u32, data: Vec<u8>) -> Builder {
        self.tensors.push(Tensor {
            name: name.to_owned(),
            ne: ne.to_vec(),
            type_id,
            data,
            offset_override: None,
        });
        self
    }

    fn align(&self, x: usize) -> usize {
        let a = self.alignment as usize;
        x.div_ceil(a) * a
    }

    /// Data offsets (relative to the data section) the builder assigns to each tensor.
    pub fn offsets(&self) -> Vec<usize> {
        let mut at = 0;
        self.tensors
            .iter()
            .map(|t| {
                let off = self.align(at);
                at = off + t.data.len();
                off
            })
            .collect()
    }

    pub fn build(&self) -> Vec<u8> {
        let mut buf = b"GGUF".to_vec();
        put_u32(&mut buf, self.version);
        put_u64(&mut buf, self.tensors.len() as u64);
        put_u64(&mut buf, self.kvs.len() as u64);
        for (k, v) in &self.kvs {
            put_kv(&mut buf, k, v);
        }
        let offsets = self.offsets();
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            put_str(&mut buf, &t.name);
            put_u32(&mut buf, t.ne.len() as u32);
            for &d in &t.ne {
                put_u64(&mut buf, d);
            }
            put_u32(&mut buf, t.type_id);
            put_u64(&mut buf, t.offset_override.unwrap_or(off as u64));
        }
        let data_start = self.align(buf.len());
        buf.resize(data_start, 0);
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            buf.resize(data_start + off, 0);
            buf.extend_from_slice(&t.data);
        }
        buf
    }
}

/// `n` deterministic pseudo-random bytes (distinct per `seed`).
pub fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2654435761)
                .rotate_left(seed as u32 % 31) as u8
                ^ seed
        })
        .collect()
}
