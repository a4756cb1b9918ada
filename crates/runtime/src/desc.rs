//! Ops as data: what an op computes, over buffer handles and typed weight ids, with no host
//! pointer, closure or thread pool in it.
//!
//! A backend that does not run the host kernels (a GPU) executes an op from its [`OpDesc`]
//! with its own kernel for each variant, and resolves every [`WeightId`] in the weights it was
//! handed once by [`Backend::load_weights`](crate::Backend::load_weights) (a [`WeightSource`]),
//! kept in its own layout and memory. Activation formats are the backend's choice: a device
//! backend may treat [`OpDesc::Quantize`] as a no-op and read [`MatmulJob::input`] (the f32 rows
//! before quantization) directly.

use oxllm_core::DType;
use oxllm_kernels::attention::AttnShape;
use oxllm_kernels::matmul::QMatrix;

use crate::BufRef;

/// A weight of one layer, named by its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerWeight {
    AttnNorm,
    Wq,
    Wk,
    Wv,
    Wo,
    Bq,
    Bk,
    Bv,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
}

/// A weight of the model: the whole model's, or one layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightId {
    Embeddings,
    FinalNorm,
    OutputHead,
    Layer(u32, LayerWeight),
}

/// A weight as the host holds it.
#[derive(Clone, Copy)]
pub enum HostWeight<'a> {
    Matrix(&'a QMatrix),
    Vector(&'a [f32]),
}

/// What a backend is handed at load: every weight a step may name, once.
pub trait WeightSource {
    /// Calls `visit` with every weight and its id.
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>));
}

/// Rotary embedding parameters: the per-frequency angles and the pair layout.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// `true`: pairs are (i, i + rotary_dim / 2); `false`: adjacent (2i, 2i + 1).
    pub split_half: bool,
    pub head_dim: usize,
    pub rotary_dim: usize,
    /// `rotary_dim / 2` inverse frequencies; the angle at position p is `p as f32 * inv_freq`.
    pub inv_freq: Vec<f32>,
}

/// One product of a matmul op: `out = act(input) · Wᵀ (+ bias)`.
#[derive(Clone, Copy, Debug)]
pub struct MatmulJob {
    pub weight: WeightId,
    pub bias: Option<WeightId>,
    /// The f32 rows the quantized activations were made from (`rows x cols`).
    pub input: BufRef,
    /// The host backends' quantized activations of `input`.
    pub acts: BufRef,
    pub out: BufRef,
}

/// What one op computes. Rows beyond a step's real tokens are padding (slot -1, no sequence).
#[derive(Clone, Debug)]
pub enum OpDesc {
    /// `out[t] = embeddings[tokens[t]]`.
    Embed {
        tokens: BufRef,
        out: BufRef,
        hidden: usize,
    },
    /// Per-row RMSNorm of `x` (`cols` wide) with `weight` into `out`.
    RmsNorm {
        weight: WeightId,
        x: BufRef,
        out: BufRef,
        cols: usize,
        eps: f32,
    },
    /// Activation quantization for the host kernels (`rows x cols` of `x` into `out`).
    Quantize {
        x: BufRef,
        out: BufRef,
        rows: usize,
        cols: usize,
        dtype: DType,
    },
    /// Products sharing one dispatch; each job's output is `rows x weight.rows()`.
    Matmul {
        rows: usize,
        cols: usize,
        jobs: Vec<MatmulJob>,
    },
    /// Per-head q/k RMSNorm (when the weights are given) and RoPE at each row's position.
    QkNormRope {
        q: BufRef,
        k: BufRef,
        positions: BufRef,
        n_heads: usize,
        n_kv_heads: usize,
        norms: Option<(WeightId, WeightId)>,
        eps: f32,
        rope: RopeSpec,
    },
    /// K/V rows into their cache slots (slot -1 skipped).
    StoreKv {
        slot_mapping: BufRef,
        k: BufRef,
        v: BufRef,
        k_cache: BufRef,
        v_cache: BufRef,
        kv_width: usize,
    },
    /// Causal paged attention; rows past the last sequence are zeroed.
    Attention {
        q: BufRef,
        k_cache: BufRef,
        v_cache: BufRef,
        query_start_loc: BufRef,
        seq_lens: BufRef,
        block_tables: BufRef,
        block_table_stride: usize,
        block_size: usize,
        shape: AttnShape,
        out: BufRef,
    },
    /// `acc += x`.
    Add { acc: BufRef, x: BufRef },
    /// `gate = silu(gate) * up`.
    SiluMul { gate: BufRef, up: BufRef },
    /// `out[i] = rms_norm(x[indices[i]], weight)`.
    GatherNorm {
        x: BufRef,
        indices: BufRef,
        weight: WeightId,
        out: BufRef,
        cols: usize,
        eps: f32,
    },
}
