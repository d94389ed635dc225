//! The header of a checksum file: whether its checksums are stale, and
//! the data's [`Version`] as of the server's last change.
//!
//! Header (little endian): `magic "DIONCRC1" | block size u32 | flags u32
//! (1 = stale) | mtime seconds i64 | mtime nanoseconds u32 | 0 u32 | size
//! u64 | 0 u8 x20 | crc32c u32` of the 60 bytes before it.

use std::fs::File;
use std::io;

use super::data::read_full;
use crate::{Version, BLOCK};

const MAGIC: &[u8; 8] = b"DIONCRC1";
pub(super) const HEADER_LEN: u64 = 64;
const FLAG_STALE: u32 = 1;

/// What a checksum file's header says.
pub(super) struct Header {
    pub(super) stale: bool,
    pub(super) version: Version,
}

impl Header {
    pub(super) fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut h = [0u8; HEADER_LEN as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        let flags = if self.stale { FLAG_STALE } else { 0 };
        h[12..16].copy_from_slice(&flags.to_le_bytes());
        h[16..24].copy_from_slice(&self.version.mtime_sec.to_le_bytes());
        h[24..28].copy_from_slice(&self.version.mtime_nsec.to_le_bytes());
        h[32..40].copy_from_slice(&self.version.size.to_le_bytes());
        let crc = crate::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h
    }

    fn decode(h: &[u8]) -> Option<Header> {
        if h.len() < HEADER_LEN as usize || &h[..8] != MAGIC {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(b)
        };
        if crate::crc32c(&h[..60]) != u32_at(60) || u32_at(8) as u64 != BLOCK {
            return None;
        }
        Some(Header {
            stale: u32_at(12) & FLAG_STALE != 0,
            version: Version {
                mtime_sec: u64_at(16) as i64,
                mtime_nsec: u32_at(24),
                size: u64_at(32),
            },
        })
    }
}

/// A checksum file's header: the bytes there are of it (0: a new file)
/// and what they say, `None` if they are not a whole, valid header.
pub(super) fn read_header(file: &File) -> io::Result<(usize, Option<Header>)> {
    let mut header = [0u8; HEADER_LEN as usize];
    let got = read_full(file, &mut header, 0)?;
    Ok((got, Header::decode(&header[..got])))
}
