//! Reboots, the server's and its clients': the NSM state ([`super::state`])
//! recording the clients that hold locks, the grace period after a
//! restart in which only reclaims are granted, and SM_NOTIFY to the
//! previous run's clients so that they reclaim. (A client's own reboot,
//! SM_NOTIFY or FREE_ALL to this server, drops its locks:
//! [`super::LockService::drop_hosts`].)

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use dionfs_proto::nsm::{NsmProc, StatChge, NSM_PROGRAM, NSM_V1};
use dionfs_xdr::Encode;
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use super::client::{self, Peer};
use super::state::{Monitored, NsmState};
use crate::locks::NlmHost;
use dionfs_core::grace::Grace;

/// The lock service's part in restarts.
pub(super) struct Reboots {
    nsm: NsmState,
    /// The server's grace period, held by this service if its previous run
    /// had clients holding locks.
    grace: Arc<Grace>,
    /// The clients that held locks before the restart, until they are
    /// told of it ([`Reboots::take_previous`]).
    previous: Mutex<Vec<Monitored>>,
}

impl Reboots {
    /// Opens the NSM state under `state_dir` and moves its state number
    /// on; holds the server's grace period if the previous run had clients
    /// holding locks.
    pub(super) fn open(state_dir: &std::path::Path, grace: Arc<Grace>) -> Result<Reboots, String> {
        let (nsm, previous) = NsmState::open(state_dir).map_err(|e| {
            format!(
                "cannot open the lock service's state in {}: {e}",
                state_dir.join("nlm").display()
            )
        })?;
        if !previous.is_empty() && grace.hold() {
            info!(
                clients = previous.len(),
                grace_s = grace.period().as_secs(),
                nsm_state = nsm.number,
                "NLM: clients held locks before the restart; grace period for their reclaims"
            );
        }
        Ok(Reboots {
            nsm,
            grace,
            previous: Mutex::new(previous),
        })
    }

    /// This run's NSM state number.
    pub(super) fn state(&self) -> i32 {
        self.nsm.number
    }

    /// Whether the grace period is on: only reclaims are granted.
    pub(super) fn in_grace(&self) -> bool {
        self.grace.active()
    }

    /// Whether a grace period was held at this start (its end is then to
    /// be seen to, [`Reboots::end_grace`]).
    pub(super) fn grace_was_held(&self) -> bool {
        self.grace.was_held()
    }

    /// The clients that held locks before the restart, to be told of it
    /// (once: they are not returned again).
    pub(super) fn take_previous(&self) -> Vec<Monitored> {
        std::mem::take(&mut *self.previous.lock())
    }

    /// Records `host` as holding locks (durably, the first time), as the
    /// one that called the server at `local`. `holding` lists the hosts
    /// holding locks now, should records be pruned.
    pub(super) fn monitor(
        &self,
        host: &NlmHost,
        local: IpAddr,
        holding: impl FnOnce() -> Vec<NlmHost>,
    ) {
        let monitored = Monitored {
            name: host.name.clone(),
            client: host.ip,
            server: local,
        };
        let holding = || {
            // In a grace period the previous run's clients are reclaiming.
            (!self.in_grace()).then(|| {
                let hosts = holding();
                hosts
                    .into_iter()
                    .map(|h| (h.name, h.ip))
                    .collect::<BTreeSet<_>>()
            })
        };
        if let Err(e) = self.nsm.monitor(monitored, holding) {
            warn!(error = %e, client = %host.ip,
                "NLM: cannot record the client in the state directory; \
                 after a restart it will not be told to reclaim its locks");
        }
    }

    /// Forgets the monitored clients `monitored` matches (they rebooted or
    /// freed all).
    pub(super) fn forget(&self, monitored: impl FnMut(&Monitored) -> bool) {
        if let Err(e) = self.nsm.forget(monitored) {
            warn!(error = %e, "NLM: cannot update the monitored clients in the state directory");
        }
    }

    /// The grace period is over: forgets the clients that did not reclaim
    /// (those not among `held`, the hosts holding locks now).
    pub(super) fn end_grace(&self, held: Vec<NlmHost>) {
        info!(reclaimed = held.len(), "NLM: grace period over");
        let keep = |m: &Monitored| held.iter().any(|h| h.name == m.name && h.ip == m.client);
        if let Err(e) = self.nsm.keep_only(keep) {
            warn!(error = %e, "NLM: cannot update the monitored clients");
        }
    }
}

/// SM_NOTIFY to a client's statd: this server restarted, reclaim.
pub(super) fn notify(host: &Monitored, state: i32) {
    let peer = Peer {
        client: host.client,
        local: host.server,
    };
    let args = StatChge {
        mon_name: host.server.to_string().as_str().into(),
        state,
    }
    .to_xdr();
    let mut wait = Duration::from_secs(1);
    for _ in 0..8 {
        let r = client::call(
            peer,
            NSM_PROGRAM,
            NSM_V1,
            NsmProc::Notify as u32,
            &args,
            true,
        );
        match r {
            Ok(_) => {
                info!(client = %host.client, "NSM: told the client to reclaim its locks");
                return;
            }
            Err(e) => debug!(client = %host.client, error = %e, "NSM: SM_NOTIFY failed; retrying"),
        }
        std::thread::sleep(wait);
        wait = (wait * 2).min(Duration::from_secs(15));
    }
    warn!(client = %host.client, "NSM: the client did not answer SM_NOTIFY; \
        its locks can be reclaimed only if it learns of the restart otherwise");
}
