//! Grow-only per-thread scratch buffers for kernels that run every step.
//!
//! A [`Scratch`] is taken from the current thread's stack of spare buffers and returned to it
//! when dropped, keeping its capacity. Once a kernel has seen its largest shape on a thread,
//! later calls allocate nothing, which is what lets a captured plan replay without touching
//! the heap. Contents are zeroed on take, so callers see the same memory as a fresh `vec!`.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

thread_local! {
    static SPARE_F32: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
    static SPARE_USIZE: RefCell<Vec<Vec<usize>>> = const { RefCell::new(Vec::new()) };
    static SPARE_I32: RefCell<Vec<Vec<i32>>> = const { RefCell::new(Vec::new()) };
}

/// Element types with a per-thread spare stack.
pub(crate) trait ScratchElem: Copy + Default + 'static {
    fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
}

impl ScratchElem for f32 {
    fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<f32>>) -> R) -> Option<R> {
        SPARE_F32
            .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
            .ok()
            .flatten()
    }
}

impl ScratchElem for usize {
    fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<usize>>) -> R) -> Option<R> {
        SPARE_USIZE
            .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
            .ok()
            .flatten()
    }
}

impl ScratchElem for i32 {
    fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<i32>>) -> R) -> Option<R> {
        SPARE_I32
            .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
            .ok()
            .flatten()
    }
}

/// A zeroed buffer of `len` elements on loan from this thread's spares.
pub(crate) struct Scratch<T: ScratchElem>(Vec<T>);

impl<T: ScratchElem> Scratch<T> {
    pub(crate) fn take(len: usize) -> Self {
        let mut v = T::with_spares(|s| s.pop()).flatten().unwrap_or_default();
        v.clear();
        v.resize(len, T::default());
        Scratch(v)
    }
}

impl<T: ScratchElem> Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: ScratchElem> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

impl<T: ScratchElem> Drop for Scratch<T> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        T::with_spares(|s| s.push(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_is_reused_zeroed_without_reallocating() {
        let ptr = {
            let mut a = Scratch::<f32>::take(100);
            a[3] = 7.0;
            a.as_ptr()
        };
        let b = Scratch::<f32>::take(50);
        assert_eq!(b.as_ptr(), ptr, "the spare buffer is reused");
        assert!(b.iter().all(|&x| x == 0.0));
        assert_eq!(b.len(), 50);
        // Two at once are distinct buffers.
        let c = Scratch::<f32>::take(10);
        assert_ne!(c.as_ptr(), b.as_ptr());
    }
}
