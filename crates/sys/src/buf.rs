//! Heap buffers with a chosen alignment, for direct I/O.
//!
//! `O_DIRECT` needs the user buffer aligned to the file's `stx_dio_mem_align`
//! and the length and file offset aligned to `stx_dio_offset_align`
//! (statx(2)). `Vec<u8>` gives no alignment guarantee, so the data plane's
//! buffers are allocated here with an explicit [`Layout`].

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

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
    layout: Layout,
}

// SAFETY: `AlignedBuf` uniquely owns its allocation (like `Box<[u8]>`); there
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
        Ok(Self { ptr, layout })
    }

    /// The number of bytes in the buffer.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// The alignment of the first byte.
    pub fn align(&self) -> usize {
        self.layout.align()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to an allocation of `layout.size()` bytes that
        // this value owns, all initialised (zeroed at allocation, then only
        // written through `&mut [u8]`); the borrow of `self` keeps it alive
        // and prevents mutable aliasing.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; the exclusive borrow of `self` guarantees no
        // other reference to these bytes exists while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly `layout`
        // and is freed only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
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
    fn send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<AlignedBuf>();
        let buf = AlignedBuf::new(4096, 4096).unwrap();
        let handle = std::thread::spawn(move || buf.len());
        assert_eq!(handle.join().unwrap(), 4096);
    }
}
