//! What READ and WRITE share ([`Paths`]): which I/O path a file gets
//! (direct, or through the page cache), range locking, direct I/O with its
//! `EINVAL` policy, the `RWF_DONTCACHE` fallback, short writes, the write
//! verifier that failed writes move, and the checksum hooks
//! (`checksums.rs`). The read path (`read.rs`) and the write path
//! (`write.rs`) take it as an argument from the [`crate::DataPlane`] that
//! owns all three.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dionfs_sys::io::{preadv2, pwrite_all, RwFlags};

use crate::checksums::Checksums;
use crate::counters::Counters;
use crate::file::{DataFile, DirectIo};
use crate::range_lock::{LockKind, RangeGuard};
use crate::{DataConfig, DataError, Mode};

/// How one operation on one file does its I/O.
pub(crate) enum IoPath<'f> {
    /// `O_DIRECT` through the file's direct descriptor.
    Direct(&'f DirectIo),
    /// Through the page cache, plain or `RWF_DONTCACHE`.
    Cached(Mode),
}

/// The configuration, counters and decisions READ and WRITE of one export
/// share; see the module documentation.
pub(crate) struct Paths {
    pub(crate) config: DataConfig,
    pub(crate) counters: Arc<Counters>,
    /// Set once the filesystem refused `RWF_DONTCACHE`: from then on this
    /// export serves `dontcache` as buffered.
    pub(crate) dontcache_refused: AtomicBool,
    /// Whether the "file cannot do direct I/O" warning was logged.
    no_direct_logged: AtomicBool,
    write_verifier_generation: AtomicU64,
    /// The checksum hooks.
    pub(crate) sums: Checksums,
}

impl Paths {
    /// `rebuilds_running`: the export's count of checksum rebuilds handed
    /// out and not yet ended (shared with a successor plane).
    pub(crate) fn new(
        config: DataConfig,
        counters: Arc<Counters>,
        rebuilds_running: Arc<AtomicUsize>,
    ) -> Paths {
        Paths {
            sums: Checksums::new(counters.clone(), rebuilds_running),
            config,
            counters,
            dontcache_refused: AtomicBool::new(false),
            no_direct_logged: AtomicBool::new(false),
            write_verifier_generation: AtomicU64::new(0),
        }
    }

    /// See [`crate::DataPlane::write_verifier_generation`].
    pub(crate) fn write_verifier_generation(&self) -> u64 {
        self.write_verifier_generation.load(Ordering::Acquire)
    }

    /// A write failed in a way that may have lost data the client thinks
    /// it sent: counted, and the write verifier moves.
    pub(crate) fn note_write_failure(&self) {
        Counters::bump(&self.counters.errors);
        self.write_verifier_generation
            .fetch_add(1, Ordering::AcqRel);
    }

    /// `fdatasync`; a failure moves the write verifier (COMMIT's rule).
    pub(crate) fn sync_data(
        &self,
        data: std::os::fd::BorrowedFd<'_>,
    ) -> Result<(), rustix::io::Errno> {
        rustix::fs::fdatasync(data).inspect_err(|_| self.note_write_failure())
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
                dio_align = %file.dio_align(),
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

    /// [`crate::DataPlane::lock`] if that needs no waiting, else `None`.
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
            dio_align = %file.dio_align(),
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

    /// Counts, once per call, a write the kernel took only part of (the
    /// filesystem filled up, or the file reached the file-size limit,
    /// part-way); see [`pwrite_all`].
    pub(crate) fn partly_written(&self) -> impl FnMut() + '_ {
        let mut counted = false;
        move || {
            if !std::mem::replace(&mut counted, true) {
                Counters::bump(&self.counters.short_writes);
            }
        }
    }
}
