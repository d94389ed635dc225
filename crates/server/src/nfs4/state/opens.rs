//! Opens (design sections 5.1 and 5.3): OPEN, OPEN_DOWNGRADE and CLOSE
//! as state. Each open-owner has at most one open stateid per file; a
//! second OPEN of the file by the owner upgrades it (seqid incremented,
//! access and deny unioned), as knfsd's `nfsd4_upgrade_open`. The
//! reservation of the union is the owner's share reservation of the file
//! in the lock tables NLM's SHARE also uses, so OPEN deny modes and NLM
//! shares conflict both ways (`SHARE_DENIED`).
//!
//! The op handlers check the file (a regular file of the export, the
//! caller's access) before and give plain values: the open-owner's
//! bytes, the file handle, the share access (`OPEN4_SHARE_ACCESS_*`
//! without the `WANT` bits) and deny (`OPEN4_SHARE_DENY_*`).

use dionfs_core::locks::shares::{Reservation, Reserve};
use dionfs_core::locks::Span;
use dionfs_proto::nfs4::{Nfsstat4, StateId4};

use super::clients::Client;
use super::limits::{Bound, OPEN_OWNERS_PER_CLIENT, STATEIDS_PER_CLIENT};
use super::stateids::{
    next_seqid, v4_lock_owner, ClientState, OpenState, Other, StateRef, ACCESS_BOTH, CLOSED,
};
use super::State;
use crate::locks::{ClientId as LockClient, ShareOwner};

/// Deny modes go from 0 (none) to 3 (both).
const DENY_BOTH: u32 = 3;

/// The lock tables' owner of `client`'s open-owner `owner`.
fn share_owner(client: &Client, owner: &[u8]) -> ShareOwner {
    ShareOwner::V4 {
        client: LockClient(client.id.0),
        open_owner: owner.to_vec(),
        address: client.address,
    }
}

/// `access` 1 to 3 and `deny` 0 to 3, else `INVAL` (knfsd's
/// `nfsd4_decode_share_access` and `_deny`).
fn check_modes(access: u32, deny: u32) -> Result<(), Nfsstat4> {
    if access == 0 || access & !ACCESS_BOTH != 0 || deny & !DENY_BOTH != 0 {
        return Err(Nfsstat4::Inval);
    }
    Ok(())
}

impl State {
    /// OPEN's state (RFC 8881 section 18.16), once the handler has found
    /// or made the regular file `fh`: `client`'s open-owner `owner` opens
    /// it for `access`, denying `deny`. A new open stateid (seqid 1), or
    /// the owner's open of the file upgraded (seqid incremented). Another
    /// client's or owner's reservation in the way (an NLM share too):
    /// `SHARE_DENIED`, the open as it was. Past a bound (open-owners,
    /// stateids, reservations per address): `DELAY`.
    pub fn open(
        &self,
        client: &Client,
        owner: &[u8],
        fh: &[u8],
        access: u32,
        deny: u32,
    ) -> Result<StateId4, Nfsstat4> {
        check_modes(access, deny)?;
        let mut state = client.state.lock();
        let existing = state
            .open_owners
            .get(owner)
            .and_then(|o| o.opens.get(fh))
            .copied();
        let (union_access, union_deny) = match existing.and_then(|o| state.stateids.get(&o)) {
            // The owner's own open conflicts too (RFC 7530 section 9.9;
            // knfsd counts it in `fi_share_deny` and `fi_access`).
            Some(StateRef::Open(open)) if access & open.deny != 0 || deny & open.access != 0 => {
                return Err(Nfsstat4::ShareDenied)
            }
            Some(StateRef::Open(open)) => (open.access | access, open.deny | deny),
            _ => (access, deny),
        };
        if existing.is_none() {
            if !state.open_owners.contains_key(owner)
                && state.open_owners.len() >= OPEN_OWNERS_PER_CLIENT
            {
                return Err(self.refusals.refuse(Bound::OpenOwners, client.address));
            }
            if state.stateids.len() >= STATEIDS_PER_CLIENT {
                return Err(self.refusals.refuse(Bound::Stateids, client.address));
            }
        }
        let reservation = Reservation::new(union_access, union_deny);
        match self
            .locks
            .reserve(fh, &share_owner(client, owner), reservation)
        {
            Reserve::Granted => {}
            Reserve::Conflict => return Err(Nfsstat4::ShareDenied),
            Reserve::NoRoom => return Err(self.refusals.refuse(Bound::LockTables, client.address)),
        }
        if let Some(other) = existing {
            if let Some(StateRef::Open(open)) = state.stateids.get_mut(&other) {
                open.access = union_access;
                open.deny = union_deny;
                open.access_modes |= 1 << access;
                open.deny_modes |= 1 << deny;
                open.seqid = next_seqid(open.seqid);
                return Ok(StateId4 {
                    seqid: open.seqid,
                    other,
                });
            }
        }
        let other = state.new_other(self.boot, client);
        let unconfirmed = state
            .open_owners
            .get(owner)
            .and_then(|o| o.seq.as_ref())
            .is_some_and(|seq| !seq.confirmed);
        state.stateids.insert(
            other,
            StateRef::Open(OpenState {
                fh: fh.to_vec(),
                owner: owner.to_vec(),
                seqid: 1,
                access,
                deny,
                access_modes: 1 << access,
                deny_modes: 1 << deny,
                lock_stateids: Vec::new(),
                unconfirmed,
            }),
        );
        state
            .open_owners
            .entry(owner.to_vec())
            .or_default()
            .opens
            .insert(fh.to_vec(), other);
        Ok(StateId4 { seqid: 1, other })
    }

    /// OPEN_DOWNGRADE (RFC 8881 section 18.18) of the open `stateid` of
    /// the current file `fh` to `access` and `deny`: `INVAL` unless an
    /// OPEN of the stateid used each (knfsd's `test_access`,
    /// `test_deny`). The modes not within the new ones are forgotten
    /// (`reset_union_bmap_*`), the reservation shrinks, the seqid is
    /// incremented.
    pub fn open_downgrade(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
        access: u32,
        deny: u32,
    ) -> Result<StateId4, Nfsstat4> {
        check_modes(access, deny)?;
        let mut state = client.state.lock();
        let (other, found) = self.find_state_of(client, &state, stateid, fh)?;
        let StateRef::Open(open) = found else {
            return Err(Nfsstat4::BadStateid);
        };
        if open.access_modes & (1 << access) == 0 || open.deny_modes & (1 << deny) == 0 {
            return Err(Nfsstat4::Inval);
        }
        let owner = share_owner(client, &open.owner);
        // Narrower than what is held: never a conflict; `NoRoom` cannot
        // come of a reservation changed.
        if self
            .locks
            .shares
            .lock()
            .reserve(fh, &owner, Reservation::new(access, deny))
            != Reserve::Granted
        {
            return Err(Nfsstat4::Serverfault);
        }
        let Some(StateRef::Open(open)) = state.stateids.get_mut(&other) else {
            return Err(Nfsstat4::BadStateid);
        };
        for mode in 1..=3u32 {
            if mode & access != mode {
                open.access_modes &= !(1 << mode);
            }
        }
        for mode in 0..=3u32 {
            if mode & deny != mode {
                open.deny_modes &= !(1 << mode);
            }
        }
        open.access_modes |= 1 << access;
        open.deny_modes |= 1 << deny;
        open.access = access;
        open.deny = deny;
        open.seqid = next_seqid(open.seqid);
        Ok(StateId4 {
            seqid: open.seqid,
            other,
        })
    }

    /// CLOSE (RFC 8881 section 18.2) of the open `stateid` of the current
    /// file `fh`: the reservation is released, and the lock stateids born
    /// of the open go with their locks, as knfsd's
    /// `release_open_stateid_locks` (NLM is told of the file). Answers
    /// the special invalid stateid.
    pub fn close(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
    ) -> Result<StateId4, Nfsstat4> {
        let mut state = client.state.lock();
        let (other, found) = self.find_state_of(client, &state, stateid, fh)?;
        let StateRef::Open(open) = found else {
            return Err(Nfsstat4::BadStateid);
        };
        let owner = open.owner.clone();
        self.release_open(client, &mut state, &other);
        if let Some(owner) = state.open_owners.get_mut(&owner) {
            if owner.seq.is_some() {
                owner.last_closed = Some(other);
            }
        }
        Ok(CLOSED)
    }

    /// Drops the open `other` of `state`: its lock stateids and their
    /// locks, its reservation, its owner if it has no other open.
    pub(super) fn release_open(&self, client: &Client, state: &mut ClientState, other: &Other) {
        let Some(StateRef::Open(open)) = state.stateids.get(other).cloned() else {
            return;
        };
        for lock in &open.lock_stateids {
            if let Some(lock) = state.forget_lock(lock) {
                let owner = v4_lock_owner(client, &lock.lock_owner);
                let whole = Span {
                    start: 0,
                    end: u64::MAX,
                };
                // The whole file: no lock is split, none refused.
                if let Err(e) = self.locks.unlock(&lock.fh, &owner, whole) {
                    tracing::warn!(error = %e, clientid = client.id.0,
                        "NFSv4 CLOSE could not release a lock-owner's locks");
                }
            }
        }
        self.locks
            .shares
            .lock()
            .release(&open.fh, &share_owner(client, &open.owner));
        state.stateids.remove(other);
        if let Some(owner) = state.open_owners.get_mut(&open.owner) {
            owner.opens.remove(&open.fh);
            // A minor version 0 owner stays, with its seqid (`seqids.rs`).
            if owner.opens.is_empty() && owner.seq.is_none() {
                state.open_owners.remove(&open.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::stateids::{Checked, Use, ACCESS_READ, ACCESS_WRITE};
    use super::super::testing::*;
    use super::*;
    use crate::locks::{NlmHost, NlmShareOwner};

    const DENY_NONE: u32 = 0;
    const DENY_READ: u32 = 1;
    const DENY_WRITE: u32 = 2;

    #[test]
    fn an_open_upgrades_the_owners_open_of_the_file() {
        let (state, a) = state_and_client("a");
        let first = state.open(&a, b"o", b"f", ACCESS_READ, DENY_NONE).unwrap();
        assert_eq!(first.seqid, 1);
        let up = state
            .open(&a, b"o", b"f", ACCESS_WRITE, DENY_WRITE)
            .unwrap();
        assert_eq!(up.other, first.other);
        assert_eq!(up.seqid, 2);
        // The union is held: readable and writable now.
        assert!(state.check_stateid(&a, &up, b"f", Use::Write).is_ok());
        // Another owner, another file: new stateids.
        let other_owner = state.open(&a, b"p", b"f", ACCESS_READ, DENY_NONE).unwrap();
        assert_ne!(other_owner.other, first.other);
        let other_file = state.open(&a, b"o", b"g", ACCESS_READ, DENY_NONE).unwrap();
        assert_ne!(other_file.other, first.other);
        // The old seqid of the upgraded open is old.
        assert_eq!(
            state.check_stateid(&a, &first, b"f", Use::Read),
            Err(Nfsstat4::OldStateid)
        );
        assert_eq!(
            state.open(&a, b"o", b"f", 0, DENY_NONE),
            Err(Nfsstat4::Inval)
        );
        assert_eq!(
            state.open(&a, b"o", b"f", ACCESS_READ, 4),
            Err(Nfsstat4::Inval)
        );
        assert!(a.holds_state());
    }

    #[test]
    fn deny_modes_conflict_between_clients_and_with_nlm() {
        let (state, a) = state_and_client("a");
        let b = client(&state, "b");
        let mine = state.open(&a, b"o", b"f", ACCESS_READ, DENY_WRITE).unwrap();
        assert_eq!(
            state.open(&b, b"o", b"f", ACCESS_WRITE, DENY_NONE),
            Err(Nfsstat4::ShareDenied)
        );
        // Another owner of the same client is another reservation too.
        assert_eq!(
            state.open(&a, b"p", b"f", ACCESS_BOTH, DENY_NONE),
            Err(Nfsstat4::ShareDenied)
        );
        // The refused OPEN left nothing behind.
        assert!(!b.holds_state());
        // An NLM share reading denies a v4 writer, and a v4 open denying
        // writers an NLM share writing.
        let nlm = ShareOwner::Nlm(NlmShareOwner {
            host: NlmHost {
                name: b"h".to_vec(),
                ip: peer(),
            },
            oh: b"oh".to_vec(),
        });
        assert_eq!(
            state
                .locks
                .reserve(b"f", &nlm, Reservation::new(ACCESS_WRITE, 0)),
            Reserve::Conflict
        );
        assert_eq!(
            state
                .locks
                .reserve(b"g", &nlm, Reservation::new(ACCESS_READ, DENY_WRITE)),
            Reserve::Granted
        );
        assert_eq!(
            state.open(&b, b"o", b"g", ACCESS_WRITE, DENY_NONE),
            Err(Nfsstat4::ShareDenied)
        );
        // CLOSE releases the reservation.
        assert_eq!(state.close(&a, &mine, b"f"), Ok(CLOSED));
        state.open(&b, b"o", b"f", ACCESS_WRITE, DENY_READ).unwrap();
    }

    #[test]
    fn a_failed_upgrade_keeps_the_open() {
        let (state, a) = state_and_client("a");
        let b = client(&state, "b");
        let open = state.open(&a, b"o", b"f", ACCESS_READ, DENY_NONE).unwrap();
        state.open(&b, b"o", b"f", ACCESS_READ, DENY_WRITE).unwrap();
        assert_eq!(
            state.open(&a, b"o", b"f", ACCESS_WRITE, DENY_NONE),
            Err(Nfsstat4::ShareDenied)
        );
        assert!(state.check_stateid(&a, &open, b"f", Use::Read).is_ok());
        assert_eq!(
            state.check_stateid(&a, &open, b"f", Use::Write),
            Err(Nfsstat4::Openmode)
        );
    }

    #[test]
    fn open_downgrade_goes_only_to_modes_opened() {
        let (state, a) = state_and_client("a");
        let b = client(&state, "b");
        state.open(&a, b"o", b"f", ACCESS_READ, DENY_NONE).unwrap();
        let both = state
            .open(&a, b"o", b"f", ACCESS_WRITE, DENY_WRITE)
            .unwrap();
        // READ|WRITE was never opened as such; nor DENY_READ.
        assert_eq!(
            state.open_downgrade(&a, &both, b"f", ACCESS_BOTH, DENY_NONE),
            Err(Nfsstat4::Inval)
        );
        assert_eq!(
            state.open_downgrade(&a, &both, b"f", ACCESS_READ, DENY_READ),
            Err(Nfsstat4::Inval)
        );
        let down = state
            .open_downgrade(&a, &both, b"f", ACCESS_READ, DENY_NONE)
            .unwrap();
        assert_eq!(down.seqid, 3);
        assert_eq!(
            state.check_stateid(&a, &down, b"f", Use::Write),
            Err(Nfsstat4::Openmode)
        );
        // The reservation shrank: another client may write now.
        state.open(&b, b"o", b"f", ACCESS_WRITE, DENY_NONE).unwrap();
        // WRITE is forgotten: no going back up by downgrade.
        assert_eq!(
            state.open_downgrade(&a, &down, b"f", ACCESS_WRITE, DENY_NONE),
            Err(Nfsstat4::Inval)
        );
        // The old seqid, another file.
        assert_eq!(
            state.open_downgrade(&a, &both, b"f", ACCESS_READ, DENY_NONE),
            Err(Nfsstat4::OldStateid)
        );
        assert_eq!(
            state.open_downgrade(&a, &down, b"g", ACCESS_READ, DENY_NONE),
            Err(Nfsstat4::BadStateid)
        );
    }

    #[test]
    fn a_closed_open_is_bad_and_its_owner_goes() {
        let (state, a) = state_and_client("a");
        let open = state.open(&a, b"o", b"f", ACCESS_READ, DENY_NONE).unwrap();
        assert_eq!(
            state.close(&a, &open, b"g"),
            Err(Nfsstat4::BadStateid),
            "another file"
        );
        state.close(&a, &open, b"f").unwrap();
        assert_eq!(state.close(&a, &open, b"f"), Err(Nfsstat4::BadStateid));
        assert_eq!(
            state.check_stateid(&a, &open, b"f", Use::Read),
            Err(Nfsstat4::BadStateid)
        );
        assert!(!a.holds_state());
        assert!(a.state.lock().open_owners.is_empty());
    }

    #[test]
    fn open_owners_and_stateids_are_bounded() {
        let (state, a) = state_and_client("a");
        {
            let mut s = a.state.lock();
            for n in 0..OPEN_OWNERS_PER_CLIENT {
                s.open_owners
                    .insert(format!("owner-{n}").into_bytes(), Default::default());
            }
        }
        assert_eq!(
            state.open(&a, b"new", b"f", ACCESS_READ, DENY_NONE),
            Err(Nfsstat4::Delay)
        );
        // A known owner may still open.
        let known = b"owner-0".as_slice();
        state.open(&a, known, b"f", ACCESS_READ, DENY_NONE).unwrap();
        {
            let mut s = a.state.lock();
            s.open_owners.clear();
            while s.stateids.len() < STATEIDS_PER_CLIENT {
                let other = s.new_other(state.boot, &a);
                s.stateids.insert(
                    other,
                    StateRef::Open(OpenState {
                        fh: b"x".to_vec(),
                        owner: b"x".to_vec(),
                        seqid: 1,
                        access: 1,
                        deny: 0,
                        access_modes: 2,
                        deny_modes: 1,
                        lock_stateids: Vec::new(),
                        unconfirmed: false,
                    }),
                );
            }
        }
        assert_eq!(
            state.open(&a, b"o", b"g", ACCESS_READ, DENY_NONE),
            Err(Nfsstat4::Delay)
        );
        assert_eq!(state.counts().refused, 2);
    }

    #[test]
    fn special_stateids_meet_deny_reservations() {
        let (state, a) = state_and_client("a");
        let anonymous = StateId4::default();
        let bypass = StateId4 {
            seqid: u32::MAX,
            other: [0xff; 12],
        };
        assert_eq!(
            state.check_stateid(&a, &anonymous, b"f", Use::Write),
            Ok(Checked::Anonymous)
        );
        state.open(&a, b"o", b"f", ACCESS_READ, DENY_WRITE).unwrap();
        // A DENY_WRITE open stops anonymous and bypass writes, not reads.
        for special in [anonymous, bypass] {
            assert_eq!(
                state.check_stateid(&a, &special, b"f", Use::Write),
                Err(Nfsstat4::Locked)
            );
        }
        assert_eq!(
            state.check_stateid(&a, &anonymous, b"f", Use::Read),
            Ok(Checked::Anonymous)
        );
        state.open(&a, b"p", b"g", ACCESS_READ, DENY_READ).unwrap();
        assert_eq!(
            state.check_stateid(&a, &anonymous, b"g", Use::Read),
            Err(Nfsstat4::Locked)
        );
        // The bypass stateid reads through a deny (knfsd).
        assert_eq!(
            state.check_stateid(&a, &bypass, b"g", Use::Read),
            Ok(Checked::Bypass)
        );
        // Zeros or ones with another seqid are no special stateid.
        let odd = StateId4 {
            seqid: 5,
            other: [0; 12],
        };
        assert_eq!(
            state.check_stateid(&a, &odd, b"f", Use::Read),
            Err(Nfsstat4::BadStateid)
        );
    }

    #[test]
    fn stateids_of_another_boot_client_or_file() {
        let (state, a) = state_and_client("a");
        let b = client(&state, "b");
        let open = state.open(&a, b"o", b"f", ACCESS_WRITE, DENY_NONE).unwrap();
        // WRITE access only: READ is allowed too (knfsd).
        let checked = state.check_stateid(&a, &open, b"f", Use::Read).unwrap();
        assert_eq!(
            checked,
            Checked::State {
                other: open.other,
                access: ACCESS_WRITE
            }
        );
        let current = StateId4 { seqid: 0, ..open };
        assert!(state.check_stateid(&a, &current, b"f", Use::Write).is_ok());
        let newer = StateId4 { seqid: 2, ..open };
        assert_eq!(
            state.check_stateid(&a, &newer, b"f", Use::Write),
            Err(Nfsstat4::BadStateid)
        );
        assert_eq!(
            state.check_stateid(&a, &open, b"g", Use::Write),
            Err(Nfsstat4::BadStateid)
        );
        assert_eq!(
            state.check_stateid(&b, &open, b"f", Use::Write),
            Err(Nfsstat4::BadStateid)
        );
        let mut stale = open;
        stale.other[..4].copy_from_slice(&state.boot.wrapping_add(1).to_be_bytes());
        assert_eq!(
            state.check_stateid(&a, &stale, b"f", Use::Write),
            Err(Nfsstat4::StaleStateid)
        );
        let mut unknown = open;
        unknown.other[11] ^= 0x40;
        assert_eq!(
            state.check_stateid(&a, &unknown, b"f", Use::Write),
            Err(Nfsstat4::BadStateid)
        );
        // TEST_STATEID: each its status; a stale one is bad there.
        assert_eq!(
            state.test_stateids(&a, &[open, newer, stale, unknown, StateId4::default()]),
            [
                Nfsstat4::Ok,
                Nfsstat4::BadStateid,
                Nfsstat4::BadStateid,
                Nfsstat4::BadStateid,
                Nfsstat4::BadStateid
            ]
        );
        let up = state.open(&a, b"o", b"f", ACCESS_READ, DENY_NONE).unwrap();
        assert_eq!(
            state.test_stateids(&a, &[open, up]),
            [Nfsstat4::OldStateid, Nfsstat4::Ok]
        );
        // FREE_STATEID of an open: close it instead.
        assert_eq!(state.free_stateid(&a, &up), Nfsstat4::LocksHeld);
        assert_eq!(state.free_stateid(&a, &unknown), Nfsstat4::BadStateid);
    }
}
