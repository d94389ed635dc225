//! The calls the lock service makes to clients: GRANTED (a blocked lock
//! is now held), the `_RES` answers of the asynchronous `_MSG`
//! procedures, and SM_NOTIFY to a client's statd after a restart; each
//! after asking the client's port mapper where the program listens.
//! Through the transport's RPC client ([`dionfs_transport::client`]):
//! blocking, with deadlines; run them on blocking threads.
//!
//! Calls leave from a reserved port on the server address the client
//! used (the kernel's lockd matches GRANTED against the server's address).

use std::io;
use std::net::{IpAddr, SocketAddr};

use dionfs_proto::portmap::{self, Mapping, IPPROTO_TCP, IPPROTO_UDP};
use dionfs_rpc::message::AuthSys;
use dionfs_rpc::Credential;
use dionfs_transport::client::{self, Call};
use dionfs_xdr::{Decoder, Encode};

/// Where to call: the client's address, and the server address to call
/// from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub client: IpAddr,
    pub local: IpAddr,
}

/// AUTH_SYS as root of this host, as the kernel's lockd and statd call.
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

/// Calls procedure `proc_` of `prog`/`vers` at `peer.client`, over UDP or
/// TCP, where its port mapper says the program listens; the results.
pub fn call(
    peer: Peer,
    prog: u32,
    vers: u32,
    proc_: u32,
    args: &[u8],
    udp: bool,
) -> io::Result<Vec<u8>> {
    let from = peer.local;
    let port = getport(from, peer.client, prog, vers, udp)?;
    let call = Call {
        prog,
        vers,
        proc_,
        args,
    };
    send(
        from,
        SocketAddr::new(peer.client, port),
        &credential(),
        call,
        udp,
    )
}

/// One call over UDP or TCP.
fn send(
    from: IpAddr,
    to: SocketAddr,
    cred: &Credential,
    call: Call,
    udp: bool,
) -> io::Result<Vec<u8>> {
    if udp {
        client::udp_call(from, to, cred, call)
    } else {
        client::tcp_call(from, to, cred, call)
    }
}

/// The port `prog`/`vers` listens on at `host`, over TCP or UDP, from its
/// port mapper (portmap v2 GETPORT on port 111), asked from `from`.
fn getport(from: IpAddr, host: IpAddr, prog: u32, vers: u32, udp: bool) -> io::Result<u16> {
    let mapping = Mapping {
        prog,
        vers,
        prot: if udp { IPPROTO_UDP } else { IPPROTO_TCP },
        port: 0,
    };
    let args = mapping.to_xdr();
    let call = Call {
        prog: portmap::PROGRAM,
        vers: portmap::VERSION,
        proc_: portmap::Procedure::GetPort as u32,
        args: &args,
    };
    let to = SocketAddr::new(host, portmap::PORT);
    let res = send(from, to, &Credential::None, call, udp)?;
    let port = Decoder::new(&res)
        .u32()
        .map_err(|e| io::Error::other(format!("bad GETPORT reply: {e}")))?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(io::Error::other(format!(
            "program {prog} version {vers} is not registered with the port mapper of {host}"
        ))),
    }
}
