//! Direct-I/O alignment arithmetic, as pure functions.
//!
//! Direct I/O needs file offsets and lengths that are multiples of the
//! file's alignment `A` (`stx_dio_offset_align`, or
//! `stx_dio_read_offset_align` for reads). NFS requests come at any offset
//! and length, so:
//! - a READ of `[off, off+len)` reads the expanded range
//!   `[round_down(off, A), round_up(off+len, A))` and replies with the
//!   requested sub-range of that buffer ([`expand_to_alignment`],
//!   [`read_reply`]);
//! - a misaligned WRITE places its payload at `off mod A` in the buffer
//!   ([`payload_offset`]), completes the partial first and last blocks from
//!   the disk ([`rmw_blocks`], [`rmw_fill_ranges`]) and writes the expanded
//!   range — except a last block that lies past both the payload and the
//!   end of the file, whose payload bytes are written buffered
//!   ([`split_at_eof`]), so `i_size` never covers bytes nobody wrote.
//!
//! Every alignment is a power of two. Callers keep offsets at most
//! [`MAX_FILE_OFFSET`] so that no rounding overflows.

use std::ops::Range;

/// Largest file offset (exclusive end) the data plane handles: `off_t` is
/// signed, so Linux files end below 2^63.
pub const MAX_FILE_OFFSET: u64 = i64::MAX as u64;

/// `x` rounded down to a multiple of `align` (a power of two).
pub fn round_down(x: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    x & !(align - 1)
}

/// `x` rounded up to a multiple of `align` (a power of two). `x + align - 1`
/// must not overflow (guaranteed for `x <= MAX_FILE_OFFSET`).
pub fn round_up(x: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    round_down(x + (align - 1), align)
}

/// Whether a direct I/O of `len` bytes at `offset` needs no expansion.
pub fn is_aligned(offset: u64, len: u64, align: u64) -> bool {
    offset.is_multiple_of(align) && len.is_multiple_of(align)
}

/// The smallest `align`-aligned file range that covers `[offset,
/// offset+len)`: `[round_down(offset, A), round_up(offset+len, A))`.
pub fn expand_to_alignment(offset: u64, len: u64, align: u64) -> Range<u64> {
    round_down(offset, align)..round_up(offset + len, align)
}

/// Where a WRITE payload for `offset` must sit in an aligned buffer so that
/// buffer byte 0 corresponds to `round_down(offset, A)`: `offset mod A`.
pub fn payload_offset(offset: u64, align: u64) -> usize {
    // `offset % align < align`, and alignments are at most 64 KiB.
    (offset % align) as usize
}

/// The reply of a READ of `count` bytes at `offset`, served from a buffer
/// whose byte 0 is file offset `io_start` and whose first `filled` bytes
/// were read, on a file of `size` bytes: the buffer sub-range to send and
/// the `eof` flag.
///
/// The data is cut at the end of what was read and at `size` (a read that
/// ended before `offset` gives the empty range `0..0` with `eof`); `eof` is set when the reply
/// reaches the end of the file (RFC 1813 READ3resok: "eof: If the read ended
/// at the end-of-file").
pub fn read_reply(
    offset: u64,
    count: u64,
    io_start: u64,
    filled: usize,
    size: u64,
) -> (Range<usize>, bool) {
    debug_assert!(io_start <= offset);
    let valid_end = (io_start + filled as u64).min(size);
    let reply_end = (offset + count).min(valid_end);
    if reply_end <= offset {
        // Nothing at or after `offset`: the file ended there when it was
        // read (a writer may have extended it since `size` was sampled, but
        // this reply is about the read). An empty reply without eof would
        // tell the client to retry forever; knfsd sets eof here too.
        return (0..0, count > 0 || offset >= size);
    }
    // Both ends are within `filled` bytes of `io_start`, so they fit usize.
    let start = (offset - io_start) as usize;
    let end = (reply_end - io_start) as usize;
    (start..end, reply_end >= size)
}

/// The blocks a misaligned write of `len > 0` bytes at `offset` only
/// partly covers, which must be read from the disk before the expanded
/// write: the block holding `offset` if `offset` is misaligned, and the
/// block holding `offset + len` if that is misaligned, each at most once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmwBlocks {
    /// File offset of the partial first block.
    pub head: Option<u64>,
    /// File offset of the partial last block, if it is not the head block.
    pub tail: Option<u64>,
}

impl RmwBlocks {
    /// The block offsets to read, head first.
    pub fn iter(&self) -> impl Iterator<Item = u64> {
        self.head.into_iter().chain(self.tail)
    }
}

/// See [`RmwBlocks`].
pub fn rmw_blocks(offset: u64, len: u64, align: u64) -> RmwBlocks {
    let end = offset + len;
    let head = (!offset.is_multiple_of(align)).then(|| round_down(offset, align));
    let tail = (!end.is_multiple_of(align)).then(|| round_down(end, align));
    let tail = if tail == head { None } else { tail };
    RmwBlocks { head, tail }
}

/// For one block read for a read-modify-write: which bytes of it go into
/// the write buffer. The block starts at buffer position `block_at`
/// (`align` bytes long); the payload occupies buffer positions
/// `[payload_at, payload_at + len)`. Returns the buffer ranges of the block
/// outside the payload (before it, after it); they are also the ranges of
/// the block read shifted by `block_at`.
pub fn rmw_fill_ranges(
    block_at: usize,
    align: usize,
    payload_at: usize,
    len: usize,
) -> [Range<usize>; 2] {
    let block_end = block_at + align;
    let payload_end = payload_at + len;
    let before = block_at..payload_at.clamp(block_at, block_end);
    let after = payload_end.clamp(block_at, block_end)..block_end;
    [before, after]
}

/// How a misaligned direct write is split so that the file never grows
/// past the data written: see [`split_at_eof`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EofSplit {
    /// The aligned file range written with direct I/O (may be empty).
    pub direct: Range<u64>,
    /// The payload bytes written buffered: the part of the payload in its
    /// last block when that block reaches past the end of the file (empty
    /// otherwise).
    pub buffered: Range<u64>,
}

/// Splits a write of `len > 0` bytes at `offset` to a file of `size` bytes
/// into its direct and buffered parts.
///
/// A direct write sets `i_size` to the end of what it wrote, a whole block.
/// If the payload's last block is partial and reaches past the end of the
/// file, writing it direct would make the file longer than the data (zeros
/// past the real end), and a crash before any fix-up would keep that size.
/// So that block's payload bytes are written buffered, which extends
/// `i_size` to exactly the payload's end, as knfsd's direct WRITE does with
/// its unaligned tail; everything before it is written direct.
pub fn split_at_eof(offset: u64, len: u64, align: u64, size: u64) -> EofSplit {
    let io = expand_to_alignment(offset, len, align);
    let end = offset + len;
    if io.end > end && io.end > size {
        let tail = round_down(end, align);
        EofSplit {
            direct: io.start..tail,
            buffered: offset.max(tail)..end,
        }
    } else {
        EofSplit {
            direct: io,
            buffered: end..end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn align_strategy() -> impl Strategy<Value = u64> {
        (9u32..=16).prop_map(|shift| 1u64 << shift)
    }

    /// Offsets that land near block boundaries as often as in the middle.
    fn offset_strategy() -> impl Strategy<Value = u64> {
        prop_oneof![
            0u64..(1 << 24),
            (0u64..256, -2i64..=2).prop_map(|(block, d)| (block * 4096).saturating_add_signed(d)),
        ]
    }

    #[test]
    fn rounding_examples() {
        assert_eq!(round_down(4097, 4096), 4096);
        assert_eq!(round_up(4097, 4096), 8192);
        assert_eq!(round_up(4096, 4096), 4096);
        assert_eq!(round_up(0, 512), 0);
        assert_eq!(expand_to_alignment(100, 47008, 4096), 0..49152);
        assert_eq!(expand_to_alignment(4096, 4096, 4096), 4096..8192);
        assert_eq!(round_up(MAX_FILE_OFFSET, 65536), 1u64 << 63);
    }

    #[test]
    fn read_reply_examples() {
        // Misaligned read in the middle of a big file.
        assert_eq!(read_reply(100, 50, 0, 4096, 1 << 20), (100..150, false));
        // Read ending exactly at EOF.
        assert_eq!(read_reply(100, 50, 0, 150, 150), (100..150, true));
        // Short read that ends before the requested offset.
        assert_eq!(read_reply(5000, 10, 4096, 100, 4196), (0..0, true));
        // Read entirely past EOF.
        assert_eq!(read_reply(9000, 10, 8192, 0, 10), (0..0, true));
        // Zero-byte read below EOF.
        assert_eq!(read_reply(10, 0, 0, 0, 100), (0..0, false));
        // Bytes read past the size (an in-flight extending write) are cut.
        assert_eq!(read_reply(0, 4096, 0, 4096, 1000), (0..1000, true));
    }

    #[test]
    fn rmw_examples() {
        assert_eq!(
            rmw_blocks(100, 200, 4096),
            RmwBlocks {
                head: Some(0),
                tail: None
            }
        );
        assert_eq!(
            rmw_blocks(4000, 200, 4096),
            RmwBlocks {
                head: Some(0),
                tail: Some(4096)
            }
        );
        assert_eq!(
            rmw_blocks(4096, 100, 4096),
            RmwBlocks {
                head: None,
                tail: Some(4096)
            }
        );
        assert_eq!(
            rmw_blocks(100, 3996, 4096),
            RmwBlocks {
                head: Some(0),
                tail: None
            }
        );
        assert_eq!(rmw_fill_ranges(0, 4096, 100, 200), [0..100, 300..4096]);
        assert_eq!(
            rmw_fill_ranges(4096, 4096, 100, 4200),
            [4096..4096, 4300..8192]
        );
    }

    #[test]
    fn split_examples() {
        // Appending 100 bytes at EOF 8192: all buffered, nothing direct.
        let s = split_at_eof(8192, 100, 4096, 8192);
        assert_eq!((s.direct, s.buffered), (8192..8192, 8192..8292));
        // IOR-hard record at EOF: head block direct (RMW), tail buffered.
        let s = split_at_eof(47008, 47008, 4096, 47008);
        assert_eq!((s.direct, s.buffered), (45056..90112, 90112..94016));
        // The same record below EOF: all direct.
        let s = split_at_eof(47008, 47008, 4096, 1 << 20);
        assert_eq!((s.direct, s.buffered), (45056..94208, 94016..94016));
        // Ends on a block boundary: direct, i_size exact anyway.
        let s = split_at_eof(100, 3996, 4096, 0);
        assert_eq!((s.direct, s.buffered), (0..4096, 4096..4096));
        // The last block is partly inside the file but reaches past EOF.
        let s = split_at_eof(4100, 100, 4096, 5000);
        assert_eq!((s.direct, s.buffered), (4096..4096, 4100..4200));
    }

    proptest! {
        /// The two parts cover the payload, the direct one is aligned, and
        /// no part makes the file longer than `max(size, offset + len)`.
        #[test]
        fn split_never_grows_the_file_past_the_data(
            offset in offset_strategy(), len in 1u64..(1 << 21),
            align in align_strategy(), size in 0u64..(1 << 25)
        ) {
            let s = split_at_eof(offset, len, align, size);
            let end = offset + len;
            prop_assert_eq!(s.direct.start % align, 0);
            prop_assert_eq!(s.direct.end % align, 0);
            prop_assert!(s.direct.start <= s.direct.end);
            prop_assert!(s.buffered.start <= s.buffered.end);
            // Direct I/O sets i_size to max(size, direct.end).
            prop_assert!(s.direct.is_empty() || size.max(s.direct.end) <= size.max(end));
            // Together they cover [offset, end), buffered after direct.
            let covered_to = if s.direct.is_empty() { offset } else { s.direct.end };
            prop_assert!(s.direct.is_empty() || s.direct.start <= offset);
            if s.buffered.is_empty() {
                prop_assert!(covered_to >= end);
            } else {
                prop_assert!(s.buffered.start <= covered_to.max(offset));
                prop_assert_eq!(s.buffered.end, end);
                // Only the last, partial block is ever buffered.
                prop_assert!(end - s.buffered.start < align);
                prop_assert_eq!(round_down(s.buffered.start, align), round_down(end - 1, align));
            }
        }

        #[test]
        fn expansion_is_aligned_covering_and_minimal(
            offset in offset_strategy(), len in 0u64..(1 << 21), align in align_strategy()
        ) {
            let r = expand_to_alignment(offset, len, align);
            prop_assert_eq!(r.start % align, 0);
            prop_assert_eq!(r.end % align, 0);
            prop_assert!(r.start <= offset && offset + len <= r.end);
            // Minimal: less than one block added on each side.
            prop_assert!(offset - r.start < align);
            prop_assert!(r.end - (offset + len) < align);
            // So a pool buffer of len + 2 * align always holds it.
            prop_assert!(r.end - r.start <= len + 2 * align);
            prop_assert_eq!(is_aligned(offset, len, align), r.start == offset && r.end == offset + len);
            prop_assert_eq!(payload_offset(offset, align) as u64, offset - r.start);
        }

        /// Model: a file of `size` bytes whose byte at `p` is `p % 251`.
        /// Reading the expanded range (short at EOF) and trimming with
        /// `read_reply` must give exactly the bytes a plain `pread` of
        /// `[offset, offset+count)` would.
        #[test]
        fn reply_matches_plain_read(
            offset in offset_strategy(), count in 0u64..(1 << 17),
            align in align_strategy(), size in 0u64..(1 << 24)
        ) {
            let io = expand_to_alignment(offset, count, align);
            let filled = (io.end.min(size.max(io.start)) - io.start) as usize;
            let buf: Vec<u8> = (io.start..io.start + filled as u64).map(|p| (p % 251) as u8).collect();
            let (range, eof) = read_reply(offset, count, io.start, filled, size);
            let expected: Vec<u8> = (offset..(offset + count).min(size.max(offset)))
                .map(|p| (p % 251) as u8)
                .collect();
            prop_assert_eq!(&buf[range.clone()], &expected[..]);
            prop_assert_eq!(eof, offset + expected.len() as u64 >= size);
            prop_assert!(range.end <= filled);
        }

        /// A read cut short for any reason never yields bytes that were not
        /// read, and never sets eof before the file size.
        #[test]
        fn reply_never_exceeds_filled(
            offset in offset_strategy(), count in 0u64..(1 << 17),
            align in align_strategy(), filled_frac in 0.0f64..=1.0, size in 0u64..(1 << 25)
        ) {
            let io = expand_to_alignment(offset, count, align);
            let filled = ((io.end - io.start) as f64 * filled_frac) as usize;
            let (range, eof) = read_reply(offset, count, io.start, filled, size);
            prop_assert!(range.start <= range.end);
            prop_assert!(range.end <= filled);
            prop_assert!((range.len() as u64) <= count);
            if range.is_empty() && count > 0 {
                // Nothing was read: the read ended at or before `offset`.
                prop_assert!(eof);
            } else {
                prop_assert_eq!(eof, offset + range.len() as u64 >= size);
            }
        }

        /// Reading the RMW blocks and filling around the payload gives, for
        /// every byte of the expanded range, the payload where it was
        /// written and the old disk contents (zero past EOF) elsewhere.
        #[test]
        fn rmw_reconstructs_expanded_range(
            offset in offset_strategy(), len in 1u64..(1 << 17),
            align in align_strategy(), size in 0u64..(1 << 24)
        ) {
            let old = |p: u64| if p < size { (p % 241) as u8 + 1 } else { 0 };
            let new = |p: u64| (p % 13) as u8 + 100;
            let io = expand_to_alignment(offset, len, align);
            let at = payload_offset(offset, align);
            let mut buf = vec![0xEEu8; (io.end - io.start) as usize];
            for (i, b) in buf[at..at + len as usize].iter_mut().enumerate() {
                *b = new(offset + i as u64);
            }
            let blocks = rmw_blocks(offset, len, align);
            for block in blocks.iter() {
                prop_assert_eq!(block % align, 0);
                prop_assert!(io.start <= block && block + align <= io.end);
                let block_at = (block - io.start) as usize;
                for r in rmw_fill_ranges(block_at, align as usize, at, len as usize) {
                    for i in r {
                        buf[i] = old(io.start + i as u64);
                    }
                }
            }
            for (i, &b) in buf.iter().enumerate() {
                let p = io.start + i as u64;
                let want = if p >= offset && p < offset + len { new(p) } else { old(p) };
                prop_assert_eq!(b, want, "byte at file offset {}", p);
            }
        }
    }
}
