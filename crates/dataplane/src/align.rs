//! Direct-I/O alignment arithmetic, as pure functions.
//!
//! Direct I/O needs file offsets and lengths that are multiples of the
//! file's alignment `A` (`stx_dio_offset_align`, or
//! `stx_dio_read_offset_align` for reads). NFS requests come at any offset
//! and length, so:
//! - a READ of `[off, off+len)` reads the expanded range
//!   `[round_down(off, A), round_up(off+len, A))` and replies with the
//!   requested sub-range of that buffer ([`expand_to_alignment`],
//!   [`read_reply`]), never past the unit that holds the end of the file
//!   ([`within_size`]);
//! - a misaligned WRITE places its payload at `off mod A` in the buffer
//!   ([`payload_offset`]), so its aligned interior
//!   `[round_up(off, A), round_down(off+len, A))` sits at an aligned buffer
//!   position and goes out direct, and the payload bytes of the partial
//!   first and last blocks go out buffered ([`split_edges`]): nothing is
//!   read back from the disk, and `i_size` never covers bytes nobody wrote.
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

/// The part of a direct read's expanded range `io` the kernel is asked
/// for on a file of `size` bytes: cut at the end of the `align` unit that
/// holds the last byte (empty when the file ends before `io`). What lies
/// past that unit is past the end, and asking for it can fail the whole
/// read: XFS maps a direct read's full range, past `i_size` too, and
/// fails it with `EIO` ("Direct I/O collision with buffered writes!" in
/// the kernel log, `iomap_dio_iter`) when that finds delayed-allocation
/// blocks, which a buffered write's speculative preallocation leaves past
/// the end when the block before them was written back through the
/// copy-on-write fork (a shared, cloned block).
pub fn within_size(io: Range<u64>, size: u64, align: u64) -> Range<u64> {
    io.start..io.end.min(round_up(size, align)).max(io.start)
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

/// How a misaligned direct write of `len > 0` bytes at `offset` is split:
/// see [`split_edges`]. The three ranges are file ranges, disjoint, in file
/// order, and together exactly `[offset, offset + len)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSplit {
    /// The payload bytes in the partial first block (written buffered);
    /// empty when `offset` is aligned.
    pub head: Range<u64>,
    /// The whole blocks of the payload (written direct); aligned unless
    /// empty.
    pub interior: Range<u64>,
    /// The payload bytes in the partial last block, when that is not the
    /// head block (written buffered); empty when the end is aligned.
    pub tail: Range<u64>,
}

/// Splits a write of `[offset, offset + len)` into its aligned interior
/// `[round_up(offset, A), round_down(offset + len, A))` and the partial
/// edge blocks' payload bytes before and after it. A write inside one
/// block is all head.
///
/// Why edges go buffered instead of being completed by reading the blocks
/// back: the read is a synchronous device round trip on every misaligned
/// WRITE (IOR-hard records, small overwrites), and the page cache merges
/// adjacent partial writes of one block for free. It is also what knfsd's
/// direct WRITE does. Writing only the payload's own bytes never rounds
/// `i_size` up: a buffered write extends the file to exactly its end.
pub fn split_edges(offset: u64, len: u64, align: u64) -> EdgeSplit {
    let end = offset + len;
    let (first, last) = (round_up(offset, align), round_down(end, align));
    if first > last {
        // Both ends inside one block.
        return EdgeSplit {
            head: offset..end,
            interior: end..end,
            tail: end..end,
        };
    }
    EdgeSplit {
        head: offset..first,
        interior: first..last,
        tail: last..end,
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
    fn within_size_examples() {
        // Inside the file: unchanged.
        assert_eq!(within_size(0..8192, 10_000, 4096), 0..8192);
        // Across the end: up to the unit holding the last byte.
        assert_eq!(within_size(4096..65536, 10_000, 4096), 4096..12288);
        assert_eq!(within_size(0..65536, 8192, 4096), 0..8192);
        // Starting past the end, or an empty file: nothing.
        assert_eq!(within_size(12288..16384, 10_000, 4096), 12288..12288);
        assert_eq!(within_size(0..4096, 0, 4096), 0..0);
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
    fn edge_examples() {
        let split = |o, l| {
            let s = split_edges(o, l, 4096);
            (s.head, s.interior, s.tail)
        };
        // Inside one block: all head, nothing direct.
        assert_eq!(split(100, 200), (100..300, 300..300, 300..300));
        assert_eq!(split(4100, 10), (4100..4110, 4110..4110, 4110..4110));
        // Crossing one boundary: head and tail, no interior.
        assert_eq!(split(4000, 200), (4000..4096, 4096..4096, 4096..4200));
        // Aligned start, partial end; partial start, aligned end.
        assert_eq!(split(4096, 100), (4096..4096, 4096..4096, 4096..4196));
        assert_eq!(split(100, 3996), (100..4096, 4096..4096, 4096..4096));
        // An IOR-hard record: 1952 + 40960 + 4096 bytes.
        assert_eq!(
            split(47008, 47008),
            (47008..49152, 49152..90112, 90112..94016)
        );
        // Aligned: all interior.
        assert_eq!(split(8192, 8192), (8192..8192, 8192..16384, 16384..16384));
    }

    proptest! {
        /// Head, interior and tail are disjoint, in order and cover exactly
        /// the payload; the interior is aligned and its buffer position
        /// (payload at `offset mod A`, byte 0 at `round_down(offset, A)`)
        /// is a multiple of `A`; each edge lies inside one block and is
        /// shorter than a block; the interior is as large as possible.
        #[test]
        fn edges_cover_the_payload_around_an_aligned_interior(
            offset in offset_strategy(), len in 1u64..(1 << 21), align in align_strategy()
        ) {
            let s = split_edges(offset, len, align);
            let end = offset + len;
            prop_assert_eq!(s.head.start, offset);
            prop_assert_eq!(s.head.end, s.interior.start);
            prop_assert_eq!(s.interior.end, s.tail.start);
            prop_assert_eq!(s.tail.end, end);
            prop_assert!(s.interior.start <= s.interior.end);
            if !s.interior.is_empty() {
                prop_assert_eq!(s.interior.start % align, 0);
                prop_assert_eq!(s.interior.end % align, 0);
                let io_start = expand_to_alignment(offset, len, align).start;
                let buffer_at = payload_offset(offset, align) as u64 + (s.interior.start - offset);
                prop_assert_eq!(buffer_at, s.interior.start - io_start);
                prop_assert_eq!(buffer_at % align, 0);
            }
            for edge in [&s.head, &s.tail] {
                prop_assert!(edge.end - edge.start < align);
                if !edge.is_empty() {
                    prop_assert_eq!(round_down(edge.start, align), round_down(edge.end - 1, align));
                }
            }
            let whole_blocks = round_down(end, align).saturating_sub(round_up(offset, align));
            prop_assert_eq!(s.interior.end - s.interior.start, whole_blocks);
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

        /// The cut read is an aligned prefix of the expanded range that
        /// still holds every byte of it below the size (so the reply is
        /// the same), and reaches less than one unit past the size.
        #[test]
        fn cut_read_keeps_every_byte_below_the_size(
            offset in offset_strategy(), count in 0u64..(1 << 17),
            align in align_strategy(), size in 0u64..(1 << 24)
        ) {
            let io = expand_to_alignment(offset, count, align);
            let r = within_size(io.clone(), size, align);
            prop_assert_eq!(r.start, io.start);
            prop_assert!(r.start <= r.end && r.end <= io.end);
            prop_assert_eq!(r.end % align, 0);
            prop_assert!(r.end >= io.end.min(size));
            prop_assert!(r.is_empty() || r.end < size + align);
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
    }
}
