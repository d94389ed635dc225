//! The byte ranges locks are taken on: inclusive, as the tables compare
//! them, converted from each protocol's (offset, length) and to and from
//! `fcntl`'s.

use dionfs_sys::lock::LockRange;

/// An inclusive byte range; `end` `u64::MAX` reaches past any end of file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

/// The largest offset `fcntl` can lock.
const OFFSET_MAX: u64 = i64::MAX as u64;

impl Span {
    /// The range of an NLM lock (`l_offset`, `l_len`, 0 for "to the end"),
    /// or `None` if it starts beyond what the kernel can lock (NLM4_FBIG).
    /// A range reaching past the largest offset reaches to the end, as in
    /// the kernel's lockd.
    pub fn from_nlm(offset: u64, len: u64) -> Option<Span> {
        if offset > OFFSET_MAX {
            return None;
        }
        let end = match len {
            0 => u64::MAX,
            // Ending at the largest offset is reaching to the end too: from
            // 0, `fcntl`'s length would be 2^63, past an `i64` (the whole
            // file's lock could then be neither taken nor released).
            _ => match offset.checked_add(len - 1) {
                Some(end) if end < OFFSET_MAX => end,
                _ => u64::MAX,
            },
        };
        Some(Span { start: offset, end })
    }

    /// The range as `fcntl` takes it.
    pub fn to_fcntl(self) -> LockRange {
        LockRange {
            start: self.start as i64,
            // 0: to the end (also the only way to say a length past i64).
            len: if self.end == u64::MAX {
                0
            } else {
                i64::try_from(self.end - self.start + 1).unwrap_or(0)
            },
        }
    }

    /// `fcntl`'s range (as `F_OFD_GETLK` reports it) as a span.
    pub(super) fn from_fcntl(r: LockRange) -> Span {
        let start = r.start.max(0) as u64;
        let end = match r.len {
            0 => u64::MAX,
            n if n > 0 => start.saturating_add(n as u64 - 1),
            // A negative length covers the bytes before start.
            n => {
                let first = start.saturating_sub(n.unsigned_abs());
                return Span {
                    start: first,
                    end: start.saturating_sub(1),
                };
            }
        };
        Span { start, end }
    }

    /// The span as NLM's (`l_offset`, `l_len`).
    pub fn to_nlm(self) -> (u64, u64) {
        if self.end == u64::MAX {
            (self.start, 0)
        } else {
            (self.start, self.end - self.start + 1)
        }
    }

    /// Whether the two share a byte.
    pub(super) fn overlaps(self, other: Span) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(offset: u64, len: u64) -> Span {
        Span::from_nlm(offset, len).unwrap()
    }

    #[test]
    fn spans_convert_like_lockd() {
        assert_eq!(span(0, 0).to_fcntl(), LockRange { start: 0, len: 0 });
        assert_eq!(span(10, 5).to_fcntl(), LockRange { start: 10, len: 5 });
        // Past the largest offset: to the end.
        assert_eq!(span(10, u64::MAX).end, u64::MAX);
        assert_eq!(Span::from_nlm(1 << 63, 1), None);
        // To the largest offset, from 0: 2^63 bytes, which `fcntl` takes
        // only as "to the end" (the length wrapped to i64::MIN: EINVAL).
        assert_eq!(span(0, 1 << 63).to_fcntl(), LockRange { start: 0, len: 0 });
        assert_eq!(
            span(5, (1 << 63) - 5).to_fcntl(),
            LockRange { start: 5, len: 0 }
        );
        assert_eq!(
            span(5, (1 << 63) - 6).to_fcntl(),
            LockRange {
                start: 5,
                len: i64::MAX - 5
            }
        );
        assert_eq!(span(7, 3).to_nlm(), (7, 3));
        assert_eq!(span(7, 0).to_nlm(), (7, 0));
    }
}
