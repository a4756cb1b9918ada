//! Weight matrix bytes in memory the OS may back with 2 MiB transparent huge pages.
//!
//! Why: a decode step streams every weight from DRAM once (about 100 MB for SmolLM2). With
//! 4 KiB pages that is a TLB miss and a page walk every 4 KiB, and where transparent huge
//! pages are in `madvise` mode (the common default) the OS gives huge pages only to memory
//! that asked for them before its first touch. So weight buffers are carved from slabs: fresh
//! anonymous mappings of [`SLAB`] bytes (or one buffer's size, if larger), aligned to 2 MiB and
//! advised `MADV_HUGEPAGE` before any page is written; a slab is unmapped when the last buffer
//! carved from it is dropped. Unused slab tails are never touched, so they cost address space,
//! not memory.
//!
//! Guarantees: a buffer is exactly its length of bytes, zeroed when made, exclusively owned
//! (carved ranges never overlap, and start on 64-byte boundaries). Buffers under [`MIN_CARVED`] bytes, other
//! operating systems, a failed mapping and `OXLLM_HUGE_PAGES=0` (for A/B measurements) use the
//! heap instead; results never depend on where the bytes live.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes per slab (16 huge pages).
const SLAB: usize = 32 << 20;
/// Huge page size the slabs are aligned to.
const HUGE: usize = 2 << 20;
/// Smaller buffers stay on the heap (a slab's page granularity would not pay for them).
const MIN_CARVED: usize = 64 << 10;
/// Alignment of carved buffers (a cache line).
const ALIGN: usize = 64;

/// A weight matrix's bytes (see the module doc).
pub struct WeightBytes {
    repr: Repr,
}

enum Repr {
    Heap(Vec<u8>),
    Carved {
        slab: Arc<Slab>,
        offset: usize,
        len: usize,
    },
}

impl WeightBytes {
    /// `len` zero bytes, carved from a huge-page slab where possible.
    pub fn zeroed(len: usize) -> Self {
        let repr = match carve(len) {
            Some((slab, offset)) => Repr::Carved { slab, offset, len },
            None => Repr::Heap(vec![0; len]),
        };
        WeightBytes { repr }
    }

    /// `v`'s bytes, copied into a huge-page slab where possible (else `v` itself).
    pub fn from_vec(v: Vec<u8>) -> Self {
        match carve(v.len()) {
            Some((slab, offset)) => {
                let mut b = WeightBytes {
                    repr: Repr::Carved {
                        slab,
                        offset,
                        len: v.len(),
                    },
                };
                b.copy_from_slice(&v);
                b
            }
            None => WeightBytes {
                repr: Repr::Heap(v),
            },
        }
    }

    /// Whether the bytes live in a huge-page slab (tests, diagnostics).
    pub fn is_carved(&self) -> bool {
        matches!(self.repr, Repr::Carved { .. })
    }
}

impl Deref for WeightBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Heap(v) => v,
            // SAFETY: `offset..offset + len` lies inside the slab's live mapping (kept alive
            // by the Arc) and belongs to this buffer alone.
            Repr::Carved { slab, offset, len } => unsafe {
                std::slice::from_raw_parts(slab.base.add(*offset), *len)
            },
        }
    }
}

impl DerefMut for WeightBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.repr {
            Repr::Heap(v) => v,
            // SAFETY: as in `deref`; `&mut self` makes this the only access to the range.
            Repr::Carved { slab, offset, len } => unsafe {
                std::slice::from_raw_parts_mut(slab.base.add(*offset), *len)
            },
        }
    }
}

impl Clone for WeightBytes {
    fn clone(&self) -> Self {
        let mut c = WeightBytes::zeroed(self.len());
        c.copy_from_slice(self);
        c
    }
}

impl std::fmt::Debug for WeightBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WeightBytes({} bytes", self.len())?;
        write!(f, "{})", if self.is_carved() { ", carved" } else { "" })
    }
}

/// One anonymous mapping; `base` is its first 2 MiB boundary.
struct Slab {
    map: *mut u8,
    map_len: usize,
    base: *mut u8,
    len: usize,
}

// SAFETY: a slab is plain memory owned by the process; buffers carved from it own disjoint
// ranges (handed out under the carver's lock), so sharing the slab across threads is sound.
unsafe impl Send for Slab {}
// SAFETY: as above; the slab itself is never written through a shared reference.
unsafe impl Sync for Slab {}

impl Drop for Slab {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: `map`/`map_len` is the mapping this slab made; no buffer refers to it any
        // more (the last Arc is being dropped).
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

/// A fresh slab of at least `len` bytes, or `None` where mapping fails or is unsupported.
fn map_slab(len: usize) -> Option<Slab> {
    #[cfg(target_os = "linux")]
    {
        let map_len = len + HUGE;
        // SAFETY: a new private anonymous mapping; it affects no existing memory.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let map = map.cast::<u8>();
        let base = map.wrapping_add(map.align_offset(HUGE));
        // SAFETY: advice on the mapping just made, before any of its pages is touched; if the
        // OS declines (huge pages off), the mapping stays as it is.
        unsafe {
            libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE);
        }
        Some(Slab {
            map,
            map_len,
            base,
            len,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = len;
        None
    }
}

/// The slab being carved and its first free byte.
struct Carver {
    slab: Option<Arc<Slab>>,
    used: usize,
}

fn huge_pages_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXLLM_HUGE_PAGES").map_or(true, |v| v != "0"))
}

/// Advises the OS to back the whole 2 MiB pages inside `buf` with huge pages from their next
/// first touch (no effect on pages already touched, none on the contents). For large buffers
/// other than weights, such as the K/V pool, made zeroed by the allocator (fresh anonymous
/// pages, untouched until written). Nothing happens for buffers under 2 MiB of whole pages, off
/// Linux, or with `OXLLM_HUGE_PAGES=0`; returns whether advice was given.
pub fn advise_huge_pages<T>(buf: &mut [T]) -> bool {
    let start = buf.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(buf);
    let (first, last) = (start.next_multiple_of(HUGE), end - end % HUGE);
    if last <= first || !huge_pages_on() {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `first..last` lies inside `buf`, memory this process owns and `&mut` makes
        // exclusively ours here; MADV_HUGEPAGE changes how future faults are served, never the
        // contents, and a refusal (huge pages off) leaves the mapping as it was.
        let rc = unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            )
        };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// A zeroed range of `len` bytes in a slab: (slab, offset), or `None` for the heap.
fn carve(len: usize) -> Option<(Arc<Slab>, usize)> {
    if len < MIN_CARVED || !huge_pages_on() {
        return None;
    }
    static CARVER: Mutex<Carver> = Mutex::new(Carver {
        slab: None,
        used: 0,
    });
    let mut c = CARVER.lock().unwrap_or_else(|e| e.into_inner());
    let at = c.used;
    if let Some(slab) = c.slab.clone().filter(|s| at + len <= s.len) {
        c.used = (at + len).next_multiple_of(ALIGN);
        return Some((slab, at));
    }
    if len > SLAB / 2 {
        // A large buffer gets a slab of its own; the current slab keeps carving.
        let slab = Arc::new(map_slab(len.next_multiple_of(HUGE))?);
        return Some((slab, 0));
    }
    let slab = Arc::new(map_slab(SLAB)?);
    c.used = len.next_multiple_of(ALIGN);
    c.slab = Some(slab.clone());
    Some((slab, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_disjoint_aligned_and_survive_their_neighbours() {
        let sizes = [MIN_CARVED, 3 * MIN_CARVED + 5, 100, SLAB / 2 + 1, SLAB / 3];
        let mut bufs: Vec<WeightBytes> = sizes.iter().map(|&n| WeightBytes::zeroed(n)).collect();
        for (i, (b, &n)) in bufs.iter_mut().zip(&sizes).enumerate() {
            assert_eq!(b.len(), n);
            assert!(b.iter().all(|&x| x == 0), "buffer {i} not zeroed");
            if b.is_carved() {
                assert_eq!(b.as_ptr() as usize % ALIGN, 0, "buffer {i} misaligned");
            }
            b.fill(i as u8 + 1);
        }
        #[cfg(target_os = "linux")]
        assert!(!huge_pages_on() || bufs[0].is_carved(), "no slab on Linux");
        let clone = bufs[1].clone();
        drop(bufs.remove(0));
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 2),
                "buffer {} overwritten",
                i + 1
            );
        }
        assert_eq!(&clone[..], &bufs[0][..]);
        let v: Vec<u8> = (0..MIN_CARVED * 2).map(|i| i as u8).collect();
        assert_eq!(&WeightBytes::from_vec(v.clone())[..], &v[..]);
        assert!(!WeightBytes::zeroed(100).is_carved());
    }

    /// The VmFlags line of the mapping holding `addr`, from /proc/self/smaps.
    #[cfg(target_os = "linux")]
    fn vm_flags_at(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&addr);
                    continue;
                }
            }
            if inside && line.starts_with("VmFlags:") {
                return Some(line.to_string());
            }
        }
        None
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn large_zeroed_buffers_are_advised_and_small_ones_left_alone() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !huge_pages_on() || thp.is_empty() || thp.contains("[never]") {
            eprintln!("huge pages off on this host: nothing to check");
            return;
        }
        let mut pool = vec![0f32; (16 << 20) / 4];
        let inner = (pool.as_ptr() as usize).next_multiple_of(HUGE);
        let before = vm_flags_at(inner).expect("the buffer's mapping is in smaps");
        assert!(
            !before.split_whitespace().any(|f| f == "hg"),
            "advised before the call: {before}"
        );
        assert!(advise_huge_pages(&mut pool));
        let flags = vm_flags_at(inner).expect("the buffer's mapping is in smaps");
        assert!(
            flags.split_whitespace().any(|f| f == "hg"),
            "no MADV_HUGEPAGE flag on the buffer's mapping: {flags}"
        );
        pool[0] = 1.0;
        assert!(
            pool[1..].iter().all(|&x| x == 0.0),
            "advice changed the contents"
        );
        let mut small = vec![0u8; 4096];
        assert!(!advise_huge_pages(&mut small));
    }
}
