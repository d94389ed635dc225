//! The calls the lock service makes to clients: GRANTED (a blocked lock
//! is now held), the `_RES` answers of the asynchronous `_MSG`
//! procedures, and SM_NOTIFY to a client's statd after a restart; each
//! after asking the client's port mapper where the program listens.
//! Blocking, with timeouts: run them on blocking threads.
//!
//! Calls leave from a reserved port on the server address the client
//! used (the kernel's lockd matches GRANTED against the server's address).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use dionfs_proto::portmap::{Mapping, IPPROTO_TCP, IPPROTO_UDP};
use dionfs_rpc::message::AuthSys;
use dionfs_rpc::{encode_call, framed, read_record_blocking, Credential, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder, Encode};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a reply over TCP may take to arrive whole, however it
/// trickles in.
const REPLY_DEADLINE: Duration = Duration::from_secs(10);
/// How long one UDP send waits for its reply, whatever else arrives.
const UDP_WAIT: Duration = Duration::from_secs(2);
/// Largest reply read.
const MAX_REPLY: usize = 64 << 10;

/// Where to call: the client's address, and the server address to call
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub client: IpAddr,
    pub local: IpAddr,
}

fn credential() -> Credential {
    let name = rustix::system::uname()
        .nodename()
        .to_bytes()
        .iter()
        .take(255)
        .copied()
        .collect();
    Credential::Sys(AuthSys {
        stamp: 0,
        machine_name: name,
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    })
}

/// A call message with a random xid (returned too), our credential, and
/// `args`.
fn call_message(prog: u32, vers: u32, proc_: u32, args: &[u8]) -> (u32, Vec<u8>) {
    let mut b = [0; 4];
    let _ = getrandom::fill(&mut b);
    let xid = u32::from_ne_bytes(b);
    let mut msg = encode_call(xid, prog, vers, proc_, &credential());
    msg.extend_from_slice(args);
    (xid, msg)
}

/// A socket bound to a reserved port (below 1024) on `local`.
fn reserved_socket(local: IpAddr, udp: bool) -> io::Result<Socket> {
    let domain = Domain::for_address(SocketAddr::new(local, 0));
    let (ty, proto) = if udp {
        (Type::DGRAM, Protocol::UDP)
    } else {
        (Type::STREAM, Protocol::TCP)
    };
    let mut last = io::Error::other("no reserved port free");
    for port in (600..1024).rev() {
        let s = Socket::new(domain, ty, Some(proto))?;
        match s.bind(&SockAddr::from(SocketAddr::new(local, port))) {
            Ok(()) => return Ok(s),
            Err(e) => last = e,
        }
    }
    // Not root, or every reserved port taken: any port will do for
    // clients that do not insist.
    let s = Socket::new(domain, ty, Some(proto))?;
    s.bind(&SockAddr::from(SocketAddr::new(local, 0)))
        .map_err(|_| last)?;
    Ok(s)
}

/// One call over TCP; the results after an accepted, successful reply.
pub fn tcp_call(
    from: IpAddr,
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
) -> io::Result<Vec<u8>> {
    tcp_call_within(from, to, prog, vers, proc_, args, REPLY_DEADLINE)
}

/// [`tcp_call`] whose reply must be whole within `deadline` of the
/// call's sending. Each read waiting at most the time left, not a
/// timeout of its own: a client answering a byte every few seconds held
/// one of the few callback threads (and so every client's GRANTED) for
/// as long as 64 KiB took to arrive that way, days.
fn tcp_call_within(
    from: IpAddr,
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
    deadline: Duration,
) -> io::Result<Vec<u8>> {
    let s = reserved_socket(from, false)?;
    s.connect_timeout(&SockAddr::from(to), TIMEOUT)?;
    let stream: TcpStream = s.into();
    stream.set_write_timeout(Some(TIMEOUT))?;
    let (xid, msg) = call_message(prog, vers, proc_, args);
    (&stream).write_all(&framed(&msg))?;
    let mut reply = Until {
        stream,
        until: Instant::now() + deadline,
    };
    let reply = read_record_blocking(&mut reply, MAX_REPLY)?;
    results(&reply, xid)
}

/// A stream whose reads fail with `TimedOut` once `until` has passed.
struct Until {
    stream: TcpStream,
    until: Instant,
}

impl Read for Until {
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

/// One call over UDP, sent up to three times; the results.
pub fn udp_call(
    from: IpAddr,
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
) -> io::Result<Vec<u8>> {
    udp_call_waiting(from, to, prog, vers, proc_, args, UDP_WAIT)
}

/// [`udp_call`] waiting `wait` after each send, however many datagrams
/// that are not its reply arrive meanwhile: each used to start the wait
/// afresh, so anyone sending junk to the call's port held the thread.
fn udp_call_waiting(
    from: IpAddr,
    to: SocketAddr,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
    wait: Duration,
) -> io::Result<Vec<u8>> {
    let socket: UdpSocket = reserved_socket(from, true)?.into();
    let (xid, msg) = call_message(prog, vers, proc_, args);
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
        return Err(io::Error::other(format!(
            "call answered {:?}",
            header.status
        )));
    }
    Ok(dec.rest().to_vec())
}

/// The port `prog`/`vers` listens on at `peer.client`, over TCP or UDP,
/// from its port mapper (portmap v2 GETPORT on port 111).
pub fn getport(peer: Peer, prog: u32, vers: u32, udp: bool) -> io::Result<u16> {
    let mapping = Mapping {
        prog,
        vers,
        prot: if udp { IPPROTO_UDP } else { IPPROTO_TCP },
        port: 0,
    };
    let to = SocketAddr::new(peer.client, dionfs_proto::portmap::PORT);
    let pm = dionfs_proto::portmap::PROGRAM;
    let res = if udp {
        udp_call(peer.local, to, pm, 2, 3, &mapping.to_xdr())?
    } else {
        tcp_call(peer.local, to, pm, 2, 3, &mapping.to_xdr())?
    };
    let port = Decoder::new(&res)
        .u32()
        .map_err(|e| io::Error::other(format!("bad GETPORT reply: {e:?}")))?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(io::Error::other(format!(
            "program {prog} version {vers} is not registered with the client's port mapper"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn timed_out(e: &io::Error) -> bool {
        matches!(
            e.kind(),
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
        )
    }

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
        let e = tcp_call_within(LOCAL, to, 1, 1, 0, &[], Duration::from_millis(500)).unwrap_err();
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
        let e = udp_call_waiting(LOCAL, to, 1, 1, 0, &[], Duration::from_millis(200)).unwrap_err();
        assert!(timed_out(&e), "{e}");
        assert!(
            began.elapsed() < Duration::from_secs(2),
            "{:?}",
            began.elapsed()
        );
    }
}
