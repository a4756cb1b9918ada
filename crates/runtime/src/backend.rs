//! The [`Backend`] trait: buffers, op launches, capture and replay.

use std::any::Any;

use crate::{BufKind, BufRef, Memory, Op, OpProfile, RuntimeError};

/// A captured op list, bound to the backend that recorded it.
pub struct Plan {
    backend_id: u64,
    ops: Vec<Box<dyn Op>>,
}

impl Plan {
    pub(crate) fn new(backend_id: u64, ops: Vec<Box<dyn Op>>) -> Plan {
        Plan { backend_id, ops }
    }

    pub(crate) fn backend_id(&self) -> u64 {
        self.backend_id
    }

    pub(crate) fn ops(&self) -> &[Box<dyn Op>] {
        &self.ops
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// Where ops run. Eager use: `begin_step`, write inputs through `host_access`, launch ops,
/// read outputs, `end_step`. Capture: `warm_step` + the same launches + `end_step` once per
/// shape (largest first), then `begin_capture`, the launches, `end_capture`; afterwards write
/// inputs and `replay` as often as needed.
pub trait Backend {
    fn name(&self) -> &'static str;
    fn supports_capture(&self) -> bool;

    /// A buffer for the backend's lifetime (KV cache, step inputs, outputs read by the host).
    fn alloc_persistent(&mut self, kind: BufKind, len: usize) -> Result<BufRef, RuntimeError>;
    /// A host-prepared typed buffer for the backend's lifetime.
    fn alloc_host(&mut self, value: Box<dyn Any + Send>) -> Result<BufRef, RuntimeError>;
    /// A step-local buffer for `op`'s output (see the module docs of each backend for where it
    /// comes from); inside a capture only a warmed buffer may serve it.
    fn alloc(
        &mut self,
        op: &'static str,
        kind: BufKind,
        len: usize,
    ) -> Result<BufRef, RuntimeError>;
    /// Ends the use of a step-local buffer; later allocations may reuse it.
    fn release(&mut self, buf: BufRef);
    /// Runs `op` now (eager), drops it (warm), or records it (capture).
    fn launch(&mut self, op: Box<dyn Op>) -> Result<(), RuntimeError>;
    /// The host's view of the buffers, to write inputs or read outputs; refused inside a
    /// capture with an error naming `op`.
    fn host_access(&mut self, op: &'static str, write: bool) -> Result<&Memory, RuntimeError>;

    /// Starts an eager step.
    fn begin_step(&mut self) -> Result<(), RuntimeError>;
    /// Starts a dry step that only warms the buffer pool for a later capture of this shape.
    fn warm_step(&mut self) -> Result<(), RuntimeError>;
    /// Ends an eager or warm step, giving back its step-local buffers.
    fn end_step(&mut self);

    fn begin_capture(&mut self) -> Result<(), RuntimeError>;
    fn end_capture(&mut self) -> Result<Plan, RuntimeError>;
    /// Drops a failed capture's recording and gives its buffers back.
    fn abort_capture(&mut self);
    fn replay(&mut self, plan: &Plan) -> Result<(), RuntimeError>;
    /// Bytes held by the warmed buffer pool that plans share.
    fn pooled_bytes(&self) -> usize;
    /// A replay that times every op.
    fn replay_profiled(&mut self, plan: &Plan) -> Result<OpProfile, RuntimeError>;
}
