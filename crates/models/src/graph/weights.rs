//! The models' weights by id: what a backend is handed at load ([`WeightSource`]) and resolves
//! each op description's [`WeightId`] in. One lookup per model kind; `visit_weights` walks the
//! same ids, so what a device backend copies is exactly what the host backends resolve.

use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{HostWeight, LayerWeight as L, WeightId, WeightSource};

use crate::hybrid::{HybridModel, Mixer, Mlp};
use crate::LlamaModel;

/// Every per-layer role, in a fixed order.
const LAYER_ROLES: [L; 21] = [
    L::AttnNorm,
    L::Wq,
    L::Wk,
    L::Wv,
    L::Wo,
    L::Bq,
    L::Bk,
    L::Bv,
    L::QNorm,
    L::KNorm,
    L::FfnNorm,
    L::Gate,
    L::Up,
    L::Down,
    L::LinearInProj,
    L::LinearInProjBa,
    L::LinearOutProj,
    L::LinearConv,
    L::LinearNegA,
    L::LinearDtBias,
    L::LinearNorm,
];

/// Calls `visit` with every id of a model of `layers` layers that `source` holds.
fn visit_all(
    source: &dyn WeightSource,
    layers: usize,
    visit: &mut dyn FnMut(WeightId, HostWeight<'_>),
) {
    let globals = [
        WeightId::Embeddings,
        WeightId::FinalNorm,
        WeightId::OutputHead,
    ];
    let per_layer = (0..layers as u32).flat_map(|l| LAYER_ROLES.map(|r| WeightId::Layer(l, r)));
    for id in globals.into_iter().chain(per_layer) {
        if let Some(m) = source.matrix(id) {
            visit(id, HostWeight::Matrix(m));
        } else if let Some(v) = source.vector(id) {
            visit(id, HostWeight::Vector(v));
        }
    }
}

impl WeightSource for LlamaModel {
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>)) {
        visit_all(self, self.layers.len(), visit)
    }

    fn matrix(&self, id: WeightId) -> Option<&QMatrix> {
        let (l, role) = match id {
            WeightId::Embeddings => return Some(&self.embeddings),
            WeightId::OutputHead => return Some(self.lm_head()),
            WeightId::FinalNorm => return None,
            WeightId::Layer(l, role) => (self.layers.get(l as usize)?, role),
        };
        match role {
            L::Wq => Some(&l.wq),
            L::Wk => Some(&l.wk),
            L::Wv => Some(&l.wv),
            L::Wo => Some(&l.wo),
            L::Gate => Some(&l.w_gate),
            L::Up => Some(&l.w_up),
            L::Down => Some(&l.w_down),
            _ => None,
        }
    }

    fn vector(&self, id: WeightId) -> Option<&[f32]> {
        let (l, role) = match id {
            WeightId::FinalNorm => return Some(&self.final_norm),
            WeightId::Embeddings | WeightId::OutputHead => return None,
            WeightId::Layer(l, role) => (self.layers.get(l as usize)?, role),
        };
        match role {
            L::AttnNorm => Some(&l.attn_norm),
            L::FfnNorm => Some(&l.ffn_norm),
            L::Bq => l.bq.as_deref(),
            L::Bk => l.bk.as_deref(),
            L::Bv => l.bv.as_deref(),
            L::QNorm => l.q_norm.as_deref(),
            L::KNorm => l.k_norm.as_deref(),
            _ => None,
        }
    }
}

/// The hybrids' described weights: embeddings, norms, head, the projections, the gated
/// attention's q/k norms and the Gated DeltaNet cores' small weights. The MoE experts are read
/// by their host op.
impl WeightSource for HybridModel {
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>)) {
        visit_all(self, self.layers.len(), visit)
    }

    fn matrix(&self, id: WeightId) -> Option<&QMatrix> {
        let (layer, role) = match id {
            WeightId::Embeddings => return Some(&self.embeddings),
            WeightId::OutputHead => return Some(self.lm_head()),
            WeightId::FinalNorm => return None,
            WeightId::Layer(l, role) => (self.layers.get(l as usize)?, role),
        };
        match (&layer.mixer, &layer.mlp, role) {
            (Mixer::Linear(g), _, L::LinearInProj) => Some(&g.in_proj),
            (Mixer::Linear(g), _, L::LinearInProjBa) => Some(&g.in_proj_ba),
            (Mixer::Linear(g), _, L::LinearOutProj) => Some(&g.out_proj),
            (Mixer::Full(a), _, L::Wq) => Some(&a.wq),
            (Mixer::Full(a), _, L::Wk) => Some(&a.wk),
            (Mixer::Full(a), _, L::Wv) => Some(&a.wv),
            (Mixer::Full(a), _, L::Wo) => Some(&a.wo),
            (_, Mlp::Dense(d), L::Gate) => Some(&d.gate),
            (_, Mlp::Dense(d), L::Up) => Some(&d.up),
            (_, Mlp::Dense(d), L::Down) => Some(&d.down),
            _ => None,
        }
    }

    fn vector(&self, id: WeightId) -> Option<&[f32]> {
        let (layer, role) = match id {
            WeightId::FinalNorm => return Some(&self.final_norm),
            WeightId::Embeddings | WeightId::OutputHead => return None,
            WeightId::Layer(l, role) => (self.layers.get(l as usize)?, role),
        };
        match (&layer.mixer, role) {
            (_, L::AttnNorm) => Some(&layer.input_norm),
            (_, L::FfnNorm) => Some(&layer.post_norm),
            (Mixer::Full(a), L::QNorm) => Some(&a.q_norm),
            (Mixer::Full(a), L::KNorm) => Some(&a.k_norm),
            (Mixer::Linear(g), L::LinearConv) => Some(&g.conv),
            (Mixer::Linear(g), L::LinearNegA) => Some(&g.neg_a),
            (Mixer::Linear(g), L::LinearDtBias) => Some(&g.dt_bias),
            (Mixer::Linear(g), L::LinearNorm) => Some(&g.norm),
            _ => None,
        }
    }
}
