//! The size clients see while extending writes are in flight.
//!
//! No write path rounds `i_size` up to a block, so when nothing is in
//! flight the kernel's size is the truth. While an extending write runs,
//! though, the kernel shows it half-done: a buffered write grows `i_size`
//! page by page, a direct write whose tail went buffered shows its tail
//! first. A client must only ever be told sizes that writes end at (the
//! IOR-hard check in tests/tools/iorhard.c asserts it), so extending
//! writes register here ("extenders") and, while any is in flight,
//! attributes report the largest end among them and what completed before.
//!
//! Lock order: the range lock of the I/O first, then the mutex here. A
//! truncate holds the whole-file range lock, so it never overlaps an
//! extender.

use std::io;
use std::os::fd::BorrowedFd;

use parking_lot::Mutex;

#[derive(Debug, Default)]
struct SizeState {
    /// The size completed operations define; valid while `extenders > 0`.
    logical: u64,
    /// Writes in flight that reach beyond `logical`.
    extenders: u32,
    /// Largest end of any extender in flight.
    pending_end: u64,
    /// Moves whenever an extender starts or ends and after every truncate
    /// of ours: a size the kernel reported between two equal readings of
    /// it, with no extender in flight, is a completed one (see
    /// [`SizeTracker::visible_size_given`]), and still the kernel's while
    /// the epoch stays (see [`SizeTracker::kernel_size_since`]).
    epoch: u64,
}

/// In-flight extending writes of one open file.
#[derive(Debug, Default)]
pub(crate) struct SizeTracker {
    state: Mutex<SizeState>,
}

/// A write registered with the [`SizeTracker`]; dropping it ends the
/// registration, [`SizeClaim::succeeded`] first makes its end count.
#[must_use]
pub(crate) struct SizeClaim<'a> {
    tracker: &'a SizeTracker,
    /// `Some(end)` for an extender, `None` for a write below the size.
    extends_to: Option<u64>,
    succeeded: bool,
}

pub(crate) fn fstat_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let st = rustix::fs::fstat(fd)?;
    // st_size of a regular file is never negative.
    Ok(u64::try_from(st.st_size).unwrap_or(0))
}

impl SizeTracker {
    /// Registers a write whose data ends at `data_end`. Call it with the
    /// write's range lock held.
    pub(crate) fn begin_write<'a>(
        &'a self,
        fd: BorrowedFd<'_>,
        data_end: u64,
    ) -> io::Result<SizeClaim<'a>> {
        self.register(data_end, || fstat_size(fd))
    }

    fn register(
        &self,
        data_end: u64,
        kernel_size: impl FnOnce() -> io::Result<u64>,
    ) -> io::Result<SizeClaim<'_>> {
        let mut state = self.state.lock();
        if state.extenders == 0 {
            // Nothing of ours in flight: the kernel's size is the truth
            // (and picks up changes made outside the server).
            state.logical = kernel_size()?;
        }
        let extends_to = (data_end > state.logical).then(|| {
            state.extenders += 1;
            state.epoch += 1;
            state.pending_end = state.pending_end.max(data_end);
            data_end
        });
        Ok(SizeClaim {
            tracker: self,
            extends_to,
            succeeded: false,
        })
    }

    /// The size to report: the kernel's when no extender runs, otherwise
    /// the largest end reached or being written.
    pub(crate) fn probe(&self) -> u64 {
        self.state.lock().epoch
    }

    /// [`SizeTracker::visible_size`] for a caller that read the kernel's
    /// size itself (`kernel_size`, from its statx) after taking `probe`:
    /// that size is used if no extending write was in flight at any time
    /// in between (the epoch did not move and none runs now); otherwise the
    /// kernel may have shown a write half-done, and the size is read again
    /// under the lock.
    pub(crate) fn visible_size_given(
        &self,
        probe: u64,
        kernel_size: u64,
        fd: BorrowedFd<'_>,
    ) -> io::Result<u64> {
        let state = self.state.lock();
        if state.extenders > 0 {
            Ok(state.logical.max(state.pending_end))
        } else if state.epoch == probe {
            Ok(kernel_size)
        } else {
            fstat_size(fd)
        }
    }

    /// A truncate of ours changed the size (call it with the whole-file
    /// range lock still held): sizes read before it are stale.
    pub(crate) fn truncated(&self) {
        self.state.lock().epoch += 1;
    }

    /// The kernel's size for a caller that read it (`kernel_size`) after
    /// taking `probe`, without a second syscall if the epoch has not moved:
    /// no write of ours extended the file and no truncate of ours cut it
    /// since. Only changes made outside the server can have moved it, as
    /// they can move a size read now a moment later. (With extenders in
    /// flight at the probe, `kernel_size` may be a write half-done: never
    /// more than the kernel's size now.)
    pub(crate) fn kernel_size_since(
        &self,
        probe: u64,
        kernel_size: u64,
        fd: BorrowedFd<'_>,
    ) -> io::Result<u64> {
        if self.state.lock().epoch == probe {
            Ok(kernel_size)
        } else {
            fstat_size(fd)
        }
    }

    /// [`SizeTracker::visible_size_given`] reading the kernel's size itself.
    pub(crate) fn visible_size(&self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let state = self.state.lock();
        if state.extenders == 0 {
            fstat_size(fd)
        } else {
            Ok(state.logical.max(state.pending_end))
        }
    }
}

impl SizeClaim<'_> {
    /// Whether the write reaches beyond the size (an extender).
    pub(crate) fn extends(&self) -> bool {
        self.extends_to.is_some()
    }

    /// All of the write's bytes are written: its end counts.
    pub(crate) fn succeeded(mut self) {
        self.succeeded = true;
    }
}

impl Drop for SizeClaim<'_> {
    fn drop(&mut self) {
        let Some(end) = self.extends_to else {
            return;
        };
        let mut state = self.tracker.state.lock();
        if self.succeeded {
            state.logical = state.logical.max(end);
        }
        state.extenders -= 1;
        state.epoch += 1;
        if state.extenders == 0 {
            state.pending_end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_size_read_while_an_extender_ran_is_not_trusted() {
        // The WRITE reply's attributes: probe, statx, then the tracker. An
        // extending write that was half-done at the statx and finished
        // before the tracker was asked must not leave the half-done size.
        let f = tempfile::tempfile().unwrap();
        f.set_len(100).unwrap();
        let t = SizeTracker::default();
        let probe = t.probe();
        assert_eq!(t.visible_size_given(probe, 100, f.as_fd()).unwrap(), 100);
        let probe = t.probe();
        let w = t.begin_write(f.as_fd(), 9000).unwrap();
        f.set_len(4096).unwrap();
        let half_done = 4096; // what the statx saw
        f.set_len(9000).unwrap();
        w.succeeded();
        assert_eq!(
            t.visible_size_given(probe, half_done, f.as_fd()).unwrap(),
            9000
        );
        // With nothing in flight since the probe, the caller's size stands.
        let probe = t.probe();
        assert_eq!(t.visible_size_given(probe, 9000, f.as_fd()).unwrap(), 9000);
    }

    #[test]
    fn in_flight_extenders_show_their_end() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(100).unwrap();
        let t = SizeTracker::default();
        let below = t.begin_write(f.as_fd(), 50).unwrap();
        assert!(below.extends_to.is_none());
        let a = t.begin_write(f.as_fd(), 1000).unwrap();
        let b = t.begin_write(f.as_fd(), 5000).unwrap();
        f.set_len(4096).unwrap(); // half-done: a page of b's buffered write
        assert_eq!(t.visible_size(f.as_fd()).unwrap(), 5000);
        a.succeeded();
        assert_eq!(t.visible_size(f.as_fd()).unwrap(), 5000);
        drop(b); // failed: no longer counts
        assert_eq!(t.visible_size(f.as_fd()).unwrap(), 4096);
        drop(below);
    }
}
