//! End-to-end data integrity: a CRC32C of every 4 KiB block of every
//! regular file of an export with `integrity = "crc32c"`, kept by the
//! server outside the export (DESIGN.md, "Integrity").
//!
//! - [`Store`]: the sidecar store under the state directory (one sparse
//!   checksum file per inode, keyed by filesystem and kernel file handle,
//!   so renames and hard links need no work), a bounded cache of checksum
//!   pages, and the intent log (`log.rs`) that makes checksums consistent
//!   with the data after a crash.
//! - [`FileSums`]: the checksum state of one open file, owned by the data
//!   plane's `DataFile` (one per inode, server-wide). The data plane calls
//!   it at four points, always under its range locks: before a write of
//!   whole blocks ([`FileSums::begin_write`]), after it
//!   ([`WriteTicket::finish`]), after a read ([`FileSums::verify`]), and
//!   around truncate and COMMIT.
//! - [`Checksummer`]: computes a write's checksums on a parked helper
//!   thread *while* the calling thread does the data write (seed 003), over the
//!   server's own buffer, which no client can change meanwhile; for a
//!   payload of whole blocks, earlier still, as it arrives ([`Arriving`]).
//! - [`scrub`]: verifying or rebuilding a whole file offline.
//!
//! # Block checksums
//! The checksum of a block is the CRC32C of its 4096 bytes, where bytes
//! past the end of the file count as zeros. So a file's last, partial block
//! keeps its checksum when the file is extended (the kernel reads the new
//! bytes as zeros), and the store holds `crc ^ ZERO_BLOCK_CRC`: an entry
//! the store never wrote (a hole in the sparse checksum file) stands for a
//! block of zeros, which is what a hole or an extension of the data file
//! reads as. Only shrinking a file has to touch the store.

mod cache;
mod key;
mod log;
mod overlap;
pub mod scrub;
mod store;

use std::sync::OnceLock;

pub use key::{FileKey, Version};
pub use overlap::{Arriving, Checksummer, Order, ARRIVAL_PIECE};
pub use store::{
    is_file_deleted, CommitTicket, FileSums, Mismatch, RecoveryReport, Store, SweepReport,
    WriteTicket,
};

/// Runs `f` (creating, renaming or removing files of the store) as the
/// server itself: the data plane calls the store on threads that carry an
/// NFS caller's squashed credentials, which must neither be refused the
/// state directory nor own (or be charged quota for) the store's files.
pub(crate) fn as_server<T>(f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    dionfs_sys::cred::as_root(f)?
}

/// The block size checksums cover.
pub const BLOCK: u64 = 4096;

const ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];

/// The CRC32C (Castagnoli, as iSCSI uses it) of `data`. `crc-fast`
/// folds with VPCLMULQDQ/PCLMULQDQ and the CRC32 instruction together:
/// 4 KiB blocks at about 0.020 s per GiB of CPU on this project's
/// development machine (AMD EPYC, AVX-512), against 0.045 s for the
/// `crc32c` crate's three-way CRC32 instruction loop; 0.034 s on an Intel
/// Xeon host, and 0.093 s there for blocks not in cache (`crcspeed`).
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// The CRC32C of a block of zeros.
pub fn zero_block_crc() -> u32 {
    static ZERO: OnceLock<u32> = OnceLock::new();
    *ZERO.get_or_init(|| crc32c(&ZEROS))
}

/// The checksum of one block whose first `data.len()` bytes (at most
/// [`BLOCK`]) are `data` and whose rest lies past the end of the file.
pub fn block_crc(data: &[u8]) -> u32 {
    debug_assert!(data.len() as u64 <= BLOCK);
    if data.len() as u64 == BLOCK {
        crc32c(data)
    } else {
        // Only a file's last block: padded with zeros on the stack.
        let mut block = ZEROS;
        block[..data.len()].copy_from_slice(data);
        crc32c(&block)
    }
}

/// The checksums of the consecutive blocks in `data` (the last one may be
/// short: the end of the file), appended to `out`.
pub fn block_crcs(data: &[u8], out: &mut Vec<u32>) {
    out.extend(data.chunks(BLOCK as usize).map(block_crc));
}

/// `x` rounded down to a block boundary.
pub fn block_floor(x: u64) -> u64 {
    x & !(BLOCK - 1)
}

/// `x` rounded up to a block boundary (`x` below `u64::MAX - BLOCK`).
pub fn block_ceil(x: u64) -> u64 {
    block_floor(x + BLOCK - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_blocks_are_zero_padded() {
        let mut block = vec![0u8; BLOCK as usize];
        block[..5].copy_from_slice(b"hello");
        assert_eq!(block_crc(b"hello"), ::crc32c::crc32c(&block));
        assert_eq!(block_crc(&[]), zero_block_crc());
        let mut crcs = Vec::new();
        block_crcs(&[1u8; 4096 + 10], &mut crcs);
        assert_eq!(crcs.len(), 2);
        assert_eq!(crcs[1], block_crc(&[1u8; 10]));
        assert_eq!(block_ceil(1), 4096);
        assert_eq!(block_ceil(4096), 4096);
        assert_eq!(block_floor(8191), 4096);
    }

    #[test]
    fn agrees_with_a_second_implementation() {
        // The check value of CRC-32/ISCSI, then blocks of every length.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let data: Vec<u8> = (0..3 * BLOCK as usize)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        for len in [0, 1, 15, 16, 63, 64, 255, 256, 1000, 4095, 4096, 12288] {
            assert_eq!(
                crc32c(&data[..len]),
                ::crc32c::crc32c(&data[..len]),
                "{len}"
            );
        }
        for len in [0, 1, 4095, 4096] {
            let mut block = vec![0u8; BLOCK as usize];
            block[..len].copy_from_slice(&data[..len]);
            assert_eq!(block_crc(&data[..len]), ::crc32c::crc32c(&block), "{len}");
        }
    }
}
