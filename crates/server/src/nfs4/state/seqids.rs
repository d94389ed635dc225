//! Minor version 0's exactly-once rules for open- and lock-owners (RFC
//! 7530 sections 9.1.7 and 16.16.5; docs/nfs4-complete-design.md, B):
//! without sessions, each owner numbers its requests that change state,
//! and the server keeps the last one's result.
//!
//! - An op of an owner (OPEN, OPEN_CONFIRM, OPEN_DOWNGRADE, CLOSE, LOCK,
//!   LOCKU) carries the seqid the owner's next request must have
//!   ([`OwnerSeq::next`]): that one runs; the one before it is a
//!   retransmission, answered with the result kept ([`LastReply`]); any
//!   other is `BAD_SEQID`.
//! - After the op the owner's seqid moves on, and its result is kept,
//!   unless the op failed with `STALE_CLIENTID`, `STALE_STATEID`,
//!   `BAD_STATEID` or `BAD_SEQID` (knfsd's `seqid_mutating_err`).
//! - An open-owner's first OPEN makes it, unconfirmed: its open stateid
//!   is good for nothing but OPEN_CONFIRM (`BAD_STATEID`), and an OPEN of
//!   an unconfirmed owner replaces it, unchecked (knfsd's
//!   `nfsd4_process_open1`).
//! - A new lock-owner (LOCK's `open_to_lock_owner4`) starts at the
//!   `lock_seqid` it is given; its open-owner's seqid is the one checked
//!   and its result the one kept, and both move on. An existing one
//!   given as new must be given its next seqid (knfsd).
//! - Open-owners of minor version 0 outlive their last open, for a
//!   retransmitted CLOSE and the seqid of the owner's next OPEN; they go
//!   with their client, or when its owners reach their bound
//!   ([`super::limits::OPEN_OWNERS_PER_CLIENT`]), idle ones first.
//!
//! Minor versions 1 and 2 ignore the seqids: a session's slot gives
//! exactly-once there.

use std::sync::Arc;

use dionfs_proto::nfs4::{Nfsstat4, StateId4};

use super::clients::Client;
use super::limits::{Bound, OPEN_OWNERS_PER_CLIENT};
use super::stateids::{check_seqid, next_seqid, v4_lock_owner, ClientState, OpenOwner, StateRef};
use super::State;

/// An owner's place in its sequence (minor version 0 only).
#[derive(Debug, Clone)]
pub struct OwnerSeq {
    /// The seqid its next request carries.
    pub next: u32,
    /// OPEN_CONFIRM was done (an open-owner); lock-owners are born so.
    pub confirmed: bool,
    /// The result of its last request that moved the seqid on.
    last: Option<Arc<LastReply>>,
}

impl OwnerSeq {
    fn new(next: u32, confirmed: bool) -> Self {
        OwnerSeq {
            next,
            confirmed,
            last: None,
        }
    }

    /// Whether a request with `seqid` runs: the next one does, the last
    /// one is answered again, any other is `BAD_SEQID`.
    fn check(&self, seqid: u32) -> Result<(), Refused> {
        if seqid == self.next {
            return Ok(());
        }
        match &self.last {
            Some(last) if seqid == self.next.wrapping_sub(1) => {
                Err(Refused::Replay(Arc::clone(last)))
            }
            _ => Err(Refused::Status(Nfsstat4::BadSeqid)),
        }
    }
}

/// The result of an owner's last request, for its retransmission.
#[derive(Debug, PartialEq, Eq)]
pub struct LastReply {
    pub status: Nfsstat4,
    /// The op's result after its status.
    pub body: Vec<u8>,
    /// An OPEN's file (export id and handle): the current filehandle
    /// after it, again after its retransmission.
    pub file: Option<(u16, Vec<u8>)>,
}

/// Why an op of an owner does not run.
#[derive(Debug)]
pub enum Refused {
    /// A retransmission: answered with the result kept.
    Replay(Arc<LastReply>),
    Status(Nfsstat4),
}

impl From<Nfsstat4> for Refused {
    fn from(status: Nfsstat4) -> Self {
        Refused::Status(status)
    }
}

/// Which of a client's owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerName {
    Open(Vec<u8>),
    Lock(Vec<u8>),
}

/// An op whose seqid was checked and that runs: told its result after
/// ([`State::owner_done`]).
#[derive(Debug)]
pub struct OwnerStep {
    pub client: Arc<Client>,
    pub owner: OwnerName,
    /// LOCK's new lock-owner, and the seqid it was given.
    pub new_lock_owner: Option<(Vec<u8>, u32)>,
    /// An OPEN's file, once it is opened (export id and handle).
    pub file: Option<(u16, Vec<u8>)>,
}

impl OwnerStep {
    fn new(client: &Arc<Client>, owner: OwnerName) -> Self {
        OwnerStep {
            client: Arc::clone(client),
            owner,
            new_lock_owner: None,
            file: None,
        }
    }
}

/// Whether an op failing with `status` still moves its owner's seqid on
/// (all but the four of RFC 7530 section 9.1.7 that say the request
/// could not be tied to its owner, as knfsd's `seqid_mutating_err`).
pub fn moves_seqid(status: Nfsstat4) -> bool {
    !matches!(
        status,
        Nfsstat4::StaleClientid
            | Nfsstat4::StaleStateid
            | Nfsstat4::BadStateid
            | Nfsstat4::BadSeqid
    )
}

/// The sequence of `client`'s owner `name`, if it has one.
fn seq_mut<'s>(state: &'s mut ClientState, name: &OwnerName) -> Option<&'s mut OwnerSeq> {
    match name {
        OwnerName::Open(owner) => state.open_owners.get_mut(owner)?.seq.as_mut(),
        OwnerName::Lock(owner) => state.lock_owners.get_mut(owner)?.seq.as_mut(),
    }
}

impl State {
    /// OPEN's seqid (minor version 0) for `client`'s open-owner `owner`:
    /// a confirmed owner's is checked; an unconfirmed one is dropped with
    /// its open and made again, as a new one is, starting at `seqid`.
    /// Past the bound on open-owners (idle ones dropped first): `DELAY`.
    pub fn open_seqid(
        &self,
        client: &Arc<Client>,
        owner: &[u8],
        seqid: u32,
    ) -> Result<OwnerStep, Refused> {
        let mut state = client.state.lock();
        if let Some(known) = state.open_owners.get_mut(owner) {
            if let Some(seq) = known.seq.as_ref().filter(|seq| seq.confirmed) {
                seq.check(seqid)?;
                known.last_closed = None;
                return Ok(OwnerStep::new(client, OwnerName::Open(owner.to_vec())));
            }
        }
        if let Some(unconfirmed) = state.open_owners.get(owner) {
            let opens: Vec<_> = unconfirmed.opens.values().copied().collect();
            for other in opens {
                self.release_open(client, &mut state, &other);
            }
            state.open_owners.remove(owner);
        }
        if state.open_owners.len() >= OPEN_OWNERS_PER_CLIENT {
            state
                .open_owners
                .retain(|_, o| o.seq.is_none() || !o.opens.is_empty());
            if state.open_owners.len() >= OPEN_OWNERS_PER_CLIENT {
                return Err(self
                    .refusals
                    .refuse(Bound::OpenOwners, client.address)
                    .into());
            }
        }
        state.open_owners.insert(
            owner.to_vec(),
            OpenOwner {
                opens: Default::default(),
                seq: Some(OwnerSeq::new(seqid, false)),
                last_closed: None,
            },
        );
        Ok(OwnerStep::new(client, OwnerName::Open(owner.to_vec())))
    }

    /// The seqid of an op naming `client`'s state by `stateid` (CLOSE,
    /// OPEN_DOWNGRADE, OPEN_CONFIRM, LOCKU, LOCK's open or lock
    /// stateid), checked for the owner of that state, before the op
    /// checks the stateid's own seqid and file (knfsd's
    /// `nfs4_preprocess_seqid_op`). The open-owner must be confirmed
    /// unless `unconfirmed` (OPEN_CONFIRM): `BAD_STATEID`.
    pub fn stateid_seqid(
        &self,
        client: &Arc<Client>,
        stateid: &StateId4,
        seqid: u32,
        unconfirmed: bool,
    ) -> Result<OwnerStep, Refused> {
        let mut state = client.state.lock();
        let name = match self.find_state_any(client, &state, stateid) {
            Ok(StateRef::Open(open)) => OwnerName::Open(open.owner.clone()),
            Ok(StateRef::Lock(lock)) => OwnerName::Lock(lock.lock_owner.clone()),
            // A delegation has no owner (and no op with a seqid takes
            // one).
            Ok(StateRef::Deleg(_)) => return Err(Nfsstat4::BadStateid.into()),
            Err(Nfsstat4::BadStateid) => {
                // The open an owner's last CLOSE closed: its
                // retransmission is answered, anything else is refused.
                let closer = state
                    .open_owners
                    .values()
                    .find(|o| o.last_closed == Some(stateid.other));
                if let Some(seq) = closer.and_then(|o| o.seq.as_ref()) {
                    seq.check(seqid)?;
                }
                return Err(Nfsstat4::BadStateid.into());
            }
            Err(status) => return Err(status.into()),
        };
        let Some(seq) = seq_mut(&mut state, &name) else {
            return Ok(OwnerStep::new(client, name));
        };
        seq.check(seqid)?;
        if !seq.confirmed && !unconfirmed {
            return Err(Nfsstat4::BadStateid.into());
        }
        if let OwnerName::Open(owner) = &name {
            if let Some(known) = state.open_owners.get_mut(owner) {
                known.last_closed = None;
            }
        }
        Ok(OwnerStep::new(client, name))
    }

    /// LOCK's new lock-owner `lock_owner` (minor version 0): one `client`
    /// has already must be given its next seqid, else `BAD_SEQID`.
    pub fn new_lock_owner_seqid(
        &self,
        client: &Client,
        lock_owner: &[u8],
        lock_seqid: u32,
    ) -> Result<(), Nfsstat4> {
        let state = client.state.lock();
        match state
            .lock_owners
            .get(lock_owner)
            .and_then(|o| o.seq.as_ref())
        {
            Some(seq) if seq.next != lock_seqid => Err(Nfsstat4::BadSeqid),
            _ => Ok(()),
        }
    }

    /// After the op of `step` answered `status` with `result` (its result
    /// after the status): the owner's seqid moves on and the result is
    /// kept, unless `status` leaves seqids as they were. LOCK's new
    /// lock-owner, made by the LOCK, starts after its given seqid.
    pub fn owner_done(&self, step: OwnerStep, status: Nfsstat4, result: &[u8]) {
        if !moves_seqid(status) {
            return;
        }
        let mut state = step.client.state.lock();
        if let Some(seq) = seq_mut(&mut state, &step.owner) {
            seq.next = seq.next.wrapping_add(1);
            seq.last = Some(Arc::new(LastReply {
                status,
                body: result.to_vec(),
                file: step.file,
            }));
        }
        if let Some((lock_owner, lock_seqid)) = step.new_lock_owner {
            if let Some(owner) = state.lock_owners.get_mut(&lock_owner) {
                match &mut owner.seq {
                    Some(seq) => seq.next = seq.next.wrapping_add(1),
                    None => owner.seq = Some(OwnerSeq::new(lock_seqid.wrapping_add(1), true)),
                }
            }
        }
    }

    /// Confirms `client`'s open-owner `owner` without OPEN_CONFIRM, as a
    /// reclaim (CLAIM_PREVIOUS) does.
    pub fn confirm_open_owner(&self, client: &Client, owner: &[u8]) {
        let mut state = client.state.lock();
        if let Some(seq) = state
            .open_owners
            .get_mut(owner)
            .and_then(|o| o.seq.as_mut())
        {
            seq.confirmed = true;
        }
    }

    /// Whether `stateid`, which OPEN answered, is the open of an
    /// unconfirmed owner (`OPEN4_RESULT_CONFIRM`).
    pub fn awaits_confirm(&self, client: &Client, stateid: &StateId4) -> bool {
        let state = client.state.lock();
        matches!(state.stateids.get(&stateid.other), Some(StateRef::Open(open)) if open.unconfirmed)
    }

    /// OPEN_CONFIRM (RFC 7530 section 16.18) of `client`'s open
    /// `stateid` of the current file `fh`: its owner confirmed, the
    /// stateid's seqid incremented. An owner confirmed already, another
    /// file's stateid, a lock stateid: `BAD_STATEID`.
    pub fn open_confirm(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
    ) -> Result<StateId4, Nfsstat4> {
        let mut state = client.state.lock();
        let found = self.find_state_any(client, &state, stateid)?;
        check_seqid(stateid.seqid, found.seqid())?;
        let StateRef::Open(open) = found else {
            return Err(Nfsstat4::BadStateid);
        };
        if open.fh != fh {
            return Err(Nfsstat4::BadStateid);
        }
        let owner = open.owner.clone();
        let seq = state
            .open_owners
            .get_mut(&owner)
            .and_then(|o| o.seq.as_mut())
            .ok_or(Nfsstat4::BadStateid)?;
        if seq.confirmed {
            return Err(Nfsstat4::BadStateid);
        }
        seq.confirmed = true;
        let Some(StateRef::Open(open)) = state.stateids.get_mut(&stateid.other) else {
            return Err(Nfsstat4::BadStateid);
        };
        open.unconfirmed = false;
        open.seqid = next_seqid(open.seqid);
        Ok(StateId4 {
            seqid: open.seqid,
            other: stateid.other,
        })
    }

    /// RELEASE_LOCKOWNER (RFC 7530 section 16.37): `client`'s lock-owner
    /// `owner` and its lock stateids forgotten, unless it holds a lock
    /// (`LOCKS_HELD`). An owner not known is released already.
    pub fn release_lockowner(&self, client: &Client, owner: &[u8]) -> Nfsstat4 {
        let mut state = client.state.lock();
        let Some(lock_owner) = state.lock_owners.get(owner) else {
            return Nfsstat4::Ok;
        };
        let stateids: Vec<_> = lock_owner.by_open.values().copied().collect();
        let table_owner = v4_lock_owner(client, owner);
        {
            let table = self.locks.table.lock();
            let held = stateids
                .iter()
                .any(|other| match state.stateids.get(other) {
                    Some(StateRef::Lock(lock)) => table.holds(&lock.fh, &table_owner),
                    _ => false,
                });
            if held {
                return Nfsstat4::LocksHeld;
            }
        }
        for other in &stateids {
            state.forget_lock(other);
        }
        state.lock_owners.remove(owner);
        Nfsstat4::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::super::stateids::{Use, ACCESS_READ, CLOSED};
    use super::super::testing::*;
    use super::*;

    /// Runs `step` as the op it stands for, answering `status` and
    /// `body`.
    fn done(state: &State, step: OwnerStep, status: Nfsstat4, body: &[u8]) {
        state.owner_done(step, status, body);
    }

    fn replayed(result: Result<OwnerStep, Refused>) -> Arc<LastReply> {
        match result {
            Err(Refused::Replay(last)) => last,
            other => panic!("not a replay: {other:?}"),
        }
    }

    fn refused(result: Result<OwnerStep, Refused>) -> Nfsstat4 {
        match result {
            Err(Refused::Status(status)) => status,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_new_open_owner_is_good_for_nothing_until_confirmed() {
        let (state, a) = state_and_client("a");
        let step = state.open_seqid(&a, b"o", 7).unwrap();
        let open = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        done(&state, step, Nfsstat4::Ok, b"open");
        assert!(state.awaits_confirm(&a, &open));
        assert_eq!(
            state.check_stateid(&a, &open, b"f", Use::Read),
            Err(Nfsstat4::BadStateid)
        );
        // CLOSE and the other ops want a confirmed owner.
        assert_eq!(
            refused(state.stateid_seqid(&a, &open, 8, false)),
            Nfsstat4::BadStateid
        );
        // OPEN_CONFIRM with the next seqid, on the file.
        let step = state.stateid_seqid(&a, &open, 8, true).unwrap();
        assert_eq!(
            state.open_confirm(&a, &open, b"g"),
            Err(Nfsstat4::BadStateid)
        );
        let confirmed = state.open_confirm(&a, &open, b"f").unwrap();
        done(&state, step, Nfsstat4::Ok, b"confirmed");
        assert_eq!(confirmed.seqid, 2);
        assert!(!state.awaits_confirm(&a, &confirmed));
        assert!(state.check_stateid(&a, &confirmed, b"f", Use::Read).is_ok());
        // Confirmed twice: refused (its seqid is the next one).
        state.stateid_seqid(&a, &confirmed, 9, true).unwrap();
        assert_eq!(
            state.open_confirm(&a, &confirmed, b"f"),
            Err(Nfsstat4::BadStateid)
        );
    }

    #[test]
    fn the_last_seqid_is_answered_again_and_others_are_bad() {
        let (state, a) = state_and_client("a");
        let step = state.open_seqid(&a, b"o", 1).unwrap();
        let open = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        done(&state, step, Nfsstat4::Ok, b"first");
        let step = state.stateid_seqid(&a, &open, 2, true).unwrap();
        let open = state.open_confirm(&a, &open, b"f").unwrap();
        done(&state, step, Nfsstat4::Ok, b"confirm");
        // The OPEN_CONFIRM again: its result.
        let last = replayed(state.stateid_seqid(&a, &open, 2, true));
        assert_eq!(last.body, b"confirm");
        assert_eq!(last.status, Nfsstat4::Ok);
        // Neither the last nor the next: BAD_SEQID, for OPEN too.
        assert_eq!(
            refused(state.stateid_seqid(&a, &open, 5, false)),
            Nfsstat4::BadSeqid
        );
        assert_eq!(refused(state.open_seqid(&a, b"o", 1)), Nfsstat4::BadSeqid);
        // A failure that could not be tied to the owner moves nothing;
        // one that could (DENIED, ACCESS...) does, and is kept.
        let step = state.open_seqid(&a, b"o", 3).unwrap();
        done(&state, step, Nfsstat4::BadStateid, b"");
        let step = state.open_seqid(&a, b"o", 3).unwrap();
        done(&state, step, Nfsstat4::Access, b"");
        let last = replayed(state.open_seqid(&a, b"o", 3));
        assert_eq!(last.status, Nfsstat4::Access);
        state.open_seqid(&a, b"o", 4).unwrap();
        // The seqid wraps.
        let mut s = a.state.lock();
        s.open_owners
            .get_mut(b"o".as_slice())
            .unwrap()
            .seq
            .as_mut()
            .unwrap()
            .next = u32::MAX;
        drop(s);
        let step = state.open_seqid(&a, b"o", u32::MAX).unwrap();
        done(&state, step, Nfsstat4::Ok, b"wrap");
        state.open_seqid(&a, b"o", 0).unwrap();
    }

    #[test]
    fn an_open_of_an_unconfirmed_owner_replaces_it() {
        let (state, a) = state_and_client("a");
        let step = state.open_seqid(&a, b"o", 1).unwrap();
        let first = state.open(&a, b"o", b"f", ACCESS_READ, 2).unwrap();
        done(&state, step, Nfsstat4::Ok, b"");
        // Any seqid: the owner starts again, its open gone (its deny
        // reservation with it).
        let step = state.open_seqid(&a, b"o", 40).unwrap();
        assert_eq!(
            refused(state.stateid_seqid(&a, &first, 2, true)),
            Nfsstat4::BadStateid
        );
        let second = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        assert_ne!(second.other, first.other);
        done(&state, step, Nfsstat4::Ok, b"");
        state.stateid_seqid(&a, &second, 41, true).unwrap();
    }

    #[test]
    fn a_closed_open_answers_its_close_again() {
        let (state, a) = state_and_client("a");
        let step = state.open_seqid(&a, b"o", 1).unwrap();
        let open = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        done(&state, step, Nfsstat4::Ok, b"");
        let step = state.stateid_seqid(&a, &open, 2, true).unwrap();
        let open = state.open_confirm(&a, &open, b"f").unwrap();
        done(&state, step, Nfsstat4::Ok, b"");
        let step = state.stateid_seqid(&a, &open, 3, false).unwrap();
        assert_eq!(state.close(&a, &open, b"f"), Ok(CLOSED));
        done(&state, step, Nfsstat4::Ok, b"closed");
        // The owner stays for the retransmission, and its next OPEN.
        let last = replayed(state.stateid_seqid(&a, &open, 3, false));
        assert_eq!(last.body, b"closed");
        assert_eq!(
            refused(state.stateid_seqid(&a, &open, 4, false)),
            Nfsstat4::BadStateid
        );
        assert!(!a.holds_state());
        let step = state.open_seqid(&a, b"o", 4).unwrap();
        let again = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        done(&state, step, Nfsstat4::Ok, b"");
        // Confirmed already: good at once.
        assert!(!state.awaits_confirm(&a, &again));
        // The next op of the owner forgets the closed stateid.
        assert_eq!(
            refused(state.stateid_seqid(&a, &open, 4, false)),
            Nfsstat4::BadStateid
        );
    }

    #[test]
    fn a_reclaim_confirms_its_owner() {
        let (state, a) = state_and_client("a");
        let step = state.open_seqid(&a, b"o", 9).unwrap();
        // What OPEN does for CLAIM_PREVIOUS before it opens: Linux
        // confirms no reclaimed open (it would send OPEN_CONFIRM with an
        // empty filehandle).
        state.confirm_open_owner(&a, b"o");
        let open = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        done(&state, step, Nfsstat4::Ok, b"");
        assert!(!state.awaits_confirm(&a, &open));
        assert!(state.check_stateid(&a, &open, b"f", Use::Read).is_ok());
        state.stateid_seqid(&a, &open, 10, false).unwrap();
    }

    #[test]
    fn idle_owners_make_room_for_new_ones() {
        let (state, a) = state_and_client("a");
        {
            let mut s = a.state.lock();
            for n in 0..OPEN_OWNERS_PER_CLIENT {
                s.open_owners.insert(
                    format!("idle-{n}").into_bytes(),
                    OpenOwner {
                        opens: Default::default(),
                        seq: Some(OwnerSeq::new(1, true)),
                        last_closed: None,
                    },
                );
            }
        }
        state.open_seqid(&a, b"new", 1).unwrap();
        assert_eq!(a.state.lock().open_owners.len(), 1);
    }
}
