//! The Llama-family decoder's weights (Llama, Mistral-style, Qwen2, Qwen3 dense). Its forward
//! is the recorded op sequence of `graph::record_dense_forward`.
//!
//! Per layer: RMSNorm -> Q/K/V projections (+ optional biases) -> optional per-head q/k
//! RMSNorm (Qwen3) -> RoPE at each token's position -> write K/V to the paged cache -> causal
//! GQA over the cache -> output projection + residual -> RMSNorm -> SiLU-gated MLP + residual.
//! Activations are quantized once per distinct weight format and shared by the projections
//! that read the same input.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops::Rope;

use crate::ModelConfig;

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub wq: QMatrix,
    pub wk: QMatrix,
    pub wv: QMatrix,
    pub wo: QMatrix,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub w_gate: QMatrix,
    pub w_up: QMatrix,
    pub w_down: QMatrix,
}

pub struct LlamaModel {
    pub config: ModelConfig,
    pub embeddings: QMatrix,
    pub layers: Vec<LayerWeights>,
    pub final_norm: Vec<f32>,
    /// `None` when the output projection is tied to the embeddings.
    pub lm_head: Option<QMatrix>,
    pub(crate) rope: Rope,
}

impl LlamaModel {
    pub fn new(
        config: ModelConfig,
        embeddings: QMatrix,
        layers: Vec<LayerWeights>,
        final_norm: Vec<f32>,
        lm_head: Option<QMatrix>,
        rope_freq_factors: Option<Vec<f32>>,
    ) -> LlamaModel {
        let factors = rope_freq_factors.or_else(|| config.rope_freq_factors());
        let rope = Rope::new(
            config.rope_layout,
            config.head_dim,
            config.head_dim,
            config.rope_theta,
            factors.as_deref(),
        );
        // The output head decides which token wins; 8-bit activations there flip near-ties
        // (measured on SmolLM2: teacher-forced agreement 96.5% -> 97.3%), and it runs only on
        // sampled rows, so it keeps f32 activations where a fast kernel takes them
        // (`QMatrix::for_output_head`).
        let (embeddings, lm_head) = match lm_head {
            Some(head) => (embeddings, Some(head.for_output_head())),
            None => (embeddings.for_output_head(), None),
        };
        LlamaModel {
            config,
            embeddings,
            layers,
            final_norm,
            lm_head,
            rope,
        }
    }

    pub fn lm_head(&self) -> &QMatrix {
        self.lm_head.as_ref().unwrap_or(&self.embeddings)
    }

    /// Bytes of weights read by one decode step (every matrix once).
    pub fn weight_bytes(&self) -> usize {
        let layer: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]
                    .iter()
                    .map(|m| m.bytes())
                    .sum::<usize>()
            })
            .sum();
        layer + self.lm_head().bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Arch;
    use oxllm_core::DType;
    use oxllm_kernels::ops::RopeLayout;

    fn config(hidden: usize) -> ModelConfig {
        ModelConfig {
            arch: Arch::Llama,
            vocab_size: 4,
            hidden,
            n_layers: 0,
            kv_layers: 0,
            n_heads: 4,
            n_kv_heads: 4,
            head_dim: hidden / 4,
            ffn: hidden,
            rms_eps: 1e-5,
            rope_theta: 10000.0,
            rope_layout: RopeLayout::SplitHalf,
            rope_scaling: None,
            context_length: 64,
            qkv_bias: false,
            qk_norm: false,
            tied_embeddings: true,
        }
    }

    fn matrix(dtype: DType, rows: usize, cols: usize) -> QMatrix {
        let bytes = vec![0u8; dtype.row_bytes(cols).unwrap() * rows];
        QMatrix::new(dtype, rows, cols, bytes).unwrap()
    }

    /// Tied or not, a Q6_K head (most Q4_K_M files) runs on the integer kernels; Q8_0 and
    /// float heads keep f32 activations.
    #[test]
    fn the_head_takes_f32_activations_only_from_q8_0_and_floats() {
        let h = 256;
        for (dtype, want) in [
            (DType::Q6K, DType::Q8K),
            (DType::Q4K, DType::Q8K),
            (DType::Q4_1, DType::Q8_1),
            (DType::Q8_0, DType::F32),
            (DType::F16, DType::F32),
        ] {
            let tied = LlamaModel::new(
                config(h),
                matrix(dtype, 4, h),
                vec![],
                vec![1.0; h],
                None,
                None,
            );
            assert_eq!(tied.lm_head().activation_dtype(), want, "tied {dtype}");
            let head = Some(matrix(dtype, 4, h));
            let own = LlamaModel::new(
                config(h),
                matrix(DType::F32, 4, h),
                vec![],
                vec![1.0; h],
                head,
                None,
            );
            assert_eq!(own.lm_head().activation_dtype(), want, "{dtype}");
        }
    }
}
