//! Large direct reads make room at the device for small ones.
//!
//! Why: a device serves what it was given more or less in order, so a
//! 4 KiB READ that arrives behind many 1 MiB reads waits for all of them.
//! Clients reading large files sequentially keep several large reads each
//! at the device (their READs in flight, and the readahead's chunks), and
//! a client reading at random among them waited 10-12 ms per READ where it
//! takes 0.4 ms alone (the `mixed-16` job: 8 sequential readers, 2 READs of
//! 1 MiB in flight each, beside 8 random readers; the loop device held
//! 28-40 requests; local fio in the same shape waits the same way).
//!
//! How: the export's direct reads count themselves while they are at the
//! device: small ones (at most [`crate::SMALL_IO`]) by number, large ones
//! (client READs and readahead chunks) by bytes. While a small read is at
//! the device, a large one starts only if less than the export's
//! `large_read_depth` (by default [`crate::LARGE_READ_DEPTH`]; 0: no limit)
//! bytes of large reads are there; otherwise it waits for one to end (on
//! its task, or on its blocking thread). Small reads never wait, and large
//! ones never wait while no small one is at the device, so a lone
//! sequential reader keeps all its depth. Large reads always get through:
//! the ones at the device end and make room.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::counters::Counters;
use crate::is_small;

/// The direct reads of one export at its device (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct DeviceReads {
    /// Bytes of large reads allowed beside a small one; 0: no limit.
    depth: u64,
    small: AtomicUsize,
    large_bytes: AtomicU64,
    /// Large reads waiting for room: only then does a read that ends wake
    /// anyone.
    waiting: AtomicUsize,
    /// Wakes large reads waiting on a task.
    room: tokio::sync::Notify,
    /// Wakes large reads waiting on a blocking thread.
    room_cv: Condvar,
    room_lock: Mutex<()>,
}

/// A read counted at the device until dropped.
#[derive(Debug)]
pub(crate) struct AtDevice<'a> {
    reads: &'a DeviceReads,
    /// `None` for a small read, else its bytes.
    large: Option<u64>,
}

impl Drop for AtDevice<'_> {
    fn drop(&mut self) {
        let reads = self.reads;
        // Room appears when a large read ends, or the last small one.
        let room = match self.large {
            None => reads.small.fetch_sub(1, Ordering::AcqRel) == 1,
            Some(len) => {
                reads.large_bytes.fetch_sub(len, Ordering::AcqRel);
                true
            }
        };
        if room && reads.waiting.load(Ordering::Acquire) > 0 {
            reads.room.notify_waiters();
            let _lock = reads.room_lock.lock();
            reads.room_cv.notify_all();
        }
    }
}

/// Counts a large read as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl DeviceReads {
    /// Large reads start while less than `depth` bytes of them are at the
    /// device beside a small one; 0: always.
    pub(crate) fn new(depth: u64) -> Self {
        Self {
            depth,
            small: AtomicUsize::new(0),
            large_bytes: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            room: tokio::sync::Notify::new(),
            room_cv: Condvar::new(),
            room_lock: Mutex::new(()),
        }
    }

    /// A direct READ of `count` bytes, `len` at the device once widened to
    /// the alignment, goes there: at once if small, else once there is
    /// room, waiting on the task.
    pub(crate) async fn read(&self, count: usize, len: u64, counters: &Counters) -> AtDevice<'_> {
        match is_small(count) {
            true => self.small(),
            false => self.large(len, counters).await,
        }
    }

    /// [`DeviceReads::read`] on a blocking thread.
    pub(crate) fn read_blocking(
        &self,
        count: usize,
        len: u64,
        counters: &Counters,
    ) -> AtDevice<'_> {
        match is_small(count) {
            true => self.small(),
            false => self.large_blocking(len, counters),
        }
    }

    /// A small read goes to the device now.
    pub(crate) fn small(&self) -> AtDevice<'_> {
        self.small.fetch_add(1, Ordering::AcqRel);
        AtDevice {
            reads: self,
            large: None,
        }
    }

    /// A large read of `len` bytes goes to the device once there is room,
    /// waiting on the task.
    async fn large(&self, len: u64, counters: &Counters) -> AtDevice<'_> {
        if let Some(at) = self.try_large(len) {
            return at;
        }
        Counters::bump(&counters.large_read_waits);
        let _waiting = Waiting::new(&self.waiting);
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before the check: a read ending after it wakes us.
            room.as_mut().enable();
            if let Some(at) = self.try_large(len) {
                return at;
            }
            room.await;
        }
    }

    /// [`DeviceReads::large`] on a blocking thread.
    pub(crate) fn large_blocking(&self, len: u64, counters: &Counters) -> AtDevice<'_> {
        if let Some(at) = self.try_large(len) {
            return at;
        }
        Counters::bump(&counters.large_read_waits);
        let _waiting = Waiting::new(&self.waiting);
        loop {
            let mut lock = self.room_lock.lock();
            if let Some(at) = self.try_large(len) {
                return at;
            }
            // A read ending after the check notifies under the lock, so it
            // is not missed (it sees `waiting` already counted); the
            // timeout is a backstop.
            self.room_cv.wait_for(&mut lock, Duration::from_millis(10));
        }
    }

    fn try_large(&self, len: u64) -> Option<AtDevice<'_>> {
        let room = self.depth == 0
            || self.small.load(Ordering::Acquire) == 0
            || self.large_bytes.load(Ordering::Acquire) < self.depth;
        room.then(|| {
            self.large_bytes.fetch_add(len, Ordering::AcqRel);
            AtDevice {
                reads: self,
                large: Some(len),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LARGE_READ_DEPTH;
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;

    #[test]
    fn large_reads_wait_only_while_a_small_one_is_at_the_device() {
        let reads = Arc::new(DeviceReads::new(LARGE_READ_DEPTH));
        let counters = Counters::default();
        // No small read: any number of large ones.
        let many: Vec<_> = (0..8)
            .map(|_| reads.large_blocking(MIB, &counters))
            .collect();
        assert_eq!(reads.large_bytes.load(Ordering::Acquire), 8 * MIB);
        // A small read goes at once, however many large ones are there.
        let small = reads.small();
        assert!(reads.try_large(MIB).is_none(), "8 MiB at the device");
        // A large read on another thread waits until enough have ended.
        let waiter = {
            let reads = reads.clone();
            std::thread::spawn(move || {
                let counters = Counters::default();
                let at = reads.large_blocking(MIB, &counters);
                drop(at);
                counters.snapshot().large_read_waits
            })
        };
        // Counted as waiting: it found no room, and none is made while
        // `many` are at the device.
        dionfs_testfs::wait_until(
            || reads.waiting.load(Ordering::Acquire) == 1,
            Duration::from_secs(10),
            "the large read to wait",
        );
        assert!(!waiter.is_finished(), "started with 8 MiB at the device");
        drop(many);
        assert_eq!(waiter.join().unwrap(), 1);
        drop(small);
        assert_eq!(reads.large_bytes.load(Ordering::Acquire), 0);
        assert_eq!(reads.small.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_large_read_on_a_task_starts_when_the_small_one_ends() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let reads = Arc::new(DeviceReads::new(LARGE_READ_DEPTH));
        let counters = Arc::new(Counters::default());
        let big = reads.large_blocking(LARGE_READ_DEPTH, &counters);
        let small = reads.small();
        let task = {
            let (reads, counters) = (reads.clone(), counters.clone());
            rt.spawn(async move {
                drop(reads.large(MIB, &counters).await);
            })
        };
        rt.block_on(async {
            dionfs_testfs::wait_until_async(
                || reads.waiting.load(Ordering::Acquire) == 1,
                Duration::from_secs(10),
                "the large read to wait",
            )
            .await;
            assert!(!task.is_finished(), "started beside a small read");
            drop(small);
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("woken when the small read ended")
                .unwrap();
        });
        drop(big);
        assert_eq!(counters.snapshot().large_read_waits, 1);
    }

    #[test]
    fn the_depth_is_the_exports_and_zero_means_no_limit() {
        let counters = Counters::default();
        let one = DeviceReads::new(MIB);
        let small = one.small();
        let first = one.try_large(MIB).expect("nothing large at the device yet");
        assert!(
            one.try_large(MIB).is_none(),
            "1 MiB there beside a small read"
        );
        drop(first);
        drop(small);
        let unlimited = DeviceReads::new(0);
        let _small = unlimited.small();
        let many: Vec<_> = (0..16)
            .map(|_| unlimited.large_blocking(MIB, &counters))
            .collect();
        assert_eq!(unlimited.large_bytes.load(Ordering::Acquire), 16 * MIB);
        assert_eq!(counters.snapshot().large_read_waits, 0);
        drop(many);
    }
}
