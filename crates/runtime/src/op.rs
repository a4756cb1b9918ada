//! Host ops: steps of a forward that have no [`crate::OpDesc`] yet (the mixture-of-experts
//! MLP). Everything else a step launches is an
//! [`crate::OpDesc`], which each backend executes with its own kernels.

use std::time::Duration;

use oxllm_kernels::pool::ThreadPool;

use crate::{BufRef, Kernels, Memory, RuntimeError};

/// Where an op runs: the backend's thread pool and kernel table. An op computes with these and
/// never asks which backend it runs on.
#[derive(Clone, Copy)]
pub struct ExecCtx<'a> {
    pub pool: &'a ThreadPool,
    pub kernels: &'a Kernels,
}

/// One step of a forward pass over buffers named when the op was built. An op holds no
/// per-step host data: everything that changes between steps lives in buffers, so a recorded op
/// replays correctly after its inputs are rewritten.
pub trait Op: Send {
    /// A short stable name, used in errors and profiles.
    fn name(&self) -> &'static str;
    /// Calls `visit` with every buffer the op reads or writes: the backend plans step-local
    /// buffers' lifetimes (first and last use) from these.
    fn buffers(&self, visit: &mut dyn FnMut(BufRef));
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError>;
    /// The op in a warm step, which runs on whatever its inputs hold to size buffers and
    /// per-thread scratch before a capture (its kernels are the backend's warm table): by
    /// default the op itself; an op with effects that outlive the step (the K/V store, state
    /// updates) does nothing instead.
    fn warm(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        self.run(mem, cx)
    }
    /// Whether the op is meant to run on the host whatever the backend (sampling with the
    /// requests' own host state): a device backend runs such ops on its host copies after its
    /// device work, and refuses a host op without this mark with an error naming it.
    fn host_only(&self) -> bool {
        false
    }
}

/// Time spent per op name in one profiled replay, in first-seen order.
#[derive(Clone, Debug, Default)]
pub struct OpProfile {
    pub ops: Vec<(&'static str, usize, Duration)>,
}

impl OpProfile {
    pub(crate) fn add(&mut self, name: &'static str, d: Duration) {
        match self.ops.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, count, total)) => {
                *count += 1;
                *total += d;
            }
            None => self.ops.push((name, 1, d)),
        }
    }

    pub fn total(&self) -> Duration {
        self.ops.iter().map(|(_, _, d)| *d).sum()
    }
}
