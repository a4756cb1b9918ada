//! The mixture-of-experts op as a description (`OpDesc::Moe`): routing, the routed experts and
//! the shared expert on both host backends (and captured) against a plain f64 computation, and
//! a missing expert weight refused by its id.

use oxllm_core::DType;
use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{
    Backend, BufKind, BufRef, CpuBackend, HostWeight, LayerWeight as L, MoeDesc, OpDesc,
    ReferenceBackend, RuntimeError, WeightId, WeightSource,
};
use std::collections::HashMap;
use std::sync::Arc;

const HIDDEN: usize = 8;
const FFN: usize = 4;
const SHARED_FFN: usize = 6;
const EXPERTS: usize = 3;
const TOP_K: usize = 2;
const ROWS: usize = 5;

/// Every weight of one MoE layer as f32 matrices, with an optional id left out.
struct Layer {
    mats: HashMap<WeightId, (QMatrix, Vec<f32>)>,
    missing: Option<WeightId>,
}

fn matrix(rows: usize, cols: usize, seed: usize) -> (QMatrix, Vec<f32>) {
    let v: Vec<f32> = (0..rows * cols)
        .map(|i| (((i * 7 + seed * 13) % 29) as f32 - 14.0) / 17.0)
        .collect();
    let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    (QMatrix::new(DType::F32, rows, cols, bytes).unwrap(), v)
}

fn expert(e: usize, role: L) -> WeightId {
    WeightId::Expert {
        layer: 0,
        expert: e as u32,
        role,
    }
}

fn layer(role: L) -> WeightId {
    WeightId::Layer(0, role)
}

impl Layer {
    fn new(missing: Option<WeightId>) -> Layer {
        let mut mats = HashMap::new();
        mats.insert(layer(L::MoeRouter), matrix(EXPERTS, HIDDEN, 1));
        for e in 0..EXPERTS {
            mats.insert(expert(e, L::Gate), matrix(FFN, HIDDEN, 10 + e));
            mats.insert(expert(e, L::Up), matrix(FFN, HIDDEN, 20 + e));
            mats.insert(expert(e, L::Down), matrix(HIDDEN, FFN, 30 + e));
        }
        mats.insert(layer(L::SharedGate), matrix(SHARED_FFN, HIDDEN, 40));
        mats.insert(layer(L::SharedUp), matrix(SHARED_FFN, HIDDEN, 41));
        mats.insert(layer(L::SharedDown), matrix(HIDDEN, SHARED_FFN, 42));
        mats.insert(layer(L::SharedExpertGate), matrix(1, HIDDEN, 43));
        Layer { mats, missing }
    }
    fn f64(&self, id: WeightId) -> Vec<f64> {
        self.mats[&id].1.iter().map(|&v| v as f64).collect()
    }
}

impl WeightSource for Layer {
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>)) {
        for (id, (m, _)) in &self.mats {
            if Some(*id) != self.missing {
                visit(*id, HostWeight::Matrix(m));
            }
        }
    }
    fn matrix(&self, id: WeightId) -> Option<&QMatrix> {
        (Some(id) != self.missing)
            .then(|| self.mats.get(&id).map(|(m, _)| m))
            .flatten()
    }
    fn vector(&self, _: WeightId) -> Option<&[f32]> {
        None
    }
}

fn x_rows() -> Vec<f32> {
    (0..ROWS * HIDDEN)
        .map(|i| ((i * 5 % 19) as f32 - 9.0) / 7.0)
        .collect()
}

/// `w · x` for a `[rows, cols]` matrix.
fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len())
        .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
        .collect()
}

fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

fn mlp(l: &Layer, [g, u, d]: [WeightId; 3], x: &[f64]) -> Vec<f64> {
    let h: Vec<f64> = matvec(&l.f64(g), x)
        .into_iter()
        .zip(matvec(&l.f64(u), x))
        .map(|(a, b)| silu(a) * b)
        .collect();
    matvec(&l.f64(d), &h)
}

/// The experts each row goes to, first the most probable, and the layer's output, in f64.
fn reference(l: &Layer, x: &[f32], norm_topk: bool) -> (Vec<Vec<usize>>, Vec<f64>) {
    let mut out = Vec::new();
    let mut chosen = Vec::new();
    for row in x.chunks_exact(HIDDEN) {
        let x: Vec<f64> = row.iter().map(|&v| v as f64).collect();
        let logits = matvec(&l.f64(layer(L::MoeRouter)), &x);
        let max = logits.iter().cloned().fold(f64::MIN, f64::max);
        let sum: f64 = logits.iter().map(|v| (v - max).exp()).sum();
        let probs: Vec<f64> = logits.iter().map(|v| (v - max).exp() / sum).collect();
        let mut order: Vec<usize> = (0..EXPERTS).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]));
        let top = &order[..TOP_K];
        let total: f64 = top.iter().map(|&e| probs[e]).sum();
        let mut y = vec![0f64; HIDDEN];
        for &e in top {
            let wt = if norm_topk {
                probs[e] / total
            } else {
                probs[e]
            };
            let ids = [L::Gate, L::Up, L::Down].map(|r| expert(e, r));
            for (o, v) in y.iter_mut().zip(mlp(l, ids, &x)) {
                *o += wt * v;
            }
        }
        let ids = [L::SharedGate, L::SharedUp, L::SharedDown].map(layer);
        let s = matvec(&l.f64(layer(L::SharedExpertGate)), &x)[0];
        let s = 1.0 / (1.0 + (-s).exp());
        for (o, v) in y.iter_mut().zip(mlp(l, ids, &x)) {
            *o += s * v;
        }
        chosen.push(top.to_vec());
        out.extend(y);
    }
    (chosen, out)
}

/// Records the op over persistent `x` / `out` buffers and step-local work buffers.
fn record(
    b: &mut dyn Backend,
    x: BufRef,
    out: BufRef,
    norm_topk: bool,
) -> Result<(), RuntimeError> {
    let f32s = |b: &mut dyn Backend, len| b.alloc("moe", BufKind::F32, len);
    let row_bytes = |cols| DType::F32.row_bytes(cols).unwrap();
    let desc = MoeDesc {
        layer: 0,
        hidden: HIDDEN,
        n_experts: EXPERTS,
        top_k: TOP_K,
        norm_topk,
        shared: true,
        x,
        router_logits: f32s(b, ROWS * EXPERTS)?,
        routes: f32s(b, EXPERTS + 2 * ROWS * TOP_K)?,
        rows_x: f32s(b, ROWS * HIDDEN)?,
        rows_y: f32s(b, ROWS * HIDDEN)?,
        gate: f32s(b, ROWS * SHARED_FFN)?,
        up: f32s(b, ROWS * SHARED_FFN)?,
        shared_gate: f32s(b, ROWS)?,
        qx: b.alloc("moe", BufKind::QActs, ROWS * row_bytes(HIDDEN))?,
        qh: b.alloc("moe", BufKind::QActs, ROWS * row_bytes(SHARED_FFN))?,
        out,
    };
    b.launch(OpDesc::Moe(Box::new(desc)))
}

/// Runs one eager step on `b` (handed `source`); returns the output rows.
fn run(
    mut b: Box<dyn Backend>,
    source: Layer,
    norm_topk: bool,
    capture: bool,
) -> Result<Vec<f32>, RuntimeError> {
    b.load_weights(Arc::new(source))?;
    let x = b.alloc_persistent(BufKind::F32, ROWS * HIDDEN)?;
    let out = b.alloc_persistent(BufKind::F32, ROWS * HIDDEN)?;
    {
        let mem = b.host_access("x", true)?;
        mem.f32_mut("x", x)?.copy_from_slice(&x_rows());
    }
    if capture {
        b.warm_step()?;
        record(b.as_mut(), x, out, norm_topk)?;
        b.end_step()?;
        b.begin_capture()?;
        record(b.as_mut(), x, out, norm_topk)?;
        let plan = b.end_capture()?;
        b.replay(&plan)?;
    } else {
        b.begin_step()?;
        record(b.as_mut(), x, out, norm_topk)?;
        b.end_step()?;
    }
    let mem = b.host_access("out", false)?;
    let v = mem.f32("out", out)?.to_vec();
    Ok(v)
}

#[test]
fn both_host_backends_route_and_mix_experts_like_the_definition() {
    for norm_topk in [false, true] {
        let (chosen, want) = reference(&Layer::new(None), &x_rows(), norm_topk);
        // The rows do not all go to the same experts, so routing is exercised.
        assert!(chosen.iter().any(|c| c != &chosen[0]), "{chosen:?}");
        let backends: [(&str, Box<dyn Backend>, bool); 3] = [
            ("cpu", Box::new(CpuBackend::new(2)), false),
            ("cpu captured", Box::new(CpuBackend::new(2)), true),
            ("reference", Box::new(ReferenceBackend::new()), false),
        ];
        for (name, b, capture) in backends {
            let got = run(b, Layer::new(None), norm_topk, capture).unwrap();
            let err = got
                .iter()
                .zip(&want)
                .map(|(&g, &w)| (g as f64 - w).abs())
                .fold(0f64, f64::max);
            assert!(err < 1e-4, "{name}, norm_topk {norm_topk}: max error {err}");
        }
    }
}

#[test]
fn a_routed_expert_never_handed_is_refused_by_its_id() {
    let (chosen, _) = reference(&Layer::new(None), &x_rows(), true);
    let id = expert(chosen[0][0], L::Down);
    for b in [
        Box::new(CpuBackend::new(1)) as Box<dyn Backend>,
        Box::new(ReferenceBackend::new()),
    ] {
        let err = run(b, Layer::new(Some(id)), true, false).unwrap_err();
        assert_eq!(err, RuntimeError::MissingWeight { op: "moe", id });
    }
}
