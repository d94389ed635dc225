//! The data plane of one export: configuration, buffer pool, counters, and
//! the decisions shared by READ and WRITE (which I/O path a file gets,
//! range locking, direct I/O with its `EINVAL` policy), plus COMMIT and
//! truncate.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dionfs_sys::io::{preadv2, pwritev2, RwFlags};

use crate::align::MAX_FILE_OFFSET;
use crate::counters::{CounterSnapshot, Counters};
use crate::file::{DataFile, DirectIo};
use crate::pool::{BufferPool, PooledBuf, BUF_SLACK};
use crate::range_lock::{LockKind, RangeGuard};
use crate::{DataConfig, DataError, Mode};

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
    pool: BufferPool,
    pub(crate) counters: Arc<Counters>,
    /// Set once the filesystem refused `RWF_DONTCACHE`: from then on this
    /// export serves `dontcache` as buffered.
    dontcache_refused: AtomicBool,
    /// Whether the "file cannot do direct I/O" warning was logged.
    no_direct_logged: AtomicBool,
    write_verifier_generation: AtomicU64,
}

impl DataPlane {
    /// A data plane with its own buffer pool of `max_in_flight` buffers of
    /// `max_transfer` + [`BUF_SLACK`] bytes.
    pub fn new(config: DataConfig) -> Result<Self, DataError> {
        config.validate()?;
        let counters = Arc::new(Counters::default());
        let pool = BufferPool::new(
            config.max_transfer + BUF_SLACK,
            config.max_in_flight,
            counters.clone(),
        );
        Ok(Self {
            config,
            pool,
            counters,
            dontcache_refused: AtomicBool::new(false),
            no_direct_logged: AtomicBool::new(false),
            write_verifier_generation: AtomicU64::new(0),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DataConfig {
        &self.config
    }

    /// The buffer pool (its emptiness is the server's backpressure).
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// A buffer for a READ; waits while the pool is empty.
    pub async fn read_buffer(&self) -> std::io::Result<PooledBuf> {
        self.pool.get().await
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

    /// Makes all written data of the file durable (`fdatasync`). NFS COMMIT
    /// names a range; syncing the whole file is allowed (RFC 1813 section
    /// 3.3.21) and is what `fdatasync` can do.
    pub fn commit(&self, file: &DataFile, _offset: u64, _count: u32) -> Result<(), DataError> {
        rustix::fs::fdatasync(file.buffered_fd()).map_err(|e| {
            self.note_write_failure();
            tracing::error!(file = %file.label(), error = %e, "COMMIT fdatasync failed");
            DataError::from(e)
        })
    }

    /// Sets the file size (SETATTR size). Waits for every READ and WRITE in
    /// flight on the file and excludes new ones meanwhile, so it serialises
    /// with extending writes and their size fix-ups. The server must route
    /// size changes of files open here through this call.
    pub fn truncate(&self, file: &DataFile, new_size: u64) -> Result<(), DataError> {
        if new_size > MAX_FILE_OFFSET {
            return Err(DataError::FileTooBig);
        }
        let _whole_file = self.lock_exact(file, 0..u64::MAX, LockKind::Exclusive);
        file.size
            .truncate(file.buffered_fd(), new_size)
            .map_err(|e| {
                Counters::bump(&self.counters.errors);
                DataError::from(e)
            })
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

    fn lock_exact<'f>(
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

    /// A direct write; `EINVAL` is reported as a bug, see
    /// [`DataError::DirectRejected`].
    pub(crate) fn direct_pwrite(
        &self,
        file: &DataFile,
        direct: &DirectIo,
        buf: &[u8],
        offset: u64,
        align: u64,
    ) -> Result<usize, DataError> {
        pwritev2(&direct.fd, buf, offset, RwFlags::NONE)
            .map_err(|e| self.direct_error(file, e, "write", offset, buf.len(), align))
    }

    fn direct_error(
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
