//! The lock service itself: its state (the server's lock and share
//! tables, [`crate::locks`], the callbacks being made, the NSM state), its
//! start, how calls reach the procedures, and what happens to the locks of
//! clients that go away.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_logs::LogEvery;
use dionfs_proto::nlm4::{NlmProc4, NLM_PROGRAM, NLM_V4};
use dionfs_proto::nsm::{NsmProc, NSM_PROGRAM, NSM_V1};
use dionfs_proto::Void;
use dionfs_rpc::{CallHeader, RecordError, RecordReader, ReplyStatus};
use dionfs_transport::{read_args, CallStream, ConnInfo, Place, Received, Reply, Service};
use dionfs_xdr::Encode;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::client::Peer;
use super::granted::{self, Grant, Granting, Heard, RETRY_EVERY, WAITER_TTL};
use super::procedures;
use super::queue::{run_jobs, Job};
use super::reboot::Reboots;
use super::state::Monitored;
use crate::callstats::CallStats;
use crate::locks::{Client, Locks, NlmHost, Owner};
use crate::reply::success;
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
    /// The server's lock and share tables, NFSv4's owners beside NLM's.
    pub(super) locks: Arc<Locks>,
    /// Locked after `locks.table` where both are.
    pub(super) granting: Granting,
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
    /// background work (callbacks, retries: every second, and of the files
    /// `released` names). Its locks are kept in `locks`. It holds the
    /// server's grace period if the previous run had clients holding
    /// locks; they are told of the restart by
    /// [`LockService::notify_restart`], once the server serves and the
    /// port mapper knows where.
    pub fn start(
        server: Arc<Server>,
        locks: Arc<Locks>,
        released: mpsc::Receiver<Vec<u8>>,
        state_dir: &std::path::Path,
        calls: Arc<CallStats>,
    ) -> Result<Arc<LockService>, String> {
        let reboots = Reboots::open(state_dir, server.grace.clone())?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let service = Arc::new(LockService {
            server,
            locks,
            granting: Granting::default(),
            reboots,
            jobs,
            counters: NlmCounters::default(),
            calls,
            nolocks_warning: LogEvery::new(Duration::from_secs(10)),
            callback_warning: LogEvery::new(Duration::from_secs(10)),
        });
        tokio::spawn(run_jobs(service.clone(), rx));
        tokio::spawn(service.clone().retry_waiters(released));
        Ok(service)
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
        self.locks.table.lock().lock_count()
    }

    /// Blocked locks waiting now.
    pub fn waiter_count(&self) -> usize {
        self.locks.table.lock().waiter_count()
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
    pub(super) fn monitor(&self, host: &NlmHost, local: IpAddr) {
        self.reboots.monitor(host, local, || self.hosts());
    }

    /// The NLM hosts holding at least one lock.
    pub fn hosts(&self) -> Vec<NlmHost> {
        let clients = self.locks.table.lock().clients();
        clients
            .into_iter()
            .filter_map(|c| match c {
                Client::Nlm(host) => Some(host),
                Client::V4(_) => None,
            })
            .collect()
    }

    /// Drops every lock, waiter and share of the hosts `host` matches and
    /// forgets the monitored clients `monitored` matches; grants what the
    /// drop freed.
    pub(super) fn drop_hosts(
        &self,
        host: impl Fn(&NlmHost) -> bool,
        monitored: impl FnMut(&Monitored) -> bool,
    ) {
        let client = |c: &Client| matches!(c, Client::Nlm(h) if host(h));
        let mut table = self.locks.table.lock();
        let touched = table.drop_clients(client);
        self.granting.drop_hosts(&host);
        let mut grants = Vec::new();
        for fh in &touched {
            let retried = table.grant_waiters(fh);
            grants.extend(self.granting.record(&table, fh, retried));
        }
        drop(table);
        self.locks.shares.lock().drop_where(|_| true, client);
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
                let mut table = self.locks.table.lock();
                if g.answered() {
                    // It no longer waits because it has the lock.
                    return;
                }
                debug!(client = %cb.peer.client, ?stat,
                    "NLM GRANTED refused: the client no longer waits; releasing");
                // An unlock that fails (or would split a lock past the
                // address's bound on ranges) leaves the lock held, as
                // before the GRANTED: released with the client's next
                // UNLOCK or its reboot.
                let _ = table.unlock(&g.fh, &Owner::Nlm(owner.clone()), g.span);
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
    /// reclaim. Retries the waiters of each file `released` names at once
    /// (locks released by another program: an NFSv4 LOCKU, CLOSE or
    /// expiry).
    async fn retry_waiters(self: Arc<Self>, mut released: mpsc::Receiver<Vec<u8>>) {
        // The first retry a period after the start (there is nothing to
        // retry before).
        let first = tokio::time::Instant::now() + RETRY_EVERY;
        let mut tick = tokio::time::interval_at(first, RETRY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut grace_done = !self.reboots.grace_was_held();
        loop {
            let s = self.clone();
            tokio::select! {
                Some(fh) = released.recv() => {
                    let _ = tokio::task::spawn_blocking(move || s.retry_file(&fh)).await;
                    continue;
                }
                _ = tick.tick() => {}
            }
            let finish_grace = !grace_done && !self.reboots.in_grace();
            grace_done |= finish_grace;
            let _ = tokio::task::spawn_blocking(move || {
                let stale = Instant::now()
                    .checked_sub(WAITER_TTL)
                    .unwrap_or_else(Instant::now);
                let mut table = s.locks.table.lock();
                let mut grants = Vec::new();
                for (fh, retried) in table.grant_all(stale) {
                    grants.extend(s.granting.record(&table, &fh, retried));
                }
                drop(table);
                s.send_granted(grants);
                if finish_grace {
                    s.reboots.end_grace(s.hosts());
                }
            })
            .await;
        }
    }

    /// Grants what the waiters of `fh` can now have.
    fn retry_file(&self, fh: &[u8]) {
        let mut table = self.locks.table.lock();
        let retried = table.grant_waiters(fh);
        let grants = self.granting.record(&table, fh, retried);
        drop(table);
        self.send_granted(grants);
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

    async fn execute(
        self: Arc<Self>,
        conn: Arc<ConnInfo>,
        pending: Pending,
        _place: Place,
    ) -> Option<Reply> {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use dionfs_core::locks::table::Attempt;
    use dionfs_core::locks::Span;
    use dionfs_proto::nlm4::{CallerName, NetObj, Nlm4Lock, Nlm4TestArgs};

    use super::granted::Callback;
    use super::*;
    use crate::locks::{ClientId, NlmOwner, Waiter};

    /// A v4 unlock (through [`Locks::unlock`]) wakes NLM's waiter on the
    /// file at once. Time is paused, so the every-second retry never runs:
    /// only the `released` notification can grant it.
    #[test]
    fn a_release_by_another_program_grants_nlm_waiters() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let file = root.join("f");
        std::fs::write(&file, b"data").unwrap();
        std::fs::create_dir(root.join("export")).unwrap();
        let server = crate::testing::server(&root, &root.join("export"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let (locks, released) = Locks::new();
        let locks = Arc::new(locks);
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let nlm = NlmOwner {
            host: NlmHost {
                name: b"client".to_vec(),
                ip,
            },
            svid: 1,
        };
        let v4 = Owner::V4 {
            client: ClientId(7),
            owner: b"lock-owner".to_vec(),
            address: ip,
        };
        let span = Span::from_nlm(0, 10).unwrap();
        let mut open = || {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&file)?;
            Ok((f.into(), true))
        };
        let callback: Waiter = Box::new(Callback {
            peer: Peer {
                client: ip,
                local: ip,
            },
            args: Nlm4TestArgs {
                cookie: NetObj(Vec::new()),
                exclusive: true,
                alock: Nlm4Lock {
                    caller_name: CallerName(b"client".to_vec()),
                    fh: NetObj(b"fh".to_vec()),
                    oh: NetObj(Vec::new()),
                    svid: 1,
                    l_offset: 0,
                    l_len: 10,
                },
            },
            monitor: false,
        });
        runtime.block_on(async {
            let calls = Arc::new(CallStats::new(Vec::new()));
            let state = root.join("state");
            let service =
                LockService::start(server, locks.clone(), released, &state, calls).unwrap();
            {
                let mut table = locks.table.lock();
                let mut lock = |o: &Owner, waiter| {
                    table
                        .lock(b"fh", o, b"", span, true, &mut open, waiter)
                        .unwrap()
                };
                assert_eq!(lock(&v4, None), Attempt::Granted);
                assert_eq!(lock(&Owner::Nlm(nlm), Some(callback)), Attempt::Conflict);
            }
            assert_eq!(service.waiter_count(), 1);
            assert_eq!(
                locks.unlock(b"fh", &v4, span).unwrap(),
                dionfs_core::locks::table::Unlock::Released
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while service.waiter_count() != 0 {
                assert!(Instant::now() < deadline, "the NLM waiter was not granted");
                tokio::task::yield_now().await;
            }
            assert_eq!(service.lock_count(), 1);
        });
        // The GRANTED callback to nobody may still be trying.
        runtime.shutdown_background();
    }
}
