//! The `oxllm` command line: `generate` runs one prompt through a model.

#![forbid(unsafe_code)]

mod batch;
mod bench;
mod generate;
mod serve;
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
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
