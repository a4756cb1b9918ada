//! Full softmax attention of the hybrid families over the paged K/V cache.
//!
//! Like the Llama-family layer, plus: `q_proj` may yield `[query | gate]` per head (Qwen3-Next,
//! Qwen3.5), the attention output then being scaled by `sigmoid(gate)`; q/k RMSNorm per head;
//! RoPE on the first `rotary_dim` dims of each head only.

use oxllm_kernels::attention::{paged_attention, store_kv, AttnShape};
use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops::{self, Rope};
use oxllm_kernels::pool::ThreadPool;

use crate::llama::SharedActs;
use crate::{ForwardBatch, ModelConfig, ModelError};

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

impl GatedAttention {
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        pool: &ThreadPool,
        x: &[f32],
        c: &ModelConfig,
        rope: &Rope,
        batch: &ForwardBatch<'_>,
        k_cache: &mut [f32],
        v_cache: &mut [f32],
    ) -> Result<Vec<f32>, ModelError> {
        let n = batch.token_ids.len();
        let (qw, kvw, hd) = (c.q_width(), c.kv_width(), c.head_dim);
        let mut acts = SharedActs::new(x, n, c.hidden);
        let qg = acts.project(pool, &self.wq, None)?;
        let mut k = acts.project(pool, &self.wk, None)?;
        let v = acts.project(pool, &self.wv, None)?;
        let (mut q, gate) = if self.gated {
            let mut q = vec![0f32; n * qw];
            let mut gate = vec![0f32; n * qw];
            for (src, (dq, dg)) in qg
                .chunks_exact(2 * hd)
                .zip(q.chunks_exact_mut(hd).zip(gate.chunks_exact_mut(hd)))
            {
                dq.copy_from_slice(&src[..hd]);
                dg.copy_from_slice(&src[hd..]);
            }
            (q, Some(gate))
        } else {
            (qg, None)
        };
        ops::rms_norm_rows_in_place(&mut q, &self.q_norm, c.rms_eps);
        ops::rms_norm_rows_in_place(&mut k, &self.k_norm, c.rms_eps);
        for (t, &pos) in batch.positions.iter().enumerate() {
            rope.apply(&mut q[t * qw..(t + 1) * qw], pos as usize);
            rope.apply(&mut k[t * kvw..(t + 1) * kvw], pos as usize);
        }
        store_kv(k_cache, v_cache, batch.slot_mapping, &k, &v, kvw);
        let shape = AttnShape {
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        let mut attn = vec![0f32; n * qw];
        paged_attention(pool, &q, k_cache, v_cache, &batch.attn, shape, &mut attn);
        if let Some(gate) = gate {
            for (a, &g) in attn.iter_mut().zip(&gate) {
                *a *= 1.0 / (1.0 + (-g).exp());
            }
        }
        SharedActs::new(&attn, n, qw).project(pool, &self.wo, None)
    }
}
