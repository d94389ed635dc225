//! Copying a range of one file into another, or into itself (NFSv4.2
//! COPY and CLONE, RFC 7862): [`copy`] with `copy_file_range` (XFS and
//! btrfs share extents where they can), at most [`COPY_MAX`] bytes a
//! call, and [`clone_range`] with `FICLONERANGE`.
//!
//! Locks: the source range shared, the destination range exclusive. Two
//! files are locked in the order of their inodes (device, inode number),
//! so two copies in opposite directions cannot each hold the lock the
//! other waits for; the two ranges of one file are one request
//! ([`crate::range_lock::RangeLocks::lock_both`]), and overlapping ranges
//! of one file are refused ([`DataError::InvalidRange`]).
//!
//! Checksums of the destination: its blocks are logged in the intent log
//! before the copy, as for a write. Afterwards, if both files are in one
//! store, the source's checksums are trusted and the two offsets are
//! congruent modulo a block, each destination block the copy filled
//! whole takes the stored checksum of its source block, without a read
//! (a corrupt source block stays detectable in the copy), and the partial
//! edge blocks are recomputed from disk
//! ([`WriteTicket::copy_sums`](dionfs_integrity::WriteTicket::copy_sums)).
//! Otherwise every block of the destination range is recomputed from
//! disk.

use std::io;
use std::ops::Range;
use std::os::fd::BorrowedFd;

use dionfs_integrity::{block_ceil, block_floor, WriteTicket, BLOCK};

use crate::align::MAX_FILE_OFFSET;
use crate::counters::Counters;
use crate::file::DataFile;
use crate::paths::Paths;
use crate::range_lock::{LockKind, RangeGuard};
use crate::DataError;

/// The most a COPY copies in one call (knfsd's bound in
/// `nfsd_copy_file_range`): a short count tells the client to go on from
/// where it stopped, and no call holds its locks for long.
pub const COPY_MAX: u64 = 4 << 20;

/// Bytes a copy between two filesystems moves at a time (read, then
/// write), where `copy_file_range` refuses.
const BOUNCE: usize = 1 << 20;

/// See [`crate::DataPlane::copy`].
pub(crate) fn copy(
    paths: &Paths,
    src: &DataFile,
    src_offset: u64,
    dst: &DataFile,
    dst_offset: u64,
    len: u64,
) -> Result<u64, DataError> {
    let want = len.min(COPY_MAX);
    if want == 0 {
        return Ok(0);
    }
    if dst_offset
        .checked_add(want)
        .is_none_or(|end| end > MAX_FILE_OFFSET)
    {
        return Err(DataError::FileTooBig);
    }
    // What the source holds from `src_offset` (it may grow meanwhile, but
    // not shrink once its range is locked: a truncate locks it all).
    let n = want.min(src.size()?.saturating_sub(src_offset));
    if n == 0 {
        return Ok(0);
    }
    let source = src_offset..src_offset + n;
    let target = dst_offset..dst_offset + n;
    refuse_overlap(src, &source, dst, &target)?;
    let _locks = lock_pair(paths, src, source, dst, target);
    let n = n.min(src.size()?.saturating_sub(src_offset));
    if n == 0 {
        return Ok(0);
    }
    let target = dst_offset..dst_offset + n;
    dst.readahead.invalidate(target.clone());
    let claim = dst.size.begin_write(dst.buffered_fd(), target.end)?;
    let ticket = begin_sums(dst, &target)?;
    let copied = copy_bytes(
        src.buffered_fd(),
        src_offset,
        dst.buffered_fd(),
        dst_offset,
        n,
    );
    let filled = *copied.as_ref().unwrap_or(&0);
    if let Some(ticket) = ticket {
        settle_sums(src, src_offset, dst, dst_offset, filled, ticket)?;
    }
    match copied {
        Ok(copied) => {
            if copied == n {
                claim.succeeded();
            }
            if copied > 0 {
                dst.wrote_unsynced();
            }
            Ok(copied)
        }
        Err(e) => {
            paths.note_write_failure();
            Err(e.into())
        }
    }
}

/// See [`crate::DataPlane::clone_range`].
pub(crate) fn clone_range(
    paths: &Paths,
    src: &DataFile,
    src_offset: u64,
    dst: &DataFile,
    dst_offset: u64,
    len: u64,
) -> Result<(), DataError> {
    let align = clone_alignment(dst)?;
    if !src_offset.is_multiple_of(align) || !dst_offset.is_multiple_of(align) {
        return Err(DataError::InvalidRange(
            "CLONE offsets not aligned to the block size",
        ));
    }
    let size = src.size()?;
    let n = clone_length(src_offset, len, size, align)?;
    if n == 0 {
        return Ok(());
    }
    if dst_offset
        .checked_add(n)
        .is_none_or(|end| end > MAX_FILE_OFFSET)
    {
        return Err(DataError::FileTooBig);
    }
    let source = src_offset..src_offset + n;
    let target = dst_offset..dst_offset + n;
    refuse_overlap(src, &source, dst, &target)?;
    let _locks = lock_pair(paths, src, source, dst, target.clone());
    // The source may have changed size before its range was locked.
    let now = src.size()?;
    if now != size && clone_length(src_offset, n, now, align)? != n {
        return Err(DataError::InvalidRange("CLONE source changed size"));
    }
    dst.readahead.invalidate(target.clone());
    let claim = dst.size.begin_write(dst.buffered_fd(), target.end)?;
    let ticket = begin_sums(dst, &target)?;
    let cloned = dionfs_sys::clone::clone_range(
        src.buffered_fd(),
        src_offset,
        dst.buffered_fd(),
        dst_offset,
        n,
    );
    if let Some(ticket) = ticket {
        let filled = if cloned.is_ok() { n } else { 0 };
        settle_sums(src, src_offset, dst, dst_offset, filled, ticket)?;
    }
    match cloned {
        Ok(()) => {
            claim.succeeded();
            dst.wrote_unsynced();
            Ok(())
        }
        Err(e) => {
            Counters::bump(&paths.counters.errors);
            Err(e.into())
        }
    }
}

/// The alignment a clone's offsets need: the destination filesystem's
/// block size, and with checksums at least a checksum block (every block
/// of a clone then takes its source's checksum).
fn clone_alignment(dst: &DataFile) -> Result<u64, DataError> {
    let fs_block = rustix::fs::fstatvfs(dst.buffered_fd())?.f_bsize.max(1);
    let sums_block = if dst.integrity().is_some() { BLOCK } else { 1 };
    Ok(fs_block.max(sums_block))
}

/// The bytes a clone of `len` bytes (0: to the end) at `offset` of a
/// source of `size` bytes covers: within the source, and a whole number
/// of `align` blocks unless it ends at the source's end (RFC 7862 section
/// 15.13.3; FICLONERANGE's rule as well).
fn clone_length(offset: u64, len: u64, size: u64, align: u64) -> Result<u64, DataError> {
    if offset > size {
        return Err(DataError::InvalidRange("CLONE from past the source's end"));
    }
    let n = if len == 0 { size - offset } else { len };
    if n > size - offset {
        return Err(DataError::InvalidRange("CLONE past the source's end"));
    }
    if !n.is_multiple_of(align) && offset + n != size {
        return Err(DataError::InvalidRange(
            "CLONE length not aligned to the block size",
        ));
    }
    Ok(n)
}

/// Refuses a copy between overlapping ranges of one file.
fn refuse_overlap(
    src: &DataFile,
    source: &Range<u64>,
    dst: &DataFile,
    target: &Range<u64>,
) -> Result<(), DataError> {
    let overlap = source.start < target.end && target.start < source.end;
    if src.identity() == dst.identity() && overlap {
        return Err(DataError::InvalidRange(
            "source and destination ranges of one file overlap",
        ));
    }
    Ok(())
}

/// The locks of a copy: `source` of `src` shared and `target` of `dst`
/// exclusive, see the module documentation for the order.
fn lock_pair<'f>(
    paths: &Paths,
    src: &'f DataFile,
    source: Range<u64>,
    dst: &'f DataFile,
    target: Range<u64>,
) -> [Option<RangeGuard<'f>>; 2] {
    let source = (src.lock_range(source), LockKind::Shared);
    let target = (dst.lock_range(target), LockKind::Exclusive);
    if std::ptr::eq(src, dst) {
        let guard = src.locks.lock_both(source, target);
        if guard.waited() {
            Counters::bump(&paths.counters.range_lock_waits);
        }
        return [Some(guard), None];
    }
    let rank = |f: &DataFile| (f.identity(), f as *const DataFile as usize);
    let lock = |f: &'f DataFile, (range, kind)| Some(paths.lock_exact(f, range, kind));
    if rank(src) < rank(dst) {
        let first = lock(src, source);
        [first, lock(dst, target)]
    } else {
        let first = lock(dst, target);
        [first, lock(src, source)]
    }
}

/// The intent log's ticket for the destination blocks of `target`, if the
/// destination keeps checksums.
fn begin_sums<'f>(
    dst: &'f DataFile,
    target: &Range<u64>,
) -> Result<Option<WriteTicket<'f>>, DataError> {
    let Some(sums) = dst.integrity() else {
        return Ok(None);
    };
    let blocks = block_floor(target.start)..block_ceil(target.end);
    Ok(Some(sums.begin_write(dst.buffered_fd(), blocks)?))
}

/// After a copy of `filled` bytes (0 if it failed): the destination's
/// checksums, copied or recomputed (see the module documentation). A
/// failure to store them distrusts the file's checksums.
fn settle_sums(
    src: &DataFile,
    src_offset: u64,
    dst: &DataFile,
    dst_offset: u64,
    filled: u64,
    ticket: WriteTicket<'_>,
) -> Result<(), DataError> {
    let Some(sums) = dst.integrity() else {
        return Ok(());
    };
    let congruent = src_offset % BLOCK == dst_offset % BLOCK;
    let whole = block_ceil(dst_offset) / BLOCK..block_floor(dst_offset + filled) / BLOCK;
    let settled = match src.integrity() {
        Some(from) if filled > 0 && congruent && sums.can_copy_sums_from(from) => {
            // The source block of destination block `whole.start`.
            let src_first = (src_offset + (whole.start * BLOCK - dst_offset)) / BLOCK;
            ticket.copy_sums(from, src_first, whole)
        }
        _ => ticket.recompute(),
    };
    settled.map_err(|e| {
        sums.distrust();
        DataError::ChecksumStore(e)
    })
}

/// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`
/// with `copy_file_range`, or through a bounded buffer where the kernel
/// cannot (two filesystems). Returns the bytes copied, fewer only at the
/// source's end; an error after some bytes were copied returns them (the
/// client's next call gets the error).
fn copy_bytes(
    src: BorrowedFd<'_>,
    mut src_offset: u64,
    dst: BorrowedFd<'_>,
    mut dst_offset: u64,
    len: u64,
) -> io::Result<u64> {
    let mut done = 0u64;
    while done < len {
        let want = (len - done) as usize;
        match rustix::fs::copy_file_range(
            src,
            Some(&mut src_offset),
            dst,
            Some(&mut dst_offset),
            want,
        ) {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::XDEV | rustix::io::Errno::OPNOTSUPP) if done == 0 => {
                return bounce(src, src_offset, dst, dst_offset, len);
            }
            Err(_) if done > 0 => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// [`copy_bytes`] by reading and writing, [`BOUNCE`] bytes at a time.
fn bounce(
    src: BorrowedFd<'_>,
    src_offset: u64,
    dst: BorrowedFd<'_>,
    dst_offset: u64,
    len: u64,
) -> io::Result<u64> {
    let mut buf = vec![0u8; BOUNCE.min(len as usize)];
    let mut done = 0u64;
    while done < len {
        let want = ((len - done) as usize).min(buf.len());
        let got = match rustix::io::pread(src, &mut buf[..want], src_offset + done) {
            Ok(0) => break,
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) if done > 0 => break,
            Err(e) => return Err(e.into()),
        };
        let mut written = 0;
        while written < got {
            match rustix::io::pwrite(dst, &buf[written..got], dst_offset + done + written as u64) {
                Ok(0) => return Ok(done + written as u64),
                Ok(n) => written += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) if done + (written as u64) > 0 => return Ok(done + written as u64),
                Err(e) => return Err(e.into()),
            }
        }
        done += got as u64;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{open_data_file, plane};
    use crate::Mode;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn copies_in_opposite_directions_and_within_files_do_not_deadlock() {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(open_data_file(&dir.path().join("a")));
        let b = Arc::new(open_data_file(&dir.path().join("b")));
        for f in [&a, &b] {
            rustix::fs::ftruncate(f.buffered_fd(), 1 << 20).unwrap();
        }
        let plane = Arc::new(plane(Mode::Buffered, Mode::Buffered, 64 << 10, 2));
        let deadline = Instant::now() + Duration::from_secs(60);
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (a, b, plane) = (a.clone(), b.clone(), plane.clone());
                std::thread::spawn(move || {
                    let (from, to) = if t % 2 == 0 { (&a, &b) } else { (&b, &a) };
                    for i in 0..200u64 {
                        let off = (i * 4096 * 7 + t * 1000) % (512 << 10);
                        plane.copy(from, off, to, off + 4096, 8192).unwrap();
                        plane.copy(to, off, to, off + (256 << 10), 8192).unwrap();
                        assert!(Instant::now() < deadline, "too slow: a deadlock?");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(a.locks.is_empty() && b.locks.is_empty());
    }

    #[test]
    fn clone_lengths_end_at_the_source_or_on_a_block() {
        assert_eq!(clone_length(0, 0, 10_000, 4096).unwrap(), 10_000);
        assert_eq!(clone_length(4096, 0, 10_000, 4096).unwrap(), 5904);
        assert_eq!(clone_length(0, 8192, 10_000, 4096).unwrap(), 8192);
        assert_eq!(clone_length(10_000, 0, 10_000, 4096).unwrap(), 0);
        for (offset, len) in [(0, 100), (0, 12288), (10_001, 0), (8192, 4096)] {
            assert!(
                matches!(
                    clone_length(offset, len, 10_000, 4096),
                    Err(DataError::InvalidRange(_))
                ),
                "{offset} {len}"
            );
        }
    }
}
