//! `Storage`: the bytes of a model file, either memory-mapped or owned.
//!
//! Guarantees: the bytes never move for the lifetime of the `Storage`, so offsets validated once
//! at open time stay valid. A memory map assumes the file is not modified while it is open
//! (the usual contract for model weights); oxllm never writes to the files it maps.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::FormatError;

pub(crate) enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    /// Maps the file at `path` read-only. A missing file is [`FormatError::MissingFile`].
    pub(crate) fn map(path: &Path) -> Result<Storage, FormatError> {
        let file = File::open(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                FormatError::MissingFile {
                    path: path.to_path_buf(),
                }
            } else {
                FormatError::Io {
                    path: path.to_path_buf(),
                    source,
                }
            }
        })?;
        // SAFETY: the map is read-only and private to this process; the bytes are only read
        // through bounds-checked slices. Undefined behaviour would need another process to
        // truncate or rewrite the file while it is mapped, which model files are not.
        let map = unsafe { Mmap::map(&file) }.map_err(|source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Storage::Mapped(map))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}
