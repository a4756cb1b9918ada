//! [`GpuBackend`]: the runtime's buffer arena (handles, storage, planned lifetimes) with a
//! device mirror per storage slot, eager steps launched op by op, and captured plans replayed
//! as graphs, on any [`Gpu`]: [`CudaBackend`] on an NVIDIA GPU, [`EmulatedBackend`] on the host
//! emulator.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use oxllm_kernels::pool::ThreadPool;
use oxllm_runtime::arena::{Arena, OpRunner};
use oxllm_runtime::kernels::{FAST, WARM};
use oxllm_runtime::{
    run_on_host, Backend, BufKind, BufRef, Memory, OpDesc, OpProfile, Plan, RuntimeError,
    WeightSource,
};

use crate::cuda_gpu::CudaGpu;
use crate::device::Device;
use crate::error::CudaError;
use crate::gpu::Gpu;
use crate::host_gpu::HostGpu;
use crate::launch::{host_owned, launch};

/// A captured plan's device part and what a replay moves around it.
struct Graph {
    graph: usize,
    /// Ops from this index on run on the host after the graph.
    host_from: usize,
    /// Host-written buffers the device ops read, copied before every launch.
    inputs: Vec<BufRef>,
    /// Device-written buffers the host keeps (read after a replay).
    outputs: Vec<BufRef>,
}

pub struct GpuBackend<G> {
    name: &'static str,
    arena: Arena,
    dev: Device<G>,
    /// Threads of the host ops (sampling).
    pool: ThreadPool,
    graphs: HashMap<u64, Graph>,
    /// Buffers kept for the host in the current step or capture.
    kept: Vec<BufRef>,
}

/// The backend on an NVIDIA GPU.
pub type CudaBackend = GpuBackend<CudaGpu>;
/// The same backend on the host emulator of the CUDA kernels (tests, machines with no GPU).
pub type EmulatedBackend = GpuBackend<HostGpu>;

impl CudaBackend {
    /// The backend on GPU `ordinal`, its kernels compiled for that GPU; `host_threads` run the
    /// host ops.
    pub fn new(ordinal: usize, host_threads: usize) -> Result<CudaBackend, CudaError> {
        Ok(GpuBackend::on(CudaGpu::new(ordinal)?, "cuda", host_threads))
    }
}

impl EmulatedBackend {
    pub fn emulated(host_threads: usize) -> EmulatedBackend {
        GpuBackend::on(HostGpu::new(), "cuda-emulator", host_threads)
    }
}

impl<G: Gpu> GpuBackend<G> {
    fn on(gpu: G, name: &'static str, host_threads: usize) -> GpuBackend<G> {
        GpuBackend {
            name,
            arena: Arena::new(),
            dev: Device::new(gpu),
            pool: ThreadPool::new(host_threads.max(1)),
            graphs: HashMap::new(),
            kept: Vec::new(),
        }
    }

    /// The GPU's name.
    pub fn device_name(&self) -> String {
        self.dev.gpu.describe()
    }

    fn download_kept(&mut self, kept: &[BufRef]) -> Result<(), RuntimeError> {
        let mem = self.arena.memory();
        for &b in kept {
            if !host_owned(b) {
                self.dev.download("host_access", mem, b)?;
            }
        }
        Ok(())
    }
}

/// Runs eager and warm steps: device ops launch at once, host ops run after the device work
/// of the flush (a device op after a host op is refused: its input may be stale on the
/// device).
struct DeviceRunner<'a, G> {
    dev: &'a mut Device<G>,
    pool: &'a ThreadPool,
    after_host_op: Option<&'static str>,
    /// Host-written buffers already copied to the device in this flush (the host cannot
    /// write between the ops of one flush).
    uploaded: Vec<BufRef>,
}

/// What runs where: a description with a device kernel on the device, a host-only one
/// (sampling) on the host; any other (the hybrid layers' ops, no device kernels yet) is refused
/// by name, before anything runs.
enum Placement<'a> {
    Device(&'a OpDesc),
    Host(&'a OpDesc),
}

/// Whether this backend has kernels for `d`: every variant is listed, so a new one is a
/// decision here, not a silent fallback.
fn has_device_kernel(d: &OpDesc) -> bool {
    match d {
        OpDesc::Embed { .. }
        | OpDesc::RmsNorm { .. }
        | OpDesc::Quantize { .. }
        | OpDesc::Matmul { .. }
        | OpDesc::QkNormRope { .. }
        | OpDesc::StoreKv { .. }
        | OpDesc::Attention { .. }
        | OpDesc::Add { .. }
        | OpDesc::SiluMul { .. }
        | OpDesc::GatherNorm { .. } => true,
        OpDesc::RestoreStates { .. }
        | OpDesc::GatedDeltaNet(_)
        | OpDesc::SplitQueryGate { .. }
        | OpDesc::SigmoidMul { .. }
        | OpDesc::Moe(_)
        | OpDesc::Sample { .. } => false,
    }
}

fn placement(op: &OpDesc) -> Result<Placement<'_>, RuntimeError> {
    if has_device_kernel(op) {
        Ok(Placement::Device(op))
    } else if op.host_only() {
        Ok(Placement::Host(op))
    } else {
        Err(RuntimeError::Unsupported {
            backend: "cuda",
            op: op.name(),
        })
    }
}

/// Every buffer `op` names.
fn buffers_of(op: &OpDesc) -> Vec<BufRef> {
    let mut v = Vec::new();
    op.buffers(&mut |b| v.push(b));
    v
}

/// Runs a host op on the host copies, after fetching the device-written buffers it names.
fn run_host_op<G: Gpu>(
    dev: &mut Device<G>,
    pool: &ThreadPool,
    op: &OpDesc,
    mem: &Memory,
    warm: bool,
) -> Result<(), RuntimeError> {
    dev.sync(op.name())?;
    if !warm {
        let mut bufs = Vec::new();
        op.buffers(&mut |b| bufs.push(b));
        for b in bufs {
            if !host_owned(b) && b.kind() != BufKind::Host {
                dev.download(op.name(), mem, b)?;
            }
        }
    }
    let kernels = if warm { &WARM } else { &FAST };
    // Host-only descriptions read no weights (sampling).
    run_on_host(op, mem, pool, kernels, None)
}

impl<G: Gpu> OpRunner for DeviceRunner<'_, G> {
    fn run(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError> {
        match placement(op)? {
            Placement::Device(desc) => {
                if let Some(host) = self.after_host_op {
                    return Err(RuntimeError::op(
                        op.name(),
                        format!("runs on the device after host op `{host}`"),
                    ));
                }
                for b in buffers_of(op) {
                    if host_owned(b) && !self.uploaded.contains(&b) {
                        self.dev.upload(op.name(), mem, b)?;
                        self.uploaded.push(b);
                    }
                }
                launch(self.dev, op.name(), desc, mem)
            }
            Placement::Host(host) => {
                self.after_host_op = Some(op.name());
                run_host_op(self.dev, self.pool, host, mem, false)
            }
        }
    }

    fn warm(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError> {
        // A warm step gives every buffer its device copy now, so a capture allocates nothing.
        match placement(op)? {
            Placement::Device(_) => {
                for b in buffers_of(op) {
                    if b.kind() != BufKind::QActs && b.kind() != BufKind::Host {
                        self.dev.ptr(op.name(), mem, b)?;
                    }
                }
                Ok(())
            }
            Placement::Host(host) => run_host_op(self.dev, self.pool, host, mem, true),
        }
    }
}

impl<G: Gpu> GpuBackend<G> {
    fn runner(&mut self) -> (&mut Arena, DeviceRunner<'_, G>) {
        (
            &mut self.arena,
            DeviceRunner {
                dev: &mut self.dev,
                pool: &self.pool,
                after_host_op: None,
                uploaded: Vec::new(),
            },
        )
    }

    /// Records the device ops of a freshly planned capture into a CUDA graph.
    fn build_graph(&mut self, plan: &Plan) -> Result<Graph, RuntimeError> {
        let ops = plan.ops();
        let mut host_from = ops.len();
        let mut descs = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            match placement(op)? {
                Placement::Device(d) if host_from == ops.len() => descs.push(d),
                Placement::Device(_) => {
                    return Err(RuntimeError::op(
                        op.name(),
                        "a device op after a host op cannot be captured",
                    ))
                }
                Placement::Host(_) => host_from = host_from.min(i),
            }
        }
        let mem = self.arena.memory();
        let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
        for op in &ops[..host_from] {
            for b in buffers_of(op) {
                if b.kind() == BufKind::QActs || b.kind() == BufKind::Host {
                    continue;
                }
                // Every buffer gets its device copy before the capture starts.
                self.dev.ptr(op.name(), mem, b)?;
                if host_owned(b) {
                    match inputs
                        .iter_mut()
                        .find(|i: &&mut BufRef| **i == b.prefix(i.len))
                    {
                        Some(i) if i.len < b.len => *i = b,
                        Some(_) => {}
                        None => inputs.push(b),
                    }
                }
            }
            // Tables (RoPE frequencies) are uploaded now, not inside the capture.
            if let OpDesc::QkNormRope { rope, .. } = op {
                self.dev.table(op.name(), rope.inv_freq())?;
            }
        }
        // The host ops fetch what they read themselves (`run_host_op`); only kept buffers are
        // copied down after a replay.
        outputs.extend(self.kept.drain(..).filter(|b| !host_owned(*b)));
        self.dev
            .gpu
            .begin_capture()
            .map_err(|e| RuntimeError::op("capture", e))?;
        self.dev.capturing = true;
        let mut recorded = Ok(());
        for (op, d) in ops[..host_from].iter().zip(&descs) {
            recorded = launch(&mut self.dev, op.name(), d, mem);
            if recorded.is_err() {
                break;
            }
        }
        self.dev.capturing = false;
        let graph = self.dev.gpu.end_capture();
        recorded?;
        let graph = graph.map_err(|e| RuntimeError::op("capture", e))?;
        Ok(Graph {
            graph,
            host_from,
            inputs,
            outputs,
        })
    }
}

impl<G: Gpu> Backend for GpuBackend<G> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn supports_capture(&self) -> bool {
        true
    }
    fn load_weights(&mut self, weights: Arc<dyn WeightSource>) -> Result<(), RuntimeError> {
        self.dev.load_weights(weights.as_ref())
    }
    fn alloc_persistent(&mut self, kind: BufKind, len: usize) -> Result<BufRef, RuntimeError> {
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
        self.kept.push(buf);
        self.arena.keep(buf)
    }
    fn launch(&mut self, op: OpDesc) -> Result<(), RuntimeError> {
        let (arena, mut runner) = self.runner();
        arena.launch(op, &mut runner)
    }
    fn host_access(&mut self, op: &'static str, write: bool) -> Result<&Memory, RuntimeError> {
        {
            let (arena, mut runner) = self.runner();
            arena.host_access(op, write, &mut runner)?;
        }
        self.dev.sync(op)?;
        if !write {
            let kept = std::mem::take(&mut self.kept);
            let r = self.download_kept(&kept);
            self.kept = kept;
            r?;
        }
        Ok(self.arena.memory())
    }
    fn begin_step(&mut self) -> Result<(), RuntimeError> {
        self.kept.clear();
        self.arena.begin_step(false)
    }
    fn warm_step(&mut self) -> Result<(), RuntimeError> {
        self.kept.clear();
        self.arena.begin_step(true)
    }
    fn end_step(&mut self) -> Result<(), RuntimeError> {
        let r = {
            let (arena, mut runner) = self.runner();
            arena.end_step(&mut runner)
        };
        self.kept.clear();
        let synced = self.dev.sync("end_step");
        r.and(synced)
    }
    fn begin_capture(&mut self) -> Result<(), RuntimeError> {
        self.kept.clear();
        self.arena.begin_capture()
    }
    fn end_capture(&mut self) -> Result<Plan, RuntimeError> {
        let plan = self.arena.end_capture()?;
        let graph = self.build_graph(&plan);
        self.kept.clear();
        self.graphs.insert(plan.id(), graph?);
        Ok(plan)
    }
    fn abort_capture(&mut self) {
        self.kept.clear();
        self.arena.abort_capture()
    }
    fn replay(&mut self, plan: &Plan) -> Result<(), RuntimeError> {
        let g = self
            .graphs
            .get(&plan.id())
            .ok_or(RuntimeError::ForeignPlan)?;
        let mem = self.arena.memory();
        for &b in &g.inputs {
            self.dev.upload("replay", mem, b)?;
        }
        self.dev
            .gpu
            .launch_graph(g.graph)
            .map_err(|e| RuntimeError::op("replay", e))?;
        for op in &plan.ops()[g.host_from..] {
            if let Placement::Host(host) = placement(op)? {
                run_host_op(&mut self.dev, &self.pool, host, mem, false)?;
            }
        }
        self.dev.sync("replay")?;
        for &b in &g.outputs {
            self.dev.download("replay", mem, b)?;
        }
        Ok(())
    }
    fn pooled_bytes(&self) -> usize {
        self.arena.pooled_bytes()
    }
    fn replay_profiled(&mut self, plan: &Plan) -> Result<OpProfile, RuntimeError> {
        // A graph runs as one launch: its time is reported as one entry.
        let t = std::time::Instant::now();
        self.replay(plan)?;
        let mut p = OpProfile::default();
        p.ops.push(("cuda_graph", 1, t.elapsed()));
        Ok(p)
    }
}
