//! GGUF files (versions 2 and 3, little-endian): metadata and tensors, memory-mapped.
//!
//! Guarantees: a `GgufFile` exists only if the whole header validated (see [`reader`] for the
//! list of checks), so [`GgufFile::tensor`] never fails for a listed tensor and its bytes are
//! in bounds. Shapes follow oxllm's convention: **outermost dimension first** (PyTorch order),
//! i.e. GGUF's `ne` array reversed. A GGUF matrix stored with `ne = [576, 49152]` (576
//! contiguous elements per row, 49152 rows) has `shape == [49152, 576]`.

pub mod reader;
pub mod value;

use std::path::Path;

use oxllm_core::DType;

use crate::storage::Storage;
use crate::{FormatError, TensorView};
pub use value::MetaValue;

/// One tensor-table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: DType,
    /// Outermost dimension first: GGUF's `ne` reversed. The last entry is contiguous.
    pub shape: Vec<usize>,
    /// Byte offset of the data, relative to the start of the data section.
    pub offset: u64,
    pub(crate) n_bytes: usize,
}

impl TensorInfo {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Stored size of the tensor's data in bytes.
    pub fn n_bytes(&self) -> usize {
        self.n_bytes
    }
}

/// An open, validated GGUF file.
pub struct GgufFile {
    storage: Storage,
    header: reader::Parsed,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.header.version)
            .field("metadata", &self.header.metadata.len())
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and validates the file at `path`. Parse errors are wrapped in
    /// [`FormatError::InFile`] naming the path.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, FormatError> {
        let path = path.as_ref();
        let storage = Storage::map(path)?;
        let header = reader::parse(storage.bytes()).map_err(|e| e.in_file(path))?;
        Ok(GgufFile { storage, header })
    }

    /// Validates a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, FormatError> {
        let header = reader::parse(&bytes)?;
        Ok(GgufFile {
            storage: Storage::Owned(bytes),
            header,
        })
    }

    /// Validates GGUF bytes without keeping them (for fuzzing and quick checks).
    pub fn validate(bytes: &[u8]) -> Result<(), FormatError> {
        reader::parse(bytes).map(|_| ())
    }

    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Alignment of the data section and tensor offsets (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Absolute file offset where the tensor data section starts.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.header.metadata
    }

    pub fn meta(&self, key: &str) -> Option<&MetaValue> {
        self.header
            .meta_index
            .get(key)
            .and_then(|&i| self.header.metadata.get(i))
            .map(|(_, v)| v)
    }

    fn meta_as<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        f: impl FnOnce(&'a MetaValue) -> Option<T>,
    ) -> Result<T, FormatError> {
        let v = self.meta(key).ok_or_else(|| FormatError::MissingKey {
            key: key.to_owned(),
        })?;
        f(v).ok_or_else(|| FormatError::WrongType {
            key: key.to_owned(),
            expected,
            found: v.type_name(),
        })
    }

    /// Any non-negative integer value.
    pub fn meta_u64(&self, key: &str) -> Result<u64, FormatError> {
        self.meta_as(key, "non-negative integer", MetaValue::as_u64)
    }

    /// An `f32` or `f64` value.
    pub fn meta_f32(&self, key: &str) -> Result<f32, FormatError> {
        self.meta_as(key, "float", MetaValue::as_f32)
    }

    pub fn meta_str(&self, key: &str) -> Result<&str, FormatError> {
        self.meta_as(key, "string", MetaValue::as_str)
    }

    pub fn meta_array(&self, key: &str) -> Result<&[MetaValue], FormatError> {
        self.meta_as(key, "array", MetaValue::as_array)
    }

    pub fn meta_bool(&self, key: &str) -> Result<bool, FormatError> {
        self.meta_as(key, "bool", MetaValue::as_bool)
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header
            .tensor_index
            .get(name)
            .and_then(|&i| self.header.tensors.get(i))
    }

    /// The named tensor's view; [`FormatError::MissingTensor`] if there is none.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, FormatError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::MissingTensor(name.to_owned()))?;
        self.view(info)
    }

    /// The view of a tensor from [`GgufFile::tensors`].
    pub fn view<'a>(&'a self, info: &'a TensorInfo) -> Result<TensorView<'a>, FormatError> {
        let bytes = self.storage.bytes();
        if info.n_bytes == 0 {
            // An empty tensor owns no bytes; the data section may even start past the end of a
            // file that holds nothing else (found by fuzzing).
            return Ok(TensorView {
                name: &info.name,
                dtype: info.dtype,
                shape: &info.shape,
                data: &[],
            });
        }
        let out_of_bounds = || FormatError::TensorOutOfBounds {
            tensor: info.name.clone(),
            start: info.offset,
            len: info.n_bytes as u64,
            available: (bytes.len() as u64).saturating_sub(self.header.data_offset),
        };
        // Validated at open; re-checked so a foreign `TensorInfo` cannot cause a panic.
        let start = self
            .header
            .data_offset
            .checked_add(info.offset)
            .and_then(|s| usize::try_from(s).ok())
            .ok_or_else(out_of_bounds)?;
        let data = start
            .checked_add(info.n_bytes)
            .and_then(|end| bytes.get(start..end))
            .ok_or_else(out_of_bounds)?;
        Ok(TensorView {
            name: &info.name,
            dtype: info.dtype,
            shape: &info.shape,
            data,
        })
    }
}
