//! Keeping the file size exact while block-rounded direct writes run.
//!
//! A misaligned direct write that extends the file writes whole blocks, so
//! while it runs (and until trimmed) the kernel's `i_size` is rounded up to
//! a block: a WRITE of 100 bytes at 8192 leaves `i_size` at 12288. The file
//! must end at exactly `max(old_size, offset + len)` instead (RFC 1813 WRITE
//! semantics; a client would otherwise see zeros it never wrote).
//!
//! The fix-up is an `ftruncate` to the exact size, but it must not cut off a
//! concurrent extending write that has already put its data beyond that
//! size. So extending writes register here before their I/O ("extenders")
//! and report their exact end when done; the size is trimmed only when the
//! last extender in flight finishes, to the largest end any of them (or
//! anything before them) reached. Writes entirely below the size run
//! without registering: they cannot change `i_size`.
//!
//! Lock order: the range lock of the I/O first, then the mutex here, never
//! the other way round. A truncate holds the whole-file range lock, which
//! waits for every in-flight write (each holds a range lock), so it never
//! overlaps an extender.

use std::io;
use std::os::fd::BorrowedFd;

use parking_lot::Mutex;

#[derive(Debug)]
struct SizeState {
    /// The file size the completed operations define. Equal to `i_size`
    /// whenever no extender is in flight.
    logical: u64,
    /// Writes in flight whose I/O reaches beyond `logical`.
    extenders: u32,
    /// Largest exact end of any extender since the last time `extenders`
    /// was 0: the size a reader may see while they run.
    pending_end: u64,
}

/// Size bookkeeping of one open file.
#[derive(Debug)]
pub(crate) struct SizeTracker {
    state: Mutex<SizeState>,
}

/// A write's registration with the [`SizeTracker`]; [`SizeClaim::finish`]
/// must be called when its I/O is done (dropping it counts as a failed
/// write).
#[must_use]
pub(crate) struct SizeClaim<'a> {
    tracker: &'a SizeTracker,
    fd: BorrowedFd<'a>,
    /// `Some(exact end)` for an extender, `None` for a write below the size.
    extends_to: Option<u64>,
}

fn current_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let st = rustix::fs::fstat(fd)?;
    // st_size of a regular file is never negative.
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

impl SizeTracker {
    pub(crate) fn new(size: u64) -> Self {
        Self {
            state: Mutex::new(SizeState {
                logical: size,
                extenders: 0,
                pending_end: 0,
            }),
        }
    }

    /// Registers a write whose I/O covers up to `io_end` (block-rounded) and
    /// whose data ends at `data_end`. Call with the write's range lock held.
    pub(crate) fn begin_write<'a>(
        &'a self,
        fd: BorrowedFd<'a>,
        io_end: u64,
        data_end: u64,
    ) -> io::Result<SizeClaim<'a>> {
        let mut state = self.state.lock();
        if state.extenders == 0 {
            // Nothing of ours has `i_size` rounded up: the kernel's size is
            // the truth (and picks up changes made outside the server).
            state.logical = current_size(fd)?;
        }
        let extends_to = if io_end > state.logical {
            state.extenders += 1;
            state.pending_end = state.pending_end.max(data_end);
            Some(data_end)
        } else {
            None
        };
        Ok(SizeClaim {
            tracker: self,
            fd,
            extends_to,
        })
    }

    /// The size a reader should trust: the kernel's when no extender runs,
    /// otherwise the largest exact end reached or being written (never a
    /// block-rounded `i_size`).
    pub(crate) fn visible_size(&self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let state = self.state.lock();
        if state.extenders == 0 {
            current_size(fd)
        } else {
            Ok(state.logical.max(state.pending_end))
        }
    }

    /// Sets the size to `new_size` with `ftruncate`. The caller holds the
    /// whole-file exclusive range lock, so no write is in flight.
    pub(crate) fn truncate(&self, fd: BorrowedFd<'_>, new_size: u64) -> io::Result<()> {
        let mut state = self.state.lock();
        debug_assert_eq!(state.extenders, 0);
        rustix::fs::ftruncate(fd, new_size)?;
        state.logical = new_size;
        state.pending_end = 0;
        Ok(())
    }
}

impl SizeClaim<'_> {
    /// Whether this write was registered as extending the file.
    #[cfg(test)]
    pub(crate) fn is_extending(&self) -> bool {
        self.extends_to.is_some()
    }

    /// Reports the write done. `succeeded`: all of its bytes were written,
    /// so its exact end now counts. If it was the last extender in flight,
    /// trims a block-rounded `i_size` back to the exact size; returns
    /// whether it did (the caller then syncs the size for stable writes).
    pub(crate) fn finish(mut self, succeeded: bool) -> io::Result<bool> {
        self.finish_inner(succeeded)
    }

    fn finish_inner(&mut self, succeeded: bool) -> io::Result<bool> {
        let Some(data_end) = self.extends_to.take() else {
            return Ok(false);
        };
        let mut state = self.tracker.state.lock();
        if succeeded {
            state.logical = state.logical.max(data_end);
        }
        state.extenders -= 1;
        if state.extenders > 0 {
            return Ok(false);
        }
        state.pending_end = 0;
        // Last extender out: anything beyond `logical` is block rounding
        // (or a failed write's partial blocks), never data of a completed
        // write. Still under the mutex, so no new extender starts meanwhile.
        if current_size(self.fd)? > state.logical {
            rustix::fs::ftruncate(self.fd, state.logical)?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl Drop for SizeClaim<'_> {
    fn drop(&mut self) {
        if self.extends_to.is_some() {
            // Not finished (an early return or a panic): count it as failed
            // so the extender count stays right.
            if let Err(e) = self.finish_inner(false) {
                tracing::error!(error = %e, "size fix-up after an abandoned write failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn file_of(len: u64) -> std::fs::File {
        let f = tempfile::tempfile().unwrap();
        f.set_len(len).unwrap();
        f
    }

    fn len(f: &std::fs::File) -> u64 {
        f.metadata().unwrap().len()
    }

    #[test]
    fn inner_write_does_not_register() {
        let f = file_of(10000);
        let t = SizeTracker::new(10000);
        let claim = t.begin_write(f.as_fd(), 8192, 8000).unwrap();
        assert!(!claim.is_extending());
        assert!(!claim.finish(true).unwrap());
        assert_eq!(len(&f), 10000);
    }

    #[test]
    fn rounded_extension_is_trimmed() {
        let f = file_of(100);
        let t = SizeTracker::new(100);
        let claim = t.begin_write(f.as_fd(), 4096, 200).unwrap();
        assert!(claim.is_extending());
        f.set_len(4096).unwrap(); // what the block-rounded direct write does
        assert_eq!(t.visible_size(f.as_fd()).unwrap(), 200);
        assert!(claim.finish(true).unwrap());
        assert_eq!(len(&f), 200);
        assert_eq!(t.visible_size(f.as_fd()).unwrap(), 200);
    }

    #[test]
    fn trim_waits_for_the_last_extender() {
        let f = file_of(0);
        let t = SizeTracker::new(0);
        let a = t.begin_write(f.as_fd(), 4096, 100).unwrap();
        let b = t.begin_write(f.as_fd(), 12288, 8292).unwrap();
        f.set_len(12288).unwrap();
        // a finishes first: b's block is beyond, the size must stay.
        assert!(!a.finish(true).unwrap());
        assert_eq!(len(&f), 12288);
        assert!(b.finish(true).unwrap());
        assert_eq!(len(&f), 8292);
    }

    #[test]
    fn failed_extender_does_not_count() {
        let f = file_of(50);
        let t = SizeTracker::new(50);
        let a = t.begin_write(f.as_fd(), 4096, 300).unwrap();
        f.set_len(4096).unwrap();
        drop(a); // abandoned = failed
        assert_eq!(len(&f), 50);
    }

    #[test]
    fn truncate_sets_logical() {
        let f = file_of(5000);
        let t = SizeTracker::new(5000);
        t.truncate(f.as_fd(), 10).unwrap();
        assert_eq!(len(&f), 10);
        let c = t.begin_write(f.as_fd(), 4096, 20).unwrap();
        assert!(c.is_extending());
        assert!(!c.finish(true).unwrap());
    }
}
