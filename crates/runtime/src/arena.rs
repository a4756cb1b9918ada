//! The buffer arena shared by the CPU backends: slots, the warmed pool, and the capture state.
//!
//! Step-local buffers follow the mode:
//! - eager: allocated fresh by each request and dropped when released or at the end of the step
//!   (eager is the simple reference path, and the baseline plans must beat);
//! - warm: a step of some shape whose ops run (on whatever the inputs hold; padding-like zeros
//!   at start-up) with every pool thread joining every op, so kernels grow their per-thread
//!   scratch to this shape now and not inside a later replay; buffers come from the pool when
//!   one fits and are created otherwise, and all go back to the pool, so a later capture of the
//!   same or a smaller shape finds every buffer it needs;
//! - capture: buffers come only from the pool (best fit); released ones go straight back, so a
//!   plan's buffers are reused by its later ops the way the eager step reused memory. Plans
//!   share the pool: only one plan runs at a time, and pooled buffers are never freed, so every
//!   address a plan recorded stays valid.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::backend::Plan;
use crate::{BufKind, BufRef, Buffer, ExecCtx, Memory, Op, OpProfile, RuntimeError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Idle,
    Eager,
    Warm,
    Capture,
}

pub(crate) struct Arena {
    mem: Memory,
    /// Slots whose buffer was dropped, reusable for new buffers.
    empty_slots: Vec<u32>,
    /// Warmed buffers not lent to anyone right now.
    pool: Vec<u32>,
    /// Buffers lent to the current step or capture (returned to the pool, or dropped in eager).
    lent: Vec<u32>,
    mode: Mode,
    recorded: Vec<Box<dyn Op>>,
    id: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Arena {
    pub(crate) fn new() -> Arena {
        Arena {
            mem: Memory::default(),
            empty_slots: Vec::new(),
            pool: Vec::new(),
            lent: Vec::new(),
            mode: Mode::Idle,
            recorded: Vec::new(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn capturing(&self) -> bool {
        self.mode == Mode::Capture
    }

    fn new_slot(&mut self, buf: Buffer) -> u32 {
        match self.empty_slots.pop() {
            Some(slot) => {
                *self.mem.slots[slot as usize].borrow_mut() = buf;
                slot
            }
            None => {
                self.mem.slots.push(RefCell::new(buf));
                (self.mem.slots.len() - 1) as u32
            }
        }
    }

    pub(crate) fn alloc_persistent(
        &mut self,
        kind: BufKind,
        len: usize,
    ) -> Result<BufRef, RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("alloc_persistent"));
        }
        let slot = self.new_slot(Buffer::new(kind, len));
        Ok(BufRef { slot, kind, len })
    }

    pub(crate) fn alloc_host(
        &mut self,
        value: Box<dyn Any + Send>,
    ) -> Result<BufRef, RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("alloc_host"));
        }
        let slot = self.new_slot(Buffer::Host(value));
        Ok(BufRef {
            slot,
            kind: BufKind::Host,
            len: 1,
        })
    }

    /// The smallest pooled buffer of `kind` holding at least `len`.
    fn take_pooled(&mut self, kind: BufKind, len: usize) -> Option<u32> {
        let slots = &self.mem.slots;
        let best = self
            .pool
            .iter()
            .enumerate()
            .filter_map(|(i, &slot)| {
                let buf = slots[slot as usize].borrow();
                (buf.kind() == Some(kind) && buf.capacity() >= len).then(|| (buf.capacity(), i))
            })
            .min()?;
        Some(self.pool.swap_remove(best.1))
    }

    pub(crate) fn alloc(
        &mut self,
        op: &'static str,
        kind: BufKind,
        len: usize,
    ) -> Result<BufRef, RuntimeError> {
        if kind == BufKind::Host {
            return Err(RuntimeError::op(
                op,
                "host buffers are made with alloc_host",
            ));
        }
        let slot = match self.mode {
            Mode::Capture => self
                .take_pooled(kind, len)
                .ok_or(RuntimeError::AllocationInCapture { op, kind, len })?,
            Mode::Warm => match self.take_pooled(kind, len) {
                Some(slot) => slot,
                None => self.new_slot(Buffer::new(kind, len)),
            },
            Mode::Eager | Mode::Idle => self.new_slot(Buffer::new(kind, len)),
        };
        self.lent.push(slot);
        Ok(BufRef { slot, kind, len })
    }

    pub(crate) fn release(&mut self, buf: BufRef) {
        let Some(i) = self.lent.iter().position(|&s| s == buf.slot) else {
            return;
        };
        self.lent.swap_remove(i);
        self.give_back(buf.slot);
    }

    fn give_back(&mut self, slot: u32) {
        match self.mode {
            Mode::Eager | Mode::Idle => {
                *self.mem.slots[slot as usize].borrow_mut() = Buffer::Empty;
                self.empty_slots.push(slot);
            }
            Mode::Warm | Mode::Capture => self.pool.push(slot),
        }
    }

    fn return_lent(&mut self) {
        for slot in std::mem::take(&mut self.lent) {
            self.give_back(slot);
        }
    }

    pub(crate) fn begin_step(&mut self, warm: bool) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("begin_step"));
        }
        self.return_lent();
        self.mode = if warm { Mode::Warm } else { Mode::Eager };
        Ok(())
    }

    pub(crate) fn end_step(&mut self) {
        if !self.capturing() {
            self.return_lent();
            self.mode = Mode::Idle;
        }
    }

    pub(crate) fn launch(&mut self, op: Box<dyn Op>, cx: &ExecCtx<'_>) -> Result<(), RuntimeError> {
        match self.mode {
            Mode::Capture => {
                self.recorded.push(op);
                Ok(())
            }
            Mode::Warm => op.run(
                &self.mem,
                &ExecCtx {
                    warming: true,
                    ..*cx
                },
            ),
            Mode::Eager | Mode::Idle => op.run(&self.mem, cx),
        }
    }

    pub(crate) fn host_access(
        &mut self,
        op: &'static str,
        write: bool,
    ) -> Result<&Memory, RuntimeError> {
        match (self.capturing(), write) {
            (true, true) => Err(RuntimeError::HostWriteInCapture { op }),
            (true, false) => Err(RuntimeError::HostReadInCapture { op }),
            (false, _) => Ok(&self.mem),
        }
    }

    pub(crate) fn begin_capture(&mut self) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::AlreadyCapturing);
        }
        self.return_lent();
        self.mode = Mode::Capture;
        self.recorded.clear();
        Ok(())
    }

    pub(crate) fn end_capture(&mut self) -> Result<Plan, RuntimeError> {
        if !self.capturing() {
            return Err(RuntimeError::NotCapturing);
        }
        self.return_lent();
        self.mode = Mode::Idle;
        Ok(Plan::new(self.id, std::mem::take(&mut self.recorded)))
    }

    pub(crate) fn abort_capture(&mut self) {
        if self.capturing() {
            self.return_lent();
            self.recorded.clear();
            self.mode = Mode::Idle;
        }
    }

    pub(crate) fn replay(
        &mut self,
        plan: &Plan,
        cx: &ExecCtx<'_>,
        mut profile: Option<&mut OpProfile>,
    ) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("replay"));
        }
        if plan.backend_id() != self.id {
            return Err(RuntimeError::ForeignPlan);
        }
        for op in plan.ops() {
            match profile.as_deref_mut() {
                Some(p) => {
                    let t = Instant::now();
                    op.run(&self.mem, cx)?;
                    p.add(op.name(), t.elapsed());
                }
                None => op.run(&self.mem, cx)?,
            }
        }
        Ok(())
    }

    /// Bytes held by pooled (warmed) buffers, for the start-up log.
    pub(crate) fn pooled_bytes(&self) -> usize {
        let pooled = self.pool.iter().chain(&self.lent);
        pooled
            .map(|&s| {
                let b = self.mem.slots[s as usize].borrow();
                b.capacity()
                    * match b.kind() {
                        Some(BufKind::QActs) => 1,
                        Some(BufKind::F16) => 2,
                        _ => 4,
                    }
            })
            .sum()
    }
}
