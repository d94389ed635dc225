//! Record marking for RPC over TCP (RFC 5531 section 11).
//!
//! A record (one RPC message) is sent as one or more fragments. Each fragment
//! starts with a 4-byte big-endian header: the top bit says "this is the last
//! fragment of the record", the other 31 bits are the fragment's length.
//!
//! [`RecordReader`] keeps a small read buffer ([`READ_BUF_LEN`]): one `recv`
//! usually brings a whole small call, or several pipelined ones, instead of
//! one syscall per XDR field. A large read (a WRITE payload) takes what is
//! already buffered and then goes from the socket straight into the caller's
//! (aligned) buffer, so at most one buffer's worth of it is copied. The size of a record is
//! checked against a maximum as each fragment header arrives, before anything
//! is allocated for it or read from it. A caller that knows how long the
//! rest of a record may be (an RPC program knows each procedure's largest
//! arguments) reads it with [`RecordReader::read_to_end_bounded`], which
//! refuses it the same way, on the fragment headers, before allocating.

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The "last fragment" bit of a fragment header.
const LAST_FRAGMENT: u32 = 0x8000_0000;

/// The largest fragment a header can describe (31 bits).
pub const MAX_FRAGMENT_LEN: u32 = 0x7fff_ffff;

/// Size of the stack buffer [`RecordReader::skip_rest`] discards bytes into.
const SKIP_CHUNK: usize = 512;

/// Size of the reader's own buffer. A small call (a READ is ~150 bytes, a
/// 1 KiB WRITE ~1.2 KiB) fits whole, 25 pipelined READs at once; reads at
/// least this long bypass it. Every connection has one, also an idle one,
/// so it stays a page (thousands of idle connections are a few MiB).
pub const READ_BUF_LEN: usize = 4 << 10;

/// Why a record could not be read. Every variant except
/// [`RecordError::PastEnd`] and [`RecordError::RestTooLarge`] leaves the
/// stream at an unknown position: the connection must be closed.
#[derive(Debug, Error)]
pub enum RecordError {
    /// The fragments of the record add up to more than the reader accepts.
    /// Detected on the fragment header, before the body is read.
    #[error("record of at least {size} bytes exceeds limit of {max}")]
    TooLarge { size: u64, max: u32 },
    /// The caller asked for more bytes than the record holds. The stream is
    /// positioned at the end of the record (the next record can be read).
    #[error("read past the end of the record")]
    PastEnd,
    /// The rest of the record is longer than the caller of
    /// [`RecordReader::read_to_end_bounded`] allows: at least `size` bytes
    /// against `max`. Detected on a fragment header, before that fragment
    /// is read or allocated for. The stream is still inside the record:
    /// [`RecordReader::skip_rest`] discards it and the next record can be read.
    #[error("rest of the record is at least {size} bytes, over the limit of {max}")]
    RestTooLarge { size: u64, max: u32 },
    /// The stream ended inside a record (or inside a fragment header).
    #[error("stream ended inside a record")]
    Truncated,
    /// A data method was called outside a record (before
    /// [`RecordReader::next_record`] returned `true`).
    #[error("no record is open")]
    NoRecord,
    /// The underlying reader failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// The 4-byte header of a fragment of `len` bytes (RFC 5531 section 11).
///
/// `len` must fit in 31 bits; larger values are a bug in the caller (our
/// messages are bounded far below 2 GiB) and are truncated to 31 bits.
pub fn record_mark(len: u32, last: bool) -> [u8; 4] {
    let flag = if last { LAST_FRAGMENT } else { 0 };
    (flag | (len & MAX_FRAGMENT_LEN)).to_be_bytes()
}

/// `msg` as a one-fragment record: its mark, then the message.
pub fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + msg.len());
    out.extend_from_slice(&record_mark(msg.len() as u32, true));
    out.extend_from_slice(msg);
    out
}

/// Reads one whole record (every fragment) from a blocking reader, for the
/// few blocking clients (calls to rpcbind, to a client's lock manager or
/// statd); at most `max` bytes, else an error.
pub fn read_record_blocking(r: &mut impl std::io::Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut mark = [0u8; 4];
        r.read_exact(&mut mark)?;
        let mark = u32::from_be_bytes(mark);
        let len = (mark & MAX_FRAGMENT_LEN) as usize;
        if out.len() + len > max {
            return Err(std::io::Error::other(format!(
                "record longer than {max} bytes"
            )));
        }
        let start = out.len();
        out.resize(start + len, 0);
        r.read_exact(&mut out[start..])?;
        if mark & LAST_FRAGMENT != 0 {
            return Ok(out);
        }
    }
}

/// Reads RPC records from a byte stream, one record at a time, through a
/// small read buffer that large reads bypass (see the module documentation).
///
/// Usage: [`next_record`](Self::next_record) opens a record; then any mix of
/// [`read_exact`](Self::read_exact), [`read_u32`](Self::read_u32) and
/// [`read_to_end`](Self::read_to_end) consumes it; [`skip_rest`](Self::skip_rest)
/// discards what is left. The methods are not cancel-safe: dropping one of
/// their futures half-way leaves the stream at an unknown position, so a
/// caller that cancels must close the connection.
#[derive(Debug)]
pub struct RecordReader<R> {
    inner: R,
    max_record: u32,
    /// A record has been opened by `next_record` and not yet finished.
    in_record: bool,
    /// Bytes left in the current fragment.
    fragment_remaining: u32,
    /// The current fragment is the last one of the record.
    last_fragment: bool,
    /// Sum of the lengths of the record's fragments seen so far.
    record_len: u64,
    /// Bytes read from `inner` ahead of the caller: `buf[pos..end]`.
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
}

impl<R: AsyncRead + Unpin> RecordReader<R> {
    /// A reader that refuses records larger than `max_record` bytes.
    pub fn new(inner: R, max_record: u32) -> Self {
        Self {
            inner,
            max_record,
            in_record: false,
            fragment_remaining: 0,
            last_fragment: false,
            record_len: 0,
            buf: vec![0; READ_BUF_LEN].into_boxed_slice(),
            pos: 0,
            end: 0,
        }
    }

    /// Bytes already read from the stream and not yet consumed (they may
    /// belong to this record or to the next ones). Whoever waits for a
    /// record's bytes to arrive on the socket counts these too.
    pub fn buffered(&self) -> usize {
        self.end - self.pos
    }

    /// The largest record accepted.
    pub fn max_record(&self) -> u32 {
        self.max_record
    }

    /// The underlying reader. Bytes may have been read from it ahead of the
    /// caller ([`Self::buffered`]).
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The underlying reader, to change how it reads (a connection that
    /// switches to TLS). Take [`Self::take_buffered`] first: bytes read
    /// ahead are the old stream's.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Takes the bytes read from the stream ahead of the caller, between
    /// records: what came after the last record read (the start of a TLS
    /// handshake after an RFC 9289 probe, say).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        let taken = self.buf[self.pos..self.end].to_vec();
        self.pos = 0;
        self.end = 0;
        taken
    }

    /// Gives back the underlying reader (dropping any buffered bytes).
    pub fn into_inner(self) -> R {
        self.inner
    }

    /// True while a record is open and its end has not been reached. A record
    /// whose last fragment is used up counts as ended, even before the caller
    /// notices.
    pub fn in_record(&self) -> bool {
        self.in_record && !self.at_record_end()
    }

    /// True when the current record is known to be fully consumed: the last
    /// fragment has been seen and nothing is left of it. (When a non-last
    /// fragment is used up this is false: more fragments follow, possibly
    /// empty ones.)
    pub fn at_record_end(&self) -> bool {
        self.last_fragment && self.fragment_remaining == 0
    }

    /// Bytes left in the current fragment (more may follow in later
    /// fragments unless this is the last one, see [`Self::is_last_fragment`]).
    pub fn fragment_remaining(&self) -> u32 {
        self.fragment_remaining
    }

    /// True if the current fragment is the record's last.
    pub fn is_last_fragment(&self) -> bool {
        self.last_fragment
    }

    /// The record's size as far as known: the sum of the lengths of the
    /// fragments whose headers have been read.
    pub fn record_len_so_far(&self) -> u64 {
        self.record_len
    }

    /// Opens the next record by reading its first fragment header.
    ///
    /// Returns `Ok(false)` on a clean end of stream between records. If the
    /// previous record was not fully consumed its rest is skipped first.
    pub async fn next_record(&mut self) -> Result<bool, RecordError> {
        if self.in_record {
            self.skip_rest().await?;
        }
        if self.buffered() == 0 && self.refill().await? == 0 {
            return Ok(false);
        }
        let mut header = [0u8; 4];
        self.fill(&mut header).await?;
        self.in_record = true;
        self.record_len = 0;
        self.accept_fragment_header(u32::from_be_bytes(header))?;
        Ok(true)
    }

    /// Takes a fragment header into account, enforcing the record size limit
    /// before any of the fragment's bytes are read.
    fn accept_fragment_header(&mut self, header: u32) -> Result<(), RecordError> {
        let len = header & MAX_FRAGMENT_LEN;
        let size = self.record_len + u64::from(len);
        if size > u64::from(self.max_record) {
            // The stream position is now meaningless for this record.
            self.in_record = false;
            return Err(RecordError::TooLarge {
                size,
                max: self.max_record,
            });
        }
        self.record_len = size;
        self.fragment_remaining = len;
        self.last_fragment = header & LAST_FRAGMENT != 0;
        Ok(())
    }

    /// Reads the header of the next fragment of the current record.
    async fn next_fragment(&mut self) -> Result<(), RecordError> {
        let mut header = [0u8; 4];
        self.fill(&mut header).await?;
        self.accept_fragment_header(u32::from_be_bytes(header))
    }

    /// Makes bytes available in the current fragment, crossing into the next
    /// fragment(s) as needed. Returns false at the end of the record.
    async fn ensure_fragment_data(&mut self) -> Result<bool, RecordError> {
        if !self.in_record {
            return Err(RecordError::NoRecord);
        }
        while self.fragment_remaining == 0 {
            if self.last_fragment {
                return Ok(false);
            }
            self.next_fragment().await?;
        }
        Ok(true)
    }

    /// One read from the stream into the empty read buffer; returns how
    /// many bytes came (0: end of stream).
    async fn refill(&mut self) -> Result<usize, RecordError> {
        debug_assert_eq!(self.buffered(), 0);
        self.pos = 0;
        self.end = 0;
        let n = self.inner.read(&mut self.buf).await.inspect_err(|_| {
            self.in_record = false;
        })?;
        self.end = n;
        Ok(n)
    }

    /// Fills `out` with the next bytes of the stream: first from the read
    /// buffer, then, for what is left, straight from the stream if it is at
    /// least a buffer long (a payload is not copied twice), else through the
    /// buffer. End of stream is [`RecordError::Truncated`].
    async fn fill(&mut self, out: &mut [u8]) -> Result<(), RecordError> {
        let mut done = 0;
        while done < out.len() {
            if self.buffered() > 0 {
                let n = self.buffered().min(out.len() - done);
                out[done..done + n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                self.pos += n;
                done += n;
                continue;
            }
            let rest = &mut out[done..];
            if rest.len() >= self.buf.len() {
                return match self.inner.read_exact(rest).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        self.in_record = false;
                        Err(RecordError::Truncated)
                    }
                    Err(e) => {
                        self.in_record = false;
                        Err(RecordError::Io(e))
                    }
                };
            }
            if self.refill().await? == 0 {
                self.in_record = false;
                return Err(RecordError::Truncated);
            }
        }
        Ok(())
    }

    /// Fills `buf` with the next bytes of the current record, reading straight
    /// from the stream into `buf` across fragment boundaries.
    ///
    /// Fails with [`RecordError::PastEnd`] if the record ends first; the
    /// record is then consumed (use [`Self::read_up_to`] to know how much
    /// of `buf` was filled).
    pub async fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), RecordError> {
        if self.read_up_to(buf).await? < buf.len() {
            return Err(RecordError::PastEnd);
        }
        Ok(())
    }

    /// Like [`Self::read_exact`], but stops without error at the end of the
    /// record. Returns how many bytes were read: `buf.len()` unless the
    /// record ended first.
    pub async fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize, RecordError> {
        let mut done = 0;
        while done < buf.len() {
            if !self.ensure_fragment_data().await? {
                break;
            }
            let want = buf.len() - done;
            // Bounded by `want`, so the conversion back to usize is lossless.
            let n = want.min(self.fragment_remaining as usize);
            self.fill(&mut buf[done..done + n]).await?;
            done += n;
            // n <= fragment_remaining, which is a u32.
            self.fragment_remaining -= n as u32;
        }
        Ok(done)
    }

    /// The bytes of the current fragment already read from the stream and
    /// not yet consumed (maybe none): a caller may decode from them in
    /// place and then [`Self::consume`] what it used, with no copy and no
    /// await. What it leaves stays for the next read.
    pub fn peek(&self) -> &[u8] {
        if !self.in_record {
            return &[];
        }
        let n = self.buffered().min(self.fragment_remaining as usize);
        &self.buf[self.pos..self.pos + n]
    }

    /// Consumes the first `n` bytes of [`Self::peek`] (at most all of
    /// them).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.peek().len());
        self.pos += n;
        // n <= fragment_remaining, which is a u32.
        self.fragment_remaining -= n as u32;
    }

    /// Reads a big-endian u32 (one XDR unsigned int) from the record.
    pub async fn read_u32(&mut self) -> Result<u32, RecordError> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b).await?;
        Ok(u32::from_be_bytes(b))
    }

    /// Appends the rest of the current record (all its remaining fragments)
    /// to `out`. Never grows `out` by more than the record size limit: each
    /// fragment is checked against it before its space is reserved.
    pub async fn read_to_end(&mut self, out: &mut Vec<u8>) -> Result<(), RecordError> {
        // The record limit already bounds the rest of the record.
        self.read_to_end_bounded(out, self.max_record).await
    }

    /// Appends the rest of the current record to `out` if it is at most
    /// `max` bytes long; otherwise fails with [`RecordError::RestTooLarge`]
    /// and the rest of the record is still to be read (or skipped).
    ///
    /// The length is checked as each fragment header arrives, before any
    /// space is reserved for the fragment or any of it is read: a record
    /// announcing 1 MiB costs nothing when `max` is a few KiB, whether it
    /// comes as one fragment or many.
    pub async fn read_to_end_bounded(
        &mut self,
        out: &mut Vec<u8>,
        max: u32,
    ) -> Result<(), RecordError> {
        let mut taken: u64 = 0;
        while self.ensure_fragment_data().await? {
            // `fragment_remaining` is what is known of the rest so far: the
            // current fragment's unread bytes (earlier ones were taken).
            let size = taken + u64::from(self.fragment_remaining);
            if size > u64::from(max) {
                return Err(RecordError::RestTooLarge { size, max });
            }
            let n = self.fragment_remaining as usize;
            let start = out.len();
            out.resize(start + n, 0);
            self.fill(&mut out[start..]).await?;
            self.fragment_remaining = 0;
            taken = size;
        }
        Ok(())
    }

    /// Discards the next `n` bytes of the current record through the read
    /// buffer, so a caller's future holds no scratch space for them (a
    /// COMPOUND's receive is boxed per call: its size is copied each
    /// time). Fails with [`RecordError::PastEnd`] if the record ends
    /// first, the record then consumed.
    pub async fn skip(&mut self, mut n: usize) -> Result<(), RecordError> {
        while n > 0 {
            if !self.ensure_fragment_data().await? {
                return Err(RecordError::PastEnd);
            }
            if self.buffered() == 0 && self.refill().await? == 0 {
                self.in_record = false;
                return Err(RecordError::Truncated);
            }
            // Bounded by `fragment_remaining`, a u32.
            let k = n.min(self.buffered()).min(self.fragment_remaining as usize);
            self.pos += k;
            self.fragment_remaining -= k as u32;
            n -= k;
        }
        Ok(())
    }

    /// Discards the rest of the current record through a small stack buffer.
    /// Does nothing outside a record.
    pub async fn skip_rest(&mut self) -> Result<(), RecordError> {
        if !self.in_record {
            return Ok(());
        }
        let mut scratch = [0u8; SKIP_CHUNK];
        while self.ensure_fragment_data().await? {
            let n = (self.fragment_remaining as usize).min(SKIP_CHUNK);
            self.fill(&mut scratch[..n]).await?;
            // n <= fragment_remaining, which is a u32.
            self.fragment_remaining -= n as u32;
        }
        self.in_record = false;
        Ok(())
    }
}

#[cfg(test)]
mod blocking_tests {
    use super::*;

    #[test]
    fn blocking_reads_join_fragments_and_refuse_oversized_records() {
        let mut bytes = record_mark(3, false).to_vec();
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&framed(b"de"));
        assert_eq!(read_record_blocking(&mut &bytes[..], 5).unwrap(), b"abcde");
        assert!(read_record_blocking(&mut &bytes[..], 4).is_err());
        assert!(read_record_blocking(&mut &bytes[..2], 5).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    /// One record made of the given fragments.
    fn record(fragments: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, f) in fragments.iter().enumerate() {
            let len = u32::try_from(f.len()).expect("test fragment fits u32");
            out.extend_from_slice(&record_mark(len, i + 1 == fragments.len()));
            out.extend_from_slice(f);
        }
        out
    }

    #[test]
    fn record_mark_layout() {
        assert_eq!(record_mark(0x1234, true), [0x80, 0, 0x12, 0x34]);
        assert_eq!(record_mark(0x1234, false), [0, 0, 0x12, 0x34]);
        assert_eq!(record_mark(0, true), [0x80, 0, 0, 0]);
    }

    #[tokio::test]
    async fn single_fragment_record_then_clean_eof() {
        let bytes = record(&[b"abcdefgh"]);
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert!(r.in_record());
        assert_eq!(r.fragment_remaining(), 8);
        assert!(r.is_last_fragment());
        let mut buf = [0u8; 3];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"abc");
        assert_eq!(r.fragment_remaining(), 5);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"defgh");
        assert!(r.at_record_end());
        assert!(!r.in_record());
        assert!(!r.next_record().await.unwrap());
    }

    #[tokio::test]
    async fn peek_shows_only_the_current_fragment_and_consume_moves_past() {
        // Two fragments of one record, then a second record.
        let mut bytes = record(&[b"abcd", b"ef"]);
        bytes.extend_from_slice(&framed(b"xyz"));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.peek().is_empty(), "no record open");
        assert!(r.next_record().await.unwrap());
        // Everything came in one read, but only the fragment shows.
        assert_eq!(r.peek(), b"abcd");
        r.consume(1);
        assert_eq!((r.peek(), r.fragment_remaining()), (&b"bcd"[..], 3));
        // Consuming more than shows stops at the fragment's end.
        r.consume(10);
        assert!(r.peek().is_empty());
        let mut rest = [0u8; 2];
        r.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"ef");
        assert!(r.at_record_end());
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.peek(), b"xyz");
        r.consume(3);
        assert!(r.at_record_end() && r.peek().is_empty());
    }

    #[tokio::test]
    async fn reads_cross_fragment_boundaries_and_empty_fragments() {
        // A u32 split 1+0+3 bytes across fragments, then payload split 2+2.
        let bytes = record(&[&[0x01], &[], &[0x02, 0x03, 0x04, b'p'], b"ay", &[], b"lo"]);
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), 0x0102_0304);
        let mut payload = [0u8; 5];
        r.read_exact(&mut payload).await.unwrap();
        assert_eq!(&payload, b"paylo");
        assert!(r.at_record_end());
        assert_eq!(r.record_len_so_far(), 9);
        let mut b = [0u8; 1];
        assert!(matches!(
            r.read_exact(&mut b).await,
            Err(RecordError::PastEnd)
        ));
        assert!(!r.next_record().await.unwrap());
    }

    #[tokio::test]
    async fn trailing_empty_last_fragment_ends_the_record() {
        let bytes = record(&[b"abcd", &[]]);
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), u32::from_be_bytes(*b"abcd"));
        // The next fragment has not been seen yet: the end is not known.
        assert!(!r.at_record_end());
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert!(r.at_record_end());
    }

    #[tokio::test]
    async fn back_to_back_records_and_skip() {
        let mut bytes = record(&[b"first", b"-record"]);
        bytes.extend(record(&[b"second"]));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        let mut b = [0u8; 2];
        r.read_exact(&mut b).await.unwrap();
        r.skip_rest().await.unwrap();
        assert!(r.next_record().await.unwrap());
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"second");
        assert!(!r.next_record().await.unwrap());
    }

    #[tokio::test]
    async fn next_record_skips_an_unfinished_record() {
        let mut bytes = record(&[b"one", b"two"]);
        bytes.extend(record(&[b"three"]));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert!(r.next_record().await.unwrap());
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"three");
    }

    #[tokio::test]
    async fn past_end_leaves_the_stream_at_the_next_record() {
        let mut bytes = record(&[b"ab"]);
        bytes.extend(record(&[b"next"]));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        let mut buf = [0u8; 4];
        assert!(matches!(
            r.read_exact(&mut buf).await,
            Err(RecordError::PastEnd)
        ));
        assert_eq!(&buf[..2], b"ab");
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), u32::from_be_bytes(*b"next"));
    }

    #[tokio::test]
    async fn skip_crosses_fragments_and_stops_at_the_record_end() {
        // "ab" + "cdef" in one record, then a second record.
        let mut bytes = record(&[b"ab", b"cdef"]);
        bytes.extend(record(&[b"next"]));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        r.skip(3).await.unwrap();
        let mut b = [0u8; 1];
        r.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"d");
        assert!(matches!(r.skip(3).await, Err(RecordError::PastEnd)));
        assert!(r.at_record_end());
        // The next record is untouched.
        assert!(r.next_record().await.unwrap());
        let mut next = [0u8; 4];
        r.read_exact(&mut next).await.unwrap();
        assert_eq!(&next, b"next");
        // A stream cut inside the record.
        let cut = &framed(b"abcdef")[..6];
        let mut r = RecordReader::new(cut, 1024);
        assert!(r.next_record().await.unwrap());
        assert!(matches!(r.skip(5).await, Err(RecordError::Truncated)));
    }

    #[tokio::test]
    async fn read_up_to_stops_at_the_end_of_the_record() {
        let mut bytes = record(&[b"ab", b"cde"]);
        bytes.extend(record(&[b"next"]));
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        let mut buf = [0u8; 8];
        assert_eq!(r.read_up_to(&mut buf[..1]).await.unwrap(), 1);
        assert_eq!(r.read_up_to(&mut buf[1..]).await.unwrap(), 4);
        assert_eq!(&buf[..5], b"abcde");
        assert_eq!(r.read_up_to(&mut buf).await.unwrap(), 0);
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_up_to(&mut buf).await.unwrap(), 4);
        assert_eq!(&buf[..4], b"next");
    }

    #[tokio::test]
    async fn reading_outside_a_record_is_an_error() {
        let mut r = RecordReader::new(&[][..], 1024);
        assert!(matches!(r.read_u32().await, Err(RecordError::NoRecord)));
    }

    /// A reader that serves `data` and then fails the test if read again: it
    /// proves that nothing past the fragment header was read.
    struct ThenPanic<'a> {
        data: &'a [u8],
    }

    impl AsyncRead for ThenPanic<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            assert!(!self.data.is_empty(), "read past the fragment header");
            let n = self.data.len().min(buf.remaining());
            buf.put_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn too_large_first_fragment_is_refused_before_reading_the_body() {
        let header = record_mark(1025, true);
        let mut r = RecordReader::new(ThenPanic { data: &header }, 1024);
        match r.next_record().await {
            Err(RecordError::TooLarge { size, max }) => {
                assert_eq!((size, max), (1025, 1024));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn too_large_sum_of_fragments_is_refused_at_the_header() {
        let mut bytes = record_mark(600, false).to_vec();
        bytes.extend_from_slice(&[7u8; 600]);
        bytes.extend_from_slice(&record_mark(0x7fff_ffff, true));
        let mut r = RecordReader::new(ThenPanic { data: &bytes }, 1024);
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        match r.read_to_end(&mut out).await {
            Err(RecordError::TooLarge { size, max }) => {
                assert_eq!((size, max), (600 + 0x7fff_ffff, 1024));
            }
            other => panic!("unexpected {other:?}"),
        }
        // Only the first fragment was allocated.
        assert_eq!(out.len(), 600);
    }

    #[tokio::test]
    async fn record_of_exactly_the_limit_is_accepted() {
        let bytes = record(&[&[1u8; 10], &[2u8; 6]]);
        let mut r = RecordReader::new(&bytes[..], 16);
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out.len(), 16);
    }

    #[tokio::test]
    async fn bounded_read_takes_a_rest_of_exactly_the_bound() {
        // The bound counts what is left, not what was read before it.
        let bytes = record(&[b"head", b"abc", &[], b"defgh"]);
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), u32::from_be_bytes(*b"head"));
        let mut out = Vec::new();
        r.read_to_end_bounded(&mut out, 8).await.unwrap();
        assert_eq!(out, b"abcdefgh");
        assert!(r.at_record_end());
    }

    #[tokio::test]
    async fn bounded_read_refuses_a_long_fragment_before_reading_it() {
        // A 1 MiB fragment announced and never sent: refused from its header.
        let mut bytes = record_mark(8, false).to_vec();
        bytes.extend_from_slice(b"callhead");
        bytes.extend_from_slice(&record_mark(1 << 20, true));
        let mut r = RecordReader::new(ThenPanic { data: &bytes }, 1 << 21);
        assert!(r.next_record().await.unwrap());
        let mut head = [0u8; 8];
        r.read_exact(&mut head).await.unwrap();
        let mut out = Vec::new();
        match r.read_to_end_bounded(&mut out, 1024).await {
            Err(RecordError::RestTooLarge { size, max }) => {
                assert_eq!((size, max), (1 << 20, 1024));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(out.is_empty());
        assert_eq!(out.capacity(), 0, "nothing was allocated");
    }

    #[tokio::test]
    async fn bounded_read_counts_every_fragment_of_the_rest() {
        // 600 + 600 bytes against a bound of 1000: the first fragment is
        // taken, the second refused at its header.
        let mut bytes = record_mark(600, false).to_vec();
        bytes.extend_from_slice(&[1u8; 600]);
        bytes.extend_from_slice(&record_mark(600, true));
        let mut r = RecordReader::new(ThenPanic { data: &bytes }, 1 << 20);
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        match r.read_to_end_bounded(&mut out, 1000).await {
            Err(RecordError::RestTooLarge { size, max }) => {
                assert_eq!((size, max), (1200, 1000));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(out.len(), 600);
    }

    #[tokio::test]
    async fn a_refused_rest_can_be_skipped_to_the_next_record() {
        let mut bytes = record(&[b"hd", &[7u8; 3000], &[8u8; 3000]]);
        bytes.extend(record(&[b"next"]));
        let mut r = RecordReader::new(&bytes[..], 1 << 20);
        assert!(r.next_record().await.unwrap());
        let mut head = [0u8; 2];
        r.read_exact(&mut head).await.unwrap();
        let mut out = Vec::new();
        assert!(matches!(
            r.read_to_end_bounded(&mut out, 100).await,
            Err(RecordError::RestTooLarge {
                size: 3000,
                max: 100
            })
        ));
        // Still inside the record: skipping reaches the next one.
        assert!(r.in_record());
        r.skip_rest().await.unwrap();
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        r.read_to_end_bounded(&mut out, 4).await.unwrap();
        assert_eq!(out, b"next");
    }

    #[tokio::test]
    async fn the_record_limit_still_applies_to_a_bounded_read() {
        // A rest within the caller's bound but a record over the reader's
        // limit is the record error (the connection closes), as before.
        let mut bytes = record_mark(10, false).to_vec();
        bytes.extend_from_slice(&[0u8; 10]);
        bytes.extend_from_slice(&record_mark(10, true));
        let mut r = RecordReader::new(ThenPanic { data: &bytes }, 16);
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        assert!(matches!(
            r.read_to_end_bounded(&mut out, 1000).await,
            Err(RecordError::TooLarge { size: 20, max: 16 })
        ));
    }

    #[tokio::test]
    async fn truncated_streams_are_errors() {
        // Inside the first header.
        let mut r = RecordReader::new(&[0x80, 0][..], 1024);
        assert!(matches!(r.next_record().await, Err(RecordError::Truncated)));
        // Inside a fragment body.
        let mut bytes = record_mark(8, true).to_vec();
        bytes.extend_from_slice(b"abc");
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        let mut out = Vec::new();
        assert!(matches!(
            r.read_to_end(&mut out).await,
            Err(RecordError::Truncated)
        ));
        // Inside a later fragment header.
        let mut bytes = record_mark(2, false).to_vec();
        bytes.extend_from_slice(b"ab\x80");
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert!(matches!(r.skip_rest().await, Err(RecordError::Truncated)));
        // End of stream where a non-last fragment promised more.
        let bytes = record_mark(0, false);
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        assert!(matches!(r.read_u32().await, Err(RecordError::Truncated)));
    }

    /// A stream that hands out at most `chunk` bytes per read, like a
    /// socket, and records the room each read was offered.
    struct Chunked {
        data: Vec<u8>,
        chunk: usize,
        offered: Vec<usize>,
    }

    impl AsyncRead for Chunked {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            self.offered.push(buf.remaining());
            let n = self.data.len().min(buf.remaining()).min(self.chunk);
            buf.put_slice(&self.data[..n]);
            self.data.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pipelined_small_records_take_one_read() {
        let mut bytes = Vec::new();
        for i in 0..20u32 {
            bytes.extend(record(&[&i.to_be_bytes(), b"args"]));
        }
        let total = bytes.len();
        let mut r = RecordReader::new(
            Chunked {
                data: bytes,
                chunk: usize::MAX,
                offered: Vec::new(),
            },
            1024,
        );
        for i in 0..20u32 {
            assert!(r.next_record().await.unwrap());
            assert_eq!(r.read_u32().await.unwrap(), i);
            let mut rest = Vec::new();
            r.read_to_end(&mut rest).await.unwrap();
            assert_eq!(rest, b"args");
            assert_eq!(r.buffered(), total - (i as usize + 1) * (total / 20));
        }
        assert!(!r.next_record().await.unwrap());
        // All twenty records in the first read; the second saw the end.
        assert_eq!(r.get_ref().offered.len(), 2);
    }

    #[tokio::test]
    async fn large_reads_bypass_the_buffer() {
        let payload: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut body = 7u32.to_be_bytes().to_vec();
        body.extend_from_slice(&payload);
        let mut r = RecordReader::new(
            Chunked {
                data: record(&[&body]),
                chunk: 4096,
                offered: Vec::new(),
            },
            1 << 20,
        );
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), 7);
        let mut out = vec![0u8; payload.len()];
        r.read_exact(&mut out).await.unwrap();
        assert_eq!(out, payload);
        assert!(r.at_record_end());
        // Only the first read went into the reader's buffer (copied once
        // more); every later one straight into `out`.
        let offered = &r.get_ref().offered;
        assert_eq!(offered[0], READ_BUF_LEN);
        assert!(offered[1..].iter().all(|&room| room != READ_BUF_LEN));
        assert_eq!(offered.len(), (4 + 4 + payload.len()).div_ceil(4096));
    }

    #[tokio::test]
    async fn works_on_a_stream_delivered_in_pieces() {
        let mock = tokio_test::io::Builder::new()
            .read(&record_mark(6, false)[..2])
            .read(&record_mark(6, false)[2..])
            .read(&[0, 0, 0])
            .read(&[5, b'x', b'y'])
            .read(&record_mark(2, true))
            .read(b"z")
            .read(b"w")
            .build();
        let mut r = RecordReader::new(mock, 1024);
        assert!(r.next_record().await.unwrap());
        assert_eq!(r.read_u32().await.unwrap(), 5);
        let mut rest = [0u8; 4];
        r.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"xyzw");
        assert!(r.at_record_end());
        assert!(!r.next_record().await.unwrap());
    }
}
