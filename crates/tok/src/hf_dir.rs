//! Loading a Hugging Face model directory: `tokenizer.json` plus its side files.
//!
//! Reads, when present: `tokenizer_config.json` (`bos_token`, `eos_token`, `add_bos_token`,
//! `add_eos_token`, `chat_template`), `chat_template.jinja` (preferred over the config's
//! template, as transformers does) and `generation_config.json` (`bos_token_id`,
//! `eos_token_id` as a number or a list).
//!
//! Guarantees: only `tokenizer.json` is required; a side file that exists but is not valid JSON
//! is an error (never ignored); a token named in the config but absent from the vocabulary is
//! ignored; BOS/EOS are added by this crate only when the config asks for them and the
//! tokenizer.json post-processor does not already add them.

use std::path::Path;

use serde_json::Value;

use crate::error::TokError;
use crate::tokenizer::Tokenizer;

fn read_optional_json(path: &Path) -> Result<Option<Value>, TokError> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|source| TokError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| TokError::Json {
            path: path.to_path_buf(),
            source,
        })
}

/// A special token in tokenizer_config.json: `"<s>"` or `{"content": "<s>", ...}`.
fn token_text(value: Option<&Value>) -> Option<&str> {
    match value? {
        Value::String(s) => Some(s),
        Value::Object(map) => map.get("content")?.as_str(),
        _ => None,
    }
}

/// `chat_template` is a string, or a list of `{"name", "template"}` (pick "default", else first).
fn config_template(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => {
            let template = |item: &Value| item.get("template")?.as_str().map(str::to_string);
            items
                .iter()
                .find(|item| item.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(template)
                .or_else(|| items.iter().find_map(template))
        }
        _ => None,
    }
}

/// Ids from a number or a list of numbers (generation_config's `eos_token_id`).
fn ids_of(value: Option<&Value>) -> Vec<u32> {
    let as_id = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok());
    match value {
        Some(Value::Array(items)) => items.iter().filter_map(as_id).collect(),
        Some(v) => as_id(v).into_iter().collect(),
        None => Vec::new(),
    }
}

impl Tokenizer {
    /// Load `dir/tokenizer.json` and the side files described in the module docs.
    pub fn from_hf_dir(dir: impl AsRef<Path>) -> Result<Self, TokError> {
        let dir = dir.as_ref();
        let mut tok = Tokenizer::from_file(dir.join("tokenizer.json"))?;
        let config = read_optional_json(&dir.join("tokenizer_config.json"))?.unwrap_or_default();
        let generation = read_optional_json(&dir.join("generation_config.json"))?;

        let lookup = |name: &str| token_text(config.get(name)).and_then(|t| tok.token_to_id(t));
        let bos_id = lookup("bos_token").or_else(|| {
            ids_of(generation.as_ref().and_then(|g| g.get("bos_token_id")))
                .first()
                .copied()
        });
        let mut eos_ids: Vec<u32> = lookup("eos_token").into_iter().collect();
        for id in ids_of(generation.as_ref().and_then(|g| g.get("eos_token_id"))) {
            if !eos_ids.contains(&id) && (id as usize) < tok.vocab_size() {
                eos_ids.push(id);
            }
        }

        let jinja = dir.join("chat_template.jinja");
        let chat_template = if jinja.is_file() {
            Some(
                std::fs::read_to_string(&jinja).map_err(|source| TokError::Io {
                    path: jinja.clone(),
                    source,
                })?,
            )
        } else {
            config_template(config.get("chat_template"))
        };

        // What the tokenizer.json pipeline adds by itself.
        let probe = tok
            .inner()
            .encode("", true)
            .map_err(TokError::backend)?
            .get_ids()
            .to_vec();
        let wants = |key: &str| config.get(key).and_then(Value::as_bool) == Some(true);
        let prepend_bos = wants("add_bos_token") && bos_id.is_some_and(|b| !probe.contains(&b));
        let append_eos =
            wants("add_eos_token") && eos_ids.first().is_some_and(|e| !probe.contains(e));

        let spec = tok.spec_mut();
        spec.bos_id = bos_id;
        spec.eos_ids = eos_ids;
        spec.prepend_bos = prepend_bos;
        spec.append_eos = append_eos;
        spec.chat_template = chat_template;
        Ok(tok)
    }
}
