//! `oxllm generate`: load a model, encode the prompt (as is, or as a user message through the
//! model's chat template with `--chat`), run it through the engine as one request, and stream
//! the text until EOS, a stop string or `--max-tokens`. With `--input`, an offline batch.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use oxllm_models::{load_model_with, ModelFile};
use oxllm_tok::{ChatTemplate, ChatTemplateInputs, Tokenizer};

use crate::batch::{run_batch, BatchDefaults};
use crate::state_args::{print_state_summary, StateArgs};
use oxllm_engine::{
    BackendKind, Engine, EngineConfig, EngineInfo, KvCacheSize, PlanMode, RequestEvent,
};
use oxllm_sample::SamplingParams;

#[derive(Args)]
pub struct GenerateArgs {
    /// A .gguf file, a Hugging Face model directory, or a cached model's name (`oxllm models`)
    /// [default: SmolLM2-135M-Instruct Q4_1 in the oxllm cache, fetched by scripts/fetch-model.sh]
    #[arg(long)]
    model: Option<PathBuf>,
    /// Prompt text.
    #[arg(long, conflicts_with_all = ["prompt_ids", "input"], required_unless_present_any = ["prompt_ids", "input"])]
    prompt: Option<String>,
    /// Send --prompt as a user message through the model's chat template (as the server's
    /// /v1/chat/completions does) instead of as raw text.
    #[arg(long, requires = "prompt")]
    chat: bool,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// Offline batch: a JSONL file, one request per line (`prompt` or `prompt_ids`, optional
    /// `max_tokens`, `temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`, `ignore_eos`).
    #[arg(long, requires = "output", conflicts_with = "prompt_ids")]
    input: Option<PathBuf>,
    /// Where batch results go, one JSON line per input line, in input order.
    #[arg(long, requires = "input")]
    output: Option<PathBuf>,
    /// KV cache size in blocks of 16 tokens (batch mode) [default: from --kv-cache-memory].
    #[arg(long)]
    num_blocks: Option<usize>,
    /// KV cache size (batch mode): bytes or with a unit, e.g. 512MiB, 1GiB, 2G.
    #[arg(long, default_value = "1GiB", value_parser = crate::size::parse_bytes)]
    kv_cache_memory: usize,
    /// Most requests in flight at once (batch mode).
    #[arg(long, default_value_t = 64)]
    max_num_seqs: usize,
    /// Token budget per engine step (batch mode).
    #[arg(long, default_value_t = 512)]
    max_num_batched_tokens: usize,
    /// Prompt as comma-separated token ids, for checkpoints without a tokenizer.
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Option<Vec<u32>>,
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// 0 means greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Nucleus sampling: draw from the most likely tokens whose probabilities sum to P.
    #[arg(long, default_value_t = 1.0, conflicts_with = "input")]
    top_p: f32,
    /// Draw from the K most likely tokens only [default: all].
    #[arg(long, conflicts_with = "input")]
    top_k: Option<usize>,
    /// Drop tokens less likely than P times the most likely one.
    #[arg(long, default_value_t = 0.0, conflicts_with = "input")]
    min_p: f32,
    /// Stop before this text (repeatable); it is not printed.
    #[arg(long, conflicts_with = "input")]
    stop: Vec<String>,
    /// Random seed of sampled tokens (temperature > 0). Without it a single prompt draws a new
    /// answer each run; batch lines without a `seed` use this one, or 0, so a batch reproduces.
    #[arg(long)]
    seed: Option<u64>,
    /// Keep generating past the end-of-sequence token up to --max-tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Print one JSON object {"prompt_ids", "ids", "text"} instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Print prefill and decode speed on stderr.
    #[arg(long)]
    timings: bool,
    /// Worker threads [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// `captured`: replay decode and prefill plans captured at start-up; `eager`: build and run
    /// every step's ops as they come (the reference path).
    #[arg(long, default_value = "captured")]
    plan: PlanMode,
    /// K/V cache values: `f16` (half the memory and attention reads), `f32`, or `auto` (f32
    /// for f32 models, f16 otherwise).
    #[arg(long, default_value = "auto")]
    kv_cache_dtype: oxllm_engine::KvCacheDtype,
    /// `cpu` (fast kernels), `reference` (scalar, one thread, no capture; for cross-checks) or
    /// `cuda` (an NVIDIA GPU; dense models; plans replayed as CUDA graphs).
    #[arg(long, default_value = "cpu")]
    backend: BackendKind,
    /// How the CPU backend stores weight matrices: `panels` (repacked for the AVX2 / AVX-512
    /// panel kernels where the CPU has them) or `rows` (row-major blocks as in the file).
    #[arg(long, default_value = "panels")]
    weight_layout: oxllm_engine::WeightLayout,
    #[command(flatten)]
    states: StateArgs,
}

pub fn load_tokenizer(file: &ModelFile) -> Result<Option<Tokenizer>> {
    match file {
        ModelFile::Gguf(g) => Ok(Some(Tokenizer::from_gguf(g)?)),
        ModelFile::Hf(d) if d.path().join("tokenizer.json").exists() => {
            Ok(Some(Tokenizer::from_hf_dir(d.path())?))
        }
        ModelFile::Hf(_) => Ok(None),
    }
}

pub fn run(args: GenerateArgs) -> Result<()> {
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        bail!("--temperature must be a finite number >= 0");
    }
    let path = crate::model_ref::resolve(args.model.as_deref())?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let cpu = oxllm_engine::CpuOptions {
        weight_layout: args.weight_layout,
    };
    let (file, model) = load_model_with(&path, cpu.weight_layout)
        .map_err(|e| crate::model_ref::load_error(&path, e))?;
    let tokenizer = load_tokenizer(&file)?;
    if let (Some(input), Some(output)) = (&args.input, &args.output) {
        let config = EngineConfig {
            max_num_batched_tokens: args.max_num_batched_tokens,
            max_num_seqs: args.max_num_seqs,
            kv_cache: match args.num_blocks {
                Some(n) => KvCacheSize::Blocks(n),
                None => KvCacheSize::Bytes(args.kv_cache_memory),
            },
            threads,
            plan: args.plan,
            backend: args.backend,
            kv_cache_dtype: args.kv_cache_dtype,
            cpu,
            ..EngineConfig::default()
        };
        let config = args.states.apply(config);
        let engine = Engine::start(model, tokenizer.clone(), config)?;
        let info = engine.handle().info().clone();
        print_plans(&info);
        eprintln!(
            "KV cache: {} blocks of {} tokens ({} tokens, {:.1} MiB, {}); max model len {}",
            info.num_blocks,
            info.block_size,
            info.num_blocks.saturating_sub(1) * info.block_size,
            info.kv_bytes as f64 / (1 << 20) as f64,
            info.kv_dtype.name(),
            info.max_model_len
        );
        print_state_summary(&info);
        let defaults = BatchDefaults {
            max_tokens: args.max_tokens,
            temperature: args.temperature,
            seed: Some(args.seed.unwrap_or(0)),
            ignore_eos: args.ignore_eos,
        };
        run_batch(
            &engine.handle(),
            tokenizer.as_ref(),
            &defaults,
            input,
            output,
        )?;
        print_steps(&engine);
        return Ok(());
    }
    let prompt_ids = match (&args.prompt, &args.prompt_ids) {
        (_, Some(ids)) => ids.clone(),
        (Some(text), None) => match &tokenizer {
            Some(t) if args.chat => chat_prompt(t, args.system.as_deref(), text)?,
            Some(t) => t.encode(text, true)?,
            None => bail!(
                "{} has no tokenizer.json: pass --prompt-ids",
                path.display()
            ),
        },
        (None, None) => bail!("pass --prompt, --prompt-ids or --input"),
    };
    if prompt_ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    let ctx = model.config.context_length;
    if prompt_ids.len() + args.max_tokens > ctx {
        bail!(
            "prompt of {} tokens plus --max-tokens {} exceeds the context length of {}",
            prompt_ids.len(),
            args.max_tokens,
            ctx
        );
    }
    // One request through the engine, so single prompts take the same path (and plans) as
    // batches and the server. The KV cache holds just this request.
    let blocks = (prompt_ids.len() + args.max_tokens).div_ceil(16) + 2;
    let config = EngineConfig {
        max_num_seqs: 1,
        kv_cache: KvCacheSize::Blocks(blocks),
        threads,
        plan: args.plan,
        backend: args.backend,
        kv_cache_dtype: args.kv_cache_dtype,
        cpu,
        ..EngineConfig::default()
    };
    let engine = Engine::start(model, tokenizer.clone(), config)?;
    if args.timings {
        print_plans(engine.handle().info());
    }
    let params = SamplingParams {
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k.filter(|&k| k > 0),
        min_p: args.min_p,
        stop: args.stop.clone().into(),
        seed: args.seed,
        ignore_eos: args.ignore_eos,
        ..SamplingParams::greedy()
    };
    params
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid sampling flags: {e}"))?;
    let mut stdout = std::io::stdout().lock();
    let mut out_ids = Vec::with_capacity(args.max_tokens);
    let t0 = Instant::now();
    let mut first_token: Option<Instant> = None;
    let mut stream = engine.handle().submit(oxllm_engine::GenerationRequest {
        prompt_ids: prompt_ids.clone(),
        params,
        choice: 0,
        constraint: None,
    })?;
    while let Some(event) = stream.blocking_next() {
        match event {
            RequestEvent::Delta {
                token_ids, text, ..
            } => {
                if !token_ids.is_empty() && first_token.is_none() {
                    first_token = Some(Instant::now());
                }
                out_ids.extend_from_slice(&token_ids);
                if !args.json {
                    stdout.write_all(text.as_bytes())?;
                    stdout.flush()?;
                }
            }
            RequestEvent::Finished { text, .. } => {
                if !args.json {
                    stdout.write_all(text.as_bytes())?;
                }
                break;
            }
            RequestEvent::Error(e) => bail!("generation failed: {e}"),
        }
    }
    let end = Instant::now();
    let prefill_s = first_token.map_or(0.0, |t| (t - t0).as_secs_f64());
    let decode_s = first_token.map_or(0.0, |t| (end - t).as_secs_f64());
    let decode_steps = out_ids.len().saturating_sub(1);
    let text = match &tokenizer {
        Some(t) => t.decode(&out_ids, true)?,
        None => String::new(),
    };
    if args.json {
        let obj = serde_json::json!({"prompt_ids": prompt_ids, "ids": out_ids, "text": text});
        writeln!(stdout, "{obj}")?;
    } else {
        writeln!(stdout)?;
    }
    if args.timings {
        let decoded = decode_steps;
        eprintln!(
            "prefill: {} tokens in {:.3} s ({:.1} tok/s); decode: {} tokens in {:.3} s ({:.1} tok/s); threads {}",
            prompt_ids.len(),
            prefill_s,
            prompt_ids.len() as f64 / prefill_s.max(1e-9),
            decoded,
            decode_s,
            decoded as f64 / decode_s.max(1e-9),
            threads
        );
        print_steps(&engine);
    }
    Ok(())
}

/// `text` as the user's message (after an optional system message) through the model's chat
/// template, ending with the assistant's turn header; encoded without extra special tokens
/// because the template writes them, as the server's chat endpoint does.
fn chat_prompt(tok: &Tokenizer, system: Option<&str>, text: &str) -> Result<Vec<u32>> {
    let Some(template) = ChatTemplate::from_tokenizer(tok) else {
        bail!(
            "--chat: this model has no chat template; drop --chat to send the prompt as raw text"
        );
    };
    let template = template.context("--chat: the model's chat template does not compile")?;
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(serde_json::json!({"role": "system", "content": system}));
    }
    messages.push(serde_json::json!({"role": "user", "content": text}));
    let rendered = template
        .render(&ChatTemplateInputs {
            messages: &serde_json::Value::Array(messages),
            add_generation_prompt: true,
            tools: None,
            kwargs: None,
        })
        .context("--chat: rendering the chat template")?;
    Ok(tok.encode(&rendered, false)?)
}

/// The start-up capture, on stderr.
fn print_plans(info: &EngineInfo) {
    let p = &info.plans;
    if p.decode_buckets.is_empty() && p.prefill_buckets.is_empty() {
        return;
    }
    eprintln!(
        "plans: decode buckets {:?}, prefill buckets {:?} captured in {:.1} ms ({:.1} MiB of shared buffers; largest plan peak {:.1} MiB of {:.1} MiB without reuse)",
        p.decode_buckets,
        p.prefill_buckets,
        p.capture_ms,
        p.pool_bytes as f64 / (1 << 20) as f64,
        p.peak_bytes as f64 / (1 << 20) as f64,
        p.buffer_bytes as f64 / (1 << 20) as f64
    );
}

/// How many engine steps replayed a plan and how many ran eager, on stderr.
fn print_steps(engine: &Engine) {
    let s = engine.handle().stats();
    eprintln!(
        "steps: {} replayed a captured plan, {} ran eager",
        s.plan_steps, s.eager_steps
    );
}
