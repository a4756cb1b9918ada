//! The calls the backend makes on a GPU, as a trait: [`crate::cuda_gpu::CudaGpu`] makes them on
//! an NVIDIA GPU through the driver; [`crate::host_gpu::HostGpu`] emulates them on the host
//! (memory as byte vectors, each kernel of `kernels.cu` re-stated in Rust), so the backend's
//! host side (buffers, copies, capture and replay) is tested on machines with no GPU.

/// A device address.
pub type DevPtr = u64;

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Ptr(DevPtr),
    I32(i32),
    I64(i64),
    F32(f32),
}

/// A GPU's memory, kernels and graphs, in stream order: every call is ordered after the
/// previous ones.
pub trait Gpu: Send {
    /// The device's name, for logs.
    fn describe(&self) -> String;
    /// `bytes` of zeroed device memory.
    fn alloc_zeroed(&mut self, bytes: usize) -> Result<DevPtr, String>;
    /// Gives back memory from [`Gpu::alloc_zeroed`].
    fn free(&mut self, ptr: DevPtr);
    /// Copies `src` to `dst`; returns once the host may reuse `src`.
    fn upload(&mut self, dst: DevPtr, src: &[u8]) -> Result<(), String>;
    /// Copies device memory at `src` into `dst` after all earlier work.
    fn download(&mut self, src: DevPtr, dst: &mut [u8]) -> Result<(), String>;
    /// Launches `kernel` (a name exported by `kernels.cu`).
    fn launch(
        &mut self,
        kernel: &'static str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), String>;
    /// From here until [`Gpu::end_capture`], launches are recorded instead of run.
    fn begin_capture(&mut self) -> Result<(), String>;
    /// The recorded launches as a graph, by index.
    fn end_capture(&mut self) -> Result<usize, String>;
    fn launch_graph(&mut self, graph: usize) -> Result<(), String>;
    /// Waits for all earlier work.
    fn synchronize(&mut self) -> Result<(), String>;
}
