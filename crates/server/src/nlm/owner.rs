//! NLM's lock and share owners, as the lock tables ([`dionfs_core::locks`])
//! know them: a client host by the name its lock manager gives and the
//! address its calls come from, and its processes (`svid`) or, for share
//! reservations, its owner handles.

use std::net::IpAddr;

use dionfs_proto::nlm4::{Nlm4Lock, Nlm4Share};
use dionfs_transport::ConnInfo;

use dionfs_core::locks::LockOwner;

/// A client host as NLM knows it: the name its lock manager gives
/// (`caller_name`) and the address its calls come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Host {
    pub name: Vec<u8>,
    pub ip: IpAddr,
}

/// A lock owner: a process (`svid`) of a client host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    pub host: Host,
    pub svid: i32,
}

/// A share reservation's owner: an owner handle of a client host.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShareOwner {
    pub host: Host,
    pub oh: Vec<u8>,
}

impl Host {
    /// The host calling on `conn` under `caller_name`.
    fn calling(conn: &ConnInfo, caller_name: &[u8]) -> Host {
        Host {
            name: caller_name.to_vec(),
            ip: conn.peer.ip(),
        }
    }
}

impl Owner {
    /// The owner of `lock`, called for on `conn`.
    pub fn of(conn: &ConnInfo, lock: &Nlm4Lock) -> Owner {
        Owner {
            host: Host::calling(conn, &lock.caller_name.0),
            svid: lock.svid,
        }
    }
}

impl ShareOwner {
    /// The owner of `share`, asked for on `conn`.
    pub fn of(conn: &ConnInfo, share: &Nlm4Share) -> ShareOwner {
        ShareOwner {
            host: Host::calling(conn, &share.caller_name.0),
            oh: share.oh.0.clone(),
        }
    }
}

impl LockOwner for Owner {
    type Client = Host;

    fn client(&self) -> Host {
        self.host.clone()
    }

    fn address(&self) -> IpAddr {
        self.host.ip
    }
}

impl LockOwner for ShareOwner {
    type Client = Host;

    fn client(&self) -> Host {
        self.host.clone()
    }

    fn address(&self) -> IpAddr {
        self.host.ip
    }
}
