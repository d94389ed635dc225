//! Registering with the host's rpcbind, when it runs (port 111 taken):
//! NFS, MOUNT (and whatever else the server serves) are SET with rpcbind
//! version 4 at start and UNSET at exit, as `rpc.nfsd` and `rpc.mountd`
//! do, so clients that ask the port mapper find dionfs. Calls go over
//! rpcbind's local socket (`/run/rpcbind.sock`, where rpcbind takes the
//! caller's uid from the socket), else TCP to 127.0.0.1:111 (rpcbind
//! accepts registrations from loopback). Blocking: call it from a
//! blocking thread.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use dionfs_proto::portmap::{universal_addr, Mapping, Rpcb, PROGRAM, RPCBIND_V4};
use dionfs_rpc::{encode_call, framed, read_record_blocking, Credential, ReplyHeader, ReplyStatus};
use dionfs_xdr::{Decode, Decoder, Encode};

/// rpcbind's local socket.
pub const SOCKET: &str = "/run/rpcbind.sock";

const SET: u32 = 1;
const UNSET: u32 = 2;
const TIMEOUT: Duration = Duration::from_secs(5);

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
    stream: Box<dyn ReadWrite>,
    xid: u32,
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

impl Rpcbind {
    /// Connects to rpcbind at `socket` (its local socket), else on
    /// 127.0.0.1:111.
    pub fn connect(socket: &str) -> io::Result<Rpcbind> {
        let stream: Box<dyn ReadWrite> = match UnixStream::connect(socket) {
            Ok(s) => {
                s.set_read_timeout(Some(TIMEOUT))?;
                s.set_write_timeout(Some(TIMEOUT))?;
                Box::new(s)
            }
            Err(_) => {
                let s = std::net::TcpStream::connect_timeout(
                    &std::net::SocketAddr::from(([127, 0, 0, 1], 111)),
                    TIMEOUT,
                )?;
                s.set_read_timeout(Some(TIMEOUT))?;
                s.set_write_timeout(Some(TIMEOUT))?;
                Box::new(s)
            }
        };
        Ok(Rpcbind {
            stream,
            xid: std::process::id().wrapping_mul(65_537),
        })
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
        self.xid = self.xid.wrapping_add(1);
        let mut msg = encode_call(self.xid, PROGRAM, RPCBIND_V4, proc_, &Credential::None);
        msg.extend_from_slice(&args.to_xdr());
        self.stream.write_all(&framed(&msg))?;
        let reply = read_record_blocking(&mut self.stream, 64 << 10)?;
        let mut dec = Decoder::new(&reply);
        let header = ReplyHeader::decode(&mut dec)
            .map_err(|e| io::Error::other(format!("bad reply from rpcbind: {e:?}")))?;
        if header.xid != self.xid || header.status != ReplyStatus::Success {
            return Err(io::Error::other(format!(
                "rpcbind answered {:?}",
                header.status
            )));
        }
        dec.bool()
            .map_err(|e| io::Error::other(format!("bad reply from rpcbind: {e:?}")))
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
        netid: netid.to_string(),
        addr: if netid.is_empty() {
            String::new()
        } else {
            universal_addr(ip, m.port as u16)
        },
        owner: "superuser".to_string(),
    }
}
