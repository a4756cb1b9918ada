//! MLPs of the hybrid families (weights and routing): the dense SiLU-gated MLP and the mixture
//! of experts, run by the `OpDesc::Moe` op description (routing: `oxllm_kernels::ops::route`).
//!
//! MoE: router logits -> softmax over all experts -> top-k (optionally renormalised to sum 1)
//! -> the selected experts' outputs weighted by their probabilities; Qwen3-Next adds a shared
//! expert on every token, scaled by `sigmoid(shared_gate . x)`.

use oxllm_kernels::matmul::QMatrix;

pub struct DenseMlp {
    pub gate: QMatrix,
    pub up: QMatrix,
    pub down: QMatrix,
}

pub struct MoeMlp {
    /// `[n_experts, hidden]`, computed with f32 activations so routing sees exact inputs.
    pub router: QMatrix,
    pub experts: Vec<DenseMlp>,
    pub top_k: usize,
    pub norm_topk: bool,
    /// The shared expert and its `[1, hidden]` gate.
    pub shared: Option<(DenseMlp, QMatrix)>,
}
