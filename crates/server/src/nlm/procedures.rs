//! The procedure tables of NLM version 4 and NSM version 1, and the
//! handlers that decode each procedure's arguments and call the lock
//! service. Nothing is kept in the reply cache, as knfsd's lockd keeps
//! nothing: a retransmitted LOCK finds the lock its owner holds and is
//! granted again, a retransmitted UNLOCK finds nothing left to unlock,
//! and both answer as the first time did.

use dionfs_proto::nlm4::{
    Nlm4CancArgs, Nlm4LockArgs, Nlm4Notify, Nlm4Res, Nlm4ShareArgs, Nlm4ShareRes, Nlm4Stat,
    Nlm4TestArgs, Nlm4UnlockArgs, NlmProc4, NLM_PROGRAM, NLM_V4,
};
use dionfs_proto::nsm::{NsmProc, SmRes, SmStatRes, StatChge, NSM_PROGRAM, NSM_V1};
use dionfs_proto::Void;
use dionfs_rpc::CallHeader;
use dionfs_xdr::Decode;
use tracing::{info, warn};

use super::client::Peer;
use super::{locking, share, LockService};
use crate::program::{self, Procedure, Program};
use crate::reply::{garbage_args, success};
use dionfs_transport::{ConnInfo, Reply};

/// What a lock-service handler knows about its call.
pub struct LockCall<'a> {
    pub conn: &'a ConnInfo,
    pub call: &'a CallHeader,
}

/// How an NLM procedure runs: the service, the call, its procedure (one
/// handler serves a procedure and its `_MSG` form) and its encoded
/// arguments.
pub type NlmHandler = fn(&LockService, &LockCall, NlmProc4, &[u8]) -> Reply;

/// How an NSM procedure runs.
pub type NsmHandler = fn(&LockService, &LockCall, &[u8]) -> Reply;

/// NLM version 4 (the Open Group's XNFS, chapter 10).
pub static NLM: Program<NlmHandler> = Program {
    label: "nlm4",
    title: "NLM v4",
    number: NLM_PROGRAM,
    version: NLM_V4,
    procedures: &NLM_PROCEDURES,
};

static NLM_PROCEDURES: [Option<Procedure<NlmHandler>>; 24] = [
    nlm(NlmProc4::Null, "NULL", |_, c, _, _| {
        success(c.call.xid, &Void)
    }),
    nlm(NlmProc4::Test, "TEST", test),
    nlm(NlmProc4::Lock, "LOCK", lock),
    nlm(NlmProc4::Cancel, "CANCEL", cancel),
    nlm(NlmProc4::Unlock, "UNLOCK", unlock),
    nlm(NlmProc4::Granted, "GRANTED", granted),
    nlm(NlmProc4::TestMsg, "TEST_MSG", test),
    nlm(NlmProc4::LockMsg, "LOCK_MSG", lock),
    nlm(NlmProc4::CancelMsg, "CANCEL_MSG", cancel),
    nlm(NlmProc4::UnlockMsg, "UNLOCK_MSG", unlock),
    nlm(NlmProc4::GrantedMsg, "GRANTED_MSG", granted),
    nlm(NlmProc4::TestRes, "TEST_RES", result),
    nlm(NlmProc4::LockRes, "LOCK_RES", result),
    nlm(NlmProc4::CancelRes, "CANCEL_RES", result),
    nlm(NlmProc4::UnlockRes, "UNLOCK_RES", result),
    nlm(NlmProc4::GrantedRes, "GRANTED_RES", result),
    None,
    None,
    None,
    None,
    nlm(NlmProc4::Share, "SHARE", share),
    nlm(NlmProc4::Unshare, "UNSHARE", share),
    nlm(NlmProc4::NmLock, "NM_LOCK", lock),
    nlm(NlmProc4::FreeAll, "FREE_ALL", free_all),
];

/// NSM version 1: the server's own statd.
pub static NSM: Program<NsmHandler> = Program {
    label: "nsm1",
    title: "NSM v1",
    number: NSM_PROGRAM,
    version: NSM_V1,
    procedures: &NSM_PROCEDURES,
};

static NSM_PROCEDURES: [Option<Procedure<NsmHandler>>; 7] = [
    nsm(NsmProc::Null, "NULL", |_, c, _| success(c.call.xid, &Void)),
    nsm(NsmProc::Stat, "STAT", stat),
    nsm(NsmProc::Mon, "MON", mon),
    nsm(NsmProc::Unmon, "UNMON", unmon),
    nsm(NsmProc::UnmonAll, "UNMON_ALL", unmon),
    nsm(NsmProc::SimuCrash, "SIMU_CRASH", |_, c, _| {
        success(c.call.xid, &Void)
    }),
    nsm(NsmProc::Notify, "NOTIFY", notify),
];

const fn nlm(
    number: NlmProc4,
    name: &'static str,
    handler: NlmHandler,
) -> Option<Procedure<NlmHandler>> {
    program::small(name, number.max_args_len(), handler)
}

const fn nsm(
    number: NsmProc,
    name: &'static str,
    handler: NsmHandler,
) -> Option<Procedure<NsmHandler>> {
    program::small(name, number.max_args_len(), handler)
}

/// Decodes `args` as `T`, or answers GARBAGE_ARGS.
macro_rules! decode_or_garbage {
    ($ty:ty, $args:expr, $xid:expr) => {
        match <$ty>::from_xdr($args) {
            Ok(v) => v,
            Err(_) => return garbage_args($xid),
        }
    };
}

impl LockCall<'_> {
    fn peer(&self) -> Peer {
        Peer {
            client: self.conn.peer.ip(),
            local: self.conn.local.ip(),
        }
    }
}

fn res(cookie: dionfs_proto::nlm4::NetObj, stat: Nlm4Stat) -> Nlm4Res {
    Nlm4Res { cookie, stat }
}

fn test(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4TestArgs, args, c.call.xid);
    let tested = locking::test(svc, c.conn, c.call, &a);
    svc.answer(c.call.xid, proc_, NlmProc4::TestRes, c.peer(), &tested)
}

/// LOCK, LOCK_MSG and NM_LOCK (a lock of a client that does not monitor
/// the server, so its host is not recorded for a restart).
fn lock(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4LockArgs, args, c.call.xid);
    let stat = locking::lock(svc, c.conn, c.call, &a, proc_ != NlmProc4::NmLock);
    svc.answer(
        c.call.xid,
        proc_,
        NlmProc4::LockRes,
        c.peer(),
        &res(a.cookie, stat),
    )
}

fn cancel(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4CancArgs, args, c.call.xid);
    let stat = locking::cancel(svc, c.conn, &a);
    svc.answer(
        c.call.xid,
        proc_,
        NlmProc4::CancelRes,
        c.peer(),
        &res(a.cookie, stat),
    )
}

fn unlock(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4UnlockArgs, args, c.call.xid);
    let stat = locking::unlock(svc, c.conn, &a);
    svc.answer(
        c.call.xid,
        proc_,
        NlmProc4::UnlockRes,
        c.peer(),
        &res(a.cookie, stat),
    )
}

/// Callbacks are the server's to make, not to receive: denied.
fn granted(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4TestArgs, args, c.call.xid);
    let denied = res(a.cookie, Nlm4Stat::Denied);
    svc.answer(c.call.xid, proc_, NlmProc4::GrantedRes, c.peer(), &denied)
}

/// Answers to `_MSG` calls this server never makes.
fn result(_: &LockService, c: &LockCall, _: NlmProc4, _: &[u8]) -> Reply {
    success(c.call.xid, &Void)
}

fn share(svc: &LockService, c: &LockCall, proc_: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4ShareArgs, args, c.call.xid);
    let stat = share::share(svc, c.conn, &a, proc_ == NlmProc4::Share);
    success(
        c.call.xid,
        &Nlm4ShareRes {
            cookie: a.cookie,
            stat,
            sequence: 0,
        },
    )
}

fn free_all(svc: &LockService, c: &LockCall, _: NlmProc4, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(Nlm4Notify, args, c.call.xid);
    let name = a.name.0;
    let ip = c.conn.peer.ip();
    info!(client = %ip, name = %String::from_utf8_lossy(&name),
        "NLM FREE_ALL: dropping the client's locks");
    // Only the caller's own: the name is the caller's word, its address is
    // not (knfsd looks the host up by both).
    svc.drop_hosts(
        |h| h.ip == ip && h.name == name,
        |m| m.client == ip && m.name == name,
    );
    success(c.call.xid, &Void)
}

fn stat(svc: &LockService, c: &LockCall, _: &[u8]) -> Reply {
    let res = SmStatRes {
        res_stat: SmRes::Succ,
        state: svc.reboots.state(),
    };
    success(c.call.xid, &res)
}

/// Monitoring is the lock service's own business: no other lock manager
/// on this host may use this statd.
fn mon(svc: &LockService, c: &LockCall, _: &[u8]) -> Reply {
    let res = SmStatRes {
        res_stat: SmRes::Fail,
        state: svc.reboots.state(),
    };
    success(c.call.xid, &res)
}

/// UNMON and UNMON_ALL.
fn unmon(svc: &LockService, c: &LockCall, _: &[u8]) -> Reply {
    success(c.call.xid, &svc.reboots.state())
}

fn notify(svc: &LockService, c: &LockCall, args: &[u8]) -> Reply {
    let a = decode_or_garbage!(StatChge, args, c.call.xid);
    let name = a.mon_name.0;
    let ip = c.conn.peer.ip();
    // A client may drop only the locks it took from the address it
    // notifies from (as rpc.statd matches both the name and the sender):
    // anyone who can reach the port could otherwise free another client's
    // locks by naming it. The locks under that name; or, if the client
    // locked under another name (its address, say) and is the only one
    // locking from that address, all the address's. Several names there
    // (clients behind one NAT address): another client's notify must not
    // free theirs.
    let mut names: Vec<Vec<u8>> = svc
        .hosts()
        .into_iter()
        .filter(|h| h.ip == ip)
        .map(|h| h.name)
        .collect();
    names.dedup();
    let shown = String::from_utf8_lossy(&name).into_owned();
    if names.contains(&name) {
        info!(client = %ip, name = %shown, state = a.state,
            "NSM: a client rebooted; dropping its locks");
        svc.drop_hosts(
            |h| h.ip == ip && h.name == name,
            |m| m.client == ip && m.name == name,
        );
    } else if names.len() <= 1 {
        info!(client = %ip, name = %shown, state = a.state,
            "NSM: a client rebooted; dropping its locks (taken under another name)");
        svc.drop_hosts(|h| h.ip == ip, |m| m.client == ip);
    } else {
        warn!(client = %ip, name = %shown, names = names.len(),
            "NSM: a client at an address where several clients hold locks, under \
             other names, says it rebooted; dropping none of them");
    }
    success(c.call.xid, &Void)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::ArgsLimit;

    #[test]
    fn the_tables_are_in_procedure_order_with_the_codecs_bounds() {
        for n in 0..30u32 {
            let entry = NLM.procedure(n);
            match NlmProc4::from_u32(n) {
                Some(p) => {
                    let entry = entry.unwrap();
                    let camel = format!("{p:?}");
                    let words: String = camel
                        .chars()
                        .enumerate()
                        .flat_map(|(i, ch)| {
                            let sep = (i > 0 && ch.is_uppercase()).then_some('_');
                            sep.into_iter().chain(ch.to_uppercase())
                        })
                        .collect();
                    assert_eq!(entry.name, words, "{p:?}");
                    assert_eq!(entry.args, ArgsLimit::Whole(p.max_args_len()));
                }
                None => assert!(entry.is_none(), "{n}"),
            }
        }
        for n in 0..10u32 {
            match NsmProc::from_u32(n) {
                Some(p) => {
                    let entry = NSM.procedure(n).unwrap();
                    assert_eq!(entry.args, ArgsLimit::Whole(p.max_args_len()), "{p:?}");
                }
                None => assert!(NSM.procedure(n).is_none(), "{n}"),
            }
        }
    }
}
