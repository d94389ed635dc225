//! Reading a data file for its checksums: whole reads, its data extents,
//! and the error a pass over a deleted file stops with.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};

use dionfs_sys::io::{preadv2, RwFlags};

use crate::log::REGION_BLOCKS;
use crate::BLOCK;

/// Whether every byte of data `data` holds (`lseek(SEEK_DATA)`/
/// `SEEK_HOLE`: holes and unwritten extents excluded) lies in `regions`.
pub(super) fn data_only_in(data: BorrowedFd<'_>, regions: &[u64]) -> io::Result<bool> {
    let region_len = REGION_BLOCKS * BLOCK;
    let mut covered = true;
    for_each_data_extent(data, |extent| {
        covered &= (extent.start / region_len..extent.end.div_ceil(region_len))
            .all(|r| regions.contains(&r));
        Ok(())
    })?;
    Ok(covered)
}

/// Calls `f` with each byte range of `data` that holds data, in order
/// (`lseek(SEEK_DATA/SEEK_HOLE)`: holes and unwritten extents, which read
/// as zeros, are skipped).
pub(super) fn for_each_data_extent(
    data: BorrowedFd<'_>,
    mut f: impl FnMut(Range<u64>) -> io::Result<()>,
) -> io::Result<()> {
    use rustix::fs::{seek, SeekFrom};
    let mut at = 0;
    loop {
        let start = match seek(data, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let end = seek(data, SeekFrom::Hole(start))?;
        f(start..end)?;
        at = end;
    }
}

/// Why a rebuild or a recovery of a file's checksums stopped part-way:
/// the file was deleted meanwhile. [`is_file_deleted`] tells it apart.
#[derive(Debug)]
pub(super) struct FileDeleted;

impl std::fmt::Display for FileDeleted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the file was deleted")
    }
}

impl std::error::Error for FileDeleted {}

/// Whether `e` says a rebuild stopped because its file was deleted (not a
/// failure to report: nothing is left to check).
pub fn is_file_deleted(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<FileDeleted>())
}

/// `pread` until `buf` is full or the end of the file; returns the bytes
/// read.
pub(super) fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    pread_full_flags(fd, buf, offset, RwFlags::NONE)
}

/// [`pread_full`] with `preadv2` flags.
pub(super) fn pread_full_flags(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
    flags: RwFlags,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match preadv2(fd, &mut buf[done..], offset + done as u64, flags)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

pub(super) fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    pread_full(file.as_fd(), buf, offset)
}
