//! The CPU backend: the fast kernel table ([`crate::kernels::FAST`], warm steps
//! [`crate::kernels::WARM`]) on a persistent thread pool, with capture.
//!
//! A captured plan is the recorded op list over buffers of one arena; replay runs the ops in
//! order on the pool (each op's kernel splits its work over the pool's threads and joins
//! before the next op starts) and allocates nothing.

use std::any::Any;

use oxllm_kernels::pool::ThreadPool;

use crate::arena::Arena;
use crate::{Backend, BufKind, BufRef, ExecCtx, Memory, Op, OpProfile, Plan, RuntimeError};

pub struct CpuBackend {
    arena: Arena,
    pool: ThreadPool,
}

impl CpuBackend {
    pub fn new(threads: usize) -> CpuBackend {
        CpuBackend {
            arena: Arena::new(&crate::kernels::WARM),
            pool: ThreadPool::new(threads),
        }
    }

    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }
}

macro_rules! arena_backend {
    ($t:ty, $name:expr, $capture:expr, $kernels:expr) => {
        impl Backend for $t {
            fn name(&self) -> &'static str {
                $name
            }
            fn supports_capture(&self) -> bool {
                $capture
            }
            fn alloc_persistent(
                &mut self,
                kind: BufKind,
                len: usize,
            ) -> Result<BufRef, RuntimeError> {
                self.arena.alloc_persistent(kind, len)
            }
            fn alloc_host(&mut self, value: Box<dyn Any + Send>) -> Result<BufRef, RuntimeError> {
                self.arena.alloc_host(value)
            }
            fn alloc(
                &mut self,
                op: &'static str,
                kind: BufKind,
                len: usize,
            ) -> Result<BufRef, RuntimeError> {
                self.arena.alloc(op, kind, len)
            }
            fn keep(&mut self, buf: BufRef) {
                self.arena.keep(buf)
            }
            fn launch(&mut self, op: Box<dyn Op>) -> Result<(), RuntimeError> {
                let cx = ExecCtx {
                    pool: &self.pool,
                    kernels: $kernels,
                };
                self.arena.launch(op, &cx)
            }
            fn host_access(
                &mut self,
                op: &'static str,
                write: bool,
            ) -> Result<&Memory, RuntimeError> {
                let cx = ExecCtx {
                    pool: &self.pool,
                    kernels: $kernels,
                };
                self.arena.host_access(op, write, &cx)
            }
            fn begin_step(&mut self) -> Result<(), RuntimeError> {
                self.arena.begin_step(false)
            }
            fn warm_step(&mut self) -> Result<(), RuntimeError> {
                // Every thread joins every op of the warm pass, so each grows its kernel scratch
                // now rather than inside a later replay.
                self.pool.set_all_join(true);
                self.arena.begin_step(true)
            }
            fn end_step(&mut self) -> Result<(), RuntimeError> {
                let cx = ExecCtx {
                    pool: &self.pool,
                    kernels: $kernels,
                };
                let r = self.arena.end_step(&cx);
                self.pool.set_all_join(false);
                r
            }
            fn begin_capture(&mut self) -> Result<(), RuntimeError> {
                if !$capture {
                    return Err(RuntimeError::CaptureUnsupported($name));
                }
                self.arena.begin_capture()
            }
            fn end_capture(&mut self) -> Result<Plan, RuntimeError> {
                self.arena.end_capture()
            }
            fn abort_capture(&mut self) {
                self.arena.abort_capture()
            }
            fn replay(&mut self, plan: &Plan) -> Result<(), RuntimeError> {
                let cx = ExecCtx {
                    pool: &self.pool,
                    kernels: $kernels,
                };
                self.arena.replay(plan, &cx, None)
            }
            fn pooled_bytes(&self) -> usize {
                self.arena.pooled_bytes()
            }
            fn replay_profiled(&mut self, plan: &Plan) -> Result<OpProfile, RuntimeError> {
                let cx = ExecCtx {
                    pool: &self.pool,
                    kernels: $kernels,
                };
                let mut profile = OpProfile::default();
                self.arena.replay(plan, &cx, Some(&mut profile))?;
                Ok(profile)
            }
        }
    };
}
pub(crate) use arena_backend;

arena_backend!(CpuBackend, "cpu", true, &crate::kernels::FAST);
