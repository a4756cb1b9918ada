//! Moving recurrent states between a batch's sequences and checkpoint slots (prefix caching of
//! hybrids): slot checks, restores before a step, and the checkpoint rows inside a sequence.

use crate::{ForwardBatch, ModelError, RecurrentStatePool};

/// Checks every slot the batch names against the pool, and that no checkpoint or restore
/// source is a slot a sequence of the batch runs in.
pub fn validate_slots(batch: &ForwardBatch<'_>, num_slots: usize) -> Result<(), ModelError> {
    let bad = |m: String| Err(ModelError::InvalidBatch(m));
    let running = batch.state_slots;
    if let Some(&s) = running.iter().find(|&&s| s as usize >= num_slots) {
        return bad(format!("state slot {s} outside the pool of {num_slots}"));
    }
    let mut sorted = running.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return bad("two sequences of the batch share a state slot".into());
    }
    let sources = batch
        .restore_slots
        .iter()
        .filter(|&&s| s >= 0)
        .map(|&s| s as u32);
    for s in sources.chain(batch.checkpoint_slots.iter().copied()) {
        if s as usize >= num_slots || sorted.binary_search(&s).is_ok() {
            return bad(format!(
                "checkpoint slot {s} is outside the pool of {num_slots} or a running slot"
            ));
        }
    }
    Ok(())
}

/// Copies each restoring sequence's checkpoint into its state slot (before any layer runs).
pub fn apply_restores(batch: &ForwardBatch<'_>, states: &mut RecurrentStatePool) {
    for (&src, &dst) in batch.restore_slots.iter().zip(batch.state_slots) {
        if src >= 0 {
            states.copy_slot(src as usize, dst as usize);
        }
    }
}

/// The checkpoints inside rows `t0..t1` (one sequence): `(tokens of the chunk processed,
/// slot)`, ascending.
pub fn checkpoints_in(batch: &ForwardBatch<'_>, t0: usize, t1: usize) -> Vec<(usize, usize)> {
    batch
        .checkpoint_rows
        .iter()
        .zip(batch.checkpoint_slots)
        .filter(|(&r, _)| (t0..t1).contains(&(r as usize)))
        .map(|(&r, &s)| (r as usize + 1 - t0, s as usize))
        .collect()
}
