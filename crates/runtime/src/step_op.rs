//! What a step launches: an op described as data ([`OpDesc`]), which every backend runs with
//! its own kernels, or a host op ([`Op`]): the mixture-of-experts MLP, which has no description yet (a device
//! backend refuses it by name).

use crate::{BufRef, Op, OpDesc};

pub enum StepOp {
    Desc(OpDesc),
    Host(Box<dyn Op>),
}

impl StepOp {
    pub fn host(op: impl Op + 'static) -> StepOp {
        StepOp::Host(Box::new(op))
    }

    /// A short stable name, used in errors and profiles.
    pub fn name(&self) -> &'static str {
        match self {
            StepOp::Desc(d) => d.name(),
            StepOp::Host(op) => op.name(),
        }
    }

    /// Calls `visit` with every buffer the op reads or writes: the backend plans step-local
    /// buffers' lifetimes (first and last use) from these.
    pub fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        match self {
            StepOp::Desc(d) => d.buffers(visit),
            StepOp::Host(op) => op.buffers(visit),
        }
    }
}

impl From<OpDesc> for StepOp {
    fn from(d: OpDesc) -> StepOp {
        StepOp::Desc(d)
    }
}
