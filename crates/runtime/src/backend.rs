//! The [`Backend`] trait: buffers, op launches, capture and replay.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::arena::Lifetimes;
use crate::{BufKind, BufRef, Memory, OpDesc, OpProfile, RuntimeError, WeightSource};

/// A captured op list, bound to the backend that recorded it, with its buffers' footprint.
pub struct Plan {
    id: u64,
    backend_id: u64,
    ops: Vec<OpDesc>,
    lifetimes: Lifetimes,
}

impl Plan {
    pub(crate) fn new(backend_id: u64, ops: Vec<OpDesc>, lifetimes: Lifetimes) -> Plan {
        static NEXT_PLAN: AtomicU64 = AtomicU64::new(1);
        Plan {
            id: NEXT_PLAN.fetch_add(1, Ordering::Relaxed),
            backend_id,
            ops,
            lifetimes,
        }
    }

    pub(crate) fn backend_id(&self) -> u64 {
        self.backend_id
    }

    /// Unique among the process's plans (a device backend keys its native graphs by it).
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn ops(&self) -> &[OpDesc] {
        &self.ops
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Most bytes of the plan's step-local buffers live at once (each buffer lives from its
    /// first to its last use).
    pub fn peak_bytes(&self) -> usize {
        self.lifetimes.peak_bytes
    }

    /// Bytes of all the plan's step-local buffers together (what it would hold if no buffer
    /// were ever reused).
    pub fn buffer_bytes(&self) -> usize {
        self.lifetimes.total_bytes
    }
}

/// Where ops run. Eager use: write inputs through `host_access`, `begin_step`, launch ops,
/// read outputs through `host_access` (which runs the launched ops first), `end_step`.
/// Capture: `warm_step` + the same launches + `end_step` once per shape (largest first), then
/// `begin_capture`, the launches, `end_capture`; afterwards write inputs and `replay` as often
/// as needed. Step-local buffers live from their first to their last use in the step's op list
/// (the backend plans it); nobody releases them.
pub trait Backend {
    fn name(&self) -> &'static str;
    fn supports_capture(&self) -> bool;

    /// Hands the backend the model's weights once, before any step that names one: the host
    /// backends keep the source (loaded in the layout their options chose) and resolve each
    /// op's [`crate::WeightId`] in it; a device backend copies every weight into its memory.
    fn load_weights(&mut self, weights: Arc<dyn WeightSource>) -> Result<(), RuntimeError>;

    /// A buffer for the backend's lifetime (KV cache, step inputs, outputs read by the host).
    fn alloc_persistent(&mut self, kind: BufKind, len: usize) -> Result<BufRef, RuntimeError>;
    /// A host-prepared typed buffer for the backend's lifetime.
    fn alloc_host(&mut self, value: Box<dyn Any + Send>) -> Result<BufRef, RuntimeError>;
    /// A step-local buffer for `op`'s output; its memory is assigned when the step's op list is
    /// planned (inside a capture only warmed memory may serve it).
    fn alloc(
        &mut self,
        op: &'static str,
        kind: BufKind,
        len: usize,
    ) -> Result<BufRef, RuntimeError>;
    /// Keeps a step-local buffer alive to the end of the step (or of every replay of the plan
    /// being captured) so the host can read it.
    fn keep(&mut self, buf: BufRef);
    /// Queues `op` in the step (eager, warm) or records it (capture).
    fn launch(&mut self, op: OpDesc) -> Result<(), RuntimeError>;
    /// The host's view of the buffers, to write inputs or read outputs, after the ops launched
    /// so far have run (their errors come back here); refused inside a capture with an error
    /// naming `op`.
    fn host_access(&mut self, op: &'static str, write: bool) -> Result<&Memory, RuntimeError>;

    /// Starts an eager step.
    fn begin_step(&mut self) -> Result<(), RuntimeError>;
    /// Starts a dry step that only warms the buffer pool for a later capture of this shape.
    fn warm_step(&mut self) -> Result<(), RuntimeError>;
    /// Runs the step's ops still pending, then gives back its step-local buffers.
    fn end_step(&mut self) -> Result<(), RuntimeError>;

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
