//! Grow-only per-thread scratch buffers for kernels that run every step.
//!
//! A [`Scratch`] is taken from the current thread's stack of spare buffers and returned to it
//! when dropped, keeping its capacity. Once a kernel has seen its largest shape on a thread,
//! later calls allocate nothing, which is what lets a captured plan replay without touching
//! the heap. Contents are zeroed on take, so callers see the same memory as a fresh `vec!`;
//! a dirty take zeroes nothing it has zeroed before: a spare keeps every element it ever
//! held initialised (its length only grows) and a loan views a prefix of it.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Element types with a per-thread spare stack.
pub(crate) trait ScratchElem: Copy + Default + 'static {
    fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
}

macro_rules! spares {
    ($($t:ty => $stack:ident),* $(,)?) => {
        thread_local! {
            $(static $stack: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) };)*
        }
        $(impl ScratchElem for $t {
            fn with_spares<R>(f: impl FnOnce(&mut Vec<Vec<$t>>) -> R) -> Option<R> {
                $stack
                    .try_with(|s| s.try_borrow_mut().ok().map(|mut s| f(&mut s)))
                    .ok()
                    .flatten()
            }
        })*
    };
}

spares!(f32 => SPARE_F32, usize => SPARE_USIZE, i32 => SPARE_I32, u8 => SPARE_U8);

/// A zeroed buffer of `len` elements on loan from this thread's spares: the first `len`
/// elements of a spare whose own length never shrinks.
pub(crate) struct Scratch<T: ScratchElem>(Vec<T>, usize);

impl<T: ScratchElem> Scratch<T> {
    pub(crate) fn take(len: usize) -> Self {
        let mut s = Self::take_dirty(len);
        s.fill(T::default());
        s
    }

    /// [`Scratch::take`] without zeroing what the buffer held: for kernels that write every
    /// element before reading it, and whose buffers are sized for a worst case far larger than
    /// most calls touch.
    pub(crate) fn take_dirty(len: usize) -> Self {
        let mut v = Self::pick(len);
        if v.len() < len {
            // Zeroes only the part no loan has used yet (once per size reached).
            v.resize(len, T::default());
        }
        Scratch(v, len)
    }

    fn pick(len: usize) -> Vec<T> {
        // Best fit: the smallest spare already `len` long, else the longest (to grow).
        // Kernels take buffers of different sizes in changing orders; a plain stack would
        // hand a small one to a large request and reallocate (and zero) long after warm-up.
        T::with_spares(|s| {
            let fits = s
                .iter()
                .enumerate()
                .filter(|(_, v)| v.len() >= len)
                .min_by_key(|(_, v)| v.len());
            let pick = fits
                .or_else(|| s.iter().enumerate().max_by_key(|(_, v)| v.len()))
                .map(|(i, _)| i);
            pick.map(|i| s.swap_remove(i))
        })
        .flatten()
        .unwrap_or_default()
    }
}

impl<T: ScratchElem> Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0[..self.1]
    }
}

impl<T: ScratchElem> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0[..self.1]
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

    /// A dirty take of a spare that once held more keeps the spare's length: a later take of
    /// the full size finds it without zeroing (the old contents are still there).
    #[test]
    fn a_dirty_take_never_shrinks_its_spare() {
        {
            let mut big = Scratch::<usize>::take(1000);
            big[999] = 42;
        }
        {
            let small = Scratch::<usize>::take_dirty(10);
            assert_eq!(small.len(), 10);
        }
        let again = Scratch::<usize>::take_dirty(1000);
        assert_eq!(again[999], 42, "the spare was zeroed or replaced");
        drop(again);
        let zeroed = Scratch::<usize>::take(1000);
        assert!(zeroed.iter().all(|&x| x == 0));
    }

    /// Buffers of two sizes taken in either order keep their roles: once both exist, no take
    /// reallocates, whichever order the kernels ask in.
    #[test]
    fn best_fit_keeps_big_and_small_buffers_apart() {
        {
            let _big = Scratch::<i32>::take(4096);
            let _small = Scratch::<i32>::take(16);
        }
        let caps = |v: &Scratch<i32>| v.0.len();
        for _ in 0..3 {
            let small = Scratch::<i32>::take(16);
            let big = Scratch::<i32>::take(4096);
            assert!(caps(&small) < 4096 && caps(&big) >= 4096);
            drop(small);
            drop(big);
        }
    }
}
