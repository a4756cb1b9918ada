//! The weights of the hybrid families' full softmax attention over the paged K/V cache (its
//! ops: `split_query_gate`, `qk_norm_rope`, `store_kv`, `attention`, `sigmoid_gate` in `graph`).
//!
//! Like the Llama-family layer, plus: `q_proj` may yield `[query | gate]` per head (Qwen3-Next,
//! Qwen3.5), the attention output then being scaled by `sigmoid(gate)`; q/k RMSNorm per head;
//! RoPE on the first `rotary_dim` dims of each head only.

use oxllm_kernels::matmul::QMatrix;

pub struct GatedAttention {
    /// `[n_heads * head_dim * (1 + gated), hidden]`; gated: per head `[query | gate]`.
    pub wq: QMatrix,
    pub wk: QMatrix,
    pub wv: QMatrix,
    pub wo: QMatrix,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub gated: bool,
}
