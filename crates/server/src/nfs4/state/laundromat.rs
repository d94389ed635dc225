//! Lease expiry (design section 4.6, RFC 8881 section 8.3): a client that
//! renews nothing for a lease is destroyed with its sessions, and an
//! unconfirmed record is dropped after one lease (pynfs EID9). A client
//! with a request running never expires: the lease runs from the
//! request's end.
//!
//! A confirmed client whose lease runs out holding opens or locks becomes
//! a **courtesy client**, as with knfsd since 5.19: its state and
//! sessions are kept, and its next SEQUENCE makes it active again. It is
//! expired (state dropped, record forgotten) on a conflict with its
//! locks or reservations (the lock tables' expirer,
//! `State::expire_courtesy`), after [`COURTESY_TIMEOUT`], or when more
//! than [`COURTESY_CLIENTS`] exist (the oldest first).

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::clients::{ACTIVE, COURTESY, EXPIRED};
use super::limits::{COURTESY_CLIENTS, COURTESY_TIMEOUT};
use super::{Courtesy, State};

/// The shortest period between sweeps, whatever the lease.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// One sweep at `now`: every client whose lease ran out is destroyed,
/// sessions and all, unless it holds opens or locks (then it becomes a
/// courtesy client); every unconfirmed record older than a lease is
/// dropped, and so is every client a conflict expired. Courtesy clients
/// past [`COURTESY_TIMEOUT`], and the oldest past [`COURTESY_CLIENTS`],
/// are expired.
pub fn sweep(state: &State, now: Instant) {
    let lease = state.lease_time();
    let mut table = state.table.lock();
    for (id, confirmed) in table.expired(now, lease) {
        let Some(client) = table.client(id).cloned() else {
            continue;
        };
        match client.life() {
            COURTESY => continue,
            EXPIRED => debug!(
                clientid = id,
                "NFSv4 courtesy client expired: record dropped"
            ),
            ACTIVE if confirmed && client.holds_state() => {
                if client.change_life(ACTIVE, COURTESY) {
                    info!(
                        clientid = id,
                        "NFSv4 client lease expired holding state: a courtesy client now"
                    );
                    state
                        .courtesy
                        .lock()
                        .insert(id, Courtesy { client, since: now });
                }
                continue;
            }
            _ if confirmed => info!(
                clientid = id,
                "NFSv4 client lease expired: its sessions are gone"
            ),
            _ => debug!(
                clientid = id,
                "NFSv4 client record not confirmed within a lease: dropped"
            ),
        }
        state.forget_client(&mut table, id);
    }
    for id in courtesy_to_expire(state, now) {
        let expired = table
            .client(id)
            .is_some_and(|c| c.change_life(COURTESY, EXPIRED));
        if expired {
            info!(
                clientid = id,
                "NFSv4 courtesy client expired: kept long enough, or too many of them"
            );
            state.forget_client(&mut table, id);
        } else {
            state.courtesy.lock().remove(&id);
        }
    }
}

/// The courtesy clients to expire at `now`: those older than
/// [`COURTESY_TIMEOUT`], then the oldest of the rest past
/// [`COURTESY_CLIENTS`].
fn courtesy_to_expire(state: &State, now: Instant) -> Vec<u64> {
    let courtesy = state.courtesy.lock();
    let mut by_age: Vec<(Instant, u64)> = courtesy.iter().map(|(&id, c)| (c.since, id)).collect();
    by_age.sort_unstable();
    let timed_out = by_age
        .iter()
        .take_while(|(since, _)| now.saturating_duration_since(*since) >= COURTESY_TIMEOUT)
        .count();
    let too_many = by_age.len().saturating_sub(COURTESY_CLIENTS);
    by_age
        .into_iter()
        .take(timed_out.max(too_many))
        .map(|(_, id)| id)
        .collect()
}

/// Spawns the task that sweeps every tenth of a lease (at most every
/// [`MIN_PERIOD`]); it ends once the state is dropped.
pub fn spawn(state: &Arc<State>) -> tokio::task::JoinHandle<()> {
    let period = (state.lease_time() / 10).max(MIN_PERIOD);
    let state: Weak<State> = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(state) = state.upgrade() else {
                return;
            };
            // A sweep may close lock descriptions and rewrite the
            // recovery record (fsync): off the runtime's workers.
            let _ = tokio::task::spawn_blocking(move || state.sweep(Instant::now())).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Sequenced, StateConfig};
    use super::*;
    use dionfs_proto::nfs4::Nfsstat4;

    #[test]
    fn a_lease_expires_with_its_sessions() {
        let state = state();
        let t0 = Instant::now();
        let (clientid, session) = session_at(&state, "a", t0);
        state.sweep(t0 + LEASE);
        assert_eq!(
            state.counts().clients,
            1,
            "a whole lease is still the lease"
        );
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().clients, 0);
        assert_eq!(state.counts().sessions, 0);
        assert_eq!(state.counts().slot_cache_reserved, 0);
        assert!(matches!(
            state.sequence(&seq(session, 0, 1), &conn(1), 1, None),
            Sequenced::Error(Nfsstat4::Badsession)
        ));
        assert_eq!(
            state.destroy_clientid(clientid, None),
            Nfsstat4::StaleClientid
        );
    }

    #[test]
    fn sequence_renews_the_lease() {
        let state = state();
        let t0 = Instant::now();
        let (_, session) = session_at(&state, "a", t0);
        let half = LEASE / 2;
        // The lease runs from the end of the request.
        match state.sequence_at(&seq(session, 0, 1), &conn(1), 1, None, || t0) {
            Sequenced::New(guard) => guard.complete_at(None, t0 + half),
            other => panic!("{other:?}"),
        }
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().clients, 1);
        state.sweep(t0 + half + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().clients, 0);
    }

    #[test]
    fn a_sequence_refused_renews_the_lease_and_ends() {
        let state = state();
        let t0 = Instant::now();
        let (_, session) = session_at(&state, "a", t0);
        let half = LEASE / 2;
        match state.sequence_at(&seq(session, 9999, 1), &conn(1), 1, None, || t0 + half) {
            Sequenced::Error(Nfsstat4::Badslot) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(guard_free_running(&state, session), 0);
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().clients, 1);
        state.sweep(t0 + half + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().clients, 0);
    }

    #[test]
    fn a_client_with_a_request_running_never_expires() {
        let state = state();
        let t0 = Instant::now();
        let (_, session) = session_at(&state, "a", t0);
        let guard = match state.sequence_at(&seq(session, 0, 1), &conn(1), 1, None, || t0) {
            Sequenced::New(guard) => guard,
            other => panic!("{other:?}"),
        };
        state.sweep(t0 + 10 * LEASE);
        assert_eq!(state.counts().clients, 1);
        assert_eq!(guard.client().running(), 1);
        drop(guard);
        assert_eq!(guard_free_running(&state, session), 0);
    }

    /// A client of `owner` made at `t0`, its session, and a file in a
    /// fresh directory it has open for reading and writing (denying
    /// writers) and a write lock on bytes 0 to 9 of.
    struct Holding {
        client: Arc<super::super::Client>,
        session: dionfs_proto::nfs4::SessionId4,
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
    }

    const FH: &[u8] = b"f";

    fn opener(
        path: &std::path::Path,
    ) -> impl FnMut() -> std::io::Result<(std::os::fd::OwnedFd, bool)> + '_ {
        move || {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)?;
            Ok((f.into(), true))
        }
    }

    fn holding(state: &State, owner: &str, t0: Instant) -> Holding {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let (id, session) = session_at(state, owner, t0);
        let client = Arc::clone(state.table.lock().client(id).unwrap());
        let open = state.open(&client, b"o", FH, 3, 2).unwrap();
        let locker = Locker::New {
            open,
            lock_owner: b"l",
        };
        state
            .lock(&client, locker, FH, span(0, 10), true, &mut opener(&path))
            .unwrap();
        Holding {
            client,
            session,
            _dir: dir,
            path,
        }
    }

    fn span(offset: u64, length: u64) -> dionfs_core::locks::Span {
        lock_span(offset, length).unwrap()
    }

    /// Client `owner`'s write lock on bytes 5 of [`FH`], through an open
    /// for reading and writing: the stateid, or the error.
    fn lock_by(
        state: &State,
        client: &super::super::Client,
        path: &std::path::Path,
    ) -> Result<dionfs_proto::nfs4::StateId4, LockError> {
        let open = state
            .open(client, b"o", FH, 3, 0)
            .map_err(LockError::Status)?;
        let locker = Locker::New {
            open,
            lock_owner: b"m",
        };
        state.lock(client, locker, FH, span(5, 1), true, &mut opener(path))
    }

    use super::super::{lock_span, LockError, Locker};

    #[test]
    fn an_expired_client_holding_state_is_kept_as_a_courtesy_client() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        let info = &state.clients()[0];
        assert_eq!((info.opens, info.locks), (1, 1));
        assert_eq!(info.life, super::super::ClientLife::Active);
        assert!(info.lease_left.is_some());
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        assert_eq!(state.counts().courtesy, 1);
        assert_eq!(state.counts().clients, 1);
        assert_eq!(state.counts().sessions, 1);
        assert_eq!((state.counts().opens, state.counts().locks), (1, 1));
        assert_eq!(a.client.life(), COURTESY);
        // `dionfs clients` shows it as such, its state counted.
        let info = &state.clients()[0];
        assert_eq!(info.life, super::super::ClientLife::Courtesy);
        assert_eq!((info.lease_left, info.opens, info.locks), (None, 1, 1));
        // Another sweep changes nothing.
        state.sweep(t0 + 2 * LEASE);
        assert_eq!(state.counts().courtesy, 1);
        // Its next SEQUENCE makes it active again, its state intact.
        match state.sequence(&seq(a.session, 0, 1), &conn(1), 1, None) {
            Sequenced::New(guard) => guard.complete(None),
            other => panic!("{other:?}"),
        }
        assert_eq!(a.client.life(), ACTIVE);
        assert_eq!(state.counts().courtesy, 0);
        // An active client's lock is in another's way: denied.
        let b = client(&state, "b");
        assert!(matches!(
            lock_by(&state, &b, &a.path),
            Err(LockError::Status(Nfsstat4::ShareDenied))
        ));
        assert_eq!(state.locks.table.lock().lock_count(), 1);
    }

    #[test]
    fn a_conflicting_lock_expires_a_courtesy_client_and_is_granted() {
        let (state, mut released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        assert_eq!(a.client.life(), COURTESY);
        // b's OPEN for writing meets a's DENY_WRITE, and its LOCK a's
        // lock: a is expired, b granted.
        let b = client(&state, "b");
        let lock = lock_by(&state, &b, &a.path).unwrap();
        assert_eq!(lock.seqid, 1);
        assert_eq!(a.client.life(), EXPIRED);
        assert_eq!(released.try_recv().unwrap(), FH);
        assert_eq!(state.counts().courtesy, 0);
        // a's sessions are unknown now, and the next sweep drops its
        // record with its state.
        assert!(matches!(
            state.sequence(&seq(a.session, 0, 1), &conn(1), 1, None),
            Sequenced::Error(Nfsstat4::Badsession)
        ));
        state.sweep(Instant::now());
        assert_eq!(state.counts().clients, 1);
        assert_eq!(state.counts().sessions, 1);
        assert!(!a.client.holds_state());
        assert_eq!(
            state.destroy_clientid(a.client.id.0, None),
            Nfsstat4::StaleClientid
        );
        assert_eq!(state.locks.table.lock().lock_count(), 1);
    }

    #[test]
    fn lockt_expires_a_courtesy_client_in_the_way() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        let b = client(&state, "b");
        // Active: LOCKT is denied.
        let mut open = opener(&a.path);
        assert!(matches!(
            state.lockt(&b, b"m", FH, span(5, 1), true, &mut open),
            Err(LockError::Denied(_))
        ));
        // (b's lease runs out too in this sweep; c is made after it.)
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        let c = client(&state, "c");
        state
            .lockt(&c, b"m", FH, span(5, 1), true, &mut open)
            .unwrap();
        assert_eq!(a.client.life(), EXPIRED);
    }

    #[test]
    fn an_nlm_lock_expires_a_courtesy_client() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        state.sweep(t0 + LEASE + Duration::from_secs(1));
        let nlm = crate::locks::Owner::Nlm(crate::locks::NlmOwner {
            host: crate::locks::NlmHost {
                name: b"host".to_vec(),
                ip: peer(),
            },
            svid: 1,
        });
        let attempt = state
            .locks
            .lock(
                FH,
                &nlm,
                b"oh",
                span(0, 1),
                true,
                &mut opener(&a.path),
                None,
            )
            .unwrap();
        assert_eq!(attempt, dionfs_core::locks::table::Attempt::Granted);
        assert_eq!(a.client.life(), EXPIRED);
    }

    #[test]
    fn courtesy_clients_go_after_a_day() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        let courtesy_from = t0 + LEASE + Duration::from_secs(1);
        state.sweep(courtesy_from);
        state.sweep(courtesy_from + COURTESY_TIMEOUT - Duration::from_secs(1));
        assert_eq!(state.counts().courtesy, 1);
        state.sweep(courtesy_from + COURTESY_TIMEOUT);
        assert_eq!(state.counts(), Default::default());
        assert_eq!(a.client.life(), EXPIRED);
        assert_eq!(state.locks.table.lock().lock_count(), 0);
        // Its reservation went too: another client may write.
        let b = client(&state, "b");
        lock_by(&state, &b, &a.path).unwrap();
    }

    #[test]
    fn past_1024_courtesy_clients_the_oldest_go() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        let courtesy_from = t0 + LEASE + Duration::from_secs(1);
        state.sweep(courtesy_from);
        // 1,024 younger courtesy clients (stand-ins without records).
        {
            let mut courtesy = state.courtesy.lock();
            for n in 0..COURTESY_CLIENTS as u64 {
                courtesy.insert(
                    u64::MAX - n,
                    Courtesy {
                        client: Arc::clone(&a.client),
                        since: courtesy_from + Duration::from_secs(1 + n),
                    },
                );
            }
        }
        state.sweep(courtesy_from + Duration::from_secs(1));
        assert_eq!(a.client.life(), EXPIRED);
        assert_eq!(state.counts().clients, 0);
        assert_eq!(state.counts().courtesy, COURTESY_CLIENTS);
        assert_eq!(state.locks.table.lock().lock_count(), 0);
    }

    #[test]
    fn the_oldest_courtesy_clients_are_chosen() {
        let (state, _released) = locking_state();
        let t0 = Instant::now();
        let a = holding(&state, "a", t0);
        {
            let mut courtesy = state.courtesy.lock();
            for n in 0..(COURTESY_CLIENTS as u64 + 2) {
                courtesy.insert(
                    n,
                    Courtesy {
                        client: Arc::clone(&a.client),
                        since: t0 + Duration::from_secs(10 * n),
                    },
                );
            }
        }
        let mut doomed = courtesy_to_expire(&state, t0 + Duration::from_secs(10));
        doomed.sort_unstable();
        assert_eq!(doomed, [0, 1]);
        // A day after the third: the first three, more than too many.
        doomed = courtesy_to_expire(&state, t0 + Duration::from_secs(20) + COURTESY_TIMEOUT);
        doomed.sort_unstable();
        assert_eq!(doomed, [0, 1, 2]);
    }

    fn guard_free_running(state: &State, session: dionfs_proto::nfs4::SessionId4) -> u32 {
        let table = state.table.lock();
        table.session(&session).unwrap().client.running()
    }

    #[test]
    fn an_unconfirmed_record_goes_after_one_lease() {
        let state = state();
        let t0 = Instant::now();
        let a = state
            .exchange_id_at(&exchange("a", 1, 0), &sys(1), peer(), t0)
            .unwrap();
        let b = state
            .exchange_id_at(&exchange("b", 1, 0), &sys(1), peer(), t0)
            .unwrap();
        // EID9: confirmed within the lease...
        state
            .create_session_at(
                &create(a.clientid, a.sequenceid),
                &sys(1),
                &conn(1),
                t0 + Duration::from_secs(1),
            )
            .unwrap();
        state.sweep(t0 + LEASE + Duration::from_millis(500));
        // ...or gone.
        assert_eq!(
            state.create_session(&create(b.clientid, b.sequenceid), &sys(1), &conn(1)),
            Err(Nfsstat4::StaleClientid)
        );
        assert_eq!(state.counts().clients, 1);
        assert_eq!(state.counts().unconfirmed, 0);
    }

    #[tokio::test]
    async fn the_task_sweeps_and_ends_with_the_state() {
        let state = Arc::new(
            State::new(StateConfig {
                lease_time: Duration::from_millis(50),
                reply_cache_bytes: 1 << 20,
                max_record: 1 << 20,
                state_dir: None,
            })
            .unwrap(),
        );
        state
            .exchange_id(&exchange("a", 1, 0), &sys(1), peer())
            .unwrap();
        let task = spawn(&state);
        let deadline = Instant::now() + Duration::from_secs(10);
        while state.counts().unconfirmed > 0 {
            assert!(Instant::now() < deadline, "the sweep to drop the record");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(state);
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the task ends once the state is gone")
            .unwrap();
    }
}
