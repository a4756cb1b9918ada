//! The backend seam of oxllm and its capture contract.
//!
//! A model's forward is a sequence of op descriptions ([`OpDesc`]: data over [`BufRef`] buffers,
//! weights named by [`WeightId`]) launched on a [`Backend`], which runs each with its own
//! kernels. Run eagerly, each op executes at once on buffers allocated for that step. Between
//! [`Backend::begin_capture`] and [`Backend::end_capture`] the same launches are recorded into a
//! [`Plan`] instead, which [`Backend::replay`] reruns on the same buffers. Inside a capture:
//! - no buffer is allocated: every step-local buffer comes from a pool warmed by
//!   [`Backend::warm_step`] of the same (or a larger) shape, else the capture fails naming the op;
//! - the host neither reads nor writes a buffer (inputs are written before a replay, outputs read
//!   after); an attempt fails the capture naming the op;
//! - addresses are fixed: a replay changes buffer contents, never the buffers themselves.
//!
//! [`CpuBackend`] supports capture; [`ReferenceBackend`] (one thread, scalar kernels) does not,
//! so callers exercise their eager fallback and cross-check the fast kernels against it.

#![forbid(unsafe_code)]

pub mod arena;
mod backend;
mod buffer;
mod cpu;
mod desc;
mod error;
mod host_exec;
mod host_moe;
pub mod kernels;
mod profile;
mod reference;

pub use backend::{Backend, Plan};
pub use buffer::{BufKind, BufRef, Buffer, Memory};
pub use cpu::{CpuBackend, CpuOptions};
pub use desc::{
    GdnDesc, HostWeight, LayerWeight, MatmulJob, MoeDesc, OpDesc, WeightId, WeightSource,
};
pub use error::RuntimeError;
pub use host_exec::run_on_host;
pub use kernels::Kernels;
pub use profile::OpProfile;
pub use reference::ReferenceBackend;
