//! Registering with the host's rpcbind, when it runs (port 111 taken):
//! NFS, MOUNT (and whatever else the server serves) are SET with rpcbind
//! version 4 at start and UNSET at exit, as `rpc.nfsd` and `rpc.mountd`
//! do, so clients that ask the port mapper find dionfs. Calls go over
//! rpcbind's local socket (`/run/rpcbind.sock`, where rpcbind takes the
//! caller's uid from the socket), else TCP to 127.0.0.1:111 (rpcbind
//! accepts registrations from loopback). Blocking: call it from a
//! blocking thread.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use dionfs_proto::portmap::{universal_addr, Mapping, Rpcb, PROGRAM, RPCBIND_V4};
use dionfs_rpc::Credential;
use dionfs_transport::client::{Call, Connection};
use dionfs_xdr::{Decoder, Encode};

/// rpcbind's local socket.
pub const SOCKET: &str = "/run/rpcbind.sock";

const SET: u32 = 1;
const UNSET: u32 = 2;

/// Registers `programs` on `ip` with the host's rpcbind (or, with
/// `register` false, removes them), on a blocking thread.
pub async fn update(programs: Vec<Mapping>, ip: IpAddr, register: bool) -> io::Result<()> {
    tokio::task::spawn_blocking(move || {
        let mut rpcbind = Rpcbind::connect(SOCKET)?;
        if register {
            rpcbind.register(&programs, ip)
        } else {
            rpcbind.unregister(&programs, ip)
        }
    })
    .await
    .map_err(io::Error::other)?
}

/// Sets again those of `programs` that the host's rpcbind no longer has,
/// on a blocking thread; how many. rpcbind forgets them when it restarts
/// without its warm-start file, and a service that stops unsets its
/// program whoever set it last (rpc.statd unsets NSM): clients would no
/// longer find dionfs there. A program another service holds now is left
/// to it (SET refuses what is registered).
pub async fn restore(programs: Vec<Mapping>, ip: IpAddr) -> io::Result<usize> {
    tokio::task::spawn_blocking(move || {
        let mut rpcbind = Rpcbind::connect(SOCKET)?;
        let mut set = 0;
        for m in &programs {
            for ip in addresses(ip) {
                if rpcbind.set(m, ip)? {
                    set += 1;
                }
            }
        }
        Ok(set)
    })
    .await
    .map_err(io::Error::other)?
}

/// A connection to the host's rpcbind.
pub struct Rpcbind {
    connection: Connection,
}

impl Rpcbind {
    /// Connects to rpcbind at `socket` (its local socket), else on
    /// 127.0.0.1:111.
    pub fn connect(socket: &str) -> io::Result<Rpcbind> {
        let connection = match Connection::unix(Path::new(socket), Credential::None) {
            Ok(c) => c,
            Err(_) => Connection::tcp(SocketAddr::from(([127, 0, 0, 1], 111)), Credential::None)?,
        };
        Ok(Rpcbind { connection })
    }

    /// Registers each of `mappings` (TCP) on `ip`, after removing whatever
    /// was registered for its program and version (a server that died
    /// without unregistering). Errors name the mapping that failed.
    pub fn register(&mut self, mappings: &[Mapping], ip: IpAddr) -> io::Result<()> {
        // Each program and version once, before any is set: an UNSET of
        // every netid between two SETs of one program (NSM over TCP, then
        // UDP) took the first away again.
        let mut unset = Vec::new();
        for m in mappings {
            if !unset.contains(&(m.prog, m.vers)) {
                unset.push((m.prog, m.vers));
                let _ = self.call(UNSET, &rpcb(m, ip, ""));
            }
        }
        for m in mappings {
            for ip in addresses(ip) {
                if !self.set(m, ip)? {
                    return Err(io::Error::other(format!(
                        "rpcbind refused program {} version {} on {ip}",
                        m.prog, m.vers
                    )));
                }
            }
        }
        Ok(())
    }

    /// SET of one mapping on `ip`, under its family's netid (`tcp6` for
    /// TCP over IPv6); false if rpcbind has one for its program, version
    /// and netid already.
    fn set(&mut self, m: &Mapping, ip: IpAddr) -> io::Result<bool> {
        self.call(SET, &rpcb(m, ip, crate::portmap::netid(m.prot, ip)))
    }

    /// Removes the registrations of `mappings` (every netid).
    pub fn unregister(&mut self, mappings: &[Mapping], ip: IpAddr) -> io::Result<()> {
        for m in mappings {
            self.call(UNSET, &rpcb(m, ip, ""))?;
        }
        Ok(())
    }

    /// One rpcbind v4 call with an `rpcb` argument; its boolean result.
    fn call(&mut self, proc_: u32, args: &Rpcb) -> io::Result<bool> {
        let args = args.to_xdr();
        let results = self
            .connection
            .call(Call {
                prog: PROGRAM,
                vers: RPCBIND_V4,
                proc_,
                args: &args,
            })
            .map_err(|e| io::Error::new(e.kind(), format!("rpcbind: {e}")))?;
        Decoder::new(&results)
            .bool()
            .map_err(|e| io::Error::other(format!("bad reply from rpcbind: {e}")))
    }
}

/// The addresses a server listening on `ip` is registered under: on the
/// IPv6 any-address it takes IPv4 clients too, so it is registered for
/// both families (`tcp` and `tcp6`), as knfsd's services are.
fn addresses(ip: IpAddr) -> Vec<IpAddr> {
    if ip == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        vec![IpAddr::V4(Ipv4Addr::UNSPECIFIED), ip]
    } else {
        vec![ip]
    }
}

fn rpcb(m: &Mapping, ip: IpAddr, netid: &str) -> Rpcb {
    Rpcb {
        prog: m.prog,
        vers: m.vers,
        netid: netid.as_bytes().to_vec(),
        addr: if netid.is_empty() {
            Vec::new()
        } else {
            universal_addr(ip, m.port as u16).into_bytes()
        },
        owner: b"superuser".to_vec(),
    }
}
