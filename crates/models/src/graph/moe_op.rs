//! The mixture-of-experts MLP as one op: routing, the selected experts, the shared expert.
//!
//! Which expert a row goes to depends on the router logits, so it is decided inside the op
//! from device memory (never by the host), and the experts' products run on the rows gathered
//! for them. Every work array is a step-local buffer sized for all rows of the step, so replay
//! allocates nothing. The order of the arithmetic: experts in index order, each on its rows in row order, the shared expert last; the matmuls are batch
//! invariant, so a row's product does not depend on which other rows share its expert.

use std::sync::Arc;

use oxllm_kernels::matmul::{QMatrix, QuantizedActs};
use oxllm_kernels::ops;
use oxllm_runtime::{BufRef, ExecCtx, Memory, Op, RuntimeError};

use crate::hybrid::{route_into, DenseMlp, HybridModel, Mlp, MoeMlp};

pub(crate) struct MoeOp {
    pub model: Arc<HybridModel>,
    pub layer: usize,
    /// `[n, hidden]`, normalised.
    pub x: BufRef,
    /// `[n, n_experts]`, written by the op (the router runs inside it).
    pub router_logits: BufRef,
    pub work: MoeWork,
    /// `[n, hidden]`.
    pub out: BufRef,
}

/// Step-local work buffers of [`MoeOp`], sized by [`MoeWork::lens`].
#[derive(Clone, Copy)]
pub(crate) struct MoeWork {
    /// F32, `n_experts` softmax probabilities + `n * top_k` (expert, weight) pairs as floats.
    pub routes: BufRef,
    /// F32, `[n, hidden]` gathered rows, then the expert's down output.
    pub rows_x: BufRef,
    pub rows_y: BufRef,
    /// F32, `[n, ffn]` gate and up (ffn: the widest expert or shared expert).
    pub gate: BufRef,
    pub up: BufRef,
    /// F32, `[n]` shared-expert gate logits.
    pub shared_gate: BufRef,
    /// Quantized `[n, hidden]` and `[n, ffn]` rows.
    pub qx: BufRef,
    pub qh: BufRef,
}

impl MoeWork {
    /// Lengths (F32 elements; bytes for the quantized ones) of `routes`, `rows`, `ffn`,
    /// `shared_gate`, `qx`, `qh` for a step of `n` rows of `moe`.
    pub(crate) fn lens(moe: &MoeMlp, hidden: usize, n: usize) -> Result<[usize; 6], String> {
        let mut mlps: Vec<&DenseMlp> = moe.experts.iter().collect();
        let mut in_mats: Vec<&QMatrix> = vec![&moe.router];
        if let Some((shared, gate)) = &moe.shared {
            mlps.push(shared);
            in_mats.push(gate);
        }
        in_mats.extend(mlps.iter().flat_map(|d| [&d.gate, &d.up]));
        let row_bytes = |w: &QMatrix| {
            w.activation_dtype()
                .row_bytes(w.cols())
                .map_err(|e| format!("activation rows of {}: {e}", w.cols()))
        };
        let mut qx = 0;
        for w in &in_mats {
            qx = qx.max(row_bytes(w)?);
        }
        let mut qh = 0;
        for d in &mlps {
            qh = qh.max(row_bytes(&d.down)?);
        }
        let ffn = mlps.iter().map(|d| d.gate.rows()).max().unwrap_or(0);
        let k = moe.top_k.min(moe.experts.len());
        Ok([
            moe.experts.len() + 2 * n * k,
            n * hidden,
            n * ffn,
            n,
            n * qx,
            n * qh,
        ])
    }
}

fn moe_of(m: &HybridModel, layer: usize) -> Option<&MoeMlp> {
    match &m.layers.get(layer)?.mlp {
        Mlp::Moe(moe) => Some(moe),
        Mlp::Dense(_) => None,
    }
}

/// Quantize rows then multiply, the reference kernels on the reference backend.
fn project(
    cx: &ExecCtx<'_>,
    w: &QMatrix,
    x: &[f32],
    rows: usize,
    qa: &mut QuantizedActs,
    out: &mut [f32],
) -> Result<(), RuntimeError> {
    const NAME: &str = "moe";
    let cols = w.cols();
    let dt = w.activation_dtype();
    let x = &x[..rows * cols];
    let out = &mut out[..rows * w.rows()];
    (cx.kernels.quantize)(cx.pool, x, rows, cols, dt, qa).map_err(|e| RuntimeError::op(NAME, e))?;
    (cx.kernels.matmul)(cx.pool, &mut [(w, &*qa, out)]).map_err(|e| RuntimeError::op(NAME, e))
}

/// `DenseMlp::forward` on the first `rows` rows of `x`, into `y` (`[rows, hidden]`).
#[allow(clippy::too_many_arguments)]
fn mlp(
    cx: &ExecCtx<'_>,
    d: &DenseMlp,
    x: &[f32],
    rows: usize,
    qx: &mut QuantizedActs,
    qh: &mut QuantizedActs,
    gate: &mut [f32],
    up: &mut [f32],
    y: &mut [f32],
) -> Result<(), RuntimeError> {
    let ffn = d.gate.rows();
    project(cx, &d.gate, x, rows, qx, gate)?;
    project(cx, &d.up, x, rows, qx, up)?;
    ops::silu_mul_in_place(&mut gate[..rows * ffn], &up[..rows * ffn]);
    project(cx, &d.down, gate, rows, qh, y)
}

impl Op for MoeOp {
    fn name(&self) -> &'static str {
        "moe"
    }
    fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        for b in [
            self.x,
            self.router_logits,
            self.work.routes,
            self.work.rows_x,
            self.work.rows_y,
            self.work.gate,
            self.work.up,
            self.work.shared_gate,
            self.work.qx,
            self.work.qh,
            self.out,
        ] {
            visit(b);
        }
    }

    fn run(&self, mem: &Memory, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        let name = self.name();
        let moe = moe_of(&self.model, self.layer)
            .ok_or_else(|| RuntimeError::op(name, "not a mixture-of-experts layer"))?;
        let w = &self.work;
        let x = mem.f32(name, self.x)?;
        let mut logits = mem.f32_mut(name, self.router_logits)?;
        let mut out = mem.f32_mut(name, self.out)?;
        let mut routes = mem.f32_mut(name, w.routes)?;
        let mut rows_x = mem.f32_mut(name, w.rows_x)?;
        let mut rows_y = mem.f32_mut(name, w.rows_y)?;
        let mut gate = mem.f32_mut(name, w.gate)?;
        let mut up = mem.f32_mut(name, w.up)?;
        let mut qx = mem.qacts_mut(name, w.qx)?;
        let mut qh = mem.qacts_mut(name, w.qh)?;
        let ne = moe.experts.len();
        let k = moe.top_k.min(ne);
        let h = self.model.config.base.hidden;
        let n = x.len() / h.max(1);
        out.fill(0.0);
        project(cx, &moe.router, &x, n, &mut qx, &mut logits)?;

        // Route every row: its k (expert, weight) pairs, stored as floats next to the
        // softmax scratch (expert ids are small integers, exact in f32).
        let (probs, pairs) = routes.split_at_mut(ne);
        let mut sel = [(0usize, 0f32); 16];
        if k > sel.len() {
            return Err(RuntimeError::op(
                name,
                format!("top-{k} routing is not supported"),
            ));
        }
        for t in 0..n {
            route_into(
                &logits[t * ne..(t + 1) * ne],
                moe.norm_topk,
                probs,
                &mut sel[..k],
            );
            for (j, &(e, wt)) in sel[..k].iter().enumerate() {
                pairs[(t * k + j) * 2] = e as f32;
                pairs[(t * k + j) * 2 + 1] = wt;
            }
        }
        for (e, expert) in moe.experts.iter().enumerate() {
            // The rows routed to `e`, in row order, gathered.
            let mut cnt = 0;
            for t in 0..n {
                if (0..k).any(|j| pairs[(t * k + j) * 2] as usize == e) {
                    rows_x[cnt * h..(cnt + 1) * h].copy_from_slice(&x[t * h..(t + 1) * h]);
                    cnt += 1;
                }
            }
            if cnt == 0 {
                continue;
            }
            mlp(
                cx,
                expert,
                &rows_x,
                cnt,
                &mut qx,
                &mut qh,
                &mut gate,
                &mut up,
                &mut rows_y,
            )?;
            let mut r = 0;
            for t in 0..n {
                let Some(j) = (0..k).find(|&j| pairs[(t * k + j) * 2] as usize == e) else {
                    continue;
                };
                let wt = pairs[(t * k + j) * 2 + 1];
                for (o, &v) in out[t * h..(t + 1) * h]
                    .iter_mut()
                    .zip(&rows_y[r * h..(r + 1) * h])
                {
                    *o += v * wt;
                }
                r += 1;
            }
        }
        if let Some((shared, sgate)) = &moe.shared {
            mlp(
                cx,
                shared,
                &x,
                n,
                &mut qx,
                &mut qh,
                &mut gate,
                &mut up,
                &mut rows_y,
            )?;
            let mut g = mem.f32_mut(name, w.shared_gate)?;
            project(cx, sgate, &x, n, &mut qx, &mut g)?;
            for t in 0..n {
                let s = 1.0 / (1.0 + (-g[t]).exp());
                for (o, &v) in out[t * h..(t + 1) * h]
                    .iter_mut()
                    .zip(&rows_y[t * h..(t + 1) * h])
                {
                    *o += s * v;
                }
            }
        }
        Ok(())
    }
}
