//! `oxllm models`: what is in the oxllm cache, by the names `--model` accepts.

use anyhow::Result;

use crate::model_ref::{cached_models, default_model_path, models_dir};

pub fn run() -> Result<()> {
    let models = cached_models();
    if models.is_empty() {
        println!(
            "no models in {} (scripts/fetch-model.sh fetches the default one; put .gguf files or Hugging Face model directories there)",
            models_dir().display()
        );
        return Ok(());
    }
    let width = models.iter().map(|m| m.name.len()).max().unwrap_or(0);
    let default = default_model_path();
    for m in &models {
        let mark = if m.path == default { " (default)" } else { "" };
        println!(
            "{:width$}  {:>9.1} MiB  {}{mark}",
            m.name,
            m.bytes as f64 / (1 << 20) as f64,
            m.path.display()
        );
    }
    Ok(())
}
