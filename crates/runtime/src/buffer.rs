//! Buffers as the CPU backends hold them, and typed, borrow-checked access to them.
//!
//! A [`BufRef`] names a buffer handle and the logical length an op uses; the handle maps to a
//! storage slot, which may be larger (a buffer warmed for a larger bucket serves every smaller
//! one) and which handles whose lifetimes do not overlap share. Access goes through [`Memory`],
//! which hands out `RefCell` borrows: an op that names the same buffer as an input and an
//! output gets [`RuntimeError::Aliased`] instead of undefined behaviour.

use std::any::Any;
use std::cell::{Ref, RefCell, RefMut};

use half::f16;
use half::vec::HalfBitsVecExt;
use oxllm_kernels::matmul::QuantizedActs;
use oxllm_kernels::weight_bytes::advise_huge_pages;

use crate::RuntimeError;

/// What a buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufKind {
    F32,
    /// IEEE half floats (e.g. a K/V cache kept at half the bytes).
    F16,
    U32,
    I32,
    /// Quantized activation rows; lengths count bytes.
    QActs,
    /// A typed value the host prepares before a replay (e.g. per-row sampling state).
    Host,
}

/// The storage of one arena slot.
pub enum Buffer {
    Empty,
    F32(Vec<f32>),
    F16(Vec<f16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    QActs(QuantizedActs),
    Host(Box<dyn Any + Send>),
}

impl Buffer {
    /// A zeroed buffer of `len` elements (bytes for `QActs`); `Host` buffers are made by the
    /// caller.
    pub(crate) fn new(kind: BufKind, len: usize) -> Buffer {
        let mut buffer = Buffer::zeroed(kind, len);
        // Large buffers (the K/V pool above all: attention reads it at scattered blocks every
        // step) are asked for huge pages before their first touch, like the weights.
        match &mut buffer {
            Buffer::F32(v) => _ = advise_huge_pages(v),
            Buffer::F16(v) => _ = advise_huge_pages(v),
            _ => {}
        }
        buffer
    }

    fn zeroed(kind: BufKind, len: usize) -> Buffer {
        match kind {
            BufKind::F32 => Buffer::F32(vec![0.0; len]),
            // Zero bits from the allocator's zeroed pages (`vec!` of a non-primitive writes
            // every element, which for a K/V pool of gigabytes took seconds at start-up).
            BufKind::F16 => Buffer::F16(vec![0u16; len].reinterpret_into()),
            BufKind::U32 => Buffer::U32(vec![0; len]),
            BufKind::I32 => Buffer::I32(vec![0; len]),
            BufKind::QActs => Buffer::QActs(QuantizedActs::with_capacity(len)),
            BufKind::Host => Buffer::Empty,
        }
    }

    pub(crate) fn kind(&self) -> Option<BufKind> {
        match self {
            Buffer::Empty => None,
            Buffer::F32(_) => Some(BufKind::F32),
            Buffer::F16(_) => Some(BufKind::F16),
            Buffer::U32(_) => Some(BufKind::U32),
            Buffer::I32(_) => Some(BufKind::I32),
            Buffer::QActs(_) => Some(BufKind::QActs),
            Buffer::Host(_) => Some(BufKind::Host),
        }
    }

    /// Elements (bytes for `QActs`) this buffer holds without reallocating.
    pub(crate) fn capacity(&self) -> usize {
        match self {
            Buffer::Empty | Buffer::Host(_) => 0,
            Buffer::F32(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::U32(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::QActs(q) => q.capacity(),
        }
    }
}

/// A buffer as ops name it: a handle and the length this use covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufRef {
    pub(crate) slot: u32,
    pub(crate) kind: BufKind,
    pub len: usize,
}

impl BufRef {
    pub fn kind(&self) -> BufKind {
        self.kind
    }

    /// The same buffer seen with a shorter length (e.g. the first `len` rows of an input).
    pub fn prefix(self, len: usize) -> BufRef {
        BufRef {
            len: len.min(self.len),
            ..self
        }
    }
}

/// Every buffer of a backend: storage slots, and the storage slot of each handle.
#[derive(Default)]
pub struct Memory {
    pub(crate) storage: Vec<RefCell<Buffer>>,
    /// Handle -> storage slot ([`Memory::UNMAPPED`] while a step-local buffer has none).
    pub(crate) handles: Vec<u32>,
}

macro_rules! typed_access {
    ($get:ident, $get_mut:ident, $variant:ident, $t:ty) => {
        pub fn $get(&self, op: &'static str, b: BufRef) -> Result<Ref<'_, [$t]>, RuntimeError> {
            self.borrow_as(op, b, BufKind::$variant, |buf| match buf {
                Buffer::$variant(v) if v.len() >= b.len => Some(&v[..b.len]),
                _ => None,
            })
        }

        pub fn $get_mut(
            &self,
            op: &'static str,
            b: BufRef,
        ) -> Result<RefMut<'_, [$t]>, RuntimeError> {
            self.borrow_mut_as(op, b, BufKind::$variant, |buf| match buf {
                Buffer::$variant(v) if v.len() >= b.len => Some(&mut v[..b.len]),
                _ => None,
            })
        }
    };
}

impl Memory {
    pub(crate) const UNMAPPED: u32 = u32::MAX;

    /// The storage slot behind `b` and that storage's kind and capacity (elements; bytes for
    /// `QActs`): a device backend mirrors each storage slot once, so handles that share
    /// storage share device memory too. `None` while `b` has no storage.
    pub fn storage_of(&self, b: BufRef) -> Option<(usize, BufKind, usize)> {
        let s = *self.handles.get(b.slot as usize)?;
        let buf = self.storage.get(s as usize)?.try_borrow().ok()?;
        Some((s as usize, buf.kind()?, buf.capacity()))
    }

    fn cell(
        &self,
        op: &'static str,
        b: BufRef,
        kind: BufKind,
    ) -> Result<&RefCell<Buffer>, RuntimeError> {
        self.handles
            .get(b.slot as usize)
            .and_then(|&s| self.storage.get(s as usize))
            .filter(|_| b.kind == kind)
            .ok_or(RuntimeError::BadBuffer {
                op,
                slot: b.slot,
                kind,
            })
    }

    typed_access!(f32, f32_mut, F32, f32);
    typed_access!(f16, f16_mut, F16, f16);
    typed_access!(u32, u32_mut, U32, u32);
    typed_access!(i32, i32_mut, I32, i32);

    /// A shared borrow of buffer `b` seen through `pick`; errors name `op`.
    fn borrow_as<T: ?Sized>(
        &self,
        op: &'static str,
        b: BufRef,
        kind: BufKind,
        pick: impl FnOnce(&Buffer) -> Option<&T>,
    ) -> Result<Ref<'_, T>, RuntimeError> {
        let cell = self.cell(op, b, kind)?;
        let r = cell
            .try_borrow()
            .map_err(|_| RuntimeError::Aliased { op, slot: b.slot })?;
        Ref::filter_map(r, pick).map_err(|_| RuntimeError::BadBuffer {
            op,
            slot: b.slot,
            kind,
        })
    }

    /// An exclusive borrow of buffer `b` seen through `pick`; errors name `op`.
    fn borrow_mut_as<T: ?Sized>(
        &self,
        op: &'static str,
        b: BufRef,
        kind: BufKind,
        pick: impl FnOnce(&mut Buffer) -> Option<&mut T>,
    ) -> Result<RefMut<'_, T>, RuntimeError> {
        let cell = self.cell(op, b, kind)?;
        let r = cell
            .try_borrow_mut()
            .map_err(|_| RuntimeError::Aliased { op, slot: b.slot })?;
        RefMut::filter_map(r, pick).map_err(|_| RuntimeError::BadBuffer {
            op,
            slot: b.slot,
            kind,
        })
    }

    pub fn qacts(
        &self,
        op: &'static str,
        b: BufRef,
    ) -> Result<Ref<'_, QuantizedActs>, RuntimeError> {
        self.borrow_as(op, b, BufKind::QActs, |buf| match buf {
            Buffer::QActs(q) => Some(q),
            _ => None,
        })
    }

    pub fn qacts_mut(
        &self,
        op: &'static str,
        b: BufRef,
    ) -> Result<RefMut<'_, QuantizedActs>, RuntimeError> {
        self.borrow_mut_as(op, b, BufKind::QActs, |buf| match buf {
            Buffer::QActs(q) => Some(q),
            _ => None,
        })
    }

    /// The typed host value of a `Host` buffer.
    pub fn host<T: Any>(&self, op: &'static str, b: BufRef) -> Result<Ref<'_, T>, RuntimeError> {
        self.borrow_as(op, b, BufKind::Host, |buf| match buf {
            Buffer::Host(v) => v.downcast_ref::<T>(),
            _ => None,
        })
    }

    pub fn host_mut<T: Any>(
        &self,
        op: &'static str,
        b: BufRef,
    ) -> Result<RefMut<'_, T>, RuntimeError> {
        self.borrow_mut_as(op, b, BufKind::Host, |buf| match buf {
            Buffer::Host(v) => v.downcast_mut::<T>(),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind starts zeroed and as long as asked, the f16 pool included (it is built from
    /// zeroed u16 bits, not written element by element).
    #[test]
    fn new_buffers_are_zeroed_and_sized() {
        let len = 3 << 20;
        match Buffer::new(BufKind::F16, len) {
            Buffer::F16(v) => {
                assert_eq!(v.len(), len);
                assert!(v.iter().all(|x| x.to_bits() == 0));
            }
            _ => panic!("an f16 buffer of another kind"),
        }
        match Buffer::new(BufKind::F32, len) {
            Buffer::F32(v) => assert!(v.len() == len && v.iter().all(|x| x.to_bits() == 0)),
            _ => panic!("an f32 buffer of another kind"),
        }
    }
}
