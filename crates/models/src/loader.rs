//! Loading a model from a GGUF file or a Hugging Face directory.
//!
//! Both sources are read through the same `TensorView` (row-major shape, outermost first), so
//! one loader serves both; only the tensor names differ. Every tensor's shape is checked against
//! the config before it is used, and a missing tensor is an error naming it.

use std::path::Path;

use oxllm_core::DType;
use oxllm_formats::{GgufFile, HfModelDir, TensorView};
use oxllm_kernels::matmul::{QMatrix, WeightLayout};
use oxllm_kernels::quant;

use crate::hybrid::{hybrid_arch, load_hybrid, HybridConfig};
use crate::{LayerWeights, LlamaModel, Model, ModelConfig, ModelError};

/// An opened model file: kept so the tokenizer and chat template can be read from it too.
pub enum ModelFile {
    Gguf(GgufFile),
    Hf(HfModelDir),
}

impl ModelFile {
    pub fn open(path: &Path) -> Result<ModelFile, ModelError> {
        let meta = std::fs::metadata(path).map_err(|e| ModelError::Path {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        if meta.is_dir() {
            Ok(ModelFile::Hf(HfModelDir::open(path)?))
        } else {
            Ok(ModelFile::Gguf(GgufFile::open(path)?))
        }
    }

    pub fn config(&self) -> Result<ModelConfig, ModelError> {
        match self {
            ModelFile::Gguf(g) => ModelConfig::from_gguf(g),
            ModelFile::Hf(d) => ModelConfig::from_hf(d.config()),
        }
    }

    pub(crate) fn tensor(&self, name: &str) -> Result<TensorView<'_>, ModelError> {
        Ok(match self {
            ModelFile::Gguf(g) => g.tensor(name)?,
            ModelFile::Hf(d) => d.tensor(name)?,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.tensor(name).is_ok()
    }
}

#[derive(Clone, Copy)]
enum Part {
    AttnNorm,
    Q,
    K,
    V,
    O,
    QBias,
    KBias,
    VBias,
    QNorm,
    KNorm,
    FfnNorm,
    Gate,
    Up,
    Down,
}

fn layer_name(file: &ModelFile, i: usize, part: Part) -> String {
    match file {
        ModelFile::Gguf(_) => {
            let p = match part {
                Part::AttnNorm => "attn_norm.weight",
                Part::Q => "attn_q.weight",
                Part::K => "attn_k.weight",
                Part::V => "attn_v.weight",
                Part::O => "attn_output.weight",
                Part::QBias => "attn_q.bias",
                Part::KBias => "attn_k.bias",
                Part::VBias => "attn_v.bias",
                Part::QNorm => "attn_q_norm.weight",
                Part::KNorm => "attn_k_norm.weight",
                Part::FfnNorm => "ffn_norm.weight",
                Part::Gate => "ffn_gate.weight",
                Part::Up => "ffn_up.weight",
                Part::Down => "ffn_down.weight",
            };
            format!("blk.{i}.{p}")
        }
        ModelFile::Hf(_) => {
            let p = match part {
                Part::AttnNorm => "input_layernorm.weight",
                Part::Q => "self_attn.q_proj.weight",
                Part::K => "self_attn.k_proj.weight",
                Part::V => "self_attn.v_proj.weight",
                Part::O => "self_attn.o_proj.weight",
                Part::QBias => "self_attn.q_proj.bias",
                Part::KBias => "self_attn.k_proj.bias",
                Part::VBias => "self_attn.v_proj.bias",
                Part::QNorm => "self_attn.q_norm.weight",
                Part::KNorm => "self_attn.k_norm.weight",
                Part::FfnNorm => "post_attention_layernorm.weight",
                Part::Gate => "mlp.gate_proj.weight",
                Part::Up => "mlp.up_proj.weight",
                Part::Down => "mlp.down_proj.weight",
            };
            format!("model.layers.{i}.{p}")
        }
    }
}

fn global_names(file: &ModelFile) -> (&'static str, &'static str, &'static str) {
    match file {
        ModelFile::Gguf(_) => ("token_embd.weight", "output_norm.weight", "output.weight"),
        ModelFile::Hf(_) => (
            "model.embed_tokens.weight",
            "model.norm.weight",
            "lm_head.weight",
        ),
    }
}

fn matrix(
    file: &ModelFile,
    layout: WeightLayout,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<QMatrix, ModelError> {
    let t = file.tensor(name)?;
    if t.shape != [rows, cols] {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            got: t.shape.to_vec(),
            expected: vec![rows, cols],
        });
    }
    QMatrix::with_layout(t.dtype, rows, cols, t.data.to_vec(), layout).map_err(|source| {
        ModelError::Matrix {
            name: name.to_string(),
            source,
        }
    })
}

fn vector(file: &ModelFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = file.tensor(name)?;
    if t.shape.iter().product::<usize>() != len || t.shape.len() > 1 && t.shape[0] != 1 {
        return Err(ModelError::TensorShape {
            name: name.to_string(),
            got: t.shape.to_vec(),
            expected: vec![len],
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

/// Loads the model at `path` (a `.gguf` file or a Hugging Face directory) in the default
/// weight layout. Hybrid checkpoints whose vision tower is skipped say so on stderr.
pub fn load_model(path: &Path) -> Result<(ModelFile, Model), ModelError> {
    load_model_with(path, WeightLayout::default())
}

/// [`load_model`] with the weight matrices stored in `layout` (the backend's choice:
/// `CpuOptions::weight_layout` in `oxllm-runtime`).
pub fn load_model_with(
    path: &Path,
    layout: WeightLayout,
) -> Result<(ModelFile, Model), ModelError> {
    let file = ModelFile::open(path)?;
    if let ModelFile::Hf(d) = &file {
        let name = d
            .config()
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(|a| a.as_str())
            .unwrap_or("");
        if hybrid_arch(name).is_some() {
            let config = HybridConfig::from_hf(d.config())?;
            if config.skipped_vision {
                log::warn!(
                    "oxllm: {name}: serving the text model only; the vision tower is skipped"
                );
            }
            let model = load_hybrid(&file, config, layout)?;
            return Ok((file, model.into()));
        }
    }
    let model = load_from(&file, layout)?;
    Ok((file, model.into()))
}

fn load_from(file: &ModelFile, layout: WeightLayout) -> Result<LlamaModel, ModelError> {
    let c = file.config()?;
    let (embd_name, norm_name, head_name) = global_names(file);
    let embeddings = matrix(file, layout, embd_name, c.vocab_size, c.hidden)?;
    let mut layers = Vec::with_capacity(c.n_layers);
    for i in 0..c.n_layers {
        let name = |p| layer_name(file, i, p);
        let bias = |p, len| -> Result<Option<Vec<f32>>, ModelError> {
            if c.qkv_bias {
                Ok(Some(vector(file, &name(p), len)?))
            } else {
                Ok(None)
            }
        };
        let norm = |p| -> Result<Option<Vec<f32>>, ModelError> {
            if c.qk_norm {
                Ok(Some(vector(file, &name(p), c.head_dim)?))
            } else {
                Ok(None)
            }
        };
        layers.push(LayerWeights {
            attn_norm: vector(file, &name(Part::AttnNorm), c.hidden)?,
            wq: matrix(file, layout, &name(Part::Q), c.q_width(), c.hidden)?,
            wk: matrix(file, layout, &name(Part::K), c.kv_width(), c.hidden)?,
            wv: matrix(file, layout, &name(Part::V), c.kv_width(), c.hidden)?,
            wo: matrix(file, layout, &name(Part::O), c.hidden, c.q_width())?,
            bq: bias(Part::QBias, c.q_width())?,
            bk: bias(Part::KBias, c.kv_width())?,
            bv: bias(Part::VBias, c.kv_width())?,
            q_norm: norm(Part::QNorm)?,
            k_norm: norm(Part::KNorm)?,
            ffn_norm: vector(file, &name(Part::FfnNorm), c.hidden)?,
            w_gate: matrix(file, layout, &name(Part::Gate), c.ffn, c.hidden)?,
            w_up: matrix(file, layout, &name(Part::Up), c.ffn, c.hidden)?,
            w_down: matrix(file, layout, &name(Part::Down), c.hidden, c.ffn)?,
        });
    }
    let final_norm = vector(file, norm_name, c.hidden)?;
    // A checkpoint that ties embeddings may still ship lm_head (a copy); the config decides.
    // A GGUF without `output.weight` is tied.
    let lm_head = if c.tied_embeddings {
        None
    } else {
        Some(matrix(file, layout, head_name, c.vocab_size, c.hidden)?)
    };
    let freq_factors = match file {
        ModelFile::Gguf(_) if file.has("rope_freqs.weight") => {
            Some(vector(file, "rope_freqs.weight", c.head_dim / 2)?)
        }
        _ => None,
    };
    Ok(LlamaModel::new(
        c,
        embeddings,
        layers,
        final_norm,
        lm_head,
        freq_factors,
    ))
}
