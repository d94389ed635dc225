//! OPEN, CLOSE, OPEN_DOWNGRADE, TEST_STATEID and FREE_STATEID (RFC 8881
//! §18.16, §18.2, §18.18, §18.48, §18.38): the file found or made
//! through the same `fs` functions NFSv3's CREATE calls, with the
//! export's options applied as NFSv3 applies them (squashed credentials,
//! `ROFS` on read-only exports and the pseudo-filesystem, `MetadataSync`
//! after a create), then the open's state through [`super::state`].
//!
//! An exclusive create keeps its verifier in the file's atime and mtime,
//! as NFSv3's does (`ops::CreateHow::Exclusive`); EXCLUSIVE4_1 then sets
//! its `createattrs` on the file it made. A conflicting delegation of
//! another client is recalled first (`NFS4ERR_DELAY` until returned),
//! and the open may be granted one ([`super::delegation::offer`]);
//! `CLAIM_DELEGATE_CUR` and `CLAIM_DELEG_CUR_FH` open under one.

use std::sync::Arc;

use dionfs_core::delegations::Access;
use dionfs_core::exports::Export;
use dionfs_fs::{access3, ops, FileKind, FsError, Node, SetAttrs};
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, ChangeInfo4, CreateHow4, Fattr4, Nfsace4, Nfsstat4, OpenArgs4,
    OpenClaim4, OpenDelegationType4, OpenFlag4, OpenResOk4, StateId4, TestStateidResOk4,
    OPEN4_RESULT_CONFIRM, OPEN4_RESULT_LOCKTYPE_POSIX, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WANT_CANCEL, OPEN4_SHARE_ACCESS_WANT_DELEG_MASK,
    OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED,
    OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL, OPEN4_SHARE_ACCESS_WRITE,
};
use dionfs_xdr::Encode;

use super::attr_ops::{gid_of, set_created_acl, uid_of};
use super::attrs::{self, change};
use super::compound::OpCtx;
use super::delegation;
use super::fh::{require_dir, Current, Fh4, File};
use super::lookup::{check_name, status};
use super::namespace::Found;
use super::reply::CompoundReply;
use super::state::{resolve_current, Client};
use super::status::from_fs;
use super::v40::{self, By, Owner};

/// The share access bits proper (`OPEN4_SHARE_ACCESS_BOTH`).
const ACCESS_MASK: u32 = 3;

/// The client of the COMPOUND's session, for the ops of minor version 1
/// and later alone.
fn session_client(ctx: &OpCtx) -> Result<Arc<Client>, Nfsstat4> {
    ctx.slot
        .map(|slot| Arc::clone(slot.client()))
        .ok_or(Nfsstat4::OpNotInSession)
}

/// The current filehandle as a regular file of an export, for the
/// state ops: a directory (or pseudo directory) is `ISDIR`, a symbolic
/// link `SYMLINK`, anything else `INVAL` (knfsd's `nfsd_check_obj_isreg`
/// for 4.1).
pub(super) fn current_regular<'a>(ctx: &mut OpCtx<'a>) -> Result<File<'a>, Nfsstat4> {
    let file = ctx.current_file(Nfsstat4::Isdir)?;
    require_regular(file.node.kind())?;
    Ok(file)
}

/// The current filehandle's bytes, for the ops that name state of a
/// file already opened (CLOSE, OPEN_DOWNGRADE, LOCKU): the file is not
/// looked at, so a file removed while open can still be closed and
/// unlocked (pynfs RNM21). A pseudo directory has no state: its handle
/// matches no stateid.
pub(super) fn current_fh(ctx: &OpCtx) -> Result<Vec<u8>, Nfsstat4> {
    match ctx.current.as_ref().ok_or(Nfsstat4::Nofilehandle)? {
        Fh4::File { fh, .. } => Ok(fh.clone()),
        Fh4::Pseudo(_) => Err(Nfsstat4::BadStateid),
    }
}

fn require_regular(kind: FileKind) -> Result<(), Nfsstat4> {
    match kind {
        FileKind::Regular => Ok(()),
        FileKind::Directory => Err(Nfsstat4::Isdir),
        FileKind::Symlink => Err(Nfsstat4::Symlink),
        _ => Err(Nfsstat4::Inval),
    }
}

/// [`require_regular`] for what OPEN opens: in minor version 0 a device,
/// a FIFO or a socket is `SYMLINK`, 4.0 having no better error for it
/// (knfsd's `nfsd_check_obj_isreg`; LOCK and LOCKT answer `INVAL`).
fn require_opened(kind: FileKind, minor: u32) -> Result<(), Nfsstat4> {
    match require_regular(kind) {
        Err(Nfsstat4::Inval) if minor == 0 => Err(Nfsstat4::Symlink),
        other => other,
    }
}

/// `share_access` split into the access (1 to 3) and the delegation
/// want; unknown bits are `INVAL` (knfsd's `nfsd4_decode_share_access`).
fn split_access(share_access: u32) -> Result<(u32, u32), Nfsstat4> {
    let access = share_access & ACCESS_MASK;
    let want = share_access & OPEN4_SHARE_ACCESS_WANT_DELEG_MASK;
    let rest = share_access
        & !ACCESS_MASK
        & !OPEN4_SHARE_ACCESS_WANT_DELEG_MASK
        & !OPEN4_SHARE_ACCESS_WANT_SIGNAL_DELEG_WHEN_RESRC_AVAIL
        & !OPEN4_SHARE_ACCESS_WANT_PUSH_DELEG_WHEN_UNCONTENDED;
    if rest != 0 || want > OPEN4_SHARE_ACCESS_WANT_CANCEL {
        return Err(Nfsstat4::Inval);
    }
    Ok((access, want))
}

/// The `change` of directory `dir` (0 if it cannot be read).
fn change_of(export: &Export, dir: &Node) -> u64 {
    ops::getattr(&export.fs, dir).map_or(0, |a| change(a.ctime))
}

/// What OPEN found or made, and how.
struct Opened<'a> {
    file: File<'a>,
    /// Made by this OPEN (or its retry, for an exclusive create): the
    /// caller's access to it is not checked (knfsd's owner override).
    created: bool,
    cinfo: ChangeInfo4,
    attrset: Bitmap4,
    /// To be truncated once opened (an existing file opened with a size
    /// of 0 to set: knfsd's `op_truncate`, never before the share
    /// reservation is had).
    truncate: bool,
}

/// Whether an OPEN of an existing file with `openhow` truncates it: a
/// size of 0 among UNCHECKED4's or GUARDED4's attributes (another size
/// is ignored, RFC 8881 section 18.16.4, as knfsd does).
fn truncates(ctx: &OpCtx, openhow: &OpenFlag4) -> Result<bool, Nfsstat4> {
    match openhow {
        OpenFlag4::Create(how @ (CreateHow4::Unchecked(_) | CreateHow4::Guarded(_))) => {
            Ok(create_how(ctx, how)?.set.size == Some(0))
        }
        _ => Ok(false),
    }
}

/// OPEN (RFC 8881 section 18.16): CLAIM_NULL (a name in the current
/// directory, made if asked), CLAIM_FH and CLAIM_PREVIOUS (the current
/// file; a reclaim only in grace). Delegation claims are `NOTSUPP`. The
/// opened file becomes the current filehandle, its open stateid the
/// current stateid.
pub fn open(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Open(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = open_file(ctx, &args, reply);
    status(result.map(|ok| ok.encode(reply.encoder())))
}

fn open_file(
    ctx: &mut OpCtx,
    args: &OpenArgs4,
    reply: &mut CompoundReply,
) -> Result<OpenResOk4, Nfsstat4> {
    let client = v40::state_client(ctx, By::Clientid(args.owner.clientid))?;
    let owner = args.owner.owner.as_bytes();
    v40::sequence(ctx, reply, &client, Owner::Open(owner), args.seqid)?;
    let (access, want) = split_access(args.share_access)?;
    let reclaim = match &args.claim {
        OpenClaim4::Null(_) | OpenClaim4::Fh => false,
        OpenClaim4::Previous(_) => true,
        // Opens the client made locally under a delegation, told as it
        // is returned (RFC 8881 section 10.4.3).
        OpenClaim4::DelegateCur(_) | OpenClaim4::DelegCurFh(_) => false,
        // Delegations are not kept across a restart, so none of a
        // previous instance can be claimed (as knfsd).
        OpenClaim4::DelegatePrev(_) | OpenClaim4::DelegPrevFh => return Err(Nfsstat4::Notsupp),
    };
    // A client opens nothing new before it says its reclaims are done
    // (RFC 8881 section 18.51.3: GRACE, as knfsd's nfsd4_open answers).
    // Minor version 0 has no RECLAIM_COMPLETE: the grace period alone
    // decides.
    if ctx.minor != 0 && !reclaim && !client.reclaim_completed() {
        return Err(Nfsstat4::Grace);
    }
    ctx.nfs4.state.grace_check(&client, reclaim)?;
    if reclaim && ctx.minor == 0 {
        // A reclaim confirms its owner (knfsd's `nfsd4_open`): Linux
        // sends OPEN_CONFIRM after one without the file's handle.
        ctx.nfs4.state.confirm_open_owner(&client, owner);
    }
    if let OpenClaim4::Previous(delegation) = &args.claim {
        // No delegation was ever granted, so none can be reclaimed.
        if *delegation != OpenDelegationType4::None {
            return Err(Nfsstat4::ReclaimBad);
        }
    }
    let opened = match &args.claim {
        OpenClaim4::Null(name) => open_by_name(ctx, args, name)?,
        OpenClaim4::DelegateCur(cur) => {
            let opened = open_by_name(ctx, args, &cur.file)?;
            let stateid = resolve_current(&cur.delegate_stateid, ctx.current_stateid)?;
            ctx.nfs4
                .state
                .check_delegation(&client, &stateid, opened.file.node.fh())?;
            opened
        }
        // The current file: a create there makes nothing (knfsd's
        // `do_open_fhandle`), but may truncate; the directory is not
        // known, so neither is its change.
        _ => {
            let truncate = truncates(ctx, &args.openhow)?;
            let file = ctx.current_file(Nfsstat4::Isdir)?;
            require_opened(file.node.kind(), ctx.minor)?;
            if let OpenClaim4::DelegCurFh(stateid) = &args.claim {
                let stateid = resolve_current(stateid, ctx.current_stateid)?;
                ctx.nfs4
                    .state
                    .check_delegation(&client, &stateid, file.node.fh())?;
            }
            Opened {
                file,
                created: false,
                cinfo: ChangeInfo4 {
                    atomic: false,
                    before: 0,
                    after: 0,
                },
                attrset: size_set(truncate),
                truncate,
            }
        }
    };
    let Opened {
        file,
        created,
        cinfo,
        attrset,
        truncate,
    } = opened;
    let export = file.export;
    if truncate && access & OPEN4_SHARE_ACCESS_WRITE == 0 {
        // A truncating OPEN must open for writing (knfsd's
        // `do_open_permission`).
        return Err(Nfsstat4::Inval);
    }
    if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        ctx.writable(export)?;
    }
    if !created {
        check_access(ctx, &file, access)?;
    }
    let fh = file.node.fh();
    // Another client's delegation in the way is recalled first (a read
    // open conflicts with write delegations, a write open with all).
    let conflict = if access & OPEN4_SHARE_ACCESS_WRITE != 0 || truncate {
        Access::Write
    } else {
        Access::Read
    };
    let _busy = delegation::enter(ctx, fh, conflict)?;
    let stateid = ctx
        .nfs4
        .state
        .open(&client, owner, fh, access, args.share_deny)?;
    if truncate {
        let truncated = ctx
            .as_user(export, || ops::set_size(&export.fs, &file.node, 0))
            .and_then(|()| {
                let synced = export.metadata_sync.attrs_changed(&file.node);
                synced.map_err(from_fs)
            });
        if let Err(status) = truncated {
            // Not opened after all: a new open goes (an upgraded one
            // keeps what it had before, knfsd's
            // `nfs4_get_vfs_file` undoes no more either).
            if stateid.seqid == 1 {
                let _ = ctx.nfs4.state.close(&client, &stateid, fh);
            }
            return Err(status);
        }
    }
    v40::opened(ctx, export.config.id, fh);
    drop(_busy);
    let confirm = ctx.nfs4.state.awaits_confirm(&client, &stateid);
    let fresh = matches!(args.claim, OpenClaim4::Null(_) | OpenClaim4::Fh) && !confirm;
    // A write-only open may get a write delegation, under which the
    // client also reads from its cache: only if it may read the file
    // (knfsd's rule since 6.16).
    let deleg_access = if access == OPEN4_SHARE_ACCESS_WRITE
        && ctx.server.delegations.enabled()
        && check_access(ctx, &file, OPEN4_SHARE_ACCESS_READ).is_ok()
    {
        dionfs_proto::nfs4::OPEN4_SHARE_ACCESS_BOTH
    } else {
        access
    };
    let delegation = delegation::offer(
        ctx,
        &client,
        file.export,
        &file.node,
        deleg_access,
        want,
        fresh,
    );
    ctx.current = Some(Fh4::File {
        export: export.config.id,
        fh: file.node.fh().to_vec(),
        node: Some(file.node),
        file: None,
    });
    ctx.current_stateid = Some(stateid);
    let mut rflags = OPEN4_RESULT_LOCKTYPE_POSIX;
    if confirm {
        rflags |= OPEN4_RESULT_CONFIRM;
    }
    Ok(OpenResOk4 {
        stateid,
        cinfo,
        rflags,
        attrset,
        delegation,
    })
}

/// The caller's access to an existing file for `access`, by the kernel
/// as the squashed user: reading (or executing, knfsd's
/// `NFSD_MAY_READ_IF_EXEC`), writing. `ACCESS` if refused.
fn check_access(ctx: &OpCtx, file: &File, access: u32) -> Result<(), Nfsstat4> {
    let mut wanted = 0;
    if access & OPEN4_SHARE_ACCESS_READ != 0 {
        wanted |= access3::READ | access3::EXECUTE;
    }
    if access & OPEN4_SHARE_ACCESS_WRITE != 0 {
        wanted |= access3::MODIFY;
    }
    let granted = ctx.as_user(file.export, || ops::access(&file.node, wanted))?;
    let read_ok =
        access & OPEN4_SHARE_ACCESS_READ == 0 || granted & (access3::READ | access3::EXECUTE) != 0;
    let write_ok = access & OPEN4_SHARE_ACCESS_WRITE == 0 || granted & access3::MODIFY != 0;
    if read_ok && write_ok {
        Ok(())
    } else {
        Err(Nfsstat4::Access)
    }
}

/// OPEN by `name` in the current directory, made as `args.openhow`
/// says.
fn open_by_name<'a>(
    ctx: &mut OpCtx<'a>,
    args: &OpenArgs4,
    name: &dionfs_proto::nfs4::Component4,
) -> Result<Opened<'a>, Nfsstat4> {
    let creating = matches!(args.openhow, OpenFlag4::Create(_));
    let dir = match ctx.current()? {
        Current::File(dir) => dir,
        // The pseudo-filesystem holds directories only, and is read-only.
        Current::Pseudo(_) if creating => return Err(Nfsstat4::Rofs),
        Current::Pseudo(id) => {
            let name = check_name(name)?;
            let ns = ctx.namespace();
            let dir = ns.node(id).ok_or(Nfsstat4::Stale)?;
            return Err(match dir.lookup(name, ctx.client()) {
                Found::NotFound => Nfsstat4::Noent,
                _ => Nfsstat4::Isdir,
            });
        }
    };
    require_dir(dir.node.kind())?;
    let name = check_name(name)?;
    let export = dir.export;
    let before = change_of(export, &dir.node);
    let OpenFlag4::Create(how) = &args.openhow else {
        let (node, attr) = ctx.as_user(export, || export.fs.lookup(&dir.node, name))?;
        require_opened(attr.kind, ctx.minor)?;
        return Ok(Opened {
            file: File {
                export,
                node: Arc::new(node),
            },
            created: false,
            cinfo: ChangeInfo4 {
                atomic: false,
                before,
                after: before,
            },
            attrset: Bitmap4::default(),
            truncate: false,
        });
    };
    ctx.writable(export)?;
    let CreateAttrs {
        how: fs_how,
        set,
        mut attrset,
        verified,
        acl,
    } = create_how(ctx, how)?;
    let existed = ctx
        .as_user(export, || export.fs.lookup(&dir.node, name))
        .ok();
    let found = existed.is_some();
    if let (Some((node, attr)), CreateHow4::Unchecked(_)) = (existed, how) {
        // UNCHECKED4 opens what is there: only a regular file can be,
        // truncated once opened if asked.
        require_opened(attr.kind, ctx.minor)?;
        let truncate = set.size == Some(0);
        return Ok(Opened {
            file: File {
                export,
                node: Arc::new(node),
            },
            created: false,
            cinfo: ChangeInfo4 {
                atomic: false,
                before,
                after: before,
            },
            attrset: size_set(truncate),
            truncate,
        });
    }
    // Made now, or (an exclusive create's retry) before: GUARDED4 over
    // a file that was there fails here.
    let (node, _) = ctx.as_user(export, || ops::create(&export.fs, &dir.node, name, &fs_how))?;
    if let (false, Some(rest)) = (found, verified) {
        // EXCLUSIVE4_1's attributes, on the file it made (a retry found
        // it made, with them).
        if !rest.is_empty() {
            ctx.as_user(export, || ops::setattr(&export.fs, &node, &rest))?;
        }
    }
    if let Some(aces) = acl {
        set_created_acl(ctx, export, &node, &aces, &mut attrset);
    }
    export
        .metadata_sync
        .created(&dir.node, &node, &set)
        .map_err(from_fs)?;
    Ok(Opened {
        file: File {
            export,
            node: Arc::new(node),
        },
        created: true,
        cinfo: ChangeInfo4 {
            atomic: false,
            before,
            after: change_of(export, &dir.node),
        },
        attrset,
        truncate: false,
    })
}

/// `attrset` of an OPEN that truncates (or not).
fn size_set(truncate: bool) -> Bitmap4 {
    if truncate {
        Bitmap4::from_bits(&[Attr4::Size.as_u32()])
    } else {
        Bitmap4::default()
    }
}

/// What a creating OPEN does, from its `createhow4`.
struct CreateAttrs {
    /// The `fs` create.
    how: ops::CreateHow,
    /// The attributes it sets.
    set: SetAttrs,
    /// The `attrset` answered.
    attrset: Bitmap4,
    /// EXCLUSIVE4_1's attributes, set after the exclusive create.
    verified: Option<SetAttrs>,
    /// The ACL set on what UNCHECKED4 or GUARDED4 made.
    acl: Option<Vec<Nfsace4>>,
}

/// What the OPEN of `how` creates with. An exclusive create keeps its
/// verifier in the times, so those are in `attrset` (the client sets
/// them after, as knfsd tells it), and EXCLUSIVE4_1 may not set them
/// itself (`INVAL`).
fn create_how(ctx: &OpCtx, how: &CreateHow4) -> Result<CreateAttrs, Nfsstat4> {
    let decode =
        |fattr: &Fattr4| attrs::set_attrs(ctx.minor, fattr, |o| uid_of(ctx, o), |g| gid_of(ctx, g));
    let with_acl = |fattr: &Fattr4| {
        attrs::set_attrs_and_acl(ctx.minor, fattr, |o| uid_of(ctx, o), |g| gid_of(ctx, g))
    };
    let times = [Attr4::TimeAccess.as_u32(), Attr4::TimeModify.as_u32()];
    Ok(match how {
        CreateHow4::Unchecked(fattr) | CreateHow4::Guarded(fattr) => {
            let (set, acl) = with_acl(fattr)?;
            let how = match how {
                CreateHow4::Guarded(_) => ops::CreateHow::Guarded(set.clone()),
                _ => ops::CreateHow::Unchecked(set.clone()),
            };
            CreateAttrs {
                how,
                set,
                attrset: fattr.attrmask.clone(),
                verified: None,
                acl,
            }
        }
        CreateHow4::Exclusive(verf) => CreateAttrs {
            how: ops::CreateHow::Exclusive(verf.0),
            set: SetAttrs::default(),
            attrset: Bitmap4::from_bits(&times),
            verified: None,
            acl: None,
        },
        CreateHow4::Exclusive41(both) => {
            let mask = &both.attrs.attrmask;
            if mask.contains(Attr4::TimeAccessSet.as_u32())
                || mask.contains(Attr4::TimeModifySet.as_u32())
            {
                return Err(Nfsstat4::Inval);
            }
            let set = decode(&both.attrs)?;
            let mut attrset = mask.clone();
            for bit in times {
                attrset.set(bit);
            }
            CreateAttrs {
                how: ops::CreateHow::Exclusive(both.verf.0),
                set: SetAttrs::default(),
                attrset,
                verified: Some(set),
                acl: None,
            }
        }
    })
}

/// CLOSE: the open's state released; the result is the special invalid
/// stateid, which is also the current stateid after it.
pub fn close(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Close(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let stateid = resolve_current(&args.open_stateid, ctx.current_stateid)?;
        let client = v40::state_client(ctx, By::Stateid(&stateid))?;
        let owner = Owner::Of {
            stateid: &stateid,
            unconfirmed: false,
        };
        v40::sequence(ctx, reply, &client, owner, args.seqid)?;
        let fh = current_fh(ctx)?;
        ctx.nfs4.state.close(&client, &stateid, &fh)
    })();
    status(result.map(|stateid| {
        ctx.current_stateid = Some(stateid);
        stateid.encode(reply.encoder());
    }))
}

/// OPEN_DOWNGRADE: the open narrowed to the access and deny given.
pub fn open_downgrade(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::OpenDowngrade(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let stateid = resolve_current(&args.open_stateid, ctx.current_stateid)?;
        let client = v40::state_client(ctx, By::Stateid(&stateid))?;
        let owner = Owner::Of {
            stateid: &stateid,
            unconfirmed: false,
        };
        v40::sequence(ctx, reply, &client, owner, args.seqid)?;
        let (access, _) = split_access(args.share_access)?;
        let fh = current_fh(ctx)?;
        ctx.nfs4
            .state
            .open_downgrade(&client, &stateid, &fh, access, args.share_deny)
    })();
    status(result.map(|stateid| set_stateid(ctx, stateid, reply)))
}

/// Answers `stateid` and makes it the current stateid.
pub(super) fn set_stateid(ctx: &mut OpCtx, stateid: StateId4, reply: &mut CompoundReply) {
    ctx.current_stateid = Some(stateid);
    stateid.encode(reply.encoder());
}

/// TEST_STATEID: the status of each stateid (RFC 8881 section 18.48).
pub fn test_stateid(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::TestStateid(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = session_client(ctx).map(|client| TestStateidResOk4 {
        status_codes: ctx.nfs4.state.test_stateids(&client, &args.stateids),
    });
    status(result.map(|ok| ok.encode(reply.encoder())))
}

/// FREE_STATEID: a lock stateid without locks forgotten.
pub fn free_stateid(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::FreeStateid(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = session_client(ctx).and_then(|client| {
        let stateid = resolve_current(&args.stateid, ctx.current_stateid)?;
        match ctx.nfs4.state.free_stateid(&client, &stateid) {
            Nfsstat4::Ok => Ok(()),
            status => Err(status),
        }
    });
    status(result)
}

/// `FsError` through [`from_fs`], for the lock ops' opener errors.
pub(super) fn from_io(e: &std::io::Error) -> Nfsstat4 {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<FsError>())
    {
        Some(fs) => from_fs(*fs),
        None => Nfsstat4::Io,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dionfs_proto::nfs4::OPEN4_SHARE_ACCESS_WANT_NO_DELEG;

    #[test]
    fn share_access_splits_into_access_and_want() {
        assert_eq!(split_access(3), Ok((3, 0)));
        assert_eq!(
            split_access(1 | OPEN4_SHARE_ACCESS_WANT_NO_DELEG),
            Ok((1, OPEN4_SHARE_ACCESS_WANT_NO_DELEG))
        );
        assert_eq!(split_access(2 | 0x10_0000), Err(Nfsstat4::Inval));
        assert_eq!(split_access(2 | 0x0600), Err(Nfsstat4::Inval));
    }
}
