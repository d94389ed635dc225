//! The one RPC client: every call the server makes rather than answers
//! (NLM's GRANTED callbacks and `_RES` answers, SM_NOTIFY to a client's
//! statd, port mapper lookups, registration with the host's rpcbind).
//! Blocking, with deadlines that no peer can stretch: run it on blocking
//! threads.
//!
//! - [`tcp_call`] and [`udp_call`]: one call on a connection or socket of
//!   its own, from a reserved port on a given local address (the kernel's
//!   lockd matches GRANTED against the server address it used, and statd
//!   and lockd may insist on a privileged source port).
//! - [`Connection`]: several calls, one after the other, on one stream
//!   (rpcbind's local socket, or TCP).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use dionfs_rpc::{encode_call, framed, read_record_blocking, Credential, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder};

/// How long connecting, and each send, may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a reply over a stream may take to arrive whole, however it
/// trickles in.
const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// How long one UDP send waits for its reply, whatever else arrives.
const UDP_WAIT: Duration = Duration::from_secs(2);
/// Largest reply read.
const MAX_REPLY: usize = 64 << 10;

/// One procedure call: program, version, procedure, encoded arguments.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub args: &'a [u8],
}

/// A call message for `call` with a random xid (returned too).
fn message(call: &Call, cred: &Credential) -> (u32, Vec<u8>) {
    let mut b = [0; 4];
    let _ = getrandom::fill(&mut b);
    let xid = u32::from_ne_bytes(b);
    (xid, message_with_xid(xid, call, cred))
}

fn message_with_xid(xid: u32, call: &Call, cred: &Credential) -> Vec<u8> {
    let mut msg = encode_call(xid, call.prog, call.vers, call.proc_, cred);
    msg.extend_from_slice(call.args);
    msg
}

/// A UDP or TCP socket bound to a reserved port (below 1024) on `local`,
/// or, where none is free (or the process may not bind one), to any port
/// on it.
fn socket(local: IpAddr, udp: bool) -> io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, SockAddr, Socket, Type};
    let (ty, proto) = if udp {
        (Type::DGRAM, Protocol::UDP)
    } else {
        (Type::STREAM, Protocol::TCP)
    };
    let domain = Domain::for_address(SocketAddr::new(local, 0));
    let mut last = io::Error::other("no reserved port free");
    for port in (600..1024).rev() {
        let s = Socket::new(domain, ty, Some(proto))?;
        match s.bind(&SockAddr::from(SocketAddr::new(local, port))) {
            Ok(()) => return Ok(s),
            Err(e) => last = e,
        }
    }
    // Not root, or every reserved port taken: any port will do for
    // peers that do not insist.
    let s = Socket::new(domain, ty, Some(proto))?;
    s.bind(&SockAddr::from(SocketAddr::new(local, 0)))
        .map_err(|_| last)?;
    Ok(s)
}

/// One call over a TCP connection of its own, from a reserved port on
/// `from`; the results of an accepted, successful reply.
pub fn tcp_call(
    from: IpAddr,
    to: SocketAddr,
    cred: &Credential,
    call: Call,
) -> io::Result<Vec<u8>> {
    tcp_call_within(from, to, cred, call, REPLY_DEADLINE)
}

/// [`tcp_call`] whose reply must be whole within `deadline` of the
/// call's sending. Each read waits at most the time left, not a timeout
/// of its own: a peer answering a byte every few seconds held one of the
/// few callback threads (and so every client's GRANTED) for as long as
/// 64 KiB took to arrive that way, days.
pub fn tcp_call_within(
    from: IpAddr,
    to: SocketAddr,
    cred: &Credential,
    call: Call,
    deadline: Duration,
) -> io::Result<Vec<u8>> {
    let s = socket(from, false)?;
    s.connect_timeout(&socket2::SockAddr::from(to), TIMEOUT)?;
    let stream: TcpStream = s.into();
    stream.set_write_timeout(Some(TIMEOUT))?;
    let (xid, msg) = message(&call, cred);
    (&stream).write_all(&framed(&msg))?;
    let mut reply = Until {
        stream: &stream,
        until: Instant::now() + deadline,
    };
    let reply = read_record_blocking(&mut reply, MAX_REPLY)?;
    results(&reply, xid)
}

/// A stream whose reads fail with `TimedOut` once `until` has passed.
struct Until<S> {
    stream: S,
    until: Instant,
}

/// A stream whose read timeout can be set.
trait Timed: Read {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Timed for &TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
}

impl Timed for &UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
}

impl<S: Timed> Read for Until<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(time_left(self.until)?))?;
        self.stream.read(buf)
    }
}

/// The time until `until` (a read timeout: never zero, which sockets
/// refuse), or `TimedOut` once it has passed.
fn time_left(until: Instant) -> io::Result<Duration> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    Ok(left)
}

/// One call over UDP from a reserved port on `from`, sent up to three
/// times; the results of an accepted, successful reply.
pub fn udp_call(
    from: IpAddr,
    to: SocketAddr,
    cred: &Credential,
    call: Call,
) -> io::Result<Vec<u8>> {
    udp_call_waiting(from, to, cred, call, UDP_WAIT)
}

/// [`udp_call`] waiting `wait` after each send, however many datagrams
/// that are not its reply arrive meanwhile: each used to start the wait
/// afresh, so anyone sending junk to the call's port held the thread.
fn udp_call_waiting(
    from: IpAddr,
    to: SocketAddr,
    cred: &Credential,
    call: Call,
    wait: Duration,
) -> io::Result<Vec<u8>> {
    let socket: UdpSocket = socket(from, true)?.into();
    let (xid, msg) = message(&call, cred);
    let mut buf = vec![0u8; MAX_REPLY];
    let mut last = io::Error::from(io::ErrorKind::TimedOut);
    for _ in 0..3 {
        socket.send_to(&msg, to)?;
        let until = Instant::now() + wait;
        loop {
            let left = match time_left(until) {
                Ok(left) => left,
                Err(e) => {
                    last = e;
                    break;
                }
            };
            socket.set_read_timeout(Some(left))?;
            match socket.recv_from(&mut buf) {
                Ok((n, src)) if src == to => match results(&buf[..n], xid) {
                    // Another call's late reply: keep waiting.
                    Err(e) if e.kind() == io::ErrorKind::InvalidData => continue,
                    r => return r,
                },
                Ok(_) => continue,
                Err(e) => {
                    last = e;
                    break;
                }
            }
        }
    }
    Err(last)
}

/// The results of an accepted, successful reply to call `xid`.
fn results(reply: &[u8], xid: u32) -> io::Result<Vec<u8>> {
    let mut dec = Decoder::new(reply);
    let header = ReplyHeader::decode(&mut dec)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad reply: {e:?}")))?;
    if header.xid != xid {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "reply to another call",
        ));
    }
    if header.status != ReplyStatus::Success {
        return Err(io::Error::other(format!("call answered {}", header.status)));
    }
    Ok(dec.rest().to_vec())
}

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

/// A stream to one peer carrying calls one after the other (the host's
/// rpcbind, say), each reply whole within the reply deadline.
pub struct Connection {
    stream: Stream,
    cred: Credential,
    xid: u32,
}

impl Connection {
    /// Connects to the local socket at `path`.
    pub fn unix(path: &Path, cred: Credential) -> io::Result<Connection> {
        let s = UnixStream::connect(path)?;
        s.set_write_timeout(Some(TIMEOUT))?;
        Ok(Connection::new(Stream::Unix(s), cred))
    }

    /// Connects over TCP to `to`.
    pub fn tcp(to: SocketAddr, cred: Credential) -> io::Result<Connection> {
        let s = TcpStream::connect_timeout(&to, TIMEOUT)?;
        s.set_write_timeout(Some(TIMEOUT))?;
        Ok(Connection::new(Stream::Tcp(s), cred))
    }

    fn new(stream: Stream, cred: Credential) -> Connection {
        let mut b = [0; 4];
        let _ = getrandom::fill(&mut b);
        Connection {
            stream,
            cred,
            xid: u32::from_ne_bytes(b),
        }
    }

    /// One call; the results of an accepted, successful reply.
    pub fn call(&mut self, call: Call) -> io::Result<Vec<u8>> {
        self.xid = self.xid.wrapping_add(1);
        let msg = framed(&message_with_xid(self.xid, &call, &self.cred));
        let until = Instant::now() + REPLY_DEADLINE;
        let reply = match &mut self.stream {
            Stream::Unix(s) => {
                s.write_all(&msg)?;
                read_record_blocking(&mut Until { stream: &*s, until }, MAX_REPLY)?
            }
            Stream::Tcp(s) => {
                s.write_all(&msg)?;
                read_record_blocking(&mut Until { stream: &*s, until }, MAX_REPLY)?
            }
        };
        results(&reply, self.xid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_xdr::Encoder;
    use std::net::{Ipv4Addr, TcpListener};

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn timed_out(e: &io::Error) -> bool {
        matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        )
    }

    const NULL: Call<'static> = Call {
        prog: 1,
        vers: 1,
        proc_: 0,
        args: &[],
    };

    #[test]
    fn a_reply_that_trickles_in_is_given_up_at_the_deadline() {
        let listener = TcpListener::bind((LOCAL, 0)).unwrap();
        let to = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // A record of 1000 bytes announced, then a byte every 50 ms:
            // each read waits far less than a read timeout.
            let _ = s.write_all(&(0x8000_0000u32 | 1000).to_be_bytes());
            for _ in 0..200 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let began = Instant::now();
        let e = tcp_call_within(
            LOCAL,
            to,
            &Credential::None,
            NULL,
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(timed_out(&e), "{e}");
        assert!(
            began.elapsed() < Duration::from_secs(3),
            "{:?}",
            began.elapsed()
        );
    }

    #[test]
    fn datagrams_that_are_not_the_reply_do_not_hold_the_call() {
        let peer = UdpSocket::bind((LOCAL, 0)).unwrap();
        let to = peer.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let Ok((_, caller)) = peer.recv_from(&mut buf) else {
                return;
            };
            // From the address called, every 20 ms: never a reply.
            for _ in 0..250 {
                if peer.send_to(b"junk", caller).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let began = Instant::now();
        let e = udp_call_waiting(
            LOCAL,
            to,
            &Credential::None,
            NULL,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(timed_out(&e), "{e}");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
    }

    /// A peer answering each call on one connection: the results come
    /// back in order, and a reply that names another call is refused.
    #[test]
    fn a_connection_carries_calls_one_after_the_other() {
        let listener = TcpListener::bind((LOCAL, 0)).unwrap();
        let to = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for i in 0..3u32 {
                let Ok(call) = read_record_blocking(&mut s, 1 << 16) else {
                    return;
                };
                let xid = u32::from_be_bytes(call[..4].try_into().unwrap());
                // The third reply names another call.
                let xid = if i == 2 { xid ^ 1 } else { xid };
                let mut reply = Encoder::new();
                reply.u32(xid);
                reply.u32(1); // REPLY
                reply.u32(0); // MSG_ACCEPTED
                reply.u32(0); // AUTH_NONE verifier
                reply.u32(0);
                reply.u32(0); // SUCCESS
                reply.u32(100 + i);
                let _ = s.write_all(&framed(&reply.into_vec()));
            }
        });
        let mut c = Connection::tcp(to, Credential::None).unwrap();
        for i in 0..2u32 {
            let res = c.call(NULL).unwrap();
            assert_eq!(res, (100 + i).to_be_bytes());
        }
        let e = c.call(NULL).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
