//! Every bound on what one client, or all of them, may make the server
//! hold for NFSv4.1 clients and sessions (design section 4.8). Past a
//! bound the answer is `NFS4ERR_DELAY` (`NFS4ERR_RESOURCE` is not a 4.1
//! error); each refusal is counted, and logged at most once per
//! [`LOG_EVERY`] per kind with the count it stands for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dionfs_logs::LogEvery;
use tracing::warn;

/// Client owners (`co_ownerid`s, SETCLIENTID's `id`s) one address may
/// have records for. A minor version 0 client may make one per user
/// (the Linux client names each by its credentials), and pynfs CID5
/// makes 1,024 from one address.
pub const OWNERS_PER_ADDRESS: usize = 2048;

/// Unconfirmed records per client owner: a new EXCHANGE_ID replaces the
/// one there (RFC 8881 section 18.35.5, case 4).
pub const UNCONFIRMED_PER_OWNER: usize = 1;

/// Sessions one client may have at once.
pub const SESSIONS_PER_CLIENT: usize = 16;

/// Connections bound to one session per direction (fore, back); past it
/// the oldest closed one is dropped, else the oldest.
pub const CONNECTIONS_PER_DIRECTION: usize = 16;

/// Slots of a session's fore channel (`ca_maxrequests`).
pub const SLOTS_PER_SESSION: u32 = 64;

/// Operations in one COMPOUND (`ca_maxoperations` of the fore channel).
pub const OPERATIONS_PER_COMPOUND: u32 = 64;

/// Largest reply a slot caches (`ca_maxresponsesize_cached`).
pub const RESPONSE_CACHED: u32 = 4 << 10;

/// What a slot is charged against the server-wide budget at least,
/// whatever `ca_maxresponsesize_cached` is: a solo SEQUENCE's reply
/// (about 60 bytes) is cached even in a session that asked to cache
/// nothing, and the slot itself costs a few words.
pub const SLOT_CHARGE_MIN: usize = 128;

/// Back-channel slots granted (`ca_maxrequests` of the back channel); the
/// server uses slot 0 only.
pub const BACK_SLOTS: u32 = 4;

/// Smallest `ca_maxrequestsize` and `ca_maxresponsesize` of a fore channel:
/// less could not carry a SEQUENCE and its reply (`NFS4ERR_TOOSMALL`).
pub const FORE_MIN_SIZE: u32 = 256;

/// Smallest `ca_maxrequestsize` of a back channel: our CB_SEQUENCE and a
/// recall must fit.
pub const BACK_MIN_REQUEST: u32 = 512;

/// Smallest `ca_maxresponsesize` of a back channel.
pub const BACK_MIN_RESPONSE: u32 = 256;

/// Smallest `ca_maxoperations` of a back channel: CB_SEQUENCE and one
/// more.
pub const BACK_MIN_OPERATIONS: u32 = 2;

/// Open-owners one client may have at once (OPEN under a new owner).
pub const OPEN_OWNERS_PER_CLIENT: usize = 8192;

/// Lock-owners one client may have at once (LOCK with a new owner).
pub const LOCK_OWNERS_PER_CLIENT: usize = 8192;

/// Stateids (open and lock) one client may have at once.
pub const STATEIDS_PER_CLIENT: usize = 65536;

/// Courtesy clients kept at once: past it the oldest are expired.
pub const COURTESY_CLIENTS: usize = 1024;

/// How long a courtesy client keeps its state at most (knfsd's
/// `NFSD_COURTESY_CLIENT_TIMEOUT`).
pub const COURTESY_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How often each kind of refusal is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// A bound the server refused something at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// [`OWNERS_PER_ADDRESS`]: EXCHANGE_ID under a new owner.
    OwnersPerAddress,
    /// [`SESSIONS_PER_CLIENT`]: CREATE_SESSION.
    SessionsPerClient,
    /// The slot-cache budget (`reply_cache_bytes`) has no room for one
    /// more slot: CREATE_SESSION.
    SlotBudget,
    /// [`OPEN_OWNERS_PER_CLIENT`]: OPEN.
    OpenOwners,
    /// [`LOCK_OWNERS_PER_CLIENT`]: LOCK.
    LockOwners,
    /// [`STATEIDS_PER_CLIENT`]: OPEN, LOCK.
    Stateids,
    /// The lock tables' bounds per client address (share reservations,
    /// lock descriptions, byte ranges: `dionfs_core::locks::limits`):
    /// OPEN, LOCK.
    LockTables,
}

impl Bound {
    pub(super) const ALL: [Bound; 7] = [
        Bound::OwnersPerAddress,
        Bound::SessionsPerClient,
        Bound::SlotBudget,
        Bound::OpenOwners,
        Bound::LockOwners,
        Bound::Stateids,
        Bound::LockTables,
    ];

    fn index(self) -> usize {
        self as usize
    }

    fn what(self) -> &'static str {
        match self {
            Bound::OwnersPerAddress => "NFSv4 client owners per address",
            Bound::SessionsPerClient => "NFSv4 sessions per client",
            Bound::SlotBudget => "NFSv4 slot-cache memory (nfs4_reply_cache_mib)",
            Bound::OpenOwners => "NFSv4 open-owners per client",
            Bound::LockOwners => "NFSv4 lock-owners per client",
            Bound::Stateids => "NFSv4 stateids per client",
            Bound::LockTables => {
                "share reservations, lock descriptions or locked byte ranges per address"
            }
        }
    }
}

/// Refusals at each [`Bound`]: counted, and logged now and then.
pub struct Refusals {
    counts: [AtomicU64; Bound::ALL.len()],
    logs: [LogEvery; Bound::ALL.len()],
}

impl Default for Refusals {
    fn default() -> Self {
        Self {
            counts: Default::default(),
            logs: std::array::from_fn(|_| LogEvery::new(LOG_EVERY)),
        }
    }
}

impl Refusals {
    /// Counts a refusal at `bound` of a request from `client` (its
    /// address, for the log) and gives the status to answer.
    pub fn refuse(&self, bound: Bound, client: std::net::IpAddr) -> dionfs_proto::nfs4::Nfsstat4 {
        self.counts[bound.index()].fetch_add(1, Ordering::Relaxed);
        if let Some(count) = self.logs[bound.index()].count() {
            warn!(
                %client,
                refused = count,
                "{} reached: answering NFS4ERR_DELAY",
                bound.what()
            );
        }
        dionfs_proto::nfs4::Nfsstat4::Delay
    }

    /// Refusals at `bound` since the start.
    pub fn count(&self, bound: Bound) -> u64 {
        self.counts[bound.index()].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_counted_per_bound() {
        let refusals = Refusals::default();
        let client = std::net::IpAddr::from([192, 0, 2, 1]);
        for _ in 0..3 {
            assert_eq!(
                refusals.refuse(Bound::SlotBudget, client),
                dionfs_proto::nfs4::Nfsstat4::Delay
            );
        }
        assert_eq!(refusals.count(Bound::SlotBudget), 3);
        assert_eq!(refusals.count(Bound::SessionsPerClient), 0);
        assert_eq!(refusals.count(Bound::OwnersPerAddress), 0);
    }

    #[test]
    fn bounds_are_those_of_the_design() {
        assert_eq!(OWNERS_PER_ADDRESS, 2048);
        assert_eq!(UNCONFIRMED_PER_OWNER, 1);
        assert_eq!(SESSIONS_PER_CLIENT, 16);
        assert_eq!(CONNECTIONS_PER_DIRECTION, 16);
        assert_eq!(SLOTS_PER_SESSION, 64);
        assert_eq!(OPERATIONS_PER_COMPOUND, 64);
        assert_eq!(OPEN_OWNERS_PER_CLIENT, 8192);
        assert_eq!(LOCK_OWNERS_PER_CLIENT, 8192);
        assert_eq!(STATEIDS_PER_CLIENT, 65536);
        assert_eq!(COURTESY_CLIENTS, 1024);
    }
}
