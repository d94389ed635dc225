//! Byte-range locks (design sections 5.1 and 5.3): LOCK, LOCKT and LOCKU
//! as state. A lock-owner has one lock stateid per open it locks through
//! (knfsd's `find_lock_stateid`); its locks are taken in the server's one
//! lock table with `Owner::V4`, on a description of its own per file, so
//! the kernel decides conflicts with other v4 owners, NLM owners and
//! processes on the server alike. v4 queues no waiter: Linux polls its
//! blocking locks.
//!
//! The handlers give plain values: the lock-owner's bytes, the file
//! handle, the range ([`lock_span`]), whether the lock is a write lock,
//! and an opener of a description of the file for the table
//! (`ExportFs::open_for_locks` of the export, mapped to `io::Error`).

use std::io;

use dionfs_core::locks::table::{Attempt, Holder, Opener, Unlock};
use dionfs_core::locks::{LockOwner, Span};
use dionfs_proto::nfs4::{Nfsstat4, StateId4};

use super::clients::Client;
use super::limits::{Bound, LOCK_OWNERS_PER_CLIENT, STATEIDS_PER_CLIENT};
use super::stateids::{next_seqid, v4_lock_owner, LockState, StateRef, ACCESS_WRITE};
use super::State;
use crate::locks::Owner;

/// The most bytes of an owner shown in a denial (`NFS4_OPAQUE_LIMIT`).
const OWNER_SHOWN: usize = 1024;

/// Which lock stateid a LOCK goes through (`locker4`).
#[derive(Debug, Clone, Copy)]
pub enum Locker<'a> {
    /// `open_to_lock_owner4`: the open stateid, and the lock-owner (its
    /// lock stateid of that open is made if it has none).
    New {
        open: StateId4,
        lock_owner: &'a [u8],
    },
    /// `exist_lock_owner4`: a lock stateid.
    Existing(StateId4),
}

/// The lock in the way of a LOCK or LOCKT (`LOCK4denied`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    /// `u64::MAX`: to the end of the file.
    pub length: u64,
    /// A write lock (`WRITE_LT`), else a read lock.
    pub exclusive: bool,
    /// The holder: a v4 client's id and lock-owner; an NLM holder is
    /// client 0, owner `nlm:HOST:SVID`; a process on the server client 0,
    /// owner `local`.
    pub clientid: u64,
    pub owner: Vec<u8>,
}

/// Why a LOCK or LOCKT was not granted.
#[derive(Debug)]
pub enum LockError {
    /// `NFS4ERR_DENIED`, and who holds the lock in the way.
    Denied(Denied),
    /// Another status (`BAD_STATEID`, `OPENMODE`, `DELAY`, `DEADLOCK`...).
    Status(Nfsstat4),
    /// Opening a description or `fcntl` failed (the handler maps it).
    Io(io::Error),
}

impl From<Nfsstat4> for LockError {
    fn from(status: Nfsstat4) -> Self {
        LockError::Status(status)
    }
}

/// The span of a v4 lock's `offset` and `length` (RFC 8881 section
/// 18.10.3): a length of 0, or one reaching past 2^64 - 1 other than
/// all ones, is `INVAL` (knfsd's `check_lock_length`); all ones reaches
/// to the end. A range past what `fcntl` can lock is clamped to its end,
/// as knfsd's `nfs4_transform_lock_offset`.
pub fn lock_span(offset: u64, length: u64) -> Result<Span, Nfsstat4> {
    if length == 0 || (length != u64::MAX && length > !offset) {
        return Err(Nfsstat4::Inval);
    }
    let max = i64::MAX as u64;
    let nlm_length = if length == u64::MAX { 0 } else { length };
    Ok(Span::from_nlm(offset, nlm_length).unwrap_or(Span {
        start: max,
        end: u64::MAX,
    }))
}

/// A denial's fields from the table's holder.
fn denied(holder: Holder<Owner>) -> Denied {
    let (offset, length) = match holder.span.to_nlm() {
        (offset, 0) => (offset, u64::MAX),
        other => other,
    };
    let (clientid, owner) = match holder.owner {
        Some((Owner::V4 { client, owner, .. }, _)) => (client.0, owner),
        Some((Owner::Nlm(nlm), _)) => {
            let mut shown = b"nlm:".to_vec();
            shown.extend_from_slice(&nlm.host.name);
            shown.extend_from_slice(format!(":{}", nlm.svid).as_bytes());
            shown.truncate(OWNER_SHOWN);
            (0, shown)
        }
        None => (0, b"local".to_vec()),
    };
    Denied {
        offset,
        length,
        exclusive: holder.exclusive,
        clientid,
        owner,
    }
}

impl State {
    /// LOCK's state (RFC 8881 section 18.10) on the current file `fh`:
    /// takes `span` (exclusive: a write lock) for the lock-owner of
    /// `locker`. Answers the lock stateid: new (seqid 1) for a lock-owner
    /// new to the open, else its seqid incremented. A write lock through
    /// an open without WRITE access, or on a file the server can only
    /// read, is `OPENMODE`; a conflict is `DENIED` with the holder;
    /// `DEADLOCK`; past a bound `DELAY`. A conflict with a courtesy
    /// client expires it and is tried again ([`crate::locks::Locks::lock`]).
    pub fn lock(
        &self,
        client: &Client,
        locker: Locker<'_>,
        fh: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
    ) -> Result<StateId4, LockError> {
        let mut state = client.state.lock();
        // The open the lock goes through, the lock-owner, and its lock
        // stateid of that open if it has one.
        let (open_other, lock_owner, existing) = match locker {
            Locker::New {
                open: open_stateid,
                lock_owner,
            } => {
                let (other, found) = self.find_state_of(client, &state, &open_stateid, fh)?;
                if !matches!(found, StateRef::Open(_)) {
                    return Err(Nfsstat4::BadStateid.into());
                }
                let existing = state
                    .lock_owners
                    .get(lock_owner)
                    .and_then(|o| o.by_open.get(&other))
                    .copied();
                (other, lock_owner.to_vec(), existing)
            }
            Locker::Existing(stateid) => {
                let (other, found) = self.find_state_of(client, &state, &stateid, fh)?;
                let StateRef::Lock(lock) = found else {
                    return Err(Nfsstat4::BadStateid.into());
                };
                (lock.open, lock.lock_owner.clone(), Some(other))
            }
        };
        let Some(StateRef::Open(opened)) = state.stateids.get(&open_other) else {
            return Err(Nfsstat4::BadStateid.into());
        };
        if exclusive && opened.access & ACCESS_WRITE == 0 {
            return Err(Nfsstat4::Openmode.into());
        }
        if existing.is_none() {
            if !state.lock_owners.contains_key(&lock_owner)
                && state.lock_owners.len() >= LOCK_OWNERS_PER_CLIENT
            {
                return Err(self
                    .refusals
                    .refuse(Bound::LockOwners, client.address)
                    .into());
            }
            if state.stateids.len() >= STATEIDS_PER_CLIENT {
                return Err(self.refusals.refuse(Bound::Stateids, client.address).into());
            }
        }
        let owner = v4_lock_owner(client, &lock_owner);
        let attempt = self
            .locks
            .lock(fh, &owner, b"", span, exclusive, &mut *open, None)
            .map_err(LockError::Io)?;
        match attempt {
            Attempt::Granted => {}
            Attempt::Conflict => {
                let holder = self
                    .locks
                    .table
                    .lock()
                    .test(fh, &owner, span, exclusive, open)
                    .map_err(LockError::Io)?;
                // Gone since: the client asks again.
                return Err(match holder {
                    Some(holder) => LockError::Denied(denied(holder)),
                    None => LockError::Status(Nfsstat4::Delay),
                });
            }
            Attempt::ReadOnly => return Err(Nfsstat4::Openmode.into()),
            Attempt::NoLocks(_) => {
                return Err(self
                    .refusals
                    .refuse(Bound::LockTables, client.address)
                    .into())
            }
            Attempt::Deadlock => return Err(Nfsstat4::Deadlock.into()),
        }
        if let Some(other) = existing {
            if let Some(StateRef::Lock(lock)) = state.stateids.get_mut(&other) {
                lock.seqid = next_seqid(lock.seqid);
                return Ok(StateId4 {
                    seqid: lock.seqid,
                    other,
                });
            }
        }
        let other = state.new_other(self.boot, client);
        state.stateids.insert(
            other,
            StateRef::Lock(LockState {
                fh: fh.to_vec(),
                lock_owner: lock_owner.clone(),
                open: open_other,
                seqid: 1,
            }),
        );
        state
            .lock_owners
            .entry(lock_owner)
            .or_default()
            .by_open
            .insert(open_other, other);
        if let Some(StateRef::Open(opened)) = state.stateids.get_mut(&open_other) {
            opened.lock_stateids.push(other);
        }
        Ok(StateId4 { seqid: 1, other })
    }

    /// LOCKT (RFC 8881 section 18.11) on `fh`: whether `client`'s
    /// lock-owner `lock_owner` could take `span`; `DENIED` with the
    /// holder if not. No state is made. A courtesy client holding the
    /// lock is expired and the test made again, as the kernel's
    /// `posix_test_lock` does for knfsd.
    pub fn lockt(
        &self,
        client: &Client,
        lock_owner: &[u8],
        fh: &[u8],
        span: Span,
        exclusive: bool,
        open: Opener<'_>,
    ) -> Result<(), LockError> {
        let owner = v4_lock_owner(client, lock_owner);
        let mut test = || {
            self.locks
                .table
                .lock()
                .test(fh, &owner, span, exclusive, &mut *open)
                .map_err(LockError::Io)
        };
        let mut holder = test()?;
        if let Some(Holder {
            owner: Some((holder_owner @ Owner::V4 { .. }, _)),
            ..
        }) = &holder
        {
            if self.locks.expire(&holder_owner.client()) {
                holder = test()?;
            }
        }
        match holder {
            None => Ok(()),
            Some(holder) => Err(LockError::Denied(denied(holder))),
        }
    }

    /// LOCKU (RFC 8881 section 18.12) of `span` with the lock stateid
    /// `stateid` of the current file `fh`: released (NLM is told of the
    /// file, to grant its waiters), the seqid incremented. An unlock that
    /// would split a lock in two past the client address's bound on
    /// ranges is `LOCK_RANGE` (a sub-range the server cannot release,
    /// section 18.12.4) and changes nothing.
    pub fn locku(
        &self,
        client: &Client,
        stateid: &StateId4,
        fh: &[u8],
        span: Span,
    ) -> Result<StateId4, Nfsstat4> {
        let mut state = client.state.lock();
        let (other, found) = self.find_state_of(client, &state, stateid, fh)?;
        let StateRef::Lock(lock) = found else {
            return Err(Nfsstat4::BadStateid);
        };
        let owner = v4_lock_owner(client, &lock.lock_owner);
        match self.locks.unlock(fh, &owner, span) {
            Ok(Unlock::Released) => {}
            Ok(Unlock::NoLocks(_)) => return Err(Nfsstat4::LockRange),
            Err(e) => {
                tracing::warn!(error = %e, clientid = client.id.0, "NFSv4 LOCKU failed");
                return Err(Nfsstat4::Io);
            }
        }
        let Some(StateRef::Lock(lock)) = state.stateids.get_mut(&other) else {
            return Err(Nfsstat4::BadStateid);
        };
        lock.seqid = next_seqid(lock.seqid);
        Ok(StateId4 {
            seqid: lock.seqid,
            other,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;
    use std::os::fd::OwnedFd;
    use std::path::{Path, PathBuf};

    use dionfs_core::locks::table::Attempt;

    use super::super::stateids::{ACCESS_BOTH, ACCESS_READ};
    use super::super::testing::*;
    use super::*;
    use crate::locks::{NlmHost, NlmOwner};

    fn data_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        (dir, path)
    }

    fn opener(path: &Path) -> impl FnMut() -> io::Result<(OwnedFd, bool)> + '_ {
        move || {
            let f = OpenOptions::new().read(true).write(true).open(path)?;
            Ok((f.into(), true))
        }
    }

    fn span(offset: u64, length: u64) -> Span {
        lock_span(offset, length).unwrap()
    }

    fn denial(result: Result<StateId4, LockError>) -> Denied {
        match result {
            Err(LockError::Denied(d)) => d,
            other => panic!("not denied: {other:?}"),
        }
    }

    fn status<T: std::fmt::Debug>(result: Result<T, LockError>) -> Nfsstat4 {
        match result {
            Err(LockError::Status(s)) => s,
            other => panic!("no status: {other:?}"),
        }
    }

    #[test]
    fn v4_ranges_are_checked_like_knfsd() {
        assert_eq!(lock_span(0, 0), Err(Nfsstat4::Inval));
        assert_eq!(lock_span(10, u64::MAX - 5), Err(Nfsstat4::Inval));
        assert_eq!(
            lock_span(10, u64::MAX),
            Ok(Span {
                start: 10,
                end: u64::MAX
            })
        );
        assert_eq!(lock_span(10, 5), Ok(Span { start: 10, end: 14 }));
        // Past what fcntl locks: clamped to its end.
        assert_eq!(lock_span(u64::MAX - 1, 1).unwrap().end, u64::MAX);
    }

    #[test]
    fn locks_make_stateids_and_conflict_between_clients() {
        let (_dir, path) = data_file();
        let (state, a) = state_and_client("a");
        let b = client(&state, "b");
        let open_a = state.open(&a, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let open_b = state.open(&b, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let mut open = opener(&path);
        let new = |open: StateId4, owner: &'static [u8]| Locker::New {
            open,
            lock_owner: owner,
        };
        let lock_a = state
            .lock(&a, new(open_a, b"l"), b"f", span(0, 10), true, &mut open)
            .unwrap();
        assert_eq!(lock_a.seqid, 1);
        assert_ne!(lock_a.other, open_a.other);
        // The same lock-owner through the same open again: the same
        // stateid, seqid 2.
        let again = state
            .lock(&a, new(open_a, b"l"), b"f", span(20, 10), false, &mut open)
            .unwrap();
        assert_eq!(again.other, lock_a.other);
        assert_eq!(again.seqid, 2);
        let more = state
            .lock(
                &a,
                Locker::Existing(again),
                b"f",
                span(40, 10),
                true,
                &mut open,
            )
            .unwrap();
        assert_eq!(more.seqid, 3);
        // The old seqid, another file, an open stateid as a lock stateid.
        assert_eq!(
            status(state.lock(
                &a,
                Locker::Existing(again),
                b"f",
                span(60, 1),
                true,
                &mut open
            )),
            Nfsstat4::OldStateid
        );
        assert_eq!(
            status(state.lock(
                &a,
                Locker::Existing(more),
                b"g",
                span(60, 1),
                true,
                &mut open
            )),
            Nfsstat4::BadStateid
        );
        assert_eq!(
            status(state.lock(
                &a,
                Locker::Existing(open_a),
                b"f",
                span(60, 1),
                true,
                &mut open
            )),
            Nfsstat4::BadStateid
        );
        // Client b is denied, and told who holds the lock.
        let d = denial(state.lock(&b, new(open_b, b"m"), b"f", span(5, 1), false, &mut open));
        assert_eq!(
            d,
            Denied {
                offset: 0,
                length: 10,
                exclusive: true,
                clientid: a.id.0,
                owner: b"l".to_vec()
            }
        );
        // A failed LOCK made no stateid for b.
        assert_eq!(b.state.lock().stateids.len(), 1);
        // LOCKT: the same answer; a free range is fine.
        match state.lockt(&b, b"m", b"f", span(25, 1), true, &mut open) {
            Err(LockError::Denied(d)) => {
                assert!(!d.exclusive);
                assert_eq!((d.offset, d.length), (20, 10));
            }
            other => panic!("{other:?}"),
        }
        state
            .lockt(&b, b"m", b"f", span(25, 1), false, &mut open)
            .unwrap();
        // LOCKU: seqid + 1, and the range is free for b.
        let unlocked = state.locku(&a, &more, b"f", span(0, 10)).unwrap();
        assert_eq!(unlocked.seqid, 4);
        state
            .lock(&b, new(open_b, b"m"), b"f", span(5, 1), true, &mut open)
            .unwrap();
        assert_eq!(
            state.locku(&a, &more, b"f", span(0, 1)),
            Err(Nfsstat4::OldStateid)
        );
    }

    #[test]
    fn write_locks_need_an_open_for_writing() {
        let (_dir, path) = data_file();
        let (state, a) = state_and_client("a");
        let read = state.open(&a, b"o", b"f", ACCESS_READ, 0).unwrap();
        let mut open = opener(&path);
        let locker = Locker::New {
            open: read,
            lock_owner: b"l",
        };
        assert_eq!(
            status(state.lock(&a, locker, b"f", span(0, 1), true, &mut open)),
            Nfsstat4::Openmode
        );
        state
            .lock(&a, locker, b"f", span(0, 1), false, &mut open)
            .unwrap();
        // A description the server can only read: OPENMODE too.
        let both = state.open(&a, b"p", b"f", ACCESS_BOTH, 0).unwrap();
        let mut read_only = || {
            let f = OpenOptions::new().read(true).open(&path)?;
            Ok((f.into(), false))
        };
        let locker = Locker::New {
            open: both,
            lock_owner: b"m",
        };
        assert_eq!(
            status(state.lock(&a, locker, b"f", span(5, 1), true, &mut read_only)),
            Nfsstat4::Openmode
        );
    }

    #[test]
    fn nlm_and_v4_owners_conflict_in_one_table() {
        let (_dir, path) = data_file();
        let (state, mut released) = locking_state();
        let a = client(&state, "a");
        let open_a = state.open(&a, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let nlm = Owner::Nlm(NlmOwner {
            host: NlmHost {
                name: b"host".to_vec(),
                ip: peer(),
            },
            svid: 42,
        });
        let mut open = opener(&path);
        let attempt = state
            .locks
            .lock(b"f", &nlm, b"oh", span(0, 100), true, &mut open, None)
            .unwrap();
        assert_eq!(attempt, Attempt::Granted);
        let locker = Locker::New {
            open: open_a,
            lock_owner: b"l",
        };
        let d = denial(state.lock(&a, locker, b"f", span(50, 1), false, &mut open));
        assert_eq!((d.clientid, d.owner), (0, b"nlm:host:42".to_vec()));
        // The other way: a v4 lock denies the NLM owner.
        let granted = state
            .lock(&a, locker, b"f", span(200, 10), true, &mut open)
            .unwrap();
        let attempt = state
            .locks
            .lock(b"f", &nlm, b"oh", span(205, 1), false, &mut open, None)
            .unwrap();
        assert_eq!(attempt, Attempt::Conflict);
        // LOCKU tells NLM of the file.
        state.locku(&a, &granted, b"f", span(200, 10)).unwrap();
        assert_eq!(released.try_recv().unwrap(), b"f");
        // A process on the server is "local".
        let local = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let range = dionfs_sys::lock::LockRange {
            start: 1000,
            len: 10,
        };
        assert!(
            dionfs_sys::lock::ofd_setlk(&local, dionfs_sys::lock::LockType::Write, range).unwrap()
        );
        let d = denial(state.lock(&a, locker, b"f", span(1005, 1), false, &mut open));
        assert_eq!((d.clientid, d.owner), (0, b"local".to_vec()));
        assert_eq!((d.offset, d.length), (1000, 10));
    }

    #[test]
    fn close_drops_the_locks_born_of_the_open() {
        let (_dir, path) = data_file();
        let (state, mut released) = locking_state();
        let a = client(&state, "a");
        let b = client(&state, "b");
        let open_a = state.open(&a, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let open_b = state.open(&b, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let mut open = opener(&path);
        let lock = state
            .lock(
                &a,
                Locker::New {
                    open: open_a,
                    lock_owner: b"l",
                },
                b"f",
                span(0, 10),
                true,
                &mut open,
            )
            .unwrap();
        state.close(&a, &open_a, b"f").unwrap();
        assert_eq!(released.try_recv().unwrap(), b"f");
        assert_eq!(state.test_stateids(&a, &[lock]), [Nfsstat4::BadStateid]);
        assert!(a.state.lock().lock_owners.is_empty());
        assert!(!a.holds_state());
        state
            .lock(
                &b,
                Locker::New {
                    open: open_b,
                    lock_owner: b"m",
                },
                b"f",
                span(0, 10),
                true,
                &mut open,
            )
            .unwrap();
    }

    #[test]
    fn free_stateid_frees_a_lock_stateid_without_locks() {
        let (_dir, path) = data_file();
        let (state, a) = state_and_client("a");
        let open_a = state.open(&a, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        let mut open = opener(&path);
        let lock = state
            .lock(
                &a,
                Locker::New {
                    open: open_a,
                    lock_owner: b"l",
                },
                b"f",
                span(0, 10),
                true,
                &mut open,
            )
            .unwrap();
        assert_eq!(state.free_stateid(&a, &lock), Nfsstat4::LocksHeld);
        let unlocked = state.locku(&a, &lock, b"f", span(0, 10)).unwrap();
        assert_eq!(state.free_stateid(&a, &lock), Nfsstat4::OldStateid);
        assert_eq!(state.free_stateid(&a, &unlocked), Nfsstat4::Ok);
        assert_eq!(state.free_stateid(&a, &unlocked), Nfsstat4::BadStateid);
        assert!(a.state.lock().lock_owners.is_empty());
        // The open stays, and is not freed.
        assert_eq!(state.free_stateid(&a, &open_a), Nfsstat4::LocksHeld);
        assert_eq!(state.test_stateids(&a, &[open_a]), [Nfsstat4::Ok]);
    }

    #[test]
    fn lock_owners_are_bounded() {
        let (_dir, path) = data_file();
        let (state, a) = state_and_client("a");
        let open_a = state.open(&a, b"o", b"f", ACCESS_BOTH, 0).unwrap();
        {
            let mut s = a.state.lock();
            for n in 0..LOCK_OWNERS_PER_CLIENT {
                s.lock_owners
                    .insert(format!("owner-{n}").into_bytes(), Default::default());
            }
        }
        let mut open = opener(&path);
        let locker = Locker::New {
            open: open_a,
            lock_owner: b"new",
        };
        assert_eq!(
            status(state.lock(&a, locker, b"f", span(0, 1), true, &mut open)),
            Nfsstat4::Delay
        );
        assert_eq!(state.counts().refused, 1);
        // Nothing was locked.
        assert_eq!(state.locks.table.lock().lock_count(), 0);
    }
}
