//! Lease expiry (design section 4.6, RFC 8881 section 8.3): a client that
//! renews nothing for a lease is destroyed with its sessions, and an
//! unconfirmed record is dropped after one lease (pynfs EID9). A client
//! with a request running never expires: the lease runs from the
//! request's end.
//!
//! W8 adds courtesy clients: an expired client that holds opens or locks
//! keeps them (and its sessions) until a conflict, 24 hours, or more than
//! 1,024 courtesy clients; see the hook in [`sweep`].

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tracing::{debug, info};

use super::State;

/// The shortest period between sweeps, whatever the lease.
const MIN_PERIOD: Duration = Duration::from_millis(100);

/// One sweep at `now`: every client whose lease ran out is destroyed,
/// sessions and all; every unconfirmed record older than a lease is
/// dropped.
pub fn sweep(state: &State, now: Instant) {
    let lease = state.lease_time();
    let mut table = state.table.lock();
    for (id, confirmed) in table.expired(now, lease) {
        // W8: a confirmed client holding opens or locks becomes a
        // courtesy client here instead of going.
        if confirmed {
            info!(
                clientid = id,
                "NFSv4 client lease expired: its sessions and state are gone"
            );
        } else {
            debug!(
                clientid = id,
                "NFSv4 client record not confirmed within a lease: dropped"
            );
        }
        table.remove_client(id);
    }
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
            state.sweep(Instant::now());
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
        match state.sequence_at(&seq(session, 0, 1), &conn(1), 1, None, t0 + half) {
            Sequenced::New(guard) => drop(guard),
            other => panic!("{other:?}"),
        }
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
        let guard = match state.sequence_at(&seq(session, 0, 1), &conn(1), 1, None, t0) {
            Sequenced::New(guard) => guard,
            other => panic!("{other:?}"),
        };
        state.sweep(t0 + 10 * LEASE);
        assert_eq!(state.counts().clients, 1);
        assert_eq!(guard.client().running(), 1);
        drop(guard);
        assert_eq!(guard_free_running(&state, session), 0);
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
