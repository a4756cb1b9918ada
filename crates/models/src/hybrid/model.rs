//! The hybrid decoder: per layer a token mixer (Gated DeltaNet or gated full attention) and an
//! MLP (dense or mixture of experts), both pre-normalised with residuals.
//!
//! Full-attention layers use the paged K/V cache exactly like the Llama family (the cache holds
//! K/V for those layers only); linear layers keep their state in the cache's
//! `RecurrentStatePool`, at the batch's state slots.

use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops::{self, Rope};
use oxllm_kernels::pool::ThreadPool;

use super::config::HybridConfig;
use super::gated_attention::GatedAttention;
use super::gated_delta_net::{DeltaRule, GatedDeltaNet};
use super::moe::{DenseMlp, MoeMlp};
use super::state_io;
use crate::llama::{embed_tokens, output_logits, rms_rows};
use crate::{ForwardBatch, KvCache, ModelError, RecurrentStatePool};

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
            Some(head) => (embeddings, Some(head.with_f32_activations())),
            None => (embeddings.with_f32_activations(), None),
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

    /// An empty recurrent-state pool of `num_slots` sequences (`None` without linear layers).
    pub fn new_state_pool(&self, num_slots: usize) -> Option<RecurrentStatePool> {
        let l = self.config.linear?;
        let n = self
            .layers
            .iter()
            .filter(|x| matches!(x.mixer, Mixer::Linear(_)))
            .count();
        Some(RecurrentStatePool::new(
            n,
            num_slots,
            l.conv_state_len(),
            l.recurrent_len(),
        ))
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

    /// Runs one step; returns logits `[logits_indices.len(), vocab]`.
    pub fn forward(
        &self,
        pool: &ThreadPool,
        batch: &ForwardBatch<'_>,
        kv: &mut KvCache,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.config.base;
        batch
            .validate(kv.num_slots(), kv.block_size())
            .map_err(ModelError::InvalidBatch)?;
        if kv.kv_width() != c.kv_width() || kv.n_layers() != c.kv_layers {
            return Err(ModelError::InvalidBatch(format!(
                "cache has {} layers of {} values, the model needs {} of {}",
                kv.n_layers(),
                kv.kv_width(),
                c.kv_layers,
                c.kv_width()
            )));
        }
        if let Some(states) = kv.states_mut() {
            state_io::validate_slots(batch, states.num_slots())?;
            state_io::apply_restores(batch, states);
        }
        let n = batch.token_ids.len();
        let h = c.hidden;
        let mut x = embed_tokens(&self.embeddings, batch.token_ids, c.vocab_size, h)?;
        let mut normed = vec![0f32; n * h];
        let (mut attn_idx, mut lin_idx) = (0, 0);
        for layer in &self.layers {
            rms_rows(&x, &layer.input_norm, c.rms_eps, &mut normed);
            let mixed = match &layer.mixer {
                Mixer::Full(a) => {
                    let (kc, vc) = kv.layer_mut(attn_idx);
                    attn_idx += 1;
                    a.forward(pool, &normed, c, &self.rope, batch, kc, vc)?
                }
                Mixer::Linear(m) => {
                    let states = kv.states_mut().ok_or_else(|| {
                        ModelError::InvalidBatch("the cache has no recurrent state pool".into())
                    })?;
                    lin_idx += 1;
                    m.forward(
                        pool,
                        &normed,
                        h,
                        batch,
                        states,
                        lin_idx - 1,
                        self.delta_rule,
                    )?
                }
            };
            ops::add_in_place(&mut x, &mixed);
            rms_rows(&x, &layer.post_norm, c.rms_eps, &mut normed);
            let y = match &layer.mlp {
                Mlp::Dense(d) => d.forward(pool, &normed, n, h)?,
                Mlp::Moe(m) => m.forward(pool, &normed, n, h)?,
            };
            ops::add_in_place(&mut x, &y);
        }
        output_logits(
            pool,
            &x,
            batch.logits_indices,
            &self.final_norm,
            c.rms_eps,
            self.lm_head(),
        )
    }
}
