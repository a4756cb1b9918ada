//! [`SharedMut`]: one mutable slice lent to a thread pool's threads, each writing its own
//! disjoint elements of it.
//!
//! Guarantees: a `SharedMut<'a, T>` holds its slice's mutable borrow for `'a`, so nobody else
//! can read, write or free the slice while threads share it, and it cannot outlive the slice;
//! every range and pointer it hands out is checked against the slice's length (a panic, never
//! an overrun). What stays the caller's promise, and is why access is `unsafe`: no two threads
//! hold overlapping ranges at the same time.
//!
//! The borrow is what stops a use after free:
//!
//! ```compile_fail
//! use oxllm_kernels::pool::SharedMut;
//! let shared = {
//!     let mut v = vec![0u32; 4];
//!     SharedMut::new(&mut v)
//! };
//! let _ = shared.len();
//! ```
//!
//! and a write to the slice behind the threads' backs:
//!
//! ```compile_fail
//! use oxllm_kernels::pool::SharedMut;
//! let mut v = vec![0u32; 4];
//! let shared = SharedMut::new(&mut v);
//! v[0] = 1;
//! let _ = shared.len();
//! ```

use std::marker::PhantomData;

/// A mutable slice shared between threads that write disjoint parts of it.
pub struct SharedMut<'a, T> {
    ptr: *mut T,
    len: usize,
    slice: PhantomData<&'a mut [T]>,
}

// SAFETY: a `SharedMut` is a `&'a mut [T]` split between threads: it moves `T`s between threads
// only as that borrow would (hence `T: Send`), and no two threads touch the same element at
// once (the contract of `slice` and of writes through `ptr_at`).
unsafe impl<T: Send> Send for SharedMut<'_, T> {}
// SAFETY: as for `Send`; `&SharedMut` gives nothing but the checked, `unsafe` accessors.
unsafe impl<T: Send> Sync for SharedMut<'_, T> {}

impl<T> Clone for SharedMut<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedMut<'_, T> {}

impl<'a, T> SharedMut<'a, T> {
    pub fn new(slice: &'a mut [T]) -> Self {
        SharedMut {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            slice: PhantomData,
        }
    }

    /// Elements in the slice.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements `start..start + len` of the slice.
    ///
    /// # Panics
    /// When the range does not lie inside the slice.
    ///
    /// # Safety
    /// No other thread holds a range overlapping this one while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        self.check(start, len);
        // SAFETY: `start..start + len` lies inside the slice (checked above), which stays
        // mutably borrowed for `'a`, longer than `&self`; the caller guarantees that nobody
        // else touches these elements meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }

    /// A raw pointer to element `start` (or one past the end), so threads may each write
    /// their own elements of one row without forming overlapping references. Writing through
    /// it is the caller's `unsafe`: in bounds, and to elements no other thread touches.
    ///
    /// # Panics
    /// When `start` is past the end of the slice.
    pub fn ptr_at(&self, start: usize) -> *mut T {
        self.check(start, 0);
        // SAFETY: `start <= len` (checked above), so the offset stays inside the allocation.
        unsafe { self.ptr.add(start) }
    }

    fn check(&self, start: usize, len: usize) {
        let inside = start.checked_add(len).is_some_and(|end| end <= self.len);
        assert!(
            inside,
            "SharedMut: {len} elements at {start} overrun a slice of {}",
            self.len
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::{split_range, ThreadPool};

    #[test]
    fn threads_write_disjoint_ranges_of_one_slice() {
        let pool = ThreadPool::new(4);
        let mut out = vec![0usize; 1001];
        let shared = SharedMut::new(&mut out);
        assert_eq!(shared.len(), 1001);
        pool.run(|i, n| {
            let r = split_range(1001, i, n);
            // SAFETY: `split_range` gives each thread its own range.
            let part = unsafe { shared.slice(r.start, r.len()) };
            for (k, v) in part.iter_mut().enumerate() {
                *v = r.start + k;
            }
        });
        assert!(out.iter().enumerate().all(|(k, v)| k == *v));
    }

    #[test]
    fn the_last_element_and_the_end_pointer_are_in_bounds() {
        let mut v = vec![1u8, 2, 3];
        let shared = SharedMut::new(&mut v);
        // SAFETY: one thread, one range.
        let last = unsafe { shared.slice(2, 1) };
        last[0] = 9;
        assert_eq!(shared.ptr_at(3), shared.ptr_at(0).wrapping_add(3));
        // SAFETY: one thread, an empty range at the end.
        assert!(unsafe { shared.slice(3, 0) }.is_empty());
        assert_eq!(v, [1, 2, 9]);
    }

    #[test]
    #[should_panic(expected = "overrun a slice of 3")]
    fn a_range_past_the_end_panics() {
        let mut v = vec![0u8; 3];
        let shared = SharedMut::new(&mut v);
        // SAFETY: one thread; the range is rejected before any access.
        let _ = unsafe { shared.slice(2, 2) };
    }

    #[test]
    #[should_panic(expected = "overrun a slice of 3")]
    fn a_pointer_past_the_end_panics() {
        let mut v = vec![0u8; 3];
        let _ = SharedMut::new(&mut v).ptr_at(4);
    }

    #[test]
    #[should_panic(expected = "overrun")]
    fn a_range_whose_end_overflows_panics() {
        let mut v = vec![0u8; 3];
        let shared = SharedMut::new(&mut v);
        // SAFETY: one thread; the range is rejected before any access.
        let _ = unsafe { shared.slice(1, usize::MAX) };
    }
}
