//! `bench generate`: the engine without HTTP, for kernel and plan work.
//!
//! What is timed, exactly:
//! - prefill: one request of `prompt_len` tokens (distinct random text per repetition, prefix
//!   caching off) with `max_tokens` 1, alone in the engine; wall time from `submit` to the
//!   end of the step that sampled its first token = the prefill forward pass (one step when
//!   `prompt_len` ≤ `max_num_batched_tokens`, else chunked) + sampling one token.
//!   tokens/s = `prompt_len` / that time.
//! - decode: `batch_size` requests of `decode_prompt_len` tokens each (for each of
//!   `decode_prompt_lens`, interleaved within each repetition so load drift hits every context
//!   alike), `output_len` tokens each,
//!   `ignore_eos`, submitted as one group (`EngineHandle::submit_all`, admitted before the
//!   engine's next step). The clock starts when the last request's first token
//!   is produced (every prefill is done) and stops when the last token of any request is;
//!   tokens/s = tokens produced inside that window / its length. Prefill is excluded; the
//!   window is pure batched decode (plus per-step scheduling and sampling).
//!
//! - prefix hit (`prefix_share` > 0, prefix caching on): per prompt length above it, two
//!   requests of that length sharing their first `prefix_share` tokens, one after the other,
//!   each timed like a prefill. The first (`prefix_cold`) finds nothing cached, the second
//!   (`prefix_hit`) reuses the cached blocks (and, on hybrids, a recurrent-state checkpoint);
//!   `cached_tokens` says how many prompt tokens it skipped.
//!
//! - constrained decode (`json_schema` set): the decode requests follow that JSON schema (one
//!   compiled grammar, cloned per request); a `compile` record times its first compilation,
//!   and each decode record carries the mean time the engine spent computing a token mask
//!   and advancing a grammar past a sampled token.
//!
//! Every time is the engine's stamp on a delta (`produced_at`, taken when the step that
//! sampled it returned), never the instant a reader thread saw it: on a loaded machine a
//! reader may run late, and the window must not depend on thread scheduling.
//!
//! One warm-up request runs first (thread pool start, page faults on the mapped weights).

use std::path::Path;
use std::time::Instant;

use oxllm_engine::{
    Engine, EngineConfig, GenerationRequest, PlanMode, RequestEvent, RequestStream,
};
use oxllm_models::{load_model_with, ModelFile};
use oxllm_sample::SamplingParams;
use oxllm_structured::{ConstraintSpec, GrammarCompiler};
use oxllm_tok::Tokenizer;
use serde::Serialize;

use crate::error::{BenchError, Result};
use crate::workload::{random_words, SplitMix64};

#[derive(Clone, Debug)]
pub struct GenerateBench {
    pub prompt_lens: Vec<usize>,
    pub batch_sizes: Vec<usize>,
    pub output_len: usize,
    pub decode_prompt_lens: Vec<usize>,
    pub repeats: usize,
    pub threads: usize,
    pub max_num_batched_tokens: usize,
    pub seed: u64,
    pub plan: PlanMode,
    pub kv_cache_dtype: oxllm_engine::KvCacheDtype,
    pub backend: oxllm_engine::BackendKind,
    /// How the CPU backend stores weight matrices.
    pub weight_layout: oxllm_engine::WeightLayout,
    /// K/V pool bytes (`None`: the engine's default).
    pub kv_cache_bytes: Option<usize>,
    /// Tokens shared by the prompts of the prefix-hit runs (0: no such runs, prefix caching
    /// off).
    pub prefix_share: usize,
    /// Constrain the decode requests to this JSON schema.
    pub json_schema: Option<serde_json::Value>,
    /// Constrained decoding: masks computed while the forward runs (`EngineConfig::overlap_masks`).
    pub overlap_masks: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct GenerateRecord {
    /// "generate".
    pub kind: String,
    /// "prefill" or "decode".
    pub phase: String,
    pub repetition: usize,
    pub prompt_len: usize,
    pub batch_size: usize,
    pub output_len: usize,
    pub tokens_timed: usize,
    pub seconds: f64,
    pub tokens_per_s: f64,
    pub timed: String,
    /// Prompt tokens the prefix cache supplied (0 outside the prefix-hit runs).
    pub cached_tokens: usize,
    /// Constrained decode: mean microseconds per token mask over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask_us_per_token: Option<f64>,
    /// Constrained decode: mean microseconds per grammar advance (one per sampled token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advance_us_per_token: Option<f64>,
}

fn ids_of_len(
    tok: Option<&Tokenizer>,
    vocab: usize,
    len: usize,
    rng: &mut SplitMix64,
) -> Result<Vec<u32>> {
    let Some(tok) = tok else {
        return Ok((0..len).map(|_| rng.below(vocab.max(1)) as u32).collect());
    };
    let mut ids = Vec::new();
    while ids.len() < len {
        let text = format!(" {}", random_words(rng, len.max(8)));
        ids.extend(
            tok.encode(&text, false)
                .map_err(|e| BenchError::Engine(e.to_string()))?,
        );
    }
    ids.truncate(len);
    Ok(ids)
}

fn request(ids: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        prompt_ids: ids,
        params: SamplingParams {
            max_tokens,
            ignore_eos: true,
            ..SamplingParams::greedy()
        },
        choice: 0,
        constraint: None,
    }
}

/// (production time, tokens) of each delta until the stream ends.
fn drain(s: RequestStream) -> Result<Vec<(Instant, usize)>> {
    crate::serve::block_on(drain_async(s))?
}

/// `drain` of every stream, on one thread (one reader thread per stream made every step wake
/// as many threads as there were requests, which on a machine with no idle core took that
/// time from the engine). Times are the engine's, so when the reader runs does not matter.
fn drain_all(streams: Vec<RequestStream>) -> Result<Vec<Vec<(Instant, usize)>>> {
    crate::serve::block_on(async move {
        let mut set = tokio::task::JoinSet::new();
        let n = streams.len();
        for (i, s) in streams.into_iter().enumerate() {
            set.spawn(async move { (i, drain_async(s).await) });
        }
        let mut out: Vec<Vec<(Instant, usize)>> = vec![Vec::new(); n];
        while let Some(joined) = set.join_next().await {
            let (i, timeline) =
                joined.map_err(|_| BenchError::Engine("a reader task panicked".into()))?;
            out[i] = timeline?;
        }
        Ok(out)
    })?
}

/// [`drain`], awaiting each event; each delta carries the instant the engine produced it.
async fn drain_async(mut s: RequestStream) -> Result<Vec<(Instant, usize)>> {
    let mut out = Vec::new();
    while let Some(ev) = s.next().await {
        match ev {
            RequestEvent::Delta {
                token_ids,
                produced_at,
                ..
            } => {
                if !token_ids.is_empty() {
                    out.push((produced_at, token_ids.len()));
                }
            }
            RequestEvent::Finished { .. } => return Ok(out),
            RequestEvent::Error(e) => return Err(BenchError::Engine(e.to_string())),
        }
    }
    Err(BenchError::Engine("the engine stopped mid-request".into()))
}

/// Seconds from `submitted` until the engine produced the stream's first token, and the prompt
/// tokens the prefix cache supplied; drains the stream.
fn time_first_token(submitted: Instant, mut s: RequestStream) -> Result<(f64, usize)> {
    let mut first = None;
    while let Some(ev) = s.blocking_next() {
        match ev {
            RequestEvent::Delta {
                token_ids,
                produced_at,
                ..
            } if !token_ids.is_empty() => {
                first.get_or_insert_with(|| {
                    produced_at
                        .saturating_duration_since(submitted)
                        .as_secs_f64()
                });
            }
            RequestEvent::Finished { cached_tokens, .. } => {
                let secs = first.ok_or_else(|| BenchError::Engine("no token came back".into()))?;
                return Ok((secs, cached_tokens));
            }
            RequestEvent::Error(e) => return Err(BenchError::Engine(e.to_string())),
            RequestEvent::Delta { .. } => {}
        }
    }
    Err(BenchError::Engine("the engine stopped mid-request".into()))
}

/// Loads the model and runs the benchmark; `sink` gets each record as it is measured.
pub fn run_generate(
    model_path: &Path,
    b: &GenerateBench,
    mut sink: impl FnMut(&GenerateRecord) -> Result<()>,
) -> Result<()> {
    if b.repeats == 0 || b.output_len < 2 || b.threads == 0 {
        return Err(BenchError::Config(
            "--repeats and --threads must be >= 1 and --output-len >= 2".into(),
        ));
    }
    let (file, model) = load_model_with(model_path, b.weight_layout)
        .map_err(|e| BenchError::Engine(e.to_string()))?;
    let tok = match &file {
        ModelFile::Gguf(g) => {
            Some(Tokenizer::from_gguf(g).map_err(|e| BenchError::Engine(e.to_string()))?)
        }
        ModelFile::Hf(d) if d.path().join("tokenizer.json").exists() => {
            Some(Tokenizer::from_hf_dir(d.path()).map_err(|e| BenchError::Engine(e.to_string()))?)
        }
        ModelFile::Hf(_) => None,
    };
    let vocab = model.config.vocab_size;
    let max_batch = b.batch_sizes.iter().copied().max().unwrap_or(1).max(1);
    let config = EngineConfig {
        max_num_seqs: max_batch,
        max_num_batched_tokens: b.max_num_batched_tokens,
        enable_prefix_caching: b.prefix_share > 0,
        threads: b.threads,
        plan: b.plan,
        kv_cache_dtype: b.kv_cache_dtype,
        backend: b.backend,
        cpu: oxllm_engine::CpuOptions {
            weight_layout: b.weight_layout,
        },
        kv_cache: match b.kv_cache_bytes {
            Some(n) => oxllm_engine::KvCacheSize::Bytes(n),
            None => EngineConfig::default().kv_cache,
        },
        overlap_masks: b.overlap_masks,
        ..EngineConfig::default()
    };
    let engine =
        Engine::start(model, tok.clone(), config).map_err(|e| BenchError::Engine(e.to_string()))?;
    let h = engine.handle();
    let submit = |r| h.submit(r).map_err(|e| BenchError::Engine(e.to_string()));
    let mut rng = SplitMix64::new(b.seed);

    drain(submit(request(
        ids_of_len(tok.as_ref(), vocab, 16, &mut rng)?,
        4,
    ))?)?;

    let constraint = match (&b.json_schema, tok.as_ref()) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(BenchError::Config(
                "--json-schema needs a model with a tokenizer".into(),
            ))
        }
        (Some(schema), Some(tok)) => {
            let err = |e: oxllm_structured::StructuredError| BenchError::Config(e.to_string());
            let compiler = GrammarCompiler::new(tok, vocab).map_err(err)?;
            let t0 = Instant::now();
            let c = compiler
                .compile(&ConstraintSpec::JsonSchema(schema.clone()))
                .map_err(err)?;
            let secs = t0.elapsed().as_secs_f64();
            sink(&GenerateRecord {
                kind: "generate".into(),
                phase: "compile".into(),
                repetition: 0,
                prompt_len: 0,
                batch_size: 1,
                output_len: 0,
                tokens_timed: 0,
                seconds: secs,
                tokens_per_s: 0.0,
                timed: "first compilation of the JSON schema's grammar (token trie built before)"
                    .into(),
                cached_tokens: 0,
                mask_us_per_token: None,
                advance_us_per_token: None,
            })?;
            Some(c)
        }
    };

    for &len in &b.prompt_lens {
        for rep in 0..b.repeats {
            let ids = ids_of_len(tok.as_ref(), vocab, len, &mut rng)?;
            let submitted = Instant::now();
            let (secs, _) = time_first_token(submitted, submit(request(ids, 1))?)?;
            sink(&GenerateRecord {
                kind: "generate".into(),
                phase: "prefill".into(),
                repetition: rep,
                prompt_len: len,
                batch_size: 1,
                output_len: 1,
                tokens_timed: len,
                seconds: secs,
                tokens_per_s: len as f64 / secs.max(1e-12),
                timed: "submit -> first token of one request with max_tokens 1 (prefill forward + 1 sample)".into(),
                cached_tokens: 0,
                mask_us_per_token: None,
                advance_us_per_token: None,
            })?;
        }
    }

    let shared_lens = b
        .prompt_lens
        .iter()
        .filter(|&&l| b.prefix_share > 0 && l > b.prefix_share);
    for &len in shared_lens {
        for rep in 0..b.repeats {
            let shared = ids_of_len(tok.as_ref(), vocab, b.prefix_share, &mut rng)?;
            for phase in ["prefix_cold", "prefix_hit"] {
                let mut ids = shared.clone();
                ids.extend(ids_of_len(
                    tok.as_ref(),
                    vocab,
                    len - b.prefix_share,
                    &mut rng,
                )?);
                let submitted = Instant::now();
                let (secs, cached) = time_first_token(submitted, submit(request(ids, 1))?)?;
                sink(&GenerateRecord {
                    kind: "generate".into(),
                    phase: phase.into(),
                    repetition: rep,
                    prompt_len: len,
                    batch_size: 1,
                    output_len: 1,
                    tokens_timed: len,
                    seconds: secs,
                    tokens_per_s: len as f64 / secs.max(1e-12),
                    timed: format!("submit -> first token of one request with max_tokens 1 whose first {} tokens the previous request shared (prefix_cold: none before it)", b.prefix_share),
                    cached_tokens: cached,
                    mask_us_per_token: None,
                    advance_us_per_token: None,
                })?;
            }
        }
    }

    for rep in 0..b.repeats {
        for &ctx in &b.decode_prompt_lens {
            for &bs in &b.batch_sizes {
                let masks_before = h.stats();
                let batch = (0..bs)
                    .map(|_| {
                        let mut r = request(
                            ids_of_len(tok.as_ref(), vocab, ctx, &mut rng)?,
                            b.output_len,
                        );
                        r.constraint = constraint.clone().map(Box::new);
                        Ok(r)
                    })
                    .collect::<Result<Vec<_>>>()?;
                // One submission: the engine admits the whole batch before its next step, so
                // every prefill shares the first step (when the budget holds them) and the
                // decode window is the same steps whatever the submitting thread's timing.
                let streams = h
                    .submit_all(batch)
                    .map_err(|e| BenchError::Engine(e.to_string()))?;
                let timelines = drain_all(streams)?;
                let start = timelines
                    .iter()
                    .filter_map(|t| t.first().map(|x| x.0))
                    .max()
                    .ok_or_else(|| BenchError::Engine("no tokens came back".into()))?;
                let end = timelines
                    .iter()
                    .filter_map(|t| t.last().map(|x| x.0))
                    .max()
                    .unwrap_or(start);
                let tokens: usize = timelines
                    .iter()
                    .flat_map(|t| t.iter().filter(|(at, _)| *at > start).map(|(_, n)| n))
                    .sum();
                let secs = (end - start).as_secs_f64();
                let masks_after = h.stats();
                let masks = masks_after.masks_computed - masks_before.masks_computed;
                let mask_us_per_token = (masks > 0).then(|| {
                    (masks_after.mask_seconds - masks_before.mask_seconds) * 1e6 / masks as f64
                });
                let advances = masks_after.grammar_advances - masks_before.grammar_advances;
                let advance_us_per_token = (advances > 0).then(|| {
                    (masks_after.grammar_advance_seconds - masks_before.grammar_advance_seconds)
                        * 1e6
                        / advances as f64
                });
                sink(&GenerateRecord {
                kind: "generate".into(),
                phase: "decode".into(),
                repetition: rep,
                prompt_len: ctx,
                batch_size: bs,
                output_len: b.output_len,
                tokens_timed: tokens,
                seconds: secs,
                tokens_per_s: tokens as f64 / secs.max(1e-12),
                timed: "last request's first token -> last token of the batch (engine step stamps); tokens produced in that window".into(),
                cached_tokens: 0,
                mask_us_per_token,
                advance_us_per_token,
            })?;
            }
        }
    }
    engine.shutdown();
    Ok(())
}
