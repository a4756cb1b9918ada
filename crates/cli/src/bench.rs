//! `oxllm bench`: `serve` (load-generate against OpenAI-compatible servers, optionally two
//! interleaved), `report` (ratios, table, plot and docs section from stored JSONL records) and
//! `generate` (offline prefill/decode throughput through the engine).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use oxllm_bench::client::{first_model, Endpoint};
use oxllm_bench::compare::{compare, markdown_table, text_table};
use oxllm_bench::http::Url;
use oxllm_bench::metrics::Slo;
use oxllm_bench::offline::{run_generate, GenerateBench};
use oxllm_bench::record::{append_jsonl, git_commit, read_records, utc_now, Machine, RunRecord};
use oxllm_bench::serve::{block_on, run_bench, runs_table, ServeBench, Target};
use oxllm_bench::workload::{load_dataset, random_prompts, RandomSpec, Workload};
use oxllm_bench::BenchError;
use serde_json::json;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Load-generate against an OpenAI-compatible server (or two, interleaved, with --ab).
    Serve(ServeArgs),
    /// Compare two labels' runs stored in JSONL: ratio table, plot, docs section.
    Report(ReportArgs),
    /// Offline prefill and decode throughput through the engine (no HTTP).
    Generate(GenerateArgs),
    /// Per-op time of one replay of a captured decode plan.
    PlanProfile(PlanProfileArgs),
}

#[derive(Args)]
struct PlanProfileArgs {
    #[arg(long)]
    model: Option<PathBuf>,
    /// Sequences in the decode bucket.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Tokens already in each sequence's context.
    #[arg(long, default_value_t = 128)]
    context: usize,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 50)]
    replays: usize,
    /// K/V cache values: `f16` or `f32` (`auto` is f16, the engine's choice for quantized models).
    #[arg(long, default_value = "auto")]
    kv_cache_dtype: oxllm_engine::KvCacheDtype,
}

#[derive(Clone, Copy, ValueEnum)]
enum EndpointArg {
    Completions,
    Chat,
}

#[derive(Args)]
struct ServeArgs {
    /// Base URL of the server (A).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Model name sent in requests [default: the first of GET /v1/models].
    #[arg(long)]
    model: Option<String>,
    /// Label of server A in reports and records.
    #[arg(long, default_value = "A")]
    label: String,
    /// Second server (B), run interleaved with A: for each repetition and load, A then B.
    #[arg(long)]
    ab: Option<String>,
    #[arg(long)]
    model_b: Option<String>,
    #[arg(long, default_value = "B")]
    label_b: String,
    #[arg(long, value_enum, default_value = "completions")]
    endpoint: EndpointArg,
    /// Requests per run.
    #[arg(long, default_value_t = 64)]
    num_prompts: usize,
    /// Words per random prompt (about one token each for GPT-2-style vocabularies; the server's
    /// usage gives the real count).
    #[arg(long, default_value_t = 128)]
    input_len: usize,
    /// max_tokens per request (random prompts; dataset lines without max_tokens).
    #[arg(long, default_value_t = 128)]
    output_len: usize,
    /// Words of a prefix shared by the random prompts of each run (a workload that measures
    /// prefix caching on purpose; each run draws its own prefix).
    #[arg(long, default_value_t = 0)]
    prefix_len: usize,
    /// Send the same random prompts in every run (by default each repetition and load, and
    /// the warm-up, draw fresh ones, so no server answers a run from its cache of an earlier
    /// one).
    #[arg(long)]
    reuse_prompts: bool,
    /// JSONL workload: {"prompt": "...", "max_tokens": N} per line.
    #[arg(long)]
    dataset: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Closed-loop concurrency levels, a sweep.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    concurrency: Vec<usize>,
    /// Open loop: Poisson arrivals at this many requests/s (replaces the concurrency sweep).
    #[arg(long)]
    request_rate: Option<f64>,
    /// With --request-rate: most requests in flight.
    #[arg(long)]
    max_concurrency: Option<usize>,
    #[arg(long, default_value_t = 1)]
    repeats: usize,
    /// Number of the first repetition in the records (to split repetitions over invocations).
    #[arg(long, default_value_t = 0)]
    repetition_offset: usize,
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Do not send "ignore_eos": true (for servers that reject unknown fields).
    #[arg(long)]
    no_ignore_eos: bool,
    #[arg(long)]
    slo_ttft_ms: Option<f64>,
    #[arg(long)]
    slo_tpot_ms: Option<f64>,
    /// Per-request timeout; a request that runs past it counts as failed.
    #[arg(long, default_value_t = 600.0)]
    timeout_s: f64,
    /// Unrecorded requests sent to each server before measuring.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Append one JSON line per (server, load, repetition) here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw throughput and TTFT against concurrency here (SVG).
    #[arg(long)]
    plot: Option<PathBuf>,
    #[arg(long)]
    no_progress: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// JSONL files written by `bench serve --out`.
    #[arg(long = "in", required = true)]
    inputs: Vec<PathBuf>,
    /// Baseline label (A).
    #[arg(long)]
    a: String,
    /// Label compared against A (ratios are B/A).
    #[arg(long)]
    b: String,
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Rewrite the section between this file's markers (appended if absent).
    #[arg(long)]
    update_doc: Option<PathBuf>,
    /// Section name in the markers.
    #[arg(long, default_value = "bench-vs-llamacpp")]
    section: String,
    /// Text put above the table in the docs section (workload, setup).
    #[arg(long, default_value = "")]
    note: String,
    /// Link to this image from the docs section (path relative to the doc).
    #[arg(long)]
    plot_link: Option<String>,
}

#[derive(Args)]
struct GenerateArgs {
    /// A .gguf file or a Hugging Face model directory [default: SmolLM2-135M-Instruct Q4_1 in
    /// the oxllm cache].
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, value_delimiter = ',', default_value = "128,512")]
    prompt_lens: Vec<usize>,
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,32")]
    batch_sizes: Vec<usize>,
    /// Tokens generated per request in the decode runs.
    #[arg(long, default_value_t = 64)]
    output_len: usize,
    /// Prompt tokens per request in the decode runs; a list (e.g. 128,1024,4096) measures decode
    /// at each context, interleaved within each repetition.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    decode_prompt_len: Vec<usize>,
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Worker threads [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    #[arg(long, default_value_t = 512)]
    max_num_batched_tokens: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// `captured` (replay plans captured at start-up) or `eager`.
    #[arg(long, default_value = "captured")]
    plan: oxllm_engine::PlanMode,
    /// K/V cache values: `f16` (half the memory and attention reads), `f32`, or `auto` (f32
    /// for f32 models, f16 otherwise).
    #[arg(long, default_value = "auto")]
    kv_cache_dtype: oxllm_engine::KvCacheDtype,
    /// `cpu`, `reference` or `cuda` (an NVIDIA GPU; dense models).
    #[arg(long, default_value = "cpu")]
    backend: oxllm_engine::BackendKind,
    /// How the CPU backend stores weight matrices: `panels` (repacked for the AVX2 / AVX-512
    /// panel kernels where the CPU has them) or `rows` (row-major blocks as in the file).
    #[arg(long, default_value = "panels")]
    weight_layout: oxllm_engine::WeightLayout,
    /// K/V pool size, e.g. 4GiB [default: the engine's, 1GiB].
    #[arg(long, value_parser = crate::size::parse_bytes)]
    kv_cache_memory: Option<usize>,
    /// Also time a prompt sharing its first N tokens with the one before it (prefix hit vs
    /// cold, for each --prompt-lens above N); turns prefix caching on.
    #[arg(long, default_value_t = 0)]
    prefix_share: usize,
    /// Constrain the decode requests to the JSON schema in this file (reports grammar compile
    /// time and the mean token-mask time per token).
    #[arg(long)]
    json_schema: Option<PathBuf>,
    /// Constrained decoding: compute token masks on a worker thread while the step's forward
    /// runs (`true`), or on the engine thread before the step (`false`); same output. Off by
    /// default: on 2 cores the worker slowed decode (docs/BENCHMARKS.md, "mask overlap").
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    overlap_masks: bool,
    /// Append one JSON line per measurement here.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Serve(a) => serve(a),
        BenchCommand::Report(a) => report(a),
        BenchCommand::Generate(a) => generate(a),
        BenchCommand::PlanProfile(a) => plan_profile(a),
    }
}

fn serve(a: ServeArgs) -> Result<()> {
    let url = Url::parse(&a.url)?;
    let workload = match &a.dataset {
        Some(p) => Workload::Fixed(load_dataset(p, Some(a.num_prompts), a.output_len)?),
        None => {
            let spec = RandomSpec {
                num: a.num_prompts,
                input_len: a.input_len,
                output_len: a.output_len,
                prefix_len: a.prefix_len,
                seed: a.seed,
            };
            if a.reuse_prompts {
                Workload::Fixed(random_prompts(
                    spec.num,
                    spec.input_len,
                    spec.output_len,
                    spec.prefix_len,
                    spec.seed,
                ))
            } else {
                Workload::Fresh(spec)
            }
        }
    };
    if a.num_prompts == 0 || a.output_len == 0 {
        bail!("--num-prompts and --output-len must be >= 1");
    }
    if !(a.timeout_s.is_finite() && a.timeout_s > 0.0) {
        bail!("--timeout-s must be > 0");
    }
    let model_of = |url: &Url, given: &Option<String>| -> Result<String> {
        match given {
            Some(m) => Ok(m.clone()),
            None => block_on(first_model(url))?.map_err(|e| match e {
                BenchError::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
                    anyhow::anyhow!("no server answers at {url}: start one first (e.g. `oxllm serve`) or pass --url")
                }
                other => anyhow::anyhow!("asking {url} for its model (or pass --model): {other}"),
            }),
        }
    };
    let mut targets = vec![Target {
        label: a.label.clone(),
        model: model_of(&url, &a.model)?,
        url,
    }];
    if let Some(b) = &a.ab {
        if a.label_b == a.label {
            bail!("--label and --label-b must differ");
        }
        let url_b = Url::parse(b)?;
        targets.push(Target {
            label: a.label_b.clone(),
            model: model_of(&url_b, &a.model_b.clone().or(a.model.clone()))?,
            url: url_b,
        });
    }
    let endpoint = match a.endpoint {
        EndpointArg::Completions => Endpoint::Completions,
        EndpointArg::Chat => Endpoint::Chat,
    };
    let slo = Slo {
        ttft_ms: a.slo_ttft_ms,
        tpot_ms: a.slo_tpot_ms,
    };
    let config = json!({
        "endpoint": endpoint,
        "num_prompts": workload.len(),
        "fresh_prompts": matches!(workload, Workload::Fresh(_)),
        "input_len": a.dataset.is_none().then_some(a.input_len),
        "output_len": a.output_len,
        "prefix_len": a.prefix_len,
        "dataset": a.dataset.as_ref().map(|p| p.display().to_string()),
        "seed": a.seed,
        "concurrency": a.concurrency,
        "request_rate": a.request_rate,
        "max_concurrency": a.max_concurrency,
        "repeats": a.repeats,
        "temperature": a.temperature,
        "ignore_eos": !a.no_ignore_eos,
        "slo": slo,
        "timeout_s": a.timeout_s,
        "warmup": a.warmup,
        "targets": targets.iter().map(|t| json!({"label": t.label, "url": t.url.to_string(), "model": t.model})).collect::<Vec<_>>(),
    });
    let bench = ServeBench {
        targets,
        endpoint,
        temperature: a.temperature,
        ignore_eos: !a.no_ignore_eos,
        timeout: Duration::from_secs_f64(a.timeout_s),
        workload,
        concurrency: a.concurrency.clone(),
        request_rate: a.request_rate,
        max_concurrency: a.max_concurrency,
        repeats: a.repeats,
        repetition_offset: a.repetition_offset,
        seed: a.seed,
        slo,
        warmup: a.warmup,
        progress: !a.no_progress,
        out: a.out.clone(),
        config,
        commit: git_commit(),
    };
    let records = block_on(run_bench(&bench))??;
    print!("{}", runs_table(&records));
    if a.ab.is_some() {
        let cmp = compare(&records, &a.label, &a.label_b);
        println!();
        print!("{}", text_table(&cmp, &a.label, &a.label_b));
    }
    if let Some(p) = &a.plot {
        write_plot(p, &records)?;
    }
    let failed: usize = records.iter().map(|r| r.metrics.failed).sum();
    if failed > 0 {
        eprintln!("warning: {failed} requests failed (see the table and the JSONL errors)");
    }
    Ok(())
}

fn write_plot(path: &PathBuf, records: &[RunRecord]) -> Result<()> {
    let model = records.first().map_or("", |r| r.model.as_str());
    let date = records.last().map_or("", |r| r.date.as_str());
    let svg = oxllm_bench::plot::svg(records, &format!("{model}, {date}"));
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

fn report(a: ReportArgs) -> Result<()> {
    let mut records = Vec::new();
    for p in &a.inputs {
        records.extend(read_records(p)?);
    }
    let cmp = compare(&records, &a.a, &a.b);
    if cmp.is_empty() {
        bail!(
            "no runs of {:?} and {:?} with matching load and repetition",
            a.a,
            a.b
        );
    }
    print!("{}", text_table(&cmp, &a.a, &a.b));
    let ours: Vec<RunRecord> = records
        .iter()
        .filter(|r| r.label == a.a || r.label == a.b)
        .cloned()
        .collect();
    if let Some(p) = &a.plot {
        write_plot(p, &ours)?;
    }
    if let Some(doc) = &a.update_doc {
        let commits: Vec<String> = {
            let mut c: Vec<String> = ours.iter().filter_map(|r| r.commit.clone()).collect();
            c.sort();
            c.dedup();
            c.into_iter()
                .map(|c| c[..c.len().min(12)].to_string())
                .collect()
        };
        let dates: Vec<&str> = ours.iter().map(|r| r.date.as_str()).collect();
        let machine = ours
            .first()
            .map(|r| r.machine.clone())
            .unwrap_or_else(Machine::detect);
        let loads: Vec<f64> = ours.iter().filter_map(|r| r.machine.loadavg_1m).collect();
        let load = if loads.is_empty() {
            "unknown".to_string()
        } else {
            let lo = loads.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = loads.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{lo:.2}–{hi:.2}")
        };
        let mut body = String::new();
        if !a.note.is_empty() {
            body.push_str(a.note.trim());
            body.push_str("\n\n");
        }
        body.push_str(&format!(
            "Ratios are {b}/{a} per interleaved pair (median, min–max over pairs); values are medians over pairs.\n\
             Commit {}; {} to {}; {} cores, {}; 1-minute load average when runs ended: {}.\n\n",
            if commits.is_empty() { "unknown".into() } else { commits.join(", ") },
            dates.iter().min().copied().unwrap_or("?"),
            dates.iter().max().copied().unwrap_or("?"),
            machine.cores,
            machine.cpu_model.as_deref().unwrap_or("unknown CPU"),
            load,
            a = a.a,
            b = a.b,
        ));
        body.push_str(&markdown_table(&cmp, &a.a, &a.b));
        if let Some(link) = &a.plot_link {
            body.push_str(&format!(
                "\n![throughput and TTFT against concurrency]({link})\n"
            ));
        }
        body.push_str(&format!(
            "\n_Generated {} by `oxllm bench report`._\n",
            utc_now()
        ));
        oxllm_bench::doc::update_file(doc, &a.section, &body)?;
        eprintln!("updated section {} of {}", a.section, doc.display());
    }
    Ok(())
}

fn generate(a: GenerateArgs) -> Result<()> {
    let path = a
        .model
        .clone()
        .unwrap_or_else(crate::model_ref::default_model_path);
    if !path.exists() {
        bail!(
            "model {} not found (run scripts/fetch-model.sh)",
            path.display()
        );
    }
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let b = GenerateBench {
        prompt_lens: a.prompt_lens.clone(),
        batch_sizes: a.batch_sizes.clone(),
        output_len: a.output_len,
        decode_prompt_lens: a.decode_prompt_len.clone(),
        repeats: a.repeats,
        threads,
        max_num_batched_tokens: a.max_num_batched_tokens,
        seed: a.seed,
        plan: a.plan,
        kv_cache_dtype: a.kv_cache_dtype,
        backend: a.backend,
        weight_layout: a.weight_layout,
        kv_cache_bytes: a.kv_cache_memory,
        prefix_share: a.prefix_share,
        overlap_masks: a.overlap_masks,
        json_schema: match &a.json_schema {
            None => None,
            Some(p) => Some(
                serde_json::from_str(
                    &std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                )
                .with_context(|| format!("{} is not JSON", p.display()))?,
            ),
        },
    };
    let (commit, machine, date) = (git_commit(), Machine::detect(), utc_now());
    println!(
        "{:<11} {:>10} {:>6} {:>4} {:>8} {:>9} {:>10} {:>7}",
        "phase", "prompt_len", "batch", "rep", "tokens", "seconds", "tokens/s", "cached"
    );
    run_generate(&path, &b, |r| {
        println!(
            "{:<11} {:>10} {:>6} {:>4} {:>8} {:>9.3} {:>10.1} {:>7}",
            r.phase,
            r.prompt_len,
            r.batch_size,
            r.repetition,
            r.tokens_timed,
            r.seconds,
            r.tokens_per_s,
            r.cached_tokens
        );
        if let Some(us) = r.mask_us_per_token {
            println!("{:<11} mask {us:.1} us per token", "");
        }
        if let Some(us) = r.advance_us_per_token {
            println!("{:<11} grammar advance {us:.1} us per token", "");
        }
        if let Some(out) = &a.out {
            let mut v = serde_json::to_value(r)?;
            v["model"] = json!(path.display().to_string());
            v["threads"] = json!(threads);
            v["max_num_batched_tokens"] = json!(a.max_num_batched_tokens);
            v["seed"] = json!(a.seed);
            v["plan"] = json!(format!("{:?}", a.plan).to_lowercase());
            v["backend"] = json!(format!("{:?}", a.backend).to_lowercase());
            v["weight_layout"] = json!(a.weight_layout.to_string());
            v["overlap_masks"] = json!(a.overlap_masks);
            v["commit"] = json!(commit);
            v["machine"] = serde_json::to_value(&machine)?;
            v["date"] = json!(date);
            append_jsonl(out, &v)?;
        }
        Ok(())
    })?;
    eprintln!("timed: prefill = submit -> first token (max_tokens 1, alone, distinct random prompts); prefix_cold / prefix_hit = the same for two prompts sharing their first --prefix-share tokens (cached = prompt tokens reused); decode = last request's first token -> batch's last token, tokens in that window");
    Ok(())
}

fn plan_profile(a: PlanProfileArgs) -> Result<()> {
    let path = a
        .model
        .clone()
        .unwrap_or_else(crate::model_ref::default_model_path);
    let (profile, wall) = oxllm_bench::plan_profile::profile_decode_replay(
        &path,
        a.batch,
        a.context,
        a.threads,
        a.replays,
        a.kv_cache_dtype != oxllm_engine::KvCacheDtype::F32,
    )?;
    let timed = profile.total();
    println!(
        "decode replay, batch {} at context {}, {} threads, {} K/V: {:.3} ms per replay ({} replays)",
        a.batch,
        a.context,
        a.threads,
        if a.kv_cache_dtype == oxllm_engine::KvCacheDtype::F32 { "f32" } else { "f16" },
        wall.as_secs_f64() * 1e3,
        a.replays
    );
    println!("{:<14} {:>6} {:>10} {:>7}", "op", "count", "ms", "share");
    let mut ops = profile.ops.clone();
    ops.sort_by_key(|op| std::cmp::Reverse(op.2));
    for (name, count, d) in ops {
        println!(
            "{:<14} {:>6} {:>10.3} {:>6.1}%",
            name,
            count,
            d.as_secs_f64() * 1e3,
            100.0 * d.as_secs_f64() / timed.as_secs_f64().max(1e-12)
        );
    }
    Ok(())
}
