//! A persistent thread pool for data-parallel kernels.
//!
//! Workers are spawned once and live as long as the pool. `run` hands every thread (the caller
//! is thread 0) the same closure with its index, and returns only when all of them have finished
//! it, so the closure may borrow from the caller's stack. Between jobs workers spin briefly (the
//! next op of a forward pass usually follows within microseconds) and then sleep on a condition
//! variable, so an idle pool costs no CPU.
//!
//! `run_dynamic` is for jobs that pull work from a shared counter: a worker joins only if it
//! arrives before the caller has finished, and the caller waits only for workers that joined.
//! On an oversubscribed machine a descheduled worker then costs nothing instead of a whole
//! scheduler time slice per op (measured: decode fell from 40 to 3 tokens/s with 2 threads on 2
//! busy cores before this).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

pub use crate::shared_mut::SharedMut;

/// A job as seen by the workers: a borrowed closure whose lifetime `run` guarantees.
type Job = *const (dyn Fn(usize, usize) + Sync);

/// `join` word: the epoch's low 32 bits, a closed flag, and how many workers joined.
const CLOSED: u64 = 1 << 31;
const COUNT_MASK: u64 = CLOSED - 1;

struct Shared {
    epoch: AtomicUsize,
    join: AtomicU64,
    done: AtomicUsize,
    shutdown: AtomicBool,
    panicked: AtomicBool,
    /// Every `run_dynamic` waits for all workers (see [`ThreadPool::set_all_join`]).
    all_join: AtomicBool,
    job: UnsafeCell<Option<Job>>,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread inside `run` while no worker reads it (all workers
// have finished the previous epoch), and read by workers only after the epoch increment that
// publishes it (Release/Acquire on `epoch`).
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_guard: Mutex<()>,
}

// About 0.1-0.3 ms of spinning: covers the gap between ops and a token's sampling, without
// burning a core that other processes on a busy machine need.
const SPIN_ITERS: usize = 1 << 14;

impl ThreadPool {
    /// A pool of `n_threads` threads in total (the caller counts as one); at least one.
    pub fn new(n_threads: usize) -> ThreadPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            join: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            all_join: AtomicBool::new(false),
            job: UnsafeCell::new(None),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n_threads)
            .map(|idx| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("oxllm-worker-{idx}"))
                    .spawn(move || worker_loop(&shared, idx, n_threads))
                    .unwrap_or_else(|e| panic!("cannot spawn worker thread: {e}"))
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            run_guard: Mutex::new(()),
        }
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(thread_index, n_threads)` on every thread of the pool and waits for all.
    /// Use it when work is split statically by thread index.
    pub fn run<F: Fn(usize, usize) + Sync>(&self, job: F) {
        self.dispatch(&job, true);
    }

    /// Runs `job` on the caller and on every worker that arrives before the caller is done
    /// with it; waits only for those. `job` must take its work from a shared counter, since
    /// any subset of threads (at least the caller) may run it.
    pub fn run_dynamic<F: Fn(usize, usize) + Sync>(&self, job: F) {
        self.dispatch(&job, false);
    }

    /// While set, `run_dynamic` behaves like `run`: every worker joins every job. A warm-up
    /// step sets it so that each thread meets every kernel at its largest shape and grows its
    /// per-thread scratch then, not later inside a captured replay (where which worker joins
    /// which job is a matter of timing).
    pub fn set_all_join(&self, on: bool) {
        self.shared.all_join.store(on, Ordering::Relaxed);
    }

    /// Whether [`ThreadPool::set_all_join`] is on (kernels then visit every thread even with
    /// no work, to size their scratch).
    pub fn all_join(&self) -> bool {
        self.shared.all_join.load(Ordering::Relaxed)
    }

    fn dispatch(&self, job: &(dyn Fn(usize, usize) + Sync), wait_for_all: bool) {
        let wait_for_all = wait_for_all || self.shared.all_join.load(Ordering::Relaxed);
        let n = self.n_threads();
        if n == 1 {
            job(0, 1);
            return;
        }
        let _guard = self.run_guard.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the pointer is only dereferenced by workers that joined this epoch, before
        // they count themselves done, and we wait for every joined worker before returning.
        let job_ptr: Job = unsafe { std::mem::transmute(job as *const _) };
        // SAFETY: `run_guard` makes us the only writer, and no worker reads the slot before the
        // epoch below is published.
        unsafe { *self.shared.job.get() = Some(job_ptr) };
        let epoch = self.shared.epoch.load(Ordering::Relaxed).wrapping_add(1);
        self.shared.done.store(0, Ordering::Relaxed);
        self.shared
            .join
            .store((epoch as u64 & 0xFFFF_FFFF) << 32, Ordering::Relaxed);
        {
            let _lock = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.epoch.store(epoch, Ordering::Release);
        }
        self.shared.wake.notify_all();
        let mine = catch_unwind(AssertUnwindSafe(|| job(0, n)));
        let joined = if wait_for_all {
            n - 1
        } else {
            (self.shared.join.fetch_or(CLOSED, Ordering::AcqRel) & COUNT_MASK) as usize
        };
        // Spin first (workers usually finish within microseconds of us), then yield so a
        // descheduled worker gets the core back instead of us burning our time slice.
        let mut spins = 0usize;
        while self.shared.done.load(Ordering::Acquire) != joined {
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: every worker that joined this epoch has counted itself done (the wait above),
        // so nobody reads the job slot while it is cleared.
        unsafe { *self.shared.job.get() = None };
        if let Err(payload) = mine {
            std::panic::resume_unwind(payload);
        }
        if self.shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a thread-pool worker panicked");
        }
    }
}

fn worker_loop(shared: &Shared, idx: usize, n_threads: usize) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0;
        let epoch = loop {
            let e = shared.epoch.load(Ordering::Acquire);
            if e != seen {
                break e;
            }
            if spins < SPIN_ITERS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let mut lock = shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            while shared.epoch.load(Ordering::Acquire) == seen {
                lock = shared.wake.wait(lock).unwrap_or_else(|e| e.into_inner());
            }
        };
        seen = epoch;
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        if !try_join(shared, epoch) {
            continue;
        }
        // SAFETY: published before the epoch we observed with Acquire; the caller keeps it
        // alive until we count ourselves done.
        if let Some(job) = unsafe { *shared.job.get() } {
            let job = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| job(idx, n_threads))).is_err() {
                shared.panicked.store(true, Ordering::Relaxed);
            }
        }
        shared.done.fetch_add(1, Ordering::Release);
    }
}

/// Counts this worker into `epoch`'s job unless the caller already closed it.
fn try_join(shared: &Shared, epoch: usize) -> bool {
    let tag = epoch as u64 & 0xFFFF_FFFF;
    let mut cur = shared.join.load(Ordering::Acquire);
    loop {
        if cur >> 32 != tag || cur & CLOSED != 0 {
            return false;
        }
        match shared
            .join
            .compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => return true,
            Err(actual) => cur = actual,
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        {
            let _lock = self
                .shared
                .sleep_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.epoch.fetch_add(1, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Splits `0..len` into `n` nearly equal contiguous parts and returns part `i`.
pub fn split_range(len: usize, i: usize, n: usize) -> std::ops::Range<usize> {
    let base = len / n;
    let extra = len % n;
    let start = i * base + i.min(extra);
    let end = start + base + usize::from(i < extra);
    start..end
}

/// Hands `data` to the pool's threads in contiguous parts of whole `unit`-element units,
/// calling `f(offset, part)` once per part, when every thread gets at least `min_units` units;
/// otherwise `f(0, data)` on the caller. For work where an element's result does not depend on
/// which part holds it, so the split changes no bits.
pub fn for_parts_mut<T: Send>(
    pool: &ThreadPool,
    data: &mut [T],
    unit: usize,
    min_units: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (unit, len) = (unit.max(1), data.len());
    let units = len / unit;
    let parts = pool.n_threads().min(units / min_units.max(1)).max(1);
    if parts == 1 {
        f(0, data);
        return;
    }
    let shared = SharedMut::new(data);
    pool.run(|i, _| {
        if i >= parts {
            return;
        }
        let r = split_range(units, i, parts);
        // The last part also takes a trailing partial unit.
        let end = if i + 1 == parts { len } else { r.end * unit };
        let start = r.start * unit;
        // SAFETY: the parts of distinct threads are disjoint ranges inside `data`, which
        // outlives `run`.
        f(start, unsafe { shared.slice(start, end - start) });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// Parts cover the buffer exactly once, in whole units, on up to every thread; small
    /// inputs stay on the caller in one part.
    #[test]
    fn parts_cover_the_buffer_once_in_whole_units() {
        let pool = ThreadPool::new(3);
        for (len, unit, min_units, want_parts) in [
            (1000, 10, 4, 3),
            (1003, 10, 4, 3),
            (80, 10, 4, 2),
            (30, 10, 4, 1),
            (0, 10, 1, 1),
        ] {
            let mut data = vec![0u32; len];
            let parts = AtomicU64::new(0);
            for_parts_mut(&pool, &mut data, unit, min_units, |off, part| {
                parts.fetch_add(1, Ordering::Relaxed);
                assert_eq!(off % unit, 0);
                for (i, x) in part.iter_mut().enumerate() {
                    *x += (off + i) as u32 + 1;
                }
            });
            assert_eq!(parts.load(Ordering::Relaxed), want_parts, "len {len}");
            assert!(data.iter().enumerate().all(|(i, &x)| x == i as u32 + 1));
        }
    }

    #[test]
    fn every_thread_runs_each_job_once_and_borrows_work() {
        let pool = ThreadPool::new(3);
        let hits = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        for _ in 0..1000 {
            pool.run(|i, n| {
                assert_eq!(n, 3);
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
        }
        for h in &hits {
            assert_eq!(h.load(Ordering::Relaxed), 1000);
        }
    }

    #[test]
    fn dynamic_jobs_cover_all_work_whoever_joins() {
        let pool = ThreadPool::new(3);
        for round in 0..2000usize {
            let n_items = round % 37;
            let next = AtomicUsize::new(0);
            let seen: Vec<AtomicU64> = (0..n_items).map(|_| AtomicU64::new(0)).collect();
            pool.run_dynamic(|_, _| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n_items {
                    break;
                }
                seen[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
                "round {round}"
            );
        }
        // A static job right after dynamic ones still reaches every thread.
        let hits = AtomicU64::new(0);
        pool.run(|_, _| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn split_range_covers_everything_once() {
        for len in 0..50 {
            for n in 1..7 {
                let mut next = 0;
                for i in 0..n {
                    let r = split_range(len, i, n);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }

    #[test]
    fn worker_panic_is_reported_and_pool_survives() {
        let pool = ThreadPool::new(2);
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|i, _| {
                if i == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        let count = AtomicU64::new(0);
        pool.run(|_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }
}
