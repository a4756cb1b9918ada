//! Offline batch mode: `oxllm generate --input prompts.jsonl --output out.jsonl`.
//!
//! Every valid line is submitted to the engine at once and runs concurrently (continuous
//! batching); results are written in input order. A malformed line becomes an output line with
//! its line number and the reason, and does not stop the others.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, Result};
use oxllm_engine::{EngineHandle, GenerationRequest, RequestStream};
use oxllm_sample::SamplingParams;
use oxllm_tok::Tokenizer;
use serde_json::{json, Value};

/// Per-line settings that fall back to the command line's.
pub struct BatchDefaults {
    pub max_tokens: usize,
    pub temperature: f32,
    pub seed: Option<u64>,
    pub ignore_eos: bool,
}

enum Line {
    Submitted {
        prompt_ids: Vec<u32>,
        stream: RequestStream,
    },
    Failed(String),
}

pub fn run_batch(
    engine: &EngineHandle,
    tokenizer: Option<&Tokenizer>,
    defaults: &BatchDefaults,
    input: &Path,
    output: &Path,
) -> Result<()> {
    let file =
        std::fs::File::open(input).with_context(|| format!("opening {}", input.display()))?;
    let mut lines = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", input.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let entry = match parse_line(&line, tokenizer, defaults) {
            Ok(req) => {
                let prompt_ids = req.prompt_ids.clone();
                match engine.submit(req) {
                    Ok(stream) => Line::Submitted { prompt_ids, stream },
                    Err(e) => Line::Failed(format!("line {}: {e}", i + 1)),
                }
            }
            Err(e) => Line::Failed(format!("line {}: {e}", i + 1)),
        };
        lines.push(entry);
    }
    let n = lines.len();
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?,
    );
    let (mut ok, mut failed) = (0, 0);
    for (index, entry) in lines.into_iter().enumerate() {
        let obj = match entry {
            Line::Failed(error) => {
                failed += 1;
                json!({"index": index, "error": error})
            }
            Line::Submitted { prompt_ids, stream } => match stream.collect_blocking() {
                Ok((ids, text, reason)) => {
                    ok += 1;
                    json!({"index": index, "prompt_ids": prompt_ids, "ids": ids, "text": text,
                           "finish_reason": reason.as_str()})
                }
                Err(error) => {
                    failed += 1;
                    json!({"index": index, "prompt_ids": prompt_ids, "error": error})
                }
            },
        };
        writeln!(out, "{obj}")?;
    }
    out.flush()?;
    eprintln!(
        "{n} lines: {ok} completed, {failed} failed -> {}",
        output.display()
    );
    Ok(())
}

/// Every field a batch line may carry.
const FIELDS: &[&str] = &[
    "prompt",
    "prompt_ids",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "ignore_eos",
];

fn parse_line(
    line: &str,
    tokenizer: Option<&Tokenizer>,
    d: &BatchDefaults,
) -> Result<GenerationRequest, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("invalid JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object")?;
    // A misspelled field ("max_token", "temprature") would otherwise run with the default.
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "unknown field `{unknown}` (known: {})",
            FIELDS.join(", ")
        ));
    }
    let prompt_ids = match (obj.get("prompt"), obj.get("prompt_ids")) {
        (Some(_), Some(_)) => return Err("give either `prompt` or `prompt_ids`, not both".into()),
        (Some(p), None) => {
            let text = p.as_str().ok_or("`prompt` must be a string")?;
            let tok = tokenizer.ok_or("this model has no tokenizer: use `prompt_ids`")?;
            tok.encode(text, true).map_err(|e| e.to_string())?
        }
        (None, Some(ids)) => ids
            .as_array()
            .ok_or("`prompt_ids` must be an array of token ids")?
            .iter()
            .map(|x| {
                x.as_u64()
                    .filter(|&id| id <= u32::MAX as u64)
                    .map(|id| id as u32)
                    .ok_or("`prompt_ids` must hold non-negative integers")
            })
            .collect::<Result<Vec<u32>, _>>()?,
        (None, None) => return Err("missing `prompt` or `prompt_ids`".into()),
    };
    let uint = |k: &str| -> Result<Option<u64>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("`{k}` must be a non-negative integer")),
        }
    };
    let float = |k: &str| -> Result<Option<f32>, String> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .map(|f| Some(f as f32))
                .ok_or_else(|| format!("`{k}` must be a number")),
        }
    };
    let stop = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or("`stop` must hold strings")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`stop` must be a string or a list of strings".into()),
    };
    let ignore_eos = match obj.get("ignore_eos") {
        None | Some(Value::Null) => d.ignore_eos,
        Some(x) => x.as_bool().ok_or("`ignore_eos` must be a boolean")?,
    };
    let params = SamplingParams {
        max_tokens: uint("max_tokens")?.map_or(d.max_tokens, |x| x as usize),
        temperature: float("temperature")?.unwrap_or(d.temperature),
        top_p: float("top_p")?.unwrap_or(1.0),
        top_k: uint("top_k")?.map(|x| x as usize).filter(|&k| k > 0),
        min_p: float("min_p")?.unwrap_or(0.0),
        presence_penalty: float("presence_penalty")?.unwrap_or(0.0),
        frequency_penalty: float("frequency_penalty")?.unwrap_or(0.0),
        repetition_penalty: float("repetition_penalty")?.unwrap_or(1.0),
        seed: uint("seed")?.or(d.seed),
        stop: stop.into(),
        ignore_eos,
        ..SamplingParams::default()
    };
    params.validate().map_err(|e| e.to_string())?;
    Ok(GenerationRequest {
        prompt_ids,
        params,
        choice: 0,
        constraint: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d() -> BatchDefaults {
        BatchDefaults {
            max_tokens: 8,
            temperature: 0.0,
            seed: None,
            ignore_eos: false,
        }
    }

    #[test]
    fn parses_fields_and_names_bad_ones() {
        let r = parse_line(
            r#"{"prompt_ids": [1, 2, 3], "max_tokens": 5, "stop": "x", "top_k": 0, "seed": 3}"#,
            None,
            &d(),
        )
        .unwrap();
        assert_eq!(r.prompt_ids, vec![1, 2, 3]);
        assert_eq!(r.params.max_tokens, 5);
        assert_eq!(&r.params.stop[..], ["x".to_string()]);
        assert_eq!(r.params.top_k, None);
        assert_eq!(r.params.seed, Some(3));
        assert_eq!(r.params.temperature, 0.0);
        for (line, want) in [
            ("not json", "invalid JSON"),
            ("[1]", "JSON object"),
            (r#"{"prompt_ids": [-1]}"#, "non-negative"),
            (r#"{"prompt": "hi"}"#, "no tokenizer"),
            (r#"{}"#, "missing"),
            (r#"{"prompt_ids": [1], "top_p": 3}"#, "top_p"),
            (r#"{"prompt_ids": [1], "max_tokens": "x"}"#, "max_tokens"),
            (r#"{"prompt_ids": [1], "stop": 5}"#, "stop"),
            (
                r#"{"prompt_ids": [1], "max_token": 5}"#,
                "unknown field `max_token`",
            ),
            (
                r#"{"prompt_ids": [1], "temprature": 0}"#,
                "unknown field `temprature`",
            ),
        ] {
            let e = parse_line(line, None, &d()).err().unwrap();
            assert!(e.contains(want), "{line}: {e}");
        }
    }
}
