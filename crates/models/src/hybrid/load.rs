//! Building a [`HybridModel`] from a Hugging Face directory.
//!
//! Tensor names follow the checkpoints (`{prefix}layers.{i}.linear_attn.in_proj_qkvz.weight`,
//! `...self_attn.q_proj.weight`, `...mlp.experts.{e}.gate_proj.weight`, ...). Weights are kept in
//! their stored format; only whole rows are moved: Qwen3-Next's per-key-head groups
//! `[q k v z]` are regrouped into `[q | k | v | z]`, Qwen3.5's `in_proj_qkv` and `in_proj_z` are
//! stacked, and fused expert tensors (`experts.gate_up_proj`, `experts.down_proj`) are split
//! per expert. Every shape is checked; a missing tensor is an error naming it.

use oxllm_core::DType;
use oxllm_kernels::matmul::{QMatrix, WeightLayout};
use oxllm_kernels::quant;

use super::config::{HybridConfig, LayerKind};
use super::gated_attention::GatedAttention;
use super::gated_delta_net::GatedDeltaNet;
use super::model::{HybridLayer, HybridModel, Mixer, Mlp};
use super::moe::{DenseMlp, MoeMlp};
use crate::{Arch, ModelError, ModelFile};

/// Raw rows of a 2-D (or `[experts, rows, cols]` 3-D) tensor.
struct Rows {
    name: String,
    dtype: DType,
    cols: usize,
    row_bytes: usize,
    data: Vec<u8>,
}

impl Rows {
    fn count(&self) -> usize {
        self.data.len() / self.row_bytes.max(1)
    }
    fn select(&self, order: impl Iterator<Item = usize>) -> Rows {
        let mut data = Vec::new();
        for r in order {
            data.extend_from_slice(&self.data[r * self.row_bytes..(r + 1) * self.row_bytes]);
        }
        Rows {
            name: self.name.clone(),
            data,
            ..*self
        }
    }
    fn stack(mut self, other: Rows) -> Result<Rows, ModelError> {
        if other.dtype != self.dtype || other.cols != self.cols {
            return Err(ModelError::TensorType {
                name: other.name,
                dtype: other.dtype,
            });
        }
        self.data.extend_from_slice(&other.data);
        Ok(self)
    }
    fn matrix(self, layout: WeightLayout) -> Result<QMatrix, ModelError> {
        let rows = self.count();
        QMatrix::with_layout(self.dtype, rows, self.cols, self.data, layout).map_err(|source| {
            ModelError::Matrix {
                name: self.name,
                source,
            }
        })
    }
}

fn rows(file: &ModelFile, name: &str, shape: &[usize]) -> Result<Rows, ModelError> {
    let t = file.tensor(name)?;
    if t.shape != shape {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            got: t.shape.to_vec(),
            expected: shape.to_vec(),
        });
    }
    let cols = *shape.last().unwrap_or(&0);
    let row_bytes = t
        .dtype
        .row_bytes(cols)
        .map_err(|_| ModelError::TensorType {
            name: name.to_string(),
            dtype: t.dtype,
        })?;
    Ok(Rows {
        name: name.to_string(),
        dtype: t.dtype,
        cols,
        row_bytes,
        data: t.data.to_vec(),
    })
}

fn matrix(
    file: &ModelFile,
    layout: WeightLayout,
    name: &str,
    r: usize,
    c: usize,
) -> Result<QMatrix, ModelError> {
    rows(file, name, &[r, c])?.matrix(layout)
}

/// A float tensor of `len` values whatever its shape (norms, conv kernels, per-head scalars).
fn floats(file: &ModelFile, name: &str, shape: &[usize]) -> Result<Vec<f32>, ModelError> {
    let t = file.tensor(name)?;
    let len: usize = shape.iter().product();
    if t.shape.iter().product::<usize>() != len {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            got: t.shape.to_vec(),
            expected: shape.to_vec(),
        });
    }
    if !matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(ModelError::TensorType {
            name: name.to_string(),
            dtype: t.dtype,
        });
    }
    let mut out = vec![0f32; len];
    quant::dequantize_row(t.dtype, t.data, &mut out)?;
    Ok(out)
}

fn norm(file: &ModelFile, name: &str, len: usize, offset: bool) -> Result<Vec<f32>, ModelError> {
    let mut w = floats(file, name, &[len])?;
    if offset {
        w.iter_mut().for_each(|x| *x += 1.0);
    }
    Ok(w)
}

fn dense(
    file: &ModelFile,
    layout: WeightLayout,
    p: &str,
    hidden: usize,
    ffn: usize,
) -> Result<DenseMlp, ModelError> {
    Ok(DenseMlp {
        gate: matrix(file, layout, &format!("{p}gate_proj.weight"), ffn, hidden)?,
        up: matrix(file, layout, &format!("{p}up_proj.weight"), ffn, hidden)?,
        down: matrix(file, layout, &format!("{p}down_proj.weight"), hidden, ffn)?,
    })
}

fn experts(
    file: &ModelFile,
    layout: WeightLayout,
    p: &str,
    n: usize,
    h: usize,
    f: usize,
) -> Result<Vec<DenseMlp>, ModelError> {
    let per_expert = format!("{p}experts.0.gate_proj.weight");
    if file.tensor(&per_expert).is_ok() {
        return (0..n)
            .map(|e| dense(file, layout, &format!("{p}experts.{e}."), h, f))
            .collect();
    }
    let gate_up =
        rows(file, &format!("{p}experts.gate_up_proj"), &[n, 2 * f, h]).map_err(|e| match e {
            ModelError::Format(_) => ModelError::Format(oxllm_formats::FormatError::MissingTensor(
                per_expert.clone(),
            )),
            e => e,
        })?;
    let down = rows(file, &format!("{p}experts.down_proj"), &[n, h, f])?;
    (0..n)
        .map(|e| {
            let base = e * 2 * f;
            Ok(DenseMlp {
                gate: gate_up.select(base..base + f).matrix(layout)?,
                up: gate_up.select(base + f..base + 2 * f).matrix(layout)?,
                down: down.select(e * h..(e + 1) * h).matrix(layout)?,
            })
        })
        .collect()
}

/// Loads a hybrid model, its weight matrices stored in `layout`.
pub fn load_hybrid(
    file: &ModelFile,
    config: HybridConfig,
    layout: WeightLayout,
) -> Result<HybridModel, ModelError> {
    let c = &config.base;
    let (h, pre, off) = (c.hidden, config.prefix.as_str(), config.offset_norms);
    let embeddings = matrix(
        file,
        layout,
        &format!("{pre}embed_tokens.weight"),
        c.vocab_size,
        h,
    )?;
    let mut layers = Vec::with_capacity(c.n_layers);
    for (i, kind) in config.layers.iter().enumerate() {
        let lp = format!("{pre}layers.{i}.");
        let mixer = match kind {
            LayerKind::Full => {
                let a = format!("{lp}self_attn.");
                let qrows = c.q_width() * if config.attn_gate { 2 } else { 1 };
                Mixer::Full(GatedAttention {
                    wq: matrix(file, layout, &format!("{a}q_proj.weight"), qrows, h)?,
                    wk: matrix(file, layout, &format!("{a}k_proj.weight"), c.kv_width(), h)?,
                    wv: matrix(file, layout, &format!("{a}v_proj.weight"), c.kv_width(), h)?,
                    wo: matrix(file, layout, &format!("{a}o_proj.weight"), h, c.q_width())?,
                    q_norm: norm(file, &format!("{a}q_norm.weight"), c.head_dim, off)?,
                    k_norm: norm(file, &format!("{a}k_norm.weight"), c.head_dim, off)?,
                    gated: config.attn_gate,
                })
            }
            LayerKind::Linear => {
                let l = config
                    .linear
                    .ok_or_else(|| ModelError::MissingConfig("linear_num_key_heads".into()))?;
                let a = format!("{lp}linear_attn.");
                let (kw, vw, nk, nv) = (l.key_width(), l.value_width(), l.n_k_heads, l.n_v_heads);
                let (in_proj, ba) = if c.arch == Arch::Qwen3Next {
                    let r = nv / nk;
                    let grp = 2 * l.k_dim + 2 * r * l.v_dim;
                    let qkvz = rows(
                        file,
                        &format!("{a}in_proj_qkvz.weight"),
                        &[2 * kw + 2 * vw, h],
                    )?;
                    let span = |off: usize, len: usize| {
                        (0..nk).flat_map(move |g| g * grp + off..g * grp + off + len)
                    };
                    let order = span(0, l.k_dim)
                        .chain(span(l.k_dim, l.k_dim))
                        .chain(span(2 * l.k_dim, r * l.v_dim))
                        .chain(span(2 * l.k_dim + r * l.v_dim, r * l.v_dim));
                    let ba = rows(file, &format!("{a}in_proj_ba.weight"), &[2 * nv, h])?;
                    let ba_order = (0..nk)
                        .flat_map(|g| g * 2 * r..g * 2 * r + r)
                        .chain((0..nk).flat_map(|g| g * 2 * r + r..g * 2 * r + 2 * r));
                    (qkvz.select(order), ba.select(ba_order))
                } else {
                    let qkv = rows(file, &format!("{a}in_proj_qkv.weight"), &[2 * kw + vw, h])?;
                    let z = rows(file, &format!("{a}in_proj_z.weight"), &[vw, h])?;
                    let b = rows(file, &format!("{a}in_proj_b.weight"), &[nv, h])?;
                    let aa = rows(file, &format!("{a}in_proj_a.weight"), &[nv, h])?;
                    (qkv.stack(z)?, b.stack(aa)?)
                };
                let a_log = floats(file, &format!("{a}A_log"), &[nv])?;
                Mixer::Linear(GatedDeltaNet {
                    cfg: l,
                    in_proj: in_proj.matrix(layout)?,
                    in_proj_ba: ba.matrix(layout)?,
                    conv: floats(
                        file,
                        &format!("{a}conv1d.weight"),
                        &[l.conv_dim(), 1, l.conv_kernel],
                    )?,
                    neg_a: a_log.iter().map(|x| -x.exp()).collect(),
                    dt_bias: floats(file, &format!("{a}dt_bias"), &[nv])?,
                    norm: floats(file, &format!("{a}norm.weight"), &[l.v_dim])?,
                    out_proj: matrix(file, layout, &format!("{a}out_proj.weight"), h, vw)?,
                    eps: c.rms_eps,
                })
            }
        };
        let mp = format!("{lp}mlp.");
        let mlp = match config.moe.filter(|_| config.moe_layers[i]) {
            Some(m) => Mlp::Moe(MoeMlp {
                router: matrix(file, layout, &format!("{mp}gate.weight"), m.n_experts, h)?
                    .with_f32_activations(),
                experts: experts(file, layout, &mp, m.n_experts, h, m.expert_ffn)?,
                top_k: m.top_k,
                norm_topk: m.norm_topk,
                shared: match m.shared_ffn {
                    Some(f) => Some((
                        dense(file, layout, &format!("{mp}shared_expert."), h, f)?,
                        matrix(
                            file,
                            layout,
                            &format!("{mp}shared_expert_gate.weight"),
                            1,
                            h,
                        )?
                        .with_f32_activations(),
                    )),
                    None => None,
                },
            }),
            None => Mlp::Dense(dense(file, layout, &mp, h, c.ffn)?),
        };
        layers.push(HybridLayer {
            input_norm: norm(file, &format!("{lp}input_layernorm.weight"), h, off)?,
            mixer,
            post_norm: norm(
                file,
                &format!("{lp}post_attention_layernorm.weight"),
                h,
                off,
            )?,
            mlp,
        });
    }
    let final_norm = norm(file, &format!("{pre}norm.weight"), h, off)?;
    let lm_head = if c.tied_embeddings {
        None
    } else {
        Some(matrix(file, layout, "lm_head.weight", c.vocab_size, h)?)
    };
    Ok(HybridModel::new(
        config, embeddings, layers, final_norm, lm_head,
    ))
}
