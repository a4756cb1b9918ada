//! The Llama-family decoder (Llama, Mistral-style, Qwen2, Qwen3 dense) as one forward pass.
//!
//! Per layer: RMSNorm -> Q/K/V projections (+ optional biases) -> optional per-head q/k
//! RMSNorm (Qwen3) -> RoPE at each token's position -> write K/V to the paged cache -> causal
//! GQA over the cache -> output projection + residual -> RMSNorm -> SiLU-gated MLP + residual.
//! Activations are quantized once per distinct weight format and shared by the projections
//! that read the same input.

use oxllm_kernels::attention::{paged_attention, store_kv, AttnShape};
use oxllm_kernels::matmul::{add_bias, matmul, matmul_many, quantize_acts, QMatrix, QuantizedActs};
use oxllm_kernels::ops::{self, Rope};
use oxllm_kernels::pool::ThreadPool;

use crate::{ForwardBatch, KvCache, ModelConfig, ModelError};

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

/// Quantized copies of one activation tensor, one per weight format that reads it.
pub(crate) struct SharedActs<'a> {
    x: &'a [f32],
    rows: usize,
    cols: usize,
    quantized: Vec<QuantizedActs>,
}

impl<'a> SharedActs<'a> {
    pub(crate) fn new(x: &'a [f32], rows: usize, cols: usize) -> Self {
        SharedActs {
            x,
            rows,
            cols,
            quantized: Vec::new(),
        }
    }

    pub(crate) fn project(
        &mut self,
        pool: &ThreadPool,
        w: &QMatrix,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, ModelError> {
        let dtype = w.activation_dtype();
        let idx = match self.quantized.iter().position(|q| q.dtype() == dtype) {
            Some(i) => i,
            None => {
                let q = quantize_acts(pool, self.x, self.rows, self.cols, dtype)?;
                self.quantized.push(q);
                self.quantized.len() - 1
            }
        };
        let mut out = vec![0f32; self.rows * w.rows()];
        matmul(pool, w, &self.quantized[idx], &mut out)?;
        if let Some(b) = bias {
            add_bias(&mut out, b);
        }
        Ok(out)
    }

    /// Several projections of this input in one pool dispatch (Q/K/V, gate/up); each output is
    /// bit-identical to `project`'s.
    pub(crate) fn project_many<const N: usize>(
        &mut self,
        pool: &ThreadPool,
        ws: [(&QMatrix, Option<&[f32]>); N],
    ) -> Result<[Vec<f32>; N], ModelError> {
        let mut idx = [0usize; N];
        for (k, (w, _)) in ws.iter().enumerate() {
            let dtype = w.activation_dtype();
            idx[k] = match self.quantized.iter().position(|q| q.dtype() == dtype) {
                Some(i) => i,
                None => {
                    let q = quantize_acts(pool, self.x, self.rows, self.cols, dtype)?;
                    self.quantized.push(q);
                    self.quantized.len() - 1
                }
            };
        }
        let mut outs: [Vec<f32>; N] =
            std::array::from_fn(|k| vec![0f32; self.rows * ws[k].0.rows()]);
        {
            let mut jobs: Vec<(&QMatrix, &QuantizedActs, &mut [f32])> = ws
                .iter()
                .zip(outs.iter_mut())
                .zip(idx)
                .map(|(((w, _), out), i)| (*w, &self.quantized[i], out.as_mut_slice()))
                .collect();
            matmul_many(pool, &mut jobs)?;
        }
        for ((_, bias), out) in ws.iter().zip(outs.iter_mut()) {
            if let Some(b) = bias {
                add_bias(out, b);
            }
        }
        Ok(outs)
    }
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
        // sampled rows, so it keeps f32 activations.
        let (embeddings, lm_head) = match lm_head {
            Some(head) => (embeddings, Some(head.with_f32_activations())),
            None => (embeddings.with_f32_activations(), None),
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

    /// Runs one step and returns logits, `[logits_indices.len(), vocab_size]` row-major.
    pub fn forward(
        &self,
        pool: &ThreadPool,
        batch: &ForwardBatch<'_>,
        kv: &mut KvCache,
    ) -> Result<Vec<f32>, ModelError> {
        let c = &self.config;
        batch
            .validate(kv.num_slots(), kv.block_size())
            .map_err(ModelError::InvalidBatch)?;
        if kv.kv_width() != c.kv_width() {
            return Err(ModelError::InvalidBatch(format!(
                "cache rows hold {} values, the model needs {}",
                kv.kv_width(),
                c.kv_width()
            )));
        }
        let n = batch.token_ids.len();
        let h = c.hidden;
        let mut x = embed_tokens(&self.embeddings, batch.token_ids, c.vocab_size, h)?;
        let mut normed = vec![0f32; n * h];
        let shape = AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        for (li, layer) in self.layers.iter().enumerate() {
            rms_rows(&x, &layer.attn_norm, c.rms_eps, &mut normed);
            let mut acts = SharedActs::new(&normed, n, h);
            let [mut q, mut k, v] = acts.project_many(
                pool,
                [
                    (&layer.wq, layer.bq.as_deref()),
                    (&layer.wk, layer.bk.as_deref()),
                    (&layer.wv, layer.bv.as_deref()),
                ],
            )?;
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                ops::rms_norm_rows_in_place(&mut q, qn, c.rms_eps);
                ops::rms_norm_rows_in_place(&mut k, kn, c.rms_eps);
            }
            for (t, &pos) in batch.positions.iter().enumerate() {
                self.rope
                    .apply(&mut q[t * c.q_width()..(t + 1) * c.q_width()], pos as usize);
                self.rope.apply(
                    &mut k[t * c.kv_width()..(t + 1) * c.kv_width()],
                    pos as usize,
                );
            }
            let (k_cache, v_cache) = kv.layer_mut(li);
            store_kv(k_cache, v_cache, batch.slot_mapping, &k, &v, c.kv_width());
            let mut attn = vec![0f32; n * c.q_width()];
            paged_attention(pool, &q, k_cache, v_cache, &batch.attn, shape, &mut attn);
            let o = SharedActs::new(&attn, n, c.q_width()).project(pool, &layer.wo, None)?;
            ops::add_in_place(&mut x, &o);

            rms_rows(&x, &layer.ffn_norm, c.rms_eps, &mut normed);
            let mut acts = SharedActs::new(&normed, n, h);
            let [mut gate, up] =
                acts.project_many(pool, [(&layer.w_gate, None), (&layer.w_up, None)])?;
            ops::silu_mul_in_place(&mut gate, &up);
            let down = SharedActs::new(&gate, n, c.ffn).project(pool, &layer.w_down, None)?;
            ops::add_in_place(&mut x, &down);
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

/// Logits of the rows at `logits_indices`: final RMSNorm of just those rows, then the head.
pub(crate) fn output_logits(
    pool: &ThreadPool,
    x: &[f32],
    logits_indices: &[u32],
    final_norm: &[f32],
    eps: f32,
    head: &QMatrix,
) -> Result<Vec<f32>, ModelError> {
    let h = final_norm.len();
    let m = logits_indices.len();
    let mut last = vec![0f32; m * h];
    for (dst, &t) in last.chunks_exact_mut(h).zip(logits_indices) {
        let t = t as usize;
        ops::rms_norm(&x[t * h..(t + 1) * h], final_norm, eps, dst);
    }
    SharedActs::new(&last, m, h).project(pool, head, None)
}

/// Embedding rows of `token_ids`, `[n, hidden]`; an id outside the vocabulary is an error.
pub(crate) fn embed_tokens(
    embeddings: &QMatrix,
    token_ids: &[u32],
    vocab: usize,
    hidden: usize,
) -> Result<Vec<f32>, ModelError> {
    if let Some(&id) = token_ids.iter().find(|&&id| id as usize >= vocab) {
        return Err(ModelError::TokenOutOfRange { id, vocab });
    }
    let mut x = vec![0f32; token_ids.len() * hidden];
    for (row, &id) in x.chunks_exact_mut(hidden).zip(token_ids) {
        embeddings.dequantize_row(id as usize, row)?;
    }
    Ok(x)
}

pub(crate) fn rms_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let h = w.len();
    for (src, dst) in x.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
        ops::rms_norm(src, w, eps, dst);
    }
}
