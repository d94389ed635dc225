//! WRITE ([`WritePath`]): `write_direct` (aligned: one direct write), `write_edges`
//! (misaligned: the aligned interior direct, the partial edge blocks'
//! payload bytes buffered, nothing read back) and `write_cached` (buffered
//! or `RWF_DONTCACHE`); then the durability the client asked for.
//!
//! No path ever makes `i_size` larger than the end of the data written, so
//! the size a crash leaves behind is always one that some write produced.

use std::io;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dionfs_integrity::{Arriving, Order, BLOCK};
use dionfs_sys::io::{fadvise_dontneed, preadv2, pwrite_all, RwFlags};

use crate::align::{expand_to_alignment, is_aligned, payload_offset, split_edges, MAX_FILE_OFFSET};
use crate::checksums::UnsettledWrite;
use crate::config::SMALL_IO;
use crate::counters::Counters;
use crate::file::{DataFile, DirectIo};
use crate::page_cache::{needs_device_read, read_without_queueing};
use crate::paths::{IoPath, Paths};
use crate::pool::{BufferPool, IoRing, PooledBuf, BUF_SLACK};
use crate::range_lock::LockKind;
use crate::size::{fstat_size, SizeClaim};
use crate::write_buffer::WriteBuffer;
use crate::{is_small, DataConfig, DataError, Mode};

/// Misaligned direct-mode writes up to this long go through the page
/// cache whole (see `write_small_buffered`); longer ones write their
/// aligned interior direct.
pub const WHOLE_BUFFERED_MAX: usize = 256 << 10;

/// What [`crate::DataPlane::write_without_blocking`] did.
#[derive(Debug)]
pub enum WriteAttempt {
    /// The WRITE ran; this is its result.
    Done(Result<WriteDone, DataError>),
    /// It needs a blocking thread (not an aligned direct write, its range
    /// is locked or waited for, the ring full): run [`crate::DataPlane::write`]
    /// there with this buffer, untouched.
    Blocking(WriteBuffer),
}

/// How durable a WRITE must be before it is answered (`stable_how`, RFC
/// 1813 section 3.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stable {
    /// May stay in volatile caches until COMMIT.
    Unstable,
    /// Data, and the metadata needed to read it, durable on reply.
    DataSync,
    /// Data and all metadata durable on reply.
    FileSync,
}

/// A completed WRITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteDone {
    /// Payload bytes written (always the whole payload on success).
    pub count: usize,
    /// How durable the data now is (`committed` in WRITE3resok).
    pub committed: Stable,
}

/// WRITE on the files of one export: its WRITE buffers and what it learnt
/// of the filesystem. What it shares with READ
/// comes in `paths`.
pub(crate) struct WritePath {
    /// Buffers for WRITEs (READs have their own).
    pub(crate) write_pool: BufferPool,
    /// Buffers of WRITEs of at most [`SMALL_IO`] bytes.
    pub(crate) small_write_pool: BufferPool,
    counters: Arc<Counters>,
    /// Set once the filesystem refused `preadv2(RWF_NOWAIT)`: from then
    /// on no WRITE is made on a connection's task
    /// ([`crate::DataPlane::write_on_task`]).
    pub(crate) nowait_refused: AtomicBool,
    /// Misaligned direct-mode writes up to this many bytes go through the
    /// page cache whole ([`WHOLE_BUFFERED_MAX`] unless set with
    /// [`crate::DataPlane::with_whole_buffered_max`]).
    pub(crate) whole_buffered_max: usize,
}

impl WritePath {
    pub(crate) fn new(config: &DataConfig, counters: Arc<Counters>) -> WritePath {
        let buf_len = config.max_transfer + BUF_SLACK;
        let write_pool = BufferPool::new(buf_len, config.write_buffers, counters.clone());
        // Never larger than the large ones: a small request is at most
        // max_transfer too.
        let small_len = SMALL_IO.min(config.max_transfer) + BUF_SLACK;
        let small_write_pool = BufferPool::new(small_len, config.small_buffers, counters.clone());
        WritePath {
            write_pool,
            small_write_pool,
            counters,
            nowait_refused: AtomicBool::new(false),
            whole_buffered_max: WHOLE_BUFFERED_MAX,
        }
    }

    /// See [`crate::DataPlane::write_pool_for`].
    pub(crate) fn write_pool_for(&self, len: usize) -> &BufferPool {
        if is_small(len) {
            &self.small_write_pool
        } else {
            &self.write_pool
        }
    }

    /// See [`crate::DataPlane::prepare_write`].
    pub(crate) async fn prepare_write(
        &self,
        paths: &Paths,
        file: &DataFile,
        offset: u64,
        len: usize,
    ) -> Result<WriteBuffer, DataError> {
        self.check_write_args(paths, offset, len)?;
        let buf = self.write_pool_for(len).get().await?;
        self.write_buffer(paths, file, buf, offset, len)
    }

    /// See [`crate::DataPlane::write_buffer`].
    pub(crate) fn write_buffer(
        &self,
        paths: &Paths,
        file: &DataFile,
        buf: PooledBuf,
        offset: u64,
        len: usize,
    ) -> Result<WriteBuffer, DataError> {
        self.check_write_args(paths, offset, len)?;
        if buf.len() < len + BUF_SLACK {
            return Err(DataError::TooLarge {
                len,
                max: buf.len().saturating_sub(BUF_SLACK),
            });
        }
        let at = self.payload_position(paths, file, offset);
        let arriving = file
            .integrity()
            .filter(|sums| sums.checksummer().order() == Order::Arrival)
            .filter(|_| offset.is_multiple_of(BLOCK) && (len as u64).is_multiple_of(BLOCK))
            .map(|_| Arriving::new(len));
        Ok(WriteBuffer {
            buf,
            offset,
            at,
            len,
            arriving,
        })
    }

    fn check_write_args(&self, paths: &Paths, offset: u64, len: usize) -> Result<(), DataError> {
        if len > paths.config.max_transfer {
            return Err(DataError::TooLarge {
                len,
                max: paths.config.max_transfer,
            });
        }
        if offset > MAX_FILE_OFFSET - (len + BUF_SLACK) as u64 {
            return Err(DataError::FileTooBig);
        }
        Ok(())
    }

    /// See [`crate::DataPlane::payload_position`].
    pub(crate) fn payload_position(&self, paths: &Paths, file: &DataFile, offset: u64) -> usize {
        match paths.planned_write_path(file) {
            IoPath::Direct(direct) => payload_offset(offset, direct.write_align),
            IoPath::Cached(_) => paths.sums.cached_payload_position(file, offset),
        }
    }

    /// See [`crate::DataPlane::write`].
    pub(crate) fn write(
        &self,
        paths: &Paths,
        file: &DataFile,
        mut buf: WriteBuffer,
        stable: Stable,
    ) -> Result<WriteDone, DataError> {
        match self.write_payload(paths, file, &mut buf, stable) {
            Ok(mode) => {
                if stable == Stable::Unstable && !buf.is_empty() {
                    file.wrote_unsynced();
                }
                self.counters.count_write(mode, buf.len);
                Ok(WriteDone {
                    count: buf.len,
                    committed: stable,
                })
            }
            Err(e) => Err(self.write_failed(paths, file, buf.offset, buf.len, e)),
        }
    }

    /// A WRITE failed: the verifier moves on (see
    /// [`crate::DataPlane::write_verifier_generation`]) and the error is logged.
    fn write_failed(
        &self,
        paths: &Paths,
        file: &DataFile,
        offset: u64,
        len: usize,
        e: DataError,
    ) -> DataError {
        paths.note_write_failure();
        // Errors like ENOSPC can repeat for every WRITE; the surprising
        // ones (short writes) are worth a warning.
        if matches!(e, DataError::ShortWrite { .. }) {
            tracing::warn!(file = %file.label(), offset, len, error = %e, "WRITE failed");
        } else {
            tracing::debug!(file = %file.label(), offset, len, error = %e, "WRITE failed");
        }
        e
    }

    /// See [`crate::DataPlane::ring_may_write`].
    pub(crate) fn ring_may_write(&self, paths: &Paths, file: &DataFile, buf: &WriteBuffer) -> bool {
        paths
            .direct_only(file, paths.config.write_mode)
            .is_some_and(|d| {
                !buf.is_empty() && is_aligned(buf.offset, buf.len as u64, d.write_align)
            })
            && paths
                .sums
                .ring_write_covers_blocks(file, buf.offset, buf.len)
    }

    /// See [`crate::DataPlane::may_write_on_task`].
    pub(crate) fn may_write_on_task(
        &self,
        paths: &Paths,
        file: &DataFile,
        len: usize,
        stable: Stable,
    ) -> bool {
        // Other I/O of ours on the file that may hold the inode lock
        // through a device I/O: it would be handed off anyway, after a
        // detour.
        if len == 0
            || stable != Stable::Unstable
            || file.integrity().is_some()
            || self.nowait_refused.load(Ordering::Relaxed)
            || !file.only_page_writes(0)
        {
            return false;
        }
        match paths.config.write_mode {
            Mode::Buffered => is_small(len),
            Mode::Direct => {
                (file.direct().is_none() && is_small(len))
                    || self.small_unstable_buffered(len, stable)
            }
            // RWF_DONTCACHE writes start writeback and wait on it.
            Mode::DontCache => false,
        }
    }

    /// See [`crate::DataPlane::write_on_task`].
    pub(crate) fn write_on_task(
        &self,
        paths: &Paths,
        file: &DataFile,
        mut buf: WriteBuffer,
        stable: Stable,
    ) -> WriteAttempt {
        if !self.may_write_on_task(paths, file, buf.len, stable) {
            return WriteAttempt::Blocking(buf);
        }
        let io = buf.offset..buf.offset + buf.len as u64;
        let Some(_lock) = file.locks.try_lock(io.clone(), LockKind::Exclusive) else {
            return WriteAttempt::Blocking(buf);
        };
        let handoff = |buf| {
            Counters::bump(&self.counters.task_write_handoffs);
            WriteAttempt::Blocking(buf)
        };
        if !file.only_page_writes(1) || !self.pages_cached(file, io.clone()) {
            return handoff(buf);
        }
        let claim = match file.size.begin_write(file.buffered_fd(), io.end) {
            Ok(claim) => claim,
            Err(e) => {
                let (offset, len) = (buf.offset, buf.len);
                return WriteAttempt::Done(Err(self.write_failed(
                    paths,
                    file,
                    offset,
                    len,
                    e.into(),
                )));
            }
        };
        if claim.extends() && self.eof_page_needs_read(file, io.start) {
            return handoff(buf);
        }
        let _writing = file.page_writing();
        let misaligned = file
            .direct()
            .is_some_and(|d| !is_aligned(buf.offset, buf.len as u64, d.write_align));
        paths.sums.place_cached_payload(file, &mut buf);
        file.readahead.invalidate(io.clone());
        let written = pwrite_all(
            file.buffered_fd(),
            buf.payload(),
            io.start,
            RwFlags::NONE,
            1,
            paths.partly_written(),
        )
        .map_err(DataError::from);
        if let Err(e) = self.check_written(written, buf.len) {
            let (offset, len) = (buf.offset, buf.len);
            return WriteAttempt::Done(Err(self.write_failed(paths, file, offset, len, e)));
        }
        claim.succeeded();
        if paths.config.write_mode == Mode::Direct && misaligned {
            Counters::bump(&self.counters.buffered_misaligned);
        }
        file.wrote_unsynced();
        self.counters.count_write(Mode::Buffered, buf.len);
        Counters::bump(&self.counters.task_writes);
        WriteAttempt::Done(Ok(WriteDone {
            count: buf.len,
            committed: stable,
        }))
    }

    /// Before a page-cache write of `io` in direct mode that does not extend
    /// the file: reads its partial first and last pages into the page cache
    /// if they hold data on disk and are not cached, the two reads in
    /// flight at once (`POSIX_FADV_WILLNEED` on each, then a one-byte read
    /// of each waits for it, without queueing on the inode lock:
    /// [`read_without_queueing`]), holding only the write's range lock (its
    /// own bytes: the neighbours' writes of the same pages go on
    /// meanwhile).
    /// Only for writes that neither extend the file nor start above
    /// `DataFile::cold_below` (the size at open, or at the last COMMIT,
    /// which drops direct mode's pages): in a file being written for the
    /// first time (IOR-hard's new file) the checks (`cachestat`, `lseek`)
    /// found 154 uncached pages with data in 21,840 records, and the
    /// server's task-clock rose from 2,151 to 2,302 ms for the 979 MiB
    /// (`perf stat -p SERVER`, one run each). Otherwise the kernel reads
    /// them itself inside the write, one after the other, while the write
    /// holds the inode lock every other write of the file waits for (on
    /// XFS, buffered writes take it exclusively): misaligned records
    /// rewriting a file whose pages are not cached (IOR-hard's 47008-byte
    /// records, a second pass over the file) then take turns at the
    /// device. Reading file data into the cache changes nothing a reader
    /// sees; the pages are dropped again at COMMIT like the write's own.
    /// Failures are ignored: the write then reads what it needs itself.
    ///
    /// `bench/loadgen --pattern strided --bs 47008 --conns 8 --qd 2
    /// --records 2730 --op write --commit` over an existing 979 MiB file,
    /// page cache dropped first (XFS, 4096-byte-sector loop device), four
    /// alternating runs each: 214-261 MiB/s without, 271-305 with.
    fn read_partial_pages(&self, file: &DataFile, io: Range<u64>) {
        let page = rustix::param::page_size() as u64;
        let want: Vec<u64> = partial_pages(&io, page)
            .filter(|&p| matches!(needs_device_read(file, p, page), Ok(true)))
            .collect();
        for &p in &want {
            if dionfs_sys::io::fadvise_willneed(file.buffered_fd(), p, page).is_err() {
                return;
            }
        }
        for &p in &want {
            let mut byte = [0u8; 1];
            if read_without_queueing(file, &mut byte, p, PAGE_IN_WAIT, || false) == 1
                || preadv2(file.buffered_fd(), &mut byte, p, RwFlags::NONE).is_ok()
            {
                Counters::bump(&self.counters.edge_page_reads);
            }
        }
    }

    /// Whether a write starting at `start` beyond the end of the file
    /// would have the kernel read the page the file now ends in, to zero
    /// its tail before the gap: the size is not a whole number of pages,
    /// and that page needs a device read ([`WritePath::page_ready`] says
    /// no), or the size cannot be read. IOR-hard's extending records
    /// start where a neighbour's record, just written and cached, ends.
    fn eof_page_needs_read(&self, file: &DataFile, start: u64) -> bool {
        let page = rustix::param::page_size() as u64;
        let Ok(size) = fstat_size(file.buffered_fd()) else {
            return true;
        };
        start > size && !size.is_multiple_of(page) && !self.page_ready(file, size - size % page)
    }

    /// Whether the pages a write of `io` covers only in part need no
    /// device read: each is in the page cache (`cachestat(2)`, a pure
    /// lookup), or else holds no data on disk (`lseek(SEEK_DATA)` finds
    /// none in it), which the kernel fills with zeros instead of reading.
    /// The second is IOR-hard's usual case: a record's edge pages are
    /// often holes its neighbour, on another connection, has yet to write
    /// (three in four of its records went to a blocking thread for that,
    /// scratch ior.sh). Before Linux 6.5, one `preadv2(RWF_NOWAIT)` of a
    /// byte of each instead (`EAGAIN` if not cached), which also starts
    /// readahead around a page it does not find: pages allocated and
    /// zeroed for nothing (2.7% of the server's samples in `perf record`
    /// of bench/run's `ior-hard-write`). A filesystem that refuses the
    /// flag is remembered and asked no more.
    fn pages_cached(&self, file: &DataFile, io: Range<u64>) -> bool {
        let page = rustix::param::page_size() as u64;
        partial_pages(&io, page).all(|start| self.page_ready(file, start))
    }

    /// Whether the page at `start` of `file` needs no device read for a
    /// write of part of it ([`WritePath::pages_cached`] asks it of each).
    fn page_ready(&self, file: &DataFile, start: u64) -> bool {
        static NO_CACHESTAT: AtomicBool = AtomicBool::new(false);
        let page = rustix::param::page_size() as u64;
        if !NO_CACHESTAT.load(Ordering::Relaxed) {
            match needs_device_read(file, start, page) {
                Ok(needed) => return !needed,
                Err(_) => NO_CACHESTAT.store(true, Ordering::Relaxed),
            }
        }
        let mut byte = [0u8; 1];
        match preadv2(file.buffered_fd(), &mut byte, start, RwFlags::NOWAIT) {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => {
                if !self.nowait_refused.swap(true, Ordering::Relaxed) {
                    tracing::info!(
                        file = %file.label(),
                        error = %e,
                        "cannot tell whether pages are cached (preadv2 RWF_NOWAIT); \
                         small WRITEs of this export go to blocking threads"
                    );
                }
                false
            }
        }
    }

    /// See [`crate::DataPlane::write_without_blocking`].
    pub(crate) async fn write_without_blocking(
        &self,
        paths: &Paths,
        ring: &Arc<IoRing>,
        file: &DataFile,
        buf: WriteBuffer,
        stable: Stable,
        personality: u16,
    ) -> WriteAttempt {
        let Some(direct) = paths.direct_only(file, paths.config.write_mode) else {
            return WriteAttempt::Blocking(buf);
        };
        let align = direct.write_align;
        if buf.is_empty()
            || self.small_unstable_buffered(buf.len, stable)
            || !is_aligned(buf.offset, buf.len as u64, align)
            || !paths
                .sums
                .ring_write_covers_blocks(file, buf.offset, buf.len)
        {
            return WriteAttempt::Blocking(buf);
        }
        let io = buf.offset..buf.offset + buf.len as u64;
        let Some(_lock) = paths.try_lock(file, io.clone(), LockKind::Exclusive) else {
            return WriteAttempt::Blocking(buf);
        };
        // Integrity: the intent log first (if that needs no waiting).
        let ticket = match paths.sums.ring_write_begin(file, io.clone()) {
            Ok(ticket) => ticket,
            Err(None) => return WriteAttempt::Blocking(buf),
            Err(Some(e)) => {
                let (offset, len) = (buf.offset, buf.len);
                return WriteAttempt::Done(Err(self.write_failed(paths, file, offset, len, e)));
            }
        };
        let mut buf = buf;
        buf.move_payload_to(0);
        // Computed as the payload arrived, if they were.
        let arrived = buf.arrived_crcs().map(<[u32]>::to_vec);
        let WriteBuffer {
            buf: pooled,
            offset,
            at,
            len,
            arriving,
        } = buf;
        let claim = match self.begin_direct_write(file, io) {
            Ok(claim) => claim,
            Err(e) => {
                return WriteAttempt::Done(Err(self.write_failed(paths, file, offset, len, e)))
            }
        };
        let flags = sync_flags(stable);
        // With integrity, the blocks' checksums are computed over the pool
        // buffer while the kernel writes it (seed 003): no other thread,
        // no hand-off. (Before submitting it instead, to measure the
        // difference, with `DIONFS_INTEGRITY_ORDER=sequential`.)
        let before = ticket.as_ref().and_then(|_| {
            arrived.or_else(|| paths.sums.ring_write_crcs_first(file, &pooled[..len]))
        });
        let checksums = |bytes: &[u8]| match before {
            Some(crcs) => crcs,
            None => {
                let mut crcs = Vec::new();
                if ticket.is_some() {
                    dionfs_integrity::block_crcs(bytes, &mut crcs);
                }
                crcs
            }
        };
        let (op, crcs) = match ring.write_observed(
            direct.fd.as_fd(),
            pooled,
            0..len,
            offset,
            flags,
            personality,
            checksums,
        ) {
            Ok(submitted) => submitted,
            Err((e, pooled)) if e.kind() == io::ErrorKind::WouldBlock => {
                drop(claim);
                drop(ticket);
                return WriteAttempt::Blocking(WriteBuffer {
                    buf: pooled,
                    offset,
                    at,
                    len,
                    arriving,
                });
            }
            Err((e, _)) => {
                return WriteAttempt::Done(Err(self.write_failed(
                    paths,
                    file,
                    offset,
                    len,
                    e.into(),
                )))
            }
        };
        let unsettled = UnsettledWrite(ticket.as_ref().and(file.integrity()));
        let (mut written, mut pooled) = op.await;
        // A short write (the filesystem filled up part-way): the rest once
        // more, which says why (see `pwrite_all`), if it is aligned and the
        // ring takes it.
        let mut partly = paths.partly_written();
        while let Ok(done) = written {
            if done == 0 || done >= len {
                break;
            }
            partly();
            if !(done as u64).is_multiple_of(align) {
                break;
            }
            let rest = ring.write(
                direct.fd.as_fd(),
                pooled,
                done..len,
                offset + done as u64,
                flags,
                personality,
            );
            (written, pooled) = match rest {
                Ok(op) => {
                    let (more, pooled) = op.await;
                    (more.map(|n| done + n), pooled)
                }
                Err((_, pooled)) => (Ok(done), pooled),
            };
            if matches!(written, Ok(n) if n == done) {
                break;
            }
        }
        let written = written.map_err(|e| paths.direct_error(file, e, "write", offset, len, align));
        if let Some(ticket) = ticket {
            let succeeded = matches!(written, Ok(n) if n == len);
            // Checksums that could not be stored are distrusted (the
            // guard's drop), not left to be reported as corruption.
            if let Err(e) = paths.sums.ring_write_end(file, ticket, &crcs, succeeded) {
                return WriteAttempt::Done(Err(self.write_failed(paths, file, offset, len, e)));
            }
            unsettled.settled();
        }
        if let Err(e) = self.finish_direct_write(written, len, flags, claim) {
            return WriteAttempt::Done(Err(self.write_failed(paths, file, offset, len, e)));
        }
        // Not `wrote_unsynced`: none of it is in the page cache, and a
        // COMMIT after a reopen flushes the device's cache as well.
        self.counters.count_write(Mode::Direct, len);
        Counters::bump(&self.counters.ring_writes);
        WriteAttempt::Done(Ok(WriteDone {
            count: len,
            committed: stable,
        }))
    }

    /// Chooses the write path, writes, syncs. Returns the mode used.
    fn write_payload(
        &self,
        paths: &Paths,
        file: &DataFile,
        buf: &mut WriteBuffer,
        stable: Stable,
    ) -> Result<Mode, DataError> {
        let path = paths.write_path(file);
        if buf.is_empty() {
            self.sync(file, stable)?;
            return Ok(match path {
                IoPath::Direct(_) => Mode::Direct,
                IoPath::Cached(mode) => mode,
            });
        }
        match path {
            IoPath::Direct(direct) => {
                let align = direct.write_align;
                buf.move_payload_to(payload_offset(buf.offset, align));
                if self.small_unstable_buffered(buf.len, stable) {
                    self.write_small_buffered(paths, file, direct, buf, stable)?;
                } else if is_aligned(buf.offset, buf.len as u64, align) {
                    self.write_direct(paths, file, direct, buf, stable)?;
                } else if buf.len <= self.whole_buffered_max {
                    self.write_small_buffered(paths, file, direct, buf, stable)?;
                } else {
                    self.write_edges(paths, file, direct, buf)?;
                    // Direct I/O is not durable by itself (the device may
                    // cache), and the edges sit in the page cache: one
                    // fdatasync covers both with a single cache flush,
                    // where RWF_DSYNC on each of the up to three writes
                    // would flush up to three times.
                    self.sync(file, stable)?;
                    if stable != Stable::Unstable {
                        let io = expand_to_alignment(buf.offset, buf.len as u64, align);
                        self.drop_cached_pages(paths, file, io.start, io.end - io.start);
                    }
                }
                Ok(Mode::Direct)
            }
            IoPath::Cached(mode) => {
                paths.sums.place_cached_payload(file, buf);
                self.write_cached(paths, file, mode, buf, stable, false)
            }
        }
    }

    /// Whether a direct-mode WRITE of `len` bytes goes through the page
    /// cache whatever its alignment ([`crate::DataPlane::write_small_buffered`]):
    /// an UNSTABLE one of at most [`crate::SMALL_IO`]. The copy costs less
    /// than a device write of a few blocks, neighbouring small writes then
    /// reach the disk together at writeback or COMMIT, and on XFS they no
    /// longer take turns with direct writes for the inode lock (see
    /// below). bench/run `ior-aligned-write` (48 KiB records, 8
    /// connections x qd 2): 669 and 499 MiB/s against 376 and 391 direct
    /// in alternating runs; `rand-write-qd16` unchanged (94.5, 83.8 vs
    /// 96.7, 79.0). A stable one stays direct, with `RWF_DSYNC`: one
    /// system call, where the page cache would need a write, a sync and a
    /// drop.
    fn small_unstable_buffered(&self, len: usize, stable: Stable) -> bool {
        stable == Stable::Unstable && len <= crate::SMALL_IO.min(self.whole_buffered_max)
    }

    /// A small UNSTABLE direct-mode write, or a misaligned one of at most
    /// [`WHOLE_BUFFERED_MAX`] bytes (by default): written whole through
    /// the page cache, and its pages dropped
    /// once they are on disk (by COMMIT, or here for a stable write), so
    /// direct mode still keeps no data cached.
    ///
    /// Why not the direct interior with buffered edges (`write_edges`) for
    /// these: on XFS a buffered write takes the inode's IOLOCK
    /// exclusively while every synchronous direct write holds it shared
    /// for the whole device write, so when neighbouring records share
    /// edge blocks (IOR-hard's 47008-byte records from several clients)
    /// each record's edges wait for the others' direct interiors and the
    /// other way round: bench/run's `ior-hard-write` (8 connections x
    /// qd 2) went from 275 to 709 MiB/s this way, the server's CPU from
    /// 3.2 to 1.8 s per GiB (docs/bench/archive/results-20261125-ior-*.md). Larger
    /// writes keep the direct interior: the copy through the page cache
    /// would cost more than the lock.
    fn write_small_buffered(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        buf: &mut WriteBuffer,
        stable: Stable,
    ) -> Result<(), DataError> {
        let misaligned = !is_aligned(buf.offset, buf.len as u64, direct.write_align);
        paths.sums.place_cached_payload(file, buf);
        self.write_cached(paths, file, Mode::Buffered, buf, stable, true)?;
        if misaligned {
            Counters::bump(&self.counters.buffered_misaligned);
        }
        if stable != Stable::Unstable {
            self.drop_cached_pages(paths, file, buf.offset, buf.len as u64);
        }
        Ok(())
    }

    /// Aligned direct write: the payload is already a whole number of
    /// blocks at an aligned offset; one `pwritev2` on the `O_DIRECT` fd. If
    /// it extends the file, `i_size` becomes exactly its end.
    ///
    /// A stable write passes `RWF_DSYNC`/`RWF_SYNC` to that same call
    /// instead of following it with `fdatasync`/`fsync`: the kernel then
    /// writes the data with FUA where the device supports it (and the
    /// write needs no metadata change), or flushes the device cache once
    /// the write completes, as `O_DSYNC` requires (open(2)) — either way
    /// one system call, and no whole-file writeback pass.
    fn write_direct(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        buf: &mut WriteBuffer,
        stable: Stable,
    ) -> Result<(), DataError> {
        let io = buf.offset..buf.offset + buf.len as u64;
        let _lock = paths.lock(file, io.clone(), LockKind::Exclusive);
        let claim = self.begin_direct_write(file, io.clone())?;
        let flags = sync_flags(stable);
        // Integrity hook: checksums computed alongside the write.
        let written = paths.sums.checked_write(file, buf, |buf| {
            let written = paths.direct_pwrite(
                file,
                direct,
                &buf.buf[..buf.len],
                io.start,
                direct.write_align,
                flags,
            );
            self.check_written(written, buf.len).map(|()| buf.len)
        });
        self.finish_direct_write(written, buf.len, flags, claim)
    }

    /// Before an aligned direct write of `io` (its exclusive range lock
    /// held): prefetched data of the range is dropped and the size tracker
    /// told where the write ends.
    fn begin_direct_write<'f>(
        &self,
        file: &'f DataFile,
        io: Range<u64>,
    ) -> Result<SizeClaim<'f>, DataError> {
        file.readahead.invalidate(io.clone());
        Ok(file.size.begin_write(file.buffered_fd(), io.end)?)
    }

    /// After it: a short write is an error, a stable one is counted as
    /// made durable by the write itself, and its end counts for the size.
    fn finish_direct_write(
        &self,
        written: Result<usize, DataError>,
        len: usize,
        flags: RwFlags,
        claim: SizeClaim<'_>,
    ) -> Result<(), DataError> {
        self.check_written(written, len)?;
        if flags != RwFlags::NONE {
            Counters::bump(&self.counters.fua_writes);
        }
        claim.succeeded();
        Ok(())
    }

    /// Misaligned direct write ([`split_edges`]): under an exclusive lock on
    /// the blocks it touches, the aligned interior goes out with one direct
    /// write, then the payload bytes of the partial head and tail blocks
    /// with plain buffered writes. Nothing is read back from the disk
    /// (the kernel reads a partial block itself only if it is allocated,
    /// inside the file and not cached), and blocks the payload does not
    /// touch are not written, so holes stay holes.
    ///
    /// Mixing the two is safe here: the kernel keeps the page cache and
    /// direct I/O of an inode coherent (a direct write writes back and
    /// invalidates the cached pages of its range first; a direct read
    /// writes back dirty pages of its range first), and our range locks,
    /// taken for at least whole pages, keep every other READ and WRITE of
    /// ours out of these blocks meanwhile, so no buffered write can dirty
    /// a page that a direct I/O is invalidating.
    ///
    /// Order: interior, head, tail. A direct write moves `i_size` only to
    /// the end of data really written (a block boundary inside this
    /// write), each buffered edge to exactly its own end, the tail to the
    /// write's end last; so no crash leaves `i_size` covering bytes
    /// nobody wrote. Attributes never show the half-done state
    /// (`size.rs`).
    fn write_edges(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        buf: &mut WriteBuffer,
    ) -> Result<(), DataError> {
        let align = direct.write_align;
        let io = expand_to_alignment(buf.offset, buf.len as u64, align);
        let _lock = paths.lock(file, io.clone(), LockKind::Exclusive);
        file.readahead.invalidate(io.clone());
        let claim = file
            .size
            .begin_write(file.buffered_fd(), buf.offset + buf.len as u64)?;
        let split = split_edges(buf.offset, buf.len as u64, align);
        // Buffer byte 0 is file offset `io.start` (the payload sits at
        // `offset mod A`), so the interior starts at a multiple of `A` in
        // the buffer, as direct I/O needs.
        let in_buf =
            |r: &std::ops::Range<u64>| (r.start - io.start) as usize..(r.end - io.start) as usize;
        // Integrity hook: checksums of the final blocks (edges completed
        // from the file) computed alongside the writes.
        paths.sums.checked_write(file, buf, |buf| {
            if !split.interior.is_empty() {
                let interior = &buf.buf[in_buf(&split.interior)];
                let written = paths.direct_pwrite(
                    file,
                    direct,
                    interior,
                    split.interior.start,
                    align,
                    RwFlags::NONE,
                );
                self.check_written(written, interior.len())?;
            }
            for edge in [&split.head, &split.tail] {
                if edge.is_empty() {
                    continue;
                }
                Counters::bump(&self.counters.buffered_edges);
                let bytes = &buf.buf[in_buf(edge)];
                let written = pwrite_all(
                    file.buffered_fd(),
                    bytes,
                    edge.start,
                    RwFlags::NONE,
                    1,
                    paths.partly_written(),
                )
                .map_err(DataError::from);
                self.check_written(written, bytes.len())?;
            }
            Ok(())
        })?;
        claim.succeeded();
        Ok(())
    }

    /// Buffered or `RWF_DONTCACHE` write of exactly the payload, with
    /// `RWF_DSYNC`/`RWF_SYNC` for stable writes. Returns the mode used.
    /// `read_edges` (direct mode's page-cache writes): an overwrite, not
    /// extending the file, of data probably not cached (below
    /// `DataFile::cold_below`) first reads in the partial pages it needs
    /// ([`crate::DataPlane::read_partial_pages`]).
    fn write_cached(
        &self,
        paths: &Paths,
        file: &DataFile,
        mode: Mode,
        buf: &mut WriteBuffer,
        stable: Stable,
        read_edges: bool,
    ) -> Result<Mode, DataError> {
        let io = buf.offset..buf.offset + buf.len as u64;
        let _lock = paths.lock_exact(
            file,
            paths.sums.cached_write_lock(file, io.clone()),
            LockKind::Exclusive,
        );
        file.readahead.invalidate(io.clone());
        let claim = file.size.begin_write(file.buffered_fd(), io.end)?;
        let warm = io.start >= file.cold_below();
        let read_in = read_edges && !claim.extends() && !warm;
        if read_in {
            self.read_partial_pages(file, io.clone());
        }
        // A buffered write whose partial pages are in (or, written since
        // the last COMMIT, most likely cached) lets writes on the
        // connections' tasks go ahead beside it (`only_page_writes`).
        let _writing = (mode == Mode::Buffered && file.integrity().is_none() && (warm || read_in))
            .then(|| file.page_writing());
        // Integrity hook: checksums of the final blocks (partial ones
        // completed from the page cache) computed alongside the write.
        let mode = paths.sums.checked_write(file, buf, |buf| {
            let payload = buf.payload();
            let (written, mode) = match paths.cached_io(
                file,
                mode,
                |flags| {
                    let partly = paths.partly_written();
                    pwrite_all(file.buffered_fd(), payload, io.start, flags, 1, partly)
                },
                sync_flags(stable),
            ) {
                Ok((n, mode)) => (Ok(n), mode),
                Err(e) => (Err(e), mode),
            };
            self.check_written(written, buf.len).map(|()| mode)
        })?;
        claim.succeeded();
        Ok(mode)
    }

    /// Turns an I/O result into the request's result: a short write is an
    /// error (counted).
    fn check_written(
        &self,
        written: Result<usize, DataError>,
        expected: usize,
    ) -> Result<(), DataError> {
        // (Counted as `short_writes` where the kernel returned short.)
        let n = written?;
        if n < expected {
            return Err(DataError::ShortWrite {
                written: n,
                expected,
            });
        }
        Ok(())
    }

    /// Makes the file's data (`DataSync`) or data and metadata
    /// (`FileSync`) durable.
    fn sync(&self, file: &DataFile, stable: Stable) -> Result<(), DataError> {
        match stable {
            Stable::Unstable => {}
            Stable::DataSync => rustix::fs::fdatasync(file.buffered_fd())?,
            Stable::FileSync => rustix::fs::fsync(file.buffered_fd())?,
        }
        Ok(())
    }

    /// After a sync: drops the clean cached pages of `[offset, offset+len)`
    /// (`len == 0`: to the end of the file) that direct-mode writes left
    /// behind (`POSIX_FADV_DONTNEED`), when this plane writes `file` direct
    /// and does not read it through the page cache (buffered reads want
    /// those pages). Pages dirtied since the sync are left alone by the
    /// kernel; dropping a clean page never loses data, so this needs no
    /// range lock. Advisory: a failure is only logged.
    pub(crate) fn drop_cached_pages(&self, paths: &Paths, file: &DataFile, offset: u64, len: u64) {
        let writes_direct = matches!(paths.planned_write_path(file), IoPath::Direct(_));
        if !writes_direct || paths.config.read_mode == Mode::Buffered {
            return;
        }
        match fadvise_dontneed(file.buffered_fd(), offset, len) {
            Err(e) => {
                tracing::debug!(file = %file.label(), error = %e, "POSIX_FADV_DONTNEED failed");
            }
            Ok(()) if len == 0 => {
                if let Ok(size) = file.size() {
                    file.dropped_below(size);
                }
            }
            Ok(()) => {}
        }
    }
}

/// The starts of the pages `io` covers only in part: its first and its
/// last, once if they are the same page.
fn partial_pages(io: &Range<u64>, page: u64) -> impl Iterator<Item = u64> {
    let head = (!io.start.is_multiple_of(page)).then(|| io.start - io.start % page);
    let tail = (!io.end.is_multiple_of(page))
        .then(|| io.end - io.end % page)
        .filter(|&t| Some(t) != head);
    head.into_iter().chain(tail)
}

/// How long [`crate::DataPlane::read_partial_pages`] waits for a page being read
/// in without queueing on the inode lock: a device read.
const PAGE_IN_WAIT: Duration = Duration::from_millis(5);

/// The per-call flags that make a write as durable as `stable` asks.
fn sync_flags(stable: Stable) -> RwFlags {
    match stable {
        Stable::Unstable => RwFlags::NONE,
        Stable::DataSync => RwFlags::DSYNC,
        Stable::FileSync => RwFlags::SYNC,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DataFile, DataPlane};

    fn plane(mode: Mode) -> DataPlane {
        crate::testing::plane(mode, mode, 64 << 10, 4)
    }

    /// A temp file with (if `direct` and the filesystem allows) an
    /// `O_DIRECT` descriptor.
    fn temp_file(direct: bool) -> (tempfile::NamedTempFile, DataFile) {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = if direct {
            crate::testing::open_data_file(tmp.path())
        } else {
            DataFile::new(tmp.reopen().unwrap().into(), None).unwrap()
        };
        (tmp, file)
    }

    #[test]
    fn payload_sits_at_offset_mod_alignment_in_direct_mode() {
        let (_tmp, file) = temp_file(true);
        let plane = plane(Mode::Direct);
        let buf = plane.write_pool().get_blocking().unwrap();
        let wb = plane.write_buffer(&file, buf, 4096 * 3 + 100, 10).unwrap();
        let expected = match file.direct() {
            Some(d) => (100 % d.write_align) as usize,
            None => 0,
        };
        assert_eq!(wb.at, expected);
        assert_eq!(wb.payload().len(), 10);
        assert_eq!(wb.offset(), 4096 * 3 + 100);
    }

    #[test]
    fn buffer_prepared_for_another_file_still_writes_right() {
        let (tmp_direct, direct_file) = temp_file(true);
        let (_tmp, buffered_file) = temp_file(false);
        let plane = plane(Mode::Direct);
        let buf = plane.write_pool().get_blocking().unwrap();
        // Prepared for the direct file (payload at offset mod A) ...
        let mut wb = plane.write_buffer(&direct_file, buf, 300, 5).unwrap();
        wb.payload_mut().copy_from_slice(b"HELLO");
        // ... written to the buffered one (payload moved to 0).
        plane.write(&buffered_file, wb, Stable::FileSync).unwrap();
        let r = plane
            .read(
                &buffered_file,
                plane.read_pool().get_blocking().unwrap(),
                300,
                5,
            )
            .unwrap();
        assert_eq!(r.data(), b"HELLO");
        drop(tmp_direct);
    }

    #[test]
    fn limits_are_enforced() {
        let (_tmp, file) = temp_file(false);
        let plane = plane(Mode::Buffered);
        let buf = plane.write_pool().get_blocking().unwrap();
        assert!(matches!(
            plane.write_buffer(&file, buf, 0, (64 << 10) + 1),
            Err(DataError::TooLarge { .. })
        ));
        let buf = plane.write_pool().get_blocking().unwrap();
        assert!(matches!(
            plane.write_buffer(&file, buf, MAX_FILE_OFFSET - 10, 100),
            Err(DataError::FileTooBig)
        ));
        // A READ beyond any possible file is empty with eof.
        let r = plane
            .read(
                &file,
                plane.read_pool().get_blocking().unwrap(),
                u64::MAX - 5,
                10,
            )
            .unwrap();
        assert!(r.is_empty() && r.eof());
    }

    #[test]
    fn empty_write_succeeds_and_changes_nothing() {
        let (_tmp, file) = temp_file(true);
        let plane = plane(Mode::Direct);
        let buf = plane.write_pool().get_blocking().unwrap();
        let wb = plane.write_buffer(&file, buf, 5000, 0).unwrap();
        let done = plane.write(&file, wb, Stable::DataSync).unwrap();
        assert_eq!(done.count, 0);
        assert_eq!(done.committed, Stable::DataSync);
        assert_eq!(file.size().unwrap(), 0);
    }

    /// Every mode on the temp dir's filesystem: misaligned writes and reads
    /// against a model, exact sizes.
    #[test]
    fn every_mode_matches_a_model() {
        for mode in [Mode::Buffered, Mode::DontCache, Mode::Direct] {
            let (_tmp, file) = temp_file(true);
            let plane = plane(mode);
            let mut model: Vec<u8> = Vec::new();
            let writes: [(u64, usize); 6] = [
                (100, 200),
                (4000, 5000),
                (65536 + 1, 511),
                (0, 4096),
                (20000, 64 << 10),
                (3, 1),
            ];
            for (i, (off, len)) in writes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| ((i * 7 + j) % 251) as u8 + 1).collect();
                let buf = plane.write_pool().get_blocking().unwrap();
                let mut wb = plane.write_buffer(&file, buf, off, len).unwrap();
                wb.payload_mut().copy_from_slice(&data);
                let stable = [Stable::Unstable, Stable::DataSync, Stable::FileSync][i % 3];
                let done = plane.write(&file, wb, stable).unwrap();
                assert_eq!(done.count, len);
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                assert_eq!(file.size().unwrap(), model.len() as u64, "{mode:?}");
                for (roff, rcount) in [(0u64, 70000u32), (off, len as u32), (off + 1, 3)] {
                    let r = plane
                        .read(
                            &file,
                            plane.read_pool().get_blocking().unwrap(),
                            roff,
                            rcount,
                        )
                        .unwrap();
                    let want_end = (roff as usize + rcount as usize).min(model.len());
                    let want = model.get(roff as usize..want_end).unwrap_or(&[]);
                    let want = &want[..want.len().min(64 << 10)];
                    assert_eq!(r.data(), want, "{mode:?} read {rcount} at {roff}");
                }
            }
            assert_eq!(plane.snapshot().direct_einval, 0);
        }
    }
}
