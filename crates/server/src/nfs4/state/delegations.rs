//! Delegations as a client's state (RFC 8881 section 10.4, design
//! section C): a delegation is a stateid of its client
//! ([`StateRef::Deleg`]) and an entry in the server-wide index every
//! program checks (`dionfs_core::delegations`). This module grants them
//! (OPEN's policy), takes them back (DELEGRETURN), marks them recalled
//! when a conflicting call asks the index, and revokes the ones not
//! returned within a lease of their recall (the laundromat). The recall
//! itself (CB_RECALL on the back channel) is `nfs4::delegation`'s.
//!
//! Locks: a client's state, then the index, then the lock tables (the
//! grant's check of other clients' opens and locks); the index calls the
//! recaller with no lock held, and the recaller takes the client table,
//! then the client's state.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use dionfs_core::delegations::{Held, NoGrant};
use dionfs_proto::nfs4::{Nfsstat4, StateId4};

use super::clients::Client;
use super::sessions::Session;
use super::stateids::{next_seqid, ClientState, Other, StateRef, ACCESS_WRITE};
use super::State;
use dionfs_core::locks::LockOwner;

use crate::locks::{Client as LockClient, ClientId as LockClientId};

/// A delegation of one file to one client: its stateid.
#[derive(Debug, Clone)]
pub struct DelegState {
    pub fh: Vec<u8>,
    pub write: bool,
    pub seqid: u32,
    /// When a conflict recalled it.
    pub recalled: Option<Instant>,
    /// Not returned within a lease of its recall, or its client's back
    /// channel down for a lease: the file is free of it, and its stateid
    /// answers `DELEG_REVOKED` until FREE_STATEID.
    pub revoked: bool,
    /// The file's `change` when it was granted: a write delegation's
    /// holder answering CB_GETATTR with another has changed the file.
    pub granted_change: u64,
    /// What CB_GETATTR asked and found (write delegations).
    pub asked: Asked,
    /// The holder said it changed the file (in its cache).
    pub modified: bool,
}

/// Where a write delegation's CB_GETATTR is.
#[derive(Debug, Clone, Copy, Default)]
pub enum Asked {
    #[default]
    Not,
    /// Sent; no answer yet.
    Sent,
    /// Answered at `at`, with the holder's size.
    Answered { at: Instant, size: u64 },
}

/// What a GETATTR of a file another client holds a write delegation of
/// does ([`State::getattr_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetattrStep {
    /// The holder answered lately: its size, and whether it changed the
    /// file.
    Use { size: u64, modified: bool },
    /// CB_GETATTR is out: answer `DELAY`.
    Wait,
    /// Send CB_GETATTR (marked sent), and answer `DELAY`.
    Ask,
    /// The delegation is gone: the server's attributes are right.
    Gone,
}

/// How long the holder's CB_GETATTR answer serves GETATTRs: the asking
/// client's retry after `DELAY` comes well within it.
pub const ANSWER_SERVES: std::time::Duration = std::time::Duration::from_secs(2);

/// What the recaller needs of a delegation marked recalled: the stateid
/// to name in CB_RECALL and the client.
pub struct ToRecall {
    pub stateid: StateId4,
    pub client: Arc<Client>,
}

impl State {
    /// OPEN's delegation (design section C, policy): a write delegation
    /// when `write`, else a read one, of regular file `fh` (`file` a
    /// descriptor of it, watched for processes on the server) to `client`,
    /// if the index grants it: no call of another in progress on it, no
    /// conflicting delegation, no recall of it in the last 30 s, within
    /// the bounds, and no other client holding it open in a conflicting
    /// mode (for a read delegation: for writing; for a write one: at
    /// all) nor any lock or NLM share on it but the client's own.
    pub fn grant_delegation(
        &self,
        client: &Client,
        fh: &[u8],
        file: BorrowedFd<'_>,
        write: bool,
        change: u64,
    ) -> Result<StateId4, NoGrant> {
        let mut state = client.state.lock();
        let other = state.new_other(self.boot, client);
        let held = Held {
            client: client.id.0,
            stateid: other,
            write,
        };
        let me = LockClient::V4(LockClientId(client.id.0));
        let clear = || {
            let others_open = self.locks.shares.lock().any(fh, |owner, access| {
                owner.client() != me && (write || access & ACCESS_WRITE != 0)
            });
            !others_open
                && !self
                    .locks
                    .table
                    .lock()
                    .any_holder(fh, |owner| owner.client() != me)
        };
        self.delegations.grant(fh, file, held, clear)?;
        state.stateids.insert(
            other,
            StateRef::Deleg(DelegState {
                fh: fh.to_vec(),
                write,
                seqid: 1,
                recalled: None,
                revoked: false,
                granted_change: change,
                asked: Asked::Not,
                modified: false,
            }),
        );
        Ok(StateId4 { seqid: 1, other })
    }

    /// DELEGRETURN (RFC 8881 section 18.6) of `stateid`, a delegation of
    /// the current file `fh`: the stateid, the index entry go. A revoked
    /// one is `DELEG_REVOKED` (FREE_STATEID frees it).
    pub fn delegreturn(&self, client: &Client, stateid: &StateId4, fh: &[u8]) -> Nfsstat4 {
        let mut state = client.state.lock();
        let other = match self.find_state_of(client, &state, stateid, fh) {
            Ok((other, StateRef::Deleg(_))) => other,
            Ok(_) => return Nfsstat4::BadStateid,
            Err(status) => return status,
        };
        state.stateids.remove(&other);
        drop(state);
        self.delegations.remove(fh, &other);
        Nfsstat4::Ok
    }

    /// An OPEN under delegation `stateid` of `fh` (`CLAIM_DELEGATE_CUR`,
    /// `CLAIM_DELEG_CUR_FH`): the client's delegation of that file, not
    /// revoked, recalled or not (the client tells its opens as it
    /// returns it).
    pub fn check_delegation(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
    ) -> Result<(), Nfsstat4> {
        let state = client.state.lock();
        match self.find_state_of(client, &state, stateid, fh)? {
            (_, StateRef::Deleg(_)) => Ok(()),
            _ => Err(Nfsstat4::BadStateid),
        }
    }

    /// The delegation `held` of `fh` is recalled (a conflicting call
    /// asked the index): marked so, with the time, for the laundromat.
    /// What to send CB_RECALL with, unless it is gone already. A
    /// courtesy client's is not recalled: the client is expired and its
    /// delegations with it (knfsd's `nfsd4_deleg_present` path expires a
    /// courtesy client in the way).
    pub fn mark_recalled(&self, fh: &[u8], held: &Held) -> Option<ToRecall> {
        if self.expire_courtesy(held.client) {
            return None;
        }
        let client = Arc::clone(self.table.lock().client(held.client)?);
        let mut state = client.state.lock();
        let Some(StateRef::Deleg(deleg)) = state.stateids.get_mut(&held.stateid) else {
            return None;
        };
        if deleg.fh != fh || deleg.revoked {
            return None;
        }
        deleg.recalled.get_or_insert_with(Instant::now);
        let stateid = StateId4 {
            seqid: deleg.seqid,
            other: held.stateid,
        };
        drop(state);
        Some(ToRecall { stateid, client })
    }

    /// A GETATTR of a file whose write delegation `held` another client
    /// holds, at `now`: use the holder's answer to CB_GETATTR if it came
    /// within [`ANSWER_SERVES`], wait for one asked, or ask.
    pub fn getattr_step(&self, held: &Held, now: Instant) -> GetattrStep {
        self.step_of(held, now, true)
    }

    /// A GETATTR's wait, until `until`, for the answer to the CB_GETATTR
    /// of [`GetattrStep::Ask`] or [`GetattrStep::Wait`]: `Use` once the
    /// holder answered, `Gone` once the delegation is, else `Wait` (the
    /// holder's call failed or is still out: `DELAY`). Nothing is asked
    /// again here: a holder that did not answer has its delegation
    /// recalled.
    pub fn wait_getattr_answer(&self, held: &Held, until: Instant) -> GetattrStep {
        let (lock, answered) = &self.getattr_answers;
        let mut waiting = lock.lock();
        loop {
            // Looked at under the lock `getattr_answered` notifies under:
            // no answer comes between the look and the wait unseen.
            let now = Instant::now();
            let step = self.step_of(held, now, false);
            if step != GetattrStep::Wait || now >= until {
                return step;
            }
            answered.wait_until(&mut waiting, until);
        }
    }

    /// [`Self::getattr_step`]; with `ask` false a delegation not asked
    /// (or whose holder did not answer) is `Wait`, and not marked asked.
    fn step_of(&self, held: &Held, now: Instant, ask: bool) -> GetattrStep {
        let Some(client) = self.table.lock().client(held.client).cloned() else {
            return GetattrStep::Gone;
        };
        let mut state = client.state.lock();
        let Some(StateRef::Deleg(deleg)) = state.stateids.get_mut(&held.stateid) else {
            return GetattrStep::Gone;
        };
        if deleg.revoked || deleg.recalled.is_some() {
            return GetattrStep::Gone;
        }
        match deleg.asked {
            Asked::Answered { at, size } if now.saturating_duration_since(at) < ANSWER_SERVES => {
                GetattrStep::Use {
                    size,
                    modified: deleg.modified,
                }
            }
            Asked::Sent => GetattrStep::Wait,
            _ if !ask => GetattrStep::Wait,
            _ => {
                deleg.asked = Asked::Sent;
                GetattrStep::Ask
            }
        }
    }

    /// Client `id`, if known.
    pub fn client_by_id(&self, id: u64) -> Option<Arc<Client>> {
        self.table.lock().client(id).cloned()
    }

    /// The holder of write delegation `held` answered CB_GETATTR with
    /// `size` and `change` (None: it did not answer; asked again next
    /// time).
    pub fn getattr_answered(&self, held: &Held, answer: Option<(u64, u64)>) {
        let Some(client) = self.table.lock().client(held.client).cloned() else {
            return;
        };
        let mut state = client.state.lock();
        if let Some(StateRef::Deleg(deleg)) = state.stateids.get_mut(&held.stateid) {
            deleg.asked = match answer {
                Some((size, change)) => {
                    deleg.modified |= change != deleg.granted_change;
                    Asked::Answered {
                        at: Instant::now(),
                        size,
                    }
                }
                None => Asked::Not,
            };
        }
        drop(state);
        // The GETATTRs waiting for it (`wait_getattr_answer`).
        let (lock, answered) = &self.getattr_answers;
        let _notified = lock.lock();
        answered.notify_all();
    }

    /// If `client`'s delegation `other` (its stateid's) is still held
    /// (not returned, not revoked), and so still to be recalled or asked:
    /// the client's sessions now, newest first (none for minor version 0).
    pub fn still_recalled(&self, client: &Client, other: &Other) -> Option<Vec<Arc<Session>>> {
        let held = matches!(
            client.state.lock().stateids.get(other),
            Some(StateRef::Deleg(deleg)) if !deleg.revoked
        );
        held.then(|| self.table.lock().sessions_of(client.id.0))
    }

    /// The laundromat's part (at `now`): a delegation recalled a lease
    /// ago and not returned is revoked; one whose client has no working
    /// back channel is treated as recalled now, so that it goes within a
    /// lease (RFC 8881 section 10.4.6: a client that cannot be called
    /// back holds delegations at the server's risk).
    pub(super) fn revoke_overdue(&self, clients: &[Arc<Client>], now: Instant) {
        let lease = self.lease_time();
        for client in clients {
            let back_down = if client.minor() == 0 {
                !client.callback40.lock().up
            } else {
                self.table
                    .lock()
                    .sessions_of(client.id.0)
                    .iter()
                    .all(|s| s.back_channel_down())
            };
            let mut revoked = Vec::new();
            {
                let mut state = client.state.lock();
                for (other, found) in state.stateids.iter_mut() {
                    let StateRef::Deleg(deleg) = found else {
                        continue;
                    };
                    if deleg.revoked {
                        continue;
                    }
                    if back_down && deleg.recalled.is_none() {
                        deleg.recalled = Some(now);
                    }
                    if deleg
                        .recalled
                        .is_some_and(|at| now.saturating_duration_since(at) >= lease)
                    {
                        deleg.revoked = true;
                        deleg.seqid = next_seqid(deleg.seqid);
                        revoked.push((*other, deleg.fh.clone()));
                    }
                }
            }
            for (other, fh) in revoked {
                self.delegations.remove(&fh, &other);
                if client.minor() == 0 {
                    // Minor version 0 has no FREE_STATEID: the stateid
                    // goes (knfsd's `revoke_delegation`), later uses of
                    // it are `BAD_STATEID`.
                    client.state.lock().stateids.remove(&other);
                } else {
                    client.revoked_delegations.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(
                    clientid = client.id.0,
                    address = %client.address,
                    "NFSv4 delegation revoked: not returned within a lease of its recall \
                     (or the client's back channel is down)"
                );
            }
        }
    }
}

/// FREE_STATEID of delegation `other` of `client` (its state locked): a
/// revoked one goes; one held is `LOCKS_HELD` (return it), as knfsd's
/// `nfsd4_free_stateid`.
pub(super) fn free_delegation(
    client: &Client,
    state: &mut ClientState,
    revoked: bool,
    other: &Other,
) -> Nfsstat4 {
    if !revoked {
        return Nfsstat4::LocksHeld;
    }
    state.stateids.remove(other);
    client.revoked_delegations.fetch_sub(1, Ordering::Relaxed);
    Nfsstat4::Ok
}
