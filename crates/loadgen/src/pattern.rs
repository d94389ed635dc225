//! The bytes every job writes and checks, and the latency histogram: the
//! same functions as bench/loadgen/loadgen.c, so that a file one of the
//! two wrote verifies with the other.

/// The 8-byte word at absolute file offset `o` (`o % 8 == 0`) under seed
/// `s`.
#[inline]
fn word(o: u64, s: u64) -> u64 {
    let mut v = ((o >> 3).wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ s.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    v ^= v >> 31;
    v ^ (o << 16)
}

#[inline]
fn byte(o: u64, s: u64) -> u8 {
    (word(o & !7, s) >> (8 * (o & 7))) as u8
}

/// Fills `buf` with the pattern of file offsets `off..off + buf.len()`.
pub fn fill(buf: &mut [u8], off: u64, s: u64) {
    let len = buf.len();
    let mut i = 0;
    // byte-wise up to the first 8-aligned file offset, then whole words
    while i < len && (off + i as u64) & 7 != 0 {
        buf[i] = byte(off + i as u64, s);
        i += 1;
    }
    let words = (len - i) / 8;
    for chunk in buf[i..i + words * 8].chunks_exact_mut(8) {
        chunk.copy_from_slice(&word(off + i as u64, s).to_ne_bytes());
        i += 8;
    }
    while i < len {
        buf[i] = byte(off + i as u64, s);
        i += 1;
    }
}

/// The number of bytes of `buf` (file offsets from `off`) that differ from
/// the pattern, and the file offset of the first.
pub fn check(buf: &[u8], off: u64, s: u64) -> (u64, Option<u64>) {
    let len = buf.len();
    let mut bad = 0u64;
    let mut first = None;
    let mut byte_at = |i: usize, bad: &mut u64| {
        let o = off + i as u64;
        if buf[i] != byte(o, s) {
            first.get_or_insert(o);
            *bad += 1;
        }
    };
    let mut i = 0;
    while i < len && (off + i as u64) & 7 != 0 {
        byte_at(i, &mut bad);
        i += 1;
    }
    while i + 8 <= len {
        let mut w = [0u8; 8];
        w.copy_from_slice(&buf[i..i + 8]);
        if u64::from_ne_bytes(w) != word(off + i as u64, s) {
            for b in i..i + 8 {
                byte_at(b, &mut bad);
            }
        }
        i += 8;
    }
    while i < len {
        byte_at(i, &mut bad);
        i += 1;
    }
    (bad, first)
}

/// Buckets of the latency histogram: log-linear, 64 per power of two.
pub const BUCKETS: usize = 3840;

/// The bucket of `v` nanoseconds.
#[inline]
pub fn bucket(v: u64) -> usize {
    if v < 128 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros() as usize;
    let shift = msb - 6;
    ((shift + 1) * 64 + ((v >> shift) as usize - 64)).min(BUCKETS - 1)
}

/// The value a bucket stands for (its middle).
pub fn bucket_value(i: usize) -> f64 {
    if i < 128 {
        return i as f64;
    }
    let shift = i / 64 - 1;
    let sub = (i % 64 + 64) as u64;
    (sub << shift) as f64 + ((1u64 << shift) - 1) as f64 / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C loadgen's pat_word for offset 0 and 8 under seed 1, computed
    /// by hand from its formula: the two generators must agree.
    #[test]
    fn words_match_the_c_generator() {
        let c = |o: u64, s: u64| {
            let mut v = ((o >> 3) + 1).wrapping_mul(0x9E3779B97F4A7C15)
                ^ s.wrapping_mul(0xD6E8FEB86659FD93);
            v ^= v >> 31;
            v ^ (o << 16)
        };
        for o in [0u64, 8, 4096, 47008 * 3] {
            assert_eq!(word(o, 1), c(o, 1));
        }
    }

    #[test]
    fn fill_then_check_is_clean_at_any_offset() {
        for off in [0u64, 1, 7, 8, 47008, 4095] {
            let mut buf = vec![0u8; 1000];
            fill(&mut buf, off, 42);
            assert_eq!(check(&buf, off, 42), (0, None));
            buf[500] ^= 1;
            assert_eq!(check(&buf, off, 42), (1, Some(off + 500)));
            assert!(check(&buf, off, 43).0 > 900);
        }
    }

    #[test]
    fn buckets_round_trip_within_two_percent() {
        for v in [0u64, 5, 127, 128, 1000, 123_456, 9_999_999_999] {
            let b = bucket(v);
            let back = bucket_value(b);
            assert!(
                (back - v as f64).abs() <= v as f64 * 0.02 + 1.0,
                "{v} -> {back}"
            );
        }
    }
}
