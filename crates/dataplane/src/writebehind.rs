//! Write-behind for direct mode's page-cache writes.
//!
//! In direct mode, small and misaligned UNSTABLE WRITEs go through the page
//! cache (`write_small_buffered`), and their pages would sit there dirty
//! until COMMIT: the kernel starts writeback of its own only after 30 s or
//! past `dirty_background_ratio` (gigabytes on a large server). A COMMIT
//! after an IOR-hard pass over a 979 MiB file then wrote the whole file by
//! itself, 0.2-1 s of a 1.35 s job, with the device idle while the records
//! arrived.
//!
//! So each file keeps a [`Frontier`]: the furthest end of such a write.
//! Once it has moved [`STEP`] past the last range handed over, the range up
//! to [`LAG`] behind it (where neighbouring records of several clients are
//! complete, so no page is written twice) goes to the plane's write-behind
//! thread, which starts its writeback (`sync_file_range(WRITE)`, no
//! waiting). The pages stay cached, clean, until COMMIT drops them (or the
//! kernel reclaims them). Dropping them here as well, a step behind, was
//! tried and cost far more than it saved: with checksums on, one client in
//! most IOR-hard runs fell more than the lag behind the others, found the
//! partial pages of its records gone, and had the kernel read them back
//! from the device, which slowed it further (about 5,000 device reads per
//! run, `block_bio_queue` traced to the integrity hook's `pread`; 420
//! against 580 MiB/s, scratch runs of the `bench/loadgen` IOR-hard shape).
//!
//! Durability is unchanged: data reaches the disk earlier, but a WRITE is
//! still only promised stable by COMMIT, whose `fdatasync` waits for
//! whatever is still in flight. `SYNC_FILE_RANGE_WRITE` neither waits for
//! nor consumes a writeback error, so that COMMIT still reports it. The
//! thread holds a duplicate of the file's buffered descriptor, used for
//! that advisory call only; it writes no data. If the thread is
//! busy (its queue full), a range is simply left to COMMIT.

use std::ops::Range;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use dionfs_sys::io::start_writeback;

use crate::align::round_down;
use crate::counters::Counters;

/// How far behind the furthest page-cache write a range must end to be
/// written back: IOR-hard's 8 clients x 2 records in flight span 750 KiB.
pub const LAG: u64 = 4 << 20;
/// How much a file's frontier must move before the next range is handed
/// over.
pub const STEP: u64 = 4 << 20;
/// Ranges start and end on 4 KiB boundaries (`sync_file_range` rounds
/// to whole pages itself).
const PAGE: u64 = 4096;
/// Ranges waiting for the thread; more are left to COMMIT.
const QUEUE: usize = 64;

/// A file's page-cache writes, as write-behind sees them.
#[derive(Debug, Default)]
pub(crate) struct Frontier {
    /// The furthest end of a page-cache write.
    end: AtomicU64,
    /// Handed over for writeback up to here.
    kicked: AtomicU64,
}

impl Frontier {
    /// A page-cache write of the file ended at `end`: the range now due
    /// for writeback, if any.
    pub(crate) fn advance(&self, end: u64) -> Option<Range<u64>> {
        let end = self.end.fetch_max(end, Ordering::Relaxed).max(end);
        let target = round_down(end.saturating_sub(LAG), PAGE);
        let mut kicked = self.kicked.load(Ordering::Relaxed);
        loop {
            if target < kicked + STEP {
                return None;
            }
            match self.kicked.compare_exchange_weak(
                kicked,
                target,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(kicked..target),
                Err(now) => kicked = now,
            }
        }
    }

    /// The file was truncated to `size`: the frontier comes back to it, so
    /// a file rewritten from the start gets write-behind again.
    pub(crate) fn truncated(&self, size: u64) {
        self.end.fetch_min(size, Ordering::Relaxed);
        // Advisory: a race with `advance` at worst starts one range's
        // writeback early or leaves it to COMMIT.
        let _ = self
            .kicked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                (k > size).then_some(0)
            });
    }
}

struct Job {
    fd: OwnedFd,
    range: Range<u64>,
}

/// The plane's write-behind thread (one per export), which exits once the
/// last plane sharing it is gone.
#[derive(Debug, Clone)]
pub(crate) struct WriteBehind {
    tx: SyncSender<Job>,
}

impl WriteBehind {
    pub(crate) fn new(counters: Arc<Counters>) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("dionfs-wb".into())
            .spawn(move || run(rx, counters))?;
        Ok(Self { tx })
    }

    /// Hands `range` of the file `fd` (a duplicate) to the thread, unless
    /// its queue is full (the range is then left to COMMIT).
    pub(crate) fn submit(&self, fd: OwnedFd, range: Range<u64>) {
        // Full or gone: nothing to do, COMMIT writes the range.
        let _ = self.tx.try_send(Job { fd, range });
    }
}

fn run(rx: Receiver<Job>, counters: Arc<Counters>) {
    for Job { fd, range } in rx {
        let len = range.end - range.start;
        match start_writeback(&fd, range.start, len) {
            Ok(()) => {
                counters
                    .write_behind_bytes
                    .fetch_add(len, Ordering::Relaxed);
            }
            // The error stays with the file for COMMIT to report.
            Err(e) => tracing::debug!(offset = range.start, error = %e, "write-behind failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_the_frontier_a_lag_behind() {
        let f = Frontier::default();
        assert_eq!(f.advance(LAG + STEP - 1), None);
        // Out of order: the furthest end counts.
        assert_eq!(f.advance(1000), None);
        assert_eq!(f.advance(LAG + STEP + 4095), Some(0..STEP));
        assert_eq!(f.advance(LAG + 2 * STEP - 4096), None);
        assert_eq!(f.advance(LAG + 3 * STEP), Some(STEP..3 * STEP));
        // Truncated below what was handed over: starts again from 0.
        f.truncated(STEP);
        assert_eq!(f.advance(LAG + STEP - 1), None);
        assert_eq!(f.advance(LAG + STEP), Some(0..STEP));
        // Truncated above it: goes on from there.
        f.truncated(10 * STEP);
        assert_eq!(f.advance(LAG + 2 * STEP), Some(STEP..2 * STEP));
    }
}
