//! What `--model` names: a `.gguf` file, a Hugging Face model directory, or the name of a model
//! in the oxllm cache (`oxllm models` lists them). Resolution never downloads anything; a value
//! that looks like a Hugging Face model id gets an error saying what to pass instead.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// The cache that scripts/fetch-model.sh fills: `$OXLLM_CACHE`, else `~/.cache/oxllm`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("OXLLM_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/oxllm")))
        .unwrap_or_else(|| PathBuf::from(".cache/oxllm"))
}

/// Where cached models live; each `.gguf` file or model directory in it is one model.
pub fn models_dir() -> PathBuf {
    cache_dir().join("models")
}

/// The model run when `--model` is absent.
pub fn default_model_path() -> PathBuf {
    models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// One model in the cache: the name `--model` accepts and where it is.
pub struct CachedModel {
    pub name: String,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Every model in the cache, sorted by name: `.gguf` files (named without the extension) and
/// directories holding a `config.json` (named as the directory). An absent cache is empty.
pub fn cached_models() -> Vec<CachedModel> {
    let Ok(entries) = std::fs::read_dir(models_dir()) else {
        return Vec::new();
    };
    let mut models: Vec<CachedModel> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let path = e.path();
            let file_name = e.file_name().to_string_lossy().into_owned();
            if path.is_file() {
                let name = file_name.strip_suffix(".gguf")?.to_string();
                let bytes = e.metadata().map_or(0, |m| m.len());
                Some(CachedModel { name, path, bytes })
            } else if path.join("config.json").is_file() {
                let bytes = dir_bytes(&path);
                Some(CachedModel {
                    name: file_name,
                    path,
                    bytes,
                })
            } else {
                None
            }
        })
        .collect();
    models.sort_by(|a, b| a.name.cmp(&b.name));
    models
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|e| e.ok()?.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    })
}

/// The path `--model` stands for: the value itself when it exists, else a cached model of that
/// name; with no value, the default model. Errors say what to do next.
pub fn resolve(given: Option<&Path>) -> Result<PathBuf> {
    let Some(given) = given else {
        let path = default_model_path();
        if !path.exists() {
            bail!(
                "the default model is not downloaded yet ({} is absent): run scripts/fetch-model.sh, or pass --model",
                path.display()
            );
        }
        return Ok(path);
    };
    if given.exists() {
        return Ok(given.to_path_buf());
    }
    let text = given.to_string_lossy();
    if let Some(m) = cached_models().into_iter().find(|m| m.name == text) {
        return Ok(m.path);
    }
    let names: Vec<String> = cached_models().into_iter().map(|m| m.name).collect();
    let available = if names.is_empty() {
        format!("the cache {} holds no models", models_dir().display())
    } else {
        format!("cached models: {}", names.join(", "))
    };
    if looks_like_hub_id(&text) {
        bail!(
            "`{text}` looks like a Hugging Face model id, and oxllm does not download models. Pass a local \
             .gguf file, or a directory with config.json, *.safetensors and tokenizer.json (for example \
             `huggingface-cli download {text} --local-dir {}/{}`), or a cached model's name ({available})",
            models_dir().display(),
            text.rsplit('/').next().unwrap_or(&text)
        );
    }
    bail!(
        "model `{text}` not found: pass a .gguf file, a Hugging Face model directory, or a cached model's name ({available}; `oxllm models` lists them)"
    )
}

/// A failed load as one message naming the model once (format errors already name the file).
pub fn load_error(path: &Path, e: impl std::fmt::Display) -> anyhow::Error {
    let message = e.to_string();
    let shown = path.display().to_string();
    if message.contains(&shown) {
        anyhow::anyhow!("cannot load the model: {message}")
    } else {
        anyhow::anyhow!("cannot load the model {shown}: {message}")
    }
}

/// `owner/name` with no other path structure: what the Hugging Face Hub calls a model id.
fn looks_like_hub_id(text: &str) -> bool {
    let mut parts = text.split('/');
    let (Some(owner), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let plain = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    plain(owner) && plain(name) && !name.ends_with(".gguf")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_told_apart_from_paths() {
        assert!(looks_like_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"));
        assert!(looks_like_hub_id("Qwen/Qwen3-0.6B"));
        for path in [
            "/abs/model",
            "./dir/x",
            "a/b/c",
            "models/x.gguf",
            "plain",
            "../x",
        ] {
            assert!(!looks_like_hub_id(path), "{path}");
        }
    }
}
