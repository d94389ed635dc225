//! What NLM's byte-range procedures do: LOCK, TEST, UNLOCK and CANCEL,
//! on the service's lock table ([`dionfs_core::locks::table`]), after checking
//! the handle, the caller's access to the file and the grace period.
//! [`super::procedures`] decodes their arguments and answers.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dionfs_proto::nfs3::NfsFh3;
use dionfs_proto::nlm4::{
    NetObj, Nlm4CancArgs, Nlm4Holder, Nlm4LockArgs, Nlm4Stat, Nlm4TestArgs, Nlm4TestRes,
    Nlm4UnlockArgs, MAXNETOBJ_SZ,
};
use dionfs_rpc::CallHeader;
use dionfs_transport::ConnInfo;
use tracing::{debug, warn};

use super::client::Peer;
use super::granted::Callback;
use super::owner::lock_owner;
use super::LockService;
use crate::locks::{Owner, Waiter};
use dionfs_core::delegations::Access;
use dionfs_core::export::squash;
use dionfs_core::exports::Export;
use dionfs_core::locks::limits::{
    Limit, MAX_DESCRIPTIONS_PER_CLIENT, MAX_NAMES_PER_CLIENT, MAX_RANGES_PER_CLIENT,
    MAX_WAITERS_PER_CLIENT, MAX_WAITERS_PER_CLIENT_TOTAL, RANGE_SPLITS_PAST_BOUND,
};
use dionfs_core::locks::table::{Attempt, Unlock};
use dionfs_core::locks::Span;

/// LOCK (and LOCK_MSG, NM_LOCK): takes the lock, queues it if it must
/// wait, or says why not; counted and logged.
pub(super) fn lock(
    svc: &LockService,
    conn: &ConnInfo,
    call: &CallHeader,
    a: &Nlm4LockArgs,
    monitor: bool,
) -> Nlm4Stat {
    let stat = try_lock(svc, conn, call, a, monitor);
    let counter = match stat {
        Nlm4Stat::Granted => &svc.counters.granted,
        Nlm4Stat::Blocked => &svc.counters.blocked,
        _ => &svc.counters.denied,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    debug!(client = %conn.peer, svid = a.alock.svid, offset = a.alock.l_offset,
        len = a.alock.l_len, exclusive = a.exclusive, block = a.block,
        reclaim = a.reclaim, ?stat, "NLM LOCK");
    stat
}

fn try_lock(
    svc: &LockService,
    conn: &ConnInfo,
    call: &CallHeader,
    a: &Nlm4LockArgs,
    monitor: bool,
) -> Nlm4Stat {
    if svc.reboots.in_grace() != a.reclaim {
        // In the grace period only reclaims; after it, none (knfsd).
        return Nlm4Stat::DeniedGracePeriod;
    }
    let export = match export_for(svc, conn, &a.alock.fh) {
        Ok(x) => x,
        Err(s) => return s,
    };
    if a.exclusive && export.options_for(conn).read_only() {
        return Nlm4Stat::Rofs;
    }
    let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
        return Nlm4Stat::Fbig;
    };
    let fh = &a.alock.fh.0;
    // An NFSv4 client's delegation of the file is recalled first. The
    // answer is "later" (the grace-period denial, which Linux's client
    // waits out and retries, for a blocking lock too), not a plain
    // denial an application would see.
    let Ok(_busy) = svc.server.delegations.enter(fh, None, Access::Write) else {
        return Nlm4Stat::DeniedGracePeriod;
    };
    // Checked once here for the answer; opened again (and checked) if
    // the tables must see who holds a conflicting lock.
    let mut open = match open_checked(&export, conn, call, fh, a.exclusive) {
        Ok(o) => first_then(o, || {
            open_checked(&export, conn, call, fh, a.exclusive)
                .map_err(|s| std::io::Error::other(format!("{s:?}")))
        }),
        Err(s) => return s,
    };
    let nlm = lock_owner(conn, &a.alock);
    let owner = Owner::Nlm(nlm.clone());
    let max_open = max_descriptions();
    svc.locks.table.lock().set_max_open(max_open);
    let callback = a.block.then(|| -> Waiter {
        Box::new(Callback {
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
        })
    });
    // Through the shared tables, so that a conflict with a courtesy
    // NFSv4 client expires it (design section 5.3). A LOCK asked again
    // while its GRANTED callback is being made: the client has its
    // answer (marked with the table still locked).
    let attempt = svc.locks.lock_then(
        fh,
        &owner,
        &a.alock.oh.0,
        span,
        a.exclusive,
        &mut open,
        callback,
        |_table| svc.granting.answer(fh, &nlm, span),
    );
    let stat = match attempt {
        Ok(Attempt::Granted) => Nlm4Stat::Granted,
        Ok(Attempt::ReadOnly) => Nlm4Stat::Rofs,
        Ok(Attempt::NoLocks(limit)) => {
            if svc.nolocks_warning.due() {
                let why = no_locks_reason(limit, svc.locks.table.lock().open_count());
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
    if stat == Nlm4Stat::Granted && monitor {
        svc.monitor(&nlm.host, conn.local.ip());
    }
    stat
}

/// Why a LOCK was refused with DENIED_NOLOCKS, for the log; `open`: the
/// descriptions the server holds.
fn no_locks_reason(limit: Limit, open: usize) -> String {
    match limit {
        Limit::Descriptions => format!(
            "the client's address holds {MAX_DESCRIPTIONS_PER_CLIENT} lock \
             owners' descriptions, as many as one address may"
        ),
        Limit::Names => format!(
            "the client's address holds locks under {MAX_NAMES_PER_CLIENT} \
             host names, as many as one address may"
        ),
        Limit::Server => format!(
            "the server holds {open} lock descriptions, as many as it keeps \
             (a quarter of its open-file limit)"
        ),
        Limit::Waiters => format!(
            "the client's address has {MAX_WAITERS_PER_CLIENT} blocked locks \
             waiting on this file, as many as it may"
        ),
        Limit::AllWaiters => format!(
            "the client's address has {MAX_WAITERS_PER_CLIENT_TOTAL} blocked \
             locks waiting, as many as it may"
        ),
        Limit::Ranges => format!(
            "the client's address holds {MAX_RANGES_PER_CLIENT} locked byte \
             ranges, as many as it may (an unlock splitting a lock, \
             {RANGE_SPLITS_PAST_BOUND} more)"
        ),
    }
}

/// TEST: whether the lock could be had, and if not, who holds it.
pub(super) fn test(
    svc: &LockService,
    conn: &ConnInfo,
    call: &CallHeader,
    a: &Nlm4TestArgs,
) -> Nlm4TestRes {
    let res = |stat, holder| Nlm4TestRes {
        cookie: a.cookie.clone(),
        stat,
        holder,
    };
    if svc.reboots.in_grace() {
        return res(Nlm4Stat::DeniedGracePeriod, None);
    }
    let export = match export_for(svc, conn, &a.alock.fh) {
        Ok(x) => x,
        Err(s) => return res(s, None),
    };
    let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
        return res(Nlm4Stat::Fbig, None);
    };
    let fh = &a.alock.fh.0;
    // A TEST needs only read access, whatever lock it asks about.
    let mut open = match open_checked(&export, conn, call, fh, false) {
        Ok(o) => once(o),
        Err(s) => return res(s, None),
    };
    let owner = Owner::Nlm(lock_owner(conn, &a.alock));
    match svc
        .locks
        .table
        .lock()
        .test(fh, &owner, span, a.exclusive, &mut open)
    {
        Ok(None) => res(Nlm4Stat::Granted, None),
        Ok(Some(h)) => {
            let (l_offset, l_len) = h.span.to_nlm();
            let (svid, oh) = h.owner.map_or((0, Vec::new()), holder);
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

/// The `svid` and owner handle a TEST's denial names `owner` by (`label`:
/// what its last call called it). Not one of the table's (`None` above): a
/// process on the server or another server's client, svid 0. An NFSv4
/// owner: svid 0 and its client id (8 bytes, big-endian) then its opaque
/// owner, at most an owner handle's 1,024 bytes.
fn holder((owner, label): (Owner, Vec<u8>)) -> (i32, Vec<u8>) {
    match owner {
        Owner::Nlm(o) => (o.svid, label),
        Owner::V4 { client, owner, .. } => {
            let mut oh = client.0.to_be_bytes().to_vec();
            oh.extend_from_slice(&owner);
            oh.truncate(MAXNETOBJ_SZ as usize);
            (0, oh)
        }
    }
}

/// UNLOCK: releases the range and grants what waited for it. An unlock
/// that would split a lock past the address's bound on ranges is
/// DENIED_NOLOCKS, as lockd answers an unlock the kernel could not make
/// (`nlmsvc_unlock`), and releases nothing.
pub(super) fn unlock(svc: &LockService, conn: &ConnInfo, a: &Nlm4UnlockArgs) -> Nlm4Stat {
    // Unlocking is allowed in the grace period (knfsd too).
    if export_for(svc, conn, &a.alock.fh).is_err() {
        return Nlm4Stat::StaleFh;
    }
    let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
        return Nlm4Stat::Fbig;
    };
    let fh = &a.alock.fh.0;
    let owner = Owner::Nlm(lock_owner(conn, &a.alock));
    let mut table = svc.locks.table.lock();
    match table.unlock(fh, &owner, span) {
        Ok(Unlock::Released) => {}
        Ok(Unlock::NoLocks(limit)) => {
            drop(table);
            if svc.nolocks_warning.due() {
                let why = no_locks_reason(limit, svc.locks.table.lock().open_count());
                warn!(client = %conn.peer, name = %String::from_utf8_lossy(&a.alock.caller_name.0),
                    "NLM UNLOCK refused (DENIED_NOLOCKS): {why} (repeats are not logged for 10 s)");
            }
            return Nlm4Stat::DeniedNolocks;
        }
        Err(e) => {
            warn!(error = %e, client = %conn.peer, "NLM UNLOCK failed");
            return Nlm4Stat::Failed;
        }
    }
    let retried = table.grant_waiters(fh);
    let grants = svc.granting.record(&table, fh, retried);
    drop(table);
    svc.send_granted(grants);
    Nlm4Stat::Granted
}

/// CANCEL: the blocked LOCK no longer waits.
pub(super) fn cancel(svc: &LockService, conn: &ConnInfo, a: &Nlm4CancArgs) -> Nlm4Stat {
    if svc.reboots.in_grace() {
        return Nlm4Stat::DeniedGracePeriod;
    }
    if export_for(svc, conn, &a.alock.fh).is_err() {
        return Nlm4Stat::StaleFh;
    }
    let Some(span) = Span::from_nlm(a.alock.l_offset, a.alock.l_len) else {
        return Nlm4Stat::Fbig;
    };
    let owner = Owner::Nlm(lock_owner(conn, &a.alock));
    svc.locks
        .table
        .lock()
        .cancel(&a.alock.fh.0, &owner, span, a.exclusive);
    Nlm4Stat::Granted
}

/// The export and caller of a call on `fh`, or the status to answer:
/// STALE_FH for a handle that is not ours or an export this client
/// may not use (as the NFS program would refuse it). Not its `xprtsec`:
/// NLM never comes over TLS (a Linux client's lockd has none), and
/// knfsd's `__fh_verify` skips that check for NLM, so locks are what
/// they were before RPC-with-TLS; the files themselves are read and
/// written over NFS, which checks it.
pub(super) fn export_for(
    svc: &LockService,
    conn: &ConnInfo,
    fh: &NetObj,
) -> Result<Arc<Export>, Nlm4Stat> {
    let fh = NfsFh3::new(fh.0.clone()).map_err(|_| Nlm4Stat::StaleFh)?;
    svc.server
        .exports()
        .for_lock_client(conn, fh.as_bytes())
        .cloned()
        .ok_or(Nlm4Stat::StaleFh)
}

/// Opens a description of `fh` for locks and checks the caller may
/// take the lock: read access for a shared lock, write access for an
/// exclusive one, or owning the file (knfsd's `NFSD_MAY_LOCK` with
/// owner override).
fn open_checked(
    export: &Export,
    conn: &ConnInfo,
    call: &CallHeader,
    fh: &[u8],
    exclusive: bool,
) -> Result<(OwnedFd, bool), Nlm4Stat> {
    let (fd, writable) = export.fs.open_for_locks(fh).map_err(|e| match e {
        dionfs_fs::FsError::Stale | dionfs_fs::FsError::BadHandle => Nlm4Stat::StaleFh,
        _ => Nlm4Stat::Failed,
    })?;
    let creds = squash(export.options_for(conn), &call.cred);
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

/// The lock table's opener for a description opened (and checked)
/// already: gives it the first time, then what `again` opens.
fn first_then(
    opened: (OwnedFd, bool),
    mut again: impl FnMut() -> std::io::Result<(OwnedFd, bool)>,
) -> impl FnMut() -> std::io::Result<(OwnedFd, bool)> {
    let mut opened = Some(opened);
    move || match opened.take() {
        Some(o) => Ok(o),
        None => again(),
    }
}

/// The lock table's opener for a description opened (and checked) already:
/// gives it the first time, an error after.
fn once(opened: (OwnedFd, bool)) -> impl FnMut() -> std::io::Result<(OwnedFd, bool)> {
    let mut opened = Some(opened);
    move || {
        opened
            .take()
            .ok_or_else(|| std::io::Error::other("opened twice"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::{ClientId, NlmHost, NlmOwner};

    #[test]
    fn a_test_denial_names_an_nlm_or_a_v4_holder() {
        let nlm = Owner::Nlm(NlmOwner {
            host: NlmHost {
                name: b"client".to_vec(),
                ip: "192.0.2.1".parse().unwrap(),
            },
            svid: 12,
        });
        assert_eq!(holder((nlm, b"oh".to_vec())), (12, b"oh".to_vec()));
        let v4 = |owner: Vec<u8>| Owner::V4 {
            client: ClientId(0x0102_0304_0506_0708),
            owner,
            address: "192.0.2.2".parse().unwrap(),
        };
        let (svid, oh) = holder((v4(b"lock-owner".to_vec()), b"label".to_vec()));
        assert_eq!(svid, 0);
        assert_eq!(oh, b"\x01\x02\x03\x04\x05\x06\x07\x08lock-owner");
        // The longest v4 owner (1,024 bytes) is cut to an owner handle's.
        let (_, oh) = holder((v4(vec![b'x'; 1024]), Vec::new()));
        assert_eq!(oh.len(), MAXNETOBJ_SZ as usize);
        assert_eq!(&oh[..8], &[1, 2, 3, 4, 5, 6, 7, 8]);
    }

    /// An export of one file `f` (mode 0666) in a fresh directory: the
    /// directory's guard, its canonical path, the server, the export and
    /// the file's handle.
    fn one_file() -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Arc<crate::Server>,
        Arc<Export>,
        Vec<u8>,
    ) {
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let export_dir = root.join("export");
        std::fs::create_dir(&export_dir).unwrap();
        let file = export_dir.join("f");
        std::fs::write(&file, b"data").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let server = crate::testing::server(&root, &export_dir);
        let export = server.exports().iter().next().unwrap().clone();
        let top = export.fs.resolve(export.fs.root_handle()).unwrap();
        let fh = export.fs.lookup(&top, b"f").unwrap().0.fh().to_vec();
        (dir, root, server, export, fh)
    }

    /// Runs `test` with a lock service of `server` over `locks`, and a
    /// connection and an NLM call (AUTH_SYS uid 1000 of host "client")
    /// from `ip`.
    fn with_service(
        server: Arc<crate::Server>,
        locks: Arc<crate::locks::Locks>,
        released: tokio::sync::mpsc::Receiver<Vec<u8>>,
        root: &std::path::Path,
        ip: std::net::IpAddr,
        test: impl FnOnce(&LockService, &ConnInfo, &CallHeader),
    ) {
        use dionfs_rpc::{AuthSys, Credential, OpaqueAuth};

        use crate::callstats::CallStats;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let calls = Arc::new(CallStats::new(Vec::new()));
            let service =
                LockService::start(server, locks, released, &root.join("state"), calls).unwrap();
            let conn = ConnInfo {
                id: 1,
                peer: std::net::SocketAddr::new(ip, 800),
                local: std::net::SocketAddr::new(ip, 2049),
                datagram: false,
                names: Default::default(),
                tls: Default::default(),
                back_channel: None,
                client_tag: Default::default(),
            };
            let call = CallHeader {
                xid: 1,
                prog: 100021,
                vers: 4,
                proc_: 2,
                cred: Credential::Sys(AuthSys {
                    stamp: 1,
                    machine_name: b"client".to_vec(),
                    uid: 1000,
                    gid: 1000,
                    gids: Vec::new(),
                }),
                verf: OpaqueAuth {
                    flavor: 0,
                    body: Vec::new(),
                },
            };
            test(&service, &conn, &call);
        });
        runtime.shutdown_background();
    }

    /// Process 1 of host "client"'s lock of `len` bytes at `offset` of `fh`.
    fn client_lock(fh: &[u8], offset: u64, len: u64) -> dionfs_proto::nlm4::Nlm4Lock {
        use dionfs_proto::nlm4::{CallerName, NetObj, Nlm4Lock};

        Nlm4Lock {
            caller_name: CallerName(b"client".to_vec()),
            fh: NetObj(fh.to_vec()),
            oh: NetObj(b"oh".to_vec()),
            svid: 1,
            l_offset: offset,
            l_len: len,
        }
    }

    /// A non-blocking exclusive LOCK of process 1 of host "client".
    fn lock_args(fh: &[u8], offset: u64, len: u64) -> dionfs_proto::nlm4::Nlm4LockArgs {
        dionfs_proto::nlm4::Nlm4LockArgs {
            cookie: dionfs_proto::nlm4::NetObj(Vec::new()),
            block: false,
            exclusive: true,
            alock: client_lock(fh, offset, len),
            reclaim: false,
            state: 0,
        }
    }

    /// An NLM LOCK in the way of a courtesy NFSv4 client's lock expires
    /// that client and is granted (design section 5.3), through the
    /// service's own LOCK procedure.
    #[test]
    fn an_nlm_lock_expires_a_courtesy_v4_client_in_its_way() {
        use std::sync::Weak;

        use crate::locks::{Client, Locks};

        let (_dir, root, server, export, fh) = one_file();
        let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let (locks, released) = Locks::new();
        let locks = Arc::new(locks);
        // Client 1 is a courtesy client: expiring it drops its locks.
        let weak: Weak<Locks> = Arc::downgrade(&locks);
        let courtesy = Client::V4(ClientId(1));
        locks.set_expirer(Arc::new(move |c: &Client| {
            *c == courtesy
                && weak
                    .upgrade()
                    .is_some_and(|l| l.drop_clients(|x| *x == courtesy) > 0)
        }));
        let v4 = Owner::V4 {
            client: ClientId(1),
            owner: b"lock-owner".to_vec(),
            address: ip,
        };
        let span = Span::from_nlm(0, 10).unwrap();
        let mut open = || export.fs.open_for_locks(&fh).map_err(std::io::Error::other);
        let held = locks
            .lock(&fh, &v4, b"", span, true, &mut open, None)
            .unwrap();
        assert_eq!(held, Attempt::Granted);
        with_service(server, locks, released, &root, ip, |service, conn, call| {
            assert_eq!(
                lock(service, conn, call, &lock_args(&fh, 0, 10), false),
                Nlm4Stat::Granted
            );
            assert_eq!(
                service.locks.table.lock().clients(),
                [Client::Nlm(NlmHost {
                    name: b"client".to_vec(),
                    ip
                })]
            );
        });
    }

    /// Past the bound on the byte ranges an address holds (over NLM and
    /// NFSv4 owners), an NLM LOCK is DENIED_NOLOCKS, and so is an UNLOCK
    /// splitting a lock past the few splits allowed beyond it, which then
    /// releases nothing.
    #[test]
    fn nlm_locks_and_splits_past_the_bound_on_ranges_are_denied_nolocks() {
        use dionfs_proto::nlm4::{NetObj, Nlm4UnlockArgs};

        use crate::locks::Locks;

        let (_dir, root, server, export, fh) = one_file();
        let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        let (locks, released) = Locks::new();
        let locks = Arc::new(locks);
        // All but one of the address's ranges, under a v4 owner: a long
        // lock to split later and one-byte locks with gaps.
        let v4 = Owner::V4 {
            client: ClientId(1),
            owner: b"lock-owner".to_vec(),
            address: ip,
        };
        let mut open = || export.fs.open_for_locks(&fh).map_err(std::io::Error::other);
        let one = |offset, len| Span::from_nlm(offset, len).unwrap();
        let splits = RANGE_SPLITS_PAST_BOUND as u64;
        let long = 1 << 30;
        let mut v4_lock = |at: Span| locks.lock(&fh, &v4, b"", at, true, &mut open, None);
        assert_eq!(v4_lock(one(long, 3 * splits)).unwrap(), Attempt::Granted);
        for i in 0..MAX_RANGES_PER_CLIENT as u64 - 2 {
            assert_eq!(v4_lock(one(2 * i, 1)).unwrap(), Attempt::Granted);
        }
        let unlock_args = |offset, len| Nlm4UnlockArgs {
            cookie: NetObj(Vec::new()),
            alock: client_lock(&fh, offset, len),
        };
        let nlm_lock = 1 << 20;
        with_service(
            server,
            locks.clone(),
            released,
            &root,
            ip,
            |service, conn, call| {
                // The last range the address may hold, then no more.
                assert_eq!(
                    lock(service, conn, call, &lock_args(&fh, nlm_lock, 3), false),
                    Nlm4Stat::Granted
                );
                assert_eq!(
                    lock(service, conn, call, &lock_args(&fh, nlm_lock + 4, 1), false),
                    Nlm4Stat::DeniedNolocks
                );
                // Splits past the bound, as many as are allowed.
                for k in 0..splits {
                    let middle = one(long + 3 * k + 1, 1);
                    assert_eq!(locks.unlock(&fh, &v4, middle).unwrap(), Unlock::Released);
                }
                let held = locks.table.lock().lock_count();
                assert_eq!(held, MAX_RANGES_PER_CLIENT + RANGE_SPLITS_PAST_BOUND);
                // One more, through NLM: refused, and the lock is still held.
                assert_eq!(
                    unlock(service, conn, &unlock_args(nlm_lock + 1, 1)),
                    Nlm4Stat::DeniedNolocks
                );
                assert_eq!(locks.table.lock().lock_count(), held);
                let mut probe = || export.fs.open_for_locks(&fh).map_err(std::io::Error::other);
                let holder = locks
                    .table
                    .lock()
                    .test(&fh, &v4, one(nlm_lock + 1, 1), true, &mut probe)
                    .unwrap()
                    .unwrap();
                assert_eq!(holder.span, one(nlm_lock, 3));
                // Releasing the whole lock splits nothing.
                assert_eq!(
                    unlock(service, conn, &unlock_args(nlm_lock, 3)),
                    Nlm4Stat::Granted
                );
                assert_eq!(locks.table.lock().lock_count(), held - 1);
            },
        );
    }
}
