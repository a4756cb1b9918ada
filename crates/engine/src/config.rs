//! Engine configuration and how the KV pool size is resolved.

use oxllm_models::ModelConfig;
use oxllm_runtime::CpuOptions;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvCacheSize {
    Blocks(usize),
    Bytes(usize),
}

/// Element type of the paged K/V cache as configured; [`KvCacheDtype::resolve`] turns it into
/// the [`KvDtype`] the engine runs with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvCacheDtype {
    /// f32 for models whose weights are f32 (so their outputs stay comparable bit for bit
    /// with an f32 reference), f16 otherwise.
    #[default]
    Auto,
    F32,
    /// Half the bytes per token: twice the tokens in the same memory and half the attention
    /// reads; values rounded to nearest f16 on store.
    F16,
}

impl KvCacheDtype {
    /// The concrete type for a model whose weights are (`true`) or are not all f32.
    pub fn resolve(self, f32_weights: bool) -> KvDtype {
        match self {
            KvCacheDtype::Auto if f32_weights => KvDtype::F32,
            KvCacheDtype::Auto => KvDtype::F16,
            KvCacheDtype::F32 => KvDtype::F32,
            KvCacheDtype::F16 => KvDtype::F16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::F32 => "f32",
            KvCacheDtype::F16 => "f16",
        }
    }
}

/// The K/V cache's element type once resolved for a model at engine start: everything past
/// the config (pool sizing, the runner's buffers, `EngineInfo`) sees only this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
}

impl KvDtype {
    /// Bytes per cached value.
    pub fn bytes(self) -> usize {
        match self {
            KvDtype::F32 => 4,
            KvDtype::F16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KvDtype::F32 => "f32",
            KvDtype::F16 => "f16",
        }
    }
}

impl std::str::FromStr for KvCacheDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(KvCacheDtype::Auto),
            "f32" | "float32" => Ok(KvCacheDtype::F32),
            "f16" | "float16" | "half" => Ok(KvCacheDtype::F16),
            other => Err(format!(
                "unknown K/V cache dtype '{other}' (expected auto, f32 or f16)"
            )),
        }
    }
}

/// How dense models run their steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlanMode {
    /// Build and run every step's ops as they are launched (the reference path).
    Eager,
    /// Capture decode and prefill buckets at start-up and replay them (eager for other steps).
    #[default]
    Captured,
}

impl std::str::FromStr for PlanMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "eager" => Ok(PlanMode::Eager),
            "captured" => Ok(PlanMode::Captured),
            other => Err(format!(
                "unknown plan mode '{other}' (expected eager or captured)"
            )),
        }
    }
}

/// Where dense models run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendKind {
    /// The fast kernels on a thread pool; supports capture.
    #[default]
    Cpu,
    /// Scalar kernels on one thread, no capture: a cross-check, not for serving.
    Reference,
    /// An NVIDIA GPU through the CUDA driver (dense models); plans replay as CUDA graphs.
    Cuda,
    /// The CUDA backend on a host emulator of its kernels: slow, for checking everything but
    /// the kernels' machine code where there is no GPU.
    CudaEmulator,
}

impl std::str::FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(BackendKind::Cpu),
            "reference" => Ok(BackendKind::Reference),
            "cuda" => Ok(BackendKind::Cuda),
            "cuda-emulator" => Ok(BackendKind::CudaEmulator),
            other => Err(format!(
                "unknown backend '{other}' (expected cpu, reference, cuda or cuda-emulator)"
            )),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub max_num_batched_tokens: usize,
    /// Most prompt tokens a step carries while requests decode (`None`: the whole budget); see
    /// `oxllm_sched::SchedulerConfig::max_prefill_beside_decode`.
    pub max_prefill_beside_decode: Option<usize>,
    pub max_num_seqs: usize,
    pub block_size: usize,
    pub kv_cache: KvCacheSize,
    pub kv_cache_dtype: KvCacheDtype,
    /// Longest prompt + output; defaults to the model's context length.
    pub max_model_len: Option<usize>,
    pub enable_prefix_caching: bool,
    pub threads: usize,
    pub plan: PlanMode,
    pub backend: BackendKind,
    /// CPU backend options (the weight layout: the model must be loaded in it, with
    /// `oxllm_models::load_model_with`).
    pub cpu: CpuOptions,
    /// Hybrid models: recurrent-state slots for running sequences (bounds concurrency)
    /// [default: `max_num_seqs`, within a quarter of a byte-sized KV budget].
    pub max_state_slots: Option<usize>,
    /// Hybrid models: recurrent-state checkpoints kept for prefix hits [default: what a quarter
    /// of a byte-sized KV budget holds, at most 256; `max_state_slots` with a block count].
    pub num_state_checkpoints: Option<usize>,
    /// Hybrid models: blocks between recurrent-state checkpoints.
    pub state_checkpoint_interval: usize,
    /// Constrained decoding: compute a step's token masks on a worker thread while its forward
    /// runs (the sample op waits for them), instead of on the engine thread before the step.
    /// Output is the same either way. Off by default: on 2 cores the worker competes with the
    /// thread pool and costs more than it hides (docs/BENCHMARKS.md, "mask overlap").
    pub overlap_masks: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_num_batched_tokens: 512,
            max_prefill_beside_decode: None,
            max_num_seqs: 64,
            block_size: 16,
            kv_cache: KvCacheSize::Bytes(1 << 30),
            kv_cache_dtype: KvCacheDtype::Auto,
            max_model_len: None,
            enable_prefix_caching: true,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            plan: PlanMode::default(),
            backend: BackendKind::default(),
            cpu: CpuOptions::default(),
            max_state_slots: None,
            num_state_checkpoints: None,
            state_checkpoint_interval: 4,
            overlap_masks: false,
        }
    }
}

impl EngineConfig {
    /// Number of KV blocks (including the reserved null block) this config gives `model`, whose
    /// recurrent-state pool (hybrids; 0 otherwise) takes `state_bytes` of a byte budget, with
    /// values of the resolved `dtype`.
    pub fn resolve_num_blocks(
        &self,
        model: &ModelConfig,
        state_bytes: usize,
        dtype: KvDtype,
    ) -> usize {
        match self.kv_cache {
            KvCacheSize::Blocks(n) => n,
            KvCacheSize::Bytes(bytes) => {
                let per_token = kv_bytes_per_token(model, dtype);
                bytes.saturating_sub(state_bytes) / (per_token * self.block_size).max(1)
            }
        }
    }

    /// The cache's element type for `model`.
    pub fn resolve_kv_dtype(&self, model: &oxllm_models::Model) -> KvDtype {
        use oxllm_core::DType;
        let f32_weights = match (model.dense(), model.hybrid()) {
            (Some(d), _) => d.layers.iter().all(|l| l.wq.dtype() == DType::F32),
            (None, Some(h)) => h.embeddings.dtype() == DType::F32,
            (None, None) => true,
        };
        self.kv_cache_dtype.resolve(f32_weights)
    }

    pub fn resolve_max_model_len(&self, model: &ModelConfig) -> usize {
        self.max_model_len
            .unwrap_or(model.context_length)
            .min(model.context_length)
    }
}

/// K and V bytes one token takes over all attention layers with values of `dtype`.
pub fn kv_bytes_per_token(model: &ModelConfig, dtype: KvDtype) -> usize {
    // K and V of every attention layer.
    model.kv_layers * model.kv_width() * 2 * dtype.bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_cache_dtype_parses_resolves_and_sizes() {
        assert_eq!("f16".parse(), Ok(KvCacheDtype::F16));
        assert_eq!("float32".parse(), Ok(KvCacheDtype::F32));
        assert_eq!("auto".parse(), Ok(KvCacheDtype::Auto));
        let err = "bf8".parse::<KvCacheDtype>().unwrap_err();
        assert!(err.contains("bf8") && err.contains("f16"), "{err}");
        assert_eq!(KvCacheDtype::Auto.resolve(true), KvDtype::F32);
        assert_eq!(KvCacheDtype::Auto.resolve(false), KvDtype::F16);
        assert_eq!(KvCacheDtype::F32.resolve(false), KvDtype::F32);
        assert_eq!(KvCacheDtype::F16.resolve(true), KvDtype::F16);
        assert_eq!((KvDtype::F16.bytes(), KvDtype::F32.bytes()), (2, 4));
    }
}
