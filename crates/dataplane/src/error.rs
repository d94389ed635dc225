//! The data plane's one error type.

use std::io;

/// Why a READ, WRITE, COMMIT, truncate or one of NFSv4.2's calls (SEEK,
/// ALLOCATE, DEALLOCATE, COPY, CLONE) failed. The server maps it to an
/// NFS status through [`DataError::errno`] in its one status-mapping place.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A system call failed; the errno says why (`ENOSPC`, `EDQUOT`, `EIO`…).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// A direct I/O that the alignment math allowed was refused with
    /// `EINVAL`. A bug (ours or the filesystem's), logged at error level;
    /// reported to the client as an I/O error, never retried buffered.
    #[error("direct {op} of {len} bytes at {offset} rejected (alignment {align})")]
    DirectRejected {
        /// "read" or "write".
        op: &'static str,
        /// File offset of the I/O.
        offset: u64,
        /// Length of the I/O.
        len: usize,
        /// The offset alignment used.
        align: u64,
    },
    /// The write stored fewer bytes than asked.
    #[error("short write: {written} of {expected} bytes")]
    ShortWrite {
        /// Bytes the kernel reported written.
        written: usize,
        /// Bytes that should have been written.
        expected: usize,
    },
    /// The payload is longer than the export's `max_transfer`.
    #[error("transfer of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// Configured maximum.
        max: usize,
    },
    /// The write would end beyond the largest file offset Linux supports.
    #[error("write beyond the maximum file size")]
    FileTooBig,
    /// A block read does not match its stored CRC32C (integrity exports):
    /// the data on disk is corrupt. Answered `NFS3ERR_IO`; the bytes are
    /// never sent.
    #[error(
        "checksum mismatch in the block at {offset}: expected {expected:08x}, found {found:08x}"
    )]
    Corrupt {
        /// File offset of the block.
        offset: u64,
        /// The stored checksum.
        expected: u32,
        /// The checksum of the data read.
        found: u32,
    },
    /// The data was written but its checksums could not be stored (the
    /// state directory's filesystem full, an I/O error there): the WRITE
    /// fails with the store's errno and the file's checksums are no longer
    /// trusted.
    #[error("the data was written, its checksums could not be stored: {0}")]
    ChecksumStore(io::Error),
    /// The arguments name no valid range: a length of 0 where one is
    /// needed, a copy or clone between overlapping ranges of one file, a
    /// clone not aligned to the filesystem's block size or reaching past
    /// the end of its source. Answered `NFS4ERR_INVAL`.
    #[error("invalid range: {0}")]
    InvalidRange(&'static str),
    /// A SEEK from an offset at or past the end of the file (`size`):
    /// `NFS4ERR_NXIO` (RFC 7862 section 15.11.3), `ENXIO` as `lseek` says.
    #[error("offset {offset} is not inside the file of {size} bytes")]
    PastEnd {
        /// The offset asked for.
        offset: u64,
        /// The file's size.
        size: u64,
    },
    /// The data-plane configuration is unusable.
    #[error("invalid data-plane configuration: {0}")]
    InvalidConfig(&'static str),
}

impl DataError {
    /// The errno that best describes the error, for mapping to `nfsstat3`:
    /// the system call's own errno, `EIO` for rejected direct I/O and short
    /// writes (NFS3ERR_IO), `EINVAL` for oversized transfers and bad
    /// configuration and invalid ranges, `ENXIO` for a SEEK past the end,
    /// `EFBIG` for offsets past the maximum file size. A filesystem that
    /// cannot do what was asked answers `EOPNOTSUPP` (CLONE on ext4) or
    /// `EXDEV` (a clone between two filesystems).
    pub fn errno(&self) -> i32 {
        match self {
            DataError::Io(e) | DataError::ChecksumStore(e) => e.raw_os_error().unwrap_or(libc::EIO),
            DataError::DirectRejected { .. }
            | DataError::ShortWrite { .. }
            | DataError::Corrupt { .. } => libc::EIO,
            DataError::TooLarge { .. }
            | DataError::InvalidConfig(_)
            | DataError::InvalidRange(_) => libc::EINVAL,
            DataError::PastEnd { .. } => libc::ENXIO,
            DataError::FileTooBig => libc::EFBIG,
        }
    }
}

impl From<rustix::io::Errno> for DataError {
    fn from(e: rustix::io::Errno) -> Self {
        DataError::Io(e.into())
    }
}
