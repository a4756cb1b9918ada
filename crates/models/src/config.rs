//! Architecture hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.
//!
//! Guarantees: a returned config is internally consistent (heads divide evenly, head_dim is even,
//! sizes are nonzero), so the forward pass can index without further checks.

use oxllm_formats::GgufFile;
use oxllm_kernels::ops::RopeLayout;
use serde_json::Value;

use crate::ModelError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    /// Gated DeltaNet + gated attention, MoE with a shared expert.
    Qwen3Next,
    /// Gated DeltaNet + gated attention, dense MLP.
    Qwen35,
    /// Qwen3 attention with a mixture-of-experts MLP.
    Qwen3Moe,
}

/// Llama 3 style frequency-dependent RoPE scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScaling {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_max_position: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden: usize,
    pub n_layers: usize,
    /// Layers holding paged K/V (all of them for dense models; the full-attention layers of a
    /// hybrid).
    pub kv_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rms_eps: f32,
    pub rope_theta: f32,
    pub rope_layout: RopeLayout,
    pub rope_scaling: Option<RopeScaling>,
    pub context_length: usize,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub tied_embeddings: bool,
}

impl ModelConfig {
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Per-frequency divisors for Llama 3 scaling (`None` when unscaled).
    pub fn rope_freq_factors(&self) -> Option<Vec<f32>> {
        let s = self.rope_scaling?;
        let half = self.head_dim / 2;
        let low_wavelen = s.original_max_position / s.low_freq_factor;
        let high_wavelen = s.original_max_position / s.high_freq_factor;
        Some(
            (0..half)
                .map(|i| {
                    let inv = 1.0 / self.rope_theta.powf(2.0 * i as f32 / self.head_dim as f32);
                    let wavelen = 2.0 * std::f32::consts::PI / inv;
                    if wavelen < high_wavelen {
                        1.0
                    } else if wavelen > low_wavelen {
                        s.factor
                    } else {
                        let smooth = (s.original_max_position / wavelen - s.low_freq_factor)
                            / (s.high_freq_factor - s.low_freq_factor);
                        1.0 / ((1.0 - smooth) / s.factor + smooth)
                    }
                })
                .collect(),
        )
    }

    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, ModelError> {
        let arch_name = file.meta_str("general.architecture")?.to_string();
        let (arch, rope_layout) = match arch_name.as_str() {
            // llama.cpp's converter permutes Llama Q/K rows for GGML's adjacent-pair rotation.
            "llama" | "mistral" => (Arch::Llama, RopeLayout::Interleaved),
            "qwen2" => (Arch::Qwen2, RopeLayout::SplitHalf),
            "qwen3" => (Arch::Qwen3, RopeLayout::SplitHalf),
            _ => return Err(ModelError::UnknownArchitecture(arch_name)),
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let get = |k: &str| -> Result<usize, ModelError> { Ok(file.meta_u64(&key(k))? as usize) };
        let hidden = get("embedding_length")?;
        let n_heads = get("attention.head_count")?;
        let n_kv_heads = match file.meta(&key("attention.head_count_kv")) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| invalid("head_count_kv", "not an integer"))?
                as usize,
            None => n_heads,
        };
        let head_dim = match file.meta(&key("attention.key_length")) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| invalid("key_length", "not an integer"))?
                as usize,
            None => hidden / n_heads.max(1),
        };
        let vocab_size = match file.meta(&key("vocab_size")) {
            Some(v) => v
                .as_u64()
                .ok_or_else(|| invalid("vocab_size", "not an integer"))?
                as usize,
            None => file
                .tensor("token_embd.weight")?
                .shape
                .first()
                .copied()
                .unwrap_or(0),
        };
        let rope_theta = match file.meta(&key("rope.freq_base")) {
            Some(v) => v
                .as_f32()
                .ok_or_else(|| invalid("rope.freq_base", "not a number"))?,
            None => 10000.0,
        };
        let cfg = ModelConfig {
            arch,
            vocab_size,
            hidden,
            n_layers: get("block_count")?,
            kv_layers: get("block_count")?,
            n_heads,
            n_kv_heads,
            head_dim,
            ffn: get("feed_forward_length")?,
            rms_eps: file.meta_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope_theta,
            rope_layout,
            // GGUF Llama 3 files carry the scaling as a `rope_freqs.weight` tensor instead.
            rope_scaling: None,
            context_length: get("context_length")?,
            qkv_bias: file.tensor("blk.0.attn_q.bias").is_ok(),
            qk_norm: arch == Arch::Qwen3,
            tied_embeddings: file.tensor("output.weight").is_err(),
        };
        cfg.check()
    }

    pub fn from_hf(config: &Value) -> Result<ModelConfig, ModelError> {
        let archs = config
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .or_else(|| config.get("model_type").and_then(Value::as_str))
            .ok_or_else(|| ModelError::MissingConfig("architectures".into()))?;
        let arch = match archs {
            "LlamaForCausalLM" | "MistralForCausalLM" | "llama" | "mistral" => Arch::Llama,
            "Qwen2ForCausalLM" | "qwen2" => Arch::Qwen2,
            "Qwen3ForCausalLM" | "qwen3" => Arch::Qwen3,
            other if crate::hybrid::hybrid_arch(other).is_some() => {
                return Ok(crate::hybrid::HybridConfig::from_hf(config)?.base)
            }
            other => return Err(ModelError::UnknownArchitecture(other.to_string())),
        };
        let usize_of = |k: &str| -> Result<usize, ModelError> {
            config
                .get(k)
                .ok_or_else(|| ModelError::MissingConfig(k.into()))?
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| invalid(k, "not a non-negative integer"))
        };
        let opt_usize = |k: &str| -> Result<Option<usize>, ModelError> {
            match config.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .map(|v| Some(v as usize))
                    .ok_or_else(|| invalid(k, "not a non-negative integer")),
            }
        };
        let hidden = usize_of("hidden_size")?;
        let n_heads = usize_of("num_attention_heads")?;
        // transformers 5 moved rope settings into `rope_parameters`; older files keep them flat.
        let rope = config
            .get("rope_parameters")
            .or_else(|| config.get("rope_scaling"))
            .filter(|v| v.is_object());
        let rope_theta = config
            .get("rope_theta")
            .or_else(|| rope.and_then(|r| r.get("rope_theta")))
            .and_then(Value::as_f64)
            .unwrap_or(10000.0) as f32;
        let rope_scaling = match rope {
            Some(r)
                if r.get("rope_type")
                    .or_else(|| r.get("type"))
                    .and_then(Value::as_str)
                    == Some("llama3") =>
            {
                let f = |k: &str| {
                    r.get(k)
                        .and_then(Value::as_f64)
                        .map(|v| v as f32)
                        .ok_or_else(|| invalid(&format!("rope_scaling.{k}"), "missing"))
                };
                Some(RopeScaling {
                    factor: f("factor")?,
                    low_freq_factor: f("low_freq_factor")?,
                    high_freq_factor: f("high_freq_factor")?,
                    original_max_position: f("original_max_position_embeddings")?,
                })
            }
            _ => None,
        };
        let bool_of =
            |k: &str, default: bool| config.get(k).and_then(Value::as_bool).unwrap_or(default);
        let cfg = ModelConfig {
            arch,
            vocab_size: usize_of("vocab_size")?,
            hidden,
            n_layers: usize_of("num_hidden_layers")?,
            kv_layers: usize_of("num_hidden_layers")?,
            n_heads,
            n_kv_heads: opt_usize("num_key_value_heads")?.unwrap_or(n_heads),
            head_dim: opt_usize("head_dim")?.unwrap_or(hidden / n_heads.max(1)),
            ffn: usize_of("intermediate_size")?,
            rms_eps: config
                .get("rms_norm_eps")
                .and_then(Value::as_f64)
                .unwrap_or(1e-6) as f32,
            rope_theta,
            rope_layout: RopeLayout::SplitHalf,
            rope_scaling,
            context_length: opt_usize("max_position_embeddings")?.unwrap_or(4096),
            qkv_bias: match arch {
                Arch::Qwen2 => true,
                _ => bool_of("attention_bias", false),
            },
            qk_norm: arch == Arch::Qwen3,
            tied_embeddings: bool_of("tie_word_embeddings", false),
        };
        cfg.check()
    }

    pub(crate) fn check(self) -> Result<ModelConfig, ModelError> {
        let nonzero = [
            ("hidden_size", self.hidden),
            ("num_hidden_layers", self.n_layers),
            ("num_attention_heads", self.n_heads),
            ("num_key_value_heads", self.n_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.ffn),
            ("vocab_size", self.vocab_size),
            ("context_length", self.context_length),
        ];
        for (k, v) in nonzero {
            if v == 0 {
                return Err(invalid(k, "must be positive"));
            }
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(invalid(
                "num_key_value_heads",
                &format!(
                    "{} heads are not a multiple of {}",
                    self.n_heads, self.n_kv_heads
                ),
            ));
        }
        if !self.head_dim.is_multiple_of(2) || self.head_dim > 1024 {
            return Err(invalid("head_dim", "must be even and at most 1024"));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps >= 0.0) {
            return Err(invalid(
                "rms_norm_eps",
                "must be a finite non-negative number",
            ));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return Err(invalid("rope_theta", "must be positive"));
        }
        Ok(self)
    }
}

fn invalid(key: &str, reason: &str) -> ModelError {
    ModelError::InvalidConfig {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "architectures": ["Qwen3ForCausalLM"],
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
            "vocab_size": 1024, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "tie_word_embeddings": true, "max_position_embeddings": 512
        })
    }

    #[test]
    fn reads_qwen3_config() {
        let c = ModelConfig::from_hf(&base()).unwrap();
        assert_eq!(c.arch, Arch::Qwen3);
        assert_eq!((c.head_dim, c.q_width(), c.kv_width()), (32, 128, 64));
        assert!(c.qk_norm && c.tied_embeddings && !c.qkv_bias);
        assert_eq!(c.rope_theta, 1e6);
    }

    #[test]
    fn transformers5_rope_parameters_are_read() {
        let mut v = base();
        v.as_object_mut().unwrap().remove("rope_theta");
        v["rope_parameters"] = json!({"rope_theta": 5e5, "rope_type": "default"});
        assert_eq!(ModelConfig::from_hf(&v).unwrap().rope_theta, 5e5);
    }

    #[test]
    fn unknown_architecture_and_bad_values_are_named() {
        let mut v = base();
        v["architectures"] = json!(["GPTNeoXForCausalLM"]);
        let e = ModelConfig::from_hf(&v).unwrap_err().to_string();
        assert!(e.contains("GPTNeoXForCausalLM"), "{e}");
        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        let e = ModelConfig::from_hf(&v).unwrap_err().to_string();
        assert!(e.contains("num_key_value_heads"), "{e}");
        let mut v = base();
        v.as_object_mut().unwrap().remove("hidden_size");
        assert!(
            matches!(ModelConfig::from_hf(&v), Err(ModelError::MissingConfig(k)) if k == "hidden_size")
        );
        let mut v = base();
        v["hidden_size"] = json!("big");
        assert!(ModelConfig::from_hf(&v).is_err());
    }

    #[test]
    fn llama3_scaling_keeps_high_frequencies_and_divides_low_ones() {
        let mut v = base();
        v["architectures"] = json!(["LlamaForCausalLM"]);
        v["head_dim"] = json!(128);
        v["num_attention_heads"] = json!(4);
        v["rope_theta"] = json!(500000.0);
        v["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192});
        let c = ModelConfig::from_hf(&v).unwrap();
        let f = c.rope_freq_factors().unwrap();
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 8.0);
        assert!(f.iter().all(|&x| (1.0..=8.0).contains(&x)));
    }
}
