//! A hand-over point for token masks computed while a step's forward runs.
//!
//! The forward of a step never reads the token masks; only the sample op does. So the engine
//! may compute a step's masks on a worker thread while the forward runs: it closes the gate,
//! the worker fills the gate's rows ([`MaskGate::fill`]) and opens it when the fill is dropped
//! (also when the worker panics, so the op never waits forever), and the sample op
//! ([`crate::sample_rows::sample_rows`]) waits for the gate to open before it reads a gated row
//! ([`crate::sample_rows::SampleRow::gate_row`]). The words live in the gate, allocated once, so
//! neither side allocates per step.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Token masks of one step's sampling rows, behind an open / closed flag.
pub struct MaskGate {
    state: Mutex<GateState>,
    opened: Condvar,
}

struct GateState {
    open: bool,
    words_per_row: usize,
    words: Vec<u32>,
}

impl GateState {
    fn row(&self, i: usize) -> Option<&[u32]> {
        let w = self.words_per_row;
        self.words.get(i * w..(i + 1) * w)
    }
}

impl MaskGate {
    /// An open gate holding `rows` masks of `words_per_row` words each.
    pub fn new(rows: usize, words_per_row: usize) -> MaskGate {
        MaskGate {
            state: Mutex::new(GateState {
                open: true,
                words_per_row,
                words: vec![0; rows * words_per_row],
            }),
            opened: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // A panicking filler still opens the gate (see `MaskFill`'s drop); the words it left
        // are only read for rows whose request is failed.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the gate: a sample op reading a gated row now waits until the next fill ends.
    /// Call it before the worker that fills the gate starts.
    pub fn close(&self) {
        self.lock().open = false;
    }

    /// Whether the gate is open (no fill pending).
    pub fn is_open(&self) -> bool {
        self.lock().open
    }

    /// Holds the gate's words for the worker to write; dropping the fill opens the gate.
    pub fn fill(&self) -> MaskFill<'_> {
        MaskFill {
            gate: self,
            state: self.lock(),
        }
    }

    /// Waits until the gate is open and holds its words for reading.
    pub fn wait(&self) -> MaskView<'_> {
        let mut state = self.lock();
        while !state.open {
            state = self
                .opened
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        MaskView { state }
    }
}

/// The worker's hold on a closed gate's words.
pub struct MaskFill<'a> {
    gate: &'a MaskGate,
    state: MutexGuard<'a, GateState>,
}

impl MaskFill<'_> {
    /// Row `i`'s words, `None` past the gate's rows.
    pub fn row_mut(&mut self, i: usize) -> Option<&mut [u32]> {
        let w = self.state.words_per_row;
        self.state.words.get_mut(i * w..(i + 1) * w)
    }
}

impl Drop for MaskFill<'_> {
    fn drop(&mut self) {
        self.state.open = true;
        self.gate.opened.notify_all();
    }
}

/// The sample op's hold on an open gate's words.
pub struct MaskView<'a> {
    state: MutexGuard<'a, GateState>,
}

impl MaskView<'_> {
    /// Row `i`'s words, `None` past the gate's rows.
    pub fn row(&self, i: usize) -> Option<&[u32]> {
        self.state.row(i)
    }

    /// All rows' words, `words_per_row` each (shared with the threads that sample).
    pub fn words(&self) -> (&[u32], usize) {
        (&self.state.words, self.state.words_per_row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_reader_waits_for_the_fill_and_sees_its_words() {
        let gate = Arc::new(MaskGate::new(2, 3));
        gate.close();
        assert!(!gate.is_open());
        let reader = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.wait().row(1).map(<[u32]>::to_vec))
        };
        {
            let mut fill = gate.fill();
            fill.row_mut(1).unwrap().copy_from_slice(&[7, 8, 9]);
            assert!(fill.row_mut(2).is_none());
        }
        assert_eq!(reader.join().unwrap(), Some(vec![7, 8, 9]));
        assert!(gate.is_open());
    }

    #[test]
    fn a_panicking_filler_still_opens_the_gate() {
        let gate = Arc::new(MaskGate::new(1, 1));
        gate.close();
        let g = Arc::clone(&gate);
        let worker = std::thread::spawn(move || {
            let _fill = g.fill();
            panic!("grammar worker died");
        });
        assert!(worker.join().is_err());
        assert!(gate.wait().row(0).is_some());
    }
}
