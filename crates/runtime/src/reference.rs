//! The reference backend: one thread, the scalar kernels, no capture.
//!
//! It runs the same op descriptions as [`crate::CpuBackend`] with the scalar kernel table
//! ([`crate::kernels::REFERENCE`]) and its own handle on the weights, so a model's fast kernels
//! can be cross-checked against it, and an engine on it always takes its eager fallback.

use std::any::Any;
use std::sync::Arc;

use oxllm_kernels::pool::ThreadPool;

use crate::arena::Arena;
use crate::cpu::{arena_backend, HostRunner};
use crate::{
    Backend, BufKind, BufRef, Memory, OpDesc, OpProfile, Plan, RuntimeError, WeightSource,
};

pub struct ReferenceBackend {
    arena: Arena,
    pool: ThreadPool,
    weights: Option<Arc<dyn WeightSource>>,
}

impl ReferenceBackend {
    pub fn new() -> ReferenceBackend {
        ReferenceBackend {
            arena: Arena::new(),
            pool: ThreadPool::new(1),
            weights: None,
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
