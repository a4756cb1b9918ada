//! Errors of the CUDA backend's creation and of its device calls.

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA driver found (libcuda.so could not be loaded): the CUDA backend needs an NVIDIA GPU and its driver")]
    NoDriver,
    #[error("no NVRTC library found (libnvrtc.so.13 could not be loaded): install the CUDA toolkit's NVRTC or put its folder on LD_LIBRARY_PATH")]
    NoNvrtc,
    #[error("no CUDA GPU found: {0}")]
    NoDevice(String),
    #[error("CUDA driver call failed: {0}")]
    Driver(String),
    #[error("NVRTC could not compile the kernels: {0}")]
    Compile(String),
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(e.to_string())
    }
}
