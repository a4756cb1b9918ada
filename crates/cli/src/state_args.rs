//! The command-line options of the recurrent-state pool of hybrid models (Qwen3.5, Qwen3-Next),
//! shared by `generate` (batch mode) and `serve`, and the start-up lines that report it.

use clap::Args;
use oxllm_engine::{EngineConfig, EngineInfo};

#[derive(Args, Clone, Debug)]
pub struct StateArgs {
    /// Hybrid models: recurrent-state slots for running sequences (bounds concurrency)
    /// [default: --max-num-seqs, within a quarter of --kv-cache-memory].
    #[arg(long)]
    max_state_slots: Option<usize>,
    /// Hybrid models: recurrent-state checkpoints kept for prefix hits (0 disables hits)
    /// [default: what a quarter of --kv-cache-memory holds, at most 256].
    #[arg(long)]
    state_checkpoints: Option<usize>,
    /// Hybrid models: KV blocks (16 tokens each) between recurrent-state checkpoints.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    state_checkpoint_interval: u32,
}

impl StateArgs {
    /// `config` with these options applied.
    pub fn apply(&self, config: EngineConfig) -> EngineConfig {
        EngineConfig {
            max_state_slots: self.max_state_slots,
            num_state_checkpoints: self.state_checkpoints,
            state_checkpoint_interval: self.state_checkpoint_interval as usize,
            ..config
        }
    }
}

/// Prints the recurrent-state pool (nothing for attention-only models) on stderr.
pub fn print_state_summary(info: &EngineInfo) {
    for line in info.state_summary() {
        eprintln!("{line}");
    }
}
