//! READ: `read_direct` (expanded to alignment, replied from the same
//! buffer) and `read_cached` (buffered or `RWF_DONTCACHE`).

use std::io;
use std::ops::Range;
use std::os::fd::AsFd;
use std::sync::Arc;

use dionfs_sys::io::{preadv2, RwFlags};

use crate::align::{expand_to_alignment, read_reply, round_down, MAX_FILE_OFFSET};
use crate::checksums::{ReadEpoch, Rebuild};
use crate::counters::Counters;
use crate::file::{DataFile, DirectIo};
use crate::plane::IoPath;
use crate::pool::{IoRing, PooledBuf, BUF_SLACK};
use crate::prefetch::Prefetch;
use crate::range_lock::LockKind;
use crate::readahead::{Lookup, Planning, Reading, Served};
use crate::{is_small, DataError, DataPlane, Mode};

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

/// What [`DataPlane::read_without_blocking`] did.
#[derive(Debug)]
pub enum ReadAttempt {
    /// The READ ran; this is its result.
    Done(Result<ReadData, DataError>),
    /// It needs a blocking thread (not a direct read, a writer holds or
    /// waits for its range, readahead chunks to serve from, the ring
    /// full): run [`DataPlane::read`] there with this buffer.
    Blocking(PooledBuf),
}

impl AsRef<[u8]> for ReadData {
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl DataPlane {
    /// Reads up to `count` bytes at `offset` into `buf` (from
    /// [`DataPlane::read_buffer_for`]). Blocking: call it on a blocking thread.
    /// Requests longer than `max_transfer` are answered short, as RFC 1813
    /// allows.
    pub fn read(
        &self,
        file: &DataFile,
        mut buf: PooledBuf,
        offset: u64,
        count: u32,
    ) -> Result<ReadData, DataError> {
        // A buffer from another pool may be smaller than ours.
        let count = (count as usize)
            .min(self.config.max_transfer)
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
        let result = match self.read_path(file) {
            IoPath::Direct(direct) => {
                return self
                    .read_direct_ahead(file, direct, buf, offset, count)
                    .inspect_err(|_| Counters::bump(&self.counters.errors));
            }
            IoPath::Cached(mode) => self.read_cached(file, mode, &mut buf, offset, count),
        };
        match result {
            Ok(((range, eof), mode)) => {
                self.counters.count_read(mode, range.len());
                Ok(ReadData {
                    buf,
                    range,
                    eof,
                    prefetch: Vec::new(),
                    rebuild: self.rebuild_job(file),
                })
            }
            Err(e) => {
                Counters::bump(&self.counters.errors);
                Err(e)
            }
        }
    }

    /// Whether READs may go to [`DataPlane::read_without_blocking`]: this
    /// export reads direct (no syscall; the file may still say no).
    pub fn ring_may_read(&self) -> bool {
        self.config.read_mode == Mode::Direct
    }

    /// [`DataPlane::read`] for an async caller, when it needs no blocking
    /// call: a direct read whose range nobody writes, of a file with no
    /// prefetched chunks, submitted to `ring` and awaited. Otherwise the
    /// buffer comes back ([`ReadAttempt::Blocking`]) untouched.
    ///
    /// Dropping the future abandons the read: the ring keeps the buffer
    /// until the kernel is done with it, and the shared range lock is
    /// released at once (the data read is never used, so a writer may go
    /// ahead).
    pub async fn read_without_blocking(
        &self,
        ring: &Arc<IoRing>,
        file: &DataFile,
        mut buf: PooledBuf,
        offset: u64,
        count: u32,
    ) -> ReadAttempt {
        let count = (count as usize)
            .min(self.config.max_transfer)
            .min(buf.len().saturating_sub(BUF_SLACK));
        let Some(direct) = self.direct_only(file, self.config.read_mode) else {
            return ReadAttempt::Blocking(buf);
        };
        if offset > MAX_FILE_OFFSET - (count + BUF_SLACK) as u64 {
            return ReadAttempt::Blocking(buf);
        }
        let reading = file.readahead.begin_read(offset..offset + count as u64);
        if file.cluster.is_active() {
            return ReadAttempt::Blocking(buf);
        }
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
                            file, direct, &reading, buf, served, offset, count,
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
            return ReadAttempt::Blocking(buf);
        }
        let align = direct.read_align;
        let io = expand_to_alignment(offset, count as u64, align);
        // Counted at the device; a large read waits for room beside small
        // ones first (`device_queue.rs`), without the range lock.
        let _at_device = self
            .device_reads
            .read(count, io.end - io.start, &self.counters)
            .await;
        let Some(_lock) = self.try_lock(file, io.clone(), LockKind::Shared) else {
            return ReadAttempt::Blocking(buf);
        };
        let epoch = self.read_epoch(file);
        let io_len = (io.end - io.start) as usize;
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
                    let e = self.direct_error(file, e, "read", io.start, io_len, align);
                    return ReadAttempt::Done(Err(self.read_failed(e)));
                }
            }
        };
        let asked = offset..offset + count as u64;
        let reply = self.direct_read_reply(file, &buf, asked, io, filled, epoch);
        let (range, eof) = match reply {
            Ok(reply) => reply,
            Err(e) => return ReadAttempt::Done(Err(self.read_failed(e))),
        };
        self.counters.count_read(Mode::Direct, range.len());
        Counters::bump(&self.counters.ring_reads);
        let prefetch = self.plan_readahead(file, direct, &reading, offset, range.len(), false);
        ReadAttempt::Done(Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: self.rebuild_job(file),
        }))
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
            let ((range, eof), mode) =
                self.read_cached(file, Mode::Buffered, &mut buf, offset, count)?;
            self.counters.count_read(mode, range.len());
            Counters::bump(&self.counters.clustered_reads);
            return Ok(ReadData {
                buf,
                range,
                eof,
                prefetch: Vec::new(),
                rebuild: self.rebuild_job(file),
            });
        }
        if let Some(served) = reading.serve(offset, count, &mut buf, &self.counters) {
            return self.served_from_chunks(file, direct, &reading, buf, served, offset, count);
        }
        let (range, eof) = self.read_direct(file, direct, &mut buf, offset, count)?;
        self.counters.count_read(Mode::Direct, range.len());
        let prefetch = self.plan_readahead(file, direct, &reading, offset, range.len(), false);
        Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: self.rebuild_job(file),
        })
    }

    /// The reply of a READ served from prefetched chunks: from the chunk's
    /// own buffer, or from `buf` they were copied into.
    #[allow(clippy::too_many_arguments)]
    fn served_from_chunks(
        &self,
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
        let prefetch = self.plan_readahead(file, direct, reading, offset, range.len(), true);
        Ok(ReadData {
            buf,
            range,
            eof,
            prefetch,
            rebuild: self.rebuild_job(file),
        })
    }

    /// Tells the file's readahead what this READ returned; returns the
    /// chunks it wants prefetched, with their buffers.
    fn plan_readahead(
        &self,
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
        let chunk_len = round_down(self.config.max_transfer as u64, align).max(align);
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

    /// Direct read: expand `[offset, offset+count)` to the read alignment,
    /// read the expanded range into the buffer under a shared range lock,
    /// and reply with the requested sub-range of that same buffer.
    fn read_direct(
        &self,
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
        let _lock = self.lock(file, io.clone(), LockKind::Shared);
        let epoch = self.read_epoch(file);
        let filled = if io_len == 0 {
            0
        } else {
            self.direct_pread(file, direct, &mut buf[..io_len], io.start, align)?
        };
        let asked = offset..offset + count as u64;
        self.direct_read_reply(file, buf, asked, io, filled, epoch)
    }

    /// After a direct read of the expanded range `io` put `filled` bytes
    /// at the start of `buf` (with its range lock still held): the part of
    /// the buffer that answers `asked`, and eof.
    fn direct_read_reply(
        &self,
        file: &DataFile,
        buf: &[u8],
        asked: Range<u64>,
        io: Range<u64>,
        filled: usize,
        epoch: ReadEpoch,
    ) -> Result<(Range<usize>, bool), DataError> {
        if io != asked {
            Counters::bump(&self.counters.expanded_reads);
        }
        // Integrity hook: the blocks of the reply match their checksums.
        self.verify_read(file, buf, io.start, filled, asked.clone(), epoch)?;
        let size = file.size()?;
        Ok(read_reply(
            asked.start,
            asked.end - asked.start,
            io.start,
            filled,
            size,
        ))
    }

    /// Buffered or `RWF_DONTCACHE` read of the requested range (of the
    /// whole blocks around it with integrity, to verify them).
    pub(crate) fn read_cached(
        &self,
        file: &DataFile,
        mode: Mode,
        buf: &mut [u8],
        offset: u64,
        count: usize,
    ) -> Result<((Range<usize>, bool), Mode), DataError> {
        let io = self.cached_read_range(file, offset, count);
        let _lock = self.lock(file, io.clone(), LockKind::Shared);
        let epoch = self.read_epoch(file);
        // At most count + 2 blocks <= max_transfer + BUF_SLACK bytes.
        let dst = &mut buf[..(io.end - io.start) as usize];
        let (filled, mode) = self.cached_io(
            file,
            mode,
            |flags| preadv2(file.buffered_fd(), dst, io.start, flags),
            RwFlags::NONE,
        )?;
        // Integrity hook: the blocks of the reply match their checksums.
        let asked = offset..offset + count as u64;
        self.verify_read(file, buf, io.start, filled, asked, epoch)?;
        let size = file.size()?;
        Ok((
            read_reply(offset, count as u64, io.start, filled, size),
            mode,
        ))
    }
}
