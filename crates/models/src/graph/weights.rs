//! The models' weights by id: what a backend is handed at load ([`WeightSource`]) and resolves
//! each op description's [`WeightId`] in. One lookup per model kind; `visit_weights` walks the
//! same ids, so what a device backend copies is exactly what the host backends resolve.

use oxllm_kernels::matmul::QMatrix;
use oxllm_runtime::{HostWeight, LayerWeight as L, WeightId, WeightSource};

use crate::hybrid::{HybridModel, Mixer, Mlp};
use crate::LlamaModel;

/// Every per-layer role, in a fixed order.
const LAYER_ROLES: [L; 26] = [
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
    L::MoeRouter,
    L::SharedGate,
    L::SharedUp,
    L::SharedDown,
    L::SharedExpertGate,
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
            WeightId::FinalNorm | WeightId::Expert { .. } => return None,
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
            WeightId::Embeddings | WeightId::OutputHead | WeightId::Expert { .. } => return None,
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

/// The hybrids' weights: embeddings, norms, head, the projections, the gated attention's q/k
/// norms, the Gated DeltaNet cores' small weights, and the MoE routers, routed experts
/// (`WeightId::Expert`) and shared experts.
impl WeightSource for HybridModel {
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>)) {
        visit_all(self, self.layers.len(), visit);
        for (l, layer) in self.layers.iter().enumerate() {
            let Mlp::Moe(moe) = &layer.mlp else {
                continue;
            };
            for (e, d) in moe.experts.iter().enumerate() {
                for (role, m) in [(L::Gate, &d.gate), (L::Up, &d.up), (L::Down, &d.down)] {
                    let id = WeightId::Expert {
                        layer: l as u32,
                        expert: e as u32,
                        role,
                    };
                    visit(id, HostWeight::Matrix(m));
                }
            }
        }
    }

    fn matrix(&self, id: WeightId) -> Option<&QMatrix> {
        let (layer, role) = match id {
            WeightId::Embeddings => return Some(&self.embeddings),
            WeightId::OutputHead => return Some(self.lm_head()),
            WeightId::FinalNorm => return None,
            WeightId::Layer(l, role) => (self.layers.get(l as usize)?, role),
            WeightId::Expert {
                layer,
                expert,
                role,
            } => {
                let Mlp::Moe(moe) = &self.layers.get(layer as usize)?.mlp else {
                    return None;
                };
                let d = moe.experts.get(expert as usize)?;
                return match role {
                    L::Gate => Some(&d.gate),
                    L::Up => Some(&d.up),
                    L::Down => Some(&d.down),
                    _ => None,
                };
            }
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
            (_, Mlp::Moe(m), L::MoeRouter) => Some(&m.router),
            (_, Mlp::Moe(m), L::SharedGate) => m.shared.as_ref().map(|(d, _)| &d.gate),
            (_, Mlp::Moe(m), L::SharedUp) => m.shared.as_ref().map(|(d, _)| &d.up),
            (_, Mlp::Moe(m), L::SharedDown) => m.shared.as_ref().map(|(d, _)| &d.down),
            (_, Mlp::Moe(m), L::SharedExpertGate) => m.shared.as_ref().map(|(_, g)| g),
            _ => None,
        }
    }

    fn vector(&self, id: WeightId) -> Option<&[f32]> {
        let (layer, role) = match id {
            WeightId::FinalNorm => return Some(&self.final_norm),
            WeightId::Embeddings | WeightId::OutputHead | WeightId::Expert { .. } => return None,
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
