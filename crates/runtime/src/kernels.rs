//! Each backend's kernel table: the functions its ops compute with.
//!
//! The host backends execute every [`crate::OpDesc`] through `host_exec` with one of these
//! tables:
//! [`CpuBackend`](crate::CpuBackend) runs [`FAST`] (SIMD kernels chosen for the CPU, work split
//! over the thread pool) and, in a warm step, [`WARM`] (the same, but matmuls only build their
//! plans and K/V stores do nothing: a warm step sizes buffers and scratch on whatever its inputs
//! hold, and nobody reads its products; recurrent states are neither restored nor advanced); [`ReferenceBackend`](crate::ReferenceBackend) runs
//! [`REFERENCE`] (the scalar kernels, one thread). A device backend brings its own kernels.

use half::f16;
use oxllm_core::DType;
use oxllm_kernels::attention::{
    paged_attention, paged_attention_scalar, store_kv, AttnMetadata, AttnShape,
};
use oxllm_kernels::gdn::{
    gated_delta_net, restore_state_slots, DeltaRule, GdnError, GdnInputs, GdnShape, GdnWeights,
};
use oxllm_kernels::matmul::{
    matmul_many, matmul_many_prepare, matmul_reference, quantize_acts_into,
    quantize_acts_reference, QMatrix, QuantizedActs,
};
use oxllm_kernels::pool::ThreadPool;
use oxllm_kernels::quant::QuantError;
use oxllm_sample::sample_rows::{sample_rows, warm_sample_rows, SampleRows};

/// `out = acts · Wᵀ` for each job, in one dispatch.
pub type MatmulFn =
    fn(&ThreadPool, &mut [(&QMatrix, &QuantizedActs, &mut [f32])]) -> Result<(), QuantError>;
/// Quantizes `rows x cols` activations into the format `dtype`.
pub type QuantizeFn =
    fn(&ThreadPool, &[f32], usize, usize, DType, &mut QuantizedActs) -> Result<(), QuantError>;
/// Causal paged attention over a cache of `E` values.
pub type AttentionFn<E> =
    fn(&ThreadPool, &[f32], &[E], &[E], &AttnMetadata<'_>, AttnShape, &mut [f32]);
/// Writes K and V rows (`k`, `v`) into the cache slots of `slot_mapping` (-1: skipped).
pub type StoreKvFn<E> = fn(&mut [E], &mut [E], &[i32], &[f32], &[f32], usize);
/// A Gated DeltaNet layer's core over a step: (shape, rule, weights, inputs, conv states,
/// recurrent states, scratch, out).
pub type GdnFn = fn(
    &GdnShape,
    DeltaRule,
    &GdnWeights<'_>,
    &GdnInputs<'_>,
    &mut [f32],
    &mut [f32],
    &mut [f32],
    &mut [f32],
) -> Result<(), GdnError>;
/// Samples each logits row with its row state into a token id (logits, rows, ids, mask words,
/// vocab).
pub type SampleFn = fn(&ThreadPool, &mut [f32], &mut SampleRows, &mut [u32], &[u32], usize);
/// Copies checkpoint slots into running slots in one state buffer (`len` floats a slot).
pub type RestoreFn = fn(&mut [f32], usize, &[u32], &[i32]) -> Result<(), GdnError>;

#[derive(Clone, Copy)]
pub struct Kernels {
    pub name: &'static str,
    pub quantize: QuantizeFn,
    pub matmul: MatmulFn,
    pub attention_f32: AttentionFn<f32>,
    pub attention_f16: AttentionFn<f16>,
    pub store_kv_f32: StoreKvFn<f32>,
    pub store_kv_f16: StoreKvFn<f16>,
    pub gated_delta_net: GdnFn,
    pub restore_states: RestoreFn,
    pub sample: SampleFn,
}

pub static FAST: Kernels = Kernels {
    name: "fast",
    quantize: quantize_acts_into,
    matmul: matmul_many,
    attention_f32: paged_attention::<f32>,
    attention_f16: paged_attention::<f16>,
    store_kv_f32: store_kv::<f32>,
    store_kv_f16: store_kv::<f16>,
    gated_delta_net,
    restore_states: restore_state_slots,
    sample: sample_rows,
};

pub static WARM: Kernels = Kernels {
    name: "warm",
    matmul: matmul_many_prepare,
    store_kv_f32: store_nothing::<f32>,
    store_kv_f16: store_nothing::<f16>,
    gated_delta_net: advance_nothing,
    restore_states: restore_nothing,
    sample: warm_sample_rows,
    ..FAST
};

pub static REFERENCE: Kernels = Kernels {
    name: "reference",
    quantize: quantize_reference,
    matmul: matmul_jobs_reference,
    attention_f32: paged_attention_scalar::<f32>,
    attention_f16: paged_attention_scalar::<f16>,
    store_kv_f32: store_kv::<f32>,
    store_kv_f16: store_kv::<f16>,
    gated_delta_net,
    restore_states: restore_state_slots,
    sample: sample_rows,
};

/// A warm step runs on whatever its inputs hold: it must not touch the K/V cache.
fn store_nothing<E>(_: &mut [E], _: &mut [E], _: &[i32], _: &[f32], _: &[f32], _: usize) {}

/// A warm step must not advance or restore recurrent states either.
#[allow(clippy::too_many_arguments)]
fn advance_nothing(
    _: &GdnShape,
    _: DeltaRule,
    _: &GdnWeights<'_>,
    _: &GdnInputs<'_>,
    _: &mut [f32],
    _: &mut [f32],
    _: &mut [f32],
    _: &mut [f32],
) -> Result<(), GdnError> {
    Ok(())
}

fn restore_nothing(_: &mut [f32], _: usize, _: &[u32], _: &[i32]) -> Result<(), GdnError> {
    Ok(())
}

fn quantize_reference(
    _pool: &ThreadPool,
    x: &[f32],
    rows: usize,
    cols: usize,
    dtype: DType,
    out: &mut QuantizedActs,
) -> Result<(), QuantError> {
    quantize_acts_reference(x, rows, cols, dtype, out)
}

fn matmul_jobs_reference(
    _pool: &ThreadPool,
    jobs: &mut [(&QMatrix, &QuantizedActs, &mut [f32])],
) -> Result<(), QuantError> {
    for (w, acts, out) in jobs.iter_mut() {
        matmul_reference(w, acts, out)?;
    }
    Ok(())
}
