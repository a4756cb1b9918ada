//! Errors of the runtime: contract violations name the op that broke them.

use crate::{BufKind, WeightId};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RuntimeError {
    #[error(
        "op `{op}` allocated {len} {kind:?} elements inside a capture (no warmed buffer fits)"
    )]
    AllocationInCapture {
        op: &'static str,
        kind: BufKind,
        len: usize,
    },
    #[error("op `{op}` read a device buffer back to the host inside a capture")]
    HostReadInCapture { op: &'static str },
    #[error("op `{op}` wrote a device buffer from the host inside a capture")]
    HostWriteInCapture { op: &'static str },
    #[error("backend `{0}` does not support capture")]
    CaptureUnsupported(&'static str),
    #[error("a capture is already in progress")]
    AlreadyCapturing,
    #[error("no capture is in progress")]
    NotCapturing,
    #[error("`{0}` is not allowed inside a capture")]
    NotInCapture(&'static str),
    #[error("the plan was captured on another backend")]
    ForeignPlan,
    #[error("op `{op}`: buffer {slot} is not a live {kind:?} buffer")]
    BadBuffer {
        op: &'static str,
        slot: u32,
        kind: BufKind,
    },
    #[error("op `{op}`: buffer {slot} is used twice at once (an output aliases another operand)")]
    Aliased { op: &'static str, slot: u32 },
    #[error("op `{op}` has no kernel on the `{backend}` backend")]
    Unsupported {
        backend: &'static str,
        op: &'static str,
    },
    #[error("op `{op}` needs weight {id:?}, which the backend was not handed")]
    MissingWeight { op: &'static str, id: WeightId },
    #[error("op `{op}` failed: {msg}")]
    Op { op: &'static str, msg: String },
}

impl RuntimeError {
    /// An op's own failure (bad input data, a kernel error).
    pub fn op(op: &'static str, msg: impl ToString) -> Self {
        RuntimeError::Op {
            op,
            msg: msg.to_string(),
        }
    }
}
