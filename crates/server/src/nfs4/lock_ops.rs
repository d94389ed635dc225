//! LOCK, LOCKT and LOCKU (RFC 8881 §18.10, §18.11, §18.12): byte-range
//! locks of the current file through [`super::state`], in the lock table
//! NLM uses too. A blocking lock type is tried once (Linux polls); a
//! conflict is `DENIED` with the lock in the way (`LOCK4denied`).

use dionfs_proto::nfs4::{
    ArgOp, Lock4Denied, LockOwner4, Locker4, NfsLockType4, Nfsstat4, Opaque4,
};
use dionfs_xdr::Encode;

use super::compound::OpCtx;
use super::lookup::status;
use super::open_ops::{current_fh, current_regular, from_io, set_stateid};
use super::reply::CompoundReply;
use super::state::{lock_span, resolve_current, Denied, LockError, Locker};
use super::v40::{self, By, Owner};

/// Whether `locktype` is a write lock.
fn exclusive(locktype: NfsLockType4) -> bool {
    matches!(locktype, NfsLockType4::Write | NfsLockType4::WriteW)
}

/// A denial as the client reads it.
fn lock4_denied(denied: Denied) -> Lock4Denied {
    Lock4Denied {
        offset: denied.offset,
        length: denied.length,
        locktype: if denied.exclusive {
            NfsLockType4::Write
        } else {
            NfsLockType4::Read
        },
        owner: LockOwner4 {
            clientid: denied.clientid,
            owner: Opaque4::from(denied.owner),
        },
    }
}

/// The status of a LOCK or LOCKT that failed; a denial's holder is
/// written after it.
fn failed(e: LockError, reply: &mut CompoundReply) -> Nfsstat4 {
    match e {
        LockError::Denied(denied) => {
            lock4_denied(denied).encode(reply.encoder());
            Nfsstat4::Denied
        }
        LockError::Status(status) => status,
        LockError::Io(e) => from_io(&e),
    }
}

/// LOCK: the lock stateid becomes the current stateid. A reclaim is
/// allowed only in grace, a new lock only out of it.
pub fn lock(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Lock(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let (locker, seqid) = match &args.locker {
            Locker4::OpenOwner(new) => (
                Locker::New {
                    open: resolve_current(&new.open_stateid, ctx.current_stateid)?,
                    lock_owner: new.lock_owner.owner.as_bytes(),
                },
                new.open_seqid,
            ),
            Locker4::LockOwner(existing) => (
                Locker::Existing(resolve_current(
                    &existing.lock_stateid,
                    ctx.current_stateid,
                )?),
                existing.lock_seqid,
            ),
        };
        let stateid = match &locker {
            Locker::New { open, .. } => *open,
            Locker::Existing(lock) => *lock,
        };
        let client = v40::state_client(ctx, By::Stateid(&stateid))?;
        let owner = Owner::Of {
            stateid: &stateid,
            unconfirmed: false,
        };
        v40::sequence(ctx, reply, &client, owner, seqid)?;
        if let (Locker4::OpenOwner(new), 0) = (&args.locker, ctx.minor) {
            // The new lock-owner is the open's client's (RFC 7530
            // section 16.10.4), and one it has already goes on from its
            // own seqid.
            if new.lock_owner.clientid != client.id.0 {
                return Err(Nfsstat4::BadStateid);
            }
            let name = new.lock_owner.owner.as_bytes();
            ctx.nfs4
                .state
                .new_lock_owner_seqid(&client, name, new.lock_seqid)?;
            v40::new_lock_owner(ctx, name, new.lock_seqid);
        }
        let span = lock_span(args.offset, args.length)?;
        let file = current_regular(ctx)?;
        ctx.nfs4.state.grace_check(&client, args.reclaim)?;
        let fs = &file.export.fs;
        let fh = file.node.fh();
        let mut opener = || fs.open_for_locks(fh).map_err(std::io::Error::other);
        Ok(ctx.nfs4.state.lock(
            &client,
            locker,
            fh,
            span,
            exclusive(args.locktype),
            &mut opener,
        ))
    })();
    match result {
        Err(status) => status,
        Ok(Err(e)) => failed(e, reply),
        Ok(Ok(stateid)) => {
            set_stateid(ctx, stateid, reply);
            Nfsstat4::Ok
        }
    }
}

/// LOCKT: whether the lock-owner could take the range; no state is
/// made.
pub fn lockt(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Lockt(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        // In a session the owner's clientid is the session's (knfsd does
        // not look at it there either).
        let client = v40::state_client(ctx, By::Clientid(args.owner.clientid))?;
        let span = lock_span(args.offset, args.length)?;
        let file = current_regular(ctx)?;
        let fs = &file.export.fs;
        let fh = file.node.fh();
        let mut opener = || fs.open_for_locks(fh).map_err(std::io::Error::other);
        Ok(ctx.nfs4.state.lockt(
            &client,
            args.owner.owner.as_bytes(),
            fh,
            span,
            exclusive(args.locktype),
            &mut opener,
        ))
    })();
    match result {
        Err(status) => status,
        Ok(Err(e)) => failed(e, reply),
        Ok(Ok(())) => Nfsstat4::Ok,
    }
}

/// LOCKU: the range released; the lock stateid (its seqid moved on)
/// becomes the current stateid.
pub fn locku(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Locku(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let stateid = resolve_current(&args.lock_stateid, ctx.current_stateid)?;
        let client = v40::state_client(ctx, By::Stateid(&stateid))?;
        let owner = Owner::Of {
            stateid: &stateid,
            unconfirmed: false,
        };
        v40::sequence(ctx, reply, &client, owner, args.seqid)?;
        let span = lock_span(args.offset, args.length)?;
        let fh = current_fh(ctx)?;
        ctx.nfs4.state.locku(&client, &stateid, &fh, span)
    })();
    status(result.map(|stateid| set_stateid(ctx, stateid, reply)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_names_the_holder() {
        let denied = lock4_denied(Denied {
            offset: 10,
            length: u64::MAX,
            exclusive: true,
            clientid: 7,
            owner: b"nlm:host:42".to_vec(),
        });
        assert_eq!(denied.locktype, NfsLockType4::Write);
        assert_eq!(denied.owner.clientid, 7);
        assert_eq!(denied.owner.owner.as_bytes(), b"nlm:host:42");
        assert!(exclusive(NfsLockType4::WriteW));
        assert!(!exclusive(NfsLockType4::ReadW));
    }
}
