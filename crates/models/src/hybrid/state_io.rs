//! Checks of the recurrent-state slots a batch names (prefix caching of hybrids), before its
//! inputs are written: the restores and checkpoints themselves run inside the step's ops.

use crate::{ForwardBatch, ModelError};

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
