//! A file's space (NFSv4.2, RFC 7862): where its data and holes are
//! ([`seek`], SEEK), reserving blocks ([`allocate`], ALLOCATE) and freeing
//! them ([`deallocate`], DEALLOCATE). Each takes the range locks WRITE and
//! truncate take, and keeps the file's checksums exact:
//! - SEEK reads nothing and changes nothing: the range from its offset to
//!   the end, shared, so no write extends or fills it meanwhile.
//! - ALLOCATE changes no byte a client reads, but the version (size, mtime)
//!   the integrity store watches: it runs inside
//!   [`FileSums::server_change`](dionfs_integrity::FileSums::server_change),
//!   so the move is taken as the server's own. Blocks it adds past the
//!   end have no entries in the store, which means zeros.
//! - DEALLOCATE logs the blocks it covers in the intent log
//!   ([`FileSums::begin_write`](dionfs_integrity::FileSums::begin_write)),
//!   punches, then gives the blocks it freed whole the zero-block value
//!   without reading them and recomputes its partial edge blocks from disk
//!   ([`WriteTicket::zeroed`](dionfs_integrity::WriteTicket::zeroed)).

use std::io;

use dionfs_integrity::{block_ceil, block_floor, BLOCK};
use rustix::fs::{FallocateFlags, SeekFrom};

use crate::align::MAX_FILE_OFFSET;
use crate::counters::Counters;
use crate::file::DataFile;
use crate::paths::Paths;
use crate::range_lock::LockKind;
use crate::size::fstat_size;
use crate::DataError;

/// What a SEEK looks for (`data_content4`: `NFS4_CONTENT_DATA` or
/// `NFS4_CONTENT_HOLE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seek {
    /// The next byte that holds data (`SEEK_DATA`).
    Data,
    /// The next byte in a hole (`SEEK_HOLE`); the end of the file counts
    /// as one.
    Hole,
}

/// See [`crate::DataPlane::seek`].
pub(crate) fn seek(
    paths: &Paths,
    file: &DataFile,
    offset: u64,
    what: Seek,
) -> Result<Option<u64>, DataError> {
    let from = file
        .lock_range(offset.min(MAX_FILE_OFFSET)..offset.min(MAX_FILE_OFFSET) + 1)
        .start;
    let _lock = paths.lock_exact(file, from..u64::MAX, LockKind::Shared);
    // Under the lock no write of ours reaches past `offset`: the kernel's
    // size is the one clients see.
    let size = file.size()?;
    if offset >= size {
        return Err(DataError::PastEnd { offset, size });
    }
    let whence = match what {
        Seek::Data => SeekFrom::Data(offset),
        Seek::Hole => SeekFrom::Hole(offset),
    };
    // The descriptor's position moves; nothing of ours uses it (every
    // read and write names its offset).
    let found = match rustix::fs::seek(file.buffered_fd(), whence) {
        Ok(at) => Some(at).filter(|&at| at < size),
        // No data from `offset` on.
        Err(rustix::io::Errno::NXIO) => None,
        Err(e) => {
            Counters::bump(&paths.counters.errors);
            return Err(e.into());
        }
    };
    Ok(match what {
        Seek::Data => found,
        Seek::Hole => Some(found.unwrap_or(size)),
    })
}

/// See [`crate::DataPlane::allocate`].
pub(crate) fn allocate(
    paths: &Paths,
    file: &DataFile,
    offset: u64,
    len: u64,
) -> Result<(), DataError> {
    if len == 0 {
        return Err(DataError::InvalidRange("ALLOCATE of 0 bytes"));
    }
    let end = match offset.checked_add(len) {
        Some(end) if end <= MAX_FILE_OFFSET => end,
        _ => return Err(DataError::FileTooBig),
    };
    let _lock = paths.lock(file, offset..end, LockKind::Exclusive);
    file.readahead.invalidate(offset..end);
    let fd = file.buffered_fd();
    // It may extend the file (RFC 7862 section 15.1.3): sizes reported
    // meanwhile count it as done, as for a write.
    let claim = file.size.begin_write(fd, end)?;
    let reserve = || -> io::Result<()> {
        rustix::fs::fallocate(fd, FallocateFlags::empty(), offset, len)?;
        Ok(())
    };
    let done = match file.integrity() {
        Some(sums) => sums.server_change(fd, reserve),
        None => reserve(),
    };
    if let Err(e) = done {
        Counters::bump(&paths.counters.errors);
        return Err(e.into());
    }
    claim.succeeded();
    Ok(())
}

/// See [`crate::DataPlane::deallocate`].
pub(crate) fn deallocate(
    paths: &Paths,
    file: &DataFile,
    offset: u64,
    len: u64,
) -> Result<(), DataError> {
    if len == 0 {
        return Err(DataError::InvalidRange("DEALLOCATE of 0 bytes"));
    }
    // Nothing lies past the largest offset: nothing to free there.
    let end = offset.saturating_add(len).min(MAX_FILE_OFFSET);
    if offset >= end {
        return Ok(());
    }
    let _lock = paths.lock(file, offset..end, LockKind::Exclusive);
    // Under the exclusive lock, so no prefetch of the old data is
    // published after this (see `readahead.rs`). The kernel drops the
    // page cache of the range itself.
    file.readahead.invalidate(offset..end);
    let fd = file.buffered_fd();
    let punch = || {
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(fd, flags, offset, end - offset).map_err(io::Error::from)
    };
    let failed = |e: io::Error| {
        Counters::bump(&paths.counters.errors);
        DataError::from(e)
    };
    let Some(sums) = file.integrity() else {
        return punch().map_err(failed);
    };
    // Blocks past the end have no entries (a punch there only frees
    // blocks allocated past the end, which read as nothing).
    let size = fstat_size(fd)?;
    if offset >= size {
        return punch().map_err(failed);
    }
    let covering = block_floor(offset)..block_ceil(end.min(size));
    let ticket = sums.begin_write(fd, covering)?;
    if let Err(e) = punch() {
        // Refused outright (no hole punching here): nothing changed.
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) && ticket.recompute().is_err() {
            sums.distrust();
        }
        return Err(failed(e));
    }
    // The blocks freed whole; the last partial block of the file counts
    // when the range reaches the end (its bytes past the end are zeros).
    let whole = block_ceil(offset) / BLOCK..block_floor(end) / BLOCK;
    let whole = if end >= size {
        whole.start..whole.end.max(size.div_ceil(BLOCK))
    } else {
        whole
    };
    ticket.zeroed(whole).map_err(|e| {
        // The data is zeros and the store does not know it everywhere.
        sums.distrust();
        DataError::ChecksumStore(e)
    })
}
