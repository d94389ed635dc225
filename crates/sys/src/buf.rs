//! Heap buffers with a chosen alignment, for direct I/O.
//!
//! `O_DIRECT` needs the user buffer aligned to the file's `stx_dio_mem_align`
//! and the length and file offset aligned to `stx_dio_offset_align`
//! (statx(2)). `Vec<u8>` gives no alignment guarantee, so the data plane's
//! buffers are allocated here with an explicit [`Layout`], or carved from a
//! [`BufArena`]: one mapping for many buffers of one size, in transparent
//! huge pages where the kernel has them, so that a large direct transfer
//! reaches the device as one request (a buffer of scattered 4 KiB pages is
//! split at the device's segment limit: 128 segments, 512 KiB on loop and
//! many virtual disks).

use std::alloc::{self, Layout};
use std::fmt;
use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The smallest alignment an [`AlignedBuf`] accepts: one 512-byte sector,
/// the smallest direct-I/O unit Linux block devices have.
pub const MIN_ALIGN: usize = 512;

/// Why an [`AlignedBuf`] could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlignedBufError {
    /// The alignment is below [`MIN_ALIGN`] or not a power of two.
    BadAlignment(usize),
    /// The capacity is zero or too large for a [`Layout`].
    BadCapacity(usize),
    /// The allocator returned no memory.
    OutOfMemory,
}

impl fmt::Display for AlignedBufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadAlignment(a) => {
                write!(f, "alignment {a} is not a power of two >= {MIN_ALIGN}")
            }
            Self::BadCapacity(c) => write!(f, "capacity {c} cannot be allocated"),
            Self::OutOfMemory => write!(f, "out of memory"),
        }
    }
}

impl std::error::Error for AlignedBufError {}

impl From<AlignedBufError> for std::io::Error {
    fn from(e: AlignedBufError) -> Self {
        match e {
            AlignedBufError::OutOfMemory => std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            other => std::io::Error::new(std::io::ErrorKind::InvalidInput, other),
        }
    }
}

/// A fixed-size heap buffer whose first byte is aligned to `align`.
///
/// The memory is **always zero-initialised** at allocation (with
/// `alloc_zeroed`, which for large sizes is the kernel's zero pages, so it
/// costs nothing until touched). A buffer that is reused — the data plane's
/// pool hands the same buffer to many requests — keeps whatever the last user
/// wrote: callers must only expose bytes they filled themselves.
///
/// The whole capacity is always initialised, so the buffer derefs to a
/// `[u8]` of exactly `capacity` bytes.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    align: usize,
    owner: Owner,
}

/// Who frees an [`AlignedBuf`]'s memory.
enum Owner {
    /// The global allocator, with this layout, when the buffer is dropped.
    Heap(Layout),
    /// The arena the buffer was carved from, when its last buffer is gone.
    Arena(#[allow(dead_code)] Arc<BufArena>),
}

// SAFETY: `AlignedBuf` uniquely owns its bytes (like `Box<[u8]>`: a heap
// allocation, or a range of an arena that no other buffer is given); there
// is no shared interior state, so moving it to another thread is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reading the bytes through `&[u8]`,
// which is sound from several threads at once (like `&Box<[u8]>`).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Allocates `capacity` zeroed bytes aligned to `align` (a power of two,
    /// at least [`MIN_ALIGN`]).
    pub fn new(capacity: usize, align: usize) -> Result<Self, AlignedBufError> {
        if align < MIN_ALIGN || !align.is_power_of_two() {
            return Err(AlignedBufError::BadAlignment(align));
        }
        if capacity == 0 {
            return Err(AlignedBufError::BadCapacity(capacity));
        }
        let layout = Layout::from_size_align(capacity, align)
            .map_err(|_| AlignedBufError::BadCapacity(capacity))?;
        // SAFETY: `layout` has a non-zero size (checked above), which is the
        // only precondition of `alloc_zeroed`.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(AlignedBufError::OutOfMemory)?;
        Ok(Self {
            ptr,
            len: capacity,
            align,
            owner: Owner::Heap(layout),
        })
    }

    /// The number of bytes in the buffer.
    pub fn capacity(&self) -> usize {
        self.len
    }

    /// The alignment of the first byte.
    pub fn align(&self) -> usize {
        self.align
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` bytes that this value owns (a heap
        // allocation, or an arena range given to no other buffer and mapped
        // while the arena lives, which `owner` keeps alive), all initialised
        // (zeroed at allocation, then only written through `&mut [u8]`); the
        // borrow of `self` keeps them alive and prevents mutable aliasing.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; the exclusive borrow of `self` guarantees no
        // other reference to these bytes exists while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Owner::Heap(layout) = self.owner {
            // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly
            // `layout` and is freed only here, once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
        // An arena's range is unmapped with the arena (`Owner::Arena`).
    }
}

/// The transparent huge page size of x86-64 and of arm64 with 4 KiB pages.
/// An arena is aligned to it and sized in multiples of it, so that the
/// kernel can back every part of it with huge pages.
pub const HUGE_PAGE: usize = 2 << 20;

/// One anonymous mapping holding up to `count` buffers of `buf_len` bytes,
/// handed out one at a time by [`BufArena::take`] and never given back: a
/// pool keeps and reuses the buffers it took, and the mapping goes away
/// when the arena and every buffer taken from it are dropped.
///
/// It is aligned to [`HUGE_PAGE`] and advised `MADV_HUGEPAGE`, so where
/// transparent huge pages are enabled (`always` or `madvise`) a buffer is
/// a few physically contiguous runs instead of one page each: a 1 MiB
/// direct read or write is then one device request, where the same buffer
/// of scattered pages is split at the device's segment limit. The memory
/// is mapped, not used: pages (huge or not) come as buffers are first
/// touched, so a pool that never needs all its buffers costs only what it
/// used, rounded up to huge pages.
pub struct BufArena {
    base: NonNull<u8>,
    map_len: usize,
    buf_len: usize,
    align: usize,
    count: usize,
    next: AtomicUsize,
}

// SAFETY: the arena's only mutable state is the atomic `next`; the mapping
// itself is only reached through the buffers it hands out, each a range no
// other buffer has.
unsafe impl Send for BufArena {}
// SAFETY: as above: `take` is safe to call from several threads at once
// (an atomic counter decides which range each call gets).
unsafe impl Sync for BufArena {}

impl BufArena {
    /// Maps room for `count` buffers of `buf_len` bytes, each aligned to
    /// `align` (a power of two from [`MIN_ALIGN`] to [`HUGE_PAGE`] that
    /// divides `buf_len`).
    pub fn new(buf_len: usize, align: usize, count: usize) -> io::Result<Arc<Self>> {
        if align < MIN_ALIGN || !align.is_power_of_two() || align > HUGE_PAGE {
            return Err(AlignedBufError::BadAlignment(align).into());
        }
        if buf_len == 0 || !buf_len.is_multiple_of(align) || count == 0 {
            return Err(AlignedBufError::BadCapacity(buf_len).into());
        }
        let map_len = buf_len
            .checked_mul(count)
            .and_then(|n| n.checked_next_multiple_of(HUGE_PAGE))
            .ok_or(AlignedBufError::BadCapacity(buf_len))?;
        let span = map_len
            .checked_add(HUGE_PAGE)
            .ok_or(AlignedBufError::BadCapacity(buf_len))?;
        // SAFETY: a new private anonymous mapping at an address of the
        // kernel's choosing: it aliases nothing of ours.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // Keep the huge-page-aligned `map_len` bytes inside the `span`
        // mapped and give the rest back.
        let start = raw as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        let head = aligned - start;
        let tail = span - head - map_len;
        // SAFETY: both ranges lie inside the mapping just made, which
        // nothing else uses yet; `munmap` of a zero-length range is skipped.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((aligned + map_len) as *mut libc::c_void, tail);
            }
        }
        let base = aligned as *mut u8;
        // Advice only: a kernel without transparent huge pages says EINVAL
        // and the arena works with small pages.
        // SAFETY: `base..base + map_len` is our mapping.
        unsafe { libc::madvise(base.cast(), map_len, libc::MADV_HUGEPAGE) };
        Ok(Arc::new(Self {
            // `mmap` never returns address 0 on success for a NULL hint.
            base: NonNull::new(base).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?,
            map_len,
            buf_len,
            align,
            count,
            next: AtomicUsize::new(0),
        }))
    }

    /// The next buffer, zeroed, or `None` once all `count` were taken.
    pub fn take(self: &Arc<Self>) -> Option<AlignedBuf> {
        let index = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.count).then_some(n + 1)
            })
            .ok()?;
        // SAFETY: `index < count`, so the range `index * buf_len ..
        // (index + 1) * buf_len` lies inside the mapping, and the atomic
        // counter hands each index out once: no two buffers share a byte.
        let ptr = unsafe { self.base.add(index * self.buf_len) };
        Some(AlignedBuf {
            ptr,
            len: self.buf_len,
            align: self.align,
            owner: Owner::Arena(self.clone()),
        })
    }

    /// The address range of the mapping (for tests that read the kernel's
    /// view of it in /proc/self/smaps).
    pub fn range(&self) -> std::ops::Range<usize> {
        self.base.as_ptr() as usize..self.base.as_ptr() as usize + self.map_len
    }
}

impl Drop for BufArena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; every buffer taken from it held
        // an `Arc` of the arena, so none is left to use it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

impl fmt::Debug for BufArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufArena")
            .field("buf_len", &self.buf_len)
            .field("count", &self.count)
            .field("taken", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("capacity", &self.capacity())
            .field("align", &self.align())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for align in [512, 4096, 65536] {
            let buf = AlignedBuf::new(3 * align + 7, align).unwrap();
            assert_eq!(buf.as_ptr() as usize % align, 0);
            assert_eq!(buf.len(), 3 * align + 7);
            assert!(buf.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn writes_stick() {
        let mut buf = AlignedBuf::new(8192, 4096).unwrap();
        buf[100..200].fill(7);
        assert!(buf[100..200].iter().all(|&b| b == 7));
        assert_eq!(buf[99], 0);
        assert_eq!(buf[200], 0);
    }

    #[test]
    fn rejects_bad_parameters() {
        assert_eq!(
            AlignedBuf::new(4096, 256).unwrap_err(),
            AlignedBufError::BadAlignment(256)
        );
        assert_eq!(
            AlignedBuf::new(4096, 3000).unwrap_err(),
            AlignedBufError::BadAlignment(3000)
        );
        assert_eq!(
            AlignedBuf::new(0, 4096).unwrap_err(),
            AlignedBufError::BadCapacity(0)
        );
        assert_eq!(
            AlignedBuf::new(usize::MAX - 10, 4096).unwrap_err(),
            AlignedBufError::BadCapacity(usize::MAX - 10)
        );
    }

    #[test]
    fn arena_buffers_are_aligned_disjoint_zeroed_and_outlive_the_arena() {
        let len = 1152 << 10;
        let arena = BufArena::new(len, 4096, 3).unwrap();
        assert_eq!(arena.range().start % HUGE_PAGE, 0);
        assert_eq!(arena.range().len(), 2 * HUGE_PAGE);
        let mut bufs: Vec<AlignedBuf> = (0..3).map(|_| arena.take().unwrap()).collect();
        assert!(arena.take().is_none(), "only `count` buffers");
        for (i, buf) in bufs.iter_mut().enumerate() {
            assert_eq!((buf.len(), buf.align()), (len, 4096));
            assert_eq!(buf.as_ptr() as usize % 4096, 0);
            assert!(buf.iter().all(|&b| b == 0));
            buf.fill(i as u8 + 1);
        }
        drop(arena);
        // Each buffer kept its own bytes: the ranges do not overlap, and
        // the mapping lives while a buffer does.
        for (i, buf) in bufs.iter().enumerate() {
            assert!(buf.iter().all(|&b| b == i as u8 + 1));
        }
        let last = bufs.pop().unwrap();
        drop(bufs);
        assert!(last.iter().all(|&b| b == 3));
    }

    #[test]
    fn arena_rejects_bad_parameters() {
        assert!(BufArena::new(4096, 256, 1).is_err());
        assert!(BufArena::new(4096, 4 * HUGE_PAGE, 1).is_err());
        assert!(
            BufArena::new(4096 + 512, 4096, 1).is_err(),
            "length not a multiple"
        );
        assert!(BufArena::new(4096, 4096, 0).is_err());
        assert!(BufArena::new(usize::MAX / 2 + 1, 4096, 4).is_err());
    }

    /// The arena asks for huge pages: the kernel marks its mapping eligible
    /// wherever transparent huge pages are not disabled outright.
    #[test]
    fn arena_is_eligible_for_huge_pages() {
        let enabled = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if enabled.is_empty() || enabled.contains("[never]") {
            eprintln!("transparent huge pages are off here: nothing to check");
            return;
        }
        let arena = BufArena::new(1 << 20, 4096, 4).unwrap();
        let at = arena.range().start;
        // The lines of the mapping that holds the arena (which may have been
        // merged with a neighbour of the same flags): its header
        // "start-end perms ...", then attribute lines "Name: value".
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let contains = |header: &str| {
            let range = header.split(' ').next().unwrap_or("");
            let Some((a, b)) = range.split_once('-') else {
                return false;
            };
            match (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                (Ok(a), Ok(b)) => a <= at && at < b,
                _ => false,
            }
        };
        let is_attr = |l: &&str| l.split(' ').next().is_some_and(|w| w.ends_with(':'));
        let vma: Vec<&str> = smaps
            .lines()
            .skip_while(|l| is_attr(l) || !contains(l))
            .skip(1)
            .take_while(is_attr)
            .collect();
        assert!(!vma.is_empty(), "arena mapping not in smaps");
        assert!(
            vma.iter()
                .any(|l| l.starts_with("THPeligible:") && l.ends_with('1')),
            "arena not eligible for huge pages: {vma:?}"
        );
        assert!(vma
            .iter()
            .any(|l| l.starts_with("VmFlags:") && l.contains(" hg")));
    }

    #[test]
    fn send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<AlignedBuf>();
        let buf = AlignedBuf::new(4096, 4096).unwrap();
        let handle = std::thread::spawn(move || buf.len());
        assert_eq!(handle.join().unwrap(), 4096);
    }
}
