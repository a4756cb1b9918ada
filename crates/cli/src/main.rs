//! The `oxllm` command line: `generate` (one prompt or a batch file), `serve` (the HTTP API),
//! `models` (what is in the cache) and `bench`. Failures print one `error:` line and exit 1.

#![forbid(unsafe_code)]

mod batch;
mod bench;
mod generate;
mod logger;
mod model_ref;
mod models;
mod serve;
mod size;
mod state_args;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "oxllm", version, about = "LLM inference and serving engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a continuation of one prompt.
    Generate(generate::GenerateArgs),
    /// Benchmarks: `serve` (load generator against OpenAI-compatible servers), `report`, `generate`.
    Bench(bench::BenchArgs),
    /// Serve the OpenAI-compatible HTTP API (completions, chat, streaming, metrics).
    Serve(serve::ServeArgs),
    /// List the models in the oxllm cache by the names `--model` accepts.
    Models,
}

fn main() {
    logger::init();
    let cli = Cli::parse();
    if let Err(e) = oxllm_kernels::quant::check_isa_cap_env() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
    let result: Result<()> = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Models => models::run(),
    };
    if let Err(e) = result {
        eprintln!("error: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text is already shown
/// (library errors often print their source inline as well as chaining it).
fn one_line(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
