//! The CPU backend: the fast kernel table ([`crate::kernels::FAST`], warm steps
//! [`crate::kernels::WARM`]) on a persistent thread pool, with capture.
//!
//! A captured plan is the recorded op list over buffers of one arena; replay runs the ops in
//! order on the pool (each op's kernel splits its work over the pool's threads and joins
//! before the next op starts) and allocates nothing.

use std::any::Any;
use std::sync::Arc;

use oxllm_kernels::matmul::WeightLayout;
use oxllm_kernels::pool::ThreadPool;

use crate::arena::{Arena, OpRunner};
use crate::host_exec::HostExec;
use crate::kernels::Kernels;
use crate::{
    Backend, BufKind, BufRef, Memory, OpDesc, OpProfile, Plan, RuntimeError, WeightSource,
};

/// Runs a host backend's ops through [`HostExec`] with its kernel table (the warm table in warm
/// steps).
pub(crate) struct HostRunner<'a> {
    pub pool: &'a ThreadPool,
    pub kernels: &'static Kernels,
    pub warm_kernels: &'static Kernels,
    pub weights: Option<&'a dyn WeightSource>,
}

impl HostRunner<'_> {
    fn exec(&self, op: &OpDesc, mem: &Memory, warm: bool) -> Result<(), RuntimeError> {
        let kernels = if warm {
            self.warm_kernels
        } else {
            self.kernels
        };
        HostExec {
            pool: self.pool,
            kernels,
            weights: self.weights,
        }
        .run(op, mem)
    }
}

impl OpRunner for HostRunner<'_> {
    fn run(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError> {
        self.exec(op, mem, false)
    }
    fn warm(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError> {
        self.exec(op, mem, true)
    }
}

/// How the CPU backend is set up, beyond its thread count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuOptions {
    /// How weight matrices are stored (panels for the AVX2 / AVX-512 panel kernels, or
    /// row-major blocks): the loader repacks the model's matrices in this layout.
    pub weight_layout: WeightLayout,
}

pub struct CpuBackend {
    arena: Arena,
    pool: ThreadPool,
    options: CpuOptions,
    weights: Option<Arc<dyn WeightSource>>,
}

impl CpuBackend {
    pub fn new(threads: usize) -> CpuBackend {
        CpuBackend::with_options(threads, CpuOptions::default())
    }

    pub fn with_options(threads: usize, options: CpuOptions) -> CpuBackend {
        CpuBackend {
            arena: Arena::new(),
            pool: ThreadPool::new(threads),
            options,
            weights: None,
        }
    }

    pub fn options(&self) -> CpuOptions {
        self.options
    }

    pub fn pool(&self) -> &ThreadPool {
        &self.pool
    }
}

macro_rules! arena_backend {
    ($t:ty, $name:expr, $capture:expr, $kernels:expr, $warm:expr) => {
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
            fn load_weights(&mut self, weights: Arc<dyn WeightSource>) -> Result<(), RuntimeError> {
                self.weights = Some(weights);
                Ok(())
            }
            fn launch(&mut self, op: OpDesc) -> Result<(), RuntimeError> {
                let mut runner = HostRunner {
                    pool: &self.pool,
                    kernels: $kernels,
                    warm_kernels: $warm,
                    weights: self.weights.as_deref(),
                };
                self.arena.launch(op, &mut runner)
            }
            fn host_access(
                &mut self,
                op: &'static str,
                write: bool,
            ) -> Result<&Memory, RuntimeError> {
                let mut runner = HostRunner {
                    pool: &self.pool,
                    kernels: $kernels,
                    warm_kernels: $warm,
                    weights: self.weights.as_deref(),
                };
                self.arena.host_access(op, write, &mut runner)
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
                let mut runner = HostRunner {
                    pool: &self.pool,
                    kernels: $kernels,
                    warm_kernels: $warm,
                    weights: self.weights.as_deref(),
                };
                let r = self.arena.end_step(&mut runner);
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
                let mut runner = HostRunner {
                    pool: &self.pool,
                    kernels: $kernels,
                    warm_kernels: $warm,
                    weights: self.weights.as_deref(),
                };
                self.arena.replay(plan, &mut runner, None)
            }
            fn pooled_bytes(&self) -> usize {
                self.arena.pooled_bytes()
            }
            fn replay_profiled(&mut self, plan: &Plan) -> Result<OpProfile, RuntimeError> {
                let mut runner = HostRunner {
                    pool: &self.pool,
                    kernels: $kernels,
                    warm_kernels: $warm,
                    weights: self.weights.as_deref(),
                };
                let mut profile = OpProfile::default();
                self.arena.replay(plan, &mut runner, Some(&mut profile))?;
                Ok(profile)
            }
        }
    };
}
pub(crate) use arena_backend;

arena_backend!(
    CpuBackend,
    "cpu",
    true,
    &crate::kernels::FAST,
    &crate::kernels::WARM
);
