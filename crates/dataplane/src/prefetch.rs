//! Running the chunks a file's readahead planned (`readahead.rs`): a
//! [`Prefetch`] reads its chunk under the shared range lock, checks it
//! against the file's checksums, and publishes it for the READs to come.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dionfs_sys::io::{preadv2, RwFlags};

use crate::counters::Counters;
use crate::device_queue::DeviceReads;
use crate::file::DataFile;
use crate::held::Held;
use crate::pool::PooledBuf;
use crate::range_lock::LockKind;
use crate::readahead::{Planned, Readahead};

/// A chunk a READ asked to prefetch: run it with [`Prefetch::run`] on a
/// blocking thread after sending the READ's reply, or drop it to cancel.
/// It already holds its pool buffer.
#[derive(Debug)]
pub struct Prefetch {
    readahead: Arc<Readahead>,
    id: u64,
    range: Range<u64>,
    /// `Some` until the data is handed to the file's state.
    buf: Option<PooledBuf>,
    held: Option<Held>,
    counters: Arc<Counters>,
    device: Arc<DeviceReads>,
}

impl Prefetch {
    /// The chunks [`Reading::advance`] planned for READs of the file whose
    /// readahead state is `readahead`, as prefetches that join the export's
    /// reads at the device (`device`).
    ///
    /// [`Reading::advance`]: crate::readahead::Reading::advance
    pub(crate) fn planned(
        readahead: &Arc<Readahead>,
        planned: Vec<Planned>,
        counters: &Arc<Counters>,
        device: &Arc<DeviceReads>,
    ) -> Vec<Prefetch> {
        planned
            .into_iter()
            .map(|chunk| Prefetch {
                readahead: readahead.clone(),
                id: chunk.id,
                range: chunk.range,
                buf: Some(chunk.buf),
                held: Some(chunk.held),
                counters: counters.clone(),
                device: device.clone(),
            })
            .collect()
    }

    /// The file range it reads.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }

    /// Reads the chunk under the shared range lock and publishes it for
    /// the READs to come. Blocking. `file` must be the file of the READ
    /// that planned it (anything else is ignored). Needs no credentials:
    /// it only reads the already-open descriptor, for data the client's
    /// READ of this file was just allowed to read.
    pub fn run(mut self, file: &DataFile) {
        if !Arc::ptr_eq(&self.readahead, &file.readahead) {
            return;
        }
        let Some(direct) = file.direct() else {
            return;
        };
        if !self.readahead.start_chunk(self.id) {
            return;
        }
        let len = (self.range.end - self.range.start) as usize;
        // A large read: it waits for room beside small ones, before taking
        // the range lock.
        let _at_device = self.device.large_blocking(len as u64, &self.counters);
        // Held until the chunk is published (see the module documentation).
        let _lock = file
            .locks
            .lock(file.lock_range(self.range.clone()), LockKind::Shared);
        let Some(buf) = self.buf.as_mut() else {
            return;
        };
        match preadv2(&direct.fd, &mut buf[..len], self.range.start, RwFlags::NONE) {
            Ok(n) if n == len => {}
            Ok(n) => {
                // The file shrank since the chunk was planned.
                tracing::debug!(file = %file.label(), offset = self.range.start, len, n, "readahead read short");
                Counters::bump(&self.counters.readahead_discards);
                return;
            }
            Err(e) => {
                // The READ that wants the chunk reads it itself, and the
                // server logs its failure (a few a minute).
                tracing::debug!(file = %file.label(), offset = self.range.start, len, error = %e, "readahead read failed");
                Counters::bump(&self.counters.readahead_discards);
                return;
            }
        }
        // Integrity hook: a chunk that does not match its checksums is not
        // published; the READ that wants it reads and checks the blocks
        // itself (and reports or rebuilds).
        if let Some(sums) = file.integrity() {
            let first = self.range.start / dionfs_integrity::BLOCK;
            if !matches!(sums.verify(first, &buf[..len]), Ok(None)) {
                Counters::bump(&self.counters.readahead_discards);
                return;
            }
        }
        self.counters
            .readahead_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        self.readahead.publish_chunk(
            self.id,
            self.buf.take(),
            self.counters.clone(),
            self.held
                .take()
                .expect("a prefetch holds its unit until it runs"),
        );
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        if self.buf.is_some() {
            // Not run, cancelled or failed: its chunk must not stay
            // planned, and READs waiting for it must look again.
            self.readahead.cancel(self.id);
        }
    }
}
