//! `FormatError`: every way reading a model file can fail.
//!
//! Guarantees: each variant names what went wrong and where (file path, tensor name, metadata
//! key or byte offset), so a message alone is enough to find the problem in the file. Errors
//! raised while parsing a file opened by path are wrapped once in [`FormatError::InFile`];
//! [`FormatError::root`] strips that wrapper for matching.

use std::path::PathBuf;

use oxllm_core::DType;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum FormatError {
    /// An error found while parsing the file at `path`.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<FormatError>,
    },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("missing file {path}")]
    MissingFile { path: PathBuf },
    #[error("invalid JSON in {path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    // ---- GGUF structure ----
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} (supported: 2, 3)")]
    UnsupportedVersion { version: u32 },
    #[error("file truncated: {what} at offset {offset} needs {needed} bytes, {available} left")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error("invalid UTF-8 in {what} at offset {offset}")]
    InvalidUtf8 { what: &'static str, offset: u64 },
    #[error("unknown metadata value type {type_id} at offset {offset}")]
    UnknownValueType { type_id: u32, offset: u64 },
    #[error("invalid bool byte {value} at offset {offset}")]
    InvalidBool { value: u8, offset: u64 },
    #[error("metadata arrays nested deeper than {max} at offset {offset}")]
    NestingTooDeep { max: usize, offset: u64 },
    #[error("duplicate metadata key {key:?}")]
    DuplicateKey { key: String },
    #[error("invalid general.alignment {value}: must be a nonzero power of two")]
    BadAlignment { value: u64 },

    // ---- metadata access ----
    #[error("missing metadata key {key:?}")]
    MissingKey { key: String },
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    // ---- tensor table ----
    #[error("tensor {tensor:?}: unknown GGML type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor {tensor:?}: {n_dims} dimensions, at most {max} supported")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: u32,
    },
    #[error("tensor {tensor:?}: shape {dims:?} overflows")]
    DimOverflow { tensor: String, dims: Vec<u64> },
    #[error("tensor {tensor:?}: innermost dimension {len} is not a whole number of {block}-element {dtype} blocks")]
    PartialBlock {
        tensor: String,
        dtype: DType,
        len: usize,
        block: usize,
    },
    #[error(
        "tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor {tensor:?}: data [{start}, {start}+{len}) runs past the end of the data ({available} bytes)")]
    TensorOutOfBounds {
        tensor: String,
        start: u64,
        len: u64,
        available: u64,
    },
    #[error("duplicate tensor name {tensor:?}")]
    DuplicateTensor { tensor: String },
    #[error("missing tensor {0:?}")]
    MissingTensor(String),

    // ---- safetensors / Hugging Face ----
    #[error("safetensors header of {len} bytes does not fit the {file_len}-byte file")]
    HeaderOutOfBounds { len: u64, file_len: u64 },
    #[error("invalid safetensors header: {reason}")]
    BadHeader { reason: String },
    #[error("tensor {tensor:?}: {reason}")]
    BadTensorEntry { tensor: String, reason: String },
    #[error("tensor {tensor:?} has dtype {dtype}, which oxllm cannot use as a weight")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("no model.safetensors or model.safetensors.index.json in {dir}")]
    MissingWeights { dir: PathBuf },
    #[error("invalid shard index {path}: {reason}")]
    BadIndex { path: PathBuf, reason: String },
}

impl FormatError {
    /// The error without any [`FormatError::InFile`] wrappers, for matching on the cause.
    pub fn root(&self) -> &FormatError {
        let mut e = self;
        while let FormatError::InFile { source, .. } = e {
            e = source;
        }
        e
    }

    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> FormatError {
        FormatError::InFile {
            path: path.into(),
            source: Box::new(self),
        }
    }
}
