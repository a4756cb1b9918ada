//! Recurrent-state slots of hybrid models, counted like blocks.
//!
//! A model with linear-attention layers keeps one fixed-size state per running sequence (conv
//! state + recurrent matrix of every linear layer) in a pool of `num_slots` slots. A sequence
//! takes a slot when it is first scheduled and gives it back when it finishes, is aborted or is
//! preempted; when no slot is free a new sequence waits, exactly as it waits for blocks.
//!
//! Guarantees (checked by [`StateSlots::check_invariants`]): free + used slots = all slots; a
//! holder holds exactly one slot; no slot is held twice or both held and free.

use std::collections::HashMap;

use oxllm_core::ReqId;

use crate::error::InvariantViolation;

/// Which running sequence holds which state slot; slot ids are `0..num_slots`.
#[derive(Clone, Debug)]
pub struct StateSlots {
    num_slots: usize,
    /// Free slots; the next one handed out is the last.
    free: Vec<u32>,
    held: HashMap<ReqId, u32>,
}

impl StateSlots {
    pub fn new(num_slots: usize) -> StateSlots {
        StateSlots {
            num_slots,
            free: (0..num_slots as u32).rev().collect(),
            held: HashMap::new(),
        }
    }

    pub fn num_slots(&self) -> usize {
        self.num_slots
    }

    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    pub fn num_used(&self) -> usize {
        self.held.len()
    }

    /// The slot `req_id` holds.
    pub fn slot_of(&self, req_id: ReqId) -> Option<u32> {
        self.held.get(&req_id).copied()
    }

    /// Gives `req_id` a slot (its own if it already holds one); `None` when none is free.
    pub fn acquire(&mut self, req_id: ReqId) -> Option<u32> {
        if let Some(slot) = self.slot_of(req_id) {
            return Some(slot);
        }
        let slot = self.free.pop()?;
        self.held.insert(req_id, slot);
        Some(slot)
    }

    /// Takes `req_id`'s slot back; returns it, or `None` if it held none.
    pub fn release(&mut self, req_id: ReqId) -> Option<u32> {
        let slot = self.held.remove(&req_id)?;
        self.free.push(slot);
        Some(slot)
    }

    /// Holders and their slots, in no particular order.
    pub fn holders(&self) -> impl Iterator<Item = (ReqId, u32)> + '_ {
        self.held.iter().map(|(&r, &s)| (r, s))
    }

    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut seen = vec![false; self.num_slots];
        let all = self.free.iter().chain(self.held.values());
        for &slot in all {
            let Some(s) = seen.get_mut(slot as usize) else {
                return Err(InvariantViolation(format!(
                    "state slot {slot} outside the pool of {}",
                    self.num_slots
                )));
            };
            if *s {
                return Err(InvariantViolation(format!(
                    "state slot {slot} is handed out twice (or held and free)"
                )));
            }
            *s = true;
        }
        if self.free.len() + self.held.len() != self.num_slots {
            return Err(InvariantViolation(format!(
                "{} free + {} used state slots != {}",
                self.free.len(),
                self.held.len(),
                self.num_slots
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_release_and_exhaustion() {
        let mut s = StateSlots::new(2);
        let a = s.acquire(1).unwrap();
        assert_eq!(s.acquire(1), Some(a));
        let b = s.acquire(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(s.acquire(3), None);
        assert_eq!(s.release(1), Some(a));
        assert_eq!(s.release(1), None);
        assert_eq!(s.acquire(3), Some(a));
        assert_eq!((s.num_free(), s.num_used()), (0, 2));
        s.check_invariants().unwrap();
    }
}
