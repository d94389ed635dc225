//! The data plane of one export ([`DataPlane`]): what the server calls.
//! It owns the export's read path (`read.rs`), its write path
//! (`write.rs`) and what the two share (`paths.rs`: configuration,
//! counters, the I/O decisions common to READ and WRITE, and the checksum
//! hooks), and hands each call to the path it belongs to, with what they
//! share; COMMIT and truncate are its own. NFSv4.2's SEEK, ALLOCATE and
//! DEALLOCATE go to `space.rs`, COPY and CLONE to `copy.rs`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dionfs_integrity::{CommitTicket, FileSums};
use dionfs_logs::LogEvery;

use crate::align::MAX_FILE_OFFSET;
use crate::counters::{CounterSnapshot, Counters};
use crate::file::{DataFile, SizeSeen};
use crate::paths::Paths;
use crate::pool::{BufferPool, IoRing, PooledBuf};
use crate::read::{ReadAttempt, ReadData, ReadPath};
use crate::space::Seek;
use crate::write::{Stable, WriteAttempt, WriteDone, WritePath};
use crate::write_buffer::WriteBuffer;
use crate::{DataConfig, DataError};

/// READ, WRITE, COMMIT, truncate and NFSv4.2's SEEK, ALLOCATE,
/// DEALLOCATE, COPY and CLONE for the files of one export.
pub struct DataPlane {
    /// What READ and WRITE share: configuration, counters, I/O decisions,
    /// checksum hooks.
    paths: Paths,
    reads: ReadPath,
    writes: WritePath,
    /// A COMMIT could not make checksums durable: logged once a minute.
    checksum_commit_warned: LogEvery,
}

impl DataPlane {
    /// A data plane with its own read pool of `read_buffers` and write pool
    /// of `write_buffers` buffers, each of `max_transfer` + [`crate::BUF_SLACK`]
    /// bytes.
    pub fn new(config: DataConfig) -> Result<Self, DataError> {
        Self::with_counters(config, Arc::default(), Arc::default())
    }

    /// A data plane with `config` that takes over from `self` when a
    /// configuration reload changes the export's modes or transfer size:
    /// new pools (of the new size), the same counters (so the export's
    /// metrics go on counting) and the same count of running checksum
    /// rebuilds (the export's cap), and what `self` learnt of the filesystem
    /// (that it refuses `RWF_DONTCACHE`).
    /// `self` goes on serving the calls that already hold it.
    pub fn successor(&self, config: DataConfig) -> Result<Self, DataError> {
        // Rebuilds the predecessor handed out count against the export's
        // cap until they end.
        let next = Self::with_counters(
            config,
            self.paths.counters.clone(),
            self.paths.sums.rebuilds_running.clone(),
        )?;
        next.paths.dontcache_refused.store(
            self.paths.dontcache_refused.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        next.writes.nowait_refused.store(
            self.writes.nowait_refused.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        Ok(next.with_whole_buffered_max(self.writes.whole_buffered_max))
    }

    /// `rebuilds_running`: the export's checksum rebuilds running.
    fn with_counters(
        config: DataConfig,
        counters: Arc<Counters>,
        rebuilds_running: Arc<AtomicUsize>,
    ) -> Result<Self, DataError> {
        config.validate()?;
        let reads = ReadPath::new(&config, counters.clone());
        let writes = WritePath::new(&config, counters.clone());
        Ok(Self {
            paths: Paths::new(config, counters, rebuilds_running),
            reads,
            writes,
            checksum_commit_warned: LogEvery::new(std::time::Duration::from_secs(60)),
        })
    }

    /// Misaligned direct-mode writes up to `bytes` long are written whole
    /// through the page cache; longer ones write their aligned interior
    /// direct and their partial edge blocks buffered. 0: every misaligned
    /// write splits (tests of the split use it).
    pub fn with_whole_buffered_max(mut self, bytes: usize) -> Self {
        self.writes.whole_buffered_max = bytes;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &DataConfig {
        &self.paths.config
    }

    /// Registers the pools' buffers with `ring` as fixed buffers, each at
    /// a free slot as it is allocated; freeing a buffer gives its slot
    /// back.
    pub fn register_buffers(&self, ring: &Arc<IoRing>) {
        self.reads.read_pool.register_with(ring);
        self.writes.write_pool.register_with(ring);
        self.reads.small_read_pool.register_with(ring);
        self.writes.small_write_pool.register_with(ring);
    }

    /// The READ buffers (their emptiness is backpressure on READs).
    pub fn read_pool(&self) -> &BufferPool {
        &self.reads.read_pool
    }

    /// The WRITE buffers (their emptiness is backpressure on WRITEs).
    pub fn write_pool(&self) -> &BufferPool {
        &self.writes.write_pool
    }

    /// A buffer for a READ of `count` bytes: from the small pool for at
    /// most [`crate::SMALL_IO`], else from the read pool; waits while that pool
    /// is empty.
    pub async fn read_buffer_for(&self, count: u32) -> std::io::Result<PooledBuf> {
        self.read_pool_for(count as usize).get().await
    }

    /// The pool a READ of `count` bytes takes its buffer from.
    #[inline]
    pub fn read_pool_for(&self, count: usize) -> &BufferPool {
        self.reads.read_pool_for(count)
    }

    /// The pool a WRITE of `len` bytes takes its buffer from.
    #[inline]
    pub fn write_pool_for(&self, len: usize) -> &BufferPool {
        self.writes.write_pool_for(len)
    }

    /// Drops prefetched data that waited longer than
    /// [`crate::READAHEAD_MAX_AGE`] for its READ, returning its buffers to
    /// the pool. The server calls this periodically, so a sequential
    /// reader that goes away leaves no buffers behind.
    pub fn expire_readahead(&self) {
        self.reads.expire_readahead()
    }

    /// Whether every buffer of both pools is back (no call, prefetch or
    /// ring operation holds one): a plane a reload retired can then go.
    pub fn is_idle(&self) -> bool {
        self.reads.read_pool.available() == self.paths.config.read_buffers
            && self.writes.write_pool.available() == self.paths.config.write_buffers
            && self.reads.small_read_pool.available() == self.paths.config.small_buffers
            && self.writes.small_write_pool.available() == self.paths.config.small_buffers
    }

    /// Pool buffers held by readahead right now.
    pub fn readahead_buffers(&self) -> usize {
        self.reads.readahead_buffers()
    }

    /// The live counters.
    pub fn counters(&self) -> &Counters {
        &self.paths.counters
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        self.paths.counters.snapshot()
    }

    /// Increases whenever a write (or commit) failed in a way that may have
    /// lost data the client thinks it sent. The server derives its write
    /// verifier from its boot verifier and this number, so clients resend
    /// their uncommitted writes (RFC 1813 section 3.3.7).
    #[inline]
    pub fn write_verifier_generation(&self) -> u64 {
        self.paths.write_verifier_generation()
    }

    /// `fdatasync` of a file the server wrote, through a descriptor of its
    /// own (the file closed since: `dionfs_integrity::Store::settle`). A
    /// failure moves the write verifier, as a failed COMMIT does: the
    /// kernel reports a writeback error once, to this descriptor, and the
    /// client's COMMIT would then succeed for data the disk never got;
    /// with the verifier moved, clients send their uncommitted data again.
    pub fn sync_closed_file(&self, data: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
        self.paths.sync_data(data).map_err(std::io::Error::from)
    }

    /// Makes all written data of the file durable (`fdatasync`). NFS COMMIT
    /// names a range; syncing the whole file is allowed (RFC 1813 section
    /// 3.3.21) and is what `fdatasync` can do.
    ///
    /// In direct write mode the partial edge blocks of misaligned writes
    /// went through the page cache; once they are on disk their pages are
    /// dropped, so direct mode stays out of the page cache (see
    /// `WritePath::drop_cached_pages`).
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
        self.paths.sync_data(file.buffered_fd()).map_err(|e| {
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
        self.writes.drop_cached_pages(&self.paths, file, 0, 0);
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

    /// Sets the file size ([`DataFile::truncate`]), counting lock waits and
    /// errors in this plane.
    pub fn truncate(&self, file: &DataFile, new_size: u64) -> Result<(), DataError> {
        if new_size > MAX_FILE_OFFSET {
            return Err(DataError::FileTooBig);
        }
        match file.truncate(new_size) {
            Ok(waited) => {
                if waited {
                    Counters::bump(&self.paths.counters.range_lock_waits);
                }
                Ok(())
            }
            Err(e) => {
                Counters::bump(&self.paths.counters.errors);
                Err(DataError::from(e))
            }
        }
    }

    /// SEEK (RFC 7862 section 15.11): the first offset at or after
    /// `offset` that holds data ([`Seek::Data`]) or lies in a hole
    /// ([`Seek::Hole`], the end of the file being one), by
    /// `lseek(SEEK_DATA/SEEK_HOLE)`, within the size clients see. `None`:
    /// no data from `offset` on. An offset at or past the end is
    /// [`DataError::PastEnd`] (`NFS4ERR_NXIO`). Holds `[offset, end)`
    /// shared. Blocking.
    pub fn seek(&self, file: &DataFile, offset: u64, what: Seek) -> Result<Option<u64>, DataError> {
        crate::space::seek(&self.paths, file, offset, what)
    }

    /// ALLOCATE (RFC 7862 section 15.1): reserves the blocks of `len`
    /// bytes at `offset` (`fallocate(0)`), which may extend the file; the
    /// data read does not change. Holds the range exclusively. Blocking.
    pub fn allocate(&self, file: &DataFile, offset: u64, len: u64) -> Result<(), DataError> {
        crate::space::allocate(&self.paths, file, offset, len)
    }

    /// DEALLOCATE (RFC 7862 section 15.4): frees the blocks of `len` bytes
    /// at `offset`, which then read as zeros
    /// (`fallocate(PUNCH_HOLE | KEEP_SIZE)`: the size stays). Holds the
    /// blocks covering the range exclusively. Blocking.
    pub fn deallocate(&self, file: &DataFile, offset: u64, len: u64) -> Result<(), DataError> {
        crate::space::deallocate(&self.paths, file, offset, len)
    }

    /// COPY (RFC 7862 section 15.2): copies up to `len` bytes (at most
    /// [`crate::COPY_MAX`]) of `src` at `src_offset` to `dst` at
    /// `dst_offset` (`copy_file_range`; XFS and btrfs share extents where
    /// they can), within one file too if the ranges do not overlap.
    /// Returns the bytes copied: fewer than `len` at the source's end or
    /// past [`crate::COPY_MAX`] (the client goes on from there). The
    /// protocol's count 0 ("to the end") is `u64::MAX` here. The copy is
    /// UNSTABLE: `dst` is left for COMMIT like a WRITE's data
    /// ([`DataFile::has_unsynced_writes`]). Blocking.
    pub fn copy(
        &self,
        src: &DataFile,
        src_offset: u64,
        dst: &DataFile,
        dst_offset: u64,
        len: u64,
    ) -> Result<u64, DataError> {
        crate::copy::copy(&self.paths, src, src_offset, dst, dst_offset, len)
    }

    /// CLONE (RFC 7862 section 15.13): makes `len` bytes of `dst` at
    /// `dst_offset` share the extents of `src` at `src_offset`
    /// (`FICLONERANGE`); `len` 0 clones to the source's end. Offsets must
    /// be aligned to the filesystem's block size, and the length too
    /// unless it ends at the source's end ([`DataError::InvalidRange`]
    /// otherwise); filesystems that cannot clone (ext4) answer
    /// `EOPNOTSUPP` ([`DataError::Io`]). Blocking.
    pub fn clone_range(
        &self,
        src: &DataFile,
        src_offset: u64,
        dst: &DataFile,
        dst_offset: u64,
        len: u64,
    ) -> Result<(), DataError> {
        crate::copy::clone_range(&self.paths, src, src_offset, dst, dst_offset, len)
    }

    /// Reads up to `count` bytes at `offset` into `buf` (from
    /// [`DataPlane::read_buffer_for`]). Blocking: call it on a blocking thread.
    /// Requests longer than `max_transfer` are answered short, as RFC 1813
    /// allows.
    #[inline]
    pub fn read(
        &self,
        file: &DataFile,
        buf: PooledBuf,
        offset: u64,
        count: u32,
    ) -> Result<ReadData, DataError> {
        self.reads.read(&self.paths, file, buf, offset, count)
    }

    /// Whether READs may go to [`DataPlane::read_without_blocking`]: this
    /// export reads direct (no syscall; the file may still say no).
    #[inline]
    pub fn ring_may_read(&self) -> bool {
        self.reads.ring_may_read(&self.paths)
    }

    /// Whether [`DataPlane::read_without_blocking`] gives any read of
    /// `file` back at once, whatever its range: the file is not read
    /// direct. Asked before the checks a caller makes for a read on its
    /// task (a statx, the permission, NFSv4's stateid), so that a READ
    /// bound for the blocking path makes them once, there. No syscall.
    #[inline]
    pub fn read_leaves_task(&self, file: &DataFile) -> bool {
        self.reads.read_leaves_task(&self.paths, file)
    }

    /// Whether some file of this plane is a cluster now (one atomic
    /// load; `cluster.rs`): its small READs go through the page cache.
    #[inline]
    pub fn has_clusters(&self) -> bool {
        self.reads.has_clusters()
    }

    /// [`DataPlane::read`] for an async caller, when it needs no blocking
    /// call: a direct read whose range nobody writes, of a file with no
    /// prefetched chunks, submitted to `ring` and awaited, or a small READ
    /// of a cluster whose bytes are all in the page cache, read from there
    /// (`cluster.rs`). Otherwise the buffer comes back
    /// ([`ReadAttempt::Blocking`]) with nothing of the READ's in it. `seen` is
    /// the file's size as the caller's statx read it, after
    /// [`DataFile::size_probe`]: the READ needs no size of its own unless
    /// a write or truncate of ours changed it since.
    ///
    /// Dropping the future abandons the read: the ring keeps the buffer
    /// until the kernel is done with it, and the shared range lock is
    /// released at once (the data read is never used, so a writer may go
    /// ahead).
    #[inline]
    pub fn read_without_blocking<'a>(
        &'a self,
        ring: &'a Arc<IoRing>,
        file: &'a DataFile,
        buf: PooledBuf,
        offset: u64,
        count: u32,
        seen: SizeSeen,
    ) -> impl Future<Output = ReadAttempt> + 'a {
        self.reads
            .read_without_blocking(&self.paths, ring, file, buf, offset, count, seen)
    }

    /// Takes a write-pool buffer for a WRITE of `len` bytes at `offset` to
    /// `file` (waiting while the pool is empty: backpressure) and places the
    /// payload slot where the write path wants it.
    #[inline]
    pub fn prepare_write<'a>(
        &'a self,
        file: &'a DataFile,
        offset: u64,
        len: usize,
    ) -> impl Future<Output = Result<WriteBuffer, DataError>> + 'a {
        self.writes.prepare_write(&self.paths, file, offset, len)
    }

    /// [`DataPlane::prepare_write`] with a buffer the caller already took
    /// from this plane's pool (e.g. with `write_pool().get_blocking()` in tools
    /// and tests).
    #[inline]
    pub fn write_buffer(
        &self,
        file: &DataFile,
        buf: PooledBuf,
        offset: u64,
        len: usize,
    ) -> Result<WriteBuffer, DataError> {
        self.writes
            .write_buffer(&self.paths, file, buf, offset, len)
    }

    /// Where a WRITE payload for `offset` goes in its buffer: `offset mod A`
    /// on the direct path, 0 otherwise.
    #[inline]
    pub fn payload_position(&self, file: &DataFile, offset: u64) -> usize {
        self.writes.payload_position(&self.paths, file, offset)
    }

    /// Writes the payload of `buf` and makes it as durable as `stable`
    /// asks. Blocking: call it on a blocking thread. On any failure the
    /// write verifier generation moves on (see
    /// [`DataPlane::write_verifier_generation`]).
    #[inline]
    pub fn write(
        &self,
        file: &DataFile,
        buf: WriteBuffer,
        stable: Stable,
    ) -> Result<WriteDone, DataError> {
        self.writes.write(&self.paths, file, buf, stable)
    }

    /// Whether [`DataPlane::write_without_blocking`] would take `buf` (an
    /// aligned direct write) unless its range is locked or the ring full:
    /// tells a caller, without a syscall, whether to try it at all.
    #[inline]
    pub fn ring_may_write(&self, file: &DataFile, buf: &WriteBuffer) -> bool {
        self.writes.ring_may_write(&self.paths, file, buf)
    }

    /// Whether [`DataPlane::write_on_task`] would try a WRITE of `len`
    /// bytes of `file` at all (no syscall): a small UNSTABLE write (at
    /// most [`crate::SMALL_IO`], a copy of a few microseconds) that
    /// goes through the page cache (buffered mode, or direct mode's small
    /// writes, `write_small_buffered`), without integrity, to a file
    /// whose locked ranges, if any, are all page-cache writes that read
    /// nothing from the device (`DataFile::only_page_writes`).
    #[inline]
    pub fn may_write_on_task(&self, file: &DataFile, len: usize, stable: Stable) -> bool {
        self.writes
            .may_write_on_task(&self.paths, file, len, stable)
    }

    /// [`DataPlane::write`] made on an async caller's own thread (the
    /// connection's task), when it is a small write whose partial pages
    /// are cached or holes: one `pwritev2` into the page cache that waits
    /// for no device read and, with no other I/O of ours on the file but
    /// such page-cache writes, for no inode lock held across a device
    /// I/O. Saves the hand-off to a blocking thread and back, which costs
    /// more than such a write (bench/run `overwrite-1k` and
    /// `ior-hard-write`, see ARCHITECTURE.md).
    ///
    /// Taken only if [`DataPlane::may_write_on_task`], the range lock is
    /// free, every other range locked on the file is a page-cache write
    /// that reads nothing from the device (`DataFile::only_page_writes`),
    /// its partial first and last pages need no device read (cached, or
    /// holes: `pages_cached`) and, if it starts past the end of the file,
    /// neither does the page the file ends in (which the kernel zeroes
    /// up to the gap).
    /// What it may still wait for is short and rare: XFS's timestamp
    /// transaction (`RWF_NOWAIT` itself refuses every write that changes
    /// mtime, so it cannot be used for the write), dirty-page throttling
    /// when the host is far behind on writeback. Anything else comes back
    /// as [`WriteAttempt::Blocking`], untouched, for [`DataPlane::write`]
    /// on a blocking thread.
    #[inline]
    pub fn write_on_task(&self, file: &DataFile, buf: WriteBuffer, stable: Stable) -> WriteAttempt {
        self.writes.write_on_task(&self.paths, file, buf, stable)
    }

    /// [`DataPlane::write`] for an async caller, when it needs no blocking
    /// call: an aligned direct write whose range is free, submitted to
    /// `ring` as the credentials registered under `personality` (the
    /// caller's, see `Uring::register_personality`: the kernel clears
    /// set-id bits and enforces quotas as for that user's own write), with
    /// `RWF_DSYNC`/`RWF_SYNC` for stable writes as the blocking path does.
    /// Otherwise the buffer comes back ([`WriteAttempt::Blocking`]).
    ///
    /// Dropping the future after submission abandons the wait, not the
    /// write: the kernel finishes it and the ring drops the buffer then;
    /// the range lock is released at once, and the write verifier does not
    /// move (a client that gets no reply resends).
    #[inline]
    pub fn write_without_blocking<'a>(
        &'a self,
        ring: &'a Arc<IoRing>,
        file: &'a DataFile,
        buf: WriteBuffer,
        stable: Stable,
        personality: u16,
    ) -> impl Future<Output = WriteAttempt> + 'a {
        self.writes
            .write_without_blocking(&self.paths, ring, file, buf, stable, personality)
    }

    /// The checksum hooks (tests).
    #[cfg(test)]
    pub(crate) fn sums(&self) -> &crate::checksums::Checksums {
        &self.paths.sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::BUF_SLACK;
    use crate::{Mode, Stable};
    use dionfs_sys::io::RwFlags;

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
            .paths
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
