//! The reference backend: one thread, the scalar kernels, no capture.
//!
//! It runs the same ops as [`crate::CpuBackend`] with the scalar kernel table
//! ([`crate::kernels::REFERENCE`]), so a model's fast kernels can be cross-checked against it,
//! and an engine on it always takes its eager fallback.

use std::any::Any;

use oxllm_kernels::pool::ThreadPool;

use crate::arena::Arena;
use crate::cpu::{arena_backend, HostRunner};
use crate::{Backend, BufKind, BufRef, Memory, Op, OpProfile, Plan, RuntimeError};

pub struct ReferenceBackend {
    arena: Arena,
    pool: ThreadPool,
}

impl ReferenceBackend {
    pub fn new() -> ReferenceBackend {
        ReferenceBackend {
            arena: Arena::new(),
            pool: ThreadPool::new(1),
        }
    }
}

impl Default for ReferenceBackend {
    fn default() -> Self {
        ReferenceBackend::new()
    }
}

arena_backend!(
    ReferenceBackend,
    "reference",
    false,
    &crate::kernels::REFERENCE,
    &crate::kernels::REFERENCE
);
