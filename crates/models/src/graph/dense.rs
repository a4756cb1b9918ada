//! The Llama-family step as a launch sequence: the dense models' one forward, every op an
//! [`OpDesc`] over buffers and weight ids, which the backend runs with its own kernels.

use std::sync::Arc;

use oxllm_core::DType;
use oxllm_kernels::attention::AttnShape;
use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{Backend, BufKind, BufRef, LayerWeight as L, MatmulJob, OpDesc, WeightId};

use super::{KvBuffers, StepView};
use crate::hybrid::HybridModel;
use crate::{LlamaModel, ModelError};

/// What the shared recording steps read from a model (dense and hybrid alike).
pub(super) trait GraphModel {
    fn hidden(&self) -> usize;
    fn vocab_size(&self) -> usize;
    fn rms_eps(&self) -> f32;
    fn output_head(&self) -> &QMatrix;
}

impl GraphModel for LlamaModel {
    fn hidden(&self) -> usize {
        self.config.hidden
    }
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn rms_eps(&self) -> f32 {
        self.config.rms_eps
    }
    fn output_head(&self) -> &QMatrix {
        self.lm_head()
    }
}

impl GraphModel for HybridModel {
    fn hidden(&self) -> usize {
        self.config.base.hidden
    }
    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }
    fn rms_eps(&self) -> f32 {
        self.config.base.rms_eps
    }
    fn output_head(&self) -> &QMatrix {
        self.lm_head()
    }
}

/// Launches one forward step of `model` on `b` and returns the step-local logits buffer,
/// `[step.logits(), vocab]` (live to its last use; the host reading it marks it with
/// `Backend::keep`). Rows are the step's token rows; K/V go to `kv` at the slot mapping. The
/// backend resolves the weight ids in the weights it was handed (`Backend::load_weights`).
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
    let x = embed(b, model.as_ref(), step)?;
    let normed = b.alloc("rms_norm", BufKind::F32, n * h)?;
    for (li, layer) in model.layers.iter().enumerate() {
        let lw = |w| WeightId::Layer(li as u32, w);
        rms_norm(b, model.as_ref(), lw(L::AttnNorm), x, normed)?;
        let qkv_ids = [
            (lw(L::Wq), layer.bq.is_some().then(|| lw(L::Bq))),
            (lw(L::Wk), layer.bk.is_some().then(|| lw(L::Bk))),
            (lw(L::Wv), layer.bv.is_some().then(|| lw(L::Bv))),
        ];
        let dtypes = [&layer.wq, &layer.wk, &layer.wv].map(QMatrix::activation_dtype);
        let lens = [n * qw, n * kw, n * kw];
        let [q, k, v] = project(b, qkv_ids, normed, n, h, dtypes, lens)?;
        let norms = (layer.q_norm.is_some() && layer.k_norm.is_some())
            .then(|| (lw(L::QNorm), lw(L::KNorm)));
        b.launch(OpDesc::QkNormRope {
            q,
            k,
            positions: step.positions,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            norms,
            eps: c.rms_eps,
            rope: model.rope.clone(),
        })?;
        let attn = store_and_attend(b, step, kv, kv.layers[li], [q, k, v], shape)?;
        let dt = [layer.wo.activation_dtype()];
        let [o] = project(b, [(lw(L::Wo), None)], attn, n, qw, dt, [n * h])?;
        b.launch(OpDesc::Add { acc: x, x: o })?;

        rms_norm(b, model.as_ref(), lw(L::FfnNorm), x, normed)?;
        let ids = [(lw(L::Gate), None), (lw(L::Up), None)];
        let dtypes = [&layer.w_gate, &layer.w_up].map(QMatrix::activation_dtype);
        let [gate, up] = project(b, ids, normed, n, h, dtypes, [n * c.ffn; 2])?;
        b.launch(OpDesc::SiluMul { gate, up })?;
        let dt = [layer.w_down.activation_dtype()];
        let [d] = project(b, [(lw(L::Down), None)], gate, n, c.ffn, dt, [n * h])?;
        b.launch(OpDesc::Add { acc: x, x: d })?;
    }

    record_head(b, model.as_ref(), step, x)
}

/// The step's token embeddings: a fresh `[tokens, hidden]` buffer.
pub(super) fn embed(
    b: &mut dyn Backend,
    model: &impl GraphModel,
    step: &StepView,
) -> Result<BufRef, ModelError> {
    let h = model.hidden();
    let x = b.alloc("embed", BufKind::F32, step.tokens() * h)?;
    b.launch(OpDesc::Embed {
        tokens: step.token_ids,
        out: x,
        hidden: h,
    })?;
    Ok(x)
}

/// RMSNorm of every row of `x` with the norm weight `weight` into `out`.
pub(super) fn rms_norm(
    b: &mut dyn Backend,
    model: &impl GraphModel,
    weight: WeightId,
    x: BufRef,
    out: BufRef,
) -> Result<(), ModelError> {
    b.launch(OpDesc::RmsNorm {
        weight,
        x,
        out,
        cols: model.hidden(),
        eps: model.rms_eps(),
    })?;
    Ok(())
}

/// The final norm of the rows at the logits indices and the output head: returns the logits
/// buffer `[step.logits(), vocab]`.
pub(super) fn record_head(
    b: &mut dyn Backend,
    model: &impl GraphModel,
    step: &StepView,
    x: BufRef,
) -> Result<BufRef, ModelError> {
    let (m, h) = (step.logits(), model.hidden());
    let last = b.alloc("final_norm", BufKind::F32, m * h)?;
    b.launch(OpDesc::GatherNorm {
        x,
        indices: step.logits_indices,
        weight: WeightId::FinalNorm,
        out: last,
        cols: h,
        eps: model.rms_eps(),
    })?;
    let dt = [model.output_head().activation_dtype()];
    let vocab = model.vocab_size();
    let [logits] = project(
        b,
        [(WeightId::OutputHead, None)],
        last,
        m,
        h,
        dt,
        [m * vocab],
    )?;
    Ok(logits)
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
    b.launch(OpDesc::StoreKv {
        slot_mapping: step.slot_mapping,
        k,
        v,
        k_cache,
        v_cache,
        kv_width: kv.kv_width,
    })?;
    let attn = b.alloc(
        "attention",
        BufKind::F32,
        step.tokens() * shape.n_heads * shape.head_dim,
    )?;
    b.launch(OpDesc::Attention {
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
    })?;
    Ok(attn)
}

/// Quantizes `input` (`rows x cols`) once per distinct activation format and launches the `N`
/// products `(weight, bias)` of `ids` in one op; returns the fresh output buffers of
/// `out_lens` elements.
pub(super) fn project<const N: usize>(
    b: &mut dyn Backend,
    ids: [(WeightId, Option<WeightId>); N],
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
                b.launch(OpDesc::Quantize {
                    x: input,
                    rows,
                    cols,
                    dtype,
                    out: buf,
                })?;
                quantized[k] = Some((dtype, buf));
                buf
            }
        };
    }
    let mut outs = [input; N];
    for k in 0..N {
        outs[k] = b.alloc("matmul", BufKind::F32, out_lens[k])?;
    }
    let jobs = (0..N)
        .map(|k| MatmulJob {
            weight: ids[k].0,
            bias: ids[k].1,
            input,
            acts: acts[k],
            out: outs[k],
        })
        .collect();
    b.launch(OpDesc::Matmul { rows, cols, jobs })?;
    Ok(outs)
}
