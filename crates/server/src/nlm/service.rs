//! The lock service itself: its state (the lock and share tables, the
//! callbacks being made, the NSM state), its start, how calls reach the
//! procedures, and what happens to the locks of clients and exports that
//! go away.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_logs::LogEvery;
use dionfs_proto::nlm4::{NlmProc4, NLM_PROGRAM, NLM_V4};
use dionfs_proto::nsm::{NsmProc, NSM_PROGRAM, NSM_V1};
use dionfs_proto::Void;
use dionfs_rpc::{CallHeader, RecordError, RecordReader, ReplyStatus};
use dionfs_transport::{read_args, CallStream, ConnInfo, Received, Reply, Service};
use dionfs_xdr::Encode;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::client::Peer;
use super::granted::{self, Callback, Grant, Granting, Heard, RETRY_EVERY, WAITER_TTL};
use super::owner::{Host, Owner, ShareOwner};
use super::procedures;
use super::queue::{run_jobs, Job};
use super::reboot::Reboots;
use super::state::Monitored;
use crate::callstats::CallStats;
use crate::reply::success;
use dionfs_core::locks::shares::ShareTable;
use dionfs_core::locks::table::LockTable;
use dionfs_core::server::Server;

/// Counters of the lock service.
#[derive(Debug, Default)]
pub struct NlmCounters {
    pub granted: AtomicU64,
    pub denied: AtomicU64,
    pub blocked: AtomicU64,
    pub callbacks_failed: AtomicU64,
    pub callbacks_dropped: AtomicU64,
    pub hosts_dropped: AtomicU64,
}

/// The NLM and NSM programs.
pub struct LockService {
    pub(super) server: Arc<Server>,
    pub(super) table: Mutex<LockTable<Owner, Callback>>,
    /// Locked after `table` where both are.
    pub(super) granting: Granting,
    pub(super) shares: Mutex<ShareTable<ShareOwner>>,
    pub(super) reboots: Reboots,
    jobs: mpsc::UnboundedSender<Job>,
    pub counters: NlmCounters,
    /// Per-procedure call counts and service times.
    calls: Arc<CallStats>,
    /// DENIED_NOLOCKS: one line every 10 s, however hard clients try.
    pub(super) nolocks_warning: LogEvery,
    /// A dropped call to a client: one line every 10 s.
    pub(super) callback_warning: LogEvery,
}

impl LockService {
    /// Opens the lock service's state under `state_dir` and starts its
    /// background work (callbacks, retries). It holds the server's grace
    /// period if the previous run had clients holding locks; they are told
    /// of the restart by [`LockService::notify_restart`], once the server
    /// serves and the port mapper knows where.
    pub fn start(
        server: Arc<Server>,
        state_dir: &std::path::Path,
        calls: Arc<CallStats>,
    ) -> Result<Arc<LockService>, String> {
        let reboots = Reboots::open(state_dir, server.grace.clone())?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let service = Arc::new(LockService {
            server,
            table: Mutex::default(),
            granting: Granting::default(),
            shares: Mutex::default(),
            reboots,
            jobs,
            counters: NlmCounters::default(),
            calls,
            nolocks_warning: LogEvery::new(Duration::from_secs(10)),
            callback_warning: LogEvery::new(Duration::from_secs(10)),
        });
        tokio::spawn(run_jobs(service.clone(), rx));
        tokio::spawn(service.clone().retry_waiters());
        Ok(service)
    }

    /// Releases the locks, blocked LOCKs and share reservations held on
    /// files of the exports `ids`, which a reload removed: their clients can
    /// no longer reach those files to unlock them, and processes on the
    /// server would wait on the locks for ever (knfsd keeps them until an
    /// administrator writes the filesystem to `unlock_filesystem`). The
    /// numbers of locks and of reservations released.
    pub fn release_exports(&self, ids: &[u16]) -> (usize, usize) {
        let removed =
            |fh: &[u8]| dionfs_fs::handle::export_id(fh).is_some_and(|id| ids.contains(&id));
        let locks = self.table.lock().drop_files(removed);
        let reservations = self.shares.lock().drop_where(removed, |_| true);
        (locks, reservations)
    }

    /// SM_NOTIFY to each client that held locks before the restart: their
    /// lock managers then reclaim, asking the port mapper for NLM first,
    /// so this comes once every listener serves and is registered.
    pub fn notify_restart(&self) {
        let state = self.reboots.state();
        for host in self.reboots.take_previous() {
            let _ = self.jobs.send(Job::Notify { host, state });
        }
    }

    /// Locks held now (metrics, tests).
    pub fn lock_count(&self) -> usize {
        self.table.lock().lock_count()
    }

    /// Blocked locks waiting now.
    pub fn waiter_count(&self) -> usize {
        self.table.lock().waiter_count()
    }

    /// The reply to a synchronous procedure (the results), or to a `_MSG`
    /// one (nothing; the results go back as the `res` call).
    pub(super) fn answer<T: Encode>(
        &self,
        xid: u32,
        proc_: NlmProc4,
        res: NlmProc4,
        peer: Peer,
        results: &T,
    ) -> Reply {
        use NlmProc4::*;
        if matches!(
            proc_,
            TestMsg | LockMsg | CancelMsg | UnlockMsg | GrantedMsg
        ) {
            let _ = self.jobs.send(Job::Res {
                peer,
                proc_: res,
                results: results.to_xdr(),
            });
            return success(xid, &Void);
        }
        success(xid, results)
    }

    /// Records `host` as holding locks (durably, the first time), as the
    /// one that called the server at `local`.
    pub(super) fn monitor(&self, host: &Host, local: IpAddr) {
        self.reboots
            .monitor(host, local, || self.table.lock().clients());
    }

    /// Drops every lock, waiter and share of the hosts `host` matches and
    /// forgets the monitored clients `monitored` matches; grants what the
    /// drop freed.
    pub(super) fn drop_hosts(
        &self,
        host: impl Fn(&Host) -> bool,
        monitored: impl FnMut(&Monitored) -> bool,
    ) {
        let mut table = self.table.lock();
        let touched = table.drop_clients(&host);
        self.granting.drop_hosts(&host);
        let mut grants = Vec::new();
        for fh in &touched {
            let retried = table.grant_waiters(fh);
            grants.extend(self.granting.record(&table, fh, retried));
        }
        drop(table);
        self.shares.lock().drop_where(|_| true, &host);
        self.counters.hosts_dropped.fetch_add(1, Ordering::Relaxed);
        self.reboots.forget(monitored);
        self.send_granted(grants);
    }

    /// Calls the owners of locks taken for their blocked LOCKs back
    /// (GRANTED), and records their clients for a restart.
    pub(super) fn send_granted(&self, grants: Vec<Grant>) {
        for g in grants {
            self.counters.granted.fetch_add(1, Ordering::Relaxed);
            if g.callback.monitor {
                self.monitor(&g.owner.host, g.callback.peer.local);
            }
            let _ = self.jobs.send(Job::Granted(Box::new(g)));
        }
    }

    /// Makes a GRANTED callback; if the client answers that it no longer
    /// waits (and has not had its answer meanwhile), the lock is released
    /// again.
    pub(super) fn call_granted(&self, g: &Grant) {
        let (owner, cb) = (&g.owner, &g.callback);
        match granted::call(g) {
            Heard::Taken => {}
            Heard::Refused(stat) => {
                let mut table = self.table.lock();
                if g.answered() {
                    // It no longer waits because it has the lock.
                    return;
                }
                debug!(client = %cb.peer.client, ?stat,
                    "NLM GRANTED refused: the client no longer waits; releasing");
                let _ = table.unlock(&g.fh, owner, g.span);
                let retried = table.grant_waiters(&g.fh);
                let grants = self.granting.record(&table, &g.fh, retried);
                drop(table);
                self.send_granted(grants);
            }
            Heard::Nothing(last) => {
                self.counters
                    .callbacks_failed
                    .fetch_add(1, Ordering::Relaxed);
                // The lock stays held: the client asks again while it
                // waits, and gets GRANTED at once.
                warn!(client = %cb.peer.client, svid = owner.svid,
                    error = %last.map_or_else(String::new, |e| e.to_string()),
                    "NLM: cannot call GRANTED back; the lock stays held for the client's next LOCK");
            }
        }
    }

    /// Retries every blocked lock each [`RETRY_EVERY`] (locks released by
    /// processes on the server), drops waiters their clients gave up on,
    /// and at the end of the grace period forgets the clients that did not
    /// reclaim.
    async fn retry_waiters(self: Arc<Self>) {
        let mut tick = tokio::time::interval(RETRY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut grace_done = !self.reboots.grace_was_held();
        loop {
            tick.tick().await;
            let s = self.clone();
            let finish_grace = !grace_done && !self.reboots.in_grace();
            grace_done |= finish_grace;
            let _ = tokio::task::spawn_blocking(move || {
                let stale = Instant::now()
                    .checked_sub(WAITER_TTL)
                    .unwrap_or_else(Instant::now);
                let mut table = s.table.lock();
                let mut grants = Vec::new();
                for (fh, retried) in table.grant_all(stale) {
                    grants.extend(s.granting.record(&table, &fh, retried));
                }
                drop(table);
                s.send_granted(grants);
                if finish_grace {
                    let held = s.table.lock().clients();
                    s.reboots.end_grace(held);
                }
            })
            .await;
        }
    }
}

/// A received NLM or NSM call.
pub struct Pending {
    call: CallHeader,
    args: Vec<u8>,
}

impl Service for LockService {
    type Pending = Pending;

    async fn receive<R: CallStream>(
        &self,
        conn: &ConnInfo,
        call: CallHeader,
        body: &mut RecordReader<R>,
    ) -> Result<Received<Pending>, RecordError> {
        let status = |s| Ok(Received::Reply(Reply::status(call.xid, s)));
        // NSM's UDP socket is there for rebooted clients' SM_NOTIFY. A
        // datagram's source address is the sender's to write: NLM served
        // there (its `_MSG` results are sent back to that address) let
        // forged sources queue results and connections without bound, and
        // take share reservations and FREE_ALL in other clients' names.
        if conn.datagram {
            if call.prog != NSM_PROGRAM {
                return status(ReplyStatus::ProgUnavail);
            }
            if !matches!(
                NsmProc::from_u32(call.proc_),
                Some(NsmProc::Null | NsmProc::Stat | NsmProc::Notify)
            ) {
                return status(ReplyStatus::ProcUnavail);
            }
        }
        let args = match (call.prog, call.vers) {
            (NLM_PROGRAM, NLM_V4) => procedures::NLM.procedure(call.proc_).map(|p| p.args),
            (NSM_PROGRAM, NSM_V1) => procedures::NSM.procedure(call.proc_).map(|p| p.args),
            (NLM_PROGRAM, _) => return Ok(Received::Reply(Reply::only_version(call.xid, NLM_V4))),
            (NSM_PROGRAM, _) => return Ok(Received::Reply(Reply::only_version(call.xid, NSM_V1))),
            _ => return status(ReplyStatus::ProgUnavail),
        };
        let Some(max) = args.and_then(|a| a.whole()) else {
            return status(ReplyStatus::ProcUnavail);
        };
        let args = read_args(body, max).await?;
        Ok(Received::Run(Pending { call, args }))
    }

    fn execute_blocks(&self, _pending: &Pending) -> bool {
        true
    }

    /// As for NFS calls: a lock call is admitted by the export's client
    /// list, which may name hosts.
    fn resolves_names(&self) -> bool {
        self.server.exports().need_names()
    }

    async fn execute(self: Arc<Self>, conn: Arc<ConnInfo>, pending: Pending) -> Option<Reply> {
        let Pending { call, args } = pending;
        let started = Instant::now();
        let c = procedures::LockCall {
            conn: &conn,
            call: &call,
        };
        let unavailable = || Reply::status(call.xid, ReplyStatus::ProcUnavail);
        let reply = match call.prog {
            NLM_PROGRAM => match (
                procedures::NLM.procedure(call.proc_),
                NlmProc4::from_u32(call.proc_),
            ) {
                (Some(p), Some(proc_)) => (p.handler)(&self, &c, proc_, &args),
                _ => unavailable(),
            },
            _ => match procedures::NSM.procedure(call.proc_) {
                Some(p) => (p.handler)(&self, &c, &args),
                None => unavailable(),
            },
        };
        self.calls
            .record(call.prog, call.vers, call.proc_, started.elapsed());
        Some(reply)
    }
}
