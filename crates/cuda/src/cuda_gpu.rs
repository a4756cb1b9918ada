//! [`Gpu`] on an NVIDIA GPU through the CUDA driver (loaded at run time by `cudarc`), with the
//! kernels of `kernels.cu` compiled by NVRTC for the running GPU and captures as CUDA graphs.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaGraph, CudaModule, CudaSlice, CudaStream, DevicePtr,
    LaunchConfig, PushKernelArg,
};

use crate::error::CudaError;
use crate::gpu::{Arg, DevPtr, Gpu};
use crate::KERNELS;

pub(crate) const KERNEL_SOURCE: &str = include_str!("kernels.cu");

/// A CUDA graph handle that may move to another thread with its backend.
struct SendGraph(CudaGraph);

// SAFETY: CUDA graph handles are not internally synchronized but may be used from any thread
// when calls on one graph are serialized; a `SendGraph` is only reached through its `CudaGpu`,
// whose methods take `&mut self`, and every cudarc call binds the context to the calling
// thread first.
unsafe impl Send for SendGraph {}

pub struct CudaGpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    _module: Arc<CudaModule>,
    functions: HashMap<&'static str, CudaFunction>,
    memory: HashMap<DevPtr, CudaSlice<u8>>,
    graphs: Vec<SendGraph>,
}

/// Compiles `kernels.cu` to PTX for compute capability `sm` (e.g. "90").
pub fn compile_kernels(sm: &str) -> Result<cudarc::nvrtc::Ptx, CudaError> {
    // SAFETY: only tries to dlopen the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::NoNvrtc);
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture=sm_{sm}")],
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(KERNEL_SOURCE, opts)
        .map_err(|e| CudaError::Compile(e.to_string()))
}

impl CudaGpu {
    pub fn new(ordinal: usize) -> Result<CudaGpu, CudaError> {
        // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::NoDevice(e.to_string()))?;
        // One stream, ordered: no cross-stream events are needed, and a graph capture must not
        // see event records.
        // SAFETY: every allocation of this GPU is used on its one stream only.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability()?;
        let ptx = compile_kernels(&format!("{major}{minor}"))?;
        let module = ctx.load_module(ptx)?;
        let mut functions = HashMap::new();
        for name in KERNELS {
            functions.insert(name, module.load_function(name)?);
        }
        // Graph capture needs a stream other than the legacy default one.
        let stream = ctx.new_stream()?;
        Ok(CudaGpu {
            ctx,
            stream,
            _module: module,
            functions,
            memory: HashMap::new(),
            graphs: Vec::new(),
        })
    }
}

fn text(e: cudarc::driver::DriverError) -> String {
    format!("CUDA: {e}")
}

impl Gpu for CudaGpu {
    fn describe(&self) -> String {
        let name = self.ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let (major, minor) = self.ctx.compute_capability().unwrap_or((0, 0));
        format!("{name} (sm_{major}{minor})")
    }

    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, String> {
        let mem = self.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(text)?;
        let ptr = mem.device_ptr(&self.stream).0;
        self.memory.insert(ptr, mem);
        Ok(ptr)
    }

    fn free(&mut self, ptr: DevPtr) {
        self.memory.remove(&ptr);
    }

    fn upload(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), String> {
        // SAFETY: `dst` is an allocation of this GPU of at least `src.len()` bytes (the callers
        // size copies by the buffer they allocated); the copy is ordered on our stream and
        // waited for before `src` may change.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, src, self.stream.cu_stream()) }
            .map_err(text)?;
        self.stream.synchronize().map_err(text)
    }

    fn download(&mut self, src: DevPtr, dst: &mut [u8]) -> Result<(), String> {
        // SAFETY: as for `upload`; the copy is ordered after all earlier launches and waited
        // for before `dst` is read.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, self.stream.cu_stream()) }
            .map_err(text)?;
        self.stream.synchronize().map_err(text)
    }

    fn launch(
        &mut self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), String> {
        let f = self
            .functions
            .get(kernel)
            .ok_or_else(|| format!("kernel {kernel} missing"))?;
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::I32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: (grid.0, grid.1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `args` follow the kernel's parameter list in `kernels.cu` (launch.rs builds
        // each kernel's list in one place and the host emulator checks the same lists), every
        // pointer is a live allocation as large as the kernel indexes (launch.rs checks the
        // buffers' lengths), and the launch is ordered on our stream.
        unsafe { b.launch(cfg) }.map_err(text)?;
        Ok(())
    }

    fn begin_capture(&mut self) -> Result<(), String> {
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(text)
    }

    fn end_capture(&mut self) -> Result<usize, String> {
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)
            .map_err(text)?
            .ok_or("the capture recorded no graph")?;
        graph.upload().map_err(text)?;
        self.graphs.push(SendGraph(graph));
        Ok(self.graphs.len() - 1)
    }

    fn launch_graph(&mut self, graph: usize) -> Result<(), String> {
        let g = self.graphs.get(graph).ok_or("no such graph")?;
        g.0.launch().map_err(text)
    }

    fn synchronize(&mut self) -> Result<(), String> {
        self.stream.synchronize().map_err(text)
    }
}
