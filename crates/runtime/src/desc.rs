//! Ops as data: what an op computes, over buffer handles and typed weight ids, with no host
//! pointer, closure or thread pool in it.
//!
//! Every backend executes an op from its [`OpDesc`] with its own kernel for each variant (the
//! host backends: `host_exec` with their kernel table; a GPU: its own kernels), and resolves
//! every [`WeightId`] in the weights it was handed once by
//! [`Backend::load_weights`](crate::Backend::load_weights) (a [`WeightSource`]): the host
//! backends keep the source itself (already in the layout their options chose), a device
//! backend copies it into its memory. Activation formats are the backend's choice: a device
//! backend may treat [`OpDesc::Quantize`] as a no-op and read [`MatmulJob::input`] (the f32 rows
//! before quantization) directly.

use oxllm_core::DType;
use oxllm_kernels::attention::AttnShape;
use oxllm_kernels::gdn::{DeltaRule, GdnShape};
use oxllm_kernels::matmul::QMatrix;
use oxllm_kernels::ops::Rope;

use crate::BufRef;

/// A weight of one layer, named by its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerWeight {
    AttnNorm,
    Wq,
    Wk,
    Wv,
    Wo,
    Bq,
    Bk,
    Bv,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
    /// A Gated DeltaNet layer's input projection (q, k, v and z rows).
    LinearInProj,
    /// A Gated DeltaNet layer's beta / alpha projection.
    LinearInProjBa,
    /// A Gated DeltaNet layer's output projection.
    LinearOutProj,
    /// A Gated DeltaNet layer's depthwise conv taps (`[conv_dim, conv_kernel]`).
    LinearConv,
    /// A Gated DeltaNet layer's `-exp(A_log)` per value head.
    LinearNegA,
    /// A Gated DeltaNet layer's `dt_bias` per value head.
    LinearDtBias,
    /// A Gated DeltaNet layer's gated RMSNorm weight (`v_dim`).
    LinearNorm,
    /// A mixture-of-experts layer's router (`[n_experts, hidden]`).
    MoeRouter,
    /// The shared expert's gate, up and down projections.
    SharedGate,
    SharedUp,
    SharedDown,
    /// The shared expert's `[1, hidden]` sigmoid gate.
    SharedExpertGate,
}

/// A weight of the model: the whole model's, or one layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightId {
    Embeddings,
    FinalNorm,
    OutputHead,
    Layer(u32, LayerWeight),
    /// Routed expert `expert` of MoE layer `layer`: its `Gate`, `Up` or `Down` projection.
    Expert {
        layer: u32,
        expert: u32,
        role: LayerWeight,
    },
}

/// A weight as the host holds it.
#[derive(Clone, Copy)]
pub enum HostWeight<'a> {
    Matrix(&'a QMatrix),
    Vector(&'a [f32]),
}

/// What a backend is handed at load: every weight a step may name, once, as the host holds it
/// (in the layout the backend's options asked the loader for).
pub trait WeightSource: Send + Sync {
    /// Calls `visit` with every weight and its id (a device backend copies each into its
    /// memory).
    fn visit_weights(&self, visit: &mut dyn FnMut(WeightId, HostWeight<'_>));
    /// The matrix `id` names, if the model has it.
    fn matrix(&self, id: WeightId) -> Option<&QMatrix>;
    /// The vector (norm, bias) `id` names, if the model has it.
    fn vector(&self, id: WeightId) -> Option<&[f32]>;
}

/// One product of a matmul op: `out = act(input) · Wᵀ (+ bias)`.
#[derive(Clone, Copy, Debug)]
pub struct MatmulJob {
    pub weight: WeightId,
    pub bias: Option<WeightId>,
    /// The f32 rows the quantized activations were made from (`rows x cols`).
    pub input: BufRef,
    /// The host backends' quantized activations of `input`.
    pub acts: BufRef,
    pub out: BufRef,
}

/// One Gated DeltaNet layer's core over a step (`kernels::gdn`): its weights by id, the
/// step's projections and sequence layout, and the layer's state buffers (all slots).
#[derive(Clone, Debug)]
pub struct GdnDesc {
    pub shape: GdnShape,
    pub rule: DeltaRule,
    pub eps: f32,
    pub conv: WeightId,
    pub neg_a: WeightId,
    pub dt_bias: WeightId,
    pub norm: WeightId,
    /// `[n, conv_dim + value_width]`: q, k, v, z per row.
    pub proj: BufRef,
    /// `[n, 2 * n_v_heads]`: b, a per row.
    pub ba: BufRef,
    pub query_start_loc: BufRef,
    pub seq_lens: BufRef,
    pub state_slots: BufRef,
    pub checkpoint_rows: BufRef,
    pub checkpoint_slots: BufRef,
    pub conv_state: BufRef,
    pub rec_state: BufRef,
    /// Step-local work floats, `shape.scratch_len(n)`.
    pub scratch: BufRef,
    /// `[n, value_width]`.
    pub out: BufRef,
}

/// One mixture-of-experts MLP over a step: routing (softmax, top-k) from the router's logits,
/// each expert on the rows routed to it, the shared expert. The weights are layer `layer`'s
/// (`LayerWeight::MoeRouter`, `WeightId::Expert { .. }` for `0..n_experts`, and with `shared`
/// the `Shared*` roles); their shapes and activation formats are the weights' own.
#[derive(Clone, Debug)]
pub struct MoeDesc {
    pub layer: u32,
    pub hidden: usize,
    pub n_experts: usize,
    pub top_k: usize,
    pub norm_topk: bool,
    pub shared: bool,
    /// `[n, hidden]`, normalised.
    pub x: BufRef,
    /// `[n, n_experts]`, written by the op.
    pub router_logits: BufRef,
    /// Step-local work: `n_experts` probabilities + `n * top_k` (expert, weight) pairs.
    pub routes: BufRef,
    /// `[n, hidden]` rows gathered for an expert, and its output.
    pub rows_x: BufRef,
    pub rows_y: BufRef,
    /// `[n, ffn]` (the widest expert) gate and up.
    pub gate: BufRef,
    pub up: BufRef,
    /// `[n]` shared-expert gate logits.
    pub shared_gate: BufRef,
    /// Quantized `[n, hidden]` and `[n, ffn]` rows.
    pub qx: BufRef,
    pub qh: BufRef,
    /// `[n, hidden]`.
    pub out: BufRef,
}

impl MoeDesc {
    /// The weight of routed expert `expert` in `role` (`Gate`, `Up`, `Down`).
    pub fn expert(&self, expert: usize, role: LayerWeight) -> WeightId {
        WeightId::Expert {
            layer: self.layer,
            expert: expert as u32,
            role,
        }
    }
}

/// What one op computes. Rows beyond a step's real tokens are padding (slot -1, no sequence).
#[derive(Clone, Debug)]
pub enum OpDesc {
    /// `out[t] = embeddings[tokens[t]]`.
    Embed {
        tokens: BufRef,
        out: BufRef,
        hidden: usize,
    },
    /// Per-row RMSNorm of `x` (`cols` wide) with `weight` into `out`.
    RmsNorm {
        weight: WeightId,
        x: BufRef,
        out: BufRef,
        cols: usize,
        eps: f32,
    },
    /// Activation quantization for the host kernels (`rows x cols` of `x` into `out`).
    Quantize {
        x: BufRef,
        out: BufRef,
        rows: usize,
        cols: usize,
        dtype: DType,
    },
    /// Products sharing one dispatch; each job's output is `rows x weight.rows()`.
    Matmul {
        rows: usize,
        cols: usize,
        jobs: Vec<MatmulJob>,
    },
    /// Per-head q/k RMSNorm (when the weights are given) and RoPE at each row's position.
    QkNormRope {
        q: BufRef,
        k: BufRef,
        positions: BufRef,
        n_heads: usize,
        n_kv_heads: usize,
        norms: Option<(WeightId, WeightId)>,
        eps: f32,
        rope: Rope,
    },
    /// K/V rows into their cache slots (slot -1 skipped).
    StoreKv {
        slot_mapping: BufRef,
        k: BufRef,
        v: BufRef,
        k_cache: BufRef,
        v_cache: BufRef,
        kv_width: usize,
    },
    /// Causal paged attention; rows past the last sequence are zeroed.
    Attention {
        q: BufRef,
        k_cache: BufRef,
        v_cache: BufRef,
        query_start_loc: BufRef,
        seq_lens: BufRef,
        block_tables: BufRef,
        block_table_stride: usize,
        block_size: usize,
        shape: AttnShape,
        out: BufRef,
    },
    /// `acc += x`.
    Add { acc: BufRef, x: BufRef },
    /// `gate = silu(gate) * up`.
    SiluMul { gate: BufRef, up: BufRef },
    /// `out[i] = rms_norm(x[indices[i]], weight)`.
    GatherNorm {
        x: BufRef,
        indices: BufRef,
        weight: WeightId,
        out: BufRef,
        cols: usize,
        eps: f32,
    },
    /// Before any layer runs: each restoring sequence's checkpoint slot (`restore_slots`, -1:
    /// none) copied into its running slot (`state_slots`) in every listed state buffer (conv,
    /// recurrent: `conv_len` / `rec_len` floats a slot). A warm step skips it.
    RestoreStates {
        state_slots: BufRef,
        restore_slots: BufRef,
        layers: Vec<(BufRef, BufRef)>,
        conv_len: usize,
        rec_len: usize,
    },
    /// A Gated DeltaNet layer's core; a warm step skips it (it would advance states).
    GatedDeltaNet(Box<GdnDesc>),
    /// Per head of `src` (`[query | gate]`, `2 * head_dim` each): the query half into `query`,
    /// the gate half into `gate`.
    SplitQueryGate {
        src: BufRef,
        query: BufRef,
        gate: BufRef,
        head_dim: usize,
    },
    /// `x *= sigmoid(gate)`.
    SigmoidMul { x: BufRef, gate: BufRef },
    /// A mixture-of-experts MLP (the expert choice is made inside the op, from its buffers).
    Moe(Box<MoeDesc>),
    /// Row `r` of `logits` (`[rows, vocab]`) sampled with the per-row state of the host buffer
    /// `rows` (`oxllm_sample::sample_rows::SampleRows`: each request's own sampler, penalties'
    /// token ids, scoring) into `token_ids[r]`; rows flagged `masked` first have the tokens
    /// their `mask` words (`ceil(vocab / 32)` a row) clear set to `-inf`. The state is the
    /// requests' own, so every backend runs this op on the host ([`OpDesc::host_only`]).
    Sample {
        logits: BufRef,
        rows: BufRef,
        token_ids: BufRef,
        mask: Option<BufRef>,
        vocab: usize,
    },
}

impl OpDesc {
    /// A short stable name, used in errors and profiles.
    pub fn name(&self) -> &'static str {
        match self {
            OpDesc::Embed { .. } => "embed",
            OpDesc::RmsNorm { .. } => "rms_norm",
            OpDesc::Quantize { .. } => "quantize",
            OpDesc::Matmul { .. } => "matmul",
            OpDesc::QkNormRope { .. } => "qk_norm_rope",
            OpDesc::StoreKv { .. } => "store_kv",
            OpDesc::Attention { .. } => "attention",
            OpDesc::Add { .. } => "add",
            OpDesc::SiluMul { .. } => "silu_mul",
            OpDesc::GatherNorm { .. } => "final_norm",
            OpDesc::RestoreStates { .. } => "restore_states",
            OpDesc::GatedDeltaNet(_) => "gated_delta_net",
            OpDesc::SplitQueryGate { .. } => "split_query_gate",
            OpDesc::SigmoidMul { .. } => "sigmoid_gate",
            OpDesc::Sample { .. } => "sample",
            OpDesc::Moe(_) => "moe",
        }
    }

    /// Whether the op reads host state whatever the backend (sampling with the requests' own
    /// samplers): a device backend runs it on its host copies after its device work.
    pub fn host_only(&self) -> bool {
        matches!(self, OpDesc::Sample { .. })
    }

    /// Calls `visit` with every buffer the op reads or writes.
    pub fn buffers(&self, visit: &mut dyn FnMut(BufRef)) {
        match self {
            OpDesc::Embed { tokens, out, .. } => [*tokens, *out].into_iter().for_each(visit),
            OpDesc::RmsNorm { x, out, .. } | OpDesc::Quantize { x, out, .. } => {
                [*x, *out].into_iter().for_each(visit)
            }
            OpDesc::Matmul { jobs, .. } => {
                for j in jobs {
                    [j.input, j.acts, j.out].into_iter().for_each(&mut *visit);
                }
            }
            OpDesc::QkNormRope {
                q, k, positions, ..
            } => [*q, *k, *positions].into_iter().for_each(visit),
            OpDesc::StoreKv {
                slot_mapping,
                k,
                v,
                k_cache,
                v_cache,
                ..
            } => [*slot_mapping, *k, *v, *k_cache, *v_cache]
                .into_iter()
                .for_each(visit),
            OpDesc::Attention {
                q,
                k_cache,
                v_cache,
                query_start_loc,
                seq_lens,
                block_tables,
                out,
                ..
            } => [
                *q,
                *k_cache,
                *v_cache,
                *query_start_loc,
                *seq_lens,
                *block_tables,
                *out,
            ]
            .into_iter()
            .for_each(visit),
            OpDesc::Add { acc, x } => [*acc, *x].into_iter().for_each(visit),
            OpDesc::SiluMul { gate, up } => [*gate, *up].into_iter().for_each(visit),
            OpDesc::GatherNorm {
                x, indices, out, ..
            } => [*x, *indices, *out].into_iter().for_each(visit),
            OpDesc::RestoreStates {
                state_slots,
                restore_slots,
                layers,
                ..
            } => {
                [*state_slots, *restore_slots]
                    .into_iter()
                    .for_each(&mut *visit);
                for &(conv, rec) in layers {
                    visit(conv);
                    visit(rec);
                }
            }
            OpDesc::GatedDeltaNet(g) => [
                g.proj,
                g.ba,
                g.query_start_loc,
                g.seq_lens,
                g.state_slots,
                g.checkpoint_rows,
                g.checkpoint_slots,
                g.conv_state,
                g.rec_state,
                g.scratch,
                g.out,
            ]
            .into_iter()
            .for_each(visit),
            OpDesc::SplitQueryGate {
                src, query, gate, ..
            } => [*src, *query, *gate].into_iter().for_each(visit),
            OpDesc::SigmoidMul { x, gate } => [*x, *gate].into_iter().for_each(visit),
            OpDesc::Moe(m) => [
                m.x,
                m.router_logits,
                m.routes,
                m.rows_x,
                m.rows_y,
                m.gate,
                m.up,
                m.shared_gate,
                m.qx,
                m.qh,
                m.out,
            ]
            .into_iter()
            .for_each(visit),
            OpDesc::Sample {
                logits,
                rows,
                token_ids,
                mask,
                ..
            } => [*logits, *rows, *token_ids]
                .into_iter()
                .chain(*mask)
                .for_each(visit),
        }
    }
}
