//! The hybrid decoder's weights: per layer a token mixer (Gated DeltaNet or gated full
//! attention) and an MLP (dense or mixture of experts), both pre-normalised with residuals. Its
//! forward is the recorded op sequence of `graph::record_hybrid_forward`.
//!
//! Full-attention layers use the paged K/V cache exactly like the Llama family (the cache holds
//! K/V for those layers only); linear layers keep their state in recurrent-state buffers
//! (`graph::StateBuffers`), at the step's state slots.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops::Rope;

use super::config::HybridConfig;
use super::gated_attention::GatedAttention;
use super::gated_delta_net::GatedDeltaNet;
use super::moe::{DenseMlp, MoeMlp};
use oxllm_kernels::gdn::DeltaRule;

pub enum Mixer {
    Linear(GatedDeltaNet),
    Full(GatedAttention),
}

pub enum Mlp {
    Dense(DenseMlp),
    Moe(MoeMlp),
}

pub struct HybridLayer {
    /// RMSNorm weights with the `1 +` of the offset kind already added.
    pub input_norm: Vec<f32>,
    pub mixer: Mixer,
    pub post_norm: Vec<f32>,
    pub mlp: Mlp,
}

pub struct HybridModel {
    pub config: HybridConfig,
    pub embeddings: QMatrix,
    pub layers: Vec<HybridLayer>,
    pub final_norm: Vec<f32>,
    pub lm_head: Option<QMatrix>,
    pub(crate) rope: Rope,
    delta_rule: DeltaRule,
}

impl HybridModel {
    pub fn new(
        config: HybridConfig,
        embeddings: QMatrix,
        layers: Vec<HybridLayer>,
        final_norm: Vec<f32>,
        lm_head: Option<QMatrix>,
    ) -> HybridModel {
        let b = &config.base;
        let rope = Rope::new(
            b.rope_layout,
            b.head_dim,
            config.rotary_dim,
            b.rope_theta,
            None,
        );
        let (embeddings, lm_head) = match lm_head {
            Some(head) => (embeddings, Some(head.for_output_head())),
            None => (embeddings.for_output_head(), None),
        };
        HybridModel {
            config,
            embeddings,
            layers,
            final_norm,
            lm_head,
            rope,
            delta_rule: DeltaRule::Recurrent,
        }
    }

    /// How multi-token steps run the delta rule. The default, [`DeltaRule::Recurrent`], keeps
    /// results bit-identical however a prompt is split into steps.
    pub fn set_delta_rule(&mut self, rule: DeltaRule) {
        self.delta_rule = rule;
    }

    /// The form multi-token steps run the delta rule in.
    pub fn delta_rule(&self) -> DeltaRule {
        self.delta_rule
    }

    pub fn lm_head(&self) -> &QMatrix {
        self.lm_head.as_ref().unwrap_or(&self.embeddings)
    }

    /// Number of Gated DeltaNet (linear-attention) layers.
    pub fn linear_layers(&self) -> usize {
        self.layers
            .iter()
            .filter(|x| matches!(x.mixer, Mixer::Linear(_)))
            .count()
    }

    /// Bytes of one sequence's recurrent state across all linear layers (0 without any).
    pub fn state_bytes_per_slot(&self) -> usize {
        self.config.linear.map_or(0, |l| {
            self.linear_layers()
                * (l.conv_state_len() + l.recurrent_len())
                * std::mem::size_of::<f32>()
        })
    }

    pub fn weight_bytes(&self) -> usize {
        let mut total = self.lm_head().bytes();
        for l in &self.layers {
            total += match &l.mixer {
                Mixer::Linear(m) => m.in_proj.bytes() + m.in_proj_ba.bytes() + m.out_proj.bytes(),
                Mixer::Full(a) => a.wq.bytes() + a.wk.bytes() + a.wv.bytes() + a.wo.bytes(),
            };
            let dense = |d: &DenseMlp| d.gate.bytes() + d.up.bytes() + d.down.bytes();
            total += match &l.mlp {
                Mlp::Dense(d) => dense(d),
                Mlp::Moe(m) => {
                    m.experts.iter().map(dense).sum::<usize>()
                        + m.shared.as_ref().map_or(0, |(d, _)| dense(d))
                }
            };
        }
        total
    }
}
