//! The calls the lock service makes to clients: GRANTED (a blocked lock
//! is now held), the `_RES` answers of the asynchronous `_MSG`
//! procedures, and SM_NOTIFY to a client's statd after a restart; each
//! after asking the client's port mapper where the program listens.
//! Blocking, with timeouts: run them on blocking threads.
//!
//! Calls leave from a reserved port on the server address the client
//! used (the kernel's lockd matches GRANTED against the server's address).

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use dionfs_proto::portmap::{Mapping, IPPROTO_TCP, IPPROTO_UDP};
use dionfs_rpc::message::AuthSys;
use dionfs_rpc::{encode_call, framed, read_record_blocking, Credential, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder, Encode};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const TIMEOUT: Duration = Duration::from_secs(5);
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
    let s = reserved_socket(from, false)?;
    s.connect_timeout(&SockAddr::from(to), TIMEOUT)?;
    let mut stream: TcpStream = s.into();
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let (xid, msg) = call_message(prog, vers, proc_, args);
    stream.write_all(&framed(&msg))?;
    let reply = read_record_blocking(&mut stream, MAX_REPLY)?;
    results(&reply, xid)
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
    let socket: UdpSocket = reserved_socket(from, true)?.into();
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    let (xid, msg) = call_message(prog, vers, proc_, args);
    let mut buf = vec![0u8; MAX_REPLY];
    let mut last = io::Error::from(io::ErrorKind::TimedOut);
    for _ in 0..3 {
        socket.send_to(&msg, to)?;
        loop {
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
