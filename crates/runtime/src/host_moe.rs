//! The host backends' mixture-of-experts op ([`MoeDesc`]): the router's product, routing
//! (`kernels::ops::route_into`), each expert's SiLU-gated MLP on the rows routed to it, and the
//! shared expert, with the quantize and matmul kernels of the backend's table.
//!
//! Guarantees: which expert a row goes to is decided here from the step's buffers, never by
//! the host; the order of the arithmetic is fixed (experts in index order, each on its rows in
//! row order, the shared expert last), and the matmuls are batch invariant, so a row's output
//! does not depend on which rows share its step; nothing allocates (every work array is a
//! step-local buffer sized for all rows).

use oxllm_kernels::matmul::{QMatrix, QuantizedActs};
use oxllm_kernels::ops;

use crate::host_exec::HostExec;
use crate::{LayerWeight as L, Memory, MoeDesc, RuntimeError, WeightId};

const NAME: &str = "moe";

/// The most experts a token may be routed to.
const MAX_TOP_K: usize = 16;

/// An MLP's three projections.
struct Mlp<'a> {
    gate: &'a QMatrix,
    up: &'a QMatrix,
    down: &'a QMatrix,
}

/// Work buffers an MLP runs in.
struct MlpWork<'a> {
    qx: &'a mut QuantizedActs,
    qh: &'a mut QuantizedActs,
    gate: &'a mut [f32],
    up: &'a mut [f32],
}

impl HostExec<'_> {
    /// Quantizes the first `rows` rows of `x` for `w`, then `out = acts · wᵀ`.
    fn project(
        &self,
        w: &QMatrix,
        x: &[f32],
        rows: usize,
        qa: &mut QuantizedActs,
        out: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let cols = w.cols();
        let (x, out) = (x.get(..rows * cols), out.get_mut(..rows * w.rows()));
        let (Some(x), Some(out)) = (x, out) else {
            return Err(RuntimeError::op(NAME, "rows outside the op's buffers"));
        };
        let k = self.kernels;
        (k.quantize)(self.pool, x, rows, cols, w.activation_dtype(), qa)
            .map_err(|e| RuntimeError::op(NAME, e))?;
        (k.matmul)(self.pool, &mut [(w, &*qa, out)]).map_err(|e| RuntimeError::op(NAME, e))
    }

    /// `down(silu(gate(x)) * up(x))` on the first `rows` rows of `x`, into `y`.
    fn mlp(
        &self,
        m: &Mlp<'_>,
        x: &[f32],
        rows: usize,
        w: &mut MlpWork<'_>,
        y: &mut [f32],
    ) -> Result<(), RuntimeError> {
        let ffn = m.gate.rows();
        self.project(m.gate, x, rows, w.qx, w.gate)?;
        self.project(m.up, x, rows, w.qx, w.up)?;
        ops::silu_mul_in_place(&mut w.gate[..rows * ffn], &w.up[..rows * ffn]);
        self.project(m.down, w.gate, rows, w.qh, y)
    }

    fn expert(&self, d: &MoeDesc, e: usize) -> Result<Mlp<'_>, RuntimeError> {
        Ok(Mlp {
            gate: self.matrix(NAME, d.expert(e, L::Gate))?,
            up: self.matrix(NAME, d.expert(e, L::Up))?,
            down: self.matrix(NAME, d.expert(e, L::Down))?,
        })
    }

    pub(crate) fn moe(&self, d: &MoeDesc, mem: &Memory) -> Result<(), RuntimeError> {
        let layer = |role| WeightId::Layer(d.layer, role);
        let router = self.matrix(NAME, layer(L::MoeRouter))?;
        let x = mem.f32(NAME, d.x)?;
        let mut logits = mem.f32_mut(NAME, d.router_logits)?;
        let mut out = mem.f32_mut(NAME, d.out)?;
        let mut routes = mem.f32_mut(NAME, d.routes)?;
        let mut rows_x = mem.f32_mut(NAME, d.rows_x)?;
        let mut rows_y = mem.f32_mut(NAME, d.rows_y)?;
        let mut gate = mem.f32_mut(NAME, d.gate)?;
        let mut up = mem.f32_mut(NAME, d.up)?;
        let mut qx = mem.qacts_mut(NAME, d.qx)?;
        let mut qh = mem.qacts_mut(NAME, d.qh)?;
        let mut work = MlpWork {
            qx: &mut qx,
            qh: &mut qh,
            gate: &mut gate,
            up: &mut up,
        };
        let ne = d.n_experts;
        let k = d.top_k.min(ne);
        let h = d.hidden.max(1);
        let n = x.len() / h;
        if k > MAX_TOP_K {
            return Err(RuntimeError::op(
                NAME,
                format!("top-{k} routing is not supported"),
            ));
        }
        if router.rows() != ne || routes.len() < ne + 2 * n * k || rows_x.len() < n * h {
            return Err(RuntimeError::op(NAME, "work buffers smaller than the step"));
        }
        out.fill(0.0);
        self.project(router, &x, n, work.qx, &mut logits)?;

        // Route every row: its k (expert, weight) pairs, stored as floats next to the softmax
        // scratch (expert ids are small integers, exact in f32).
        let (probs, pairs) = routes.split_at_mut(ne);
        let mut sel = [(0usize, 0f32); MAX_TOP_K];
        for t in 0..n {
            ops::route_into(
                &logits[t * ne..(t + 1) * ne],
                d.norm_topk,
                probs,
                &mut sel[..k],
            );
            for (j, &(e, wt)) in sel[..k].iter().enumerate() {
                pairs[(t * k + j) * 2] = e as f32;
                pairs[(t * k + j) * 2 + 1] = wt;
            }
        }
        let routed = |t: usize, e: usize| (0..k).find(|&j| pairs[(t * k + j) * 2] as usize == e);
        for e in 0..ne {
            // The rows routed to `e`, in row order, gathered.
            let mut cnt = 0;
            for t in 0..n {
                if routed(t, e).is_some() {
                    rows_x[cnt * h..(cnt + 1) * h].copy_from_slice(&x[t * h..(t + 1) * h]);
                    cnt += 1;
                }
            }
            if cnt == 0 {
                continue;
            }
            self.mlp(&self.expert(d, e)?, &rows_x, cnt, &mut work, &mut rows_y)?;
            let mut r = 0;
            for t in 0..n {
                let Some(j) = routed(t, e) else {
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
        if d.shared {
            let shared = Mlp {
                gate: self.matrix(NAME, layer(L::SharedGate))?,
                up: self.matrix(NAME, layer(L::SharedUp))?,
                down: self.matrix(NAME, layer(L::SharedDown))?,
            };
            let sgate = self.matrix(NAME, layer(L::SharedExpertGate))?;
            self.mlp(&shared, &x, n, &mut work, &mut rows_y)?;
            let mut g = mem.f32_mut(NAME, d.shared_gate)?;
            self.project(sgate, &x, n, work.qx, &mut g)?;
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
