//! The Llama-family step as a launch sequence: the dense models' one forward.

use std::sync::Arc;

use oxllm_core::DType;
use oxllm_kernels::attention::AttnShape;
use oxllm_runtime::{Backend, BufKind, BufRef, LayerWeight as L, WeightId};

use super::ops::{
    Add, Attention, Embed, GatherNorm, GraphModel, MatPick, Project, QkNormRope, Quantize, RmsNorm,
    SiluMul, StoreKv, VecPick,
};
use super::{KvBuffers, StepView};
use crate::{LlamaModel, ModelError};

/// Launches one forward step of `model` on `b` and returns the step-local logits buffer,
/// `[step.logits(), vocab]` (live to its last use; the host reading it marks it with
/// `Backend::keep`). Rows are the step's token rows; K/V go to
/// `kv` at the slot mapping.
pub fn record_dense_forward(
    b: &mut dyn Backend,
    model: &Arc<LlamaModel>,
    step: &StepView,
    kv: &KvBuffers,
) -> Result<BufRef, ModelError> {
    let c = &model.config;
    if kv.kv_width != c.kv_width() || kv.layers.len() != model.layers.len() {
        return Err(ModelError::InvalidBatch(format!(
            "cache of {} layers x {} values, the model needs {} x {}",
            kv.layers.len(),
            kv.kv_width,
            model.layers.len(),
            c.kv_width()
        )));
    }
    let n = step.tokens();
    let (h, qw, kw) = (c.hidden, c.q_width(), c.kv_width());
    let shape = AttnShape {
        n_heads: c.n_heads,
        n_kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        scale: 1.0 / (c.head_dim as f32).sqrt(),
    };
    let x = b.alloc("embed", BufKind::F32, n * h)?;
    b.launch(Box::new(Embed {
        model: model.clone(),
        tokens: step.token_ids,
        out: x,
    }))?;
    let normed = b.alloc("rms_norm", BufKind::F32, n * h)?;
    for (li, layer) in model.layers.iter().enumerate() {
        let attn_norm: VecPick = |m, l| Some(&m.layers[l].attn_norm);
        norm(b, model, li, (attn_norm, lw(li, L::AttnNorm)), x, normed)?;
        let qkv_mats: [(MatPick, Option<VecPick>); 3] = [
            (
                |m, l| &m.layers[l].wq,
                Some(|m, l| m.layers[l].bq.as_deref()),
            ),
            (
                |m, l| &m.layers[l].wk,
                Some(|m, l| m.layers[l].bk.as_deref()),
            ),
            (
                |m, l| &m.layers[l].wv,
                Some(|m, l| m.layers[l].bv.as_deref()),
            ),
        ];
        let dtypes = [&layer.wq, &layer.wk, &layer.wv].map(|w| w.activation_dtype());
        let qkv = [n * qw, n * kw, n * kw];
        let qkv_ids = Some([
            (lw(li, L::Wq), layer.bq.is_some().then(|| lw(li, L::Bq))),
            (lw(li, L::Wk), layer.bk.is_some().then(|| lw(li, L::Bk))),
            (lw(li, L::Wv), layer.bv.is_some().then(|| lw(li, L::Bv))),
        ]);
        let [q, k, v] = project(b, model, li, qkv_mats, qkv_ids, normed, n, h, dtypes, qkv)?;
        b.launch(Box::new(QkNormRope {
            model: model.clone(),
            layer: li,
            q,
            k,
            positions: step.positions,
        }))?;
        let attn = store_and_attend(b, step, kv, kv.layers[li], [q, k, v], shape)?;
        let wo: [(MatPick, Option<VecPick>); 1] = [(|m, l| &m.layers[l].wo, None)];
        let [o] = project(
            b,
            model,
            li,
            wo,
            Some([(lw(li, L::Wo), None)]),
            attn,
            n,
            qw,
            [layer.wo.activation_dtype()],
            [n * h],
        )?;
        b.launch(Box::new(Add { acc: x, x: o }))?;

        let ffn_norm: VecPick = |m, l| Some(&m.layers[l].ffn_norm);
        norm(b, model, li, (ffn_norm, lw(li, L::FfnNorm)), x, normed)?;
        let gate_up: [(MatPick, Option<VecPick>); 2] = [
            (|m, l| &m.layers[l].w_gate, None),
            (|m, l| &m.layers[l].w_up, None),
        ];
        let dtypes = [&layer.w_gate, &layer.w_up].map(|w| w.activation_dtype());
        let ids = Some([(lw(li, L::Gate), None), (lw(li, L::Up), None)]);
        let [gate, up] = project(
            b,
            model,
            li,
            gate_up,
            ids,
            normed,
            n,
            h,
            dtypes,
            [n * c.ffn; 2],
        )?;
        b.launch(Box::new(SiluMul { gate, up }))?;
        let down: [(MatPick, Option<VecPick>); 1] = [(|m, l| &m.layers[l].w_down, None)];
        let dt = [layer.w_down.activation_dtype()];
        let ids = Some([(lw(li, L::Down), None)]);
        let [d] = project(b, model, li, down, ids, gate, n, c.ffn, dt, [n * h])?;
        b.launch(Box::new(Add { acc: x, x: d }))?;
    }

    record_head(b, model, step, x)
}

/// The final norm of the rows at the logits indices and the output head: returns the logits
/// buffer `[step.logits(), vocab]`.
pub(super) fn record_head<M: GraphModel>(
    b: &mut dyn Backend,
    model: &Arc<M>,
    step: &StepView,
    x: BufRef,
) -> Result<BufRef, ModelError> {
    let (m, h) = (step.logits(), model.hidden());
    let last = b.alloc("final_norm", BufKind::F32, m * h)?;
    b.launch(Box::new(GatherNorm {
        model: model.clone(),
        x,
        logits_indices: step.logits_indices,
        out: last,
    }))?;
    let head: [(MatPick<M>, Option<VecPick<M>>); 1] = [(|m, _| m.output_head(), None)];
    let dt = [model.output_head().activation_dtype()];
    let vocab = model.vocab_size();
    let ids = Some([(WeightId::OutputHead, None)]);
    let [logits] = project(b, model, 0, head, ids, last, m, h, dt, [m * vocab])?;
    Ok(logits)
}

/// A weight of layer `layer`.
fn lw(layer: usize, w: L) -> WeightId {
    WeightId::Layer(layer as u32, w)
}

fn norm(
    b: &mut dyn Backend,
    model: &Arc<LlamaModel>,
    layer: usize,
    (weight, id): (VecPick, WeightId),
    x: BufRef,
    out: BufRef,
) -> Result<(), ModelError> {
    b.launch(Box::new(RmsNorm {
        model: model.clone(),
        layer,
        weight,
        weight_id: Some(id),
        x,
        out,
    }))?;
    Ok(())
}

/// Stores a layer's new K and V rows at the slot mapping and launches paged attention of `q`
/// over the cache; returns the fresh attention output (`[tokens, n_heads * head_dim]`).
pub(super) fn store_and_attend(
    b: &mut dyn Backend,
    step: &StepView,
    kv: &KvBuffers,
    (k_cache, v_cache): (BufRef, BufRef),
    [q, k, v]: [BufRef; 3],
    shape: AttnShape,
) -> Result<BufRef, ModelError> {
    b.launch(Box::new(StoreKv {
        slot_mapping: step.slot_mapping,
        k,
        v,
        k_cache,
        v_cache,
        kv_width: kv.kv_width,
    }))?;
    let attn = b.alloc(
        "attention",
        BufKind::F32,
        step.tokens() * shape.n_heads * shape.head_dim,
    )?;
    b.launch(Box::new(Attention {
        q,
        k_cache,
        v_cache,
        query_start_loc: step.query_start_loc,
        seq_lens: step.seq_lens,
        block_tables: step.block_tables,
        block_table_stride: step.block_table_stride,
        block_size: kv.block_size,
        shape,
        out: attn,
    }))?;
    Ok(attn)
}

/// Quantizes `input` (`rows x cols`) once per distinct activation format and launches the `N`
/// products in one op; returns the fresh output buffers of `out_lens` elements.
#[allow(clippy::too_many_arguments)]
pub(super) fn project<const N: usize, M: Send + Sync + 'static>(
    b: &mut dyn Backend,
    model: &Arc<M>,
    layer: usize,
    mats: [(MatPick<M>, Option<VecPick<M>>); N],
    ids: Option<[(WeightId, Option<WeightId>); N]>,
    input: BufRef,
    rows: usize,
    cols: usize,
    dtypes: [DType; N],
    out_lens: [usize; N],
) -> Result<[BufRef; N], ModelError> {
    let mut quantized: [Option<(DType, BufRef)>; N] = [None; N];
    let mut acts = [input; N];
    for k in 0..N {
        let dtype = dtypes[k];
        let existing = quantized.iter().flatten().find(|(d, _)| *d == dtype);
        acts[k] = match existing {
            Some(&(_, buf)) => buf,
            None => {
                let bytes = rows
                    * dtype.row_bytes(cols).map_err(|e| {
                        ModelError::InvalidBatch(format!("activation rows of {cols}: {e}"))
                    })?;
                let buf = b.alloc("quantize", BufKind::QActs, bytes)?;
                b.launch(Box::new(Quantize {
                    x: input,
                    rows,
                    cols,
                    dtype,
                    out: buf,
                }))?;
                quantized[k] = Some((dtype, buf));
                buf
            }
        };
    }
    let mut outs = [input; N];
    for k in 0..N {
        outs[k] = b.alloc("matmul", BufKind::F32, out_lens[k])?;
    }
    b.launch(Box::new(Project {
        model: model.clone(),
        layer,
        mats,
        ids,
        input,
        rows,
        cols,
        acts,
        outs,
    }))?;
    Ok(outs)
}
