//! Minor version 0 (RFC 7530) on the 4.1 tables
//! (docs/nfs4-complete-design.md, B): its own ops (SETCLIENTID,
//! SETCLIENTID_CONFIRM, RENEW, OPEN_CONFIRM, RELEASE_LOCKOWNER), the
//! client a state op names where no session does, and the owner seqids
//! the state ops check where no slot gives exactly-once
//! (`state/seqids.rs`).
//!
//! A 4.0 COMPOUND has no SEQUENCE: a state op finds its client by the
//! clientid or the stateid it carries ([`state_client`]), which renews
//! that client's lease. An op of an owner checks its seqid before it
//! runs ([`sequence`]): a retransmission is answered with the result
//! the owner kept, and after the op the compound loop tells the owner
//! how it went (`OpCtx::sequenced`).

use std::sync::Arc;
use std::time::Instant;

use dionfs_core::delegations::Access;
use dionfs_core::drc::{hash_args, DrcKey};
use dionfs_proto::nfs4::{ArgOp, Nfsstat4, SetclientidRes4, StateId4};
use dionfs_transport::ConnInfo;
use dionfs_xdr::{Encode, Encoder};

use super::compound::Compound;

use super::compound::OpCtx;
use super::fh::Fh4;
use super::open_ops::{current_fh, set_stateid};
use super::reply::CompoundReply;
use super::state::seqids::OwnerName;
use super::state::{resolve_current, Checked, Client, LastReply, Principal, Refused, Use};

/// The duplicate request cache's key of a minor version 0 COMPOUND with
/// an op that cannot be done twice (knfsd's `OP_CACHEME` ops: CREATE,
/// LINK, REMOVE, RENAME, SETATTR, WRITE, SETCLIENTID and
/// SETCLIENTID_CONFIRM), so that a retransmission gets the reply of the
/// first (pynfs RPLY14 sends a CREATE twice with one xid). Its args are
/// the ops as encoded (a WRITE's head: its payload is in no op). None for
/// others: the seqid ops' owners keep their own results, and 4.1 has
/// its slots.
pub fn drc_key(conn: &ConnInfo, compound: &Compound) -> Option<DrcKey> {
    let cached = |op: &ArgOp| {
        matches!(
            op,
            ArgOp::Create(_)
                | ArgOp::Link(_)
                | ArgOp::Remove(_)
                | ArgOp::Rename(_)
                | ArgOp::Setattr(_)
                | ArgOp::Write(_)
                | ArgOp::Setclientid(_)
                | ArgOp::SetclientidConfirm(_)
        )
    };
    if compound.minor != 0 || !compound.ops.iter().any(cached) {
        return None;
    }
    let mut enc = Encoder::new();
    enc.opaque_var(compound.tag.as_bytes());
    for op in &compound.ops {
        op.encode(&mut enc);
    }
    Some(DrcKey {
        xid: compound.call.xid,
        client: conn.peer,
        prog: compound.call.prog,
        vers: compound.call.vers,
        proc_: compound.call.proc_,
        args_hash: hash_args(enc.as_slice()),
    })
}

/// What names the client of a state op.
#[derive(Debug, Clone, Copy)]
pub(super) enum By<'a> {
    /// OPEN's open-owner, LOCKT's and RELEASE_LOCKOWNER's lock-owner.
    Clientid(u64),
    /// Any other: a stateid of the client's.
    Stateid(&'a StateId4),
}

/// The client whose state an op works on: the session's (4.1, 4.2;
/// without one `OP_NOT_IN_SESSION`), or in minor version 0 the one `by`
/// names, its lease renewed.
pub(super) fn state_client(ctx: &OpCtx, by: By) -> Result<Arc<Client>, Nfsstat4> {
    if let Some(slot) = ctx.slot {
        return Ok(Arc::clone(slot.client()));
    }
    if ctx.minor != 0 {
        return Err(Nfsstat4::OpNotInSession);
    }
    let now = Instant::now();
    let client = match by {
        By::Clientid(clientid) => ctx
            .nfs4
            .state
            .v40_client_at(clientid, now)
            .map_err(|status| match status {
                // An op's clientid no longer known is stale (knfsd's
                // `set_client`); RENEW alone tells it apart.
                Nfsstat4::Expired => Nfsstat4::StaleClientid,
                other => other,
            }),
        By::Stateid(stateid) => ctx.nfs4.state.v40_client_of(stateid, now),
    }?;
    *ctx.v40_client.lock() = Some(client.id.0);
    ctx.conn.client_tag.set(client.id.0);
    Ok(client)
}

/// Checks `stateid` (the current stateid resolved) for `io` on the file
/// `fh`: READ, WRITE and SETATTR(size). A special stateid names no
/// client (minor version 0 finds none to look it up by).
pub(super) fn check_io_stateid(
    ctx: &OpCtx,
    stateid: &StateId4,
    fh: &[u8],
    io: Use,
) -> Result<Checked, Nfsstat4> {
    let state = &ctx.nfs4.state;
    let checked = if let Some(slot) = ctx.slot {
        state.check_stateid(slot.client(), stateid, fh, io)?
    } else if let Some(special) = state.check_special(stateid, fh, io) {
        special?
    } else {
        let client = state_client(ctx, By::Stateid(stateid))?;
        state.check_stateid(&client, stateid, fh, io)?
    };
    // I/O without an open (a special stateid) has recalled no delegation
    // by its OPEN: it recalls one in its way now (`DELAY` until returned).
    if matches!(checked, Checked::Anonymous | Checked::Bypass) {
        let access = match io {
            Use::Read => Access::Read,
            Use::Write => Access::Write,
        };
        super::delegation::check(ctx, fh, access)?;
    }
    Ok(checked)
}

/// Which owner's seqid an op carries.
pub(super) enum Owner<'a> {
    /// OPEN's open-owner, by name.
    Open(&'a [u8]),
    /// The owner of the state a stateid names; `unconfirmed` allows an
    /// open-owner not yet confirmed (OPEN_CONFIRM).
    Of {
        stateid: &'a StateId4,
        unconfirmed: bool,
    },
}

/// The seqid check of a minor version 0 op of an owner (nothing in a
/// session). When the op is to run, the owner is set to be told its
/// result; a retransmission is answered here, its kept result written,
/// and its status is returned as `Err` (which the op answers with no
/// more written: `Ok` too). Nothing in a session.
pub(super) fn sequence(
    ctx: &mut OpCtx,
    reply: &mut CompoundReply,
    client: &Arc<Client>,
    owner: Owner,
    seqid: u32,
) -> Result<(), Nfsstat4> {
    if ctx.minor != 0 {
        return Ok(());
    }
    let state = &ctx.nfs4.state;
    let checked = match owner {
        Owner::Open(name) => state.open_seqid(client, name, seqid),
        Owner::Of {
            stateid,
            unconfirmed,
        } => state.stateid_seqid(client, stateid, seqid, unconfirmed),
    };
    match checked {
        Ok(step) => {
            ctx.sequenced = Some(step);
            Ok(())
        }
        Err(Refused::Status(status)) => Err(status),
        Err(Refused::Replay(last)) => Err(replay(ctx, reply, &last)),
    }
}

/// Answers a retransmission with `last`: its result, and for an OPEN its
/// file as the current filehandle again.
fn replay(ctx: &mut OpCtx, reply: &mut CompoundReply, last: &LastReply) -> Nfsstat4 {
    reply.encoder().opaque_fixed(&last.body);
    if let Some((export, fh)) = &last.file {
        ctx.current = Some(Fh4::File {
            export: *export,
            fh: fh.clone(),
            node: None,
            file: None,
        });
        ctx.current_stateid = None;
    }
    last.status
}

/// Records OPEN's file on its step, for a retransmission.
pub(super) fn opened(ctx: &mut OpCtx, export: u16, fh: &[u8]) {
    if let Some(step) = ctx.sequenced.as_mut() {
        if matches!(step.owner, OwnerName::Open(_)) {
            step.file = Some((export, fh.to_vec()));
        }
    }
}

/// Records LOCK's new lock-owner and the seqid it was given on its step.
pub(super) fn new_lock_owner(ctx: &mut OpCtx, owner: &[u8], lock_seqid: u32) {
    if let Some(step) = ctx.sequenced.as_mut() {
        step.new_lock_owner = Some((owner.to_vec(), lock_seqid));
    }
}

/// SETCLIENTID.
pub(super) fn setclientid(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Setclientid(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let who = Principal::of(&ctx.call.cred);
    match ctx.nfs4.state.setclientid(&args, &who, ctx.conn.peer.ip()) {
        SetclientidRes4::Ok(ok) => {
            ok.encode(reply.encoder());
            Nfsstat4::Ok
        }
        SetclientidRes4::ClidInuse(using) => {
            using.encode(reply.encoder());
            Nfsstat4::ClidInuse
        }
        SetclientidRes4::Fail(status) => status,
    }
}

pub(super) fn setclientid_confirm(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::SetclientidConfirm(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let who = Principal::of(&ctx.call.cred);
    let status = ctx.nfs4.state.setclientid_confirm(&args, &who);
    if status == Nfsstat4::Ok {
        let state = &ctx.nfs4.state;
        if let Some(client) = state.confirmed_callback(args.clientid, ctx.conn.local.ip()) {
            super::callback::probe40(state, client);
        }
    }
    status
}

pub(super) fn renew(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Renew(args) = op else {
        return Nfsstat4::Serverfault;
    };
    ctx.nfs4.state.renew(args.clientid)
}

/// OPEN_CONFIRM: the open-owner of the open stateid confirmed; the
/// stateid, its seqid moved on, is answered and becomes the current one.
pub(super) fn open_confirm(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::OpenConfirm(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let stateid = resolve_current(&args.open_stateid, ctx.current_stateid)?;
        let fh = current_fh(ctx)?;
        let client = state_client(ctx, By::Stateid(&stateid))?;
        let owner = Owner::Of {
            stateid: &stateid,
            unconfirmed: true,
        };
        sequence(ctx, reply, &client, owner, args.seqid)?;
        ctx.nfs4.state.open_confirm(&client, &stateid, &fh)
    })();
    super::lookup::status(result.map(|stateid| set_stateid(ctx, stateid, reply)))
}

/// RELEASE_LOCKOWNER: a lock-owner holding no lock forgotten.
pub(super) fn release_lockowner(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::ReleaseLockowner(args) = op else {
        return Nfsstat4::Serverfault;
    };
    match state_client(ctx, By::Clientid(args.lock_owner.clientid)) {
        Ok(client) => ctx
            .nfs4
            .state
            .release_lockowner(&client, args.lock_owner.owner.as_bytes()),
        Err(status) => status,
    }
}
