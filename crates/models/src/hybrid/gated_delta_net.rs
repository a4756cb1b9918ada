//! The Gated DeltaNet token mixer's weights (linear attention with a per-sequence recurrent
//! state); see `oxllm_kernels::gdn` for the core's arithmetic.
//!
//! Per token: one projection gives `[q | k | v | z]` (the loader reorders Qwen3-Next's fused,
//! per-key-head-grouped `in_proj_qkvz` into this layout; Qwen3.5's separate `in_proj_qkv` and
//! `in_proj_z` are stacked), another `[b | a]`. `q k v` pass a causal depthwise conv1d (with the
//! sequence's rolling conv state) and SiLU; q and k are L2-normalised per head; each value head
//! runs the gated delta rule with `g = -exp(A_log) * softplus(a + dt_bias)` and
//! `beta = sigmoid(b)` on the key head it shares with `n_v / n_k - 1` others; the output is
//! RMS-normalised per head, scaled by `silu(z)` and projected back. The core's arithmetic is
//! `oxllm_kernels::gdn`, run by the `OpDesc::GatedDeltaNet` op description.

use oxllm_kernels::matmul::QMatrix;

use super::config::LinearAttnConfig;

pub struct GatedDeltaNet {
    pub cfg: LinearAttnConfig,
    /// `[conv_dim + value_width, hidden]`: rows q, k, v, z.
    pub in_proj: QMatrix,
    /// `[2 * n_v_heads, hidden]`: rows b, a.
    pub in_proj_ba: QMatrix,
    /// `[conv_dim, kernel]`.
    pub conv: Vec<f32>,
    /// `-exp(A_log)` per value head.
    pub neg_a: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// Per-head gated RMSNorm weight (`v_dim`).
    pub norm: Vec<f32>,
    pub out_proj: QMatrix,
    pub eps: f32,
}
