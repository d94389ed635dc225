//! An open regular file as the data plane needs it.

use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dionfs_integrity::FileSums;
use dionfs_sys::io::{page_size, statx_dio, DioAlign};

use crate::align::{round_down, round_up};
use crate::cluster::Cluster;
use crate::pool::{BUF_ALIGN, MAX_DIO_ALIGN};
use crate::range_lock::{LockKind, RangeLocks};
use crate::readahead::Readahead;
use crate::size::{fstat_size, SizeTracker};

/// The `O_DIRECT` side of a file whose alignment our buffers can meet.
#[derive(Debug)]
pub(crate) struct DirectIo {
    pub(crate) fd: OwnedFd,
    /// Offset/length alignment for direct reads.
    pub(crate) read_align: u64,
    /// Offset/length alignment for direct writes.
    pub(crate) write_align: u64,
}

/// An open regular file: a buffered descriptor, an optional `O_DIRECT`
/// descriptor beside it, the direct-I/O alignment statx reported (a
/// property of the file, cached here) and the file's range locks. The
/// filesystem backend opens both descriptors and keeps exactly one
/// `DataFile` per inode alive (its open-file cache); every READ, WRITE,
/// COMMIT and size change of the file must go through that one `DataFile`,
/// or two writes of one block (a buffered edge and a direct write that
/// invalidates its page) could miss each other's locks.
#[derive(Debug)]
pub struct DataFile {
    buffered: OwnedFd,
    /// The inode: (device, inode number), which orders the range locks
    /// of two files a COPY or CLONE takes (`copy.rs`).
    identity: (u64, u64),
    direct: Option<DirectIo>,
    dio: DioAlign,
    /// Granularity of range locks: at least a page (buffered I/O works in
    /// pages and direct I/O invalidates whole pages) and at least both
    /// direct alignments.
    lock_unit: u64,
    pub(crate) locks: RangeLocks,
    pub(crate) size: SizeTracker,
    /// Sequential-read detection and prefetched data (direct reads only).
    pub(crate) readahead: Arc<Readahead>,
    /// Small concurrent READs near each other (direct reads only).
    pub(crate) cluster: Arc<Cluster>,
    /// The root of the export the file was opened through, for log lines
    /// ([`DataFile::label`]).
    export: Option<PathBuf>,
    /// The file's block checksums, on exports with `integrity = "crc32c"`
    /// (see `checksums.rs`): the file's one state, shared with any other
    /// open of it (`dionfs_integrity::Store::open_file`).
    integrity: Option<Arc<FileSums>>,
    /// Data below this offset is likely on disk and not in the page cache:
    /// the size when the file was opened, raised by each COMMIT that
    /// dropped direct mode's pages. A hint for which page-cache writes
    /// look for partial pages to read in first (`read_partial_pages`).
    cold_below: AtomicU64,
    /// Page-cache writes of ours holding their range lock that wait for no
    /// device read ([`DataFile::page_writing`]); see
    /// [`DataFile::only_page_writes`].
    page_writes: AtomicUsize,
    /// UNSTABLE writes answered since the last COMMIT's sync began: their
    /// data may be only in the page cache, and a failed writeback of it is
    /// reported once, to a sync of this open file (or lost with the inode
    /// once the file is closed). See [`DataFile::has_unsynced_writes`].
    unsynced: AtomicBool,
}

/// What [`DataFile::size_probe`] saw, for [`DataFile::size_given`].
#[derive(Debug, Clone, Copy)]
pub struct SizeProbe(u64);

/// The kernel's size of a file as a caller's own statx read it, after a
/// [`SizeProbe`]: given to a READ, it spares the READ reading the size
/// again, before and after (see [`DataFile::size_seen`]).
#[derive(Debug, Clone, Copy)]
pub struct SizeSeen {
    probe: SizeProbe,
    kernel_size: u64,
}

impl SizeSeen {
    /// `kernel_size`, read after `probe` was taken.
    pub fn new(probe: SizeProbe, kernel_size: u64) -> Self {
        Self { probe, kernel_size }
    }
}

/// Whether the file's alignment is something our pool buffers satisfy.
/// The interior of a misaligned write starts one write-alignment unit into
/// its buffer, so the memory alignment must not exceed the write alignment
/// either (no device we know of asks for that).
fn usable_direct_alignment(dio: &DioAlign) -> bool {
    let fits = |a: u32| a.is_power_of_two() && a as usize <= MAX_DIO_ALIGN;
    dio.supports_direct()
        && dio.mem_align.is_power_of_two()
        && dio.mem_align as usize <= BUF_ALIGN
        && dio.mem_align <= dio.write_align()
        && fits(dio.read_align())
        && fits(dio.write_align())
}

impl DataFile {
    /// Wraps an open regular file. `buffered` is opened `O_RDWR` (or
    /// `O_RDONLY` for read-only use); `direct`, if the backend could open
    /// it, is the same file opened with `O_DIRECT`. The file is served
    /// buffered when `direct` is `None` or statx reports no usable direct-I/O
    /// alignment.
    pub fn new(buffered: OwnedFd, direct: Option<OwnedFd>) -> io::Result<Self> {
        let st = rustix::fs::fstat(&buffered)?;
        let file_type = rustix::fs::FileType::from_raw_mode(st.st_mode);
        if file_type == rustix::fs::FileType::Directory {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        if file_type != rustix::fs::FileType::RegularFile {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let dio = match &direct {
            Some(fd) => statx_dio(fd),
            None => statx_dio(&buffered),
        }
        .unwrap_or_else(|e| {
            // Kernels or filesystems without statx: no known alignment,
            // so no direct I/O for this file.
            tracing::debug!(error = %e, "statx for direct-I/O alignment failed");
            DioAlign::default()
        });
        let direct = direct
            .filter(|_| usable_direct_alignment(&dio))
            .map(|fd| DirectIo {
                fd,
                read_align: u64::from(dio.read_align()),
                write_align: u64::from(dio.write_align()),
            });
        let mut lock_unit = page_size() as u64;
        if let Some(d) = &direct {
            lock_unit = lock_unit.max(d.read_align).max(d.write_align);
        }
        Ok(Self {
            identity: (st.st_dev as u64, st.st_ino as u64),
            buffered,
            direct,
            dio,
            lock_unit,
            locks: RangeLocks::new(),
            size: SizeTracker::default(),
            readahead: Arc::default(),
            cluster: Arc::default(),
            export: None,
            integrity: None,
            cold_below: AtomicU64::new(st.st_size.max(0) as u64),
            page_writes: AtomicUsize::new(0),
            unsynced: AtomicBool::new(false),
        })
    }

    /// See the field: below this offset, data is probably not cached.
    pub(crate) fn cold_below(&self) -> u64 {
        self.cold_below.load(Ordering::Relaxed)
    }

    /// The file's pages up to `size` were just dropped from the page cache.
    pub(crate) fn dropped_below(&self, size: u64) {
        self.cold_below.fetch_max(size, Ordering::Relaxed);
    }

    /// Marks a write of the caller's, its range lock held, as a buffered
    /// page-cache write that reads nothing from the device (its partial
    /// pages are cached, holes, or were read in first) until the guard
    /// drops. Such a write holds the inode lock only for a memory copy
    /// (and the delayed-allocation bookkeeping).
    pub(crate) fn page_writing(&self) -> PageWriting<'_> {
        self.page_writes.fetch_add(1, Ordering::Relaxed);
        PageWriting(&self.page_writes)
    }

    /// Whether every range locked or waited for on the file but the
    /// caller's `own` is a write marked with [`DataFile::page_writing`]:
    /// no direct I/O, no read and no write that may read from the device
    /// is in flight. A buffered write made now then waits at most for
    /// those copies for the inode lock (on XFS, buffered writes take it
    /// exclusively; a direct write, and a buffered read, hold it through
    /// the device I/O), and an extending one finds no direct I/O to drain
    /// (`inode_dio_wait`). A hint, read without a lock across both
    /// counts: I/O of other processes, or of ours starting right after,
    /// can still make such a write wait.
    pub(crate) fn only_page_writes(&self, own: usize) -> bool {
        self.locks.len() <= own + self.page_writes.load(Ordering::Relaxed)
    }

    /// Keeps and checks the file's block checksums in `sums`: every write
    /// computes them, every read verifies them (`checksums.rs`). Direct
    /// I/O then works in whole checksum blocks at least (4 KiB), so that
    /// a direct read always covers the blocks it verifies.
    pub fn with_integrity(mut self, sums: Arc<FileSums>) -> Self {
        let block = dionfs_integrity::BLOCK;
        if let Some(d) = &mut self.direct {
            d.read_align = d.read_align.max(block);
            d.write_align = d.write_align.max(block);
        }
        self.lock_unit = self.lock_unit.max(block);
        self.integrity = Some(sums);
        self
    }

    /// Whether UNSTABLE writes were answered since the last COMMIT's sync
    /// began. Such a file must not be closed without an `fdatasync` of it
    /// whose failure moves the write verifier (the open-file cache's
    /// `sync_evicted` in `dionfs-fs`): the kernel reports a
    /// failed writeback to the syncs of the open files that were open when
    /// it failed, so once the file is closed and reopened a COMMIT could
    /// succeed for data the disk never got (knfsd syncs a written file as
    /// its cache closes it, for the same reason).
    pub fn has_unsynced_writes(&self) -> bool {
        self.unsynced.load(Ordering::Acquire)
    }

    /// An UNSTABLE write was answered (after its data reached the page
    /// cache or the device).
    pub(crate) fn wrote_unsynced(&self) {
        self.unsynced.store(true, Ordering::Release);
    }

    /// A sync of the whole file begins: what was written before it is
    /// covered by it (a write that ends after this sets the flag again).
    pub(crate) fn sync_begins(&self) {
        self.unsynced.store(false, Ordering::Release);
    }

    /// The file's block checksums, if its export keeps them.
    pub fn integrity(&self) -> Option<&FileSums> {
        self.integrity.as_deref()
    }

    /// [`DataFile::integrity`], shared.
    pub(crate) fn integrity_arc(&self) -> Option<&Arc<FileSums>> {
        self.integrity.as_ref()
    }

    /// Records the root of the export the file was opened through, which
    /// log lines name ([`DataFile::label`], [`DataFile::export`]).
    pub fn with_export(mut self, root: impl Into<PathBuf>) -> Self {
        self.export = Some(root.into());
        self
    }

    /// The root of the export the file was opened through, if the opener
    /// said ([`DataFile::with_export`]). An open file is shared by the
    /// exports of one filesystem: this is the first one's.
    pub fn export(&self) -> Option<&Path> {
        self.export.as_deref()
    }

    /// The direct-I/O alignment statx reported when the file was opened.
    pub fn dio_align(&self) -> DioAlign {
        self.dio
    }

    /// Whether the file is served with direct I/O in `direct` mode.
    pub fn is_direct_capable(&self) -> bool {
        self.direct.is_some()
    }

    /// The buffered descriptor (for metadata calls such as `fstat`).
    pub fn buffered_fd(&self) -> BorrowedFd<'_> {
        self.buffered.as_fd()
    }

    /// The file size to report to clients: the kernel's, except that an
    /// extending write in flight counts as done (never a size half-way
    /// through a write). GETATTR on a file open here should report this.
    pub fn size(&self) -> io::Result<u64> {
        self.size.visible_size(self.buffered.as_fd())
    }

    /// Taken before a caller's own statx of the file, for
    /// [`DataFile::size_given`].
    pub fn size_probe(&self) -> SizeProbe {
        SizeProbe(self.size.probe())
    }

    /// [`DataFile::size`] for a caller that took `probe`, then read the
    /// kernel's size itself (`kernel_size`, from its own statx): no second
    /// syscall unless an extending write ran meanwhile.
    pub fn size_given(&self, probe: SizeProbe, kernel_size: u64) -> io::Result<u64> {
        self.size
            .visible_size_given(probe.0, kernel_size, self.buffered.as_fd())
    }

    /// The file's size as a READ would read it now (a probe, then
    /// `fstat`), for a caller of `DataPlane::read_without_blocking` that
    /// makes no statx of its own.
    pub fn see_size(&self) -> io::Result<SizeSeen> {
        let probe = self.size_probe();
        Ok(SizeSeen::new(probe, fstat_size(self.buffered.as_fd())?))
    }

    /// The kernel's size now, from `seen` when nothing of ours changed the
    /// size since (no syscall), else read again.
    pub(crate) fn kernel_size(&self, seen: Option<SizeSeen>) -> io::Result<u64> {
        match seen {
            Some(seen) => {
                self.size
                    .kernel_size_since(seen.probe.0, seen.kernel_size, self.buffered.as_fd())
            }
            None => fstat_size(self.buffered.as_fd()),
        }
    }

    /// [`DataFile::size`], from `seen` when it is still good.
    pub(crate) fn size_seen(&self, seen: Option<SizeSeen>) -> io::Result<u64> {
        match seen {
            Some(seen) => self.size_given(seen.probe, seen.kernel_size),
            None => self.size(),
        }
    }

    /// Sets the file size (`ftruncate`). Holds the whole file's range lock
    /// exclusively, so it waits for every READ and WRITE in flight and
    /// excludes new ones meanwhile: no write in flight can extend the file
    /// past a new, smaller size after the truncate. Every size change
    /// of a file (SETATTR size, CREATE with a size) must come through here
    /// (or through the plane's ALLOCATE, COPY and CLONE, which extend a
    /// file under their own range locks).
    /// Runs with the calling thread's credentials: for a non-root caller
    /// the kernel clears set-user-ID and set-group-ID bits. Returns whether
    /// it had to wait for the lock.
    pub fn truncate(&self, new_size: u64) -> io::Result<bool> {
        if new_size > crate::align::MAX_FILE_OFFSET {
            return Err(io::Error::from_raw_os_error(libc::EFBIG));
        }
        let whole_file = self.locks.lock(0..u64::MAX, LockKind::Exclusive);
        // Under the exclusive lock, so no prefetch of old data can be
        // published after this (see `readahead.rs`).
        self.readahead.invalidate(0..u64::MAX);
        // Integrity hook: the new last block is logged before the size
        // changes, and its checksum recomputed after (`FileSums::truncated`).
        let sums = match &self.integrity {
            Some(sums) => Some((sums, sums.begin_truncate(self.buffered.as_fd(), new_size)?)),
            None => None,
        };
        rustix::fs::ftruncate(&self.buffered, new_size)?;
        self.size.truncated();
        if let Some((sums, ticket)) = sums {
            sums.truncated(ticket, new_size)?;
        }
        Ok(whole_file.waited())
    }

    /// The inode (device, inode number).
    pub(crate) fn identity(&self) -> (u64, u64) {
        self.identity
    }

    pub(crate) fn direct(&self) -> Option<&DirectIo> {
        self.direct.as_ref()
    }

    /// The range-lock range that covers the I/O range `io`.
    pub(crate) fn lock_range(&self, io: Range<u64>) -> Range<u64> {
        if io.is_empty() {
            return io.start..io.start;
        }
        round_down(io.start, self.lock_unit)..round_up(io.end, self.lock_unit)
    }

    /// A name for log lines: the file's path as the kernel knows it now
    /// (after renames too; a removed file's ends in ` (deleted)`), read
    /// from its open descriptor when a line is written, so that opening a
    /// file costs nothing for it. The kernel knows no path for a file
    /// opened by handle that nothing has looked up since its dentry left
    /// the cache (after a restart, say: the link then reads `/`), nor
    /// under the export for one moved out of it: the export and the inode
    /// number name it then (with the command that finds it).
    pub fn label(&self) -> String {
        let fd = self.buffered.as_raw_fd();
        let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok();
        let inode = self.identity.1;
        match (&self.export, path) {
            (Some(root), Some(path)) if path.starts_with(root) => path.display().to_string(),
            (None, Some(path)) => path.display().to_string(),
            (Some(root), path) => {
                let root = root.display();
                match path.filter(|p| p.as_os_str() != "/") {
                    Some(path) => format!(
                        "{} (inode {inode}, not under export {root})",
                        path.display()
                    ),
                    None => format!("inode {inode} of export {root} (find {root} -inum {inode})"),
                }
            }
            (None, None) => format!("inode {inode} (fd {fd})"),
        }
    }
}

/// A page-cache write marked by [`DataFile::page_writing`], until dropped.
pub(crate) struct PageWriting<'f>(&'f AtomicUsize);

impl Drop for PageWriting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_named_by_its_path_now_or_by_its_export_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let export = std::fs::canonicalize(dir.path()).unwrap();
        let path = export.join("a");
        let file = std::fs::File::create(&path).unwrap();
        let inode = std::os::unix::fs::MetadataExt::ino(&file.metadata().unwrap());
        let data = DataFile::new(file.into(), None)
            .unwrap()
            .with_export(&export);
        assert_eq!(data.label(), path.display().to_string());
        assert_eq!(data.export(), Some(export.as_path()));
        // The path is read when a line is written: a rename is followed.
        std::fs::create_dir(export.join("d")).unwrap();
        std::fs::rename(&path, export.join("d/b")).unwrap();
        assert_eq!(data.label(), export.join("d/b").display().to_string());
        // Not under the export any more (moved out of it).
        let elsewhere = export.join("d").with_extension("other");
        let data = data.with_export(&elsewhere);
        assert_eq!(
            data.label(),
            format!(
                "{} (inode {inode}, not under export {})",
                export.join("d/b").display(),
                elsewhere.display()
            )
        );
    }
}
