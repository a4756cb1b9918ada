//! The Gated DeltaNet token mixer's weights (linear attention with a per-sequence recurrent
//! state); its arithmetic is the `gated_delta_net` op (`graph::gdn_op`).
//!
//! Per token: one projection gives `[q | k | v | z]` (the loader reorders Qwen3-Next's fused,
//! per-key-head-grouped `in_proj_qkvz` into this layout; Qwen3.5's separate `in_proj_qkv` and
//! `in_proj_z` are stacked), another `[b | a]`. `q k v` pass a causal depthwise conv1d (with the
//! sequence's rolling conv state) and SiLU; q and k are L2-normalised per head; each value head
//! runs the gated delta rule with `g = -exp(A_log) * softplus(a + dt_bias)` and
//! `beta = sigmoid(b)` on the key head it shares with `n_v / n_k - 1` others; the output is
//! RMS-normalised per head, scaled by `silu(z)` and projected back.

use oxllm_kernels::matmul::QMatrix;

use super::config::LinearAttnConfig;

/// Which form of the delta rule runs multi-token steps (single tokens always run recurrently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaRule {
    /// Token by token: results do not depend on how a prompt is split into steps.
    Recurrent,
    /// Chunks of this many tokens (the UT-transform form).
    Chunked(usize),
}

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

/// `ln(1 + e^x)`, exact to f32 above 20.
pub(crate) fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `x * scale / ||x||` (with 1e-6 under the root).
pub(crate) fn l2_normalize(x: &mut [f32], scale: f32) {
    let inv = 1.0 / (x.iter().map(|a| a * a).sum::<f32>() + 1e-6).sqrt();
    x.iter_mut().for_each(|a| *a *= inv * scale);
}
