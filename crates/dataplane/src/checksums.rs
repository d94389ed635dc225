//! The data plane's integrity hooks ([`Checksums`], for exports with
//! `integrity = "crc32c"`): the thin layer between the READ/WRITE paths and the file's
//! [`FileSums`] (crate `dionfs-integrity`). Every hook runs under the
//! range lock the I/O path already holds, which covers whole 4 KiB blocks
//! ([`DataFile::with_integrity`]).
//!
//! - WRITE ([`Checksums::checked_write`], wrapped around the data write
//!   of every write path): the other bytes of the partial first and last
//!   4 KiB blocks are read into the pool buffer around the payload (from
//!   the page cache when they are there), so the buffer holds the final
//!   contents of every block the write touches; the blocks are logged in
//!   the intent log; the write is issued while a worker computes the
//!   blocks' CRC32C over that buffer, which no client can change; the
//!   checksums are stored once the write succeeded (recomputed from disk if
//!   it failed).
//! - READ ([`Checksums::verify_read`]): every block a reply draws from is
//!   checked before the reply is built. A mismatch in a file changed
//!   behind the server's back is answered as read, and hands out a
//!   rebuild of the file's checksums to run beside later READs
//!   ([`Rebuild`]); any other mismatch is [`DataError::Corrupt`]: logged
//!   with the file, block and both checksums, counted, and answered
//!   `NFS3ERR_IO`.
//! - Truncate and COMMIT: in `file.rs` and `plane.rs`; ALLOCATE and
//!   DEALLOCATE in `space.rs`, COPY and CLONE in `copy.rs`.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_integrity::{block_ceil, block_floor, FileSums, Order, WriteTicket, BLOCK};

use crate::counters::Counters;
use crate::file::DataFile;
use crate::page_cache::{needs_device_read, read_without_queueing};
use crate::range_lock::LockKind;
use crate::write_buffer::WriteBuffer;
use crate::DataError;

/// The checksum hooks of one export's data plane: see the module
/// documentation.
pub(crate) struct Checksums {
    counters: Arc<Counters>,
    /// Checksum rebuilds handed out and not yet ended, at most
    /// [`MAX_REBUILDS`] (shared with a successor plane).
    pub(crate) rebuilds_running: Arc<AtomicUsize>,
}

impl Checksums {
    pub(crate) fn new(counters: Arc<Counters>, rebuilds_running: Arc<AtomicUsize>) -> Checksums {
        Checksums {
            counters,
            rebuilds_running,
        }
    }

    /// Runs `io`, the data write of `buf`'s payload (its exclusive range
    /// lock held), with the file's checksums kept: see the module
    /// documentation. Without integrity, just `io(buf)`. `io` must fail on
    /// a short write.
    pub(crate) fn checked_write<T>(
        &self,
        file: &DataFile,
        buf: &mut WriteBuffer,
        io: impl FnOnce(&WriteBuffer) -> Result<T, DataError>,
    ) -> Result<T, DataError> {
        let Some(sums) = file.integrity() else {
            return io(buf);
        };
        if buf.is_empty() {
            return io(buf);
        }
        let end = buf.offset + buf.len as u64;
        let blocks = block_floor(buf.offset)..block_ceil(end);
        // File offset of buffer byte 0: the payload sits at `at`, which is
        // at least `offset mod 4096` on every path with integrity.
        let base = buf.offset - buf.at as u64;
        debug_assert!(base <= blocks.start);
        fill_partial_blocks(file, buf, base, &blocks)?;
        let ticket = sums.begin_write(file.buffered_fd(), blocks.clone())?;
        let buf: &WriteBuffer = buf;
        let span = (blocks.start - base) as usize..(blocks.end - base) as usize;
        // A payload of whole blocks may have been checksummed as it
        // arrived (`WriteBuffer::arrived`); its blocks are then exactly
        // the payload, which nothing has changed since.
        let (result, crcs) = match buf.arrived_crcs() {
            Some(crcs) => (io(buf), crcs.to_vec()),
            None => sums
                .checksummer()
                .write_with_crcs(&buf.buf[span], || io(buf)),
        };
        match result {
            Ok(done) => match ticket.finish(&crcs) {
                Ok(()) => Ok(done),
                Err(e) => {
                    // The blocks hold the new data and the store does not
                    // know it: left as they are, the stored checksums
                    // would be reported as corruption by the next READ.
                    sums.distrust();
                    Err(DataError::ChecksumStore(e))
                }
            },
            Err(e) => {
                if ticket.recompute().is_err() {
                    // Logged once per file, not once per WRITE.
                    sums.distrust();
                }
                Err(e)
            }
        }
    }

    /// For [`crate::DataPlane::write_without_blocking`]: whether a direct write of
    /// `len` bytes at `offset` may go through the ring as far as the
    /// checksums are concerned: always without integrity; with it, only
    /// whole 4 KiB blocks (nothing to read around the payload).
    pub(crate) fn ring_write_covers_blocks(
        &self,
        file: &DataFile,
        offset: u64,
        len: usize,
    ) -> bool {
        file.integrity().is_none()
            || (offset.is_multiple_of(BLOCK) && (len as u64).is_multiple_of(BLOCK))
    }

    /// Before a ring write of the whole blocks `io` (its exclusive range
    /// lock held): the intent log's ticket, if the file keeps checksums.
    /// `Err(None)` when that needs a blocking call (a region not yet in
    /// the intent log): the write takes the blocking path.
    pub(crate) fn ring_write_begin<'f>(
        &self,
        file: &'f DataFile,
        io: Range<u64>,
    ) -> Result<Option<WriteTicket<'f>>, Option<DataError>> {
        let Some(sums) = file.integrity() else {
            return Ok(None);
        };
        match sums.try_begin_write(file.buffered_fd(), io) {
            None => Err(None),
            Some(Ok(ticket)) => Ok(Some(ticket)),
            Some(Err(e)) => Err(Some(e.into())),
        }
    }

    /// The checksums of a ring write's `bytes`, computed before it is
    /// submitted, if the store checksums before writing
    /// ([`Order::Sequential`]); `None` when they are to be computed while
    /// the kernel writes (the default).
    pub(crate) fn ring_write_crcs_first(&self, file: &DataFile, bytes: &[u8]) -> Option<Vec<u32>> {
        let sums = file.integrity()?;
        (sums.checksummer().order() == Order::Sequential).then(|| {
            let mut crcs = Vec::new();
            dionfs_integrity::block_crcs(bytes, &mut crcs);
            crcs
        })
    }

    /// After the ring write `ticket` was taken for, whose checksums
    /// `crcs` were computed over the pool buffer while the kernel wrote
    /// it: stored if the write succeeded, else recomputed from the disk
    /// (as in [`Checksums::checked_write`]).
    pub(crate) fn ring_write_end(
        &self,
        file: &DataFile,
        ticket: WriteTicket<'_>,
        crcs: &[u32],
        succeeded: bool,
    ) -> Result<(), DataError> {
        if succeeded {
            // On failure the caller's guard distrusts the file's checksums.
            return ticket.finish(crcs).map_err(DataError::ChecksumStore);
        }
        if ticket.recompute().is_err() {
            if let Some(sums) = file.integrity() {
                sums.distrust();
            }
        }
        Ok(())
    }

    /// Checks the blocks of a READ's reply: `buf` holds file bytes from
    /// `io_start` (a block boundary), `filled` of them read, under the
    /// READ's range lock; `reply` is the file range the READ asked for.
    pub(crate) fn verify_read(
        &self,
        file: &DataFile,
        buf: &[u8],
        io_start: u64,
        filled: usize,
        reply: Range<u64>,
        before: ReadEpoch,
    ) -> Result<(), DataError> {
        let Some(sums) = file.integrity() else {
            return Ok(());
        };
        // A READ of 0 bytes read nothing (its `io_start` is its offset,
        // unaligned maybe): nothing to check.
        if reply.is_empty() {
            return Ok(());
        }
        let read_end = io_start + filled as u64;
        let start = block_floor(reply.start.max(io_start));
        let end = block_ceil(reply.end.min(read_end)).min(read_end);
        if start >= end {
            return Ok(());
        }
        debug_assert!(io_start.is_multiple_of(BLOCK));
        if sums.unverifiable() {
            // Stale, and rebuilding its checksums failed a moment ago: the
            // data would have been taken as it is (see `Rebuild::run`).
            return Ok(());
        }
        let data = &buf[(start - io_start) as usize..(end - io_start) as usize];
        match sums.verify(start / BLOCK, data)? {
            None => Ok(()),
            Some(m) => self.mismatch(file, sums, m, before),
        }
    }

    /// Taken by a READ before it reads its data, for [`Checksums::verify_read`].
    pub(crate) fn read_epoch(&self, file: &DataFile) -> ReadEpoch {
        ReadEpoch(file.integrity().map_or(0, FileSums::rebuilds_ended))
    }

    /// A block of a READ does not match its stored checksum. In a file
    /// changed behind the server's back that is no error: the READ is
    /// answered with what it read (a rebuild would take the data as it
    /// is), and the file's checksums are to be rebuilt by a job of their
    /// own ([`Rebuild`]), which READs do not wait for. Nor is it after a
    /// rebuild that ended since the READ read its data (`before`): the
    /// rebuild, which READs run beside, may have recorded a local change
    /// made after that read (the READ's data is older than the rebuilt
    /// checksums), and anything a rebuild finds it takes as the data
    /// anyway. Otherwise it is corruption.
    fn mismatch(
        &self,
        file: &DataFile,
        sums: &FileSums,
        m: dionfs_integrity::Mismatch,
        before: ReadEpoch,
    ) -> Result<(), DataError> {
        if sums.changed_behind_back(file.buffered_fd())? {
            sums.want_rebuild();
            tracing::debug!(file = %file.label(), block = m.block,
                "changed behind the server's back; answered unchecked until its checksums are rebuilt");
            return Ok(());
        }
        if sums.rebuilds_ended() != before.0 {
            tracing::debug!(file = %file.label(), block = m.block,
                "its checksums were rebuilt as it was read; answered as read");
            return Ok(());
        }
        Counters::bump(&self.counters.integrity_errors);
        let offset = m.block * BLOCK;
        tracing::error!(
            export = %file.export().map_or_else(|| "unknown".into(), |root| root.display().to_string()),
            file = %file.label(),
            block = m.block,
            offset,
            expected = format_args!("{:08x}", m.expected),
            found = format_args!("{:08x}", m.found),
            "data corruption: a block read does not match its CRC32C; answering NFS3ERR_IO"
        );
        Err(DataError::Corrupt {
            offset,
            expected: m.expected,
            found: m.found,
        })
    }

    /// The rebuild of `file`'s checksums its READs asked for, if there is
    /// one to start, the file's last rebuild ended long enough ago
    /// ([`REBUILD_DUTY`]) and fewer than [`MAX_REBUILDS`] of this
    /// export's run:
    /// for the caller to run on a thread of its own once the READ is
    /// answered ([`Rebuild::run`]). One atomic load when there is none,
    /// two and a clock read while a wanted one waits for its pace.
    pub(crate) fn rebuild_job(&self, file: &DataFile) -> Option<Rebuild> {
        let sums = file.integrity_arc()?;
        if !sums.rebuild_wanted() {
            return None;
        }
        let now = Instant::now();
        if !sums.rebuild_due(now) {
            return None;
        }
        if self.rebuilds_running.fetch_add(1, Ordering::AcqRel) >= MAX_REBUILDS {
            // Taken by a READ once one ends; its READs are answered
            // unchecked until then.
            self.rebuilds_running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        if !sums.claim_rebuild(now) {
            self.rebuilds_running.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Rebuild {
            sums: Arc::clone(sums),
            counters: Arc::clone(&self.counters),
            running: Arc::clone(&self.rebuilds_running),
            ran: false,
            #[cfg(test)]
            before_pass: None,
        })
    }

    /// The file range a buffered or `RWF_DONTCACHE` READ of `count` bytes
    /// at `offset` reads: whole blocks with integrity (to verify them),
    /// else exactly the request.
    pub(crate) fn cached_read_range(
        &self,
        file: &DataFile,
        offset: u64,
        count: usize,
    ) -> Range<u64> {
        let end = offset + count as u64;
        match file.integrity() {
            Some(_) if count > 0 => block_floor(offset)..block_ceil(end),
            _ => offset..end,
        }
    }

    /// Where a buffered or `RWF_DONTCACHE` WRITE puts its payload in its
    /// buffer: at `offset mod 4096` with integrity (room for the rest of
    /// its first block before it), else at 0.
    pub(crate) fn cached_payload_position(&self, file: &DataFile, offset: u64) -> usize {
        match file.integrity() {
            Some(_) => (offset % BLOCK) as usize,
            None => 0,
        }
    }

    /// Before a write of `buf` through the page cache: with integrity its
    /// payload moves to `offset mod 4096` ([`checked_write`] completes
    /// its first block in front of it); without, it stays where it was
    /// received (a direct-mode buffer holds it at the direct alignment, and
    /// moving it would copy it all for nothing: bench/run's IOR-hard
    /// records, 47008 bytes each).
    ///
    /// [`checked_write`]: Checksums::checked_write
    pub(crate) fn place_cached_payload(&self, file: &DataFile, buf: &mut WriteBuffer) {
        if file.integrity().is_some() {
            buf.move_payload_to(self.cached_payload_position(file, buf.offset));
        }
    }

    /// The range a write of `io` through the page cache locks: with
    /// integrity its whole blocks, whose checksums it computes from their
    /// final contents; without, exactly its bytes. The kernel keeps
    /// buffered writes to one page apart, and whatever must not run beside
    /// one locks whole pages or blocks (direct I/O, which flushes and
    /// invalidates whole pages; a read-modify-write; a read; a truncate),
    /// so it still overlaps every such write in its pages. Neighbouring
    /// misaligned records (IOR-hard's) then no longer wait for each other
    /// for the page they share.
    pub(crate) fn cached_write_lock(&self, file: &DataFile, io: Range<u64>) -> Range<u64> {
        match file.integrity() {
            Some(_) => file.lock_range(io),
            None => io,
        }
    }
}

/// Held across a ring write with checksums, from submission until its
/// checksums are settled ([`Checksums::ring_write_end`]): if the waiting
/// future is dropped first, the write still lands but its checksums are
/// never stored, so the file's stored checksums are no longer trusted
/// ([`FileSums::distrust`]) rather than reported as corrupt later.
pub(crate) struct UnsettledWrite<'f>(pub(crate) Option<&'f FileSums>);

impl UnsettledWrite<'_> {
    /// The write's checksums are settled.
    pub(crate) fn settled(mut self) {
        self.0 = None;
    }
}

impl Drop for UnsettledWrite<'_> {
    fn drop(&mut self) {
        if let Some(sums) = self.0 {
            sums.distrust();
        }
    }
}

/// Reads the bytes of the blocks `blocks` that the payload does not cover
/// (before and after it) into `buf` (byte 0 is file offset `base`), zeros
/// past the end of the file.
fn fill_partial_blocks(
    file: &DataFile,
    buf: &mut WriteBuffer,
    base: u64,
    blocks: &Range<u64>,
) -> Result<(), DataError> {
    let (start, end) = (buf.offset, buf.offset + buf.len as u64);
    let in_buf = |r: Range<u64>| (r.start - base) as usize..(r.end - base) as usize;
    for rest in [blocks.start..start, end..blocks.end] {
        if rest.is_empty() {
            continue;
        }
        let dst = &mut buf.buf[in_buf(rest.clone())];
        let mut done = 0;
        if rest.start >= file.cold_below() {
            done = read_cached_edge(file, dst, rest.start);
        }
        while done < dst.len() {
            match rustix::io::pread(
                file.buffered_fd(),
                &mut dst[done..],
                rest.start + done as u64,
            ) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        dst[done..].fill(0);
    }
    Ok(())
}

/// How long [`read_cached_edge`] waits for the inode lock.
const EDGE_WAIT: Duration = Duration::from_millis(1);

/// Reads the start of `dst` at `offset` from the page cache without
/// queueing on the inode's lock ([`read_without_queueing`]), unless the
/// page is not cached and holds data (a device read, which must block).
/// Returns the bytes read (0: read them with a blocking read).
///
/// A write of partial blocks (IOR-hard's 47008-byte records) reads the
/// neighbours' bytes of its first and last blocks while the neighbours'
/// own writes go through the page cache: reading them this way took
/// IOR-hard writes with checksums from 0.628x to 0.740x of the throughput
/// without, and from 1.447x to 1.292x the CPU (bench/run, 5 pairs each).
fn read_cached_edge(file: &DataFile, dst: &mut [u8], offset: u64) -> usize {
    read_without_queueing(file, dst, offset, EDGE_WAIT, || {
        !matches!(
            needs_device_read(file, block_floor(offset), BLOCK),
            Ok(false)
        )
    })
}

/// How many rebuilds of a file's checksums had ended when a READ read
/// its data ([`Checksums::read_epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadEpoch(u64);

/// A file whose checksums are rebuilt again and again (a large log a
/// local process appends to as clients read it: every append makes the
/// next READ's blocks mismatch) is rebuilt at most this often in time: a
/// rebuild that took `t` is followed by no other of the file for
/// `(REBUILD_DUTY - 1) * t` (at most [`REBUILD_PACE_MAX`]), its READs
/// answered unchecked meanwhile, whatever makes it want one again (a
/// failed rebuild too). Each rebuild reads the whole file: unpaced, a
/// 100 GB log appended to every second would be read from the device
/// without end.
pub const REBUILD_DUTY: u32 = 10;

/// The longest pace: a file of many TiB, or a pass stretched by a slow
/// device, is not left unchecked for hours after its next change.
pub const REBUILD_PACE_MAX: Duration = Duration::from_secs(600);

/// Rebuilds of checksums one export runs at once (each a pass over a
/// whole file); a file whose rebuild must wait is read unchecked, as
/// while it runs.
pub const MAX_REBUILDS: usize = 2;

/// A rebuild of a file's checksums from its data, asked for by a READ
/// that found the file changed behind the server's back
/// ([`Checksums::rebuild_job`], handed out with the READ's data). Run it
/// on a thread of its own after the reply: it reads the whole file.
/// Dropped without running, the rebuild is still wanted (the next READ
/// hands it out again).
#[must_use]
pub struct Rebuild {
    sums: Arc<FileSums>,
    counters: Arc<Counters>,
    running: Arc<AtomicUsize>,
    ran: bool,
    /// Runs once the rebuild holds the file, before its pass (tests).
    #[cfg(test)]
    pub(crate) before_pass: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Rebuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rebuild").field("sums", &self.sums).finish()
    }
}

impl Rebuild {
    /// Recomputes the checksums of `file` (the file the READ that handed
    /// this out read) from its data, holding its whole range shared: READs
    /// go on meanwhile, answered unchecked where they find a mismatch (as
    /// before the rebuild), while writes and truncates wait for it, so no
    /// server change races the pass. A READ used to run it itself,
    /// holding the file exclusively: every call on a 1 GiB file appended
    /// to locally waited 0.2 to 1.2 s after each append. Then paces the
    /// file's next rebuild ([`REBUILD_DUTY`]).
    pub fn run(mut self, file: &DataFile) {
        self.ran = true;
        let sums = &self.sums;
        if !file
            .integrity()
            .is_some_and(|own| std::ptr::eq(own, &**sums))
        {
            debug_assert!(false, "a rebuild run with another file");
            return;
        }
        let whole_file = file.locks.lock(0..u64::MAX, LockKind::Shared);
        if whole_file.waited() {
            Counters::bump(&self.counters.range_lock_waits);
        }
        let began = Instant::now();
        #[cfg(test)]
        if let Some(hook) = self.before_pass.take() {
            hook();
        }
        if !sums.is_stale() || sums.unverifiable() {
            // Rebuilt by an earlier job since the READ asked, or failed a
            // moment ago (retried after `REBUILD_RETRY` and the pace).
            return;
        }
        let rebuilt = sums.rebuild(file.buffered_fd());
        let pace = (began.elapsed() * (REBUILD_DUTY - 1)).min(REBUILD_PACE_MAX);
        sums.pace_rebuilds(Instant::now() + pace);
        match rebuilt {
            Ok(blocks) => {
                Counters::bump(&self.counters.integrity_rebuilds);
                tracing::info!(file = %file.label(), blocks,
                    "file changed behind the server's back: its checksums were rebuilt from its data");
            }
            Err(e) if dionfs_integrity::is_file_deleted(&e) => {
                tracing::info!(file = %file.label(),
                    "file deleted during the rebuild of its checksums: the rebuild stopped");
            }
            // Its READs are answered unchecked meanwhile, rather than
            // failing for want of room in the state directory. Tried again
            // by a READ after `REBUILD_RETRY` and the pace.
            Err(e) => tracing::warn!(file = %file.label(), error = %e,
                "cannot rebuild the checksums of a file whose checksums are out of date; \
                 its READs are answered unchecked for now (is the state directory's \
                 filesystem full?)"),
        }
    }
}

impl Drop for Rebuild {
    fn drop(&mut self) {
        self.sums.rebuild_released(self.ran);
        self.running.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::open_data_file;
    use crate::{DataPlane, Mode, ReadData, Stable};
    use dionfs_integrity::{FileKey, Order, Store};
    use std::fs::OpenOptions;
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;

    fn plane(mode: Mode) -> DataPlane {
        crate::testing::plane(mode, mode, 256 << 10, 4)
    }

    fn file_with_sums(store: &Arc<Store>, path: &std::path::Path, n: u8) -> DataFile {
        let file = file_without_sums(path);
        let key = FileKey {
            fs_id: 1,
            handle_type: 1,
            handle: vec![n; 8],
        };
        let sums = store.open_file(key, file.buffered_fd()).unwrap();
        file.with_integrity(sums)
    }

    fn file_without_sums(path: &std::path::Path) -> DataFile {
        open_data_file(path)
    }

    /// Writes `data` at `offset`, its payload arriving in pieces that end
    /// inside blocks (as from a socket), each reported to the buffer.
    fn write(plane: &DataPlane, file: &DataFile, offset: u64, data: &[u8], stable: Stable) {
        let buf = plane.write_pool().get_blocking().unwrap();
        let mut wb = plane.write_buffer(file, buf, offset, data.len()).unwrap();
        let mut received = 0;
        for piece in data.chunks(5000) {
            wb.payload_mut()[received..received + piece.len()].copy_from_slice(piece);
            received += piece.len();
            wb.arrived(received);
        }
        plane.write(file, wb, stable).unwrap();
    }

    fn read(
        plane: &DataPlane,
        file: &DataFile,
        offset: u64,
        count: u32,
    ) -> Result<Vec<u8>, DataError> {
        let buf = plane.read_pool().get_blocking().unwrap();
        plane
            .read(file, buf, offset, count)
            .map(|r| r.data().to_vec())
    }

    /// Bit rot: bytes change on disk while the file's mtime and size do
    /// not (a write followed by restoring the mtime stands for it here).
    fn rot(path: &std::path::Path, offset: u64) {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let before = f.metadata().unwrap().modified().unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, offset).unwrap();
        f.write_all_at(&[b[0] ^ 0x5a], offset).unwrap();
        f.set_modified(before).unwrap();
        f.sync_all().unwrap();
    }

    fn read_data(plane: &DataPlane, file: &DataFile, offset: u64, count: u32) -> ReadData {
        let buf = plane.read_pool().get_blocking().unwrap();
        plane.read(file, buf, offset, count).unwrap()
    }

    #[test]
    fn a_file_changed_behind_the_back_is_read_at_once_and_during_its_rebuild() {
        // A READ that found a file changed behind the server's back
        // rebuilt its checksums itself, holding the whole file exclusively:
        // it and every other call on the file waited for a pass over all
        // of it (a 1 GiB log appended to locally held each READ of its
        // tail 0.2 to 1.2 s).
        use std::sync::mpsc;
        use std::time::Duration;

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        for (n, mode) in [(7, Mode::Direct), (8, Mode::Buffered)] {
            let path = dir.path().join(format!("changed{n}"));
            let file = file_with_sums(&store, &path, n);
            let plane = plane(mode);
            let mut want = vec![1u8; 8 * BLOCK as usize];
            write(&plane, &file, 0, &want, Stable::FileSync);
            std::thread::sleep(Duration::from_millis(5));
            let local = OpenOptions::new().write(true).open(&path).unwrap();
            local.write_all_at(&[9u8; 100], 2 * BLOCK + 7).unwrap();
            want[2 * BLOCK as usize + 7..][..100].fill(9);
            // Answered with what the disk holds; it hands out the rebuild,
            // once.
            let mut first = read_data(&plane, &file, 0, 8 * BLOCK as u32);
            assert_eq!(first.data(), &want[..], "{mode:?}");
            let mut job = first.take_rebuild().expect("a rebuild to run");
            let mut second = read_data(&plane, &file, 0, 8 * BLOCK as u32);
            assert_eq!(second.data(), &want[..]);
            assert!(second.take_rebuild().is_none(), "handed out twice");
            // READs go on while the rebuild holds the file.
            let (holding_tx, holding) = mpsc::channel();
            let (release, release_rx) = mpsc::channel::<()>();
            job.before_pass = Some(Box::new(move || {
                holding_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(Duration::from_secs(30));
            }));
            std::thread::scope(|scope| {
                scope.spawn(|| job.run(&file));
                holding.recv_timeout(Duration::from_secs(10)).unwrap();
                let (done_tx, done) = mpsc::channel();
                let (plane, file) = (&plane, &file);
                scope.spawn(move || {
                    let got = read_data(plane, file, BLOCK, 3 * BLOCK as u32)
                        .data()
                        .to_vec();
                    done_tx.send(got).unwrap();
                });
                let during = done.recv_timeout(Duration::from_secs(10));
                release.send(()).unwrap();
                assert_eq!(
                    during.expect("a READ waited for the rebuild"),
                    &want[BLOCK as usize..4 * BLOCK as usize]
                );
            });
            let counts = plane.counters().snapshot();
            assert_eq!((counts.integrity_rebuilds, counts.integrity_errors), (1, 0));
            // Trusted again: rot is an error.
            rot(&path, 5 * BLOCK + 3);
            assert!(matches!(
                read(&plane, &file, 4 * BLOCK, 2 * BLOCK as u32),
                Err(DataError::Corrupt { .. })
            ));
            assert_eq!(plane.counters().snapshot().integrity_errors, 1);
        }
    }

    #[test]
    fn a_file_rebuilt_again_and_again_is_rebuilt_a_tenth_of_the_time() {
        // A large log appended to locally as clients read it: every append
        // makes the next READ find a mismatch, and each rebuild reads the
        // whole file. Unpaced, the device read it back without end.
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let path = dir.path().join("log");
        let file = file_with_sums(&store, &path, 4);
        let plane = plane(Mode::Buffered);
        write(&plane, &file, 0, &[2u8; 5000], Stable::FileSync);
        let local = OpenOptions::new().append(true).open(&path).unwrap();
        let append = || {
            use std::io::Write;
            std::thread::sleep(Duration::from_millis(5));
            (&local).write_all(b"line\n").unwrap();
        };
        append();
        let mut first = read_data(&plane, &file, 0, 8192);
        let mut job = first.take_rebuild().expect("the first rebuild at once");
        // A pass of at least 100 ms...
        job.before_pass = Some(Box::new(|| std::thread::sleep(Duration::from_millis(100))));
        job.run(&file);
        let ended = Instant::now();
        append();
        // ...and none for nine times as long: the READs are answered.
        let mut waited = None;
        while waited.is_none() {
            let mut r = read_data(&plane, &file, 0, 8192);
            assert_eq!(r.len(), 5000 + 2 * 5);
            if let Some(job) = r.take_rebuild() {
                waited = Some(ended.elapsed());
                job.run(&file);
            } else {
                assert!(
                    ended.elapsed() < Duration::from_secs(60),
                    "never rebuilt again"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let waited = waited.unwrap();
        assert!(
            waited >= Duration::from_millis(890),
            "rebuilt again after {waited:?}"
        );
        // Nine times the pass, not some fixed delay (the pass took 100 ms
        // and a little more).
        assert!(
            waited < Duration::from_secs(20),
            "rebuilt again after {waited:?}"
        );
        assert_eq!(plane.sums().rebuilds_running.load(Ordering::Relaxed), 0);
        assert_eq!(plane.counters().snapshot().integrity_rebuilds, 2);
        assert_eq!(plane.counters().snapshot().integrity_errors, 0);
    }

    #[test]
    fn a_read_older_than_a_rebuild_that_ended_as_it_ran_is_no_corruption() {
        // READs run beside a rebuild now (it holds the file shared). A
        // READ that read the data, then saw a local write and a whole
        // rebuild end before it checked its blocks, compares old data with
        // the new checksums: the file is trusted again by then, so it
        // looked like rot (review of 79b8762).
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let path = dir.path().join("f");
        let file = file_with_sums(&store, &path, 3);
        let plane = plane(Mode::Buffered);
        let old = vec![4u8; 2 * BLOCK as usize];
        write(&plane, &file, 0, &old, Stable::FileSync);
        // The READ reads `old`...
        let before = plane.sums().read_epoch(&file);
        // ...a local write lands and a rebuild runs to its end...
        std::thread::sleep(std::time::Duration::from_millis(5));
        let local = OpenOptions::new().write(true).open(&path).unwrap();
        local.write_all_at(b"local", BLOCK + 1).unwrap();
        let mut other = read_data(&plane, &file, 0, 2 * BLOCK as u32);
        other.take_rebuild().expect("a rebuild").run(&file);
        assert!(!file.integrity().unwrap().is_stale());
        // ...and then the READ checks its blocks.
        let len = old.len();
        assert!(plane
            .sums()
            .verify_read(&file, &old, 0, len, 0..len as u64, before)
            .is_ok());
        assert_eq!(plane.counters().snapshot().integrity_errors, 0);
        // The same bytes read after the rebuild are rot.
        let now = plane.sums().read_epoch(&file);
        assert!(matches!(
            plane.sums().verify_read(&file, &old, 0, len, 0..len as u64, now),
            Err(DataError::Corrupt { offset, .. }) if offset == BLOCK
        ));
    }

    #[test]
    fn an_export_runs_at_most_two_rebuilds_and_one_given_up_is_handed_out_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let plane = plane(Mode::Buffered);
        let files: Vec<(std::path::PathBuf, DataFile)> = (0..3u8)
            .map(|n| {
                let path = dir.path().join(format!("f{n}"));
                let file = file_with_sums(&store, &path, 10 + n);
                write(&plane, &file, 0, &[n; 100], Stable::FileSync);
                (path, file)
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(5));
        for (path, _) in &files {
            let local = OpenOptions::new().write(true).open(path).unwrap();
            local.write_all_at(b"local", 10).unwrap();
        }
        let mut jobs: Vec<Option<Rebuild>> = files
            .iter()
            .map(|(_, f)| read_data(&plane, f, 0, 100).take_rebuild())
            .collect();
        assert_eq!(
            jobs.iter().map(Option::is_some).collect::<Vec<_>>(),
            [true, true, false]
        );
        // Given up (no thread for it): the file still wants it.
        drop(jobs[0].take());
        let third = read_data(&plane, &files[2].1, 0, 100).take_rebuild();
        assert!(
            third.is_some(),
            "a slot freed, the waiting file's READ hands its rebuild out"
        );
        assert!(
            read_data(&plane, &files[0].1, 0, 100)
                .take_rebuild()
                .is_none(),
            "no slot"
        );
        third.unwrap().run(&files[2].1);
        let again = read_data(&plane, &files[0].1, 0, 100).take_rebuild();
        again
            .expect("the rebuild given up is handed out again")
            .run(&files[0].1);
        jobs[1].take().unwrap().run(&files[1].1);
        assert_eq!(plane.counters().snapshot().integrity_rebuilds, 3);
        assert_eq!(plane.sums().rebuilds_running.load(Ordering::Relaxed), 0);
        for (_, f) in &files {
            assert!(read_data(&plane, f, 0, 100).take_rebuild().is_none());
            assert!(!f.integrity().unwrap().is_stale());
        }
    }

    /// A small misaligned write through the page cache, while another
    /// write holds the bytes just before it in the same 4 KiB block (a
    /// neighbouring IOR-hard record): without integrity it locks only its
    /// own bytes and goes ahead; with integrity it computes the whole
    /// block's checksum, so it waits for the neighbour. A direct write of
    /// the whole block waits in both cases.
    #[test]
    fn page_cache_writes_lock_their_bytes_unless_checksummed() {
        use crate::range_lock::LockKind;
        use std::sync::mpsc;
        use std::time::Duration;

        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let plain = Arc::new(file_without_sums(&dir.path().join("plain")));
        let summed = Arc::new(file_with_sums(&store, &dir.path().join("summed"), 2));
        let plane = Arc::new(plane(Mode::Direct));
        for (file, waits) in [(&plain, false), (&summed, true)] {
            let what = if waits { "with integrity" } else { "without" };
            let (done_tx, done) = mpsc::channel();
            // The neighbour's bytes 0..100 of block 0, held.
            let neighbour = file.locks.lock(0..100, LockKind::Exclusive);
            let (p, f) = (Arc::clone(&plane), Arc::clone(file));
            let writer = std::thread::spawn(move || {
                write(&p, &f, 100, &[7u8; 1000], Stable::Unstable);
                done_tx.send(()).unwrap();
            });
            let wait = Duration::from_millis(if waits { 300 } else { 10_000 });
            assert_eq!(done.recv_timeout(wait).is_ok(), !waits, "{what}");
            drop(neighbour);
            writer.join().unwrap();
            assert_eq!(
                read(&plane, file, 100, 1000).unwrap(),
                vec![7u8; 1000],
                "{what}"
            );

            // Whole-block I/O still waits for a write of part of the block.
            let part = file.locks.lock(
                plane.sums().cached_write_lock(file, 200..300),
                LockKind::Exclusive,
            );
            assert!(
                file.locks
                    .try_lock(file.lock_range(0..4096), LockKind::Shared)
                    .is_none(),
                "{what}"
            );
            drop(part);
        }
    }

    /// The neighbours' bytes of a write's partial blocks, read from the
    /// page cache without queueing on the inode lock: whole, up to the end
    /// of the file, nothing past it; a page only on disk may be left to the
    /// blocking read, but what comes back is always the file's bytes.
    #[test]
    fn edge_bytes_are_read_from_the_page_cache_without_queueing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = file_without_sums(&path);
        let data: Vec<u8> = (0..3 * BLOCK as usize + 100)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&data, 0).unwrap();
        let end = data.len() as u64;

        let mut dst = vec![0u8; 1000];
        assert_eq!(read_cached_edge(&file, &mut dst, 10), 1000);
        assert_eq!(dst[..], data[10..1010]);
        let mut dst = vec![0xffu8; 300];
        assert_eq!(read_cached_edge(&file, &mut dst, end - 100), 100);
        assert_eq!(dst[..100], data[data.len() - 100..]);
        assert_eq!(read_cached_edge(&file, &mut dst, end + 10), 0);

        f.sync_all().unwrap();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let mut dst = vec![0u8; 500];
        let at = BLOCK as usize + 3;
        let n = read_cached_edge(&file, &mut dst, at as u64);
        assert!(n == 0 || n == dst.len(), "{n}");
        assert_eq!(dst[..n], data[at..at + n]);
    }

    /// `Order::Arrival` checksums a payload of whole blocks as its pieces
    /// arrive; a misaligned one (whose edge blocks need the file's bytes),
    /// a file without checksums and the other orders leave it all to the
    /// write.
    #[test]
    fn only_payloads_of_whole_blocks_are_checksummed_as_they_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let plane = plane(Mode::Direct);
        let data: Vec<u8> = (0..64 << 10).map(|i| (i % 253) as u8).collect();
        let mut want = Vec::new();
        dionfs_integrity::block_crcs(&data, &mut want);
        let buffer = |file: &DataFile, offset: u64, len: usize| {
            let buf = plane.write_pool().get_blocking().unwrap();
            let mut wb = plane.write_buffer(file, buf, offset, len).unwrap();
            wb.payload_mut().copy_from_slice(&data[..len]);
            wb
        };
        let arrival = Store::open(&dir.path().join("a"), 64, Order::Arrival).unwrap();
        let file = file_with_sums(&arrival, &dir.path().join("f"), 1);
        let mut wb = buffer(&file, 4096 * 5, data.len());
        assert_eq!(wb.receive_piece(), dionfs_integrity::ARRIVAL_PIECE);
        wb.arrived(10_000);
        assert_eq!(wb.arrived_crcs(), None);
        wb.arrived(data.len());
        assert_eq!(wb.arrived_crcs(), Some(&want[..]));
        for (offset, len) in [(100, 4096), (0, 5000), (4096, 100)] {
            let mut wb = buffer(&file, offset, len);
            assert_eq!(wb.receive_piece(), len, "{offset} {len}");
            wb.arrived(len);
            assert_eq!(wb.arrived_crcs(), None, "{offset} {len}");
        }
        let overlapped = Store::open(&dir.path().join("o"), 64, Order::Overlapped).unwrap();
        let plain = file_without_sums(&dir.path().join("p"));
        for file in [file_with_sums(&overlapped, &dir.path().join("g"), 2), plain] {
            let mut wb = buffer(&file, 0, data.len());
            assert_eq!(wb.receive_piece(), data.len());
            wb.arrived(data.len());
            assert_eq!(wb.arrived_crcs(), None);
        }
    }

    /// Every mode, with checksums computed as payloads arrive (those of
    /// whole blocks) and while the data is written.
    #[test]
    fn every_mode_keeps_checksums_and_catches_rot_and_local_changes() {
        for (mode, order) in [Mode::Buffered, Mode::DontCache, Mode::Direct]
            .into_iter()
            .flat_map(|m| [(m, Order::Arrival), (m, Order::Overlapped)])
        {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&dir.path().join("integrity"), 64, order).unwrap();
            let path = dir.path().join("f");
            let file = file_with_sums(&store, &path, 1);
            let plane = plane(mode);
            let mut model = Vec::new();
            let writes: [(u64, usize); 9] = [
                (100, 200),
                (4000, 5000),
                (65536 + 1, 511),
                (0, 4096),
                (8 * 4096, 96 << 10),
                (20000, 200 << 10),
                // Partial blocks completed from the file's own bytes, in
                // two blocks and in one.
                (3 * 4096 + 10, 2 * 4096),
                (7 * 4096 + 100, 50),
                (3, 1),
            ];
            for (i, (off, len)) in writes.into_iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|j| ((i * 7 + j) % 251) as u8 + 1).collect();
                write(
                    &plane,
                    &file,
                    off,
                    &data,
                    [Stable::Unstable, Stable::FileSync][i % 2],
                );
                let end = off as usize + len;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
                for (roff, rcount) in [(0u64, 300_000u32), (off, len as u32), (off + 1, 3)] {
                    let got = read(&plane, &file, roff, rcount).unwrap();
                    let want_end = (roff as usize + rcount as usize).min(model.len());
                    let want = model.get(roff as usize..want_end).unwrap_or(&[]);
                    assert_eq!(got, &want[..want.len().min(256 << 10)], "{mode:?}");
                }
            }
            plane.commit(&file, 0, 0).unwrap();
            // Rot in block 5: READs touching it fail, others do not.
            rot(&path, 5 * 4096 + 17);
            if mode != Mode::Direct {
                dionfs_sys::io::fadvise_dontneed(file.buffered_fd(), 0, 0).unwrap();
            }
            let err = read(&plane, &file, 5 * 4096 + 4000, 10).unwrap_err();
            assert!(
                matches!(err, DataError::Corrupt { offset, .. } if offset == 5 * 4096),
                "{mode:?}: {err:?}"
            );
            assert_eq!(err.errno(), libc::EIO);
            assert!(read(&plane, &file, 0, 4096 * 5).is_ok());
            assert_eq!(plane.snapshot().integrity_errors, 1);
            // A local write (mtime moves): rebuilt, not reported.
            std::thread::sleep(std::time::Duration::from_millis(20));
            let f = OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(b"local!", 5 * 4096 + 100).unwrap();
            drop(f);
            let mut got = read_data(&plane, &file, 5 * 4096 + 100, 6);
            assert_eq!(got.data(), b"local!");
            got.take_rebuild().expect("a rebuild").run(&file);
            assert_eq!(plane.snapshot().integrity_rebuilds, 1, "{mode:?}");
            assert_eq!(plane.snapshot().integrity_errors, 1);
            // Truncate into a block, extend, read the zeros back.
            plane.truncate(&file, 5000).unwrap();
            plane.truncate(&file, 70000).unwrap();
            let got = read(&plane, &file, 0, 70000).unwrap();
            assert_eq!(got.len(), 70000);
            assert!(got[5000..].iter().all(|&b| b == 0));
            assert_eq!(plane.snapshot().integrity_rebuilds, 1);
            assert_eq!(plane.snapshot().direct_einval, 0);
        }
    }
}
