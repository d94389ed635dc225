//! Client recovery and grace (design section 4.7): the v4 clients that
//! may hold state, recorded durably in `STATE_DIR/nfs4/clients`
//! ([`dionfs_core::recovery::Record`], as knfsd's `nfsdcld` keeps them),
//! so that after a restart the previous run's clients, and only they,
//! reclaim their opens and locks in the server's grace period (the
//! [`Grace`] NLM holds too: one period for both).
//!
//! A client is recorded, durably and before the reply, at
//! RECLAIM_COMPLETE (`rca_one_fs` false) or before the first OPEN or LOCK
//! granted to it; it is forgotten at DESTROY_CLIENTID, when a courtesy
//! client is expired, when it leaves the client table (lease expiry), and
//! after the grace period if it did not come back.
//!
//! Locks: this module's mutex, then the record's, then the client table
//! (the bound on one address's entries looks at the table): nothing here
//! is called with the table held. The mutex is held while an entry is
//! written, so that no request answers before its client is durable.

use std::collections::HashSet;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dionfs_core::grace::Grace;
use dionfs_core::recovery::{Entry, Record};
use dionfs_proto::nfs4::Nfsstat4;
use parking_lot::Mutex;
use tracing::{info, warn};

use super::limits::OWNERS_PER_ADDRESS;
use super::stateids::{Other, StateRef};
use super::State;

/// The record's file, under the state directory.
pub const RECORD_FILE: &str = "nfs4/clients";

/// One recorded client: its `co_ownerid` and the address of its
/// EXCHANGE_ID.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct V4Client {
    pub owner: Vec<u8>,
    pub address: IpAddr,
}

impl Entry for V4Client {
    fn to_line(&self) -> String {
        format!("{} {}", hex::encode(&self.owner), self.address)
    }

    fn from_line(line: &str) -> Option<V4Client> {
        let (owner, address) = line.split_once(' ')?;
        Some(V4Client {
            owner: hex::decode(owner).ok()?,
            address: address.trim().parse().ok()?,
        })
    }

    fn address(&self) -> IpAddr {
        self.address
    }
}

/// What a grace check decides for one OPEN or LOCK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// OPEN `CLAIM_PREVIOUS`, LOCK `reclaim = true`.
    Reclaim,
    /// Anything else that takes new state.
    New,
}

/// The v4 clients' recovery record and the grace period.
pub struct Recovery {
    /// `None` without a state directory: nothing is recorded and no
    /// client can reclaim.
    record: Option<Record<V4Client>>,
    grace: Arc<Grace>,
    /// The owners the previous run recorded: those that may reclaim.
    previous: HashSet<Vec<u8>>,
    /// The owners recorded by this run (known to be in the record).
    recorded: Mutex<HashSet<Vec<u8>>>,
    /// The previous run's clients that did not come back have been
    /// forgotten (the grace period is over).
    grace_ended: AtomicBool,
}

impl Recovery {
    /// Opens the record under `state_dir` (none: nothing is recorded) and
    /// holds `grace` if the previous run recorded clients.
    pub fn open(state_dir: Option<&Path>, grace: Arc<Grace>) -> std::io::Result<Recovery> {
        let Some(dir) = state_dir else {
            return Ok(Recovery::made(None, Vec::new(), grace));
        };
        let file = dir.join(RECORD_FILE);
        if let Some(parent) = file.parent() {
            dionfs_sys::private::create_dir_all(parent)?;
        }
        let (record, previous) = Record::open(&file, OWNERS_PER_ADDRESS)?;
        if !previous.is_empty() && grace.hold() {
            info!(
                clients = previous.len(),
                grace_s = grace.period().as_secs(),
                "NFSv4: clients held state before the restart; grace period for their reclaims"
            );
        }
        Ok(Recovery::made(Some(record), previous, grace))
    }

    fn made(
        record: Option<Record<V4Client>>,
        previous: Vec<V4Client>,
        grace: Arc<Grace>,
    ) -> Recovery {
        Recovery {
            record,
            grace,
            previous: previous.into_iter().map(|c| c.owner).collect(),
            recorded: Mutex::default(),
            grace_ended: AtomicBool::new(false),
        }
    }

    /// Whether the grace period is on: only reclaims take new state, and
    /// REMOVE and RENAME wait (`GRACE`).
    pub fn in_grace(&self) -> bool {
        self.grace.active()
    }

    /// Whether a client of `owner` that has (`complete`) or has not sent
    /// RECLAIM_COMPLETE may be granted `claim` now (RFC 8881 section
    /// 9.11; design section 4.7).
    pub fn check(&self, owner: &[u8], complete: bool, claim: Claim) -> Result<(), Nfsstat4> {
        match (claim, self.in_grace()) {
            (Claim::New, true) => Err(Nfsstat4::Grace),
            (Claim::New, false) => Ok(()),
            (Claim::Reclaim, false) => Err(Nfsstat4::NoGrace),
            (Claim::Reclaim, true) if !self.previous.contains(owner) => Err(Nfsstat4::NoGrace),
            (Claim::Reclaim, true) if complete => Err(Nfsstat4::ReclaimBad),
            (Claim::Reclaim, true) => Ok(()),
        }
    }

    /// Records the client `owner` of `address`, durably, unless this run
    /// did already. `present` says whether an owner still has a client
    /// record, should one address's entries have to be pruned. Whether
    /// it is recorded (false without a state directory, or when the
    /// write failed: logged).
    pub fn record(&self, owner: &[u8], address: IpAddr, present: impl Fn(&[u8]) -> bool) -> bool {
        let Some(record) = &self.record else {
            return false;
        };
        // Held while the entry is written: another request of the client
        // must not answer before it is durable.
        let mut recorded = self.recorded.lock();
        if recorded.contains(owner) {
            return true;
        }
        let entry = V4Client {
            owner: owner.to_vec(),
            address,
        };
        // In a grace period the previous run's clients are reclaiming:
        // none of theirs is pruned.
        let holding = || (!self.in_grace()).then_some(|e: &V4Client| present(&e.owner));
        match record.add(entry, holding) {
            Ok(()) => {
                recorded.insert(owner.to_vec());
                true
            }
            Err(e) => {
                warn!(error = %e, client = %address,
                    "NFSv4: cannot record the client in the state directory; \
                     after a restart it cannot reclaim its state");
                false
            }
        }
    }

    /// Forgets the client `owner` (it went, or its state did).
    pub fn forget(&self, owner: &[u8]) {
        let Some(record) = &self.record else {
            return;
        };
        let mut recorded = self.recorded.lock();
        recorded.remove(owner);
        if let Err(e) = record.forget(|e| e.owner == owner) {
            warn!(error = %e, "NFSv4: cannot update the recorded clients in the state directory");
        }
    }

    /// One laundromat sweep: forgets the clients recorded by this run
    /// that `present` no longer knows (their leases expired), and once
    /// the grace period is over the previous run's clients that did not
    /// come back.
    pub fn sweep(&self, present: impl Fn(&[u8]) -> bool) {
        let Some(record) = &self.record else {
            return;
        };
        let gone: Vec<Vec<u8>> = self
            .recorded
            .lock()
            .iter()
            .filter(|owner| !present(owner))
            .cloned()
            .collect();
        for owner in &gone {
            self.forget(owner);
        }
        if self.grace.was_held()
            && !self.in_grace()
            && !self.grace_ended.swap(true, Ordering::AcqRel)
        {
            let recorded = self.recorded.lock();
            info!(
                reclaimed = recorded.len(),
                "NFSv4: grace period over; clients that did not come back are forgotten"
            );
            if let Err(e) = record.keep_only(|e| recorded.contains(&e.owner)) {
                warn!(error = %e, "NFSv4: cannot update the recorded clients in the state directory");
            }
        }
    }

    /// Clients in the record now.
    pub fn recorded(&self) -> usize {
        self.record.as_ref().map_or(0, Record::len)
    }
}

impl State {
    /// Drops every open (with its lock stateids, locks and reservation)
    /// of a file of the exports `ids`, which a reload removed: their
    /// clients can no longer reach those files to close them (design
    /// section 5.3, next to NLM's [`crate::locks::Locks::release_exports`]).
    /// How many opens were dropped.
    pub fn release_exports(&self, ids: &[u16]) -> usize {
        let removed =
            |fh: &[u8]| dionfs_fs::handle::export_id(fh).is_some_and(|id| ids.contains(&id));
        let clients = self.table.lock().clients_now();
        let mut released = 0;
        for client in clients {
            let mut state = client.state.lock();
            let opens: Vec<Other> = state
                .stateids
                .iter()
                .filter(|(_, s)| matches!(s, StateRef::Open(open) if removed(&open.fh)))
                .map(|(other, _)| *other)
                .collect();
            for other in &opens {
                self.release_open(&client, &mut state, other);
            }
            released += opens.len();
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use dionfs_core::grace::Grace;
    use dionfs_proto::nfs4::{Nfsstat4, ReclaimCompleteArgs4};

    use super::super::testing::{conn, new_request, session, LEASE};
    use super::super::{State, StateConfig};
    use super::*;
    use crate::locks::Locks;

    /// A server's state on `dir`, its grace periods `grace` long, as a
    /// start (or a restart after a crash) makes it.
    fn start(dir: &Path, grace: Duration) -> Arc<State> {
        let (locks, _released) = Locks::new();
        State::with_grace(
            StateConfig {
                lease_time: LEASE,
                reply_cache_bytes: 64 << 20,
                max_record: (1 << 20) + 8192,
                state_dir: Some(dir.to_owned()),
            },
            Arc::new(locks),
            Arc::new(Grace::new(grace)),
        )
        .unwrap()
    }

    /// The owners in the record on disk, as a restart reads them.
    fn on_disk(dir: &Path) -> Vec<Vec<u8>> {
        let text = std::fs::read_to_string(dir.join(RECORD_FILE)).unwrap_or_default();
        text.lines()
            .filter_map(V4Client::from_line)
            .map(|c| c.owner)
            .collect()
    }

    fn reclaim_complete(state: &State, owner: &str) -> Nfsstat4 {
        let (_, sid) = session(state, owner);
        let slot = new_request(state, sid, 0, 1);
        state.reclaim_complete(&slot, &ReclaimCompleteArgs4 { one_fs: false })
    }

    fn until_grace_ends(state: &State) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.in_grace() {
            assert!(Instant::now() < deadline, "the grace period to end");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn entries_read_back_and_damaged_lines_are_skipped() {
        let c = V4Client {
            owner: b"linux client\0".to_vec(),
            address: "2001:db8::7".parse().unwrap(),
        };
        assert_eq!(V4Client::from_line(&c.to_line()), Some(c));
        assert_eq!(V4Client::from_line("zz 192.0.2.7"), None);
        assert_eq!(V4Client::from_line("00"), None);
        assert_eq!(V4Client::from_line("00 not-an-address"), None);
    }

    #[test]
    fn reclaim_complete_records_the_client_before_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let state = start(dir.path(), Duration::from_secs(90));
        assert!(!state.in_grace(), "nobody was recorded before");
        let (_, sid) = session(&state, "a");
        let slot = new_request(&state, sid, 0, 1);
        let whole = ReclaimCompleteArgs4 { one_fs: false };
        // `rca_one_fs` true says nothing of the client.
        let one_fs = ReclaimCompleteArgs4 { one_fs: true };
        assert_eq!(state.reclaim_complete(&slot, &one_fs), Nfsstat4::Ok);
        assert!(on_disk(dir.path()).is_empty());
        assert_eq!(state.reclaim_complete(&slot, &whole), Nfsstat4::Ok);
        // On disk as the call returns: a crash now keeps it.
        assert_eq!(on_disk(dir.path()), vec![b"a".to_vec()]);
        assert_eq!(
            state.reclaim_complete(&slot, &whole),
            Nfsstat4::CompleteAlready
        );
        drop(slot);
        // A crash-like restart on the same state directory.
        let again = start(dir.path(), Duration::from_secs(90));
        assert!(again.in_grace());
    }

    #[test]
    fn the_first_open_or_lock_records_a_client_that_sent_no_reclaim_complete() {
        let dir = tempfile::tempdir().unwrap();
        let state = start(dir.path(), Duration::from_secs(90));
        let (id, sid) = session(&state, "quiet");
        let slot = new_request(&state, sid, 0, 1);
        assert_eq!(state.grace_check(slot.client(), false), Ok(()));
        assert_eq!(on_disk(dir.path()), vec![b"quiet".to_vec()]);
        // Out of a grace period, a reclaim is NO_GRACE.
        assert_eq!(
            state.grace_check(slot.client(), true),
            Err(Nfsstat4::NoGrace)
        );
        drop(slot);
        // DESTROY_CLIENTID forgets it.
        assert_eq!(
            state.destroy_session(&sid, &conn(1), None, true),
            Nfsstat4::Ok
        );
        assert_eq!(state.destroy_clientid(id, None), Nfsstat4::Ok);
        assert!(on_disk(dir.path()).is_empty());
        let again = start(dir.path(), Duration::from_secs(90));
        assert!(!again.in_grace());
    }

    #[test]
    fn in_grace_only_the_previous_runs_clients_reclaim_until_they_complete() {
        let dir = tempfile::tempdir().unwrap();
        {
            let before = start(dir.path(), Duration::from_secs(90));
            assert_eq!(reclaim_complete(&before, "old"), Nfsstat4::Ok);
        }
        let state = start(dir.path(), Duration::from_secs(90));
        assert!(state.in_grace());
        let (_, old) = session(&state, "old");
        let old = new_request(&state, old, 0, 1);
        let (_, new) = session(&state, "new");
        let new = new_request(&state, new, 0, 1);
        // Reclaims: the previous run's client yes, a stranger NO_GRACE.
        assert_eq!(state.grace_check(old.client(), true), Ok(()));
        assert_eq!(
            state.grace_check(new.client(), true),
            Err(Nfsstat4::NoGrace)
        );
        // Nothing new for anybody.
        assert_eq!(state.grace_check(old.client(), false), Err(Nfsstat4::Grace));
        assert_eq!(state.grace_check(new.client(), false), Err(Nfsstat4::Grace));
        // Done reclaiming: a later reclaim is RECLAIM_BAD.
        let whole = ReclaimCompleteArgs4 { one_fs: false };
        assert_eq!(state.reclaim_complete(&old, &whole), Nfsstat4::Ok);
        assert_eq!(
            state.reclaim_complete(&old, &whole),
            Nfsstat4::CompleteAlready
        );
        assert_eq!(
            state.grace_check(old.client(), true),
            Err(Nfsstat4::ReclaimBad)
        );
        assert!(state.in_grace());
    }

    #[test]
    fn after_grace_the_clients_that_did_not_come_back_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        {
            let before = start(dir.path(), Duration::from_secs(90));
            assert_eq!(reclaim_complete(&before, "back"), Nfsstat4::Ok);
            assert_eq!(reclaim_complete(&before, "gone"), Nfsstat4::Ok);
        }
        let state = start(dir.path(), Duration::from_millis(200));
        assert!(state.in_grace());
        let (_, sid) = session(&state, "back");
        let slot = new_request(&state, sid, 0, 1);
        assert_eq!(state.grace_check(slot.client(), true), Ok(()));
        // A sweep in the grace period forgets nobody of the previous run.
        state.sweep(Instant::now());
        assert_eq!(
            on_disk(dir.path()),
            vec![b"back".to_vec(), b"gone".to_vec()]
        );
        until_grace_ends(&state);
        assert_eq!(
            state.grace_check(slot.client(), true),
            Err(Nfsstat4::NoGrace)
        );
        assert_eq!(state.grace_check(slot.client(), false), Ok(()));
        state.sweep(Instant::now());
        assert_eq!(on_disk(dir.path()), vec![b"back".to_vec()]);
    }

    #[test]
    fn a_client_gone_from_the_table_leaves_the_record_at_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let state = start(dir.path(), Duration::from_secs(90));
        assert_eq!(reclaim_complete(&state, "a"), Nfsstat4::Ok);
        state.sweep(Instant::now());
        assert_eq!(on_disk(dir.path()), vec![b"a".to_vec()]);
        // Its lease runs out holding nothing: its record goes, and so
        // does its entry.
        state.sweep(Instant::now() + 2 * LEASE);
        assert_eq!(state.counts().clients, 0);
        assert!(on_disk(dir.path()).is_empty());
    }

    #[test]
    fn one_address_keeps_at_most_its_bound_of_entries_of_clients_that_went() {
        let dir = tempfile::tempdir().unwrap();
        let recovery =
            Recovery::open(Some(dir.path()), Arc::new(Grace::new(Duration::ZERO))).unwrap();
        let address: IpAddr = "192.0.2.7".parse().unwrap();
        for n in 0..(OWNERS_PER_ADDRESS as u32 + 50) {
            let owner = n.to_be_bytes();
            // Only the last ten clients still exist.
            let present =
                |o: &[u8]| <[u8; 4]>::try_from(o).is_ok_and(|o| u32::from_be_bytes(o) + 10 > n);
            assert!(recovery.record(&owner, address, present));
            assert!(recovery.recorded() <= OWNERS_PER_ADDRESS, "{n}");
        }
        // Another address is not pruned for this one.
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        let before = recovery.recorded();
        assert!(recovery.record(b"x", other, |_| false));
        assert_eq!(recovery.recorded(), before + 1);
    }

    /// A filehandle of export `export` (the layout `dionfs_fs::handle`
    /// reads the export from), told apart by `n`.
    fn fh_in(export: u16, n: u8) -> Vec<u8> {
        let mut fh = vec![dionfs_fs::handle::FH_VERSION];
        fh.extend_from_slice(&export.to_be_bytes());
        fh.resize(28, n);
        fh
    }

    #[test]
    fn a_reload_removing_an_export_drops_the_opens_and_locks_on_it() {
        use super::super::lockowners::lock_span;
        use super::super::stateids::ACCESS_BOTH;
        use super::super::testing::{client, state_and_client};
        use super::super::Locker;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let mut open = || {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)?;
            Ok((f.into(), true))
        };
        let (state, a) = state_and_client("a");
        let (gone, kept) = (fh_in(7, 1), fh_in(8, 1));
        let open_gone = state.open(&a, b"o", &gone, ACCESS_BOTH, 0).unwrap();
        let open_kept = state.open(&a, b"o", &kept, ACCESS_BOTH, 0).unwrap();
        let lock = state
            .lock(
                &a,
                Locker::New {
                    open: open_gone,
                    lock_owner: b"l",
                },
                &gone,
                lock_span(0, 10).unwrap(),
                true,
                &mut open,
            )
            .unwrap();
        assert_eq!(state.release_exports(&[7]), 1);
        assert_eq!(
            state.test_stateids(&a, &[open_gone, lock, open_kept]),
            [Nfsstat4::BadStateid, Nfsstat4::BadStateid, Nfsstat4::Ok]
        );
        // Its lock and share reservation went too.
        let b = client(&state, "b");
        let open_b = state.open(&b, b"o", &gone, ACCESS_BOTH, 3).unwrap();
        state
            .lock(
                &b,
                Locker::New {
                    open: open_b,
                    lock_owner: b"l",
                },
                &gone,
                lock_span(0, 10).unwrap(),
                true,
                &mut open,
            )
            .unwrap();
        assert_eq!(state.release_exports(&[9]), 0);
    }

    #[test]
    fn a_courtesy_client_expired_by_a_conflict_leaves_the_record() {
        use super::super::stateids::ACCESS_BOTH;
        use super::super::testing::client;

        let dir = tempfile::tempdir().unwrap();
        let state = start(dir.path(), Duration::from_secs(90));
        let (_, sid) = session(&state, "a");
        let slot = new_request(&state, sid, 0, 1);
        let a = Arc::clone(slot.client());
        drop(slot);
        let fh = fh_in(7, 1);
        assert_eq!(state.grace_check(&a, false), Ok(()));
        state.open(&a, b"o", &fh, ACCESS_BOTH, 3).unwrap();
        assert_eq!(on_disk(dir.path()), vec![b"a".to_vec()]);
        // Its lease runs out holding an open: a courtesy client, still
        // recorded.
        state.sweep(Instant::now() + 2 * LEASE);
        assert_eq!(state.counts().courtesy, 1);
        assert_eq!(on_disk(dir.path()), vec![b"a".to_vec()]);
        // Another client's open conflicts with it: expired, forgotten.
        let b = client(&state, "b");
        state.open(&b, b"o", &fh, ACCESS_BOTH, 0).unwrap();
        assert!(on_disk(dir.path()).is_empty());
    }
}
