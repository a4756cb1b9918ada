//! The hybrid step (Qwen3-Next, Qwen3.5, Qwen3-MoE) as a launch sequence: the hybrid models'
//! one forward, the same ops eager and captured, so both give the same bits.
//!
//! Full-attention layers use the paged K/V buffers (one pair per full-attention layer, in layer
//! order); linear layers keep their conv and recurrent states in [`StateBuffers`], at the
//! running slots of the step's state inputs. Restores run first, checkpoints are taken inside
//! the Gated DeltaNet op. Padding cannot touch state: padded rows belong to no sequence (the
//! Gated DeltaNet op reads only each sequence's rows), padded sequences have no rows, padded
//! checkpoint entries name no row, and K/V stores skip slot -1.

use std::sync::Arc;

use oxllm_kernels::attention::AttnShape;
use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{
    Backend, BufKind, BufRef, GdnDesc, LayerWeight as L, MoeDesc, OpDesc, WeightId,
};

use super::dense::{embed, project, record_head, rms_norm, store_and_attend};
use super::moe_work::moe_work_lens;
use super::{KvBuffers, StateBuffers, StepView};
use crate::hybrid::{GatedAttention, GatedDeltaNet, HybridModel, Mixer, Mlp};
use crate::ModelError;

/// Weight `w` of layer `li`.
fn lw(li: usize, w: L) -> WeightId {
    WeightId::Layer(li as u32, w)
}

fn bad(msg: String) -> ModelError {
    ModelError::InvalidBatch(msg)
}

/// Launches one forward step of `model` on `b` and returns the step-local logits buffer,
/// `[step.logits(), vocab]` (see `record_dense_forward`).
pub fn record_hybrid_forward(
    b: &mut dyn Backend,
    model: &Arc<HybridModel>,
    step: &StepView,
    kv: &KvBuffers,
    states: &StateBuffers,
) -> Result<BufRef, ModelError> {
    let c = &model.config.base;
    if kv.kv_width != c.kv_width() || kv.layers.len() != c.kv_layers {
        return Err(bad(format!(
            "cache of {} layers x {} values, the model needs {} x {}",
            kv.layers.len(),
            kv.kv_width,
            c.kv_layers,
            c.kv_width()
        )));
    }
    let n_linear = model
        .layers
        .iter()
        .filter(|l| matches!(l.mixer, Mixer::Linear(_)))
        .count();
    if states.layers.len() != n_linear {
        return Err(bad(format!(
            "state buffers for {} linear layers, the model has {n_linear}",
            states.layers.len()
        )));
    }
    let (n, h, seqs) = (step.tokens(), c.hidden, step.seqs());
    let state_slots = states.state_slots.prefix(seqs);
    if state_slots.len < seqs {
        return Err(bad(format!(
            "{seqs} sequences, the state inputs hold fewer"
        )));
    }
    if n_linear > 0 {
        b.launch(OpDesc::RestoreStates {
            state_slots,
            restore_slots: states.restore_slots.prefix(seqs),
            layers: states.layers.clone(),
            conv_len: states.conv_len,
            rec_len: states.recurrent_len,
        })?;
    }
    let x = embed(b, model.as_ref(), step)?;
    let normed = b.alloc("rms_norm", BufKind::F32, n * h)?;
    let (mut attn_idx, mut lin_idx) = (0, 0);
    for (li, layer) in model.layers.iter().enumerate() {
        rms_norm(b, model.as_ref(), lw(li, L::AttnNorm), x, normed)?;
        let mixed = match &layer.mixer {
            Mixer::Linear(g) => {
                let s = states.layers[lin_idx];
                lin_idx += 1;
                record_linear(b, model, li, g, step, states, s, normed)?
            }
            Mixer::Full(a) => {
                let cache = kv.layers[attn_idx];
                attn_idx += 1;
                record_full(b, model, li, a, step, kv, cache, normed)?
            }
        };
        b.launch(OpDesc::Add { acc: x, x: mixed })?;
        rms_norm(b, model.as_ref(), lw(li, L::FfnNorm), x, normed)?;
        let y = match &layer.mlp {
            Mlp::Dense(d) => {
                let ids = [(lw(li, L::Gate), None), (lw(li, L::Up), None)];
                let dt = [&d.gate, &d.up].map(QMatrix::activation_dtype);
                let ffn = d.gate.rows();
                let [g, u] = project(b, ids, normed, n, h, dt, [n * ffn; 2])?;
                b.launch(OpDesc::SiluMul { gate: g, up: u })?;
                let dt = [d.down.activation_dtype()];
                let [y] = project(b, [(lw(li, L::Down), None)], g, n, ffn, dt, [n * h])?;
                y
            }
            Mlp::Moe(moe) => {
                let [routes, rows, ffn, shared_gate, qx, qh] =
                    moe_work_lens(moe, h, n).map_err(bad)?;
                let f32s = |b: &mut dyn Backend, len| b.alloc("moe", BufKind::F32, len);
                let desc = MoeDesc {
                    layer: li as u32,
                    hidden: h,
                    n_experts: moe.experts.len(),
                    top_k: moe.top_k,
                    norm_topk: moe.norm_topk,
                    shared: moe.shared.is_some(),
                    x: normed,
                    router_logits: f32s(b, n * moe.experts.len())?,
                    routes: f32s(b, routes)?,
                    rows_x: f32s(b, rows)?,
                    rows_y: f32s(b, rows)?,
                    gate: f32s(b, ffn)?,
                    up: f32s(b, ffn)?,
                    shared_gate: f32s(b, shared_gate)?,
                    qx: b.alloc("moe", BufKind::QActs, qx)?,
                    qh: b.alloc("moe", BufKind::QActs, qh)?,
                    out: f32s(b, n * h)?,
                };
                let y = desc.out;
                b.launch(OpDesc::Moe(Box::new(desc)))?;
                y
            }
        };
        b.launch(OpDesc::Add { acc: x, x: y })?;
    }

    record_head(b, model.as_ref(), step, x)
}

/// A Gated DeltaNet layer on `normed`; returns its `[n, hidden]` output.
#[allow(clippy::too_many_arguments)]
fn record_linear(
    b: &mut dyn Backend,
    model: &Arc<HybridModel>,
    li: usize,
    g: &GatedDeltaNet,
    step: &StepView,
    states: &StateBuffers,
    (conv_state, rec_state): (BufRef, BufRef),
    normed: BufRef,
) -> Result<BufRef, ModelError> {
    let c = &g.cfg;
    let (n, h) = (step.tokens(), model.config.base.hidden);
    let (pw, vw) = (c.conv_dim() + c.value_width(), c.value_width());
    let ids = [
        (lw(li, L::LinearInProj), None),
        (lw(li, L::LinearInProjBa), None),
    ];
    let dt = [&g.in_proj, &g.in_proj_ba].map(QMatrix::activation_dtype);
    let lens = [n * pw, n * 2 * c.n_v_heads];
    let [proj, ba] = project(b, ids, normed, n, h, dt, lens)?;
    let scratch = b.alloc("gated_delta_net", BufKind::F32, c.scratch_len(n))?;
    let core = b.alloc("gated_delta_net", BufKind::F32, n * vw)?;
    b.launch(OpDesc::GatedDeltaNet(Box::new(GdnDesc {
        shape: *c,
        rule: model.delta_rule(),
        eps: g.eps,
        conv: lw(li, L::LinearConv),
        neg_a: lw(li, L::LinearNegA),
        dt_bias: lw(li, L::LinearDtBias),
        norm: lw(li, L::LinearNorm),
        proj,
        ba,
        query_start_loc: step.query_start_loc,
        seq_lens: step.seq_lens,
        state_slots: states.state_slots.prefix(step.seqs()),
        checkpoint_rows: states.checkpoint_rows,
        checkpoint_slots: states.checkpoint_slots,
        conv_state,
        rec_state,
        scratch,
        out: core,
    })))?;
    let dt = [g.out_proj.activation_dtype()];
    let out = [(lw(li, L::LinearOutProj), None)];
    let [o] = project(b, out, core, n, vw, dt, [n * h])?;
    Ok(o)
}

/// A gated full-attention layer on `normed`; returns its `[n, hidden]` output.
#[allow(clippy::too_many_arguments)]
fn record_full(
    b: &mut dyn Backend,
    model: &Arc<HybridModel>,
    li: usize,
    a: &GatedAttention,
    step: &StepView,
    kv: &KvBuffers,
    (k_cache, v_cache): (BufRef, BufRef),
    normed: BufRef,
) -> Result<BufRef, ModelError> {
    let c = &model.config.base;
    let (n, h, qw, kw) = (step.tokens(), c.hidden, c.q_width(), c.kv_width());
    let ids = [L::Wq, L::Wk, L::Wv].map(|w| (lw(li, w), None));
    let dt = [&a.wq, &a.wk, &a.wv].map(QMatrix::activation_dtype);
    let q_rows = if a.gated { 2 * qw } else { qw };
    let lens = [n * q_rows, n * kw, n * kw];
    let [qg, k, v] = project(b, ids, normed, n, h, dt, lens)?;
    let (q, gate) = if a.gated {
        let query = b.alloc("split_query_gate", BufKind::F32, n * qw)?;
        let gate = b.alloc("split_query_gate", BufKind::F32, n * qw)?;
        b.launch(OpDesc::SplitQueryGate {
            src: qg,
            query,
            gate,
            head_dim: c.head_dim,
        })?;
        (query, Some(gate))
    } else {
        (qg, None)
    };
    b.launch(OpDesc::QkNormRope {
        q,
        k,
        positions: step.positions,
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        norms: Some((lw(li, L::QNorm), lw(li, L::KNorm))),
        eps: c.rms_eps,
        rope: model.rope.clone(),
    })?;
    let shape = AttnShape {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
    };
    let attn = store_and_attend(b, step, kv, (k_cache, v_cache), [q, k, v], shape)?;
    if let Some(gate) = gate {
        b.launch(OpDesc::SigmoidMul { x: attn, gate })?;
    }
    let dt = [a.wo.activation_dtype()];
    let [o] = project(b, [(lw(li, L::Wo), None)], attn, n, qw, dt, [n * h])?;
    Ok(o)
}
