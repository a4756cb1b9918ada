//! Element types (`DType`): float formats and GGML block-quantized formats.
//!
//! Guarantees: `block_size` and `type_size` match GGML's block layouts, so
//! `row_bytes(n)` is the exact byte length of `n` elements stored contiguously; a length that is
//! not a whole number of blocks is reported, never rounded.

use thiserror::Error;

/// Storage type of a tensor. Discriminants are the GGML type ids used in GGUF files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DTypeError {
    #[error("{len} elements of {dtype:?} overflow the address space")]
    Overflow { dtype: DType, len: usize },
    #[error("unknown GGML tensor type id {0}")]
    UnknownTypeId(u32),
    #[error("{len} elements of {dtype:?} is not a whole number of {block}-element blocks")]
    PartialBlock {
        dtype: DType,
        len: usize,
        block: usize,
    },
}

impl DType {
    pub const ALL: [DType; 20] = [
        DType::F32,
        DType::F16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q8_1,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::Q8K,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F64,
        DType::BF16,
    ];

    /// Maps a GGML type id (as stored in a GGUF tensor table) to a `DType`.
    pub fn from_ggml_id(id: u32) -> Result<DType, DTypeError> {
        DType::ALL
            .iter()
            .copied()
            .find(|d| *d as u32 == id)
            .ok_or(DTypeError::UnknownTypeId(id))
    }

    pub fn ggml_id(self) -> u32 {
        self as u32
    }

    /// Number of elements in one block (1 for plain scalar types).
    pub fn block_size(self) -> usize {
        match self {
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 | DType::Q8_1 => 32,
            DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K | DType::Q8K => 256,
            _ => 1,
        }
    }

    /// Bytes in one block.
    pub fn type_size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 => 1,
            DType::I64 | DType::F64 => 8,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q8_1 => 36,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::Q8K => 292,
        }
    }

    /// Byte length of `n` contiguous elements; an error when `n` splits a block.
    pub fn row_bytes(self, n: usize) -> Result<usize, DTypeError> {
        let block = self.block_size();
        if !n.is_multiple_of(block) {
            return Err(DTypeError::PartialBlock {
                dtype: self,
                len: n,
                block,
            });
        }
        (n / block)
            .checked_mul(self.type_size())
            .ok_or(DTypeError::Overflow {
                dtype: self,
                len: n,
            })
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Name as GGML and llama.cpp print it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q8_1 => "Q8_1",
            DType::Q2K => "Q2_K",
            DType::Q3K => "Q3_K",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
            DType::Q8K => "Q8_K",
            DType::I8 => "I8",
            DType::I16 => "I16",
            DType::I32 => "I32",
            DType::I64 => "I64",
            DType::F64 => "F64",
            DType::BF16 => "BF16",
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_fail() {
        for d in DType::ALL {
            assert_eq!(DType::from_ggml_id(d.ggml_id()), Ok(d));
        }
        assert_eq!(DType::from_ggml_id(4), Err(DTypeError::UnknownTypeId(4)));
        assert_eq!(
            DType::from_ggml_id(999),
            Err(DTypeError::UnknownTypeId(999))
        );
    }

    #[test]
    fn row_bytes_matches_block_layouts_and_rejects_partial_blocks() {
        assert_eq!(DType::Q4_1.row_bytes(576), Ok(18 * 20));
        assert_eq!(DType::Q6K.row_bytes(512), Ok(2 * 210));
        assert_eq!(DType::F16.row_bytes(3), Ok(6));
        assert!(matches!(
            DType::F64.row_bytes(usize::MAX),
            Err(DTypeError::Overflow { .. })
        ));
        assert!(matches!(
            DType::Q4_0.row_bytes(33),
            Err(DTypeError::PartialBlock { len: 33, .. })
        ));
    }
}
