//! The CUDA backend: a [`Backend`](oxllm_runtime::Backend) whose buffers live in device memory
//! and whose ops run as CUDA kernels chosen from each op's [`OpDesc`](oxllm_runtime::OpDesc).
//!
//! - The driver and NVRTC are loaded at run time, so oxllm builds and its CPU paths run where no
//!   CUDA exists; [`CudaBackend::new`] then fails with [`CudaError::NoDriver`] (never a panic).
//! - Kernels (`kernels.cu`) are compiled by NVRTC at start-up for the running GPU.
//! - Weights are handed over once ([`Backend::load_weights`](oxllm_runtime::Backend)) and kept
//!   on the device: f32 and f16 matrices as f32, every other format dequantized to bf16 at load.
//! - A captured plan is replayed as one CUDA graph: inputs the host wrote are copied to the
//!   device before the launch; ops that only run on the host (sampling) run after it on host
//!   copies of the buffers they read, so nothing inside a capture reads device memory back.
//! - Batch invariance: every kernel computes a row from that row alone, in an order fixed by
//!   the row's shape.
//! - [`EmulatedBackend`] is the same backend on a host emulator of the kernels, so everything
//!   but the kernels' machine code is tested where there is no GPU.

mod backend;
mod cuda_gpu;
mod device;
mod error;
mod gpu;
mod host_gpu;
mod kernel_sigs;
mod launch;

pub use backend::{CudaBackend, EmulatedBackend, GpuBackend};
pub use cuda_gpu::compile_kernels;
pub use error::CudaError;

/// Every kernel `kernels.cu` exports.
pub(crate) const KERNELS: [&str; kernel_sigs::KERNEL_SIGS.len()] = {
    let mut names = [""; kernel_sigs::KERNEL_SIGS.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = kernel_sigs::KERNEL_SIGS[i].0;
        i += 1;
    }
    names
};
