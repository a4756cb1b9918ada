//! Scheduler limits and KV pool shape, validated once at construction.

use crate::error::SchedError;

/// The knobs of one scheduler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Token budget of one step, summed over all scheduled requests.
    pub max_num_batched_tokens: usize,
    /// Most prompt tokens (prefill chunks, recomputation after preemption) a step carries while
    /// some running request is decoding; `None`: the whole budget. A step's duration is every
    /// running request's inter-token latency, so a long prefill chunk beside decodes stalls
    /// them all; a step with no decode ignores the cap (nobody waits on it).
    pub max_prefill_beside_decode: Option<usize>,
    /// Most requests running (holding KV blocks) at once.
    pub max_num_seqs: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Blocks in the KV pool, including the reserved null block.
    pub num_blocks: usize,
    /// Longest sequence (prompt + output) the model accepts.
    pub max_model_len: usize,
    /// Reuse cached blocks of shared prefixes.
    pub enable_prefix_caching: bool,
    /// Hybrid models (sequences carry recurrent state); `None` for attention-only models.
    pub recurrent_states: Option<RecurrentStateConfig>,
}

/// The recurrent-state pool of a hybrid model, as the scheduler counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentStateConfig {
    /// State slots for running sequences (at most this many run at once).
    pub num_slots: usize,
    /// Checkpoint slots for prefix hits (0 disables prefix hits on the model).
    pub num_checkpoints: usize,
    /// A checkpoint every this many blocks.
    pub checkpoint_interval_blocks: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            max_num_batched_tokens: 2048,
            max_prefill_beside_decode: None,
            max_num_seqs: 256,
            block_size: 16,
            num_blocks: 1024,
            max_model_len: 8192,
            enable_prefix_caching: true,
            recurrent_states: None,
        }
    }
}

impl SchedulerConfig {
    pub(crate) fn validate(&self) -> Result<(), SchedError> {
        let zero = [
            ("max_num_batched_tokens", self.max_num_batched_tokens),
            ("max_num_seqs", self.max_num_seqs),
            ("block_size", self.block_size),
            ("max_model_len", self.max_model_len),
        ];
        let cap = (
            "max_prefill_beside_decode",
            self.max_prefill_beside_decode.unwrap_or(1),
        );
        if let Some((name, _)) = zero.iter().chain([&cap]).find(|(_, v)| *v == 0) {
            return Err(SchedError::InvalidConfig(format!(
                "{name} must be at least 1"
            )));
        }
        if let Some(r) = &self.recurrent_states {
            if r.num_slots == 0 || r.checkpoint_interval_blocks == 0 {
                return Err(SchedError::InvalidConfig(
                    "recurrent states need at least 1 slot and a checkpoint interval of at \
                     least 1 block"
                        .into(),
                ));
            }
        }
        if self.num_blocks < 2 {
            return Err(SchedError::InvalidConfig(format!(
                "num_blocks must be at least 2 (block 0 is reserved), got {}",
                self.num_blocks
            )));
        }
        Ok(())
    }

    /// Token slots a single request can ever hold: every block but the null one.
    pub fn max_tokens_in_pool(&self) -> usize {
        (self.num_blocks - 1) * self.block_size
    }
}
