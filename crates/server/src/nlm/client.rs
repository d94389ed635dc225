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

use dionfs_rpc::message::AuthSys;
use dionfs_rpc::Credential;
use dionfs_transport::client::{self, Call, Source};

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
    let from = Source::Reserved(peer.local);
    let port = client::getport(from, peer.client, prog, vers, udp)?;
    let to = SocketAddr::new(peer.client, port);
    let call = Call {
        prog,
        vers,
        proc_,
        args,
    };
    if udp {
        client::udp_call(from, to, &credential(), call)
    } else {
        client::tcp_call(from, to, &credential(), call)
    }
}
