//! RPC-with-TLS (RFC 9289): the server's TLS configuration, and the TLS
//! state of a connection that has switched to it.
//!
//! A client asks with a NULL call whose credential is AUTH_TLS
//! (section 4.1); the connection answers it with the `STARTTLS`
//! verifier, then runs a TLS 1.3 server handshake on the same TCP
//! connection (`connection.rs`, `start_tls`), and from then on every
//! record of every program on it goes inside TLS, record marking
//! unchanged. A connection that never asks stays as it was: nothing of
//! this module is on its path but a test of an `Option`.
//!
//! The host kernel may have no TLS offload (kTLS), so TLS runs here, in
//! rustls: one [`ServerConnection`] per connection, behind a mutex shared
//! by the reading side (`stream.rs`: ciphertext from the socket in,
//! plaintext records out) and the writing side (`writer.rs`: reply bytes
//! in, ciphertext to the socket).

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use tokio::net::TcpStream;

/// The ALPN protocol id RPC-with-TLS peers must agree on (RFC 9289
/// section 5.2).
pub const ALPN_SUNRPC: &[u8] = b"sunrpc";

/// The verifier body of an accepted AUTH_TLS probe (RFC 9289 section 4.1).
pub const STARTTLS: &[u8; 8] = b"STARTTLS";

/// Plaintext encrypted at once by a writer: about the most ciphertext a
/// connection holds in memory beyond what its socket took.
pub(super) const ENCRYPT_CHUNK: usize = 128 << 10;

/// Largest plaintext of one TLS record, and what TLS 1.3 adds to each
/// (RFC 8446 section 5.2: a 5-byte header, the content type, a 16-byte
/// AEAD tag).
const RECORD_PLAINTEXT: usize = 16 << 10;
const RECORD_OVERHEAD: usize = 5 + 1 + 16;

/// The ciphertext of `plaintext` bytes at most (records as full as they
/// can be; a writer's records are, but for each write's last).
pub(super) fn ciphertext_len(plaintext: usize) -> usize {
    plaintext + plaintext.div_ceil(RECORD_PLAINTEXT).max(1) * RECORD_OVERHEAD
}

/// Ciphertext read from the socket at once (four TLS records).
const CIPHER_READ: usize = 64 << 10;

/// The TLS side of a server: what a handshake presents and checks. Cheap
/// to clone; clones are the same configuration, which
/// [`TlsConfig::replace`] changes for the handshakes that follow (a
/// reload's new certificate).
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ArcSwap<ServerConfig>>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("alpn_protocols", &self.config.load().alpn_protocols)
            .finish_non_exhaustive()
    }
}

/// Why TLS cannot be set up from the files given.
#[derive(Debug)]
pub struct TlsSetupError {
    pub file: std::path::PathBuf,
    pub reason: String,
}

impl fmt::Display for TlsSetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.reason)
    }
}

impl std::error::Error for TlsSetupError {}

impl TlsConfig {
    /// TLS 1.3 with ALPN `sunrpc`, presenting the certificate chain of the
    /// PEM file `certificate` (the server's first) with the private key of
    /// the PEM file `key`; with `client_ca`, a client that presents a
    /// certificate must have one signed by a CA of that PEM file (one that
    /// presents none is let through: exports say later what they need).
    pub fn from_pem_files(
        certificate: &Path,
        key: &Path,
        client_ca: Option<&Path>,
    ) -> Result<Self, TlsSetupError> {
        let error = |file: &Path, reason: String| TlsSetupError {
            file: file.to_path_buf(),
            reason,
        };
        let chain = read_certificates(certificate)?;
        let key_der = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| error(key, format!("cannot read a private key: {}", pem_reason(e))))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| error(certificate, e.to_string()))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in read_certificates(ca)? {
                    roots
                        .add(cert)
                        .map_err(|e| error(ca, format!("not a usable CA certificate: {e}")))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .allow_unauthenticated()
                        .build()
                        .map_err(|e| error(ca, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        // Checks that the key is the certificate's.
        let mut config = builder.with_single_cert(chain, key_der).map_err(|e| {
            error(
                key,
                format!(
                    "does not go with the certificate of {}: {e}",
                    certificate.display()
                ),
            )
        })?;
        config.alpn_protocols = vec![ALPN_SUNRPC.to_vec()];
        Ok(Self {
            config: Arc::new(ArcSwap::from_pointee(config)),
        })
    }

    /// From now on, handshakes (of this configuration and its clones) go
    /// as `other`'s do; connections in TLS already keep what they have.
    pub fn replace(&self, other: &TlsConfig) {
        self.config.store(other.config.load_full());
    }

    /// A new connection's TLS state, before its handshake.
    pub(super) fn accept(&self) -> Result<ServerConnection, rustls::Error> {
        let mut conn = ServerConnection::new(self.config.load_full())?;
        // Writers bound what they encrypt at once (`ENCRYPT_CHUNK`).
        conn.set_buffer_limit(None);
        Ok(conn)
    }
}

/// The certificates of the PEM file `file`, at least one.
fn read_certificates(file: &Path) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let error = |reason: String| TlsSetupError {
        file: file.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| error(format!("cannot read certificates: {}", pem_reason(e))))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(format!("cannot read certificates: {}", pem_reason(e))))?;
    if certs.is_empty() {
        return Err(error("no certificate in the file".into()));
    }
    Ok(certs)
}

fn pem_reason(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(e) => e.to_string(),
        rustls::pki_types::pem::Error::NoItemsFound => "no PEM item of that kind".into(),
        other => format!("{other:?}"),
    }
}

/// The TLS state of one connection after its handshake, shared by its
/// reading and writing sides.
pub(super) struct TlsSession {
    conn: Mutex<ServerConnection>,
    /// Ciphertext waits in `conn` for room in the socket.
    pending: AtomicBool,
}

impl TlsSession {
    pub(super) fn new(conn: ServerConnection) -> Self {
        let pending = conn.wants_write();
        Self {
            conn: Mutex::new(conn),
            pending: AtomicBool::new(pending),
        }
    }

    /// Whether ciphertext waits for room in the socket.
    pub(super) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Writes waiting ciphertext to `socket` without waiting; true when
    /// none is left. `to_socket` counts the bytes written.
    pub(super) fn flush(&self, socket: &TcpStream, to_socket: &AtomicU64) -> io::Result<bool> {
        let mut conn = self.conn.lock();
        let flushed = flush(&mut conn, socket, to_socket);
        self.pending.store(conn.wants_write(), Ordering::Release);
        flushed
    }

    /// Encrypts bytes of `slices` (at most [`ENCRYPT_CHUNK`]) and writes
    /// their ciphertext to `socket` as far as it takes it, without
    /// waiting; returns how many plaintext bytes were taken (the rest of
    /// their ciphertext waits in the session: [`Self::pending`]). Earlier
    /// ciphertext goes first: while the socket cannot take it all, nothing
    /// new is taken (`WouldBlock`), so at most one chunk waits in memory.
    pub(super) fn write_vectored(
        &self,
        socket: &TcpStream,
        slices: &[IoSlice<'_>],
        to_socket: &AtomicU64,
    ) -> io::Result<usize> {
        let mut conn = self.conn.lock();
        let result = (|| {
            if !flush(&mut conn, socket, to_socket)? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut chunk = Vec::with_capacity(slices.len());
            let mut left = ENCRYPT_CHUNK;
            for s in slices {
                if left == 0 {
                    break;
                }
                let take = s.len().min(left);
                chunk.push(IoSlice::new(&s[..take]));
                left -= take;
            }
            let n = conn.writer().write_vectored(&chunk)?;
            // What the socket does not take now waits (`pending`).
            match flush(&mut conn, socket, to_socket) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            Ok(n)
        })();
        self.pending.store(conn.wants_write(), Ordering::Release);
        result
    }

    /// Sends the TLS close_notify alert, as far as the socket takes it.
    pub(super) fn close(&self, socket: &TcpStream) {
        let mut conn = self.conn.lock();
        conn.send_close_notify();
        let _ = flush(&mut conn, socket, &AtomicU64::new(0));
    }
}

/// Writes `conn`'s ciphertext to `socket` until none is left (true) or
/// the socket is full (false).
fn flush(
    conn: &mut ServerConnection,
    socket: &TcpStream,
    to_socket: &AtomicU64,
) -> io::Result<bool> {
    while conn.wants_write() {
        match conn.write_tls(&mut SocketWriter(socket)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                to_socket.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// A socket as rustls's [`Write`]: non-blocking writes.
struct SocketWriter<'a>(&'a TcpStream);

impl Write for SocketWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The longest TLS 1.3 record on the wire (RFC 8446 section 5.2: a
/// 5-byte header and at most 2^14 + 256 bytes of ciphertext).
const MAX_WIRE_RECORD: usize = 5 + (16 << 10) + 256;

/// The length of the TLS record `buf` starts with, header included, if
/// `buf` holds all of it; a header claiming more than a record can hold is
/// taken as it is (rustls refuses it).
fn whole_record(buf: &[u8]) -> Option<usize> {
    let header = buf.get(..5)?;
    let len = 5 + usize::from(u16::from_be_bytes([header[3], header[4]]));
    if len > MAX_WIRE_RECORD {
        return Some(buf.len());
    }
    (buf.len() >= len).then_some(len)
}

/// Feeds rustls the whole TLS record `record` and processes it. Fed
/// record by record, rustls holds no part of a record it has not
/// decrypted: every ciphertext byte not yet decrypted is in the caller's
/// buffer, where waits for a payload count it.
fn feed_record(
    conn: &mut ServerConnection,
    mut record: &[u8],
) -> io::Result<Result<(), rustls::Error>> {
    while !record.is_empty() {
        if conn.read_tls(&mut record)? == 0 {
            break;
        }
    }
    Ok(conn.process_new_packets().map(|_| ()))
}

/// The reading side's part of a TLS connection (held by `CallReader`):
/// the session, and ciphertext read from the socket that rustls has not
/// taken yet (at most the start of the record after those it took).
pub(super) struct TlsReader {
    pub(super) session: Arc<TlsSession>,
    cipher: Box<[u8]>,
    pos: usize,
    end: usize,
    /// The socket reached its end.
    eof: bool,
}

/// What [`TlsReader::read_plaintext`] found.
pub(super) enum PlainRead {
    /// Bytes were copied into the buffer (0: the end of the stream).
    Read(usize),
    /// Nothing decrypted and no whole record left: read the socket.
    NeedCiphertext,
}

impl TlsReader {
    /// The reading side of `session`, starting with the ciphertext
    /// `early` that came with the handshake's last flight.
    pub(super) fn new(session: Arc<TlsSession>, early: Vec<u8>) -> Self {
        let mut cipher = vec![0; CIPHER_READ.max(early.len())].into_boxed_slice();
        cipher[..early.len()].copy_from_slice(&early);
        Self {
            session,
            cipher,
            pos: 0,
            end: early.len(),
            eof: false,
        }
    }

    /// Copies decrypted bytes into `out`, feeding rustls the whole
    /// records already read as long as it has none; says when the socket
    /// must be read. `wants_write` is set if rustls has something to send
    /// (a KeyUpdate's answer, an alert).
    pub(super) fn read_plaintext(
        &mut self,
        out: &mut [u8],
        wants_write: &mut bool,
    ) -> io::Result<PlainRead> {
        let mut conn = self.session.conn.lock();
        loop {
            match conn.reader().read(out) {
                Ok(n) => return Ok(PlainRead::Read(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed TCP without close_notify: record marking
                // tells a record cut short, so this is an end like any.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    return Ok(PlainRead::Read(0))
                }
                Err(e) => return Err(e),
            }
            let buffered = &self.cipher[self.pos..self.end];
            let fed = match whole_record(buffered) {
                Some(len) => {
                    let fed = feed_record(&mut conn, &buffered[..len])?;
                    self.pos += len;
                    fed
                }
                None if !self.eof => return Ok(PlainRead::NeedCiphertext),
                None => {
                    // The end: what is left, then the end itself.
                    let _ = feed_record(&mut conn, buffered)?;
                    self.pos = self.end;
                    conn.read_tls(&mut io::empty())?;
                    let state = conn.process_new_packets().map(|_| ());
                    *wants_write |= conn.wants_write();
                    state.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    return match conn.reader().read(out) {
                        Ok(n) => Ok(PlainRead::Read(n)),
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::UnexpectedEof
                            ) =>
                        {
                            Ok(PlainRead::Read(0))
                        }
                        Err(e) => Err(e),
                    };
                }
            };
            *wants_write |= conn.wants_write();
            fed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }

    /// The buffer the next ciphertext is read into: after what is kept of
    /// a record not yet whole (moved to the start).
    pub(super) fn cipher_space(&mut self) -> &mut [u8] {
        self.cipher.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        &mut self.cipher[self.end..]
    }

    /// `n` bytes were read into [`Self::cipher_space`] (0: end of stream).
    pub(super) fn cipher_read(&mut self, n: usize) {
        self.end += n;
        if n == 0 {
            self.eof = true;
        }
    }

    /// Plaintext bytes that can be read without the socket, as far as
    /// known: those decrypted, and the ciphertext read and not yet
    /// decrypted (a little more than the plaintext in it). Exact but for
    /// that: rustls holds no undecrypted part of a record
    /// ([`feed_record`]).
    pub(super) fn buffered(&self) -> usize {
        let mut conn = self.session.conn.lock();
        let plaintext = conn
            .process_new_packets()
            .map_or(0, |s| s.plaintext_bytes_to_read());
        plaintext + (self.end - self.pos)
    }
}

/// Runs the server side of a TLS handshake on `socket`, starting with the
/// ciphertext `early` (already read from it), until it completes or
/// fails; no timeout of its own. Returns the connection and the
/// ciphertext read past the handshake (the client's first records may
/// come with its last flight), fed to rustls record by record so that
/// none of it is left half-taken in the session.
pub(super) async fn handshake(
    mut conn: ServerConnection,
    socket: &TcpStream,
    early: Vec<u8>,
    to_socket: &AtomicU64,
) -> Result<(ServerConnection, Vec<u8>), HandshakeError> {
    let mut input = early;
    let mut buf = vec![0u8; 16 << 10];
    loop {
        // Feed the whole records read; then send what rustls has to say.
        let mut fed = 0;
        while conn.is_handshaking() {
            let Some(len) = whole_record(&input[fed..]) else {
                break;
            };
            let processed =
                feed_record(&mut conn, &input[fed..fed + len]).map_err(HandshakeError::Io)?;
            fed += len;
            if let Err(e) = processed {
                // The alert that says why, as far as the socket takes it.
                let _ = flush(&mut conn, socket, to_socket);
                return Err(HandshakeError::Tls(e));
            }
        }
        input.drain(..fed);
        loop {
            match flush(&mut conn, socket, to_socket) {
                Ok(true) => break,
                Ok(false) => socket.writable().await.map_err(HandshakeError::Io)?,
                Err(e) => return Err(HandshakeError::Io(e)),
            }
        }
        if !conn.is_handshaking() {
            return Ok((conn, input));
        }
        if input.len() > MAX_WIRE_RECORD {
            return Err(HandshakeError::Io(io::ErrorKind::InvalidData.into()));
        }
        socket.readable().await.map_err(HandshakeError::Io)?;
        match socket.try_read(&mut buf) {
            Ok(0) => return Err(HandshakeError::Eof),
            Ok(n) => input.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(HandshakeError::Io(e)),
        }
    }
}

/// Why a handshake did not complete.
#[derive(Debug)]
pub enum HandshakeError {
    /// The peer closed the connection.
    Eof,
    /// The socket failed.
    Io(io::Error),
    /// TLS refused the peer (no ClientHello, no common ALPN, a client
    /// certificate that does not verify...).
    Tls(rustls::Error),
    /// The handshake took longer than `ConnLimits::handshake_timeout`.
    TimedOut(std::time::Duration),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Eof => f.write_str("peer closed the connection"),
            HandshakeError::Io(e) => write!(f, "socket error: {e}"),
            HandshakeError::Tls(e) => write!(f, "{e}"),
            HandshakeError::TimedOut(t) => write!(f, "not done in {}s", t.as_secs_f64()),
        }
    }
}
