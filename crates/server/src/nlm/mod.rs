//! The lock service: NLM version 4 (program 100021) and NSM version 1
//! (program 100024, the server's own statd), so that Linux clients mount
//! without `nolock` and their `fcntl`/`flock` locks hold between clients
//! and against processes on the server.
//!
//! - [`service`]: the service's state and start, and how a call reaches
//!   its procedure ([`procedures`]: the procedure tables and handlers).
//! - [`locking`] (LOCK, TEST, UNLOCK, CANCEL) and [`share`] (SHARE,
//!   UNSHARE): locks are OFD locks on server-side descriptions of the
//!   file, one per remote owner ([`owner`]: client host + `svid`), kept in
//!   the server's lock tables ([`crate::locks`]), beside NFSv4's owners.
//! - [`granted`]: a LOCK that must wait (`block`) is answered BLOCKED and
//!   queued; when it can be had, the server takes it and calls the client
//!   back with GRANTED. Waiters are retried whenever a lock of the file is
//!   released (through NLM, or by another program: [`crate::locks::Locks`]
//!   tells of the file) and every second (for locks released by processes
//!   on the server). The calls to clients are queued
//!   ([`queue`]) and made through [`client`].
//! - [`reboot`]: the clients holding locks are recorded under the state
//!   directory ([`state`]). A client that reboots sends SM_NOTIFY (or its
//!   lock manager FREE_ALL): its locks are dropped. A server that restarts
//!   tells the recorded clients (SM_NOTIFY to their statd) and keeps a
//!   grace period in which only reclaims are granted.
//!
//! The calls are quick and run on blocking threads; one mutex guards the
//! lock table.

pub mod client;
mod granted;
mod locking;
pub mod owner;
pub mod procedures;
mod queue;
mod reboot;
mod service;
mod share;
pub mod state;

pub use service::{LockService, NlmCounters, Pending};

use dionfs_proto::nlm4::{NLM_PROGRAM, NLM_V4};
use dionfs_proto::nsm::{NSM_PROGRAM, NSM_V1};

/// The mappings the lock service listens on, for the port mapper: NLM v4
/// over TCP, NSM v1 over TCP and UDP.
pub fn mappings(nlm_port: u16, nsm_udp_port: u16) -> Vec<dionfs_proto::portmap::Mapping> {
    use dionfs_proto::portmap::{Mapping, IPPROTO_TCP, IPPROTO_UDP};
    let m = |prog, vers, prot, port: u16| Mapping {
        prog,
        vers,
        prot,
        port: u32::from(port),
    };
    vec![
        m(NLM_PROGRAM, NLM_V4, IPPROTO_TCP, nlm_port),
        m(NSM_PROGRAM, NSM_V1, IPPROTO_TCP, nlm_port),
        m(NSM_PROGRAM, NSM_V1, IPPROTO_UDP, nsm_udp_port),
    ]
}
