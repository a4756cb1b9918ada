//! The manager's hybrid-model side: recurrent-state slots held by requests, and checkpoints of
//! the recurrent state at block boundaries (every `interval_blocks` blocks) for prefix hits.
//!
//! Slot ids form one space shared with the model's state pool: running slots are
//! `0..num_slots`, checkpoint slots `num_slots..num_slots + num_checkpoints`.
//!
//! Guarantees, on top of the manager's (checked by `check_invariants`): a request holds a state
//! slot exactly while it holds a table; a prefix hit of a hybrid request ends at a boundary
//! whose checkpoint is committed; a planned checkpoint lies inside the step that writes it.

use oxllm_core::{ReqId, TokenId};

use crate::checkpoints::{CheckpointStats, StateCheckpoints};
use crate::error::{InvariantViolation, KvError};
use crate::hash::{hash_block, BlockHash};
use crate::manager::{ComputedBlocks, KvCacheManager};
use crate::state_slots::StateSlots;

/// A checkpoint the forward pass must take: after the sequence's first `num_tokens` tokens,
/// copy its recurrent state into `slot`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedCheckpoint {
    pub num_tokens: usize,
    pub slot: u32,
}

impl KvCacheManager {
    /// Tracks recurrent states too: `num_slots` running slots (at least 1) and, for prefix
    /// hits, `num_checkpoints` checkpoints taken every `interval_blocks` blocks (at least 1).
    pub fn with_recurrent_states(
        mut self,
        num_slots: usize,
        num_checkpoints: usize,
        interval_blocks: usize,
    ) -> Result<Self, KvError> {
        if num_slots == 0 || interval_blocks == 0 {
            return Err(KvError::InvalidStateConfig(format!(
                "need at least 1 state slot and a checkpoint interval of at least 1 block \
                 (got {num_slots} slots, interval {interval_blocks})"
            )));
        }
        if num_slots + num_checkpoints > u32::MAX as usize {
            return Err(KvError::InvalidStateConfig("too many state slots".into()));
        }
        self.states = Some(StateSlots::new(num_slots));
        self.checkpoints = Some(StateCheckpoints::new(
            num_slots as u32,
            num_checkpoints,
            interval_blocks,
        ));
        Ok(self)
    }

    /// True for hybrid models (requests hold recurrent-state slots).
    pub fn has_recurrent_states(&self) -> bool {
        self.states.is_some()
    }

    /// The recurrent-state slot `req_id` holds.
    pub fn state_slot(&self, req_id: ReqId) -> Option<u32> {
        self.states.as_ref()?.slot_of(req_id)
    }

    /// The running state slots, read-only (`None` for attention-only models).
    pub fn state_slots(&self) -> Option<&StateSlots> {
        self.states.as_ref()
    }

    pub fn checkpoint_stats(&self) -> Option<CheckpointStats> {
        self.checkpoints.as_ref().map(|c| c.stats())
    }

    /// Cuts a prefix hit back to the longest boundary with a committed checkpoint (no hit if
    /// there is none).
    pub(crate) fn cut_to_checkpoint(&self, hit: &mut ComputedBlocks) {
        let found = self.checkpoints.as_ref().and_then(|cp| {
            (1..=hit.hashes.len())
                .rev()
                .find_map(|i| cp.lookup(hit.hashes[i - 1]).map(|slot| (i, slot)))
        });
        let keep = found.map_or(0, |(i, _)| i);
        hit.blocks.truncate(keep);
        hit.hashes.truncate(keep);
        hit.restore = found.map(|(i, slot)| (slot, hit.hashes[i - 1]));
    }

    /// Reserves the checkpoints `req_id`'s next step must take: one per boundary (a multiple of
    /// the interval) in `(start, end]` that is not checkpointed yet, as far as free or evictable
    /// checkpoint slots allow. `tokens` is the request's whole sequence (at least `end` long).
    /// Empty for attention-only models or with prefix caching off.
    pub fn plan_checkpoints(
        &mut self,
        req_id: ReqId,
        tokens: &[TokenId],
        start: usize,
        end: usize,
        extra: Option<u64>,
    ) -> Result<Vec<PlannedCheckpoint>, KvError> {
        let block_size = self.block_size();
        let Some(cp) = self.checkpoints.as_mut() else {
            return Ok(Vec::new());
        };
        let every = cp.interval_blocks() * block_size;
        if !self.enable_prefix_caching || cp.capacity() == 0 || end / every <= start / every {
            return Ok(Vec::new());
        }
        if end > tokens.len() {
            return Err(KvError::MoreComputedThanKnown {
                computed: end,
                known: tokens.len(),
            });
        }
        let entry = self
            .requests
            .get(&req_id)
            .ok_or(KvError::UnknownRequest(req_id))?;
        let mut hashes: Vec<BlockHash> = entry.block_hashes.clone();
        let mut planned = Vec::new();
        let mut boundary = (start / every + 1) * every;
        while boundary <= end {
            let last = boundary / block_size - 1;
            while hashes.len() <= last {
                let i = hashes.len();
                let parent = i.checked_sub(1).map(|p| hashes[p]);
                let chunk = &tokens[i * block_size..(i + 1) * block_size];
                hashes.push(hash_block(parent, chunk, extra));
            }
            if cp.lookup(hashes[last]).is_none() {
                if let Some(slot) = cp.reserve(hashes[last]) {
                    planned.push(PlannedCheckpoint {
                        num_tokens: boundary,
                        slot,
                    });
                }
            }
            boundary += every;
        }
        Ok(planned)
    }

    /// Makes a planned checkpoint findable: its step ran and wrote the state.
    pub fn commit_checkpoint(&mut self, slot: u32) {
        if let Some(cp) = self.checkpoints.as_mut() {
            cp.commit(slot);
        }
        self.debug_check_states();
    }

    /// Frees a planned checkpoint whose step did not complete.
    pub fn discard_checkpoint(&mut self, slot: u32) {
        if let Some(cp) = self.checkpoints.as_mut() {
            cp.discard(slot);
        }
        self.debug_check_states();
    }

    fn debug_check_states(&self) {
        #[cfg(debug_assertions)]
        if let Err(e) = self.check_state_invariants() {
            panic!("{e}");
        }
    }

    pub(crate) fn check_state_invariants(&self) -> Result<(), InvariantViolation> {
        let Some(states) = &self.states else {
            return Ok(());
        };
        states.check_invariants()?;
        if let Some(cp) = &self.checkpoints {
            cp.check_invariants()?;
        }
        if states.num_used() != self.requests.len()
            || self.requests.keys().any(|&r| states.slot_of(r).is_none())
        {
            return Err(InvariantViolation(format!(
                "{} requests hold tables but {} hold state slots",
                self.requests.len(),
                states.num_used()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize) -> Vec<TokenId> {
        (0..n as u32).map(|i| i * 3 + 1).collect()
    }

    #[test]
    fn hybrid_hits_stop_at_committed_checkpoints_and_slots_bound_requests() {
        // 4-token blocks, a checkpoint every 2 blocks, one running slot.
        let mut kv = KvCacheManager::new(20, 4, true)
            .unwrap()
            .with_recurrent_states(1, 3, 2)
            .unwrap();
        let prompt = tokens(19);
        let none = ComputedBlocks::default();
        kv.allocate_slots(1, 19, &none).unwrap().unwrap();
        assert_eq!(kv.state_slot(1), Some(0));
        // No second running request while the only slot is held.
        assert_eq!(kv.allocate_slots(2, 4, &none), Ok(None));
        let plan = kv.plan_checkpoints(1, &prompt, 0, 19, None).unwrap();
        let at: Vec<usize> = plan.iter().map(|p| p.num_tokens).collect();
        assert_eq!(at, vec![8, 16]);
        assert!(plan.iter().all(|p| p.slot >= 1));
        kv.cache_full_blocks(1, &prompt, 19, None).unwrap();
        // Nothing is committed yet: no hit although the blocks are cached.
        assert!(kv.get_computed_blocks(&prompt, None).is_empty());
        kv.commit_checkpoint(plan[0].slot);
        let hit = kv.get_computed_blocks(&prompt, None);
        assert_eq!(hit.num_computed_tokens(4), 8);
        assert_eq!(hit.restore_slot(), Some(plan[0].slot));
        kv.commit_checkpoint(plan[1].slot);
        let hit = kv.get_computed_blocks(&prompt, None);
        assert_eq!(hit.num_computed_tokens(4), 16);
        assert_eq!(hit.restore_slot(), Some(plan[1].slot));
        // Planned again: the boundaries are already checkpointed.
        assert!(kv
            .plan_checkpoints(1, &prompt, 0, 19, None)
            .unwrap()
            .is_empty());
        assert!(kv.free(1));
        kv.allocate_slots(2, 19, &hit).unwrap().unwrap();
        assert_eq!(kv.state_slot(2), Some(0));
        assert_eq!(kv.prefix_cache_stats().num_hit_tokens, 16);
        kv.check_invariants().unwrap();
    }
}
