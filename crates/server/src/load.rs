//! Loading a model and its tokenizer for serving, and starting the engine on them.

use std::path::Path;

use oxllm_engine::{Engine, EngineConfig};
use oxllm_models::{load_model_with, ModelFile};
use oxllm_tok::Tokenizer;

use crate::error::ServerError;

/// Loads `path` (a `.gguf` file or a Hugging Face directory) with its tokenizer, if it has one,
/// and starts the engine. Blocking: call it before the runtime serves, or on a blocking thread.
pub fn start_engine(
    path: &Path,
    config: EngineConfig,
) -> Result<(Engine, Option<Tokenizer>), ServerError> {
    let (file, model) =
        load_model_with(path, config.cpu.weight_layout).map_err(|e| ServerError::Model {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    let tokenizer = match &file {
        ModelFile::Gguf(g) => Some(Tokenizer::from_gguf(g)?),
        ModelFile::Hf(d) if d.path().join("tokenizer.json").exists() => {
            Some(Tokenizer::from_hf_dir(d.path())?)
        }
        ModelFile::Hf(_) => None,
    };
    let engine = Engine::start(model, tokenizer.clone(), config)?;
    Ok((engine, tokenizer))
}
