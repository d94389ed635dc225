//! Byte-range locks and share reservations, whatever protocol takes them:
//! the tables NLM keeps its clients' locks in today, and NFSv4's open- and
//! lock-owners will share, so that a v3 lock and a v4 lock on one file see
//! each other (knfsd's lockd and nfsd share the kernel's lock lists).
//!
//! - [`table`]: the byte-range locks, as OFD locks on one server-side
//!   description per owner and file, and the blocked locks waiting.
//! - [`shares`]: DOS-style share reservations (access and deny modes).
//! - [`limits`]: what one client address may hold, so that no client
//!   runs the server out of descriptors or memory.
//! - [`span`]: the byte ranges, as each protocol and `fcntl` give them.
//!
//! One table serves every protocol, generic over one owner type
//! ([`LockOwner`]): the server picks it, an enum with a variant per
//! protocol once NFSv4 locks (an NLM host + `svid`, a v4 client id +
//! opaque owner), so that both kinds of owner sit in one file's entry,
//! are named in each other's TEST denials, wake each other's waiters and
//! are bounded by one per-address budget. (Their conflicts are the
//! kernel's whatever the table: every owner locks through its own
//! description.)
//!
//! Files are keyed by their NFS handle, which NLM and NFSv4 both name
//! files by and which the table never has to interpret: a neutral key
//! such as (device, inode) would cost a `stat` per call. Two handles of
//! one file (through two exports) still conflict in the kernel; only
//! their waiters are then woken by the every-second retry rather than at
//! the release.

pub mod limits;
pub mod shares;
pub mod span;
pub mod table;

use std::fmt::Debug;
use std::hash::Hash;
use std::net::IpAddr;

pub use span::Span;

/// A lock owner as the tables need to know it: equal owners are one
/// owner (one description per file, one reservation), and each belongs to
/// a client, by which its state is dropped, and to an address, by which
/// it is bounded.
pub trait LockOwner: Clone + Eq + Hash + Debug {
    /// The client an owner belongs to: whose state goes when it reboots
    /// or frees all (NLM: the host, by name and address; NFSv4: the
    /// client id). Ordered, to list the clients holding locks.
    type Client: Clone + Eq + Hash + Ord + Debug;

    /// The owner's client.
    fn client(&self) -> Self::Client;

    /// The address the owner's calls come from. Limits are counted per
    /// address, not per client: what a client calls itself is its own
    /// word, and one client could otherwise take any number of
    /// descriptors by calling itself by new names.
    fn address(&self) -> IpAddr;
}

#[cfg(test)]
mod testing;
