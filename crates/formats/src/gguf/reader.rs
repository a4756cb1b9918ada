//! The GGUF byte parser: header, metadata key/values, tensor table, data-section layout.
//!
//! Guarantees: works on any `&[u8]` and never panics; every read is bounds-checked and every
//! size computation is checked for overflow. Counts read from the file never drive an
//! allocation larger than the bytes that remain could describe (and at most a fixed cap), so a
//! hostile count costs nothing until its elements are actually present. Array nesting is limited
//! to [`MAX_ARRAY_DEPTH`]. On success every tensor's bytes lie inside the buffer, start at an
//! aligned offset, and cover a whole number of blocks per row.

use std::collections::HashMap;

use oxllm_core::DType;

use super::value::{type_id, MetaValue};
use super::TensorInfo;
use crate::FormatError;

/// Deepest array nesting accepted (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 8;
/// Most dimensions a GGUF tensor may have (GGML's limit).
pub const MAX_DIMS: u32 = 4;
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Metadata key that overrides the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Upper bound on any up-front `Vec` reservation driven by a count read from the file.
const MAX_PREALLOC: usize = 1 << 14;

/// Everything the header describes; tensor offsets are relative to `data_offset`.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, MetaValue)>,
    pub meta_index: HashMap<String, usize>,
    pub tensors: Vec<TensorInfo>,
    pub tensor_index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], FormatError> {
        let available = self.remaining();
        match usize::try_from(n) {
            Ok(n) if n <= available => {
                let s = &self.buf[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            _ => Err(FormatError::Truncated {
                what,
                offset: self.pos as u64,
                needed: n,
                available: available as u64,
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FormatError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, FormatError> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 byte length, then UTF-8 bytes (no terminator).
    fn string(&mut self, what: &'static str) -> Result<String, FormatError> {
        let len = self.u64(what)?;
        let start = self.pos as u64;
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(FormatError::InvalidUtf8 {
                what,
                offset: start,
            }),
        }
    }

    /// Reservation for `count` items of at least `min_size` encoded bytes each.
    fn capacity_for(&self, count: u64, min_size: usize) -> usize {
        let fit = self.remaining() / min_size.max(1);
        usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(fit)
            .min(MAX_PREALLOC)
    }

    /// One value of type `ty`; `depth` is the number of arrays enclosing it.
    fn value(&mut self, ty: u32, depth: usize) -> Result<MetaValue, FormatError> {
        const W: &str = "metadata value";
        Ok(match ty {
            type_id::U8 => MetaValue::U8(self.u8(W)?),
            type_id::I8 => MetaValue::I8(self.u8(W)? as i8),
            type_id::U16 => MetaValue::U16(self.u16(W)?),
            type_id::I16 => MetaValue::I16(self.u16(W)? as i16),
            type_id::U32 => MetaValue::U32(self.u32(W)?),
            type_id::I32 => MetaValue::I32(self.u32(W)? as i32),
            type_id::F32 => MetaValue::F32(f32::from_bits(self.u32(W)?)),
            type_id::BOOL => {
                let offset = self.pos as u64;
                match self.u8(W)? {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    value => return Err(FormatError::InvalidBool { value, offset }),
                }
            }
            type_id::STRING => MetaValue::String(self.string("metadata string")?),
            type_id::ARRAY => {
                let offset = self.pos as u64;
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(FormatError::NestingTooDeep {
                        max: MAX_ARRAY_DEPTH,
                        offset,
                    });
                }
                let elem_ty = self.u32("array element type")?;
                let min_size = min_encoded_size(elem_ty).ok_or(FormatError::UnknownValueType {
                    type_id: elem_ty,
                    offset,
                })?;
                let count = self.u64("array length")?;
                let mut items = Vec::with_capacity(self.capacity_for(count, min_size));
                for _ in 0..count {
                    items.push(self.value(elem_ty, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            type_id::U64 => MetaValue::U64(self.u64(W)?),
            type_id::I64 => MetaValue::I64(self.u64(W)? as i64),
            type_id::F64 => MetaValue::F64(f64::from_bits(self.u64(W)?)),
            other => {
                return Err(FormatError::UnknownValueType {
                    type_id: other,
                    offset: self.pos.saturating_sub(4) as u64,
                })
            }
        })
    }
}

/// Smallest encoding of a value of type `ty`, or `None` for an unknown type.
fn min_encoded_size(ty: u32) -> Option<usize> {
    Some(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        type_id::ARRAY => 12,
        _ => return None,
    })
}

/// A tensor-table entry as stored, before layout validation.
struct RawTensor {
    name: String,
    ne: Vec<u64>,
    dtype: DType,
    offset: u64,
}

/// Parses and validates a whole GGUF file held in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, FormatError> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.array("magic")?;
    if &magic != b"GGUF" {
        return Err(FormatError::BadMagic { found: magic });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(FormatError::UnsupportedVersion { version });
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;

    // Metadata: key string, u32 type, value.
    let mut metadata = Vec::with_capacity(c.capacity_for(n_kv, 13));
    let mut meta_index = HashMap::with_capacity(c.capacity_for(n_kv, 13));
    for _ in 0..n_kv {
        let key = c.string("metadata key")?;
        let ty = c.u32("metadata value type")?;
        let value = c.value(ty, 0)?;
        if meta_index.contains_key(&key) {
            return Err(FormatError::DuplicateKey { key });
        }
        meta_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }

    let alignment = match meta_index.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.as_u64().ok_or_else(|| FormatError::WrongType {
                key: ALIGNMENT_KEY.to_owned(),
                expected: "unsigned integer",
                found: v.type_name(),
            })?;
            if !a.is_power_of_two() {
                return Err(FormatError::BadAlignment { value: a });
            }
            a
        }
    };

    // Tensor table: name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset.
    let mut raw = Vec::with_capacity(c.capacity_for(n_tensors, 24));
    let mut tensor_index = HashMap::with_capacity(c.capacity_for(n_tensors, 24));
    for _ in 0..n_tensors {
        let name = c.string("tensor name")?;
        let n_dims = c.u32("tensor dimension count")?;
        if n_dims > MAX_DIMS {
            return Err(FormatError::TooManyDims {
                tensor: name,
                n_dims,
                max: MAX_DIMS,
            });
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(c.u64("tensor dimension")?);
        }
        let type_id = c.u32("tensor type")?;
        let dtype = DType::from_ggml_id(type_id).map_err(|_| FormatError::UnknownTensorType {
            tensor: name.clone(),
            type_id,
        })?;
        let offset = c.u64("tensor offset")?;
        if tensor_index.contains_key(&name) {
            return Err(FormatError::DuplicateTensor { tensor: name });
        }
        tensor_index.insert(name.clone(), raw.len());
        raw.push(RawTensor {
            name,
            ne,
            dtype,
            offset,
        });
    }

    // The data section starts at the first aligned offset after the tensor table.
    let data_offset =
        align_up(c.pos as u64, alignment).ok_or(FormatError::BadAlignment { value: alignment })?;
    let available = (buf.len() as u64).saturating_sub(data_offset);
    let tensors = raw
        .into_iter()
        .map(|t| layout(t, alignment, available))
        .collect::<Result<Vec<_>, _>>()?;

    Ok(Parsed {
        version,
        metadata,
        meta_index,
        tensors,
        tensor_index,
        alignment,
        data_offset,
    })
}

fn align_up(x: u64, alignment: u64) -> Option<u64> {
    let mask = alignment - 1;
    Some(x.checked_add(mask)? & !mask)
}

/// Validates one tensor's shape and byte range; `available` is the data-section length.
fn layout(t: RawTensor, alignment: u64, available: u64) -> Result<TensorInfo, FormatError> {
    let overflow = || FormatError::DimOverflow {
        tensor: t.name.clone(),
        dims: t.ne.clone(),
    };
    // GGUF stores `ne` innermost first; oxllm shapes are outermost first.
    let shape =
        t.ne.iter()
            .rev()
            .map(|&d| {
                usize::try_from(d)
                    .ok()
                    .filter(|&d| d as u64 <= i64::MAX as u64)
            })
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(overflow)?;
    let inner = shape.last().copied().unwrap_or(1);
    let rows = shape[..shape.len().saturating_sub(1)]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    inner.checked_mul(rows).ok_or_else(overflow)?;
    // `DType::row_bytes` does not check its multiplication; keep it in range first.
    (inner / t.dtype.block_size())
        .checked_mul(t.dtype.type_size())
        .ok_or_else(overflow)?;
    let row_bytes = t
        .dtype
        .row_bytes(inner)
        .map_err(|_| FormatError::PartialBlock {
            tensor: t.name.clone(),
            dtype: t.dtype,
            len: inner,
            block: t.dtype.block_size(),
        })?;
    let n_bytes = row_bytes.checked_mul(rows).ok_or_else(overflow)?;
    if t.offset & (alignment - 1) != 0 {
        return Err(FormatError::MisalignedTensor {
            tensor: t.name,
            offset: t.offset,
            alignment,
        });
    }
    let fits = t
        .offset
        .checked_add(n_bytes as u64)
        .is_some_and(|end| end <= available);
    if !fits {
        return Err(FormatError::TensorOutOfBounds {
            tensor: t.name,
            start: t.offset,
            len: n_bytes as u64,
            available,
        });
    }
    Ok(TensorInfo {
        name: t.name,
        dtype: t.dtype,
        shape,
        offset: t.offset,
        n_bytes,
    })
}
