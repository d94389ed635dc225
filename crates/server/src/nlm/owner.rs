//! NLM's lock and share owners made from its calls: a client host by the
//! name its lock manager gives and the address its calls come from, and
//! its processes (`svid`) or, for share reservations, its owner handles.
//! The types are the server's shared lock tables' ([`crate::locks`]), so
//! that NFSv4's owners sit beside them.

use dionfs_proto::nlm4::{Nlm4Lock, Nlm4Share};
use dionfs_transport::ConnInfo;

use crate::locks::{NlmHost, NlmOwner, NlmShareOwner};

/// The host calling on `conn` under `caller_name`.
fn calling(conn: &ConnInfo, caller_name: &[u8]) -> NlmHost {
    NlmHost {
        name: caller_name.to_vec(),
        ip: conn.peer.ip(),
    }
}

/// The owner of `lock`, called for on `conn`.
pub fn lock_owner(conn: &ConnInfo, lock: &Nlm4Lock) -> NlmOwner {
    NlmOwner {
        host: calling(conn, &lock.caller_name.0),
        svid: lock.svid,
    }
}

/// The owner of `share`, asked for on `conn`.
pub fn share_owner(conn: &ConnInfo, share: &Nlm4Share) -> NlmShareOwner {
    NlmShareOwner {
        host: calling(conn, &share.caller_name.0),
        oh: share.oh.0.clone(),
    }
}
