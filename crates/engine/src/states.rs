//! Sizing the recurrent-state pool of hybrid models: state slots for running sequences,
//! checkpoint slots for prefix hits, what they cost, and the start-up lines that say so (in
//! particular when the slots bound concurrency below `max_num_seqs`).
//!
//! Defaults, when the KV cache is sized in bytes: running states and checkpoints each take at
//! most a quarter of the budget (at least one running slot), the attention blocks get the rest.
//! With the cache sized in blocks the state pool comes on top: `max_num_seqs` running slots and
//! as many checkpoints.

use crate::config::{EngineConfig, KvCacheSize};

/// Most checkpoints kept by default.
const DEFAULT_MAX_CHECKPOINTS: usize = 256;

/// The resolved recurrent-state pool of a hybrid model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatePlan {
    /// Bytes of one sequence's state (every linear layer's conv state and recurrent matrix);
    /// also the cost of one checkpoint.
    pub bytes_per_slot: usize,
    /// Slots for running sequences: at most this many sequences run at once.
    pub num_slots: usize,
    /// Checkpoint slots (0: no prefix hits on this model).
    pub num_checkpoints: usize,
    /// Tokens between checkpoints (a whole number of blocks).
    pub checkpoint_interval_tokens: usize,
}

impl StatePlan {
    /// Slots the model's state pool needs: running then checkpoint slots.
    pub fn pool_slots(&self) -> usize {
        self.num_slots + self.num_checkpoints
    }

    pub fn total_bytes(&self) -> usize {
        self.pool_slots() * self.bytes_per_slot
    }

    /// Human-readable start-up lines; the first says when the state slots bound concurrency.
    pub fn describe(&self, max_num_seqs: usize) -> Vec<String> {
        let mib = |b: usize| b as f64 / (1 << 20) as f64;
        let mut lines = vec![format!(
            "recurrent state: {} slots of {:.2} MiB for running sequences ({:.1} MiB)",
            self.num_slots,
            mib(self.bytes_per_slot),
            mib(self.num_slots * self.bytes_per_slot)
        )];
        if self.num_slots < max_num_seqs {
            lines.push(format!(
                "recurrent state: at most {} sequences run at once, below --max-num-seqs {} \
                 (raise --kv-cache-memory or --max-state-slots)",
                self.num_slots, max_num_seqs
            ));
        }
        lines.push(if self.num_checkpoints == 0 {
            "prefix caching: off for this model (no state checkpoints)".into()
        } else {
            format!(
                "prefix caching: a state checkpoint every {} tokens, {} checkpoints of {:.2} MiB \
                 each ({:.1} MiB)",
                self.checkpoint_interval_tokens,
                self.num_checkpoints,
                mib(self.bytes_per_slot),
                mib(self.num_checkpoints * self.bytes_per_slot)
            )
        });
        lines
    }
}

/// The state pool `config` gives a model whose sequences carry `bytes_per_slot` bytes of
/// recurrent state; `None` for attention-only models (0 bytes).
pub fn plan_states(config: &EngineConfig, bytes_per_slot: usize) -> Option<StatePlan> {
    if bytes_per_slot == 0 {
        return None;
    }
    let quarter = match config.kv_cache {
        KvCacheSize::Bytes(b) => Some(b / 4 / bytes_per_slot),
        KvCacheSize::Blocks(_) => None,
    };
    let num_slots = config
        .max_state_slots
        .unwrap_or_else(|| quarter.map_or(config.max_num_seqs, |q| q.min(config.max_num_seqs)))
        .max(1);
    let num_checkpoints = if !config.enable_prefix_caching {
        0
    } else {
        config
            .num_state_checkpoints
            .unwrap_or_else(|| quarter.map_or(num_slots, |q| q.min(DEFAULT_MAX_CHECKPOINTS)))
    };
    Some(StatePlan {
        bytes_per_slot,
        num_slots,
        num_checkpoints,
        checkpoint_interval_tokens: config.state_checkpoint_interval.max(1) * config.block_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_budget_bounds_concurrency_and_says_so() {
        let config = EngineConfig {
            kv_cache: KvCacheSize::Bytes(40 << 20),
            max_num_seqs: 64,
            ..EngineConfig::default()
        };
        // 1 MiB per state: a quarter of 40 MiB holds 10.
        let plan = plan_states(&config, 1 << 20).unwrap();
        assert_eq!((plan.num_slots, plan.num_checkpoints), (10, 10));
        assert_eq!(plan.total_bytes(), 20 << 20);
        let text = plan.describe(64).join("\n");
        assert!(text.contains("at most 10 sequences run at once, below --max-num-seqs 64"));
        assert!(plan_states(&config, 0).is_none());
        let roomy = plan_states(&config, 1024).unwrap();
        assert_eq!(roomy.num_slots, 64);
        assert_eq!(
            roomy.describe(64).len(),
            2,
            "no bound line when not bounded"
        );
        let off = EngineConfig {
            enable_prefix_caching: false,
            max_state_slots: Some(3),
            ..config
        };
        let plan = plan_states(&off, 1 << 20).unwrap();
        assert_eq!((plan.num_slots, plan.num_checkpoints), (3, 0));
    }
}
