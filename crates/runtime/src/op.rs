//! Ops: the unit a backend launches, records into a plan, and replays.

use std::time::Duration;

use oxllm_kernels::pool::ThreadPool;

use crate::{BufRef, Memory, RuntimeError};

/// Where an op runs: the backend's thread pool, and whether it must use the reference (scalar,
/// single-thread) kernels.
#[derive(Clone, Copy)]
pub struct ExecCtx<'a> {
    pub pool: &'a ThreadPool,
    pub reference: bool,
    /// A warm-up step: ops must take every buffer and scratch a real run of this shape takes
    /// (that is what the step is for) but may skip arithmetic whose result nobody reads, such
    /// as the products of a matmul (a start-up prefill of 2048 zero rows would cost seconds).
    pub warming: bool,
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
