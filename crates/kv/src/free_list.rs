//! The free blocks in eviction order, as a doubly linked list threaded through flat vectors
//! indexed by block id.
//!
//! Guarantees O(1) `push_back`, `pop_front` and `remove` of any member (needed when a prefix hit
//! revives a cached block from the middle of the list), no allocation after construction, and
//! that a block is in the list at most once.

use oxllm_core::BlockId;

/// Marks "no neighbour" in the link vectors.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub(crate) struct FreeList {
    prev: Vec<u32>,
    next: Vec<u32>,
    linked: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
}

impl FreeList {
    /// An empty list able to hold block ids `0..capacity`.
    pub(crate) fn new(capacity: usize) -> Self {
        FreeList {
            prev: vec![NIL; capacity],
            next: vec![NIL; capacity],
            linked: vec![false; capacity],
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn contains(&self, id: BlockId) -> bool {
        self.linked.get(id as usize).copied().unwrap_or(false)
    }

    /// Appends `id` as the last block to evict. Returns false (and does nothing) if it is
    /// already in the list or out of range.
    pub(crate) fn push_back(&mut self, id: BlockId) -> bool {
        let i = id as usize;
        if i >= self.linked.len() || self.linked[i] {
            return false;
        }
        self.linked[i] = true;
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.len += 1;
        true
    }

    /// Removes and returns the block to evict first.
    pub(crate) fn pop_front(&mut self) -> Option<BlockId> {
        let head = self.head;
        if head == NIL {
            return None;
        }
        self.remove(head);
        Some(head)
    }

    /// Unlinks `id` wherever it is. Returns false if it was not in the list.
    pub(crate) fn remove(&mut self, id: BlockId) -> bool {
        if !self.contains(id) {
            return false;
        }
        let i = id as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.linked[i] = false;
        self.len -= 1;
        true
    }

    /// The members, first to evict first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let id = cur;
            cur = self.next[id as usize];
            Some(id)
        })
    }

    /// Checks that the links, the membership flags and the length agree.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut seen = 0usize;
        let mut prev = NIL;
        let mut cur = self.head;
        while cur != NIL {
            let i = cur as usize;
            if i >= self.linked.len() || !self.linked[i] {
                return Err(format!("free list links to unflagged block {cur}"));
            }
            if self.prev[i] != prev {
                return Err(format!("free list back link of block {cur} is broken"));
            }
            seen += 1;
            if seen > self.len {
                return Err("free list is longer than its length (a cycle?)".into());
            }
            prev = cur;
            cur = self.next[i];
        }
        if prev != self.tail {
            return Err("free list tail does not end the chain".into());
        }
        let flagged = self.linked.iter().filter(|&&l| l).count();
        if seen != self.len || flagged != self.len {
            return Err(format!(
                "free list length {} but {seen} linked and {flagged} flagged",
                self.len
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_and_middle_removal() {
        let mut list = FreeList::new(6);
        for id in [3, 1, 4, 5] {
            assert!(list.push_back(id));
        }
        assert!(!list.push_back(4), "a block is linked at most once");
        assert!(list.remove(4));
        assert!(!list.remove(4));
        assert_eq!(list.iter().collect::<Vec<_>>(), vec![3, 1, 5]);
        assert_eq!(list.pop_front(), Some(3));
        assert!(list.remove(5));
        assert_eq!(list.pop_front(), Some(1));
        assert_eq!(list.pop_front(), None);
        assert!(list.check().is_ok());
        assert!(!list.push_back(6), "out of range ids are refused");
    }
}
