//! `oxllm serve`: claim the listening address, load a model, start the engine, and serve the
//! OpenAI-compatible HTTP API until SIGINT/SIGTERM (then let running requests finish, bounded
//! by `--shutdown-grace`). The address is bound before the model loads, so a port in use or a
//! bad `--host` fails at once.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use oxllm_engine::{Engine, EngineConfig, KvCacheSize, PlanMode};
use oxllm_server::{AppState, ServerConfig, Stopped};

use crate::generate::load_tokenizer;
use crate::state_args::{print_state_summary, StateArgs};

#[derive(Args)]
pub struct ServeArgs {
    /// A .gguf file, a Hugging Face model directory, or a cached model's name (`oxllm models`)
    /// [default: SmolLM2-135M-Instruct Q4_1 in the oxllm cache, fetched by scripts/fetch-model.sh]
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// 0 picks a free port (the chosen one is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// The model name clients send [default: the model file's name without .gguf].
    #[arg(long)]
    served_model_name: Option<String>,
    /// Compute threads [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Most requests running at once.
    #[arg(long, default_value_t = 64)]
    max_num_seqs: usize,
    /// Token budget of one engine step (prefill chunks + decodes).
    #[arg(long, default_value_t = 512)]
    max_num_batched_tokens: usize,
    /// Most prompt tokens one step carries while requests decode (0: no cap, the whole step
    /// budget). A step's length is every decoding request's inter-token latency: the default
    /// keeps it near a decode step's under load (docs/BENCHMARKS.md, sitting 8), while a
    /// prompt arriving alone is still prefilled at the full budget.
    #[arg(long, default_value_t = 32)]
    max_prefill_beside_decode: u64,
    /// KV cache size in blocks of 16 tokens [default: from --kv-cache-memory].
    #[arg(long)]
    num_blocks: Option<usize>,
    /// KV cache size: bytes or with a unit, e.g. 512MiB, 1GiB, 2G.
    #[arg(long, default_value = "1GiB", value_parser = crate::size::parse_bytes)]
    kv_cache_memory: usize,
    /// Longest prompt + completion [default: the model's context length].
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Most requests waiting for a slot; more get 503 with Retry-After.
    #[arg(long, default_value_t = 1024)]
    max_waiting: usize,
    /// Largest accepted request body (larger: 413): bytes or with a unit, e.g. 8MiB.
    #[arg(long, default_value = "8MiB", value_parser = crate::size::parse_bytes)]
    max_body_bytes: usize,
    /// `captured`: replay decode and prefill plans captured at start-up; `eager`: run every
    /// step's ops as they come.
    #[arg(long, default_value = "captured")]
    plan: PlanMode,
    /// K/V cache values: `f16` (half the memory and attention reads), `f32`, or `auto` (f32
    /// for f32 models, f16 otherwise).
    #[arg(long, default_value = "auto")]
    kv_cache_dtype: oxllm_engine::KvCacheDtype,
    /// `cpu` (fast kernels), `reference` (scalar, one thread) or `cuda` (an NVIDIA GPU; dense
    /// models; plans replayed as CUDA graphs).
    #[arg(long, default_value = "cpu")]
    backend: oxllm_engine::BackendKind,
    /// How the CPU backend stores weight matrices: `panels` (repacked for the AVX2 / AVX-512
    /// panel kernels where the CPU has them) or `rows` (row-major blocks as in the file).
    #[arg(long, default_value = "panels")]
    weight_layout: oxllm_engine::WeightLayout,
    /// Constrained decoding: compute token masks on a worker thread while the step's forward
    /// runs (`true`), or on the engine thread before the step (`false`); same output.
    /// [default: on when the compute threads leave a core free, else off: with every core in
    /// the thread pool the worker slowed decode (docs/BENCHMARKS.md, "mask overlap")]
    #[arg(long, action = clap::ArgAction::Set)]
    overlap_masks: Option<bool>,
    /// Seconds running requests get to finish after SIGTERM/SIGINT (match Kubernetes'
    /// `terminationGracePeriodSeconds`, less a few seconds). `/health` answers 503 meanwhile;
    /// a second signal stops at once.
    #[arg(long, default_value_t = 30)]
    shutdown_grace: u64,
    /// Require `Authorization: Bearer <KEY>` on every route but /health (and /metrics unless
    /// --protect-metrics) [default: the OXLLM_API_KEY environment variable, else no key].
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// With an API key, require it on /metrics too.
    #[arg(long)]
    protect_metrics: bool,
    /// Seconds a connection may take to send a request's header (new or kept alive between
    /// requests: idle sockets close after it) and its body (408 past it).
    #[arg(long, default_value_t = 15)]
    header_read_timeout: u64,
    /// Encode special-token spellings typed inside chat message contents (e.g. `<|im_end|>`) as
    /// real control tokens, as vLLM does. By default they are encoded as plain text, so a user
    /// cannot forge a turn (e.g. a system message).
    #[arg(long)]
    allow_special_tokens_in_content: bool,
    /// Let browser pages from ORIGIN call the API (CORS; repeatable; `*` for any). Off by default.
    #[arg(long, value_name = "ORIGIN")]
    cors_allow_origin: Vec<String>,
    /// Tool-call format: `hermes` (`<tool_call>{...}</tool_call>`) or `generic` (one JSON
    /// object, tools described in the system message); default: chosen from the chat template.
    #[arg(long)]
    tool_call_parser: Option<String>,
    /// Publish KV-cache events (block stored / removed, with the documented block hashes) on
    /// `GET /v1/kv_events` as server-sent events, for routers that send a request to the
    /// replica holding its prefix (docs/DEPLOY.md). They carry prompt token ids: keep the
    /// route internal, or set an API key.
    #[arg(long)]
    kv_events: bool,
    /// Publish KV-cache events on a ZeroMQ PUB socket in vLLM's format, configured as vLLM's
    /// `--kv-events-config` (JSON: `enable_kv_cache_events`, `publisher` "zmq", `endpoint`
    /// (`tcp://*:PORT` binds, `tcp://HOST:PORT` connects to a subscriber that binds, as llm-d's
    /// indexer does), `topic`, e.g. `kv@POD@MODEL` for llm-d); docs/DEPLOY.md.
    #[arg(long, value_name = "JSON")]
    kv_events_config: Option<String>,
    #[command(flatten)]
    states: StateArgs,
}

/// The API key: the flag, else `OXLLM_API_KEY` (for secrets kept off the command line).
fn api_key(flag: Option<String>) -> Result<Option<String>> {
    let key = flag.or_else(|| std::env::var("OXLLM_API_KEY").ok());
    match key {
        Some(k) if k.trim().is_empty() => {
            bail!("the API key (--api-key or OXLLM_API_KEY) is empty")
        }
        Some(k) => Ok(Some(k.trim().to_string())),
        None => Ok(None),
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    let path = crate::model_ref::resolve(args.model.as_deref())?;
    let zmq_events = match args.kv_events_config.as_deref() {
        Some(json) => oxllm_server::kv_events_zmq::parse_config(json)?,
        None => None,
    };
    let listener = bind(&args.host, args.port)?;
    let threads = args.threads.unwrap_or_else(available_cores);
    let config = EngineConfig {
        max_num_batched_tokens: args.max_num_batched_tokens,
        max_prefill_beside_decode: (args.max_prefill_beside_decode > 0)
            .then_some(args.max_prefill_beside_decode as usize),
        max_num_seqs: args.max_num_seqs,
        kv_cache: match args.num_blocks {
            Some(n) => KvCacheSize::Blocks(n),
            None => KvCacheSize::Bytes(args.kv_cache_memory),
        },
        max_model_len: args.max_model_len,
        threads,
        plan: args.plan,
        kv_cache_dtype: args.kv_cache_dtype,
        backend: args.backend,
        cpu: oxllm_engine::CpuOptions {
            weight_layout: args.weight_layout,
        },
        overlap_masks: args
            .overlap_masks
            .unwrap_or_else(|| overlap_masks_by_default(threads, available_cores())),
        ..EngineConfig::default()
    };
    let config = args.states.apply(config);
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        let file = path
            .file_name()
            .map_or_else(|| "model".to_string(), |f| f.to_string_lossy().into_owned());
        file.strip_suffix(".gguf").unwrap_or(&file).to_string()
    });
    let (file, model) = oxllm_models::load_model_with(&path, config.cpu.weight_layout)
        .map_err(|e| crate::model_ref::load_error(&path, e))?;
    let tokenizer = load_tokenizer(&file)?;
    let engine = Engine::start(model, tokenizer.clone(), config)?;
    let info = engine.handle().info().clone();
    eprintln!(
        "oxllm serve: {} as `{name}`; KV cache {} blocks of {} tokens ({} tokens, {:.1} MiB, {}); max model len {}; max num seqs {}; {} threads",
        path.display(),
        info.num_blocks,
        info.block_size,
        info.num_blocks.saturating_sub(1) * info.block_size,
        info.kv_bytes as f64 / (1 << 20) as f64,
        info.kv_dtype.name(),
        info.max_model_len,
        info.max_num_seqs,
        threads
    );
    let p = &info.plans;
    if !p.decode_buckets.is_empty() || !p.prefill_buckets.is_empty() {
        eprintln!(
            "oxllm serve: plans: decode buckets {:?}, prefill buckets {:?} captured in {:.1} ms",
            p.decode_buckets, p.prefill_buckets, p.capture_ms
        );
    }
    print_state_summary(&info);
    let server_config = ServerConfig {
        served_model_name: name.clone(),
        model_path: path.display().to_string(),
        max_waiting: args.max_waiting,
        max_body_bytes: args.max_body_bytes,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        api_key: api_key(args.api_key.clone())?,
        protect_metrics: args.protect_metrics,
        cors_allow_origins: args.cors_allow_origin.clone(),
        header_read_timeout: Duration::from_secs(args.header_read_timeout.max(1)),
        special_tokens_in_content: args.allow_special_tokens_in_content,
        tool_call_parser: match args.tool_call_parser.as_deref() {
            None => None,
            Some(name) => Some(oxllm_server::tools::ToolFormat::parse(name).with_context(
                || format!("--tool-call-parser must be hermes or generic, got {name}"),
            )?),
        },
        kv_events: args.kv_events,
    };
    let has_tokenizer = tokenizer.is_some();
    let state = AppState::new(engine.handle(), tokenizer, server_config);
    let chat = match state.template_problem() {
        Some(why) => {
            eprintln!("oxllm serve: chat disabled: {why}");
            false
        }
        None => true,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let stopped = runtime.block_on(async move {
        // Handlers first: a stop signal that comes as soon as we say we listen must drain.
        let signals = oxllm_server::signals();
        let listener = tokio::net::TcpListener::from_std(listener)
            .context("handing the listening socket to the async runtime")?;
        if let Some(zmq) = zmq_events {
            let (endpoint, bind) = (zmq.endpoint.clone(), zmq.bind);
            oxllm_server::kv_events_zmq::start(zmq, state.clone()).await?;
            eprintln!(
                "oxllm serve: KV-cache events (vLLM ZMQ format) {} {endpoint}",
                if bind { "bound on" } else { "connecting to" }
            );
        }
        let addr = listener.local_addr()?;
        eprintln!("oxllm serve: listening on http://{addr}");
        eprintln!("{}", try_example(addr, &name, chat, has_tokenizer));
        let stopped = oxllm_server::serve_until(listener, state, signals).await?;
        anyhow::Ok(stopped)
    })?;
    if stopped == Stopped::Forced {
        // A second Ctrl-C means now: do not wait for the engine's step or the runtime's tasks.
        eprintln!("oxllm serve: stopped at once (second signal)");
        std::process::exit(130);
    }
    eprintln!("oxllm serve: stopped");
    drop(runtime);
    engine.shutdown();
    Ok(())
}

/// Claims `host:port` now, before the model loads; the error says what to change.
fn bind(host: &str, port: u16) -> Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind((host, port)).map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => anyhow!(
            "port {port} on {host} is in use: stop what holds it, or pass another --port (0 picks a free one)"
        ),
        std::io::ErrorKind::AddrNotAvailable => anyhow!(
            "--host {host} is not an address of this machine: use 127.0.0.1 (this machine only) or 0.0.0.0 (all interfaces)"
        ),
        std::io::ErrorKind::PermissionDenied => anyhow!(
            "not allowed to listen on port {port} (ports below 1024 need privileges): pass --port 8000 or another above 1023"
        ),
        _ if is_lookup_failure(&e) => anyhow!(
            "--host {host} is not an IP address or a name this machine resolves: use 127.0.0.1 or 0.0.0.0"
        ),
        _ => anyhow!("cannot listen on {host}:{port}: {e}"),
    })?;
    listener
        .set_nonblocking(true)
        .context("making the listening socket non-blocking")?;
    Ok(listener)
}

/// Name resolution failures come back as `Other`/`Uncategorized` with getaddrinfo's text.
fn is_lookup_failure(e: &std::io::Error) -> bool {
    let text = e.to_string();
    text.contains("lookup")
        || text.contains("Name or service not known")
        || text.contains("resolve")
}

/// The ready-to-run example printed once the server listens: greedy (temperature 0), so a
/// first answer is the model's most likely one; chat only where the model has a template.
fn try_example(addr: std::net::SocketAddr, name: &str, chat: bool, has_tokenizer: bool) -> String {
    let curl = |route: &str, body: String| {
        format!(
            "  curl http://{addr}{route} -H 'Content-Type: application/json' \\\n    -d '{body}'"
        )
    };
    if chat {
        format!(
            "chat page: http://{addr}/\ntry:\n{}",
            curl(
                "/v1/chat/completions",
                format!(
                    r#"{{"model": "{name}", "messages": [{{"role": "user", "content": "What is the capital of France?"}}], "max_tokens": 64, "temperature": 0}}"#
                )
            )
        )
    } else if has_tokenizer {
        format!(
            "try:\n{}",
            curl(
                "/v1/completions",
                format!(
                    r#"{{"model": "{name}", "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0}}"#
                )
            )
        )
    } else {
        format!(
            "this model has no tokenizer: send token ids, e.g.\n{}",
            curl(
                "/v1/completions",
                format!(
                    r#"{{"model": "{name}", "prompt": [1, 2, 3], "max_tokens": 16, "temperature": 0}}"#
                )
            )
        )
    }
}

/// Cores the process may run on (1 when unknown).
fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The mask worker pays only where it has a core of its own: measured on 2 vCPUs, it slowed
/// decode with both in the thread pool (0.89x against 0.93x synchronous) and hid the batch-1
/// mask with one free (1.01x against 0.96x).
fn overlap_masks_by_default(threads: usize, cores: usize) -> bool {
    threads < cores
}

#[cfg(test)]
mod overlap_default_tests {
    use super::overlap_masks_by_default;

    #[test]
    fn the_worker_overlaps_only_where_a_core_is_free() {
        assert!(!overlap_masks_by_default(2, 2));
        assert!(!overlap_masks_by_default(4, 2));
        assert!(overlap_masks_by_default(1, 2));
        assert!(overlap_masks_by_default(15, 16));
    }
}
