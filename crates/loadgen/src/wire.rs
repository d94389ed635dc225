//! One TCP connection: calls out (from a send buffer, WRITE payloads from
//! the caller's buffer with `writev`), replies in (whole RPC records in
//! one receive buffer, read with as few `read`s as the data allows).
//! Nothing here allocates after the connection is set up. With
//! [`Wire::start_tls`], the connection asks for RPC-with-TLS (RFC 9289)
//! and carries its records inside TLS from then on.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use dionfs_rpc::message::{AUTH_NONE, AUTH_TLS};
use dionfs_rpc::{encode_call, Credential, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder, Encoder};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// The last-fragment bit of a record mark.
const LAST: u32 = 0x8000_0000;

/// A connection's bytes: plain TCP, or TLS after the RFC 9289 probe.
enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The verifier body of a server's yes to the probe (RFC 9289 section 4.1).
const STARTTLS: &[u8] = b"STARTTLS";

/// A connection to a server.
pub struct Wire {
    sock: Stream,
    /// Calls not yet written (WRITE payloads excepted).
    pending: Vec<u8>,
    rx: RecvBuf,
}

impl Wire {
    /// A connection to `addr`, replies of at most `max_record` bytes.
    pub fn connect(addr: &str, max_record: usize) -> io::Result<Wire> {
        let sock = TcpStream::connect(addr)?;
        sock.set_nodelay(true)?;
        // Short, so that the loop sees a stop request or a deadline while
        // a server is silent.
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(Wire {
            sock: Stream::Plain(sock),
            pending: Vec::with_capacity(64 * 1024),
            rx: RecvBuf::new(max_record),
        })
    }

    /// Queues a call (a whole record, mark included) to be written by
    /// [`Wire::flush`].
    pub fn queue(&mut self, record: &[u8]) {
        self.pending.extend_from_slice(record);
    }

    /// Writes the queued calls.
    pub fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            write_all(&mut self.sock, &mut [IoSlice::new(&self.pending)])?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Writes the queued calls, then a call whose head is `head` and whose
    /// payload is `payload` and `pad` zero bytes, in one `writev`.
    pub fn send_with_payload(&mut self, head: &[u8], payload: &[u8], pad: usize) -> io::Result<()> {
        const ZEROS: [u8; 3] = [0; 3];
        let mut iov = [
            IoSlice::new(&self.pending),
            IoSlice::new(head),
            IoSlice::new(payload),
            IoSlice::new(&ZEROS[..pad]),
        ];
        write_all(&mut self.sock, &mut iov)?;
        self.pending.clear();
        Ok(())
    }

    /// The next whole reply already received, if any: its bytes after the
    /// record mark. Call [`Wire::consume`] when done with it.
    pub fn record(&mut self) -> io::Result<Option<&[u8]>> {
        match self.rx.poll()? {
            Some(Rec::Buf(r)) => Ok(Some(&self.rx.buf[r])),
            Some(Rec::Assembled) => Ok(Some(&self.rx.asm)),
            None => Ok(None),
        }
    }

    /// Drops the record [`Wire::record`] returned.
    pub fn consume(&mut self) {
        self.rx.consume();
    }

    /// Reads what the socket has (one `read`). `Ok(false)`: nothing came
    /// within the read timeout.
    pub fn fill(&mut self) -> io::Result<bool> {
        self.rx.fill(&mut self.sock)
    }

    /// Asks the server for RPC-with-TLS (a NULL call of program `prog`,
    /// version `vers`, with the AUTH_TLS credential) and, when it answers
    /// `STARTTLS`, runs the TLS handshake with `config` (ALPN `sunrpc`),
    /// checking the server's certificate for `name`. Nothing may be in
    /// flight.
    pub fn start_tls(
        &mut self,
        prog: u32,
        vers: u32,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        timeout: Duration,
    ) -> io::Result<()> {
        const XID: u32 = 0x7115_0001;
        let mut enc = call_head(prog, vers, 0, &Credential::Unsupported(AUTH_TLS));
        seal(&mut enc, 0);
        let mut record = enc.into_vec();
        put_u32(&mut record, 4, XID);
        self.queue(&record);
        self.flush()?;
        let deadline = std::time::Instant::now() + timeout;
        let rec = self.next_record(deadline, "no reply to the TLS probe")?;
        let head = ReplyHeader::decode(&mut Decoder::new(&rec))
            .map_err(|e| io::Error::other(format!("bad reply to the TLS probe: {e}")))?;
        if head.xid != XID
            || head.status != ReplyStatus::Success
            || head.verf.flavor != AUTH_NONE
            || head.verf.body != STARTTLS
        {
            return Err(io::Error::other(format!(
                "the server does not start TLS (its reply: {}, verifier flavor {})",
                head.status, head.verf.flavor
            )));
        }
        let Stream::Plain(sock) = &self.sock else {
            return Err(io::Error::other("TLS already"));
        };
        let sock = sock.try_clone()?;
        let conn = ClientConnection::new(config, name).map_err(io::Error::other)?;
        let mut tls = StreamOwned::new(conn, sock);
        while tls.conn.is_handshaking() {
            match tls.conn.complete_io(&mut tls.sock) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) && std::time::Instant::now() < deadline => {}
                Err(e) => return Err(io::Error::new(e.kind(), format!("TLS handshake: {e}"))),
            }
        }
        if tls.conn.alpn_protocol() != Some(b"sunrpc".as_slice()) {
            return Err(io::Error::other("the server did not agree on ALPN sunrpc"));
        }
        self.sock = Stream::Tls(Box::new(tls));
        Ok(())
    }

    /// Sends one call and waits for its reply (set-up and tear-down only:
    /// nothing else may be in flight). Returns the reply's results.
    pub fn call(&mut self, record: &[u8], xid: u32, timeout: Duration) -> io::Result<Vec<u8>> {
        self.queue(record);
        self.flush()?;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let rec = self.next_record(deadline, "no reply")?;
            let (rxid, rest) = reply_results(&rec).map_err(io::Error::other)?;
            if rxid != xid {
                continue; // a late reply of something abandoned
            }
            return Ok(rest.to_vec());
        }
    }

    /// The next whole record received, read until `deadline` (set-up and
    /// tear-down only); a timeout says `missing`.
    fn next_record(&mut self, deadline: std::time::Instant, missing: &str) -> io::Result<Vec<u8>> {
        loop {
            if let Some(rec) = self.record()? {
                let rec = rec.to_vec();
                self.consume();
                return Ok(rec);
            }
            if std::time::Instant::now() > deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, missing.to_string()));
            }
            self.fill()?;
        }
    }
}

/// `write_all` over several slices.
fn write_all(sock: &mut impl Write, mut iov: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut iov, 0);
    while !iov.is_empty() {
        match sock.write_vectored(iov) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut iov, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A reply's xid and its results (the bytes after an accepted, successful
/// reply header), or why there are none.
pub fn reply_results(rec: &[u8]) -> Result<(u32, &[u8]), String> {
    let mut dec = Decoder::new(rec);
    let head = ReplyHeader::decode(&mut dec).map_err(|e| format!("bad reply header: {e}"))?;
    match head.status {
        ReplyStatus::Success => Ok((head.xid, dec.rest())),
        other => Err(format!("RPC reply to xid {}: {other}", head.xid)),
    }
}

/// A call's record: mark, RPC header (xid at byte 4), then `args`.
/// Returns the record; the caller appends the arguments and then calls
/// [`seal`].
pub fn call_head(prog: u32, vers: u32, proc_: u32, cred: &Credential) -> Encoder {
    let mut enc = Encoder::new();
    enc.u32(0); // record mark, set by seal
    let head = encode_call(0, prog, vers, proc_, cred);
    enc.opaque_fixed(&head);
    enc
}

/// Sets the record mark of a record built by [`call_head`], counting
/// `payload` bytes that are sent after it.
pub fn seal(enc: &mut Encoder, payload: usize) {
    let len = enc.len() - 4 + payload;
    enc.patch_u32(0, LAST | len as u32);
}

/// Writes `v` big-endian at `at` of `buf`.
#[inline]
pub fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian at `at` of `buf`.
#[inline]
pub fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Where a whole record is.
enum Rec {
    /// In the buffer, these bytes (after the mark).
    Buf(Range<usize>),
    /// In `asm`: it came in several fragments.
    Assembled,
}

/// Received bytes: `buf[start..end]`, records from `start`.
struct RecvBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes the record at `start` takes, marks included, once known.
    taken: usize,
    /// A record of several fragments, put together.
    asm: Vec<u8>,
    max_record: usize,
}

impl RecvBuf {
    fn new(max_record: usize) -> RecvBuf {
        RecvBuf {
            // room for the longest record and the next's start
            buf: vec![0; max_record + 64 * 1024],
            start: 0,
            end: 0,
            taken: 0,
            asm: Vec::new(),
            max_record,
        }
    }

    /// The record at `start`, if all of it is here; the bytes it takes
    /// are kept for [`RecvBuf::consume`].
    fn poll(&mut self) -> io::Result<Option<Rec>> {
        let mut at = self.start;
        let mut frags: usize = 0;
        let mut total = 0usize;
        loop {
            if self.end - at < 4 {
                return Ok(None);
            }
            let mark = u32::from_be_bytes(self.buf[at..at + 4].try_into().expect("4 bytes"));
            let len = (mark & !LAST) as usize;
            total += len;
            if total > self.max_record {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("reply record of {total} bytes, above {}", self.max_record),
                ));
            }
            if self.end - at - 4 < len {
                return Ok(None);
            }
            frags += 1;
            let body = at + 4..at + 4 + len;
            at = body.end;
            if mark & LAST != 0 {
                self.taken = at - self.start;
                if frags == 1 {
                    return Ok(Some(Rec::Buf(body)));
                }
                // Several fragments: their bodies, one after the other.
                self.asm.clear();
                let mut p = self.start;
                while p < at {
                    let m = u32::from_be_bytes(self.buf[p..p + 4].try_into().expect("4 bytes"));
                    let l = (m & !LAST) as usize;
                    self.asm.extend_from_slice(&self.buf[p + 4..p + 4 + l]);
                    p += 4 + l;
                }
                return Ok(Some(Rec::Assembled));
            }
        }
    }

    fn consume(&mut self) {
        self.start += self.taken;
        self.taken = 0;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// One `read`: as much as fits, but for a long record only up to its
    /// end and the next mark, so that what stays in the buffer after it
    /// (and is moved to its front) is short.
    fn fill(&mut self, sock: &mut impl Read) -> io::Result<bool> {
        let have = self.end - self.start;
        // bytes from `start` that must fit, and at most how many to read
        let (need, read_to) = if have >= 4 {
            let mark = u32::from_be_bytes(
                self.buf[self.start..self.start + 4]
                    .try_into()
                    .expect("4 bytes"),
            );
            let rec = 4 + (mark & !LAST) as usize;
            if mark & LAST == 0 {
                (self.buf.len(), None) // fragments: all the room there is
            } else if rec >= 64 * 1024 {
                (rec, Some(rec + 4))
            } else {
                (rec, None)
            }
        } else {
            (64 * 1024, None)
        };
        if self.start > 0 && self.start + need > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let upto = read_to.map_or(self.buf.len(), |n| (self.start + n).min(self.buf.len()));
        if upto <= self.end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "receive buffer full without a whole record",
            ));
        }
        match sock.read(&mut self.buf[self.end..upto]) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
            Ok(n) => {
                self.end += n;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}
