//! The lock service: NLM version 4 (program 100021) and NSM version 1
//! (program 100024, the server's own statd), so that Linux clients mount
//! without `nolock` and their `fcntl`/`flock` locks hold between clients
//! and against processes on the server.
//!
//! - Locks are OFD locks on server-side descriptions of the file, one per
//!   remote owner ([`owner`]: client host + `svid`), kept in the
//!   protocol-neutral tables of [`crate::locks`].
//! - A LOCK that must wait (`block`) is answered BLOCKED and queued; when
//!   it can be had, the server takes it and calls the client back with
//!   GRANTED ([`client`]). Waiters are retried whenever a lock of the file
//!   is released through NLM and every second (for locks released by
//!   processes on the server).
//! - NSM: the clients holding locks are recorded under the state
//!   directory ([`state`]). A client that reboots sends SM_NOTIFY (or its
//!   lock manager FREE_ALL): its locks are dropped. A server that restarts
//!   tells the recorded clients (SM_NOTIFY to their statd) and keeps a
//!   grace period in which only reclaims are granted.
//!
//! The calls are quick and run on blocking threads; one mutex guards the
//! lock table.

pub mod client;
pub mod owner;
pub mod procedures;
pub mod state;

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_dataplane::LogEvery;
use dionfs_proto::nfs3::NfsFh3;
use dionfs_proto::nlm4::{
    NetObj, Nlm4CancArgs, Nlm4Holder, Nlm4LockArgs, Nlm4Res, Nlm4ShareArgs, Nlm4Stat, Nlm4TestArgs,
    Nlm4TestRes, Nlm4UnlockArgs, NlmProc4, NLM_PROGRAM, NLM_V4,
};
use dionfs_proto::nsm::{NsmProc, StatChge, NSM_PROGRAM, NSM_V1};
use dionfs_proto::Void;
use dionfs_rpc::{CallHeader, RecordError, RecordReader, ReplyStatus};
use dionfs_xdr::{Decode, Encode};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::callstats::CallStats;
use crate::locks::limits::{
    Limit, MAX_DESCRIPTIONS_PER_CLIENT, MAX_NAMES_PER_CLIENT, MAX_SHARES_PER_CLIENT,
    MAX_WAITERS_PER_CLIENT, MAX_WAITERS_PER_CLIENT_TOTAL,
};
use crate::locks::shares::{Reservation, Reserve, ShareTable};
use crate::locks::table::{Attempt, LockTable, Retried};
use crate::locks::Span;
use crate::reply::success;
use client::Peer;
use dionfs_core::export::{squash, Access};
use dionfs_core::exports::Export;
use dionfs_core::grace::Grace;
use dionfs_core::server::Server;
use dionfs_transport::{read_args, CallStream, ConnInfo, Received, Reply, Service};
use owner::{Host, Owner, ShareOwner};
use state::{Monitored, NsmState};

/// How long a blocked LOCK waits for its client to ask again before it
/// is dropped (the Linux client asks every 30 s while it waits).
const WAITER_TTL: Duration = Duration::from_secs(120);
/// How often waiters are retried without a release seen through NLM.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// A GRANTED callback to make: to whom, and what.
#[derive(Clone)]
pub struct Callback {
    peer: Peer,
    args: Nlm4TestArgs,
    /// Whether the LOCK was monitored (not NM_LOCK): a lock granted to it
    /// records its client for a restart, as a LOCK granted at once does.
    monitor: bool,
}

/// A GRANTED callback being made: set once the owner's LOCK, asked again,
/// was answered GRANTED, so the client has the lock whatever the callback
/// now hears (knfsd unlinks the blocked lock then, and a late answer to
/// its callback finds nothing to release).
type Answered = Arc<AtomicBool>;

/// A GRANTED callback in the making's key: file, owner, range.
type GrantKey = (Vec<u8>, Owner, Span);

/// A lock taken for a blocked LOCK, to call its client back about.
struct Grant {
    fh: Vec<u8>,
    owner: Owner,
    span: Span,
    callback: Callback,
    answered: Answered,
}

/// Work for the callback task.
enum Job {
    /// A blocked lock was taken for its owner: tell the client.
    Granted(Box<Grant>),
    /// The answer to a `_MSG` call, sent as the matching `_RES` call.
    Res {
        peer: Peer,
        proc_: NlmProc4,
        results: Vec<u8>,
    },
    /// Tell a client's statd that this server restarted.
    Notify { host: Monitored, state: i32 },
}

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
    server: Arc<Server>,
    table: Mutex<LockTable<Owner, Callback>>,
    /// The GRANTED callbacks being made, by file, owner and range. Locked
    /// after `table` where both are.
    granting: Mutex<HashMap<GrantKey, Answered>>,
    shares: Mutex<ShareTable<ShareOwner>>,
    nsm: NsmState,
    /// The server's grace period, held by this service if its previous run
    /// had clients holding locks.
    grace: Arc<Grace>,
    /// The clients that held locks before the restart, until they are
    /// told of it ([`LockService::notify_restart`]).
    previous: Mutex<Vec<Monitored>>,
    jobs: mpsc::UnboundedSender<Job>,
    pub counters: NlmCounters,
    /// Per-procedure call counts and service times.
    calls: Arc<CallStats>,
    /// DENIED_NOLOCKS: one line every 10 s, however hard clients try.
    nolocks_warning: LogEvery,
    /// A dropped call to a client: one line every 10 s.
    callback_warning: LogEvery,
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
        let grace = server.grace.clone();
        let (nsm, previous) = NsmState::open(state_dir).map_err(|e| {
            format!(
                "cannot open the lock service's state in {}: {e}",
                state_dir.join("nlm").display()
            )
        })?;
        let held = !previous.is_empty() && grace.hold();
        let (jobs, rx) = mpsc::unbounded_channel();
        let state = nsm.number;
        let clients = previous.len();
        let service = Arc::new(LockService {
            server,
            table: Mutex::default(),
            granting: Mutex::default(),
            shares: Mutex::default(),
            nsm,
            grace: grace.clone(),
            previous: Mutex::new(previous),
            jobs,
            counters: NlmCounters::default(),
            calls,
            nolocks_warning: LogEvery::new(Duration::from_secs(10)),
            callback_warning: LogEvery::new(Duration::from_secs(10)),
        });
        if held {
            info!(
                clients,
                grace_s = grace.period().as_secs(),
                nsm_state = state,
                "NLM: clients held locks before the restart; grace period for their reclaims"
            );
        }
        tokio::spawn(run_jobs(service.clone(), rx));
        tokio::spawn(retry_waiters(service.clone()));
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
        let state = self.nsm.number;
        for host in std::mem::take(&mut *self.previous.lock()) {
            let _ = self.jobs.send(Job::Notify { host, state });
        }
    }

    fn in_grace(&self) -> bool {
        self.grace.active()
    }

    /// Locks held now (metrics, tests).
    pub fn lock_count(&self) -> usize {
        self.table.lock().lock_count()
    }

    /// Blocked locks waiting now.
    pub fn waiter_count(&self) -> usize {
        self.table.lock().waiter_count()
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

impl LockService {
    /// The reply to a synchronous procedure (the results), or to a `_MSG`
    /// one (nothing; the results go back as the `res` call).
    fn answer<T: Encode>(
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

    /// The export and caller of a call on `fh`, or the status to answer:
    /// STALE_FH for a handle that is not ours or an export this client
    /// may not use (as the NFS program would refuse it).
    fn export_for(&self, conn: &ConnInfo, fh: &NetObj) -> Result<Arc<Export>, Nlm4Stat> {
        let fh = NfsFh3::new(fh.0.clone()).map_err(|_| Nlm4Stat::StaleFh)?;
        self.server
            .exports()
            .for_client(conn, fh.as_bytes())
            .cloned()
            .ok_or(Nlm4Stat::StaleFh)
    }

    /// Opens a description of `fh` for locks and checks the caller may
    /// take the lock: read access for a shared lock, write access for an
    /// exclusive one, or owning the file (knfsd's `NFSD_MAY_LOCK` with
    /// owner override).
    fn open_checked(
        export: &Export,
        call: &CallHeader,
        fh: &[u8],
        exclusive: bool,
    ) -> Result<(std::os::fd::OwnedFd, bool), Nlm4Stat> {
        let (fd, writable) = export.fs.open_for_locks(fh).map_err(|e| match e {
            dionfs_fs::FsError::Stale | dionfs_fs::FsError::BadHandle => Nlm4Stat::StaleFh,
            _ => Nlm4Stat::Failed,
        })?;
        let creds = squash(&export.config, &call.cred);
        if creds.uid != 0 {
            let owner = rustix::fs::fstat(&fd).map(|s| s.st_uid).unwrap_or(u32::MAX);
            if owner != creds.uid {
                let mode = if exclusive {
                    rustix::fs::Access::WRITE_OK
                } else {
                    rustix::fs::Access::READ_OK
                };
                let ok = dionfs_sys::cred::with_creds(&creds, || {
                    dionfs_sys::io::access_fd(&fd, mode).is_ok()
                })
                .unwrap_or(false);
                if !ok {
                    return Err(Nlm4Stat::Denied);
                }
            }
        }
        Ok((fd, writable))
    }

    fn lock(
        &self,
        conn: &ConnInfo,
        call: &CallHeader,
        a: &Nlm4LockArgs,
        monitor: bool,
    ) -> Nlm4Stat {
        let stat = self.try_lock(conn, call, a, monitor);
        let counter = match stat {
            Nlm4Stat::Granted => &self.counters.granted,
            Nlm4Stat::Blocked => &self.counters.blocked,
            _ => &self.counters.denied,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        debug!(client = %conn.peer, svid = a.alock.svid, offset = a.alock.l_offset,
            len = a.alock.l_len, exclusive = a.exclusive, block = a.block,
            reclaim = a.reclaim, ?stat, "NLM LOCK");
        stat
    }

    fn try_lock(
        &self,
        conn: &ConnInfo,
        call: &CallHeader,
        a: &Nlm4LockArgs,
        monitor: bool,
    ) -> Nlm4Stat {
        if self.in_grace() != a.reclaim {
            // In the grace period only reclaims; after it, none (knfsd).
            return Nlm4Stat::DeniedGracePeriod;
        }
        let export = match self.export_for(conn, &a.alock.fh) {
            Ok(x) => x,
            Err(s) => return s,
        };
        if a.exclusive && export.config.access == Access::Ro {
            return Nlm4Stat::Rofs;
        }
        let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
            return Nlm4Stat::Fbig;
        };
        let fh = &a.alock.fh.0;
        let mut open = match Self::open_checked(&export, call, fh, a.exclusive) {
            Ok(o) => once(o),
            Err(s) => return s,
        };
        let owner = Owner::of(conn, &a.alock);
        let max_open = max_descriptions();
        let mut table = self.table.lock();
        table.set_max_open(max_open);
        let callback = a.block.then(|| Callback {
            peer: Peer {
                client: conn.peer.ip(),
                local: conn.local.ip(),
            },
            args: Nlm4TestArgs {
                cookie: a.cookie.clone(),
                exclusive: a.exclusive,
                alock: a.alock.clone(),
            },
            monitor,
        });
        let attempt = table.lock(
            fh,
            &owner,
            &a.alock.oh.0,
            span,
            a.exclusive,
            &mut open,
            callback,
        );
        let stat = match attempt {
            Ok(Attempt::Granted) => Nlm4Stat::Granted,
            Ok(Attempt::ReadOnly) => Nlm4Stat::Rofs,
            Ok(Attempt::NoLocks(limit)) => {
                if self.nolocks_warning.due() {
                    let why = match limit {
                        Limit::Descriptions => format!(
                            "the client's address holds {MAX_DESCRIPTIONS_PER_CLIENT} lock \
                             owners' descriptions, as many as one address may"
                        ),
                        Limit::Names => format!(
                            "the client's address holds locks under {MAX_NAMES_PER_CLIENT} \
                             host names, as many as one address may"
                        ),
                        Limit::Server => format!(
                            "the server holds {} lock descriptions, as many as it keeps \
                             (a quarter of its open-file limit)",
                            table.open_count()
                        ),
                        Limit::Waiters => format!(
                            "the client's address has {MAX_WAITERS_PER_CLIENT} blocked locks \
                             waiting on this file, as many as it may"
                        ),
                        Limit::AllWaiters => format!(
                            "the client's address has {MAX_WAITERS_PER_CLIENT_TOTAL} blocked \
                             locks waiting, as many as it may"
                        ),
                    };
                    warn!(client = %conn.peer, name = %String::from_utf8_lossy(&a.alock.caller_name.0),
                        "NLM LOCK refused (DENIED_NOLOCKS): {why} (repeats are not logged for 10 s)");
                }
                Nlm4Stat::DeniedNolocks
            }
            Ok(Attempt::Deadlock) => Nlm4Stat::Deadlck,
            Ok(Attempt::Conflict) if a.block => Nlm4Stat::Blocked,
            Ok(Attempt::Conflict) => Nlm4Stat::Denied,
            Err(e) => {
                warn!(error = %e, client = %conn.peer, "NLM LOCK failed");
                Nlm4Stat::Failed
            }
        };
        if stat == Nlm4Stat::Granted {
            // A LOCK asked again while its GRANTED callback is being made:
            // the client has its answer. Under the table's lock, so that
            // the callback never releases what this answer granted.
            // (The key is built only when callbacks are being made.)
            let mut granting = self.granting.lock();
            if !granting.is_empty() {
                if let Some(answered) = granting.remove(&(fh.clone(), owner.clone(), span)) {
                    answered.store(true, Ordering::Release);
                }
            }
        }
        drop(table);
        if stat == Nlm4Stat::Granted && monitor {
            self.monitor(&owner, conn.local.ip());
        }
        stat
    }

    /// Records the client as holding locks (durably, the first time), as
    /// the one that called the server at `local`.
    fn monitor(&self, owner: &Owner, local: IpAddr) {
        let host = Monitored {
            name: owner.host.name.clone(),
            client: owner.host.ip,
            server: local,
        };
        let holding = || {
            // In a grace period the previous run's clients are reclaiming.
            (!self.in_grace()).then(|| {
                let hosts = self.table.lock().clients();
                hosts.into_iter().map(|h| (h.name, h.ip)).collect()
            })
        };
        if let Err(e) = self.nsm.monitor(host, holding) {
            warn!(error = %e, client = %owner.host.ip,
                "NLM: cannot record the client in the state directory; \
                 after a restart it will not be told to reclaim its locks");
        }
    }

    fn test(&self, conn: &ConnInfo, call: &CallHeader, a: &Nlm4TestArgs) -> Nlm4TestRes {
        let res = |stat, holder| Nlm4TestRes {
            cookie: a.cookie.clone(),
            stat,
            holder,
        };
        if self.in_grace() {
            return res(Nlm4Stat::DeniedGracePeriod, None);
        }
        let export = match self.export_for(conn, &a.alock.fh) {
            Ok(x) => x,
            Err(s) => return res(s, None),
        };
        let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
            return res(Nlm4Stat::Fbig, None);
        };
        let fh = &a.alock.fh.0;
        // A TEST needs only read access, whatever lock it asks about.
        let mut open = match Self::open_checked(&export, call, fh, false) {
            Ok(o) => once(o),
            Err(s) => return res(s, None),
        };
        let owner = Owner::of(conn, &a.alock);
        match self
            .table
            .lock()
            .test(fh, &owner, span, a.exclusive, &mut open)
        {
            Ok(None) => res(Nlm4Stat::Granted, None),
            Ok(Some(h)) => {
                let (l_offset, l_len) = h.span.to_nlm();
                // Not one of the table's: a process on the server or
                // another server's client, svid 0.
                let (svid, oh) = h.owner.map_or((0, Vec::new()), |(o, oh)| (o.svid, oh));
                res(
                    Nlm4Stat::Denied,
                    Some(Nlm4Holder {
                        exclusive: h.exclusive,
                        svid,
                        oh: NetObj(oh),
                        l_offset,
                        l_len,
                    }),
                )
            }
            Err(e) => {
                warn!(error = %e, client = %conn.peer, "NLM TEST failed");
                res(Nlm4Stat::Failed, None)
            }
        }
    }

    fn unlock(&self, conn: &ConnInfo, a: &Nlm4UnlockArgs) -> Nlm4Stat {
        // Unlocking is allowed in the grace period (knfsd too).
        if self.export_for(conn, &a.alock.fh).is_err() {
            return Nlm4Stat::StaleFh;
        }
        let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
            return Nlm4Stat::Fbig;
        };
        let fh = &a.alock.fh.0;
        let owner = Owner::of(conn, &a.alock);
        let mut table = self.table.lock();
        if let Err(e) = table.unlock(fh, &owner, span) {
            warn!(error = %e, client = %conn.peer, "NLM UNLOCK failed");
            return Nlm4Stat::Failed;
        }
        let granted = table.grant_waiters(fh);
        let grants = self.grants(&table, fh, granted);
        drop(table);
        self.send_granted(grants);
        Nlm4Stat::Granted
    }

    fn cancel(&self, conn: &ConnInfo, a: &Nlm4CancArgs) -> Nlm4Stat {
        if self.in_grace() {
            return Nlm4Stat::DeniedGracePeriod;
        }
        if self.export_for(conn, &a.alock.fh).is_err() {
            return Nlm4Stat::StaleFh;
        }
        let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
            return Nlm4Stat::Fbig;
        };
        let owner = Owner::of(conn, &a.alock);
        self.table
            .lock()
            .cancel(&a.alock.fh.0, &owner, span, a.exclusive);
        Nlm4Stat::Granted
    }

    /// SHARE / UNSHARE: DOS share reservations, kept among NLM clients
    /// (processes on the server know nothing of them, as with knfsd).
    fn share(&self, conn: &ConnInfo, a: &Nlm4ShareArgs, take: bool) -> Nlm4Stat {
        if take && self.in_grace() != a.reclaim {
            return Nlm4Stat::DeniedGracePeriod;
        }
        // A handle the export issued, MAC and all: a reservation is kept
        // under it (LOCK verifies its handle by opening the file).
        match self.export_for(conn, &a.share.fh) {
            Ok(export) if export.fs.verify_handle(&a.share.fh.0).is_ok() => {}
            _ => return Nlm4Stat::StaleFh,
        }
        let owner = ShareOwner::of(conn, &a.share);
        let fh = &a.share.fh.0;
        let mut shares = self.shares.lock();
        if !take {
            shares.release(fh, &owner);
            return Nlm4Stat::Granted;
        }
        let reservation = Reservation::new(a.share.access as u32, a.share.mode as u32);
        match shares.reserve(fh, &owner, reservation) {
            Reserve::Granted => Nlm4Stat::Granted,
            Reserve::Conflict => Nlm4Stat::Denied,
            Reserve::NoRoom => {
                if self.nolocks_warning.due() {
                    warn!(client = %conn.peer, "NLM SHARE refused (DENIED_NOLOCKS): the client's \
                        address holds {MAX_SHARES_PER_CLIENT} share reservations, as many as one \
                        address may (repeats are not logged for 10 s)");
                }
                Nlm4Stat::DeniedNolocks
            }
        }
    }

    /// Drops every lock, waiter and share of the hosts `host` matches and
    /// forgets the monitored clients `monitored` matches; grants what the
    /// drop freed.
    fn drop_hosts(&self, host: impl Fn(&Host) -> bool, monitored: impl FnMut(&Monitored) -> bool) {
        let mut table = self.table.lock();
        let touched = table.drop_clients(&host);
        // Their GRANTED callbacks still being tried are over: a refusal
        // heard now must not release a lock granted to the client since.
        self.granting.lock().retain(|(_, owner, _), answered| {
            let dropped = host(&owner.host);
            if dropped {
                answered.store(true, Ordering::Release);
            }
            !dropped
        });
        let mut grants = Vec::new();
        for fh in &touched {
            let granted = table.grant_waiters(fh);
            grants.extend(self.grants(&table, fh, granted));
        }
        drop(table);
        self.shares.lock().drop_where(|_| true, &host);
        self.counters.hosts_dropped.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.nsm.forget(monitored) {
            warn!(error = %e, "NLM: cannot update the monitored clients in the state directory");
        }
        self.send_granted(grants);
    }

    /// The locks `retried` took on `fh` for blocked LOCKs, each recorded as
    /// a GRANTED callback being made while the table is still locked
    /// (`_table`): the owner's LOCK, asked again as soon as the table is
    /// free, must find the record and mark it answered. Waiters whose lock
    /// failed are dropped, and logged.
    fn grants(
        &self,
        _table: &LockTable<Owner, Callback>,
        fh: &[u8],
        retried: Retried<Owner, Callback>,
    ) -> Vec<Grant> {
        for (w, e) in retried.failed {
            warn!(error = %e, svid = w.owner.svid, "NLM: a blocked lock failed");
        }
        let mut granting = self.granting.lock();
        retried
            .granted
            .into_iter()
            .map(|w| {
                let answered = Answered::default();
                granting.insert((fh.to_vec(), w.owner.clone(), w.span), answered.clone());
                Grant {
                    fh: fh.to_vec(),
                    owner: w.owner,
                    span: w.span,
                    callback: w.callback,
                    answered,
                }
            })
            .collect()
    }

    /// Calls the owners of locks taken for their blocked LOCKs back
    /// (GRANTED), and records their clients for a restart.
    fn send_granted(&self, grants: Vec<Grant>) {
        for g in grants {
            self.counters.granted.fetch_add(1, Ordering::Relaxed);
            if g.callback.monitor {
                self.monitor(&g.owner, g.callback.peer.local);
            }
            let _ = self.jobs.send(Job::Granted(Box::new(g)));
        }
    }

    /// A GRANTED callback is over (made, given up or dropped).
    fn granted_done(&self, g: &Grant) {
        let mut granting = self.granting.lock();
        let key = (g.fh.clone(), g.owner.clone(), g.span);
        if granting
            .get(&key)
            .is_some_and(|a| Arc::ptr_eq(a, &g.answered))
        {
            granting.remove(&key);
        }
    }
}

/// How many lock descriptions the server holds open at most, over all
/// clients: a quarter of its open-file limit (raised to the hard limit at
/// start; 1,048,576 in `dist/dionfs.service`; read at each LOCK, so a
/// limit changed with `prlimit` counts), so that however many clients
/// lock, descriptors remain for connections and the open-file cache. At
/// least 64.
fn max_descriptions() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    usize::try_from(limit / 4).unwrap_or(usize::MAX).max(64)
}

/// The lock table's opener for a description opened (and checked) already:
/// gives it the first time, an error after.
fn once(
    opened: (std::os::fd::OwnedFd, bool),
) -> impl FnMut() -> std::io::Result<(std::os::fd::OwnedFd, bool)> {
    let mut opened = Some(opened);
    move || {
        opened
            .take()
            .ok_or_else(|| std::io::Error::other("opened twice"))
    }
}

/// Calls to clients made at once, over all clients.
const CALLBACK_THREADS: usize = 8;
/// SM_NOTIFYs of a restart sent at once: each client is told once, and
/// all of them must hear within the grace period, dead ones among them
/// taking 6 s each.
const NOTIFY_THREADS: usize = 64;
/// Calls to one client address waiting for the one in progress; more are
/// dropped (counted, logged at most every 10 s).
const MAX_QUEUED_PER_CLIENT: usize = 64;

/// The calls to clients waiting, per client address; an address is here
/// while its calls are being made.
type ClientQueues = Arc<Mutex<HashMap<IpAddr, VecDeque<Job>>>>;

/// Makes the calls to clients: the SM_NOTIFYs of a restart at most
/// [`NOTIFY_THREADS`] at once; the others one at a time per client
/// address, in the order they came, and at most [`CALLBACK_THREADS`] at
/// once over all clients. Each may wait for its client for seconds (5 s a try, and
/// GRANTED tries five times): a client whose port mapper or lock manager
/// does not answer, sent `_MSG` calls as fast as it can send them, then
/// holds one blocking thread and a bounded queue, where it held a
/// blocking thread per call, out of the pool every NFS READ and WRITE
/// waits for. A dropped `_RES` is a reply lost (the client's timeout); a
/// dropped GRANTED leaves the lock held for its owner, whose client asks
/// again while it waits and is then answered GRANTED.
async fn run_jobs(service: Arc<LockService>, mut rx: mpsc::UnboundedReceiver<Job>) {
    let queues = ClientQueues::default();
    let threads = Arc::new(tokio::sync::Semaphore::new(CALLBACK_THREADS));
    let notify_threads = Arc::new(tokio::sync::Semaphore::new(NOTIFY_THREADS));
    while let Some(job) = rx.recv().await {
        if let Job::Notify { .. } = job {
            let (s, threads) = (service.clone(), notify_threads.clone());
            tokio::spawn(async move {
                let Ok(_thread) = threads.acquire().await else {
                    return;
                };
                let _ = tokio::task::spawn_blocking(move || s.run_job(job)).await;
            });
            continue;
        }
        let client = job.client();
        let mut waiting = queues.lock();
        if let Some(queue) = waiting.get_mut(&client) {
            if queue.len() < MAX_QUEUED_PER_CLIENT {
                queue.push_back(job);
            } else {
                if let Job::Granted(g) = &job {
                    service.granted_done(g);
                }
                service
                    .counters
                    .callbacks_dropped
                    .fetch_add(1, Ordering::Relaxed);
                if service.callback_warning.due() {
                    warn!(%client, queued = MAX_QUEUED_PER_CLIENT,
                        "NLM: dropping a call to the client (GRANTED or a _MSG's result): \
                         as many are waiting for the calls to it in progress as may \
                         (repeats are not logged for 10 s)");
                }
            }
            continue;
        }
        waiting.insert(client, VecDeque::from([job]));
        drop(waiting);
        tokio::spawn(call_client(
            service.clone(),
            queues.clone(),
            threads.clone(),
            client,
        ));
    }
}

/// Makes the calls queued for `client`, one after the other, until none
/// is left.
async fn call_client(
    service: Arc<LockService>,
    queues: ClientQueues,
    threads: Arc<tokio::sync::Semaphore>,
    client: IpAddr,
) {
    loop {
        let Ok(_thread) = threads.acquire().await else {
            return;
        };
        let job = {
            let mut waiting = queues.lock();
            let next = waiting.get_mut(&client).and_then(VecDeque::pop_front);
            if next.is_none() {
                waiting.remove(&client);
            }
            next
        };
        let Some(job) = job else {
            return;
        };
        let s = service.clone();
        let _ = tokio::task::spawn_blocking(move || s.run_job(job)).await;
    }
}

impl Job {
    /// The address of the client the call goes to.
    fn client(&self) -> IpAddr {
        match self {
            Job::Granted(g) => g.callback.peer.client,
            Job::Res { peer, .. } => peer.client,
            Job::Notify { host, .. } => host.client,
        }
    }
}

impl LockService {
    fn run_job(&self, job: Job) {
        match job {
            Job::Granted(g) => {
                self.call_granted(&g);
                self.granted_done(&g);
            }
            Job::Res {
                peer,
                proc_,
                results,
            } => {
                let r = client::call(peer, NLM_PROGRAM, NLM_V4, proc_ as u32, &results, false);
                if let Err(e) = r {
                    self.counters
                        .callbacks_failed
                        .fetch_add(1, Ordering::Relaxed);
                    warn!(client = %peer.client, error = %e, ?proc_, "NLM: cannot send a result to the client");
                }
            }
            Job::Notify { host, state } => notify(&host, state),
        }
    }

    /// GRANTED to the client, a few times, until it answers or its LOCK,
    /// asked again, is answered; if it answers that it no longer waits
    /// (and has not had its answer meanwhile), the lock is released again.
    fn call_granted(&self, g: &Grant) {
        let (fh, owner, span, cb, answered) = (&g.fh, &g.owner, g.span, &g.callback, &g.answered);
        let args = cb.args.to_xdr();
        let mut last = None;
        for attempt in 0..5 {
            if attempt > 0 {
                std::thread::sleep(Duration::from_secs(2));
            }
            if answered.load(Ordering::Acquire) {
                return;
            }
            let granted = NlmProc4::Granted as u32;
            let r = client::call(cb.peer, NLM_PROGRAM, NLM_V4, granted, &args, false);
            let r = r.map(|res| Nlm4Res::from_xdr(&res));
            debug!(client = %cb.peer.client, svid = owner.svid, attempt, result = ?r, "NLM GRANTED callback");
            match r {
                Ok(Ok(res)) if res.stat == Nlm4Stat::Granted => return,
                Ok(Ok(res)) => {
                    let mut table = self.table.lock();
                    if answered.load(Ordering::Acquire) {
                        // It no longer waits because it has the lock.
                        return;
                    }
                    debug!(client = %cb.peer.client, stat = ?res.stat,
                        "NLM GRANTED refused: the client no longer waits; releasing");
                    let _ = table.unlock(fh, owner, span);
                    let granted = table.grant_waiters(fh);
                    let grants = self.grants(&table, fh, granted);
                    drop(table);
                    self.send_granted(grants);
                    return;
                }
                Ok(Err(e)) => last = Some(std::io::Error::other(format!("{e:?}"))),
                Err(e) => last = Some(e),
            }
        }
        self.counters
            .callbacks_failed
            .fetch_add(1, Ordering::Relaxed);
        // The lock stays held: the client asks again while it waits, and
        // gets GRANTED at once.
        warn!(client = %cb.peer.client, svid = owner.svid,
            error = %last.map_or_else(String::new, |e| e.to_string()),
            "NLM: cannot call GRANTED back; the lock stays held for the client's next LOCK");
    }
}

/// SM_NOTIFY to a client's statd: this server restarted, reclaim.
fn notify(host: &Monitored, state: i32) {
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

/// Retries every blocked lock each [`RETRY_EVERY`] (locks released by
/// processes on the server), drops waiters their clients gave up on, and
/// at the end of the grace period forgets the clients that did not
/// reclaim.
async fn retry_waiters(service: Arc<LockService>) {
    let mut tick = tokio::time::interval(RETRY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut grace_done = !service.grace.was_held();
    loop {
        tick.tick().await;
        let s = service.clone();
        let finish_grace = !grace_done && !service.in_grace();
        grace_done |= finish_grace;
        let _ = tokio::task::spawn_blocking(move || {
            let stale = Instant::now()
                .checked_sub(WAITER_TTL)
                .unwrap_or_else(Instant::now);
            let mut table = s.table.lock();
            let mut grants = Vec::new();
            for (fh, retried) in table.grant_all(stale) {
                grants.extend(s.grants(&table, &fh, retried));
            }
            drop(table);
            s.send_granted(grants);
            if finish_grace {
                let held = s.table.lock().clients();
                info!(reclaimed = held.len(), "NLM: grace period over");
                let keep =
                    |m: &Monitored| held.iter().any(|h| h.name == m.name && h.ip == m.client);
                if let Err(e) = s.nsm.keep_only(keep) {
                    warn!(error = %e, "NLM: cannot update the monitored clients");
                }
            }
        })
        .await;
    }
}

/// The mappings the lock service listens on, for the port mapper: NLM v4
/// over TCP, NSM v1 over TCP and UDP.
pub fn mappings(nlm_port: u16, nsm_udp_port: u16) -> Vec<dionfs_proto::portmap::Mapping> {
    use dionfs_proto::portmap::{Mapping, IPPROTO_TCP, IPPROTO_UDP};
    let m = |prog, vers, prot, port: u16| Mapping {
        prog,
        vers,
        prot,
        port: u32::from(port),
    };
    vec![
        m(NLM_PROGRAM, NLM_V4, IPPROTO_TCP, nlm_port),
        m(NSM_PROGRAM, NSM_V1, IPPROTO_TCP, nlm_port),
        m(NSM_PROGRAM, NSM_V1, IPPROTO_UDP, nsm_udp_port),
    ]
}
