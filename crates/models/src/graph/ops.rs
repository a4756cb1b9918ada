//! The ops of the dense forward. Each reads its operands from buffers and the weights from the
//! shared model, so a recorded op stays valid for every replay.

use std::sync::Arc;

use oxllm_core::DType;
use oxllm_kernels::attention::{store_kv, AttnMetadata, AttnShape};
use oxllm_kernels::matmul::{add_bias, QMatrix};
use oxllm_kernels::ops;
use oxllm_kernels::pool::{for_parts_mut, SharedMut};
use oxllm_runtime::{
    BufKind, BufRef, ExecCtx, LayerWeight, MatmulJob, Memory, Op, OpDesc, RopeSpec, RuntimeError,
    WeightId,
};

use crate::hybrid::HybridModel;
use crate::LlamaModel;

/// A weight matrix of layer `l`, or of the whole model when the layer is ignored.
pub(crate) type MatPick<M = LlamaModel> = for<'m> fn(&'m M, usize) -> &'m QMatrix;
/// A weight vector (norm, bias) of layer `l`, when the model has it.
pub(crate) type VecPick<M = LlamaModel> = for<'m> fn(&'m M, usize) -> Option<&'m [f32]>;

/// What the shared ops read from a model beyond per-layer weights (dense and hybrid alike).
pub(crate) trait GraphModel: Send + Sync + 'static {
    fn embeddings(&self) -> &QMatrix;
    fn final_norm(&self) -> &[f32];
    fn rms_eps(&self) -> f32;
    fn vocab_size(&self) -> usize;
    fn hidden(&self) -> usize;
    fn output_head(&self) -> &QMatrix;
}

impl GraphModel for LlamaModel {
    fn embeddings(&self) -> &QMatrix {
        &self.embeddings
    }
    fn final_norm(&self) -> &[f32] {
        &self.final_norm
    }
    fn rms_eps(&self) -> f32 {
        self.config.rms_eps
    }
    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }
    fn hidden(&self) -> usize {
        self.config.hidden
    }
    fn output_head(&self) -> &QMatrix {
        self.lm_head()
    }
}

impl GraphModel for HybridModel {
    fn embeddings(&self) -> &QMatrix {
        &self.embeddings
    }
    fn final_norm(&self) -> &[f32] {
        &self.final_norm
    }
    fn rms_eps(&self) -> f32 {
        self.config.base.rms_eps
    }
    fn vocab_size(&self) -> usize {
        self.config.base.vocab_size
    }
    fn hidden(&self) -> usize {
        self.config.base.hidden
    }
    fn output_head(&self) -> &QMatrix {
        self.lm_head()
    }
}

pub(crate) struct Embed<M = LlamaModel> {
    pub model: Arc<M>,
    pub tokens: BufRef,
    pub out: BufRef,
}

impl<M: GraphModel> Op for Embed<M> {
    fn name(&self) -> &'static str {
        "embed"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::Embed {
            tokens: self.tokens,
            out: self.out,
            hidden: self.model.hidden(),
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.tokens, self.out] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let tokens = mem.u32(self.name(), self.tokens)?;
        let mut out = mem.f32_mut(self.name(), self.out)?;
        let (vocab, h) = (self.model.vocab_size(), self.model.hidden());
        for (row, &id) in out.chunks_exact_mut(h).zip(tokens.iter()) {
            if id as usize >= vocab {
                return Err(RuntimeError::op(
                    self.name(),
                    format!("token id {id} is outside the vocabulary of {vocab}"),
                ));
            }
            self.model
                .embeddings()
                .dequantize_row(id as usize, row)
                .map_err(|e| RuntimeError::op(self.name(), e))?;
        }
        Ok(())
    }
}

/// RMSNorm of every row of `x` with a layer's norm weight.
pub(crate) struct RmsNorm<M = LlamaModel> {
    pub model: Arc<M>,
    pub layer: usize,
    pub weight: VecPick<M>,
    /// The weight's id for device backends (`None`: the op runs on the host only).
    pub weight_id: Option<WeightId>,
    pub x: BufRef,
    pub out: BufRef,
}

impl<M: GraphModel> Op for RmsNorm<M> {
    fn name(&self) -> &'static str {
        "rms_norm"
    }
    fn desc(&self) -> Option<OpDesc> {
        let cols = (self.weight)(&self.model, self.layer)?.len();
        Some(OpDesc::RmsNorm {
            weight: self.weight_id?,
            x: self.x,
            out: self.out,
            cols,
            eps: self.model.rms_eps(),
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.x, self.out] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let w = (self.weight)(&self.model, self.layer)
            .ok_or_else(|| RuntimeError::op(self.name(), "missing norm weight"))?;
        let x = mem.f32(self.name(), self.x)?;
        let mut out = mem.f32_mut(self.name(), self.out)?;
        crate::llama::rms_rows(&x, w, self.model.rms_eps(), &mut out);
        Ok(())
    }
}

/// Quantizes `rows` rows of `x` into the activation format `dtype`.
pub(crate) struct Quantize {
    pub x: BufRef,
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    pub out: BufRef,
}

impl Op for Quantize {
    fn name(&self) -> &'static str {
        "quantize"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::Quantize {
            x: self.x,
            out: self.out,
            rows: self.rows,
            cols: self.cols,
            dtype: self.dtype,
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.x, self.out] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let x = mem.f32(self.name(), self.x)?;
        let mut out = mem.qacts_mut(self.name(), self.out)?;
        (cx.kernels.quantize)(cx.pool, &x, self.rows, self.cols, self.dtype, &mut out)
            .map_err(|e| RuntimeError::op(self.name(), e))
    }
}

/// Up to `N` products of quantized inputs with a layer's matrices in one pool dispatch, each
/// with an optional bias: `outs[k] = acts[k] · W_kᵀ (+ b_k)`. Generic over the model type so
/// the dense and hybrid forwards share it.
pub(crate) struct Project<const N: usize, M = LlamaModel> {
    pub model: Arc<M>,
    pub layer: usize,
    pub mats: [(MatPick<M>, Option<VecPick<M>>); N],
    /// The matrices' (and biases') ids for device backends (`None`: host only).
    pub ids: Option<[(WeightId, Option<WeightId>); N]>,
    /// The f32 rows (`rows x cols`) the activations were quantized from.
    pub input: BufRef,
    pub rows: usize,
    pub cols: usize,
    pub acts: [BufRef; N],
    pub outs: [BufRef; N],
}

impl<const N: usize, M: Send + Sync + 'static> Op for Project<N, M> {
    fn name(&self) -> &'static str {
        "matmul"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        visit(self.input);
        self.acts.iter().chain(&self.outs).for_each(|&b| visit(b));
    }
    fn desc(&self) -> Option<OpDesc> {
        let ids = self.ids?;
        let jobs = (0..N)
            .map(|k| MatmulJob {
                weight: ids[k].0,
                bias: ids[k].1,
                input: self.input,
                acts: self.acts[k],
                out: self.outs[k],
            })
            .collect();
        Some(OpDesc::Matmul {
            rows: self.rows,
            cols: self.cols,
            jobs,
        })
    }
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let ws: [&QMatrix; N] = std::array::from_fn(|k| (self.mats[k].0)(&self.model, self.layer));
        let acts = try_array::<_, _, N>(|k| mem.qacts(name, self.acts[k]))?;
        let mut outs = try_array::<_, _, N>(|k| mem.f32_mut(name, self.outs[k]))?;
        let mut k = 0;
        let mut jobs = outs.each_mut().map(|o| {
            let job = (ws[k], &*acts[k], &mut **o);
            k += 1;
            job
        });
        (cx.kernels.matmul)(cx.pool, &mut jobs).map_err(|e| RuntimeError::op(name, e))?;
        for (k, out) in outs.iter_mut().enumerate() {
            if let Some(bias) = self.mats[k].1.and_then(|b| b(&self.model, self.layer)) {
                add_bias(out, bias);
            }
        }
        Ok(())
    }
}

/// `[f(0), .., f(N-1)]`, or the first error; allocates nothing.
fn try_array<T, E, const N: usize>(mut f: impl FnMut(usize) -> Result<T, E>) -> Result<[T; N], E> {
    let mut filled: [Option<T>; N] = std::array::from_fn(|_| None);
    for (k, slot) in filled.iter_mut().enumerate() {
        *slot = Some(f(k)?);
    }
    Ok(filled.map(|v| v.unwrap_or_else(|| unreachable!("every entry was filled above"))))
}

/// Per-head q/k RMSNorm (Qwen3) and rotary embedding of each row at its position.
pub(crate) struct QkNormRope {
    pub model: Arc<LlamaModel>,
    pub layer: usize,
    pub q: BufRef,
    pub k: BufRef,
    pub positions: BufRef,
}

impl Op for QkNormRope {
    fn name(&self) -> &'static str {
        "qk_norm_rope"
    }
    fn desc(&self) -> Option<OpDesc> {
        let (m, l) = (&self.model, self.layer as u32);
        let layer = m.layers.get(self.layer)?;
        let norms = (layer.q_norm.is_some() && layer.k_norm.is_some()).then_some((
            WeightId::Layer(l, LayerWeight::QNorm),
            WeightId::Layer(l, LayerWeight::KNorm),
        ));
        Some(OpDesc::QkNormRope {
            q: self.q,
            k: self.k,
            positions: self.positions,
            n_heads: m.config.n_heads,
            n_kv_heads: m.config.n_kv_heads,
            norms,
            eps: m.config.rms_eps,
            rope: RopeSpec {
                split_half: m.rope.is_split_half(),
                head_dim: m.rope.head_dim(),
                rotary_dim: m.rope.rotary_dim(),
                inv_freq: m.rope.inv_freq().to_vec(),
            },
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.q, self.k, self.positions] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let m = &self.model;
        let c = &m.config;
        let positions = mem.u32(self.name(), self.positions)?;
        let mut q = mem.f32_mut(self.name(), self.q)?;
        let mut k = mem.f32_mut(self.name(), self.k)?;
        let layer = &m.layers[self.layer];
        let norms = layer.q_norm.as_deref().zip(layer.k_norm.as_deref());
        let (qw, kw) = (c.q_width(), c.kv_width());
        let rows = positions.len();
        if q.len() < rows * qw || k.len() < rows * kw {
            return Err(RuntimeError::op(
                self.name(),
                "fewer q/k rows than positions",
            ));
        }
        let k_rows = SharedMut::new(&mut k);
        let positions: &[u32] = &positions;
        // Row by row (each row's bits do not depend on the split), rows shared between threads
        // when a batch has several per thread.
        for_parts_mut(cx.pool, &mut q[..rows * qw], qw, 4, |off, q_part| {
            let first = off / qw.max(1);
            for (i, q_row) in q_part.chunks_exact_mut(qw).enumerate() {
                let t = first + i;
                // SAFETY: row t of k belongs to the part holding row t of q, and t < rows.
                let k_row = unsafe { k_rows.slice(t * kw, kw) };
                if let Some((qn, kn)) = norms {
                    ops::rms_norm_rows_in_place(q_row, qn, c.rms_eps);
                    ops::rms_norm_rows_in_place(k_row, kn, c.rms_eps);
                }
                m.rope.apply_all(&mut [q_row, k_row], positions[t] as usize);
            }
        });
        Ok(())
    }
}

/// Writes each row's K and V into its cache slot; slot -1 (padding) is skipped.
pub(crate) struct StoreKv {
    pub slot_mapping: BufRef,
    pub k: BufRef,
    pub v: BufRef,
    pub k_cache: BufRef,
    pub v_cache: BufRef,
    pub kv_width: usize,
}

impl Op for StoreKv {
    fn name(&self) -> &'static str {
        "store_kv"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::StoreKv {
            slot_mapping: self.slot_mapping,
            k: self.k,
            v: self.v,
            k_cache: self.k_cache,
            v_cache: self.v_cache,
            kv_width: self.kv_width,
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [
            self.slot_mapping,
            self.k,
            self.v,
            self.k_cache,
            self.v_cache,
        ] {
            visit(b);
        }
    }
    fn warm(&self, _mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        // A warm step runs on whatever the inputs hold: it must not touch the K/V cache.
        Ok(())
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let slots = mem.i32(self.name(), self.slot_mapping)?;
        let (k, v) = (mem.f32(self.name(), self.k)?, mem.f32(self.name(), self.v)?);
        let kw = self.kv_width;
        match self.k_cache.kind() {
            BufKind::F16 => {
                let mut kc = mem.f16_mut(self.name(), self.k_cache)?;
                let mut vc = mem.f16_mut(self.name(), self.v_cache)?;
                check_slots(self.name(), &slots, kc.len() / kw.max(1))?;
                store_kv(&mut kc, &mut vc, &slots, &k, &v, kw);
            }
            _ => {
                let mut kc = mem.f32_mut(self.name(), self.k_cache)?;
                let mut vc = mem.f32_mut(self.name(), self.v_cache)?;
                check_slots(self.name(), &slots, kc.len() / kw.max(1))?;
                store_kv(&mut kc, &mut vc, &slots, &k, &v, kw);
            }
        }
        Ok(())
    }
}

/// Every slot is -1 (padding) or inside a cache of `cap` slots.
fn check_slots(op: &'static str, slots: &[i32], cap: usize) -> Result<(), RuntimeError> {
    match slots.iter().find(|&&s| s < -1 || s as i64 >= cap as i64) {
        Some(&bad) => Err(RuntimeError::op(
            op,
            format!("slot {bad} outside the cache"),
        )),
        None => Ok(()),
    }
}

/// Causal paged attention of every row over its sequence's cached K/V. Rows past the last
/// sequence (padding) are zeroed.
pub(crate) struct Attention {
    pub q: BufRef,
    pub k_cache: BufRef,
    pub v_cache: BufRef,
    pub query_start_loc: BufRef,
    pub seq_lens: BufRef,
    pub block_tables: BufRef,
    pub block_table_stride: usize,
    pub block_size: usize,
    pub shape: AttnShape,
    pub out: BufRef,
}

impl Op for Attention {
    fn name(&self) -> &'static str {
        "attention"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::Attention {
            q: self.q,
            k_cache: self.k_cache,
            v_cache: self.v_cache,
            query_start_loc: self.query_start_loc,
            seq_lens: self.seq_lens,
            block_tables: self.block_tables,
            block_table_stride: self.block_table_stride,
            block_size: self.block_size,
            shape: self.shape,
            out: self.out,
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [
            self.q,
            self.k_cache,
            self.v_cache,
            self.query_start_loc,
            self.seq_lens,
            self.block_tables,
            self.out,
        ] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let q = mem.f32(name, self.q)?;
        let qsl = mem.u32(name, self.query_start_loc)?;
        let seq_lens = mem.u32(name, self.seq_lens)?;
        let tables = mem.u32(name, self.block_tables)?;
        let mut out = mem.f32_mut(name, self.out)?;
        let meta = AttnMetadata {
            query_start_loc: &qsl,
            seq_lens: &seq_lens,
            block_tables: &tables,
            block_table_stride: self.block_table_stride,
            block_size: self.block_size,
        };
        let width = self.shape.n_heads * self.shape.head_dim;
        let real_rows = qsl
            .last()
            .map_or(0, |&r| r as usize)
            .min(out.len() / width.max(1));
        out[real_rows * width..].fill(0.0);
        match self.k_cache.kind() {
            BufKind::F16 => {
                let (kc, vc) = (mem.f16(name, self.k_cache)?, mem.f16(name, self.v_cache)?);
                (cx.kernels.attention_f16)(cx.pool, &q, &kc, &vc, &meta, self.shape, &mut out);
            }
            _ => {
                let (kc, vc) = (mem.f32(name, self.k_cache)?, mem.f32(name, self.v_cache)?);
                (cx.kernels.attention_f32)(cx.pool, &q, &kc, &vc, &meta, self.shape, &mut out);
            }
        }
        Ok(())
    }
}

/// `acc += x`.
pub(crate) struct Add {
    pub acc: BufRef,
    pub x: BufRef,
}

impl Op for Add {
    fn name(&self) -> &'static str {
        "add"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::Add {
            acc: self.acc,
            x: self.x,
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.acc, self.x] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let x = mem.f32(self.name(), self.x)?;
        ops::add_in_place(&mut mem.f32_mut(self.name(), self.acc)?, &x);
        Ok(())
    }
}

/// `gate = silu(gate) * up`.
pub(crate) struct SiluMul {
    pub gate: BufRef,
    pub up: BufRef,
}

impl Op for SiluMul {
    fn name(&self) -> &'static str {
        "silu_mul"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::SiluMul {
            gate: self.gate,
            up: self.up,
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.gate, self.up] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let up = mem.f32(self.name(), self.up)?;
        let mut gate = mem.f32_mut(self.name(), self.gate)?;
        if gate.len() != up.len() {
            return Err(RuntimeError::op(
                self.name(),
                "gate and up differ in length",
            ));
        }
        // Element by element, so any split gives the same bits; a batch's rows are worth
        // sharing between threads, one token's are not.
        let up: &[f32] = &up;
        for_parts_mut(cx.pool, &mut gate, 64, 64, |off, part| {
            ops::silu_mul_in_place(part, &up[off..off + part.len()])
        });
        Ok(())
    }
}

/// Final RMSNorm of the rows at the logits indices, gathered into `out` (`[m, hidden]`).
pub(crate) struct GatherNorm<M = LlamaModel> {
    pub model: Arc<M>,
    pub x: BufRef,
    pub logits_indices: BufRef,
    pub out: BufRef,
}

impl<M: GraphModel> Op for GatherNorm<M> {
    fn name(&self) -> &'static str {
        "final_norm"
    }
    fn desc(&self) -> Option<OpDesc> {
        Some(OpDesc::GatherNorm {
            x: self.x,
            indices: self.logits_indices,
            weight: WeightId::FinalNorm,
            out: self.out,
            cols: self.model.final_norm().len(),
            eps: self.model.rms_eps(),
        })
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [self.x, self.logits_indices, self.out] {
            visit(b);
        }
    }
    fn run(&self, mem: &Memory, _cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let x = mem.f32(self.name(), self.x)?;
        let idx = mem.u32(self.name(), self.logits_indices)?;
        let mut out = mem.f32_mut(self.name(), self.out)?;
        let h = self.model.final_norm().len();
        let rows = x.len() / h.max(1);
        for (dst, &t) in out.chunks_exact_mut(h).zip(idx.iter()) {
            let t = t as usize;
            if t >= rows {
                return Err(RuntimeError::op(
                    self.name(),
                    format!("logits index {t} outside {rows} rows"),
                ));
            }
            ops::rms_norm(
                &x[t * h..(t + 1) * h],
                self.model.final_norm(),
                self.model.rms_eps(),
                dst,
            );
        }
        Ok(())
    }
}
