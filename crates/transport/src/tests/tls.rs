//! RPC-with-TLS (RFC 9289) through the toy program: the probe, the
//! handshake, calls and callbacks inside TLS, and what a client that gets
//! TLS wrong costs (its connection, nothing else). The client side is
//! rustls over a blocking socket, on a thread of its own.

use std::io::{Read, Write};
use std::net::TcpStream as StdStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_rpc::message::AUTH_TLS;
use dionfs_rpc::{read_record_blocking, OpaqueAuth};
use dionfs_xdr::Decode;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::*;

/// A CA, and a certificate it signed, with its key.
struct Issued {
    issuer: Arc<CertifiedIssuer<'static, KeyPair>>,
    ca: CertificateDer<'static>,
    ca_pem: String,
    cert: CertificateDer<'static>,
    cert_pem: String,
    key_der: Vec<u8>,
    key_pem: String,
}

/// A fresh CA and a certificate of its for `name` (a host name for a
/// server, anything for a client).
fn issue(name: &str) -> Issued {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    sign(
        Arc::new(ca),
        CertificateParams::new(vec![name.to_string()]).unwrap(),
    )
}

/// A certificate of `params` that `issuer` signed, with a fresh key.
fn sign(issuer: Arc<CertifiedIssuer<'static, KeyPair>>, params: CertificateParams) -> Issued {
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    Issued {
        ca: issuer.der().clone(),
        ca_pem: issuer.pem(),
        issuer,
        cert: cert.der().clone(),
        cert_pem: cert.pem(),
        key_der: key.serialize_der(),
        key_pem: key.serialize_pem(),
    }
}

impl Issued {
    /// Another certificate of the same CA, of `params`.
    fn sibling(&self, params: CertificateParams) -> Issued {
        sign(self.issuer.clone(), params)
    }
}

/// The server's files in `dir`: certificate, key and, if given, the CA of
/// client certificates.
fn server_files(dir: &Path, server: &Issued, client_ca: Option<&Issued>) -> TlsConfig {
    let write = |name: &str, text: &str| -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cert = write("server.pem", &server.cert_pem);
    let key = write("server.key", &server.key_pem);
    let ca = client_ca.map(|c| write("client-ca.pem", &c.ca_pem));
    TlsConfig::from_pem_files(&cert, &key, ca.as_deref()).unwrap()
}

/// A client trusting `server`'s CA, offering `alpn`, presenting
/// `certificate` if given.
fn client_config(
    server: &Issued,
    alpn: &[&[u8]],
    certificate: Option<&Issued>,
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(server.ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match certificate {
        None => builder.with_no_client_auth(),
        Some(c) => builder
            .with_client_auth_cert(
                vec![c.cert.clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key_der.clone())),
            )
            .unwrap(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// An AUTH_TLS NULL call of the toy program.
fn probe_call(xid: u32, proc_: u32) -> Vec<u8> {
    encode_call(
        xid,
        ECHO_PROG,
        ECHO_VERS,
        proc_,
        &Credential::Unsupported(AUTH_TLS),
    )
}

/// Connects, sends the probe and returns its reply's header.
fn probe(addr: SocketAddr) -> (StdStream, ReplyHeader) {
    let mut socket = connect(addr);
    socket
        .write_all(&framed(&probe_call(1, PROC_NULL)))
        .unwrap();
    let reply = read_record_blocking(&mut socket, 1 << 20).unwrap();
    (socket, ReplyHeader::from_xdr(&reply).unwrap())
}

/// A blocking connection to `addr` whose reads give up after 10 s.
fn connect(addr: SocketAddr) -> StdStream {
    let socket = StdStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    socket
}

/// The reply header that accepts a probe.
fn starttls(xid: u32) -> ReplyHeader {
    ReplyHeader {
        xid,
        verf: OpaqueAuth {
            flavor: 0,
            body: b"STARTTLS".to_vec(),
        },
        status: ReplyStatus::Success,
    }
}

/// A blocking RPC client inside TLS.
struct TlsClient {
    tls: StreamOwned<ClientConnection, StdStream>,
}

impl TlsClient {
    /// Probes, checks the STARTTLS reply, and completes the handshake.
    fn connect(addr: SocketAddr, config: Arc<ClientConfig>) -> std::io::Result<Self> {
        let (mut socket, reply) = probe(addr);
        assert_eq!(reply, starttls(1));
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(config, name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut socket)?;
        }
        Ok(Self {
            tls: StreamOwned::new(conn, socket),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.tls.write_all(bytes)?;
        self.tls.flush()
    }

    /// The next record's message.
    fn record(&mut self) -> std::io::Result<Vec<u8>> {
        read_record_blocking(&mut self.tls, 1 << 24)
    }

    /// The next reply: its header and the bytes after it.
    fn reply(&mut self) -> std::io::Result<(ReplyHeader, Vec<u8>)> {
        let msg = self.record()?;
        let mut d = Decoder::new(&msg);
        let header = ReplyHeader::decode(&mut d).unwrap();
        Ok((header, d.rest().to_vec()))
    }

    fn echo(&mut self, xid: u32, data: &[u8]) -> Vec<u8> {
        self.send(&framed(&echo_call(xid, data))).unwrap();
        self.echo_reply(xid)
    }

    fn echo_reply(&mut self, xid: u32) -> Vec<u8> {
        let (header, rest) = self.reply().unwrap();
        assert_eq!((header.xid, header.status), (xid, ReplyStatus::Success));
        let mut d = Decoder::new(&rest);
        d.opaque_var(MAX_ECHO).unwrap().to_vec()
    }

    /// Whether the server has closed the connection (or failed it).
    fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.tls.read(&mut byte), Ok(0) | Err(_))
    }
}

/// Runs `f` on a blocking thread (the client side is blocking).
async fn client<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// A server with TLS, its files in a temporary directory.
async fn tls_server(limits: ConnLimits, client_ca: Option<&Issued>) -> (Server, Issued) {
    let dir = tempfile::tempdir().unwrap();
    let issued = issue("localhost");
    let tls = server_files(dir.path(), &issued, client_ca);
    let server = start(ConnLimits {
        tls: Some(tls),
        ..limits
    })
    .await;
    (server, issued)
}

/// A POOL or PAYLOAD echo call of `data`.
fn pool_echo_call(xid: u32, proc_: u32, data: &[u8]) -> Vec<u8> {
    let msg = encode_call(xid, ECHO_PROG, ECHO_VERS, proc_, &Credential::None);
    let mut enc = Encoder::from_vec(msg);
    enc.u32(data.len() as u32);
    let mut msg = enc.into_vec();
    msg.extend_from_slice(data);
    msg
}

#[tokio::test]
async fn probe_handshake_then_calls_round_trip_inside_tls() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        // NULL inside TLS.
        let null = encode_call(2, ECHO_PROG, ECHO_VERS, PROC_NULL, &Credential::None);
        c.send(&framed(&null)).unwrap();
        let (h, rest) = c.reply().unwrap();
        assert_eq!((h.xid, h.status), (2, ReplyStatus::Success));
        assert!(rest.is_empty());
        // Larger than a TLS record and than what a writer encrypts at
        // once, both ways.
        let big: Vec<u8> = (0..300_001u32).map(|i| (i * 7) as u8).collect();
        assert!(c.echo(3, &big) == big, "300,001 bytes echoed");
        // A payload waited for (`wait_for_payload`) and read into a pool
        // buffer.
        let payload: Vec<u8> = (0..100_003u32).map(|i| (i % 251) as u8).collect();
        c.send(&framed(&pool_echo_call(4, PROC_PAYLOAD_ECHO, &payload)))
            .unwrap();
        assert!(c.echo_reply(4) == payload, "payload echoed");
    })
    .await;
    assert!(server.echo.buffers_out() == 0);
}

/// Records cut across TLS records (fragments of 7 bytes, each written as
/// a TLS record of its own), and TLS records holding several RPC records
/// and the whole of a payload: what rustls has decrypted is never waited
/// for on the socket (with it, the payload below would wait for the stall
/// timeout).
#[tokio::test]
async fn records_split_across_and_packed_into_tls_records() {
    let limits = ConnLimits {
        stall_timeout: Duration::from_secs(30),
        ..ConnLimits::default()
    };
    let (server, issued) = tls_server(limits, None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        let data: Vec<u8> = (0..1001u32).map(|i| i as u8).collect();
        for piece in fragmented(&echo_call(5, &data), 7).chunks(3) {
            c.send(piece).unwrap();
        }
        assert_eq!(c.echo_reply(5), data);
        // Three calls in one TLS record, the last one a payload the
        // reader's own buffer cannot hold: its rest is in rustls only.
        let payload = vec![0xa5u8; 10_000];
        let mut burst = framed(&echo_call(6, b"first"));
        burst.extend(framed(&echo_call(7, b"second")));
        burst.extend(framed(&pool_echo_call(8, PROC_PAYLOAD_ECHO, &payload)));
        let start = Instant::now();
        c.send(&burst).unwrap();
        let mut got = Vec::new();
        for _ in 0..3 {
            let (h, rest) = c.reply().unwrap();
            assert_eq!(h.status, ReplyStatus::Success);
            let mut d = Decoder::new(&rest);
            got.push((h.xid, d.opaque_var(MAX_ECHO).unwrap().to_vec()));
        }
        got.sort();
        assert_eq!(
            got,
            [
                (6, b"first".to_vec()),
                (7, b"second".to_vec()),
                (8, payload)
            ]
        );
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "waited {:?} for bytes already decrypted",
            start.elapsed()
        );
    })
    .await;
}

/// The back channel's calls on a TLS connection go out inside TLS, and
/// their replies come back through it.
#[tokio::test]
async fn callbacks_go_out_inside_tls() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        c.send(&framed(&call_back_call(9, 5000, b"ping"))).unwrap();
        let msg = c.record().unwrap();
        let mut d = Decoder::new(&msg);
        let header = CallHeader::decode(&mut d).unwrap();
        let (cb, data) = callback_of(&header, d.rest());
        assert_eq!(data, b"ping");
        let mut enc = Encoder::new();
        reply::accepted_success(&mut enc, cb);
        enc.opaque_var(b"pong");
        c.send(&framed(&enc.into_vec())).unwrap();
        let (h, rest) = c.reply().unwrap();
        let (xid, outcome, results) = call_back_outcome(&h, &rest);
        assert_eq!((xid, outcome), (9, CallbackOutcome::Success));
        assert_eq!(results, b"pong");
    })
    .await;
}

/// A client that sends its ClientHello with the probe, without waiting
/// for the STARTTLS reply: the bytes the record reader read past the probe
/// go to the handshake.
#[tokio::test]
async fn a_client_hello_sent_with_the_probe_is_taken() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut socket = connect(addr);
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(config, name).unwrap();
        let mut both = framed(&probe_call(1, PROC_NULL));
        conn.write_tls(&mut both).unwrap();
        socket.write_all(&both).unwrap();
        let reply = read_record_blocking(&mut socket, 1 << 20).unwrap();
        assert_eq!(ReplyHeader::from_xdr(&reply).unwrap(), starttls(1));
        while conn.is_handshaking() {
            conn.complete_io(&mut socket).unwrap();
        }
        let mut c = TlsClient {
            tls: StreamOwned::new(conn, socket),
        };
        assert_eq!(c.echo(2, b"eager"), b"eager");
    })
    .await;
}

/// Without TLS configured a probe is refused as by a server that does not
/// know AUTH_TLS, and the connection goes on in plaintext.
#[tokio::test]
async fn a_probe_without_tls_configured_is_refused() {
    let server = start(ConnLimits::default()).await;
    let addr = server.addr;
    client(move || {
        let (mut socket, reply) = probe(addr);
        assert_eq!(reply.xid, 1);
        assert_eq!(reply.status, ReplyStatus::AuthError(AuthStat::BadCred));
        socket.write_all(&framed(&echo_call(2, b"plain"))).unwrap();
        let msg = read_record_blocking(&mut socket, 1 << 20).unwrap();
        let mut d = Decoder::new(&msg);
        let h = ReplyHeader::decode(&mut d).unwrap();
        assert_eq!((h.xid, h.status), (2, ReplyStatus::Success));
        assert_eq!(d.opaque_var(MAX_ECHO).unwrap(), b"plain");
    })
    .await;
}

/// A configuration that is off refuses probes as none does; once given a
/// certificate (a reload that adds `[tls]`) its probes are answered, on
/// connections opened before too; turned off again, probes are refused
/// and a connection in TLS goes on.
#[tokio::test]
async fn tls_turned_on_and_off_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let issued = issue("localhost");
    let running = TlsConfig::off();
    let server = start(ConnLimits {
        tls: Some(running.clone()),
        ..ConnLimits::default()
    })
    .await;
    let addr = server.addr;
    let on = server_files(dir.path(), &issued, None);
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let (mut before, reply) = probe(addr);
        assert_eq!(reply.status, ReplyStatus::AuthError(AuthStat::BadCred));
        running.replace(&on);
        assert!(running.is_on());
        before
            .write_all(&framed(&probe_call(2, PROC_NULL)))
            .unwrap();
        let reply = read_record_blocking(&mut before, 1 << 20).unwrap();
        assert_eq!(ReplyHeader::from_xdr(&reply).unwrap(), starttls(2));
        let mut inside = TlsClient::connect(addr, config).unwrap();
        running.turn_off();
        let (_, reply) = probe(addr);
        assert_eq!(reply.status, ReplyStatus::AuthError(AuthStat::BadCred));
        assert_eq!(inside.echo(3, b"still tls"), b"still tls");
    })
    .await;
}

/// AUTH_TLS is for NULL only, with an AUTH_NONE verifier, and only
/// before TLS: anything else is refused (as knfsd does) and the
/// connection goes on.
#[tokio::test]
async fn misplaced_auth_tls_calls_are_refused() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut socket = connect(addr);
        let mut bad_verifier = probe_call(3, PROC_NULL);
        // The verifier (last 8 bytes): AUTH_SYS flavor, empty.
        let at = bad_verifier.len() - 8;
        bad_verifier[at..at + 4].copy_from_slice(&1u32.to_be_bytes());
        for (call, stat) in [
            (probe_call(2, PROC_ECHO), AuthStat::BadCred),
            (bad_verifier, AuthStat::BadVerf),
        ] {
            socket.write_all(&framed(&call)).unwrap();
            let reply = read_record_blocking(&mut socket, 1 << 20).unwrap();
            let h = ReplyHeader::from_xdr(&reply).unwrap();
            assert_eq!(h.status, ReplyStatus::AuthError(stat));
        }
        socket.write_all(&framed(&echo_call(4, b"plain"))).unwrap();
        let msg = read_record_blocking(&mut socket, 1 << 20).unwrap();
        let h = ReplyHeader::decode(&mut Decoder::new(&msg)).unwrap();
        assert_eq!((h.xid, h.status), (4, ReplyStatus::Success));
        // Inside TLS, a second probe is refused; TLS goes on.
        let mut c = TlsClient::connect(addr, config).unwrap();
        c.send(&framed(&probe_call(5, PROC_NULL))).unwrap();
        let (h, _) = c.reply().unwrap();
        assert_eq!(h.status, ReplyStatus::AuthError(AuthStat::BadCred));
        assert_eq!(c.echo(6, b"still tls"), b"still tls");
    })
    .await;
}

/// RFC 9289 section 5.2: a client offering other ALPN ids gets no RPC
/// service over TLS.
#[tokio::test]
async fn a_client_offering_other_alpn_ids_is_refused() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"h2", b"http/1.1"], None);
    let refused = client(move || match TlsClient::connect(addr, config) {
        Err(_) => true,
        Ok(mut c) => {
            let _ = c.send(&framed(&echo_call(2, b"x")));
            c.closed()
        }
    })
    .await;
    assert!(refused, "a client offering only h2 and http/1.1 was served");
}

/// A client offering no ALPN at all is served, as knfsd serves it: the
/// Linux client's handshake agent (tlshd, ktls-utils 1.0) offers none,
/// though RFC 9289 section 5.2 asks clients for "sunrpc".
#[tokio::test]
async fn a_client_offering_no_alpn_is_served() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[], None);
    let echoed = client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        c.echo(2, b"no alpn")
    })
    .await;
    assert_eq!(echoed, b"no alpn");
}

/// Garbage instead of a ClientHello, or a handshake that stops half-way,
/// costs its connection only, the second after `handshake_timeout`.
#[tokio::test]
async fn a_bad_or_stalled_handshake_costs_only_its_connection() {
    let limits = ConnLimits {
        handshake_timeout: Duration::from_millis(500),
        ..ConnLimits::default()
    };
    let (server, issued) = tls_server(limits, None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        // Garbage: refused at once.
        let (mut garbage, _) = probe(addr);
        garbage.write_all(&[0x16, 3, 3, 0, 4, 1, 2, 3, 4]).unwrap();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut rest = Vec::new();
        let _ = garbage.read_to_end(&mut rest);
        // Stalled: nothing after the probe, or half a ClientHello.
        let (mut silent, _) = probe(addr);
        let (mut half, _) = probe(addr);
        let mut hello = Vec::new();
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(config.clone(), name).unwrap();
        conn.write_tls(&mut hello).unwrap();
        half.write_all(&hello[..hello.len() / 2]).unwrap();
        // Meanwhile another client is served.
        let mut good = TlsClient::connect(addr, config).unwrap();
        assert_eq!(good.echo(2, b"served"), b"served");
        let start = Instant::now();
        for stalled in [&mut silent, &mut half] {
            let mut rest = Vec::new();
            // Closed by the server (the read timeout is 10 s).
            stalled.read_to_end(&mut rest).unwrap();
        }
        let waited = start.elapsed();
        assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
        assert_eq!(good.echo(3, b"still served"), b"still served");
    })
    .await;
}

/// The handshake timeout bounds the whole handshake, unlike the stall
/// timeout, which a record that keeps coming never meets: a ClientHello
/// sent a byte at a time, each in time for the stall timeout, is closed
/// at the handshake timeout all the same. A record header claiming more
/// than a TLS record holds is refused at once. Each costs only its
/// connection, and counts as a failed handshake.
#[tokio::test]
async fn a_trickled_or_oversized_handshake_costs_only_its_connection() {
    let limits = ConnLimits {
        handshake_timeout: Duration::from_millis(800),
        stall_timeout: Duration::from_millis(400),
        ..ConnLimits::default()
    };
    let counters = limits.counters.clone();
    let (server, issued) = tls_server(limits, None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut good = TlsClient::connect(addr, config.clone()).unwrap();
        // A record of 2^16 - 1 bytes, past the 2^14 + 256 TLS allows.
        let (mut oversized, _) = probe(addr);
        oversized
            .write_all(&[0x16, 3, 3, 0xff, 0xff, 1, 0, 0])
            .unwrap();
        let start = Instant::now();
        let mut rest = Vec::new();
        let _ = oversized.read_to_end(&mut rest);
        assert!(
            start.elapsed() < Duration::from_millis(700),
            "refused at once"
        );
        // A ClientHello a byte every 100 ms.
        let (mut trickle, _) = probe(addr);
        let mut hello = Vec::new();
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(config, name).unwrap();
        conn.write_tls(&mut hello).unwrap();
        let start = Instant::now();
        let mut closed = false;
        for byte in &hello {
            if trickle.write_all(&[*byte]).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(good.echo(2, b"served"), b"served");
            if start.elapsed() > Duration::from_secs(3) {
                break;
            }
        }
        if !closed {
            trickle
                .set_read_timeout(Some(Duration::from_secs(3)))
                .unwrap();
            let mut rest = Vec::new();
            let _ = trickle.read_to_end(&mut rest);
        }
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(700) && waited < Duration::from_millis(2500),
            "closed after {waited:?}"
        );
        assert_eq!(good.echo(3, b"still served"), b"still served");
    })
    .await;
    wait_until_async(
        || counters.snapshot().tls_handshake_failures == 2,
        Duration::from_secs(5),
        "two failed handshakes counted",
    )
    .await;
}

/// With a client CA: a certificate it signed is accepted, one of another
/// CA refused, none at all let through (exports decide later).
#[tokio::test]
async fn client_certificates_are_verified_when_presented() {
    let clients = issue("client");
    let (server, issued) = tls_server(ConnLimits::default(), Some(&clients)).await;
    let addr = server.addr;
    let stranger = issue("client");
    let good = client_config(&issued, &[b"sunrpc"], Some(&clients));
    let bad = client_config(&issued, &[b"sunrpc"], Some(&stranger));
    let none = client_config(&issued, &[b"sunrpc"], None);
    let security = |xid| {
        framed(&encode_call(
            xid,
            ECHO_PROG,
            ECHO_VERS,
            PROC_SECURITY,
            &Credential::None,
        ))
    };
    client(move || {
        // What the calls see of each connection (ConnInfo::security).
        let mut plain = StdStream::connect(addr).unwrap();
        plain.write_all(&security(1)).unwrap();
        let msg = read_record_blocking(&mut plain, 1 << 20).unwrap();
        let mut d = Decoder::new(&msg);
        let h = ReplyHeader::decode(&mut d).unwrap();
        assert_eq!((h.xid, h.status), (1, ReplyStatus::Success));
        assert_eq!(d.opaque_var(MAX_ECHO).unwrap(), b"none");
        let mut c = TlsClient::connect(addr, good).unwrap();
        assert_eq!(c.echo(2, b"mtls"), b"mtls");
        c.send(&security(3)).unwrap();
        assert_eq!(c.echo_reply(3), b"mtls");
        let mut c = TlsClient::connect(addr, none).unwrap();
        assert_eq!(c.echo(2, b"anonymous"), b"anonymous");
        c.send(&security(3)).unwrap();
        assert_eq!(c.echo_reply(3), b"tls");
        // TLS 1.3: the server sees the client's certificate after the
        // client's side of the handshake is done; its alert comes next.
        let refused = match TlsClient::connect(addr, bad) {
            Err(_) => true,
            Ok(mut c) => c.send(&framed(&echo_call(2, b"x"))).is_err() || c.closed(),
        };
        assert!(refused, "a certificate of another CA was accepted");
    })
    .await;
}

/// What calls see of an mTLS client (`ConnInfo::certificate`): its
/// certificate's DNS names (in lower case) and URIs, and its SHA-256,
/// taken once at the handshake; nothing for a client without one.
#[tokio::test]
async fn calls_see_the_client_certificates_names_and_fingerprint() {
    let clients = issue("first.example");
    let mut params = CertificateParams::new(vec!["Client1.Example".to_string()]).unwrap();
    let uri = "spiffe://example.org/nfs/client1";
    params
        .subject_alt_names
        .push(SanType::URI(uri.try_into().unwrap()));
    let named = clients.sibling(params);
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, named.cert.as_ref());
    let hex: Vec<String> = digest.as_ref().iter().map(|b| format!("{b:02X}")).collect();
    let expected = format!("client1.example {uri} sha256 {}", hex.join(":"));
    let (server, issued) = tls_server(ConnLimits::default(), Some(&clients)).await;
    let addr = server.addr;
    let with = client_config(&issued, &[b"sunrpc"], Some(&named));
    let without = client_config(&issued, &[b"sunrpc"], None);
    let certificate = |xid| {
        framed(&encode_call(
            xid,
            ECHO_PROG,
            ECHO_VERS,
            PROC_CERTIFICATE,
            &Credential::None,
        ))
    };
    client(move || {
        let mut c = TlsClient::connect(addr, with).unwrap();
        c.send(&certificate(2)).unwrap();
        assert_eq!(String::from_utf8(c.echo_reply(2)).unwrap(), expected);
        let mut c = TlsClient::connect(addr, without).unwrap();
        c.send(&certificate(3)).unwrap();
        assert_eq!(c.echo_reply(3), b"");
    })
    .await;
}

/// Against a client CA: a certificate it signed gets through, and so does
/// no certificate at all (as `tls`: exports decide); an expired one and
/// one of another CA are refused at the handshake, each costing only its
/// own connection (a client in TLS meanwhile is served on), counted as
/// failed handshakes.
#[tokio::test]
async fn expired_and_foreign_certificates_cost_only_their_connection() {
    let clients = issue("good.example");
    let mut params = CertificateParams::new(vec!["expired.example".to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2020, 1, 2);
    let expired = clients.sibling(params);
    let stranger = issue("good.example");
    let limits = ConnLimits::default();
    let counters = limits.counters.clone();
    let (server, issued) = tls_server(limits, Some(&clients)).await;
    let addr = server.addr;
    let good = client_config(&issued, &[b"sunrpc"], Some(&clients));
    let refused = [
        client_config(&issued, &[b"sunrpc"], Some(&expired)),
        client_config(&issued, &[b"sunrpc"], Some(&stranger)),
    ];
    let none = client_config(&issued, &[b"sunrpc"], None);
    let security = |xid| {
        framed(&encode_call(
            xid,
            ECHO_PROG,
            ECHO_VERS,
            PROC_SECURITY,
            &Credential::None,
        ))
    };
    client(move || {
        let mut served = TlsClient::connect(addr, good.clone()).unwrap();
        served.send(&security(1)).unwrap();
        assert_eq!(served.echo_reply(1), b"mtls");
        for (i, config) in refused.into_iter().enumerate() {
            // TLS 1.3: the server sees the client's certificate after the
            // client's side of the handshake is done; its alert comes next.
            let refused = match TlsClient::connect(addr, config) {
                Err(_) => true,
                Ok(mut c) => c.send(&framed(&echo_call(2, b"x"))).is_err() || c.closed(),
            };
            assert!(refused, "certificate {i} accepted");
            assert_eq!(served.echo(3 + i as u32, b"on"), b"on");
        }
        let mut anonymous = TlsClient::connect(addr, none).unwrap();
        anonymous.send(&security(5)).unwrap();
        assert_eq!(anonymous.echo_reply(5), b"tls");
        let mut again = TlsClient::connect(addr, good).unwrap();
        assert_eq!(again.echo(6, b"good"), b"good");
    })
    .await;
    wait_until_async(
        || counters.snapshot().tls_handshake_failures == 2,
        Duration::from_secs(5),
        "two failed handshakes counted",
    )
    .await;
}

/// The start-up errors: a missing file, a file without the item, a key
/// that is not the certificate's.
#[test]
fn tls_files_are_checked_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let one = issue("localhost");
    let other = issue("localhost");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cert = write("cert.pem", &one.cert_pem);
    let key = write("key.pem", &one.key_pem);
    let other_key = write("other.pem", &other.key_pem);
    let missing = dir.path().join("missing.pem");
    assert!(TlsConfig::from_pem_files(&cert, &key, None).is_ok());
    let e = TlsConfig::from_pem_files(&missing, &key, None).unwrap_err();
    assert_eq!(e.file, missing);
    let e = TlsConfig::from_pem_files(&cert, &cert, None).unwrap_err();
    assert!(e.reason.contains("private key"), "{e}");
    let e = TlsConfig::from_pem_files(&key, &key, None).unwrap_err();
    assert!(e.reason.contains("certificate"), "{e}");
    let e = TlsConfig::from_pem_files(&cert, &other_key, None).unwrap_err();
    assert!(e.reason.contains("does not go with"), "{e}");
    let e = TlsConfig::from_pem_files(&cert, &key, Some(&missing)).unwrap_err();
    assert_eq!(e.file, missing);
}

/// KeyUpdate both ways (RFC 8446 section 4.6.3): a server whose keys
/// reach their limit (here every 4 records) sends a KeyUpdate and goes on
/// under the next keys; a client's KeyUpdate asking for the server's is
/// taken and answered. The client's record count of the server's keys,
/// at the end, says the server did change them.
#[tokio::test]
async fn key_updates_either_way_keep_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let issued = issue("localhost");
    let tls = server_files(dir.path(), &issued, None).rekey_after(4);
    let server = start(ConnLimits {
        tls: Some(tls),
        ..ConnLimits::default()
    })
    .await;
    let addr = server.addr;
    let mut config = (*client_config(&issued, &[b"sunrpc"], None)).clone();
    config.enable_secret_extraction = true;
    let config = Arc::new(config);
    client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        let big: Vec<u8> = (0..70_001u32).map(|i| (i * 13) as u8).collect();
        for xid in 0..10 {
            assert!(c.echo(xid, &big) == big, "echo {xid} after key updates");
            if xid == 4 {
                c.tls.conn.refresh_traffic_keys().unwrap();
            }
        }
        assert_eq!(c.echo(10, b"small"), b"small");
        // 11 replies of up to 5 records: far more than 4 records, had the
        // server kept its first keys.
        let secrets = c.tls.conn.dangerous_extract_secrets().unwrap();
        assert!(
            secrets.rx.0 <= 4,
            "server records under one key: {}",
            secrets.rx.0
        );
    })
    .await;
}

/// A record that does not decrypt, sent after the handshake, ends its
/// connection (bad_record_mac); another client is served on.
#[tokio::test]
async fn a_forged_record_costs_only_its_connection() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut forger = TlsClient::connect(addr, config.clone()).unwrap();
        let mut other = TlsClient::connect(addr, config).unwrap();
        assert_eq!(forger.echo(1, b"before"), b"before");
        let mut record = vec![23, 3, 3, 0, 40];
        record.extend((0..40u8).map(|i| i.wrapping_mul(37)));
        forger.tls.sock.write_all(&record).unwrap();
        assert!(forger.closed(), "a forged record was taken");
        assert_eq!(other.echo(2, b"served"), b"served");
    })
    .await;
}

/// A client's close_notify ends its connection as an end of stream: the
/// server closes it too.
#[tokio::test]
async fn a_close_notify_ends_the_connection() {
    let (server, issued) = tls_server(ConnLimits::default(), None).await;
    let addr = server.addr;
    let config = client_config(&issued, &[b"sunrpc"], None);
    client(move || {
        let mut c = TlsClient::connect(addr, config).unwrap();
        assert_eq!(c.echo(1, b"bye"), b"bye");
        c.tls.conn.send_close_notify();
        c.tls.flush().unwrap();
        let mut rest = Vec::new();
        // The server's own close_notify, then the end.
        let _ = c.tls.read_to_end(&mut rest);
        assert!(rest.is_empty());
        let mut raw = [0u8; 1];
        assert_eq!(c.tls.sock.read(&mut raw).unwrap(), 0, "not closed");
    })
    .await;
}

/// The server's order of cipher suites wins: AES-128-GCM for a client
/// that prefers AES-256-GCM (rustls's own order), and a client offering
/// only ChaCha20-Poly1305 gets it. The counters (metrics) see both
/// connections, and a handshake refused.
#[tokio::test]
async fn the_server_chooses_the_cipher_suite() {
    use rustls::crypto::aws_lc_rs::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    let limits = ConnLimits::default();
    let counters = limits.counters.clone();
    let (server, issued) = tls_server(limits, None).await;
    let other_alpn = client_config(&issued, &[b"h2"], None);
    let addr = server.addr;
    let default = client_config(&issued, &[b"sunrpc"], None);
    assert_eq!(
        default.crypto_provider().cipher_suites[0],
        TLS13_AES_256_GCM_SHA384
    );
    let mut provider = (**default.crypto_provider()).clone();
    provider.cipher_suites = vec![TLS13_CHACHA20_POLY1305_SHA256];
    let mut chacha = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates({
            let mut roots = RootCertStore::empty();
            roots.add(issued.ca.clone()).unwrap();
            roots
        })
        .with_no_client_auth();
    chacha.alpn_protocols = vec![b"sunrpc".to_vec()];
    let chacha = Arc::new(chacha);
    client(move || {
        let mut c = TlsClient::connect(addr, default).unwrap();
        assert_eq!(c.echo(1, b"aes"), b"aes");
        assert_eq!(
            c.tls.conn.negotiated_cipher_suite(),
            Some(TLS13_AES_128_GCM_SHA256)
        );
        let mut c = TlsClient::connect(addr, chacha).unwrap();
        assert_eq!(c.echo(2, b"chacha"), b"chacha");
        assert_eq!(
            c.tls.conn.negotiated_cipher_suite(),
            Some(TLS13_CHACHA20_POLY1305_SHA256)
        );
        let refused = match TlsClient::connect(addr, other_alpn) {
            Err(_) => true,
            Ok(mut c) => c.closed(),
        };
        assert!(refused);
    })
    .await;
    // The refused client may see the server's alert before the server
    // counts it.
    let counted = || {
        let seen = counters.snapshot();
        (
            seen.tls_connections,
            seen.mtls_connections,
            seen.tls_handshake_failures,
        )
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while counted() != (2, 0, 1) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counted(), (2, 0, 1));
}
