//! safetensors files: an 8-byte little-endian header length, a JSON header mapping tensor names
//! to `{dtype, shape, data_offsets: [begin, end]}` (plus optional string `__metadata__`), then
//! the raw data. Memory-mapped.
//!
//! Guarantees: a `SafetensorsFile` exists only if the header fits the file, every entry has a
//! known dtype, and every `data_offsets` range lies inside the data section with a length equal
//! to `numel * element size`. Overlapping ranges are not rejected. Every dtype is listed, but
//! only F32, F16 and BF16 map to a [`DType`]; requesting a tensor of another dtype (I64, U8,
//! BOOL, ...) through [`SafetensorsFile::tensor`] is [`FormatError::UnsupportedDtype`].
//! Tensor data may be unaligned: views are plain bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use oxllm_core::DType;
use serde_json::Value;

use crate::storage::Storage;
use crate::{FormatError, TensorView};

/// One header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsInfo {
    pub name: String,
    /// The dtype as written in the header (`"F32"`, `"I64"`, ...).
    pub dtype_name: String,
    /// `Some` for the dtypes oxllm computes with (F32, F16, BF16).
    pub dtype: Option<DType>,
    /// Outermost dimension first.
    pub shape: Vec<usize>,
    /// Byte range relative to the start of the data section.
    pub data_offsets: (usize, usize),
}

/// An open, validated safetensors file.
pub struct SafetensorsFile {
    storage: Storage,
    data_start: usize,
    tensors: Vec<SafetensorsInfo>,
    index: HashMap<String, usize>,
    metadata: BTreeMap<String, String>,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("tensors", &self.tensors.len())
            .field("metadata", &self.metadata)
            .finish()
    }
}

/// Bytes per element of a safetensors dtype name, or `None` if the name is unknown.
fn element_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 1,
        "U16" | "I16" | "F16" | "BF16" => 2,
        "U32" | "I32" | "F32" => 4,
        "U64" | "I64" | "F64" => 8,
        _ => return None,
    })
}

fn weight_dtype(dtype: &str) -> Option<DType> {
    match dtype {
        "F32" => Some(DType::F32),
        "F16" => Some(DType::F16),
        "BF16" => Some(DType::BF16),
        _ => None,
    }
}

fn bad_header(reason: impl Into<String>) -> FormatError {
    FormatError::BadHeader {
        reason: reason.into(),
    }
}

fn bad_entry(tensor: &str, reason: impl Into<String>) -> FormatError {
    FormatError::BadTensorEntry {
        tensor: tensor.to_owned(),
        reason: reason.into(),
    }
}

impl SafetensorsFile {
    /// Memory-maps and validates the file at `path`; parse errors name the path.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, FormatError> {
        let path = path.as_ref();
        let storage = Storage::map(path)?;
        Self::from_storage(storage).map_err(|e| e.in_file(path))
    }

    /// Validates a safetensors file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<SafetensorsFile, FormatError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<SafetensorsFile, FormatError> {
        let bytes = storage.bytes();
        let file_len = bytes.len() as u64;
        let len_bytes: [u8; 8] =
            bytes
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .ok_or(FormatError::Truncated {
                    what: "safetensors header length",
                    offset: 0,
                    needed: 8,
                    available: file_len,
                })?;
        let header_len = u64::from_le_bytes(len_bytes);
        let data_start = header_len
            .checked_add(8)
            .filter(|&end| end <= file_len)
            .and_then(|end| usize::try_from(end).ok())
            .ok_or(FormatError::HeaderOutOfBounds {
                len: header_len,
                file_len,
            })?;
        let header: Value = serde_json::from_slice(&bytes[8..data_start])
            .map_err(|e| bad_header(format!("JSON: {e}")))?;
        let Value::Object(entries) = header else {
            return Err(bad_header("not a JSON object"));
        };
        let data_len = bytes.len() - data_start;

        let mut metadata = BTreeMap::new();
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, entry) in &entries {
            if name == "__metadata__" {
                let Value::Object(map) = entry else {
                    return Err(bad_header("__metadata__ is not an object"));
                };
                for (k, v) in map {
                    let v = v.as_str().ok_or_else(|| {
                        bad_header(format!("__metadata__ value for {k:?} is not a string"))
                    })?;
                    metadata.insert(k.clone(), v.to_owned());
                }
                continue;
            }
            tensors.push(parse_entry(name, entry, data_len)?);
        }
        tensors.sort_by(|a, b| (a.data_offsets, &a.name).cmp(&(b.data_offsets, &b.name)));
        let index = tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(SafetensorsFile {
            storage,
            data_start,
            tensors,
            index,
            metadata,
        })
    }

    /// Every tensor, ordered by data offset.
    pub fn tensors(&self) -> &[SafetensorsInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&SafetensorsInfo> {
        self.index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The `__metadata__` string map (empty if absent).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The named tensor's bytes. [`FormatError::MissingTensor`] if absent,
    /// [`FormatError::UnsupportedDtype`] if its dtype is not F32/F16/BF16.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, FormatError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::MissingTensor(name.to_owned()))?;
        let dtype = info.dtype.ok_or_else(|| FormatError::UnsupportedDtype {
            tensor: info.name.clone(),
            dtype: info.dtype_name.clone(),
        })?;
        let (begin, end) = info.data_offsets;
        let data = self
            .storage
            .bytes()
            .get(self.data_start + begin..self.data_start + end)
            .ok_or_else(|| FormatError::TensorOutOfBounds {
                tensor: info.name.clone(),
                start: begin as u64,
                len: (end - begin) as u64,
                available: (self.storage.bytes().len() - self.data_start) as u64,
            })?;
        Ok(TensorView {
            name: &info.name,
            dtype,
            shape: &info.shape,
            data,
        })
    }
}

fn parse_entry(name: &str, entry: &Value, data_len: usize) -> Result<SafetensorsInfo, FormatError> {
    let dtype_name = entry
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_entry(name, "missing string \"dtype\""))?;
    let elem = element_size(dtype_name)
        .ok_or_else(|| bad_entry(name, format!("unknown dtype {dtype_name:?}")))?;
    let shape = entry
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| bad_entry(name, "missing array \"shape\""))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad_entry(name, "shape entries must be non-negative integers"))?;
    let offsets = entry
        .get("data_offsets")
        .and_then(Value::as_array)
        .filter(|a| a.len() == 2)
        .and_then(|a| {
            let b = usize::try_from(a[0].as_u64()?).ok()?;
            let e = usize::try_from(a[1].as_u64()?).ok()?;
            Some((b, e))
        })
        .ok_or_else(|| bad_entry(name, "\"data_offsets\" must be [begin, end]"))?;
    let (begin, end) = offsets;
    if begin > end || end > data_len {
        return Err(FormatError::TensorOutOfBounds {
            tensor: name.to_owned(),
            start: begin as u64,
            len: end.saturating_sub(begin) as u64,
            available: data_len as u64,
        });
    }
    let expected = shape
        .iter()
        .try_fold(elem, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad_entry(name, format!("shape {shape:?} overflows")))?;
    if end - begin != expected {
        return Err(bad_entry(
            name,
            format!(
                "data_offsets [{begin}, {end}] hold {} bytes, shape {shape:?} of {dtype_name} needs {expected}",
                end - begin
            ),
        ));
    }
    Ok(SafetensorsInfo {
        name: name.to_owned(),
        dtype_name: dtype_name.to_owned(),
        dtype: weight_dtype(dtype_name),
        shape,
        data_offsets: offsets,
    })
}
