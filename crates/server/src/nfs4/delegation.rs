//! Delegations on the wire (RFC 8881 section 10.4, design section C):
//! what OPEN offers, DELEGRETURN, the conflict check the other ops make
//! before they change a file, and the recall (CB_RECALL on the holder's
//! back channel). The state (stateids, the index, revocation) is
//! `state/delegations.rs`'s and `dionfs_core::delegations`'.

use std::sync::{Arc, Weak};
use std::time::Duration;

use dionfs_core::delegations::{Access, Busy, Held, NoGrant, Recaller};
use dionfs_core::exports::Export;
use dionfs_fs::Node;
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, CbArgOp, CbCompoundRes4, CbGetattrArgs4, CbRecallArgs4, CbResOp, NfsFh4,
    NfsSpaceLimit4, Nfsace4, Nfsstat4, OpenDelegation4, OpenNoneDelegation4, OpenReadDelegation4,
    OpenWriteDelegation4, Res4, StateId4, WhyNoDelegation4, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WANT_ANY_DELEG, OPEN4_SHARE_ACCESS_WANT_CANCEL,
    OPEN4_SHARE_ACCESS_WANT_NO_DELEG, OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE,
    OPEN4_SHARE_ACCESS_WANT_READ_DELEG, OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG,
};
use tracing::{debug, info};

use super::callback::{self, CALL_TIMEOUT};
use super::compound::OpCtx;
use super::open_ops::current_regular;
use super::reply::CompoundReply;
use super::state::delegations::GetattrStep;
use super::state::{resolve_current, Client, Session, State};

/// How long after a CB_RECALL that reached no one it is sent again
/// (knfsd's 2 s), until the delegation is returned or revoked.
const RECALL_RETRY: Duration = Duration::from_secs(2);

/// What recalls delegations for the server's index: marks the
/// delegation recalled and sends CB_RECALL from a task on `runtime`,
/// again every [`RECALL_RETRY`] while it reaches no one (a client whose
/// back channel comes back within the lease still gets it).
pub fn recaller(state: Weak<State>, runtime: tokio::runtime::Handle) -> Recaller {
    Arc::new(move |fh: &[u8], held: &Held| {
        let Some(strong) = state.upgrade() else {
            return;
        };
        let Some(to) = strong.mark_recalled(fh, held) else {
            return;
        };
        drop(strong);
        let Some(fh) = NfsFh4::new(fh.to_vec()) else {
            return;
        };
        let state = Weak::clone(&state);
        runtime.spawn(async move {
            let op = CbArgOp::Recall(CbRecallArgs4 {
                stateid: to.stateid,
                truncate: false,
                fh,
            });
            let clientid = to.client.id.0;
            let mut told = false;
            loop {
                let Some(strong) = state.upgrade() else {
                    return;
                };
                let Some(sessions) = strong.still_recalled(&to.client, &to.stateid.other) else {
                    return;
                };
                if call(&strong, &to.client, &sessions, &op).await.is_some() {
                    return;
                }
                if !told {
                    info!(
                        clientid,
                        "NFSv4 delegation recall could not reach the client: sent again \
                         every 2 s, and revoked within a lease unless returned"
                    );
                    told = true;
                }
                drop(strong);
                tokio::time::sleep(RECALL_RETRY).await;
            }
        });
    })
}

/// `op` in a CB_COMPOUND to `client`: at its callback path (minor
/// version 0) or on the back channels of its `sessions`, newest first.
/// The reply, if one came.
async fn call(
    state: &State,
    client: &Client,
    sessions: &[Arc<Session>],
    op: &CbArgOp,
) -> Option<CbCompoundRes4> {
    let clientid = client.id.0;
    let ops = std::slice::from_ref(op);
    let name = op.opnum();
    if client.minor() == 0 {
        match callback::cb_compound40(state, client, ops).await {
            Ok(res) => {
                debug!(clientid, status = ?res.status, op = ?name, "callback answered");
                return Some(res);
            }
            Err(e) => debug!(clientid, error = %e, op = ?name, "callback failed"),
        }
    }
    for session in sessions {
        match callback::cb_compound(session, ops, CALL_TIMEOUT).await {
            Ok(res) => {
                debug!(clientid, status = ?res.status, op = ?name, "callback answered");
                return Some(res);
            }
            Err(e) => debug!(clientid, error = %e, op = ?name, "callback failed on a session"),
        }
    }
    None
}

/// The client a v4 op runs for, as the index knows it: the session's
/// (4.1 and later); in minor version 0 the one a state op of the
/// COMPOUND named by clientid or stateid so far (knfsd's
/// `rq_lease_breaker`), else the one a state op on the connection named
/// last (a COMPOUND of PUTFH and GETATTR names none: the Linux client's
/// own GETATTRs while it returns a write delegation would otherwise
/// wait for that return). An op of no known client conflicts with every
/// client's delegations, as a v3 client's does.
fn holder(ctx: &OpCtx) -> Option<u64> {
    if let Some(slot) = ctx.slot {
        return Some(slot.client().id.0);
    }
    if ctx.minor != 0 {
        return None;
    }
    let named = *ctx.v40_client.lock();
    named.or_else(|| ctx.conn.client_tag.get())
}

/// Before an op that does `access` to the file `fh`: `DELAY` while
/// another client's delegation of it is recalled; the file held busy
/// (no delegation of it granted) while the op runs.
pub fn enter(ctx: &OpCtx, fh: &[u8], access: Access) -> Result<Busy, Nfsstat4> {
    ctx.server
        .delegations
        .enter(fh, holder(ctx), access)
        .map_err(|_| Nfsstat4::Delay)
}

/// [`enter`] for an op that holds nothing busy (a GETATTR, I/O with a
/// special stateid): the conflict check alone.
pub fn check(ctx: &OpCtx, fh: &[u8], access: Access) -> Result<(), Nfsstat4> {
    ctx.server
        .delegations
        .check(fh, holder(ctx), access)
        .map_err(|_| Nfsstat4::Delay)
}

/// What a GETATTR asking for size or change of file `fh` shows of
/// another client's write delegation of it (RFC 8881 section 10.4.3):
/// none held (`None`: the server's attributes are right), or the
/// holder's size and whether it changed the file, as it answered
/// CB_GETATTR lately or answers within [`GETATTR_WAIT`] of being asked
/// (CB_GETATTR sent from a task). Else `DELAY`; a holder that does not
/// answer has the delegation recalled.
pub fn getattr_conflict(ctx: &OpCtx, fh: &[u8]) -> Result<Option<(u64, bool)>, Nfsstat4> {
    let Some(held) = ctx.server.delegations.write_held(fh, holder(ctx)) else {
        // None, or one recalled already: the plain check (DELAY while
        // recalled).
        check(ctx, fh, Access::Read)?;
        return Ok(None);
    };
    let step = match ctx
        .nfs4
        .state
        .getattr_step(&held, std::time::Instant::now())
    {
        GetattrStep::Ask => {
            ask_holder(ctx, held, fh);
            wait_for_holder(ctx, &held)
        }
        GetattrStep::Wait => wait_for_holder(ctx, &held),
        done => done,
    };
    match step {
        GetattrStep::Use { size, modified } => Ok(Some((size, modified))),
        GetattrStep::Gone => check(ctx, fh, Access::Read).map(|()| None),
        GetattrStep::Wait | GetattrStep::Ask => Err(Nfsstat4::Delay),
    }
}

/// How long a GETATTR waits for the holder's answer to CB_GETATTR before
/// it answers `DELAY`: a client with the delegation answers within
/// milliseconds, and one told `DELAY` asks again no sooner than 100 ms
/// later (Linux's `NFS4_POLL_RETRY_MIN`). knfsd waits the same,
/// `NFSD_CB_GETATTR_TIMEOUT` (HZ/34).
pub const GETATTR_WAIT: Duration = Duration::from_millis(30);

/// [`getattr_conflict`]'s wait for the answer of the holder of `held`,
/// on a blocking thread only: a COMPOUND on its connection's task (a
/// WRITE's GETATTR) does not wait (`Wait`, so `DELAY` at once) rather
/// than hold the runtime's worker.
fn wait_for_holder(ctx: &OpCtx, held: &Held) -> GetattrStep {
    if ctx.data.on_task {
        return GetattrStep::Wait;
    }
    let until = std::time::Instant::now() + GETATTR_WAIT;
    ctx.nfs4.state.wait_getattr_answer(held, until)
}

/// CB_GETATTR (size, change) to the holder of write delegation `held`
/// of `fh`, from a task: its answer kept for the asking client's retry;
/// no answer, and the delegation is recalled.
fn ask_holder(ctx: &OpCtx, held: Held, fh: &[u8]) {
    let (Ok(runtime), Some(nfs_fh)) = (
        tokio::runtime::Handle::try_current(),
        NfsFh4::new(fh.to_vec()),
    ) else {
        ctx.nfs4.state.getattr_answered(&held, None);
        return;
    };
    let state = Arc::downgrade(&ctx.nfs4.state);
    let index = Arc::clone(&ctx.server.delegations);
    let fh = fh.to_vec();
    runtime.spawn(async move {
        let op = CbArgOp::Getattr(CbGetattrArgs4 {
            fh: nfs_fh,
            attr_request: Bitmap4::from_bits(&[Attr4::Change.bit(), Attr4::Size.bit()]),
        });
        let Some(strong) = state.upgrade() else {
            return;
        };
        let Some(client) = strong.client_by_id(held.client) else {
            return;
        };
        let sessions = strong
            .still_recalled(&client, &held.stateid)
            .unwrap_or_default();
        let answer = call(&strong, &client, &sessions, &op)
            .await
            .and_then(|res| holder_attrs(&res));
        debug!(clientid = held.client, ?answer, "CB_GETATTR");
        strong.getattr_answered(&held, answer);
        if answer.is_none() {
            // No answer: the holder gives it back instead.
            let _ = index.check(&fh, None, Access::Read);
        }
    });
}

/// The size and change of a CB_GETATTR reply.
fn holder_attrs(res: &CbCompoundRes4) -> Option<(u64, u64)> {
    let attrs = res.results.iter().find_map(|r| match r {
        CbResOp::Getattr(Res4::Ok(attrs)) => Some(attrs),
        _ => None,
    })?;
    // Values in bit order: change (bit 3), then size (bit 4); nothing
    // else was asked for.
    let bits: Vec<u32> = attrs.attrmask.bits().collect();
    if bits != [Attr4::Change.bit(), Attr4::Size.bit()] {
        return None;
    }
    let vals = attrs.attr_vals.as_ref();
    let word = |at: usize| Some(u64::from_be_bytes(vals.get(at..at + 8)?.try_into().ok()?));
    Some((word(8)?, word(0)?))
}

/// [`enter`] for the file `name` in directory `dir` of `export` (REMOVE,
/// RENAME's names): [`crate::io::enter_named`].
pub fn enter_named(
    ctx: &OpCtx,
    export: &Export,
    dir: &Node,
    name: &[u8],
) -> Result<Option<Busy>, Nfsstat4> {
    crate::io::enter_named(ctx.server, export, dir, name, holder(ctx)).map_err(|_| Nfsstat4::Delay)
}

/// The delegation OPEN answers, once the open is had: `access` the
/// share access, `want` the client's `OPEN4_SHARE_ACCESS_WANT_*`, `file`
/// the regular file opened, `fresh` whether the claim may get one at all
/// (not a reclaim nor an open under a delegation, nor in minor version 0
/// one whose open-owner awaits OPEN_CONFIRM, as knfsd).
pub fn offer(
    ctx: &OpCtx,
    client: &Client,
    export: &Export,
    file: &Node,
    access: u32,
    want: u32,
    fresh: bool,
) -> OpenDelegation4 {
    let none = |why| match want {
        OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE => OpenDelegation4::None,
        _ => OpenDelegation4::NoneExt(why_none(why)),
    };
    match want {
        OPEN4_SHARE_ACCESS_WANT_NO_DELEG => return none(WhyNoDelegation4::NotWanted),
        OPEN4_SHARE_ACCESS_WANT_CANCEL => return none(WhyNoDelegation4::Cancelled),
        _ => {}
    }
    // Off, or a claim that takes none: the answer of a server that
    // grants none.
    if !ctx.server.delegations.enabled() || !fresh {
        return none(WhyNoDelegation4::NotSuppFtype);
    }
    let back_up = match ctx.slot {
        Some(slot) => !slot.session().back_channel_down(),
        None => client.callback40.lock().up,
    };
    if !back_up {
        return none(WhyNoDelegation4::Resource);
    }
    let write = match wanted(want, access) {
        Ok(write) => write,
        Err(why) => return none(why),
    };
    // The file's change as the holder sees it now: a CB_GETATTR answer
    // with another says it changed the file.
    let Ok(attr) = dionfs_fs::ops::getattr(&export.fs, file) else {
        return none(WhyNoDelegation4::Resource);
    };
    let granted_to = ctx.nfs4.state.grant_delegation(
        client,
        file.fh(),
        file.as_fd(),
        write,
        super::attrs::change(attr.ctime),
    );
    match granted_to {
        Ok(stateid) => granted(stateid, write),
        Err(NoGrant::Resource) => none(WhyNoDelegation4::Resource),
        Err(NoGrant::Contention | NoGrant::Off) => none(WhyNoDelegation4::Contention),
    }
}

/// `open_none_delegation4` for `why`: contention and resource carry a
/// flag, which dionfs never sets (it pushes no delegation later, and
/// signals none).
fn why_none(why: WhyNoDelegation4) -> OpenNoneDelegation4 {
    match why {
        WhyNoDelegation4::Contention => OpenNoneDelegation4::Contention {
            server_will_push_deleg: false,
        },
        WhyNoDelegation4::Resource => OpenNoneDelegation4::Resource {
            server_will_signal_avail: false,
        },
        why => OpenNoneDelegation4::Why(why),
    }
}

/// Which delegation an open of `access` (1 to 3) with `want` may get:
/// a read one for a read open, a write one for an open of both (the
/// client may then read and write from its cache); a write-only open, or
/// a want the open does not allow, none.
fn wanted(want: u32, access: u32) -> Result<bool, WhyNoDelegation4> {
    const READ: u32 = OPEN4_SHARE_ACCESS_READ;
    const BOTH: u32 = OPEN4_SHARE_ACCESS_BOTH;
    const NONE: u32 = OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE;
    const ANY: u32 = OPEN4_SHARE_ACCESS_WANT_ANY_DELEG;
    match (want, access) {
        (OPEN4_SHARE_ACCESS_WANT_READ_DELEG | NONE | ANY, READ) => Ok(false),
        (OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG | NONE | ANY, BOTH) => Ok(true),
        (OPEN4_SHARE_ACCESS_WANT_READ_DELEG, _) => Err(WhyNoDelegation4::NotSuppUpgrade),
        (OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG, _) => Err(WhyNoDelegation4::NotSuppDowngrade),
        _ => Err(WhyNoDelegation4::Contention),
    }
}

/// OPEN's answer for a delegation granted: the empty ACE as knfsd's (the
/// client checks access with ACCESS), no space limit.
fn granted(stateid: StateId4, write: bool) -> OpenDelegation4 {
    let permissions = Nfsace4 {
        acetype: 0,
        flag: 0,
        access_mask: 0,
        who: Default::default(),
    };
    if write {
        OpenDelegation4::Write(OpenWriteDelegation4 {
            stateid,
            recall: false,
            space_limit: NfsSpaceLimit4::Size(u64::MAX),
            permissions,
        })
    } else {
        OpenDelegation4::Read(OpenReadDelegation4 {
            stateid,
            recall: false,
            permissions,
        })
    }
}

/// DELEGRETURN (RFC 8881 section 18.6) of a delegation of the current
/// file.
pub fn delegreturn(ctx: &mut OpCtx, op: ArgOp, _reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Delegreturn(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let stateid = args.deleg_stateid;
    let result = (|| {
        let client = super::v40::state_client(ctx, super::v40::By::Stateid(&stateid))?;
        let stateid = resolve_current(&stateid, ctx.current_stateid)?;
        let file = current_regular(ctx)?;
        Ok(ctx
            .nfs4
            .state
            .delegreturn(&client, &stateid, file.node.fh()))
    })();
    result.unwrap_or_else(|status| status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::nfs4::OPEN4_SHARE_ACCESS_WRITE;

    #[test]
    fn contention_and_resource_carry_their_flag() {
        use dionfs_xdr::Encode;
        for why in [
            WhyNoDelegation4::Contention,
            WhyNoDelegation4::Resource,
            WhyNoDelegation4::NotWanted,
        ] {
            // Encoding checks the flag is there (a debug assertion).
            let _ = OpenDelegation4::NoneExt(why_none(why)).to_xdr();
        }
    }

    #[test]
    fn a_read_open_may_get_a_read_delegation_and_one_of_both_a_write_one() {
        let read = OPEN4_SHARE_ACCESS_READ;
        let both = OPEN4_SHARE_ACCESS_BOTH;
        let write = OPEN4_SHARE_ACCESS_WRITE;
        assert_eq!(
            wanted(OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE, read),
            Ok(false)
        );
        assert_eq!(wanted(OPEN4_SHARE_ACCESS_WANT_ANY_DELEG, both), Ok(true));
        assert_eq!(wanted(OPEN4_SHARE_ACCESS_WANT_READ_DELEG, read), Ok(false));
        assert_eq!(wanted(OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG, both), Ok(true));
        assert_eq!(
            wanted(OPEN4_SHARE_ACCESS_WANT_NO_PREFERENCE, write),
            Err(WhyNoDelegation4::Contention)
        );
        assert_eq!(
            wanted(OPEN4_SHARE_ACCESS_WANT_READ_DELEG, both),
            Err(WhyNoDelegation4::NotSuppUpgrade)
        );
        assert_eq!(
            wanted(OPEN4_SHARE_ACCESS_WANT_WRITE_DELEG, read),
            Err(WhyNoDelegation4::NotSuppDowngrade)
        );
    }
}
