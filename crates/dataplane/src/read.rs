//! READ ([`ReadPath`]): `read_direct` (expanded to alignment, replied
//! from the same buffer) and `read_cached` (buffered or `RWF_DONTCACHE`),
//! on a blocking thread or, for direct reads, through the server's
//! io_uring on the caller's task (`read_without_blocking`); readahead of
//! sequential direct reads (`readahead.rs`) and the routing of clustered
//! small ones through the page cache (`cluster.rs`).

use std::io;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use dionfs_sys::io::{preadv2, RwFlags};
use parking_lot::Mutex;

use crate::align::{expand_to_alignment, read_reply, round_down, within_size, MAX_FILE_OFFSET};
use crate::checksums::{ReadEpoch, Rebuild};
use crate::cluster::{drop_pages, Cluster, MAX_CLUSTERS};
use crate::config::SMALL_IO;
use crate::counters::Counters;
use crate::device_queue::DeviceReads;
use crate::file::{DataFile, DirectIo, SizeSeen};
use crate::held::Held;
use crate::paths::{IoPath, Paths};
use crate::pool::{BufferPool, IoRing, PooledBuf, BUF_SLACK};
use crate::prefetch::Prefetch;
use crate::range_lock::LockKind;
use crate::readahead::{Lookup, Planning, Readahead, Reading, Served};
use crate::{is_small, DataConfig, DataError, Mode};

/// The result of a READ: the buffer the data was read into and the part of
/// it that holds the requested bytes. The server sends [`ReadData::data`]
/// straight from this buffer and drops it afterwards (returning the buffer
/// to the pool). The buffer may be one readahead filled earlier.
#[derive(Debug)]
pub struct ReadData {
    buf: PooledBuf,
    range: Range<usize>,
    eof: bool,
    prefetch: Vec<Prefetch>,
    rebuild: Option<Rebuild>,
}

impl ReadData {
    /// The bytes to send.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }

    /// Number of bytes to send (`count` in READ3resok).
    pub fn len(&self) -> usize {
        self.range.len()
    }

    /// Whether no bytes are sent.
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }

    /// Whether the read reached the end of the file (`eof` in READ3resok).
    pub fn eof(&self) -> bool {
        self.eof
    }

    /// The chunks this READ asks to prefetch (a sequential direct stream
    /// with one READ in flight). Run each with [`Prefetch::run`] on a
    /// blocking thread, off the READ's own path; dropping one cancels it.
    pub fn take_prefetch(&mut self) -> Vec<Prefetch> {
        std::mem::take(&mut self.prefetch)
    }

    /// The rebuild of the file's checksums this READ hands out (it found
    /// the file changed behind the server's back, and answered what it
    /// read). Run it with [`Rebuild::run`] on a thread of its own, after
    /// the reply; dropping it leaves it to a later READ.
    pub fn take_rebuild(&mut self) -> Option<Rebuild> {
        self.rebuild.take()
    }
}

/// What [`crate::DataPlane::read_without_blocking`] did.
#[derive(Debug)]
pub enum ReadAttempt {
    /// The READ ran; this is its result.
    Done(Result<ReadData, DataError>),
    /// It needs a blocking thread (not a direct read, a writer holds or
    /// waits for its range, readahead chunks to serve from, the ring
    /// full): run [`crate::DataPlane::read`] there with this buffer.
    Blocking(PooledBuf),
}

impl AsRef<[u8]> for ReadData {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

/// READ on the files of one export: its READ buffers, the bookkeeping of
/// its readahead and of its files whose small READs cluster, and its
/// reads at the device. What it shares with WRITE comes in `paths`.
pub(crate) struct ReadPath {
    /// Buffers for READs (WRITEs have their own: clients that fill one
    /// direction's pool, say WRITEs whose payload is slow to come, leave
    /// the other direction served).
    pub(crate) read_pool: BufferPool,
    /// Buffers of READs of at most [`crate::SMALL_IO`] bytes.
    pub(crate) small_read_pool: BufferPool,
    counters: Arc<Counters>,
    /// Pool buffers held by readahead (planned, running or ready chunks),
    /// at most `readahead_cap`.
    readahead_held: Arc<AtomicUsize>,
    readahead_cap: usize,
    /// Files this export prefetched for, swept by `expire_readahead`.
    readahead_files: Mutex<Vec<Weak<Readahead>>>,
    /// Files whose small READs cluster now (at most
    /// [`crate::cluster::MAX_CLUSTERS`]), and the files that were, swept
    /// by `expire_readahead` too.
    cluster_count: Arc<AtomicUsize>,
    cluster_files: Mutex<Vec<Weak<Cluster>>>,
    /// The direct reads at the device: large ones make room for small
    /// ones (`device_queue.rs`).
    device_reads: Arc<DeviceReads>,
}

impl ReadPath {
    pub(crate) fn new(config: &DataConfig, counters: Arc<Counters>) -> ReadPath {
        let buf_len = config.max_transfer + BUF_SLACK;
        let read_pool = BufferPool::new(buf_len, config.read_buffers, counters.clone());
        // Never larger than the large ones: a small request is at most
        // max_transfer too.
        let small_len = SMALL_IO.min(config.max_transfer) + BUF_SLACK;
        let small_read_pool = BufferPool::new(small_len, config.small_buffers, counters.clone());
        // A quarter of the read pool: requests always keep the rest. Below
        // 4 buffers none, so readahead can never hold the buffer that the
        // READ which would use its data is waiting for.
        let readahead_cap = config.read_buffers / 4;
        let device_reads = Arc::new(DeviceReads::new(config.large_read_depth));
        ReadPath {
            read_pool,
            small_read_pool,
            counters,
            readahead_held: Arc::default(),
            readahead_cap,
            readahead_files: Mutex::default(),
            cluster_count: Arc::default(),
            cluster_files: Mutex::default(),
            device_reads,
        }
    }

    /// See [`crate::DataPlane::read_pool_for`].
    pub(crate) fn read_pool_for(&self, count: usize) -> &BufferPool {
        if is_small(count) {
            &self.small_read_pool
        } else {
            &self.read_pool
        }
    }

    /// See [`crate::DataPlane::expire_readahead`].
    pub(crate) fn expire_readahead(&self) {
        let now = Instant::now();
        for file in live(&self.readahead_files) {
            file.expire(now);
        }
        for cluster in live(&self.cluster_files) {
            cluster.expire(now);
        }
    }

    /// See [`crate::DataPlane::readahead_buffers`].
    pub(crate) fn readahead_buffers(&self) -> usize {
        self.readahead_held.load(Ordering::Acquire)
    }

    /// See [`crate::DataPlane::read`].
    pub(crate) fn read(
        &self,
        paths: &Paths,
        file: &DataFile,
        mut buf: PooledBuf,
        offset: u64,
        count: u32,
    ) -> Result<ReadData, DataError> {
        // A buffer from another pool may be smaller than ours.
        let count = (count as usize)
            .min(paths.config.max_transfer)
            .min(buf.len().saturating_sub(BUF_SLACK));
        if offset > MAX_FILE_OFFSET - (count + BUF_SLACK) as u64 {
            // No Linux file reaches this far.
            return Ok(ReadData {
                buf,
                range: 0..0,
                eof: true,
                prefetch: Vec::new(),
                rebuild: None,
            });
        }
        let result = match paths.read_path(file) {
            IoPath::Direct(direct) => {
                return self
                    .read_direct_ahead(paths, file, direct, buf, offset, count)
                    .inspect_err(|_| Counters::bump(&self.counters.errors));
            }
            IoPath::Cached(mode) => self.read_cached(paths, file, mode, &mut buf, offset, count),
        };
        match result {
            Ok(((range, eof), mode)) => {
                self.counters.count_read(mode, range.len());
                Ok(ReadData {
                    buf,
                    range,
                    eof,
                    prefetch: Vec::new(),
                    rebuild: paths.sums.rebuild_job(file),
                })
            }
            Err(e) => {
                Counters::bump(&self.counters.errors);
                Err(e)
            }
        }
    }

    /// See [`crate::DataPlane::ring_may_read`].
    pub(crate) fn ring_may_read(&self, paths: &Paths) -> bool {
        paths.config.read_mode == Mode::Direct
    }

    /// See [`crate::DataPlane::has_clusters`].
    pub(crate) fn has_clusters(&self) -> bool {
        self.cluster_count.load(Ordering::Relaxed) > 0
    }

    /// See [`crate::DataPlane::read_leaves_task`].
    pub(crate) fn read_leaves_task(&self, paths: &Paths, file: &DataFile) -> bool {
        paths.direct_only(file, paths.config.read_mode).is_none()
    }

    /// See [`crate::DataPlane::read_without_blocking`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn read_without_blocking(
        &self,
        paths: &Paths,
        ring: &Arc<IoRing>,
        file: &DataFile,
        mut buf: PooledBuf,
        offset: u64,
        count: u32,
        seen: SizeSeen,
    ) -> ReadAttempt {
        let count = (count as usize)
            .min(paths.config.max_transfer)
            .min(buf.len().saturating_sub(BUF_SLACK));
        let Some(direct) = paths.direct_only(file, paths.config.read_mode) else {
            return ReadAttempt::Blocking(buf);
        };
        if offset > MAX_FILE_OFFSET - (count + BUF_SLACK) as u64 {
            return ReadAttempt::Blocking(buf);
        }
        let reading = file.readahead.begin_read(offset..offset + count as u64);
        if reading.has_chunks() {
            // From prefetched chunks, here, waiting for those still being
            // read; a miss goes to a blocking thread, which reads it. A
            // READ that no chunk has anything of (another stream's, or a
            // random one) is read here like any other.
            let mut waited = false;
            loop {
                let read = reading.chunk_read().notified();
                tokio::pin!(read);
                read.as_mut().enable();
                match reading.serve_ready(offset, count, &mut buf, &self.counters) {
                    Lookup::Served(served) => {
                        if waited {
                            Counters::bump(&self.counters.readahead_waits);
                        }
                        return ReadAttempt::Done(self.served_from_chunks(
                            paths, file, direct, &reading, buf, served, offset, count,
                        ));
                    }
                    Lookup::Running => {
                        waited = true;
                        read.await;
                    }
                    Lookup::Miss => return ReadAttempt::Blocking(buf),
                    Lookup::Elsewhere => break,
                }
            }
        }
        if is_small(count)
            && self.route_small_read(file, offset..offset + count as u64, reading.concurrent())
        {
            return match self.read_cached_now(paths, file, &mut buf, offset, count, seen) {
                Some(result) => ReadAttempt::Done(
                    result
                        .map(|reply| self.clustered_read(paths, file, buf, reply, Mode::Buffered)),
                ),
                None => ReadAttempt::Blocking(buf),
            };
        }
        let align = direct.read_align;
        let io = expand_to_alignment(offset, count as u64, align);
        // Counted at the device; a large read waits for room beside small
        // ones first (`device_queue.rs`), without the range lock.
        let _at_device = self
            .device_reads
            .read(count, io.end - io.start, &self.counters)
            .await;
        let Some(_lock) = paths.try_lock(file, io.clone(), LockKind::Shared) else {
            return ReadAttempt::Blocking(buf);
        };
        let epoch = paths.sums.read_epoch(file);
        let io_len = match read_len(file, &io, align, Some(seen)) {
            Ok(len) => len,
            Err(e) => return ReadAttempt::Done(Err(self.read_failed(e))),
        };
        let filled = if io_len == 0 {
            0
        } else {
            let read = match ring.read(direct.fd.as_fd(), buf, 0..io_len, io.start) {
                Ok(read) => read,
                Err((e, back)) if e.kind() == io::ErrorKind::WouldBlock => {
                    return ReadAttempt::Blocking(back);
                }
                Err((e, _)) => return ReadAttempt::Done(Err(self.read_failed(e.into()))),
            };
            let (result, back) = read.await;
            buf = back;
            match result {
                Ok(n) => n,
                Err(e) => {
                    let e = paths.direct_error(file, e, "read", io.start, io_len, align);
                    return ReadAttempt::Done(Err(self.read_failed(e)));
                }
            }
        };
        let asked = offset..offset + count as u64;
        let reply = self.direct_read_reply(paths, file, &buf, asked, io, filled, epoch, Some(seen));
        let (range, eof) = match reply {
            Ok(reply) => reply,
            Err(e) => return ReadAttempt::Done(Err(self.read_failed(e))),
        };
        self.counters.count_read(Mode::Direct, range.len());
        Counters::bump(&self.counters.ring_reads);
        let prefetch =
            self.plan_readahead(paths, file, direct, &reading, offset, range.len(), false);
        ReadAttempt::Done(Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: paths.sums.rebuild_job(file),
        }))
    }

    /// What a clustered small READ (`cluster.rs`), read through the page
    /// cache in `mode`, hands back; counted as one.
    fn clustered_read(
        &self,
        paths: &Paths,
        file: &DataFile,
        buf: PooledBuf,
        (range, eof): (Range<usize>, bool),
        mode: Mode,
    ) -> ReadData {
        self.counters.count_read(mode, range.len());
        Counters::bump(&self.counters.clustered_reads);
        ReadData {
            buf,
            range,
            eof,
            prefetch: Vec::new(),
            rebuild: paths.sums.rebuild_job(file),
        }
    }

    fn read_failed(&self, e: DataError) -> DataError {
        Counters::bump(&self.counters.errors);
        e
    }

    /// Direct READ with readahead: served from prefetched chunks when they
    /// cover it, else read from the device; then the stream advances and
    /// may plan the next chunks (`readahead.rs`).
    fn read_direct_ahead(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        mut buf: PooledBuf,
        offset: u64,
        count: usize,
    ) -> Result<ReadData, DataError> {
        let reading = file.readahead.begin_read(offset..offset + count as u64);
        if is_small(count)
            && self.route_small_read(file, offset..offset + count as u64, reading.concurrent())
        {
            let (reply, mode) =
                self.read_cached(paths, file, Mode::Buffered, &mut buf, offset, count)?;
            return Ok(self.clustered_read(paths, file, buf, reply, mode));
        }
        if let Some(served) = reading.serve(offset, count, &mut buf, &self.counters) {
            return self
                .served_from_chunks(paths, file, direct, &reading, buf, served, offset, count);
        }
        let (range, eof) = self.read_direct(paths, file, direct, &mut buf, offset, count)?;
        self.counters.count_read(Mode::Direct, range.len());
        let prefetch =
            self.plan_readahead(paths, file, direct, &reading, offset, range.len(), false);
        Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: paths.sums.rebuild_job(file),
        })
    }

    /// The reply of a READ served from prefetched chunks: from the chunk's
    /// own buffer, or from `buf` they were copied into.
    #[allow(clippy::too_many_arguments)]
    fn served_from_chunks(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        reading: &Reading<'_>,
        buf: PooledBuf,
        served: Served,
        offset: u64,
        count: usize,
    ) -> Result<ReadData, DataError> {
        let (buf, io_start, filled) = match served {
            Served::Chunk {
                buf: chunk,
                start,
                len,
            } => (chunk, start, len),
            Served::Copied => (buf, offset, count),
        };
        let size = file.size()?;
        let (range, eof) = read_reply(offset, count as u64, io_start, filled, size);
        self.counters.count_read(Mode::Direct, range.len());
        let prefetch = self.plan_readahead(paths, file, direct, reading, offset, range.len(), true);
        Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: paths.sums.rebuild_job(file),
        })
    }

    /// Tells the file's readahead what this READ returned; returns the
    /// chunks it wants prefetched, with their buffers.
    #[allow(clippy::too_many_arguments)]
    fn plan_readahead(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        reading: &Reading<'_>,
        offset: u64,
        len: usize,
        hit: bool,
    ) -> Vec<Prefetch> {
        let align = direct.read_align;
        // Aligned, and at most max_transfer + align: fits a pool buffer
        // (BUF_SLACK is more than one alignment unit).
        let chunk_len = round_down(paths.config.max_transfer as u64, align).max(align);
        let planned = reading.advance(
            offset,
            offset + len as u64,
            hit,
            Planning {
                align,
                chunk_len,
                // An unknown size plans nothing.
                size: &|| file.size().unwrap_or(0),
                take_buffer: &mut || self.readahead_buffer(),
            },
        );
        let prefetch =
            Prefetch::planned(&file.readahead, planned, &self.counters, &self.device_reads);
        if !prefetch.is_empty() {
            self.register_readahead(file);
        }
        prefetch
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

    /// Direct read: expand `[offset, offset+count)` to the read alignment,
    /// read the expanded range (up to the end of the file) into the buffer
    /// under a shared range lock, and reply with the requested sub-range
    /// of that same buffer.
    fn read_direct(
        &self,
        paths: &Paths,
        file: &DataFile,
        direct: &DirectIo,
        buf: &mut [u8],
        offset: u64,
        count: usize,
    ) -> Result<(Range<usize>, bool), DataError> {
        let align = direct.read_align;
        let io = expand_to_alignment(offset, count as u64, align);
        // At most count + 2 * align <= max_transfer + BUF_SLACK bytes.
        let io_len = (io.end - io.start) as usize;
        let _at_device = self
            .device_reads
            .read_blocking(count, io_len as u64, &self.counters);
        let _lock = paths.lock(file, io.clone(), LockKind::Shared);
        let epoch = paths.sums.read_epoch(file);
        let read_len = read_len(file, &io, align, None)?;
        let filled = if read_len == 0 {
            0
        } else {
            paths.direct_pread(file, direct, &mut buf[..read_len], io.start, align)?
        };
        let asked = offset..offset + count as u64;
        self.direct_read_reply(paths, file, buf, asked, io, filled, epoch, None)
    }

    /// After a direct read of the expanded range `io` put `filled` bytes
    /// at the start of `buf` (with its range lock still held): the part of
    /// the buffer that answers `asked`, and eof, against the size `seen`
    /// before the read if nothing of ours changed it since (the read
    /// stopped there too: [`read_len`]).
    #[allow(clippy::too_many_arguments)]
    fn direct_read_reply(
        &self,
        paths: &Paths,
        file: &DataFile,
        buf: &[u8],
        asked: Range<u64>,
        io: Range<u64>,
        filled: usize,
        epoch: ReadEpoch,
        seen: Option<SizeSeen>,
    ) -> Result<(Range<usize>, bool), DataError> {
        if io != asked {
            Counters::bump(&self.counters.expanded_reads);
        }
        verified_reply(paths, file, buf, asked, io.start, filled, epoch, seen)
    }

    /// A clustered READ (`cluster.rs`) on the caller's task: read from the
    /// page cache if every byte of it is there now and nobody holds or
    /// waits for its range (`preadv2(RWF_NOWAIT)`, which also fails
    /// rather than wait for the inode's lock or a page being read in, and
    /// still starts the kernel's readahead). `None`: it goes to the
    /// blocking path, [`Self::read_cached`], which waits. Most of a
    /// cluster's READs find their pages read in by the readahead of the
    /// READs before them, so they need no blocking thread.
    fn read_cached_now(
        &self,
        paths: &Paths,
        file: &DataFile,
        buf: &mut [u8],
        offset: u64,
        count: usize,
        seen: SizeSeen,
    ) -> Option<Result<(Range<usize>, bool), DataError>> {
        let io = paths.sums.cached_read_range(file, offset, count);
        let _lock = paths.try_lock(file, io.clone(), LockKind::Shared)?;
        let epoch = paths.sums.read_epoch(file);
        // At most count + 2 blocks <= max_transfer + BUF_SLACK bytes.
        let dst = &mut buf[..(io.end - io.start) as usize];
        // Short: the rest is not cached, or past the end of the file (the
        // blocking path tells them apart).
        let filled = match preadv2(file.buffered_fd(), dst, io.start, RwFlags::NOWAIT) {
            Ok(n) if n == dst.len() => n,
            _ => return None,
        };
        let asked = offset..offset + count as u64;
        Some(verified_reply(
            paths,
            file,
            buf,
            asked,
            io.start,
            filled,
            epoch,
            Some(seen),
        ))
    }

    /// Buffered or `RWF_DONTCACHE` read of the requested range (of the
    /// whole blocks around it with integrity, to verify them).
    pub(crate) fn read_cached(
        &self,
        paths: &Paths,
        file: &DataFile,
        mode: Mode,
        buf: &mut [u8],
        offset: u64,
        count: usize,
    ) -> Result<((Range<usize>, bool), Mode), DataError> {
        let io = paths.sums.cached_read_range(file, offset, count);
        let _lock = paths.lock(file, io.clone(), LockKind::Shared);
        let epoch = paths.sums.read_epoch(file);
        // At most count + 2 blocks <= max_transfer + BUF_SLACK bytes.
        let dst = &mut buf[..(io.end - io.start) as usize];
        let (filled, mode) = paths.cached_io(
            file,
            mode,
            |flags| preadv2(file.buffered_fd(), dst, io.start, flags),
            RwFlags::NONE,
        )?;
        let asked = offset..offset + count as u64;
        let reply = verified_reply(paths, file, buf, asked, io.start, filled, epoch, None)?;
        Ok((reply, mode))
    }
}

/// The reply of a READ of `asked` whose range from `io_start` was read into
/// `buf` (`filled` bytes): its blocks checked against their checksums
/// (the integrity hook), then cut to what was asked, with eof by the
/// file's size (`seen`'s while still good, else asked now).
#[allow(clippy::too_many_arguments)]
fn verified_reply(
    paths: &Paths,
    file: &DataFile,
    buf: &[u8],
    asked: Range<u64>,
    io_start: u64,
    filled: usize,
    epoch: ReadEpoch,
    seen: Option<SizeSeen>,
) -> Result<(Range<usize>, bool), DataError> {
    paths
        .sums
        .verify_read(file, buf, io_start, filled, asked.clone(), epoch)?;
    let size = file.size_seen(seen)?;
    Ok(read_reply(
        asked.start,
        asked.end - asked.start,
        io_start,
        filled,
        size,
    ))
}

/// How many bytes of the expanded range `io` a direct read asks the kernel
/// for, with `io`'s range lock held: the file's size taken now cannot
/// shrink under it (a truncate locks the whole file), and the read stops
/// at the unit that holds its end ([`within_size`] says why). A write
/// extending the file past `io` meanwhile makes the READ short, which the
/// reply allows for ([`read_reply`]). A size `seen` before the lock is
/// as good when nothing of ours changed the size since
/// ([`DataFile::kernel_size`]).
fn read_len(
    file: &DataFile,
    io: &Range<u64>,
    align: u64,
    seen: Option<SizeSeen>,
) -> Result<usize, DataError> {
    let read = within_size(io.clone(), file.kernel_size(seen)?, align);
    // At most the expanded range, which fits a pool buffer.
    Ok((read.end - read.start) as usize)
}

/// The entries of a sweep list still alive; the dead ones are removed.
fn live<T>(list: &Mutex<Vec<Weak<T>>>) -> Vec<Arc<T>> {
    let mut list = list.lock();
    list.retain(|f| f.strong_count() > 0);
    list.iter().filter_map(Weak::upgrade).collect()
}
