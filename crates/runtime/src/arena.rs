//! The buffer arena shared by the CPU backends: buffer handles, their storage, the warmed pool,
//! and the planning of step-local buffers' lifetimes.
//!
//! A [`BufRef`] names a *handle*; a handle maps to a storage slot. Persistent buffers get their
//! storage at once. A step-local buffer ([`Arena::alloc`]) is only a request (kind, length, the
//! op that asked) until the step's op list is known: then [`plan_lifetimes`] walks the ops in
//! order, gives each request storage just before its first use (best fit among free storage of
//! its kind) and frees that storage just after its last use, so later requests reuse it, as
//! ggml's graph allocator does. Recorders never release anything; buffers the host reads after
//! the step are marked with [`Arena::keep`] and live to its end.
//!
//! Where storage comes from follows the mode:
//! - eager: launched ops are queued and run (after planning) when the host next reads or
//!   writes, or when the step ends; storage is created for the step and dropped at its end
//!   (eager is the simple reference path, and the baseline plans must beat);
//! - warm: like eager, but storage is drawn from the pool (created when none fits) and stays
//!   there, and ops run in the backend's warm mode (its warm kernel table) with every pool
//!   thread joining (their per-thread scratch grows now, not inside a later replay); a later
//!   capture of the same or a smaller shape then finds every
//!   buffer it needs, since it plans the same way;
//! - capture: launches are recorded; [`Arena::end_capture`] plans them over the pool only (a
//!   request nothing in the pool can serve fails the capture naming its op) and the handles
//!   keep their storage for every replay. Plans share the pool: only one plan runs at a time,
//!   and pooled storage is never freed, so every address a plan recorded stays valid.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::backend::Plan;
use crate::{BufKind, BufRef, Buffer, Memory, OpDesc, OpProfile, RuntimeError};

/// How an arena's ops execute: the host backends run each [`crate::OpDesc`] with their kernel
/// table; a device backend launches its own kernels.
pub trait OpRunner {
    fn run(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError>;
    /// The op in a warm step, which runs on whatever the inputs hold to size buffers and
    /// scratch before a capture, with no effect that outlives the step.
    fn warm(&mut self, op: &OpDesc, mem: &Memory) -> Result<(), RuntimeError>;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Idle,
    Eager,
    Warm,
    Capture,
}

/// A step-local buffer asked for and not yet given storage.
#[derive(Clone, Copy, Debug)]
struct Request {
    handle: u32,
    kind: BufKind,
    len: usize,
    op: &'static str,
}

/// What planning one op list found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lifetimes {
    /// Most bytes of step-local buffers live at once.
    pub peak_bytes: usize,
    /// Bytes of all step-local buffers together.
    pub total_bytes: usize,
}

pub struct Arena {
    mem: Memory,
    /// Handles whose buffer is gone, reusable.
    free_handles: Vec<u32>,
    /// Storage slots holding nothing, reusable.
    free_storage: Vec<u32>,
    /// Warmed storage, shared by the warm steps and plans.
    pool: Vec<u32>,
    mode: Mode,
    /// Step-local buffers asked for since the last planning.
    requests: Vec<Request>,
    /// Handles given out in this eager or warm step (all recycled at its end).
    step_handles: Vec<u32>,
    /// Storage created for this eager step (dropped at its end).
    step_storage: Vec<u32>,
    /// Handles the host reads after the step: they live to its end.
    kept: Vec<u32>,
    /// Ops launched and not yet run (eager, warm) or recorded (capture).
    pending: Vec<OpDesc>,
    id: u64,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Bytes of `len` elements of `kind`.
pub fn bytes_of(kind: BufKind, len: usize) -> usize {
    len * match kind {
        BufKind::QActs => 1,
        BufKind::F16 => 2,
        _ => 4,
    }
}

impl Arena {
    pub fn new() -> Arena {
        Arena {
            mem: Memory::default(),
            free_handles: Vec::new(),
            free_storage: Vec::new(),
            pool: Vec::new(),
            mode: Mode::Idle,
            requests: Vec::new(),
            step_handles: Vec::new(),
            step_storage: Vec::new(),
            kept: Vec::new(),
            pending: Vec::new(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The buffers, as they are now (no pending op is run).
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    pub fn capturing(&self) -> bool {
        self.mode == Mode::Capture
    }

    fn new_storage(&mut self, buf: Buffer) -> u32 {
        match self.free_storage.pop() {
            Some(s) => {
                *self.mem.storage[s as usize].borrow_mut() = buf;
                s
            }
            None => {
                self.mem.storage.push(RefCell::new(buf));
                (self.mem.storage.len() - 1) as u32
            }
        }
    }

    fn new_handle(&mut self, storage: u32) -> u32 {
        match self.free_handles.pop() {
            Some(h) => {
                self.mem.handles[h as usize] = storage;
                h
            }
            None => {
                self.mem.handles.push(storage);
                (self.mem.handles.len() - 1) as u32
            }
        }
    }

    pub fn alloc_persistent(&mut self, kind: BufKind, len: usize) -> Result<BufRef, RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("alloc_persistent"));
        }
        let storage = self.new_storage(Buffer::new(kind, len));
        let slot = self.new_handle(storage);
        Ok(BufRef { slot, kind, len })
    }

    pub fn alloc_host(&mut self, value: Box<dyn Any + Send>) -> Result<BufRef, RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("alloc_host"));
        }
        let storage = self.new_storage(Buffer::Host(value));
        let slot = self.new_handle(storage);
        Ok(BufRef {
            slot,
            kind: BufKind::Host,
            len: 1,
        })
    }

    /// Whether some pooled storage of `kind` holds `len` (liveness aside).
    fn pool_could_serve(&self, kind: BufKind, len: usize) -> bool {
        self.pool.iter().any(|&s| {
            let b = self.mem.storage[s as usize].borrow();
            b.kind() == Some(kind) && b.capacity() >= len
        })
    }

    /// A step-local buffer of `len` elements for `op`'s use; its storage is decided when the
    /// step's op list is planned. Inside a capture a request no pooled storage could ever
    /// serve fails at once.
    pub fn alloc(
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
        if self.capturing() && !self.pool_could_serve(kind, len) {
            return Err(RuntimeError::AllocationInCapture { op, kind, len });
        }
        let slot = self.new_handle(Memory::UNMAPPED);
        self.requests.push(Request {
            handle: slot,
            kind,
            len,
            op,
        });
        if !self.capturing() {
            self.step_handles.push(slot);
        }
        Ok(BufRef { slot, kind, len })
    }

    /// Keeps `buf` to the end of the step (or of every replay) for the host to read.
    pub fn keep(&mut self, buf: BufRef) {
        self.kept.push(buf.slot);
    }

    /// Best-fit storage of `kind` for `len` from `free`, removed from it.
    fn take_free(&self, free: &mut Vec<u32>, kind: BufKind, len: usize) -> Option<u32> {
        let best = free
            .iter()
            .enumerate()
            .filter_map(|(i, &s)| {
                let b = self.mem.storage[s as usize].borrow();
                (b.kind() == Some(kind) && b.capacity() >= len).then(|| (b.capacity(), i))
            })
            .min()?;
        Some(free.swap_remove(best.1))
    }

    /// Gives every pending request storage for exactly the ops between its first and last use
    /// in `ops` (kept handles: to the end). Storage comes from the pool (warm, capture) or is
    /// created for the step (eager); `create` allows new storage where none fits.
    fn plan_lifetimes(&mut self, ops: &[OpDesc]) -> Result<Lifetimes, RuntimeError> {
        let requests = std::mem::take(&mut self.requests);
        if requests.is_empty() {
            return Ok(Lifetimes::default());
        }
        // Request index per handle, then first and last use per request.
        let mut index = vec![usize::MAX; self.mem.handles.len()];
        for (i, r) in requests.iter().enumerate() {
            index[r.handle as usize] = i;
        }
        let (mut first, mut last) = (vec![usize::MAX; requests.len()], vec![0; requests.len()]);
        for (i, op) in ops.iter().enumerate() {
            op.buffers(&mut |b| {
                if let Some(&r) = index.get(b.slot as usize).filter(|&&r| r != usize::MAX) {
                    first[r] = first[r].min(i);
                    last[r] = i;
                }
            });
        }
        for &h in &self.kept {
            if let Some(&r) = index.get(h as usize).filter(|&&r| r != usize::MAX) {
                last[r] = usize::MAX;
            }
        }
        let mut starts: Vec<(usize, usize)> = (0..requests.len())
            .filter(|&r| first[r] != usize::MAX)
            .map(|r| (first[r], r))
            .collect();
        starts.sort_unstable();
        let mut ends: Vec<(usize, usize)> = starts.iter().map(|&(_, r)| (last[r], r)).collect();
        ends.sort_unstable();

        let from_pool = matches!(self.mode, Mode::Warm | Mode::Capture);
        let create = self.mode != Mode::Capture;
        let mut free = if from_pool {
            std::mem::take(&mut self.pool)
        } else {
            Vec::new()
        };
        // Storage created here (an eager step drops it at its end).
        let mut used: Vec<u32> = Vec::new();
        let (mut live, mut out) = (0usize, Lifetimes::default());
        let (mut s, mut e) = (0, 0);
        let result = (|| {
            for i in 0..ops.len() {
                while let Some(&(at, r)) = starts.get(s).filter(|(at, _)| *at == i) {
                    let Request { kind, len, op, .. } = requests[r];
                    let storage = match self.take_free(&mut free, kind, len) {
                        Some(st) => st,
                        None if create => {
                            let st = self.new_storage(Buffer::new(kind, len));
                            used.push(st);
                            st
                        }
                        None => return Err(RuntimeError::AllocationInCapture { op, kind, len }),
                    };
                    debug_assert_eq!(at, i);
                    self.mem.handles[requests[r].handle as usize] = storage;
                    live += bytes_of(kind, len);
                    out.total_bytes += bytes_of(kind, len);
                    out.peak_bytes = out.peak_bytes.max(live);
                    s += 1;
                }
                while let Some(&(_, r)) = ends.get(e).filter(|(at, _)| *at == i) {
                    let st = self.mem.handles[requests[r].handle as usize];
                    free.push(st);
                    live -= bytes_of(requests[r].kind, requests[r].len);
                    e += 1;
                }
            }
            Ok(())
        })();
        // Storage of kept handles goes back too: nothing runs after the list.
        for &(_, r) in &ends[e..] {
            free.push(self.mem.handles[requests[r].handle as usize]);
        }
        if from_pool {
            // Every storage taken or created went back to `free` at its handle's last use.
            self.pool = free;
        } else {
            self.step_storage.extend(used);
        }
        result.map(|()| out)
    }

    /// Plans and runs the pending ops of an eager or warm step.
    fn flush(&mut self, runner: &mut dyn OpRunner) -> Result<(), RuntimeError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let ops = std::mem::take(&mut self.pending);
        self.plan_lifetimes(&ops)?;
        let warm = self.mode == Mode::Warm;
        for op in &ops {
            if warm {
                runner.warm(op, &self.mem)?;
            } else {
                runner.run(op, &self.mem)?;
            }
        }
        Ok(())
    }

    /// Recycles the handles and drops the storage of the current eager or warm step.
    fn end_buffers(&mut self) {
        for h in std::mem::take(&mut self.step_handles) {
            self.mem.handles[h as usize] = Memory::UNMAPPED;
            self.free_handles.push(h);
        }
        for s in std::mem::take(&mut self.step_storage) {
            *self.mem.storage[s as usize].borrow_mut() = Buffer::Empty;
            self.free_storage.push(s);
        }
        self.requests.clear();
        self.kept.clear();
    }

    pub fn begin_step(&mut self, warm: bool) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("begin_step"));
        }
        self.pending.clear();
        self.end_buffers();
        self.mode = if warm { Mode::Warm } else { Mode::Eager };
        Ok(())
    }

    /// Runs what is still pending, then gives the step's buffers back.
    pub fn end_step(&mut self, runner: &mut dyn OpRunner) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::NotInCapture("end_step"));
        }
        let r = self.flush(runner);
        self.pending.clear();
        self.end_buffers();
        self.mode = Mode::Idle;
        r
    }

    pub fn launch(&mut self, op: OpDesc, runner: &mut dyn OpRunner) -> Result<(), RuntimeError> {
        self.pending.push(op);
        match self.mode {
            Mode::Capture | Mode::Eager | Mode::Warm => Ok(()),
            // Outside a step an op runs at once.
            Mode::Idle => {
                let r = self.flush(runner);
                self.end_buffers();
                r
            }
        }
    }

    /// The buffers for the host, after running any pending ops (their errors come back here).
    pub fn host_access(
        &mut self,
        op: &'static str,
        write: bool,
        runner: &mut dyn OpRunner,
    ) -> Result<&Memory, RuntimeError> {
        match (self.capturing(), write) {
            (true, true) => Err(RuntimeError::HostWriteInCapture { op }),
            (true, false) => Err(RuntimeError::HostReadInCapture { op }),
            (false, _) => {
                self.flush(runner)?;
                Ok(&self.mem)
            }
        }
    }

    pub fn begin_capture(&mut self) -> Result<(), RuntimeError> {
        if self.capturing() {
            return Err(RuntimeError::AlreadyCapturing);
        }
        self.pending.clear();
        self.end_buffers();
        self.mode = Mode::Capture;
        Ok(())
    }

    pub fn end_capture(&mut self) -> Result<Plan, RuntimeError> {
        if !self.capturing() {
            return Err(RuntimeError::NotCapturing);
        }
        let ops = std::mem::take(&mut self.pending);
        let requested: Vec<u32> = self.requests.iter().map(|r| r.handle).collect();
        let planned = self.plan_lifetimes(&ops);
        self.kept.clear();
        self.mode = Mode::Idle;
        match planned {
            Ok(lifetimes) => Ok(Plan::new(self.id, ops, lifetimes)),
            Err(e) => {
                self.recycle(&requested);
                Err(e)
            }
        }
    }

    fn recycle(&mut self, handles: &[u32]) {
        for &h in handles {
            self.mem.handles[h as usize] = Memory::UNMAPPED;
            self.free_handles.push(h);
        }
    }

    pub fn abort_capture(&mut self) {
        if self.capturing() {
            let requested: Vec<u32> = self.requests.drain(..).map(|r| r.handle).collect();
            self.recycle(&requested);
            self.pending.clear();
            self.kept.clear();
            self.mode = Mode::Idle;
        }
    }

    pub fn replay(
        &mut self,
        plan: &Plan,
        runner: &mut dyn OpRunner,
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
                    runner.run(op, &self.mem)?;
                    p.add(op.name(), t.elapsed());
                }
                None => runner.run(op, &self.mem)?,
            }
        }
        Ok(())
    }

    /// Bytes held by pooled (warmed) storage, for the start-up log.
    pub fn pooled_bytes(&self) -> usize {
        self.pool
            .iter()
            .map(|&s| {
                let b = self.mem.storage[s as usize].borrow();
                b.kind().map_or(0, |k| bytes_of(k, b.capacity()))
            })
            .sum()
    }
}

impl Default for Arena {
    fn default() -> Self {
        Arena::new()
    }
}
