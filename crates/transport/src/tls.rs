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
//! The host kernel may have no TLS offload (kTLS), so TLS runs here:
//! rustls runs the handshake ([`handshake`]) and keeps the secrets, and
//! the records after it are sealed and opened as kTLS would
//! (`records.rs`): the reading side (`stream.rs`: ciphertext from the
//! socket in, plaintext records out) and the writing side (`writer.rs`:
//! reply bytes in, ciphertext to the socket) each with its own keys, so
//! neither waits for the other.

mod records;

use std::fmt;
use std::io::{self, IoSlice};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use rustls::kernel::KernelConnection;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection, WebPkiClientVerifier};
use rustls::unbuffered::{ConnectionState, EncodeError, InsufficientSizeError};
use rustls::{RootCertStore, ServerConfig};
use tokio::net::TcpStream;

use records::{Keys, Plaintext, ALERT, APPLICATION_DATA, HANDSHAKE};

/// The ALPN protocol id RPC-with-TLS peers must agree on (RFC 9289
/// section 5.2).
pub const ALPN_SUNRPC: &[u8] = b"sunrpc";

/// The verifier body of an accepted AUTH_TLS probe (RFC 9289 section 4.1).
pub const STARTTLS: &[u8; 8] = b"STARTTLS";

/// Plaintext encrypted at once by a writer: about the most ciphertext a
/// connection holds in memory beyond what its socket took.
pub(super) const ENCRYPT_CHUNK: usize = 128 << 10;

/// The ciphertext of `plaintext` bytes at most (records as full as they
/// can be; a writer's records are, but for each write's last).
pub(super) fn ciphertext_len(plaintext: usize) -> usize {
    plaintext + plaintext.div_ceil(records::MAX_PLAINTEXT).max(1) * records::OVERHEAD
}

/// Ciphertext read from the socket at once (four TLS records).
const CIPHER_READ: usize = 64 << 10;

/// Ciphertext read at once for a read of that much plaintext or more (a
/// large WRITE's payload): the reading buffer grows to this the first
/// time, so such a payload takes a few `recv`s rather than one per four
/// records, and the part of a record moved to the front of the buffer
/// after each is a smaller share of it.
const CIPHER_READ_LARGE: usize = 256 << 10;

/// The TLS side of a server: what a handshake presents and checks, or
/// that probes are refused ([`TlsConfig::off`]). Cheap to clone; clones
/// are the same configuration, which [`TlsConfig::replace`] and
/// [`TlsConfig::turn_off`] change for the probes and handshakes that
/// follow (a reload's new certificate, or `[tls]` added or removed).
#[derive(Clone)]
pub struct TlsConfig {
    config: Arc<ArcSwapOption<ServerConfig>>,
    /// Records a connection sends under one key, if not as the cipher
    /// suite's confidentiality limit says (tests).
    rekey_after: Option<u64>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = self.config.load();
        f.debug_struct("TlsConfig")
            .field(
                "alpn_protocols",
                &config.as_ref().map(|c| &c.alpn_protocols),
            )
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
        let provider = Arc::new(provider());
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
        // The records after the handshake are sealed here (`records`),
        // with the secrets rustls hands over; rustls could not send
        // session tickets then, and resumption has little to save on
        // connections that live as long as a mount.
        config.enable_secret_extraction = true;
        config.send_tls13_tickets = 0;
        // The server's order of cipher suites (`provider`), not the
        // client's.
        config.ignore_client_order = true;
        Ok(Self {
            config: Arc::new(ArcSwapOption::from_pointee(config)),
            rekey_after: None,
        })
    }

    /// A configuration that refuses probes (as a server without TLS does)
    /// until [`Self::replace`] gives it a certificate.
    pub fn off() -> Self {
        Self {
            config: Arc::new(ArcSwapOption::empty()),
            rekey_after: None,
        }
    }

    /// Whether probes are answered.
    pub fn is_on(&self) -> bool {
        self.config.load().is_some()
    }

    /// From now on, handshakes (of this configuration and its clones) go
    /// as `other`'s do, or probes are refused if `other` is off;
    /// connections in TLS already keep what they have.
    pub fn replace(&self, other: &TlsConfig) {
        self.config.store(other.config.load_full());
    }

    /// From now on probes are refused; connections in TLS keep it.
    pub fn turn_off(&self) {
        self.config.store(None);
    }

    /// Connections of this configuration change their sending keys
    /// every `records` records (a test of KeyUpdate).
    #[cfg(test)]
    pub(crate) fn rekey_after(mut self, records: u64) -> Self {
        self.rekey_after = Some(records);
        self
    }

    /// A new connection's TLS state, before its handshake.
    pub(super) fn accept(&self) -> Result<UnbufferedServerConnection, rustls::Error> {
        // Turned off since the probe was answered: as a failed handshake.
        let config = self
            .config
            .load_full()
            .ok_or_else(|| rustls::Error::General("TLS was turned off by a reload".into()))?;
        UnbufferedServerConnection::new(config)
    }
}

/// rustls's aws-lc-rs crypto, with the cipher suites in the server's order
/// of preference: AES-128-GCM first, the suite every TLS 1.3 peer has
/// (RFC 8446 section 9.1) and the cheapest per byte on CPUs with AES
/// instructions (a quarter less than AES-256-GCM here), then
/// AES-256-GCM, then ChaCha20-Poly1305.
fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::aws_lc_rs::{cipher_suite, default_provider};
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..default_provider()
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

/// The TLS state of one connection after its handshake: the writing
/// side's keys and ciphertext (the reading side's are its own, in
/// [`TlsReader`]), and rustls's secrets for key updates.
pub(super) struct TlsSession {
    tx: Mutex<Tx>,
    /// Ciphertext waits for room in the socket, or a KeyUpdate is to be
    /// sent.
    pending: AtomicBool,
    /// Derives the next traffic keys of either direction (KeyUpdate).
    secrets: Mutex<KernelConnection<ServerConnectionData>>,
    /// Records sealed with one key before the writer moves to the next:
    /// below the cipher suite's confidentiality limit.
    rekey_after: u64,
}

/// The writing side: its keys, and its ciphertext buffer (one chunk's
/// records), of which `start..end` is not yet in the socket.
struct Tx {
    keys: Keys,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The client asked for a KeyUpdate (or the keys reached
    /// `rekey_after`): the next records go under new keys.
    update: bool,
}

impl Tx {
    fn pending(&self) -> bool {
        self.start < self.end || self.update
    }

    /// Seals `plaintext` of type `content` as one record after the
    /// ciphertext already in the buffer.
    fn seal(&mut self, content: u8, plaintext: Plaintext<'_>) -> io::Result<()> {
        let n = records::seal(
            &mut self.keys,
            content,
            plaintext,
            &mut self.buf[self.end..],
        )?;
        self.end += n;
        Ok(())
    }

    /// Writes waiting ciphertext to `socket` until none is left (true) or
    /// the socket is full (false).
    fn flush(&mut self, socket: &TcpStream, to_socket: &AtomicU64) -> io::Result<bool> {
        while self.start < self.end {
            match socket.try_write(&self.buf[self.start..self.end]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.start += n;
                    to_socket.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        (self.start, self.end) = (0, 0);
        Ok(true)
    }

    /// If due, a KeyUpdate under the present keys, then the next keys
    /// (RFC 8446 section 4.6.3); the buffer must be empty.
    fn update_keys(
        &mut self,
        secrets: &Mutex<KernelConnection<ServerConnectionData>>,
        rekey_after: u64,
    ) -> io::Result<()> {
        if !self.update && self.keys.seq() < rekey_after {
            return Ok(());
        }
        // msg_type key_update (24), length 1, update_not_requested.
        self.seal(HANDSHAKE, Plaintext::One(&[24, 0, 0, 1, 0]))?;
        let next = secrets.lock().update_tx_secret().map_err(tls_error)?;
        self.keys = Keys::new(next)?;
        self.update = false;
        Ok(())
    }

    /// Seals up to [`ENCRYPT_CHUNK`] bytes of `slices` as records of up
    /// to 16 KiB: a record within one slice from the slice itself, one
    /// across slices copied together first. Returns the bytes taken.
    fn seal_slices(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let total = slices
            .iter()
            .map(|s| s.len())
            .sum::<usize>()
            .min(ENCRYPT_CHUNK);
        let (mut at, mut offset) = (0, 0);
        let mut left = total;
        while left > 0 {
            let n = left.min(records::MAX_PLAINTEXT);
            while slices[at].len() == offset {
                (at, offset) = (at + 1, 0);
            }
            let here = &slices[at][offset..];
            if here.len() >= n {
                self.seal(APPLICATION_DATA, Plaintext::One(&here[..n]))?;
                offset += n;
            } else {
                let mut fill = |out: &mut [u8]| {
                    let mut filled = 0;
                    while filled < out.len() {
                        let piece = &slices[at][offset..];
                        let take = piece.len().min(out.len() - filled);
                        out[filled..filled + take].copy_from_slice(&piece[..take]);
                        filled += take;
                        offset += take;
                        if offset == slices[at].len() && filled < out.len() {
                            (at, offset) = (at + 1, 0);
                        }
                    }
                };
                self.seal(APPLICATION_DATA, Plaintext::Gathered(n, &mut fill))?;
            }
            left -= n;
        }
        Ok(total)
    }
}

/// Room for a chunk's records and a KeyUpdate before them.
const TX_BUFFER: usize = ENCRYPT_CHUNK
    + ENCRYPT_CHUNK.div_ceil(records::MAX_PLAINTEXT) * records::OVERHEAD
    + 2 * records::OVERHEAD
    + 8;

impl TlsSession {
    /// Whether ciphertext waits for room in the socket (or a KeyUpdate
    /// to be sent).
    pub(super) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Writes waiting ciphertext (and a KeyUpdate due) to `socket`
    /// without waiting; true when none is left. `to_socket` counts the
    /// bytes written.
    pub(super) fn flush(&self, socket: &TcpStream, to_socket: &AtomicU64) -> io::Result<bool> {
        let mut tx = self.tx.lock();
        let flushed = (|| {
            if !tx.flush(socket, to_socket)? {
                return Ok(false);
            }
            tx.update_keys(&self.secrets, self.rekey_after)?;
            tx.flush(socket, to_socket)
        })();
        self.pending.store(tx.pending(), Ordering::Release);
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
        let mut tx = self.tx.lock();
        let result = (|| {
            if !tx.flush(socket, to_socket)? {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            tx.update_keys(&self.secrets, self.rekey_after)?;
            let n = tx.seal_slices(slices)?;
            // What the socket does not take now waits (`pending`).
            tx.flush(socket, to_socket)?;
            Ok(n)
        })();
        self.pending.store(tx.pending(), Ordering::Release);
        result
    }

    /// Sends the TLS close_notify alert, as far as the socket takes it.
    pub(super) fn close(&self, socket: &TcpStream) {
        let mut tx = self.tx.lock();
        let counted = AtomicU64::new(0);
        if tx.flush(socket, &counted).unwrap_or(false) {
            // Level warning, description close_notify.
            let _ = tx.seal(ALERT, Plaintext::One(&[1, 0]));
            let _ = tx.flush(socket, &counted);
        }
    }

    /// The client asked for new keys of the server's records too.
    fn request_update(&self) {
        self.tx.lock().update = true;
        self.pending.store(true, Ordering::Release);
    }
}

/// The reading side's part of a TLS connection (held by `CallReader`):
/// its keys, and ciphertext read from the socket not yet opened (whole
/// records, then the start of one). A record is opened into the reader's
/// buffer when it has room for all its plaintext, and in place
/// otherwise, its plaintext then read from `plain` (a range of `cipher`
/// before `pos`).
pub(super) struct TlsReader {
    session: Arc<TlsSession>,
    keys: Keys,
    cipher: Box<[u8]>,
    plain: (usize, usize),
    pos: usize,
    end: usize,
    /// The socket reached its end.
    eof: bool,
    /// The client sent close_notify.
    closed: bool,
}

/// What [`TlsReader::read_plaintext`] found.
pub(super) enum PlainRead {
    /// Bytes were copied into the buffer (0: the end of the stream).
    Read(usize),
    /// Nothing decrypted and no whole record left: read the socket.
    NeedCiphertext,
}

impl TlsReader {
    /// Copies plaintext into `out`, opening the whole records already
    /// read as long as none is open; says when the socket must be read.
    /// `wants_write` is set if the writer has something to send (the
    /// answer to a KeyUpdate).
    pub(super) fn read_plaintext(
        &mut self,
        out: &mut [u8],
        wants_write: &mut bool,
    ) -> io::Result<PlainRead> {
        loop {
            let (from, to) = self.plain;
            if from < to {
                let n = (to - from).min(out.len());
                out[..n].copy_from_slice(&self.cipher[from..from + n]);
                self.plain.0 += n;
                return Ok(PlainRead::Read(n));
            }
            if self.closed {
                return Ok(PlainRead::Read(0));
            }
            let Some(len) = records::whole_record(&self.cipher[self.pos..self.end])? else {
                if !self.eof {
                    return Ok(PlainRead::NeedCiphertext);
                }
                // The peer closed TCP without close_notify: record marking
                // tells a record cut short, so this is an end like any.
                if self.pos == self.end {
                    return Ok(PlainRead::Read(0));
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection ended inside a TLS record",
                ));
            };
            let record = self.pos..self.pos + len;
            self.pos += len;
            let direct = out.len() >= records::inner_len(&self.cipher[record.clone()]);
            let (content, n) = if direct {
                records::open_into(&mut self.keys, &self.cipher[record.clone()], out)?
            } else {
                records::open_in_place(&mut self.keys, &mut self.cipher[record.clone()])?
            };
            let at = record.start + records::HEADER;
            let body = if direct {
                &out[..n]
            } else {
                &self.cipher[at..at + n]
            };
            match content {
                APPLICATION_DATA if direct => {
                    if n > 0 {
                        return Ok(PlainRead::Read(n));
                    }
                }
                APPLICATION_DATA => self.plain = (at, at + n),
                ALERT => match body {
                    [_, 0] => {
                        self.closed = true;
                        return Ok(PlainRead::Read(0));
                    }
                    [_, description] => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("the client sent TLS alert {description}"),
                        ))
                    }
                    _ => return Err(invalid_data("a malformed TLS alert")),
                },
                HANDSHAKE => {
                    let update = key_update(body)?;
                    let next = self
                        .session
                        .secrets
                        .lock()
                        .update_rx_secret()
                        .map_err(tls_error)?;
                    self.keys = Keys::new(next)?;
                    if update == KeyUpdate::Requested {
                        self.session.request_update();
                        *wants_write = true;
                    }
                }
                _ => return Err(invalid_data("a TLS record of an unknown content type")),
            }
        }
    }

    /// The buffer the next ciphertext is read into, for a read of `want`
    /// bytes of plaintext: after what is kept (plaintext not yet read, a
    /// record not yet whole), moved to the start when less than
    /// [`CIPHER_READ`] is free after it; grown to [`CIPHER_READ_LARGE`]
    /// the first time `want` is that large.
    pub(super) fn cipher_space(&mut self, want: usize) -> &mut [u8] {
        let keep = if self.plain.0 < self.plain.1 {
            self.plain.0
        } else {
            self.plain = (0, 0);
            self.pos
        };
        if want >= CIPHER_READ_LARGE && self.cipher.len() < CIPHER_READ_LARGE {
            let mut larger = vec![0; CIPHER_READ_LARGE].into_boxed_slice();
            larger[..self.end - keep].copy_from_slice(&self.cipher[keep..self.end]);
            self.cipher = larger;
        } else if self.cipher.len() - self.end < CIPHER_READ || keep == self.end {
            self.cipher.copy_within(keep..self.end, 0);
        } else {
            return &mut self.cipher[self.end..];
        }
        if self.plain.1 > 0 {
            self.plain = (self.plain.0 - keep, self.plain.1 - keep);
        }
        self.pos -= keep;
        self.end -= keep;
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
    /// known: those opened, and the ciphertext read and not yet opened (a
    /// little more than the plaintext in it).
    pub(super) fn buffered(&self) -> usize {
        (self.plain.1 - self.plain.0) + (self.end - self.pos)
    }
}

/// What a post-handshake message from the client asks, if it is a
/// KeyUpdate, the only one a server takes (RFC 8446 section 4.6.3: alone
/// at the end of its record, since the keys change after it).
#[derive(PartialEq)]
enum KeyUpdate {
    NotRequested,
    Requested,
}

fn key_update(message: &[u8]) -> io::Result<KeyUpdate> {
    match message {
        [24, 0, 0, 1, 0] => Ok(KeyUpdate::NotRequested),
        [24, 0, 0, 1, 1] => Ok(KeyUpdate::Requested),
        [kind, ..] => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the client sent TLS handshake message {kind} after the handshake"),
        )),
        [] => Err(invalid_data("an empty TLS handshake record")),
    }
}

fn invalid_data(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// A connection whose handshake is done: rustls's record of it (ALPN,
/// the client's certificate), the client's records rustls opened with
/// its last flight, and the ciphertext read past them.
pub(super) struct Handshaken {
    pub(super) conn: UnbufferedServerConnection,
    plaintext: Vec<u8>,
    cipher: Vec<u8>,
}

impl Handshaken {
    /// The session's two sides: the writer's, and the reader's (which
    /// starts with what came with the handshake).
    pub(super) fn split(self, config: &TlsConfig) -> io::Result<(Arc<TlsSession>, TlsReader)> {
        let (secrets, kernel) = self
            .conn
            .dangerous_into_kernel_connection()
            .map_err(tls_error)?;
        let limit = kernel
            .negotiated_cipher_suite()
            .tls13()
            .ok_or_else(|| invalid_data("a TLS version other than 1.3"))?
            .common
            .confidentiality_limit;
        let rekey_after = config.rekey_after.unwrap_or(limit - limit / 8);
        let session = Arc::new(TlsSession {
            tx: Mutex::new(Tx {
                keys: Keys::new(secrets.tx)?,
                buf: vec![0; TX_BUFFER].into_boxed_slice(),
                start: 0,
                end: 0,
                update: false,
            }),
            pending: AtomicBool::new(false),
            secrets: Mutex::new(kernel),
            rekey_after,
        });
        let kept = self.plaintext.len() + self.cipher.len();
        let mut cipher = vec![0; CIPHER_READ.max(kept + records::MAX_WIRE)].into_boxed_slice();
        cipher[..self.plaintext.len()].copy_from_slice(&self.plaintext);
        cipher[self.plaintext.len()..kept].copy_from_slice(&self.cipher);
        let reader = TlsReader {
            session: session.clone(),
            keys: Keys::new(secrets.rx)?,
            cipher,
            plain: (0, self.plaintext.len()),
            pos: self.plaintext.len(),
            end: kept,
            eof: false,
            closed: false,
        };
        Ok((session, reader))
    }
}

/// Ciphertext a handshake reads from its socket at once: a TLS record.
const HANDSHAKE_READ: usize = 16 << 10;

/// Runs the server side of a TLS handshake on `socket`, starting with the
/// ciphertext `early` (already read from it), until it completes or
/// fails; no timeout of its own. The client's first records may come
/// with its last flight: those rustls opened, and the ciphertext after
/// them, go with the result.
pub(super) async fn handshake(
    mut conn: UnbufferedServerConnection,
    socket: &TcpStream,
    early: Vec<u8>,
    to_socket: &AtomicU64,
) -> Result<Handshaken, HandshakeError> {
    let mut input = early;
    let mut output = Vec::new();
    let mut plaintext = Vec::new();
    loop {
        let status = conn.process_tls_records(&mut input);
        let discard = status.discard;
        let mut read_more = false;
        match status.state {
            Err(e) => {
                // The alert that says why, as far as the socket takes it.
                if let Ok(ConnectionState::EncodeTlsData(mut alert)) =
                    conn.process_tls_records(&mut []).state
                {
                    let mut out = [0u8; 64];
                    if let Ok(n) = alert.encode(&mut out) {
                        let _ = socket.try_write(&out[..n]);
                    }
                }
                return Err(HandshakeError::Tls(e));
            }
            Ok(ConnectionState::EncodeTlsData(mut encode)) => loop {
                let at = output.len();
                output.resize(at + (16 << 10), 0);
                match encode.encode(&mut output[at..]) {
                    Ok(n) => {
                        output.truncate(at + n);
                        break;
                    }
                    Err(EncodeError::InsufficientSize(InsufficientSizeError { required_size })) => {
                        output.truncate(at);
                        output.reserve(required_size);
                    }
                    Err(e) => return Err(HandshakeError::Io(io::Error::other(e.to_string()))),
                }
            },
            Ok(ConnectionState::TransmitTlsData(transmit)) => {
                write_all(socket, &output, to_socket)
                    .await
                    .map_err(HandshakeError::Io)?;
                output.clear();
                transmit.done();
            }
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                while let Some(record) = traffic.next_record() {
                    let record = record.map_err(HandshakeError::Tls)?;
                    plaintext.extend_from_slice(record.payload);
                }
            }
            Ok(ConnectionState::WriteTraffic(_)) => {
                input.drain(..discard);
                return Ok(Handshaken {
                    conn,
                    plaintext,
                    cipher: input,
                });
            }
            Ok(ConnectionState::BlockedHandshake) => read_more = true,
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                return Err(HandshakeError::Eof)
            }
            Ok(other) => {
                return Err(HandshakeError::Io(io::Error::other(format!(
                    "unexpected TLS state {other:?}"
                ))))
            }
        }
        input.drain(..discard);
        if !read_more {
            continue;
        }
        if input.len() > records::MAX_WIRE {
            return Err(HandshakeError::Io(io::ErrorKind::InvalidData.into()));
        }
        socket.readable().await.map_err(HandshakeError::Io)?;
        // Read through a buffer on the stack, not one kept in the
        // handshake's future: a handshake that stalls (by the thousand,
        // from a hostile client) holds only what it was sent. Measured,
        // the server's memory per connection stalled half-way through its
        // ClientHello: 27 KiB with a 16 KiB buffer kept for the whole
        // handshake, 19 KiB so.
        let mut buf = [0u8; HANDSHAKE_READ];
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

/// Writes all of `bytes` to `socket`, waiting for room; counts them in
/// `to_socket`. (The handshake's flights, and the probe's reply
/// before it: `Shared::write_plain`.)
pub(super) async fn write_all(
    socket: &TcpStream,
    bytes: &[u8],
    to_socket: &AtomicU64,
) -> io::Result<()> {
    let mut sent = 0;
    while sent < bytes.len() {
        match socket.try_write(&bytes[sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                sent += n;
                to_socket.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => socket.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
