//! Hugging Face model directories: `config.json` plus either `model.safetensors` or a sharded
//! `model.safetensors.index.json` whose `weight_map` maps tensor names to shard files.
//!
//! Guarantees: `open` reads and validates everything up front: the config parses as JSON, every
//! shard named by the index is a plain file name inside the directory, is a valid safetensors
//! file, and holds every tensor the index assigns to it. Missing files are
//! [`FormatError::MissingFile`] naming the path. Each shard is mapped once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::safetensors::SafetensorsFile;
use crate::{FormatError, TensorView};

pub const CONFIG_FILE: &str = "config.json";
pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// An open Hugging Face model directory.
#[derive(Debug)]
pub struct HfModelDir {
    path: PathBuf,
    config: Value,
    shards: Vec<SafetensorsFile>,
    /// Tensor name -> index into `shards`.
    map: BTreeMap<String, usize>,
}

fn read_json(path: &Path) -> Result<Value, FormatError> {
    let text = std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            FormatError::MissingFile {
                path: path.to_path_buf(),
            }
        } else {
            FormatError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    serde_json::from_slice(&text).map_err(|source| FormatError::Json {
        path: path.to_path_buf(),
        source,
    })
}

impl HfModelDir {
    pub fn open(dir: impl AsRef<Path>) -> Result<HfModelDir, FormatError> {
        let path = dir.as_ref().to_path_buf();
        let config = read_json(&path.join(CONFIG_FILE))?;
        let single = path.join(SINGLE_FILE);
        let index = path.join(INDEX_FILE);
        let (shards, map) = if single.is_file() {
            let file = SafetensorsFile::open(&single)?;
            let map = file.tensors().iter().map(|t| (t.name.clone(), 0)).collect();
            (vec![file], map)
        } else if index.is_file() {
            open_sharded(&path, &index)?
        } else {
            return Err(FormatError::MissingWeights { dir: path });
        };
        Ok(HfModelDir {
            path,
            config,
            shards,
            map,
        })
    }

    /// The directory this model was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `config.json`, unparsed beyond JSON.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.map.keys().map(String::as_str)
    }

    /// The named tensor; [`FormatError::MissingTensor`] if no shard holds it.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, FormatError> {
        let shard = self
            .map
            .get(name)
            .and_then(|&i| self.shards.get(i))
            .ok_or_else(|| FormatError::MissingTensor(name.to_owned()))?;
        shard.tensor(name)
    }
}

type Shards = (Vec<SafetensorsFile>, BTreeMap<String, usize>);

fn open_sharded(dir: &Path, index: &Path) -> Result<Shards, FormatError> {
    let bad = |reason: String| FormatError::BadIndex {
        path: index.to_path_buf(),
        reason,
    };
    let json = read_json(index)?;
    let weight_map = json
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no \"weight_map\" object".to_owned()))?;
    let mut shard_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut shards = Vec::new();
    let mut map = BTreeMap::new();
    for (tensor, file) in weight_map {
        let file = file
            .as_str()
            .ok_or_else(|| bad(format!("shard for {tensor:?} is not a string")))?;
        let plain = Path::new(file)
            .file_name()
            .is_some_and(|f| f == std::ffi::OsStr::new(file));
        if !plain {
            return Err(bad(format!(
                "shard {file:?} for {tensor:?} is not a plain file name"
            )));
        }
        let id = match shard_ids.get(file) {
            Some(&id) => id,
            None => {
                shards.push(SafetensorsFile::open(dir.join(file))?);
                shard_ids.insert(file, shards.len() - 1);
                shards.len() - 1
            }
        };
        if shards[id].tensor_info(tensor).is_none() {
            return Err(bad(format!("tensor {tensor:?} is not in shard {file:?}")));
        }
        map.insert(tensor.clone(), id);
    }
    Ok((shards, map))
}
