//! The host backends' interpreter of [`OpDesc`]: each variant computed with the kernel table
//! and thread pool of the backend that runs it ([`crate::CpuBackend`]: the fast or warm table
//! on its pool; [`crate::ReferenceBackend`]: the scalar table on one thread), weights resolved
//! by id in the [`WeightSource`] the backend was handed at load.
//!
//! Guarantees: nothing here asks which backend runs it (only the table and pool differ), and
//! nothing allocates, so a captured plan replays without touching the heap. Bad step inputs
//! (a token outside the vocabulary, a slot outside the cache, a logits index past the rows)
//! are errors naming the op, never a panic.

use oxllm_kernels::attention::AttnMetadata;
use oxllm_kernels::gdn::{GdnInputs, GdnWeights};
use oxllm_kernels::matmul::{add_bias, QMatrix};
use oxllm_kernels::ops;
use oxllm_kernels::pool::{for_parts_mut, ThreadPool};
use oxllm_sample::sample_rows::SampleRows;

use crate::{BufKind, Kernels, MatmulJob, Memory, OpDesc, RuntimeError, WeightId, WeightSource};

/// Runs `desc` on the host with `kernels` on `pool` (what a device backend does with the ops it
/// runs on its host copies, [`OpDesc::host_only`]).
pub fn run_on_host(
    desc: &OpDesc,
    mem: &Memory,
    pool: &ThreadPool,
    kernels: &'static Kernels,
    weights: Option<&dyn WeightSource>,
) -> Result<(), RuntimeError> {
    HostExec {
        pool,
        kernels,
        weights,
    }
    .run(desc, mem)
}

/// What a host backend runs an op description with.
pub(crate) struct HostExec<'a> {
    pub pool: &'a ThreadPool,
    pub kernels: &'static Kernels,
    pub weights: Option<&'a dyn WeightSource>,
}

impl HostExec<'_> {
    pub(crate) fn matrix(&self, op: &'static str, id: WeightId) -> Result<&QMatrix, RuntimeError> {
        self.weights
            .and_then(|w| w.matrix(id))
            .ok_or(RuntimeError::MissingWeight { op, id })
    }

    pub(crate) fn vector(&self, op: &'static str, id: WeightId) -> Result<&[f32], RuntimeError> {
        self.weights
            .and_then(|w| w.vector(id))
            .ok_or(RuntimeError::MissingWeight { op, id })
    }

    pub fn run(&self, desc: &OpDesc, mem: &Memory) -> Result<(), RuntimeError> {
        let name = desc.name();
        let (pool, k) = (self.pool, self.kernels);
        match desc {
            OpDesc::Embed {
                tokens,
                out,
                hidden,
            } => {
                let table = self.matrix(name, WeightId::Embeddings)?;
                let tokens = mem.u32(name, *tokens)?;
                let mut out = mem.f32_mut(name, *out)?;
                let vocab = table.rows();
                for (row, &id) in out.chunks_exact_mut((*hidden).max(1)).zip(tokens.iter()) {
                    if id as usize >= vocab {
                        return Err(RuntimeError::op(
                            name,
                            format!("token id {id} is outside the vocabulary of {vocab}"),
                        ));
                    }
                    table
                        .dequantize_row(id as usize, row)
                        .map_err(|e| RuntimeError::op(name, e))?;
                }
            }
            OpDesc::RmsNorm {
                weight,
                x,
                out,
                cols,
                eps,
            } => {
                let w = self.vector(name, *weight)?;
                check(
                    name,
                    w.len() == *cols,
                    "norm weight and rows differ in width",
                )?;
                let x = mem.f32(name, *x)?;
                let mut out = mem.f32_mut(name, *out)?;
                for (src, dst) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
                    ops::rms_norm(src, w, *eps, dst);
                }
            }
            OpDesc::Quantize {
                x,
                out,
                rows,
                cols,
                dtype,
            } => {
                let x = mem.f32(name, *x)?;
                let mut out = mem.qacts_mut(name, *out)?;
                (k.quantize)(pool, &x, *rows, *cols, *dtype, &mut out)
                    .map_err(|e| RuntimeError::op(name, e))?;
            }
            OpDesc::Matmul { jobs, .. } => match jobs.len() {
                1 => self.matmul::<1>(jobs, mem)?,
                2 => self.matmul::<2>(jobs, mem)?,
                3 => self.matmul::<3>(jobs, mem)?,
                n => return Err(RuntimeError::op(name, format!("{n} products in one op"))),
            },
            OpDesc::QkNormRope {
                q,
                k: kb,
                positions,
                n_heads,
                n_kv_heads,
                norms,
                eps,
                rope,
            } => {
                let norms = match norms {
                    Some((qn, kn)) => Some((self.vector(name, *qn)?, self.vector(name, *kn)?)),
                    None => None,
                };
                let positions = mem.u32(name, *positions)?;
                let mut q = mem.f32_mut(name, *q)?;
                let mut kr = mem.f32_mut(name, *kb)?;
                let (qw, kw) = (n_heads * rope.head_dim(), n_kv_heads * rope.head_dim());
                let rows = positions.len();
                check(
                    name,
                    q.len() >= rows * qw && kr.len() >= rows * kw,
                    "fewer q/k rows than positions",
                )?;
                ops::qk_norm_rope(pool, &mut q, &mut kr, qw, kw, &positions, norms, *eps, rope);
            }
            OpDesc::StoreKv {
                slot_mapping,
                k: kb,
                v,
                k_cache,
                v_cache,
                kv_width,
            } => {
                let slots = mem.i32(name, *slot_mapping)?;
                let (kr, v) = (mem.f32(name, *kb)?, mem.f32(name, *v)?);
                let kw = *kv_width;
                check(
                    name,
                    kr.len() >= slots.len() * kw && v.len() >= slots.len() * kw,
                    "fewer k/v rows than slots",
                )?;
                match k_cache.kind() {
                    BufKind::F16 => {
                        let mut kc = mem.f16_mut(name, *k_cache)?;
                        let mut vc = mem.f16_mut(name, *v_cache)?;
                        check_slots(name, &slots, kc.len().min(vc.len()) / kw.max(1))?;
                        (k.store_kv_f16)(&mut kc, &mut vc, &slots, &kr, &v, kw);
                    }
                    _ => {
                        let mut kc = mem.f32_mut(name, *k_cache)?;
                        let mut vc = mem.f32_mut(name, *v_cache)?;
                        check_slots(name, &slots, kc.len().min(vc.len()) / kw.max(1))?;
                        (k.store_kv_f32)(&mut kc, &mut vc, &slots, &kr, &v, kw);
                    }
                }
            }
            OpDesc::Attention {
                q,
                k_cache,
                v_cache,
                query_start_loc,
                seq_lens,
                block_tables,
                block_table_stride,
                block_size,
                shape,
                out,
            } => {
                let q = mem.f32(name, *q)?;
                let qsl = mem.u32(name, *query_start_loc)?;
                let seq_lens = mem.u32(name, *seq_lens)?;
                let tables = mem.u32(name, *block_tables)?;
                let mut out = mem.f32_mut(name, *out)?;
                let meta = AttnMetadata {
                    query_start_loc: &qsl,
                    seq_lens: &seq_lens,
                    block_tables: &tables,
                    block_table_stride: *block_table_stride,
                    block_size: *block_size,
                };
                let width = shape.n_heads * shape.head_dim;
                let real_rows = qsl
                    .last()
                    .map_or(0, |&r| r as usize)
                    .min(out.len() / width.max(1));
                out[real_rows * width..].fill(0.0);
                match k_cache.kind() {
                    BufKind::F16 => {
                        let (kc, vc) = (mem.f16(name, *k_cache)?, mem.f16(name, *v_cache)?);
                        (k.attention_f16)(pool, &q, &kc, &vc, &meta, *shape, &mut out);
                    }
                    _ => {
                        let (kc, vc) = (mem.f32(name, *k_cache)?, mem.f32(name, *v_cache)?);
                        (k.attention_f32)(pool, &q, &kc, &vc, &meta, *shape, &mut out);
                    }
                }
            }
            OpDesc::Add { acc, x } => {
                let x = mem.f32(name, *x)?;
                let mut acc = mem.f32_mut(name, *acc)?;
                check(name, acc.len() == x.len(), "operands differ in length")?;
                ops::add_in_place(&mut acc, &x);
            }
            OpDesc::SiluMul { gate, up } => {
                let up = mem.f32(name, *up)?;
                let mut gate = mem.f32_mut(name, *gate)?;
                check(name, gate.len() == up.len(), "gate and up differ in length")?;
                // Element by element, so any split gives the same bits; a batch's rows are
                // worth sharing between threads, one token's are not.
                let up: &[f32] = &up;
                for_parts_mut(pool, &mut gate, 64, 64, |off, part| {
                    ops::silu_mul_in_place(part, &up[off..off + part.len()])
                });
            }
            OpDesc::GatherNorm {
                x,
                indices,
                weight,
                out,
                cols,
                eps,
            } => {
                let w = self.vector(name, *weight)?;
                let h = *cols;
                check(name, w.len() == h, "norm weight and rows differ in width")?;
                let x = mem.f32(name, *x)?;
                let idx = mem.u32(name, *indices)?;
                let mut out = mem.f32_mut(name, *out)?;
                let rows = x.len() / h.max(1);
                for (dst, &t) in out.chunks_exact_mut(h.max(1)).zip(idx.iter()) {
                    let t = t as usize;
                    if t >= rows {
                        return Err(RuntimeError::op(
                            name,
                            format!("logits index {t} outside {rows} rows"),
                        ));
                    }
                    ops::rms_norm(&x[t * h..(t + 1) * h], w, *eps, dst);
                }
            }
            OpDesc::RestoreStates {
                state_slots,
                restore_slots,
                layers,
                conv_len,
                rec_len,
            } => {
                let slots = mem.u32(name, *state_slots)?;
                let restores = mem.i32(name, *restore_slots)?;
                for &(conv, rec) in layers {
                    for (buf, len) in [(conv, *conv_len), (rec, *rec_len)] {
                        let mut state = mem.f32_mut(name, buf)?;
                        (k.restore_states)(&mut state, len, &slots, &restores)
                            .map_err(|e| RuntimeError::op(name, e))?;
                    }
                }
            }
            OpDesc::GatedDeltaNet(g) => {
                let weights = GdnWeights {
                    conv: self.vector(name, g.conv)?,
                    neg_a: self.vector(name, g.neg_a)?,
                    dt_bias: self.vector(name, g.dt_bias)?,
                    norm: self.vector(name, g.norm)?,
                    eps: g.eps,
                };
                let (proj, ba) = (mem.f32(name, g.proj)?, mem.f32(name, g.ba)?);
                let qsl = mem.u32(name, g.query_start_loc)?;
                let seq_lens = mem.u32(name, g.seq_lens)?;
                let slots = mem.u32(name, g.state_slots)?;
                let cp_rows = mem.u32(name, g.checkpoint_rows)?;
                let cp_slots = mem.u32(name, g.checkpoint_slots)?;
                let inputs = GdnInputs {
                    proj: &proj,
                    ba: &ba,
                    query_start_loc: &qsl,
                    seq_lens: &seq_lens,
                    state_slots: &slots,
                    checkpoint_rows: &cp_rows,
                    checkpoint_slots: &cp_slots,
                };
                let mut conv = mem.f32_mut(name, g.conv_state)?;
                let mut rec = mem.f32_mut(name, g.rec_state)?;
                let mut scratch = mem.f32_mut(name, g.scratch)?;
                let mut out = mem.f32_mut(name, g.out)?;
                (k.gated_delta_net)(
                    &g.shape,
                    g.rule,
                    &weights,
                    &inputs,
                    &mut conv,
                    &mut rec,
                    &mut scratch,
                    &mut out,
                )
                .map_err(|e| RuntimeError::op(name, e))?;
            }
            OpDesc::SplitQueryGate {
                src,
                query,
                gate,
                head_dim,
            } => {
                let hd = (*head_dim).max(1);
                let src = mem.f32(name, *src)?;
                let mut query = mem.f32_mut(name, *query)?;
                let mut gate = mem.f32_mut(name, *gate)?;
                check(
                    name,
                    query.len() == gate.len() && src.len() == 2 * query.len(),
                    "query, gate and their source differ in length",
                )?;
                for (s, (q, g)) in src
                    .chunks_exact(2 * hd)
                    .zip(query.chunks_exact_mut(hd).zip(gate.chunks_exact_mut(hd)))
                {
                    q.copy_from_slice(&s[..hd]);
                    g.copy_from_slice(&s[hd..]);
                }
            }
            OpDesc::Sample {
                logits,
                rows,
                token_ids,
                mask,
                vocab,
            } => {
                let mut logits = mem.f32_mut(name, *logits)?;
                let mut rows = mem.host_mut::<SampleRows>(name, *rows)?;
                let mut ids = mem.u32_mut(name, *token_ids)?;
                let mask = mask.map(|m| mem.u32(name, m)).transpose()?;
                let mask: &[u32] = mask.as_deref().unwrap_or(&[]);
                (k.sample)(pool, &mut logits, &mut rows, &mut ids, mask, *vocab);
            }
            OpDesc::Moe(m) => self.moe(m, mem)?,
            OpDesc::SigmoidMul { x, gate } => {
                let gate = mem.f32(name, *gate)?;
                let mut x = mem.f32_mut(name, *x)?;
                check(name, x.len() == gate.len(), "x and gate differ in length")?;
                for (a, &g) in x.iter_mut().zip(gate.iter()) {
                    *a *= 1.0 / (1.0 + (-g).exp());
                }
            }
        }
        Ok(())
    }

    /// `N` products in one pool dispatch (so a layer's q, k and v share it), then the biases.
    fn matmul<const N: usize>(&self, jobs: &[MatmulJob], mem: &Memory) -> Result<(), RuntimeError> {
        let name = "matmul";
        let ws = try_array::<_, _, N>(|j| self.matrix(name, jobs[j].weight))?;
        let acts = try_array::<_, _, N>(|j| mem.qacts(name, jobs[j].acts))?;
        let mut outs = try_array::<_, _, N>(|j| mem.f32_mut(name, jobs[j].out))?;
        let mut j = 0;
        let mut products = outs.each_mut().map(|o| {
            let product = (ws[j], &*acts[j], &mut **o);
            j += 1;
            product
        });
        (self.kernels.matmul)(self.pool, &mut products).map_err(|e| RuntimeError::op(name, e))?;
        for (job, out) in jobs.iter().zip(outs.iter_mut()) {
            if let Some(bias) = job.bias {
                add_bias(out, self.vector(name, bias)?);
            }
        }
        Ok(())
    }
}

fn check(op: &'static str, ok: bool, msg: &str) -> Result<(), RuntimeError> {
    if ok {
        Ok(())
    } else {
        Err(RuntimeError::op(op, msg))
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

/// `[f(0), .., f(N-1)]`, or the first error; allocates nothing.
fn try_array<T, E, const N: usize>(mut f: impl FnMut(usize) -> Result<T, E>) -> Result<[T; N], E> {
    let mut filled: [Option<T>; N] = std::array::from_fn(|_| None);
    for (k, slot) in filled.iter_mut().enumerate() {
        *slot = Some(f(k)?);
    }
    Ok(filled.map(|v| v.unwrap_or_else(|| unreachable!("every entry was filled above"))))
}
