//! The data plane of one export: configuration, buffer pools, counters, and
//! the decisions shared by READ and WRITE (which I/O path a file gets,
//! range locking, direct I/O with its `EINVAL` policy), plus COMMIT and
//! truncate.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use dionfs_integrity::{CommitTicket, FileSums};
use dionfs_sys::io::{fadvise_dontneed, preadv2, pwrite_all, RwFlags};
use parking_lot::Mutex;

use crate::align::MAX_FILE_OFFSET;
use crate::cluster::{drop_pages, Cluster, MAX_CLUSTERS};
use crate::config::{is_small, SMALL_IO};
use crate::counters::{CounterSnapshot, Counters};
use crate::device_queue::DeviceReads;
use crate::file::{DataFile, DirectIo};
use crate::held::Held;
use crate::pool::IoRing;
use crate::pool::{BufferPool, PooledBuf, BUF_SLACK};
use crate::range_lock::{LockKind, RangeGuard};
use crate::readahead::Readahead;
use crate::writebehind::WriteBehind;
use crate::{DataConfig, DataError, Mode};
use dionfs_logs::LogEvery;

/// How one operation on one file does its I/O.
pub(crate) enum IoPath<'f> {
    /// `O_DIRECT` through the file's direct descriptor.
    Direct(&'f DirectIo),
    /// Through the page cache, plain or `RWF_DONTCACHE`.
    Cached(Mode),
}

/// READ, WRITE, COMMIT and truncate for the files of one export.
pub struct DataPlane {
    pub(crate) config: DataConfig,
    /// Buffers for READs and for WRITEs, apart: clients that fill one
    /// direction's pool (say, WRITEs whose payload is slow to come) leave
    /// the other direction served.
    read_pool: BufferPool,
    /// Buffers of READs of at most [`SMALL_IO`] bytes.
    small_read_pool: BufferPool,
    /// Buffers of WRITEs of at most [`SMALL_IO`] bytes.
    small_write_pool: BufferPool,
    write_pool: BufferPool,
    pub(crate) counters: Arc<Counters>,
    /// Set once the filesystem refused `RWF_DONTCACHE`: from then on this
    /// export serves `dontcache` as buffered.
    dontcache_refused: AtomicBool,
    /// Set once the filesystem refused `preadv2(RWF_NOWAIT)`: from then
    /// on no WRITE is made on a connection's task
    /// ([`DataPlane::write_on_task`]).
    pub(crate) nowait_refused: AtomicBool,
    /// Whether the "file cannot do direct I/O" warning was logged.
    no_direct_logged: AtomicBool,
    /// A COMMIT could not make checksums durable: logged once a minute.
    checksum_commit_warned: LogEvery,
    write_verifier_generation: AtomicU64,
    /// Pool buffers held by readahead (planned, running or ready chunks),
    /// at most `readahead_cap`.
    readahead_held: Arc<AtomicUsize>,
    readahead_cap: usize,
    /// Checksum rebuilds handed out and not yet ended, at most
    /// [`crate::checksums::MAX_REBUILDS`].
    pub(crate) rebuilds_running: Arc<AtomicUsize>,
    /// Files this plane prefetched for, swept by `expire_readahead`.
    readahead_files: Mutex<Vec<Weak<Readahead>>>,
    /// Files whose small READs cluster now (at most
    /// [`crate::cluster::MAX_CLUSTERS`]), and the files that were, swept
    /// by `expire_readahead` too.
    cluster_count: Arc<AtomicUsize>,
    cluster_files: Mutex<Vec<Weak<Cluster>>>,
    /// Misaligned direct-mode writes up to this many bytes go through the
    /// page cache whole ([`crate::write::WHOLE_BUFFERED_MAX`] unless set
    /// with [`DataPlane::with_whole_buffered_max`]).
    pub(crate) whole_buffered_max: usize,
    /// Starts the writeback of direct mode's page-cache writes before
    /// COMMIT (`writebehind.rs`); shared with successors.
    write_behind: WriteBehind,
    /// The direct reads at the device: large ones make room for small
    /// ones (`device_queue.rs`).
    pub(crate) device_reads: Arc<DeviceReads>,
}

impl DataPlane {
    /// A data plane with its own read pool of `read_buffers` and write pool
    /// of `write_buffers` buffers, each of `max_transfer` + [`BUF_SLACK`]
    /// bytes.
    pub fn new(config: DataConfig) -> Result<Self, DataError> {
        Self::with_counters(config, Arc::default(), None)
    }

    /// A data plane with `config` that takes over from `self` when a
    /// configuration reload changes the export's modes or transfer size:
    /// new pools (of the new size), the same counters (so the export's
    /// metrics go on counting) and the same count of running checksum
    /// rebuilds (the export's cap), and what `self` learnt of the filesystem
    /// (that it refuses `RWF_DONTCACHE`), and its write-behind thread.
    /// `self` goes on serving the calls that already hold it.
    pub fn successor(&self, config: DataConfig) -> Result<Self, DataError> {
        let next = Self::with_counters(
            config,
            self.counters.clone(),
            Some(self.write_behind.clone()),
        )?;
        next.dontcache_refused.store(
            self.dontcache_refused.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        next.nowait_refused.store(
            self.nowait_refused.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        // Rebuilds the predecessor handed out count against the export's
        // cap until they end.
        let next = Self {
            rebuilds_running: self.rebuilds_running.clone(),
            ..next
        };
        Ok(next.with_whole_buffered_max(self.whole_buffered_max))
    }

    /// `write_behind`: a predecessor's thread, else a new one.
    fn with_counters(
        config: DataConfig,
        counters: Arc<Counters>,
        write_behind: Option<WriteBehind>,
    ) -> Result<Self, DataError> {
        config.validate()?;
        let buf_len = config.max_transfer + BUF_SLACK;
        let read_pool = BufferPool::new(buf_len, config.read_buffers, counters.clone());
        let write_pool = BufferPool::new(buf_len, config.write_buffers, counters.clone());
        // Never larger than the large ones: a small request is at most
        // max_transfer too.
        let small_len = SMALL_IO.min(config.max_transfer) + BUF_SLACK;
        let small_read_pool = BufferPool::new(small_len, config.small_buffers, counters.clone());
        let small_write_pool = BufferPool::new(small_len, config.small_buffers, counters.clone());
        // A quarter of the read pool: requests always keep the rest. Below
        // 4 buffers none, so readahead can never hold the buffer that the
        // READ which would use its data is waiting for.
        let readahead_cap = config.read_buffers / 4;
        let device_reads = Arc::new(DeviceReads::new(config.large_read_depth));
        let write_behind = match write_behind {
            Some(w) => w,
            None => WriteBehind::new(counters.clone())?,
        };
        Ok(Self {
            config,
            read_pool,
            write_pool,
            small_read_pool,
            small_write_pool,
            counters,
            dontcache_refused: AtomicBool::new(false),
            nowait_refused: AtomicBool::new(false),
            no_direct_logged: AtomicBool::new(false),
            write_verifier_generation: AtomicU64::new(0),
            checksum_commit_warned: LogEvery::new(std::time::Duration::from_secs(60)),
            readahead_held: Arc::default(),
            readahead_cap,
            rebuilds_running: Arc::new(AtomicUsize::new(0)),
            readahead_files: Mutex::default(),
            cluster_count: Arc::default(),
            cluster_files: Mutex::default(),
            whole_buffered_max: crate::write::WHOLE_BUFFERED_MAX,
            write_behind,
            device_reads,
        })
    }

    /// Misaligned direct-mode writes up to `bytes` long are written whole
    /// through the page cache; longer ones write their aligned interior
    /// direct and their partial edge blocks buffered. 0: every misaligned
    /// write splits (tests of the split use it).
    pub fn with_whole_buffered_max(mut self, bytes: usize) -> Self {
        self.whole_buffered_max = bytes;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &DataConfig {
        &self.config
    }

    /// Registers the pools' buffers with `ring` as fixed buffers, each at
    /// a free slot as it is allocated; freeing a buffer gives its slot
    /// back.
    pub fn register_buffers(&self, ring: &Arc<IoRing>) {
        self.read_pool.register_with(ring);
        self.write_pool.register_with(ring);
        self.small_read_pool.register_with(ring);
        self.small_write_pool.register_with(ring);
    }

    /// The READ buffers (their emptiness is backpressure on READs).
    pub fn read_pool(&self) -> &BufferPool {
        &self.read_pool
    }

    /// The WRITE buffers (their emptiness is backpressure on WRITEs).
    pub fn write_pool(&self) -> &BufferPool {
        &self.write_pool
    }

    /// A buffer for a READ of `count` bytes: from the small pool for at
    /// most [`SMALL_IO`], else from the read pool; waits while that pool
    /// is empty.
    pub async fn read_buffer_for(&self, count: u32) -> std::io::Result<PooledBuf> {
        self.read_pool_for(count as usize).get().await
    }

    /// The pool a READ of `count` bytes takes its buffer from.
    pub fn read_pool_for(&self, count: usize) -> &BufferPool {
        if is_small(count) {
            &self.small_read_pool
        } else {
            &self.read_pool
        }
    }

    /// The pool a WRITE of `len` bytes takes its buffer from.
    pub fn write_pool_for(&self, len: usize) -> &BufferPool {
        if is_small(len) {
            &self.small_write_pool
        } else {
            &self.write_pool
        }
    }

    /// Drops prefetched data that waited longer than
    /// [`crate::READAHEAD_MAX_AGE`] for its READ, returning its buffers to
    /// the pool. The server calls this periodically, so a sequential
    /// reader that goes away leaves no buffers behind.
    pub fn expire_readahead(&self) {
        let now = Instant::now();
        for file in live(&self.readahead_files) {
            file.expire(now);
        }
        for cluster in live(&self.cluster_files) {
            cluster.expire(now);
        }
    }

    /// Whether every buffer of both pools is back (no call, prefetch or
    /// ring operation holds one): a plane a reload retired can then go.
    pub fn is_idle(&self) -> bool {
        self.read_pool.available() == self.config.read_buffers
            && self.write_pool.available() == self.config.write_buffers
            && self.small_read_pool.available() == self.config.small_buffers
            && self.small_write_pool.available() == self.config.small_buffers
    }

    /// Pool buffers held by readahead right now.
    pub fn readahead_buffers(&self) -> usize {
        self.readahead_held.load(Ordering::Acquire)
    }

    /// A buffer for a prefetch, only if one is free now and readahead is
    /// within its bound.
    pub(crate) fn readahead_buffer(&self) -> Option<(PooledBuf, Held)> {
        let held = Held::take(&self.readahead_held, self.readahead_cap)?;
        let buf = self.read_pool.try_get().ok().flatten()?;
        Some((buf, held))
    }

    /// Makes `expire_readahead` sweep `file`.
    pub(crate) fn register_readahead(&self, file: &DataFile) {
        if file.readahead.register() {
            self.readahead_files
                .lock()
                .push(Arc::downgrade(&file.readahead));
        }
    }

    /// Notes a small direct READ of `range` of `file` (`concurrent`: other
    /// READs of it in flight) with the file's cluster state, drops the
    /// pages the cluster left behind, and says whether to read it through
    /// the page cache (`cluster.rs`).
    pub(crate) fn route_small_read(
        &self,
        file: &DataFile,
        range: Range<u64>,
        concurrent: bool,
    ) -> bool {
        let route = file.cluster.note(range, concurrent, || {
            let slot = Held::take(&self.cluster_count, MAX_CLUSTERS)?;
            let fd = file.buffered_fd().try_clone_to_owned().ok()?;
            Some((slot, fd))
        });
        if route.started {
            tracing::debug!(file = %file.label(), "small READs cluster: served through the page cache");
            let mut files = self.cluster_files.lock();
            files.retain(|f| f.strong_count() > 0);
            files.push(Arc::downgrade(&file.cluster));
        }
        if let Some(behind) = route.drop {
            drop_pages(file.buffered_fd(), behind);
        }
        route.cached
    }

    /// The live counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// Increases whenever a write (or commit) failed in a way that may have
    /// lost data the client thinks it sent. The server derives its write
    /// verifier from its boot verifier and this number, so clients resend
    /// their uncommitted writes (RFC 1813 section 3.3.7).
    pub fn write_verifier_generation(&self) -> u64 {
        self.write_verifier_generation.load(Ordering::Acquire)
    }

    pub(crate) fn note_write_failure(&self) {
        Counters::bump(&self.counters.errors);
        self.write_verifier_generation
            .fetch_add(1, Ordering::AcqRel);
    }

    /// `fdatasync` of a file the server wrote, through a descriptor of its
    /// own (the file closed since: `dionfs_integrity::Store::settle`). A
    /// failure moves the write verifier, as a failed COMMIT does: the
    /// kernel reports a writeback error once, to this descriptor, and the
    /// client's COMMIT would then succeed for data the disk never got;
    /// with the verifier moved, clients send their uncommitted data again.
    pub fn sync_closed_file(&self, data: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
        self.sync_data(data).map_err(std::io::Error::from)
    }

    /// `fdatasync`; a failure moves the write verifier (COMMIT's rule).
    fn sync_data(&self, data: std::os::fd::BorrowedFd<'_>) -> Result<(), rustix::io::Errno> {
        rustix::fs::fdatasync(data).inspect_err(|_| self.note_write_failure())
    }

    /// Makes all written data of the file durable (`fdatasync`). NFS COMMIT
    /// names a range; syncing the whole file is allowed (RFC 1813 section
    /// 3.3.21) and is what `fdatasync` can do.
    ///
    /// In direct write mode the partial edge blocks of misaligned writes
    /// went through the page cache; once they are on disk their pages are
    /// dropped, so direct mode stays out of the page cache (see
    /// [`DataPlane::drop_cached_pages`]).
    pub fn commit(&self, file: &DataFile, _offset: u64, _count: u32) -> Result<(), DataError> {
        self.commit_with(file, FileSums::commit_ticket)
    }

    /// The last COMMIT of `file` before the server stops: as
    /// [`DataPlane::commit`], and with checksums, every region of the
    /// file's intent log is left clean (a COMMIT while serving keeps
    /// recently written ones dirty), so the next start recomputes nothing.
    pub fn commit_before_stop(&self, file: &DataFile) -> Result<(), DataError> {
        self.commit_with(file, FileSums::final_commit_ticket)
    }

    fn commit_with(
        &self,
        file: &DataFile,
        ticket: impl FnOnce(&FileSums) -> CommitTicket,
    ) -> Result<(), DataError> {
        // Integrity hook: what the data sync covers is taken before it;
        // the checksums are made durable after it.
        let ticket = file.integrity().map(ticket);
        file.sync_begins();
        self.sync_data(file.buffered_fd()).map_err(|e| {
            // The server logs failed COMMITs, a few a minute.
            tracing::debug!(file = %file.label(), error = %e, "COMMIT fdatasync failed");
            DataError::from(e)
        })?;
        if let (Some(sums), Some(ticket)) = (file.integrity(), ticket) {
            // The data is durable, which is all COMMIT promises the client.
            // Checksums not made durable keep their regions dirty in the
            // intent log (`commit` cleans them only after the sync), so a
            // crash has them recomputed: the COMMIT succeeds. Failing it
            // moved the write verifier, and every client of the server sent
            // all its uncommitted data again, to fail again while the state
            // directory was full.
            if let Err(e) = sums.commit(ticket) {
                self.checksum_commit_failed(file, &e);
            }
        }
        self.drop_cached_pages(file, 0, 0);
        Ok(())
    }

    /// Logs a COMMIT that could not make a file's checksums durable, at
    /// most once a minute per export.
    fn checksum_commit_failed(&self, file: &DataFile, e: &std::io::Error) {
        if self.checksum_commit_warned.due() {
            tracing::warn!(file = %file.label(), error = %e,
                "COMMIT made the data durable but not its checksums (is the state directory's \
                 filesystem full?); they stay in the intent log, recomputed if the server \
                 crashes. Repeats within a minute are not logged");
        }
    }

    /// After a sync: drops the clean cached pages of `[offset, offset+len)`
    /// (`len == 0`: to the end of the file) that direct-mode writes left
    /// behind (`POSIX_FADV_DONTNEED`), when this plane writes `file` direct
    /// and does not read it through the page cache (buffered reads want
    /// those pages). Pages dirtied since the sync are left alone by the
    /// kernel; dropping a clean page never loses data, so this needs no
    /// range lock. Advisory: a failure is only logged.
    pub(crate) fn drop_cached_pages(&self, file: &DataFile, offset: u64, len: u64) {
        let writes_direct = matches!(self.planned_write_path(file), IoPath::Direct(_));
        if !writes_direct || self.config.read_mode == Mode::Buffered {
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

    /// A page-cache write of `file` in direct mode ended at `end`: hands
    /// the range now a lag behind the furthest such write, if one is due,
    /// to the write-behind thread (`writebehind.rs`).
    pub(crate) fn write_behind(&self, file: &DataFile, end: u64) {
        let Some(due) = file.behind.advance(end) else {
            return;
        };
        // Left to COMMIT if the descriptor cannot be duplicated or the
        // thread is behind.
        if let Ok(fd) = file.buffered_fd().try_clone_to_owned() {
            self.write_behind.submit(fd, due);
        }
    }

    /// Sets the file size ([`DataFile::truncate`]), counting lock waits and
    /// errors in this plane.
    pub fn truncate(&self, file: &DataFile, new_size: u64) -> Result<(), DataError> {
        if new_size > MAX_FILE_OFFSET {
            return Err(DataError::FileTooBig);
        }
        match file.truncate(new_size) {
            Ok(waited) => {
                if waited {
                    Counters::bump(&self.counters.range_lock_waits);
                }
                Ok(())
            }
            Err(e) => {
                Counters::bump(&self.counters.errors);
                Err(DataError::from(e))
            }
        }
    }

    /// The I/O path for a READ of `file`.
    pub(crate) fn read_path<'f>(&self, file: &'f DataFile) -> IoPath<'f> {
        self.io_path(file, self.config.read_mode)
    }

    /// The I/O path for a WRITE of `file`.
    pub(crate) fn write_path<'f>(&self, file: &'f DataFile) -> IoPath<'f> {
        self.io_path(file, self.config.write_mode)
    }

    /// The path without counting or logging (for planning a buffer).
    pub(crate) fn planned_write_path<'f>(&self, file: &'f DataFile) -> IoPath<'f> {
        match (self.config.write_mode, file.direct()) {
            (Mode::Direct, Some(direct)) => IoPath::Direct(direct),
            _ => IoPath::Cached(Mode::Buffered),
        }
    }

    /// The direct path if `mode` is direct and the file can take it,
    /// without counting or logging anything (the blocking path, which
    /// runs otherwise, does that).
    pub(crate) fn direct_only<'f>(&self, file: &'f DataFile, mode: Mode) -> Option<&'f DirectIo> {
        (mode == Mode::Direct).then(|| file.direct()).flatten()
    }

    fn io_path<'f>(&self, file: &'f DataFile, mode: Mode) -> IoPath<'f> {
        match mode {
            Mode::Direct => match file.direct() {
                Some(direct) => IoPath::Direct(direct),
                None => {
                    self.note_no_direct(file);
                    IoPath::Cached(Mode::Buffered)
                }
            },
            Mode::DontCache if !self.dontcache_refused.load(Ordering::Relaxed) => {
                IoPath::Cached(Mode::DontCache)
            }
            Mode::DontCache | Mode::Buffered => IoPath::Cached(Mode::Buffered),
        }
    }

    fn note_no_direct(&self, file: &DataFile) {
        Counters::bump(&self.counters.no_direct_fallbacks);
        if !self.no_direct_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                file = %file.label(),
                dio = ?file.dio_align(),
                "file cannot do direct I/O (no O_DIRECT descriptor or no usable \
                 statx alignment); serving it buffered (logged once per export)"
            );
        }
    }

    /// Remembers that the filesystem refused `RWF_DONTCACHE`.
    fn note_dontcache_refused(&self, file: &DataFile) {
        Counters::bump(&self.counters.dontcache_fallbacks);
        if !self.dontcache_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                file = %file.label(),
                "RWF_DONTCACHE refused (EOPNOTSUPP); this export serves dontcache \
                 as buffered from now on"
            );
        }
    }

    /// Locks the range-lock blocks covering the I/O range `io`.
    pub(crate) fn lock<'f>(
        &self,
        file: &'f DataFile,
        io: Range<u64>,
        kind: LockKind,
    ) -> RangeGuard<'f> {
        self.lock_exact(file, file.lock_range(io), kind)
    }

    /// [`DataPlane::lock`] if that needs no waiting, else `None`.
    pub(crate) fn try_lock<'f>(
        &self,
        file: &'f DataFile,
        io: Range<u64>,
        kind: LockKind,
    ) -> Option<RangeGuard<'f>> {
        file.locks.try_lock(file.lock_range(io), kind)
    }

    pub(crate) fn lock_exact<'f>(
        &self,
        file: &'f DataFile,
        range: Range<u64>,
        kind: LockKind,
    ) -> RangeGuard<'f> {
        let guard = file.locks.lock(range, kind);
        if guard.waited() {
            Counters::bump(&self.counters.range_lock_waits);
        }
        guard
    }

    /// One buffered `preadv2`/`pwritev2` in `mode`; if `RWF_DONTCACHE` is
    /// refused, remembers that and redoes it buffered (nothing was
    /// transferred). Returns the count and the mode actually used.
    pub(crate) fn cached_io(
        &self,
        file: &DataFile,
        mode: Mode,
        mut io: impl FnMut(RwFlags) -> std::io::Result<usize>,
        extra: RwFlags,
    ) -> Result<(usize, Mode), DataError> {
        if mode == Mode::DontCache {
            match io(RwFlags::DONTCACHE | extra) {
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    self.note_dontcache_refused(file);
                }
                other => return Ok((other?, Mode::DontCache)),
            }
        }
        Ok((io(extra)?, Mode::Buffered))
    }

    /// A direct read; `EINVAL` is reported as a bug, see
    /// [`DataError::DirectRejected`].
    pub(crate) fn direct_pread(
        &self,
        file: &DataFile,
        direct: &DirectIo,
        buf: &mut [u8],
        offset: u64,
        align: u64,
    ) -> Result<usize, DataError> {
        let len = buf.len();
        preadv2(&direct.fd, buf, offset, RwFlags::NONE)
            .map_err(|e| self.direct_error(file, e, "read", offset, len, align))
    }

    /// A direct write with per-call `flags` (`RWF_DSYNC`/`RWF_SYNC` for
    /// stable writes), its rest written again after a short count (see
    /// [`pwrite_all`]: the second write says why the first stopped);
    /// `EINVAL` is reported as a bug, see [`DataError::DirectRejected`].
    pub(crate) fn direct_pwrite(
        &self,
        file: &DataFile,
        direct: &DirectIo,
        buf: &[u8],
        offset: u64,
        align: u64,
        flags: RwFlags,
    ) -> Result<usize, DataError> {
        pwrite_all(
            &direct.fd,
            buf,
            offset,
            flags,
            align as usize,
            self.partly_written(),
        )
        .map_err(|e| self.direct_error(file, e, "write", offset, buf.len(), align))
    }

    pub(crate) fn direct_error(
        &self,
        file: &DataFile,
        e: std::io::Error,
        op: &'static str,
        offset: u64,
        len: usize,
        align: u64,
    ) -> DataError {
        if e.raw_os_error() != Some(libc::EINVAL) {
            return DataError::Io(e);
        }
        Counters::bump(&self.counters.direct_einval);
        tracing::error!(
            file = %file.label(),
            op,
            offset,
            len,
            align,
            dio = ?file.dio_align(),
            "direct I/O rejected with EINVAL although our alignment math allowed it; \
             failing the request with NFS3ERR_IO (not retrying buffered)"
        );
        DataError::DirectRejected {
            op,
            offset,
            len,
            align,
        }
    }
}

/// The entries of a sweep list still alive; the dead ones are removed.
fn live<T>(list: &Mutex<Vec<Weak<T>>>) -> Vec<Arc<T>> {
    let mut list = list.lock();
    list.retain(|f| f.strong_count() > 0);
    list.iter().filter_map(Weak::upgrade).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stable;

    fn plane(read_mode: Mode, write_mode: Mode) -> DataPlane {
        crate::testing::plane(read_mode, write_mode, 64 << 10, 4)
    }

    /// A temp file in `dir` with a buffered and (if the filesystem allows)
    /// an O_DIRECT descriptor.
    fn temp_data_file(dir: &std::path::Path) -> (tempfile::NamedTempFile, DataFile) {
        let tmp = tempfile::NamedTempFile::new_in(dir).unwrap();
        let file = crate::testing::open_data_file(tmp.path());
        (tmp, file)
    }

    #[test]
    fn a_failed_sync_of_a_closed_file_moves_the_write_verifier() {
        use std::os::fd::AsFd;
        let plane = plane(Mode::Direct, Mode::Direct);
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join("f")).unwrap();
        let before = plane.write_verifier_generation();
        plane.sync_closed_file(file.as_fd()).unwrap();
        assert_eq!(plane.write_verifier_generation(), before);
        // fdatasync of a pipe fails (EINVAL), as one of a file whose
        // writeback failed does (EIO).
        let (reader, _writer) = std::io::pipe().unwrap();
        assert!(plane.sync_closed_file(reader.as_fd()).is_err());
        assert_eq!(plane.write_verifier_generation(), before + 1);
    }

    fn write(
        plane: &DataPlane,
        file: &DataFile,
        offset: u64,
        data: &[u8],
    ) -> Result<(), DataError> {
        let buf = plane.write_pool().get_blocking()?;
        let mut wb = plane.write_buffer(file, buf, offset, data.len())?;
        wb.payload_mut().copy_from_slice(data);
        plane.write(file, wb, Stable::Unstable).map(|_| ())
    }

    #[test]
    fn file_without_direct_fd_is_served_buffered_and_counted() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = DataFile::new(tmp.reopen().unwrap().into(), None).unwrap();
        assert!(!file.is_direct_capable());
        let plane = plane(Mode::Direct, Mode::Direct);
        assert_eq!(plane.payload_position(&file, 1234), 0);
        write(&plane, &file, 1234, b"hello").unwrap();
        let r = plane
            .read(&file, plane.read_pool().get_blocking().unwrap(), 1234, 100)
            .unwrap();
        assert_eq!(r.data(), b"hello");
        assert!(r.eof());
        let c = plane.snapshot();
        assert_eq!(c.no_direct_fallbacks, 2);
        assert_eq!(c.write.buffered.ops, 1);
        assert_eq!(c.read.buffered.ops, 1);
    }

    #[test]
    fn einval_from_direct_io_is_reported_not_retried() {
        let (_tmp, file) = temp_data_file(&std::env::temp_dir());
        let Some(direct) = file.direct() else {
            println!("skipped: temp dir has no direct I/O");
            return;
        };
        let plane = plane(Mode::Direct, Mode::Direct);
        // Offset 1 is never a valid direct-I/O offset.
        let buf = plane.write_pool().get_blocking().unwrap();
        let err = plane
            .direct_pwrite(
                &file,
                direct,
                &buf[..4096],
                1,
                direct.write_align,
                RwFlags::NONE,
            )
            .unwrap_err();
        assert!(matches!(
            err,
            DataError::DirectRejected {
                op: "write",
                offset: 1,
                ..
            }
        ));
        assert_eq!(err.errno(), libc::EIO);
        assert_eq!(plane.snapshot().direct_einval, 1);
    }

    #[test]
    fn failed_write_moves_the_verifier() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let read_only = std::fs::File::open(tmp.path()).unwrap();
        let file = DataFile::new(read_only.into(), None).unwrap();
        let plane = plane(Mode::Buffered, Mode::Buffered);
        let before = plane.write_verifier_generation();
        let err = write(&plane, &file, 0, b"x").unwrap_err();
        assert_eq!(err.errno(), libc::EBADF);
        assert_eq!(plane.write_verifier_generation(), before + 1);
        assert_eq!(plane.snapshot().errors, 1);
    }

    #[test]
    fn dontcache_refusal_falls_back_once() {
        let shm = std::path::Path::new("/dev/shm");
        if !shm.is_dir() {
            println!("skipped: no /dev/shm");
            return;
        }
        let (_tmp, file) = temp_data_file(shm);
        let probe = dionfs_sys::io::pwritev2(file.buffered_fd(), b"x", 0, RwFlags::DONTCACHE);
        if probe.is_ok() {
            println!("skipped: tmpfs accepts RWF_DONTCACHE here");
            return;
        }
        let plane = plane(Mode::DontCache, Mode::DontCache);
        write(&plane, &file, 10, b"abc").unwrap();
        write(&plane, &file, 13, b"def").unwrap();
        let r = plane
            .read(&file, plane.read_pool().get_blocking().unwrap(), 10, 6)
            .unwrap();
        assert_eq!(r.data(), b"abcdef");
        let c = plane.snapshot();
        assert_eq!(c.dontcache_fallbacks, 1, "only the first refusal is tried");
        assert_eq!(c.write.buffered.ops, 2);
        assert_eq!(c.read.buffered.ops, 1);
        assert_eq!(c.write.dontcache.ops, 0);
    }

    #[test]
    fn truncate_and_commit() {
        let (_tmp, file) = temp_data_file(&std::env::temp_dir());
        let plane = plane(Mode::Direct, Mode::Direct);
        write(&plane, &file, 0, &[7u8; 10000]).unwrap();
        plane.truncate(&file, 5001).unwrap();
        assert_eq!(file.size().unwrap(), 5001);
        plane.commit(&file, 0, 0).unwrap();
        assert!(matches!(
            plane.truncate(&file, u64::MAX),
            Err(DataError::FileTooBig)
        ));
    }

    #[test]
    fn a_successor_counts_on_with_new_pools() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        let file = DataFile::new(tmp.reopen().unwrap().into(), None).unwrap();
        let old = plane(Mode::Buffered, Mode::Buffered);
        write(&old, &file, 0, b"before").unwrap();
        let held = old.read_pool().get_blocking().unwrap();
        assert!(!old.is_idle(), "a buffer is out");
        let next = old
            .successor(DataConfig {
                read_mode: Mode::Direct,
                write_mode: Mode::Buffered,
                max_transfer: 128 << 10,
                read_buffers: 2,
                write_buffers: 3,
                small_buffers: 8,
                large_read_depth: crate::LARGE_READ_DEPTH,
            })
            .unwrap();
        assert_eq!(next.config().read_mode, Mode::Direct);
        assert_eq!(next.read_pool().buf_len(), (128 << 10) + BUF_SLACK);
        assert!(next.is_idle(), "its own pools, all free");
        write(&next, &file, 6, b" after").unwrap();
        let r = next
            .read(&file, next.read_pool().get_blocking().unwrap(), 0, 100)
            .unwrap();
        assert_eq!(r.data(), b"before after");
        drop(r);
        // Both planes count into one set of counters (the export's).
        assert_eq!(old.snapshot().write.buffered.ops, 2);
        assert_eq!(next.snapshot(), old.snapshot());
        drop(held);
        assert!(old.is_idle());
    }

    #[test]
    fn rejects_directories() {
        let dir = tempfile::tempdir().unwrap();
        let fd = std::fs::File::open(dir.path()).unwrap();
        let err = DataFile::new(fd.into(), None).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EISDIR));
    }
}
