//! A client's opens and locks as stateids (design section 5.1), and the
//! rules a stateid sent by a client is checked by (RFC 8881 section 8.2,
//! design section 5.2): which state it names, whether its seqid is the
//! current one, whether it may do the I/O asked; TEST_STATEID and
//! FREE_STATEID.
//!
//! - `seqid` 0 is the current one, unchecked; below the current one is
//!   `OLD_STATEID`, above it `BAD_STATEID` (compared as knfsd does, by
//!   the sign of the wrapping difference).
//! - Unknown, closed or freed: `BAD_STATEID`; another boot's:
//!   `STALE_STATEID`; another client's, or one of another file than the
//!   current one: `BAD_STATEID`.
//! - The special stateids (anonymous: all zeros; READ bypass: all ones)
//!   are checked against deny reservations, as knfsd's
//!   `check_special_stateids`; the current stateid (seqid 1, other 0) is
//!   the COMPOUND's to resolve ([`resolve_current`]).
//! - READ with an open or lock stateid needs READ or WRITE access (knfsd's
//!   `access_permit_read`), WRITE needs WRITE; else `OPENMODE`.

use std::collections::HashMap;

use dionfs_proto::nfs4::{Nfsstat4, StateId4, NFS4_OTHER_SIZE};

use super::clients::Client;
use super::delegations::{free_delegation, DelegState};
use super::ids::{IdMap, StateOther};
use super::seqids::OwnerSeq;
use super::State;
use crate::locks::{ClientId as LockClient, Owner};

/// A stateid's `other`: the key of a client's states.
pub type Other = [u8; NFS4_OTHER_SIZE];

/// `OPEN4_SHARE_ACCESS_READ`, `_WRITE`, `_BOTH`.
pub const ACCESS_READ: u32 = 1;
pub const ACCESS_WRITE: u32 = 2;
pub const ACCESS_BOTH: u32 = 3;

/// The stateid CLOSE answers (RFC 8881 section 18.2.4: the special
/// invalid stateid, as knfsd's `close_stateid`).
pub const CLOSED: StateId4 = StateId4 {
    seqid: u32::MAX,
    other: [0; NFS4_OTHER_SIZE],
};

/// An open of one file by one open-owner: its open stateid.
#[derive(Debug, Clone)]
pub struct OpenState {
    pub fh: Vec<u8>,
    pub owner: Vec<u8>,
    pub seqid: u32,
    /// The union of the access and deny modes the OPENs took.
    pub access: u32,
    pub deny: u32,
    /// Bit `1 << mode` for every access (1 to 3) and deny (0 to 3) mode
    /// an OPEN used, as knfsd's `st_access_bmap` and `st_deny_bmap`:
    /// OPEN_DOWNGRADE may only go to modes opened.
    pub access_modes: u8,
    pub deny_modes: u8,
    /// The lock stateids born of this open (CLOSE drops them).
    pub lock_stateids: Vec<Other>,
    /// Its open-owner (minor version 0) awaits OPEN_CONFIRM: the stateid
    /// is good for nothing else (`seqids.rs`).
    pub unconfirmed: bool,
}

/// A lock-owner's locks on one file, through one open: its lock stateid.
#[derive(Debug, Clone)]
pub struct LockState {
    pub fh: Vec<u8>,
    pub lock_owner: Vec<u8>,
    /// The open stateid it was born of.
    pub open: Other,
    pub seqid: u32,
}

/// What a stateid names.
#[derive(Debug, Clone)]
pub enum StateRef {
    Open(OpenState),
    Lock(LockState),
    Deleg(DelegState),
}

impl StateRef {
    pub fn fh(&self) -> &[u8] {
        match self {
            StateRef::Open(o) => &o.fh,
            StateRef::Lock(l) => &l.fh,
            StateRef::Deleg(d) => &d.fh,
        }
    }

    pub fn seqid(&self) -> u32 {
        match self {
            StateRef::Open(o) => o.seqid,
            StateRef::Lock(l) => l.seqid,
            StateRef::Deleg(d) => d.seqid,
        }
    }
}

/// An open-owner: its open stateid of each file it has open.
#[derive(Debug, Default)]
pub struct OpenOwner {
    pub opens: HashMap<Vec<u8>, Other>,
    /// Its seqid and last result (minor version 0: `seqids.rs`).
    pub seq: Option<OwnerSeq>,
    /// The open stateid its last CLOSE closed (minor version 0), until
    /// its next op: a retransmitted CLOSE names it (knfsd's
    /// `oo_last_closed_stid`).
    pub last_closed: Option<Other>,
}

/// A lock-owner: its lock stateid of each open it locked through.
#[derive(Debug, Default)]
pub struct LockOwner4 {
    pub by_open: IdMap<Other, Other>,
    /// Its seqid and last result (minor version 0: `seqids.rs`).
    pub seq: Option<OwnerSeq>,
}

/// One client's opens and locks (the client's mutex guards it; taken
/// once per op, after the client table's and before the lock tables').
#[derive(Debug, Default)]
pub struct ClientState {
    pub open_owners: HashMap<Vec<u8>, OpenOwner>,
    pub lock_owners: HashMap<Vec<u8>, LockOwner4>,
    pub stateids: IdMap<Other, StateRef>,
    /// The last state counter handed out.
    next: u32,
}

impl ClientState {
    /// Whether the client holds opens or locks (knfsd's
    /// `client_has_state`, for DESTROY_CLIENTID, EXCHANGE_ID case 3 and
    /// the laundromat's courtesy).
    pub fn holds_state(&self) -> bool {
        !self.stateids.is_empty()
    }

    /// Its open stateids and lock stateids (`dionfs clients`, metrics).
    pub fn counts(&self) -> (usize, usize) {
        self.stateids
            .values()
            .fold((0, 0), |(opens, locks), s| match s {
                StateRef::Open(_) => (opens + 1, locks),
                StateRef::Lock(_) => (opens, locks + 1),
                StateRef::Deleg(_) => (opens, locks),
            })
    }

    /// A new `other` for `client`'s state, made at `boot`: a counter no
    /// state of the client has now, never 0 nor all ones (so never a
    /// special stateid's).
    pub(super) fn new_other(&mut self, boot: u32, client: &Client) -> Other {
        loop {
            self.next = self.next.wrapping_add(1);
            if self.next == 0 || self.next == u32::MAX {
                continue;
            }
            let other = StateOther {
                boot,
                client: client.id.counter(),
                state: self.next,
            }
            .to_bytes();
            if !self.stateids.contains_key(&other) {
                return other;
            }
        }
    }

    /// Forgets every open and lock (the client is gone).
    pub(super) fn clear(&mut self) {
        self.open_owners.clear();
        self.lock_owners.clear();
        self.stateids.clear();
    }

    /// Forgets the lock stateid `other` (its locks are the caller's to
    /// release): from its lock-owner (which goes with its last stateid)
    /// and its open.
    pub(super) fn forget_lock(&mut self, other: &Other) -> Option<LockState> {
        let Some(StateRef::Lock(lock)) = self.stateids.remove(other) else {
            return None;
        };
        if let Some(owner) = self.lock_owners.get_mut(&lock.lock_owner) {
            owner.by_open.remove(&lock.open);
            if owner.by_open.is_empty() {
                self.lock_owners.remove(&lock.lock_owner);
            }
        }
        if let Some(StateRef::Open(open)) = self.stateids.get_mut(&lock.open) {
            open.lock_stateids.retain(|o| o != other);
        }
        Some(lock)
    }
}

/// The I/O a stateid is presented for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// READ, READ_PLUS, SEEK.
    Read,
    /// WRITE, SETATTR(size), ALLOCATE, DEALLOCATE, COPY's destination.
    Write,
}

/// What a stateid checked for an I/O turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The anonymous stateid (all zeros), allowed.
    Anonymous,
    /// The READ bypass stateid (all ones), allowed.
    Bypass,
    /// An open stateid or a lock stateid of the client: its `other`, and
    /// the access of the open (its own, or its lock stateid's open's).
    State { other: Other, access: u32 },
}

/// The stateid whose seqid is 1 and other 0: "the current stateid" of
/// the COMPOUND (RFC 8881 section 16.2.3.1.2).
pub fn is_current(stateid: &StateId4) -> bool {
    stateid.seqid == 1 && stateid.other == [0; NFS4_OTHER_SIZE]
}

/// The stateid an op is to use: `stateid`, or for the current-stateid
/// value the COMPOUND's current stateid (`BAD_STATEID` when it has none,
/// as knfsd).
pub fn resolve_current(
    stateid: &StateId4,
    current: Option<StateId4>,
) -> Result<StateId4, Nfsstat4> {
    if is_current(stateid) {
        current.ok_or(Nfsstat4::BadStateid)
    } else {
        Ok(*stateid)
    }
}

fn is_anonymous(stateid: &StateId4) -> bool {
    stateid.seqid == 0 && stateid.other == [0; NFS4_OTHER_SIZE]
}

fn is_bypass(stateid: &StateId4) -> bool {
    stateid.seqid == u32::MAX && stateid.other == [0xff; NFS4_OTHER_SIZE]
}

/// Whether `other` names a special stateid (zeros or ones), whatever the
/// seqid.
fn is_special(other: &Other) -> bool {
    *other == [0; NFS4_OTHER_SIZE] || *other == [0xff; NFS4_OTHER_SIZE]
}

/// `sent`'s seqid against the state's `current`: 0 or equal is good,
/// older `OLD_STATEID`, newer `BAD_STATEID` (knfsd's
/// `check_stateid_generation`, wrapping).
pub fn check_seqid(sent: u32, current: u32) -> Result<(), Nfsstat4> {
    if sent == 0 || sent == current {
        return Ok(());
    }
    if (sent.wrapping_sub(current) as i32) > 0 {
        Err(Nfsstat4::BadStateid)
    } else {
        Err(Nfsstat4::OldStateid)
    }
}

/// The next seqid of a state: incremented, skipping 0 (RFC 8881 section
/// 8.2.2).
pub fn next_seqid(seqid: u32) -> u32 {
    match seqid.wrapping_add(1) {
        0 => 1,
        n => n,
    }
}

impl State {
    /// The state `stateid` names among `client`'s, checked by every rule
    /// but the file's and the mode's: its `other`. The open of an
    /// unconfirmed open-owner (minor version 0) is `BAD_STATEID`.
    pub(super) fn find_state<'s>(
        &self,
        client: &Client,
        state: &'s ClientState,
        stateid: &StateId4,
    ) -> Result<(Other, &'s StateRef), Nfsstat4> {
        let found = self.find_state_any(client, state, stateid)?;
        if matches!(found, StateRef::Deleg(deleg) if deleg.revoked) {
            return Err(Nfsstat4::DelegRevoked);
        }
        check_seqid(stateid.seqid, found.seqid())?;
        if matches!(found, StateRef::Open(open) if open.unconfirmed) {
            return Err(Nfsstat4::BadStateid);
        }
        Ok((stateid.other, found))
    }

    /// The state `stateid` names among `client`'s, whatever its seqid
    /// and its owner's confirmation: another boot's is `STALE_STATEID`,
    /// one unknown, special or another client's `BAD_STATEID`.
    pub(super) fn find_state_any<'s>(
        &self,
        client: &Client,
        state: &'s ClientState,
        stateid: &StateId4,
    ) -> Result<&'s StateRef, Nfsstat4> {
        if is_special(&stateid.other) {
            return Err(Nfsstat4::BadStateid);
        }
        let other = StateOther::from_bytes(&stateid.other);
        if other.boot != self.boot {
            return Err(Nfsstat4::StaleStateid);
        }
        if other.client != client.id.counter() {
            return Err(Nfsstat4::BadStateid);
        }
        state
            .stateids
            .get(&stateid.other)
            .ok_or(Nfsstat4::BadStateid)
    }

    /// The state `stateid` names among `client`'s, for an op on the
    /// current file `fh`: every rule of the module's header but the mode.
    pub(super) fn find_state_of<'s>(
        &self,
        client: &Client,
        state: &'s ClientState,
        stateid: &StateId4,
        fh: &[u8],
    ) -> Result<(Other, &'s StateRef), Nfsstat4> {
        let (other, found) = self.find_state(client, state, stateid)?;
        if found.fh() != fh {
            return Err(Nfsstat4::BadStateid);
        }
        Ok((other, found))
    }

    /// Checks `stateid` (the current stateid already resolved, see
    /// [`resolve_current`]) for `io` on the current file `fh` by
    /// `client`: READ, WRITE, SETATTR(size) and the 4.2 data ops call
    /// this. Special stateids are checked against the deny reservations
    /// of every client (NFSv4 opens and NLM shares): `LOCKED` when one
    /// denies the access (knfsd's `nfs4_share_conflict`).
    pub fn check_stateid(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
        io: Use,
    ) -> Result<Checked, Nfsstat4> {
        if let Some(special) = self.check_special(stateid, fh, io) {
            return special;
        }
        let state = client.state.lock();
        let (other, found) = self.find_state_of(client, &state, stateid, fh)?;
        let access = match found {
            StateRef::Open(open) => open.access,
            StateRef::Lock(lock) => match state.stateids.get(&lock.open) {
                Some(StateRef::Open(open)) => open.access,
                _ => return Err(Nfsstat4::BadStateid),
            },
            // A delegation stateid serves the I/O its holder does under
            // it (RFC 8881 section 9.1.4): reads, and writes under a
            // write delegation.
            StateRef::Deleg(deleg) if deleg.write => ACCESS_BOTH,
            StateRef::Deleg(_) => ACCESS_READ,
        };
        let allowed = match io {
            Use::Read => access & ACCESS_BOTH != 0,
            Use::Write => access & ACCESS_WRITE != 0,
        };
        if !allowed {
            return Err(Nfsstat4::Openmode);
        }
        Ok(Checked::State { other, access })
    }

    /// [`Self::check_stateid`] of a special stateid, which needs no
    /// client; `None` for any other.
    pub fn check_special(
        &self,
        stateid: &StateId4,
        fh: &[u8],
        io: Use,
    ) -> Option<Result<Checked, Nfsstat4>> {
        if is_bypass(stateid) && io == Use::Read {
            return Some(Ok(Checked::Bypass));
        }
        if !is_anonymous(stateid) && !is_bypass(stateid) {
            return None;
        }
        let denied = match io {
            Use::Read => ACCESS_READ,
            Use::Write => ACCESS_WRITE,
        };
        if self.locks.shares.lock().denies(fh, denied) {
            return Some(Err(Nfsstat4::Locked));
        }
        Some(Ok(if is_anonymous(stateid) {
            Checked::Anonymous
        } else {
            Checked::Bypass
        }))
    }

    /// TEST_STATEID (RFC 8881 section 18.48): the status of each stateid
    /// of `client`, by the rules above without a file or mode. Special
    /// stateids, and another boot's (section 18.48.3 lists no
    /// `STALE_STATEID`), are `BAD_STATEID`, as knfsd's
    /// `nfsd4_validate_stateid`.
    pub fn test_stateids(&self, client: &Client, stateids: &[StateId4]) -> Vec<Nfsstat4> {
        let state = client.state.lock();
        stateids
            .iter()
            .map(|stateid| match self.find_state(client, &state, stateid) {
                Ok(_) => Nfsstat4::Ok,
                Err(Nfsstat4::StaleStateid) => Nfsstat4::BadStateid,
                Err(status) => status,
            })
            .collect()
    }

    /// FREE_STATEID (RFC 8881 section 18.38): a lock stateid whose owner
    /// holds no lock on its file is freed; one holding locks, or an open
    /// stateid (CLOSE it), is `LOCKS_HELD`, as knfsd's
    /// `nfsd4_free_stateid`.
    pub fn free_stateid(&self, client: &Client, stateid: &StateId4) -> Nfsstat4 {
        let mut state = client.state.lock();
        if let Ok(StateRef::Deleg(deleg)) = self.find_state_any(client, &state, stateid) {
            let revoked = deleg.revoked;
            return free_delegation(client, &mut state, revoked, &stateid.other);
        }
        let (other, found) = match self.find_state(client, &state, stateid) {
            Ok(found) => found,
            Err(Nfsstat4::StaleStateid) => return Nfsstat4::BadStateid,
            Err(status) => return status,
        };
        let StateRef::Lock(lock) = found else {
            return Nfsstat4::LocksHeld;
        };
        let owner = v4_lock_owner(client, &lock.lock_owner);
        if self.locks.table.lock().holds(&lock.fh, &owner) {
            return Nfsstat4::LocksHeld;
        }
        state.forget_lock(&other);
        Nfsstat4::Ok
    }
}

/// The lock tables' owner of `client`'s lock-owner `owner`.
pub(super) fn v4_lock_owner(client: &Client, owner: &[u8]) -> Owner {
    Owner::V4 {
        client: LockClient(client.id.0),
        owner: owner.to_vec(),
        address: client.address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqids_compare_as_knfsd() {
        assert_eq!(check_seqid(0, 5), Ok(()));
        assert_eq!(check_seqid(5, 5), Ok(()));
        assert_eq!(check_seqid(4, 5), Err(Nfsstat4::OldStateid));
        assert_eq!(check_seqid(6, 5), Err(Nfsstat4::BadStateid));
        // Across the wrap: 1 follows u32::MAX.
        assert_eq!(check_seqid(u32::MAX, 1), Err(Nfsstat4::OldStateid));
        assert_eq!(check_seqid(2, u32::MAX), Err(Nfsstat4::BadStateid));
        assert_eq!(next_seqid(1), 2);
        assert_eq!(next_seqid(u32::MAX), 1);
    }

    #[test]
    fn the_current_stateid_is_the_compounds() {
        let current = StateId4 {
            seqid: 1,
            other: [0; NFS4_OTHER_SIZE],
        };
        assert!(is_current(&current));
        let saved = StateId4 {
            seqid: 3,
            other: [7; NFS4_OTHER_SIZE],
        };
        assert_eq!(resolve_current(&current, Some(saved)), Ok(saved));
        assert_eq!(resolve_current(&current, None), Err(Nfsstat4::BadStateid));
        assert_eq!(resolve_current(&saved, None), Ok(saved));
        // The anonymous stateid is not the current one.
        assert_eq!(
            resolve_current(&StateId4::default(), None),
            Ok(StateId4::default())
        );
    }
}
