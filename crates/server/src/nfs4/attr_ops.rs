//! GETATTR, SETATTR, VERIFY and NVERIFY (RFC 8881 §18.7, §18.30, §18.31,
//! §18.15), and the inputs of an object's `fattr4` ([`with_file`],
//! [`with_pseudo`], which READDIR uses too). The encoding and the
//! comparison are [`super::attrs`]'s.

use dionfs_core::delegations::Access;
use dionfs_core::exports::Export;
use dionfs_fs::acl::{self as posix, AclKind, PosixAcl};
use dionfs_fs::handle::{self, PathId};
use dionfs_fs::{ops, Attr, FileKind, Node};
use dionfs_proto::nfs4::{ArgOp, Attr4, Bitmap4, GetattrResOk4, Nfsace4, Nfsacl4, Nfsstat4};
use dionfs_xdr::Encode;

use super::acl;
use super::attrs::{
    self, max_read_write, needs, AttrSource, FileSource, Object, PseudoSource, PSEUDO_MODE,
    PSEUDO_OWNER,
};
use super::compound::OpCtx;
use super::fh::{Current, Fh4, File};
use super::lookup::status;
use super::namespace::MountedOn;
use super::reply::CompoundReply;
use super::state::{resolve_current, Use};
use super::status::from_fs;

/// `maxread` and `maxwrite` for files of an export of `max_transfer`,
/// in this COMPOUND's session.
fn transfer_sizes(ctx: &OpCtx, max_transfer: u32) -> (u64, u64) {
    match ctx.slot {
        Some(slot) => max_read_write(max_transfer, slot.max_response(), slot.max_request()),
        None => (u64::from(max_transfer), u64::from(max_transfer)),
    }
}

/// The `owner` and `owner_group` strings of `uid` and `gid`, each only
/// if `request` asks for it (a name-service lookup, with a domain).
fn owners(ctx: &OpCtx, request: &Bitmap4, uid: u32, gid: u32) -> (Option<String>, Option<String>) {
    let needs = needs(request);
    let idmap = &ctx.nfs4.idmap;
    (
        needs.owner.then(|| idmap.owner(uid)),
        needs.owner_group.then(|| idmap.owner_group(gid)),
    )
}

/// The ACEs of an object whose access ACL is `access` and whose default
/// ACL (a directory's) is `default`, its users and groups named as
/// `owner` and `owner_group` are.
fn wire_acl(ctx: &OpCtx, access: &PosixAcl, default: Option<&PosixAcl>, dir: bool) -> Nfsacl4 {
    let idmap = &ctx.nfs4.idmap;
    Nfsacl4(acl::to_wire(
        &acl::from_posix(access, default, dir),
        |uid| idmap.owner(uid),
        |gid| idmap.owner_group(gid),
    ))
}

/// The ACEs a client sent, their `who`s mapped as `owner` and
/// `owner_group` strings are.
fn client_aces(ctx: &OpCtx, aces: &[Nfsace4]) -> Result<Vec<acl::Ace>, Nfsstat4> {
    acl::from_wire(aces, |o| uid_of(ctx, o), |g| gid_of(ctx, g))
}

/// A file's ACEs, if `request` asks for `acl` or `dacl`: from its POSIX
/// ACLs, or from its mode if it has none (or its file system keeps
/// none).
fn file_acl(
    ctx: &OpCtx,
    request: &Bitmap4,
    node: &Node,
    attr: &Attr,
) -> Result<Option<Nfsacl4>, Nfsstat4> {
    if !needs(request).acl {
        return Ok(None);
    }
    let access = posix::get(node, AclKind::Access).map_err(from_fs)?;
    let access = access.unwrap_or_else(|| PosixAcl::from_mode(attr.mode));
    let dir = attr.kind == FileKind::Directory;
    let default = posix::get(node, AclKind::Default).map_err(from_fs)?;
    Ok(Some(wire_acl(ctx, &access, default.as_ref(), dir)))
}

/// The inputs every object shares.
fn source<'s>(
    ctx: &OpCtx,
    object: Object<'s>,
    fh: &'s [u8],
    owners: &'s (Option<String>, Option<String>),
    acl: Option<&'s Nfsacl4>,
    max_transfer: u32,
) -> AttrSource<'s> {
    let (maxread, maxwrite) = transfer_sizes(ctx, max_transfer);
    AttrSource {
        minor: ctx.minor,
        object,
        fh,
        owner: owners.0.as_deref(),
        owner_group: owners.1.as_deref(),
        acl,
        lease_time: u32::try_from(ctx.nfs4.state.lease_time().as_secs()).unwrap_or(u32::MAX),
        maxread,
        maxwrite,
    }
}

/// Runs `f` on the attribute source of a file of `export` whose statx is
/// `attr`, for `request` (the export's statvfs is taken only if asked
/// for). `mounted_on` is an export root's `mounted_on_fileid`.
pub fn with_file<T>(
    ctx: &OpCtx,
    request: &Bitmap4,
    export: &Export,
    node: &Node,
    attr: &Attr,
    mounted_on: Option<u64>,
    f: impl FnOnce(&AttrSource) -> Result<T, Nfsstat4>,
) -> Result<T, Nfsstat4> {
    let fs_stat = if needs(request).fs_stat {
        Some(ops::fsstat(node).map_err(from_fs)?)
    } else {
        None
    };
    let owners = owners(ctx, request, attr.uid, attr.gid);
    let acl = file_acl(ctx, request, node, attr)?;
    let object = Object::File(FileSource {
        attr,
        export: export.config.id,
        mounted_on_fileid: mounted_on,
        fs_stat,
        // Probed (one getxattr) only when asked for.
        xattr_support: request.contains(Attr4::XattrSupport.bit())
            && ops::user_xattrs_supported(node),
    });
    f(&source(
        ctx,
        object,
        node.fh(),
        &owners,
        acl.as_ref(),
        export.config.max_transfer,
    ))
}

/// Runs `f` on the attribute source of the pseudo directory `id`
/// (`STALE` if a reload took it away).
pub fn with_pseudo<T>(
    ctx: &OpCtx,
    request: &Bitmap4,
    id: PathId,
    f: impl FnOnce(&AttrSource) -> Result<T, Nfsstat4>,
) -> Result<T, Nfsstat4> {
    let ns = ctx.namespace();
    ns.node(id).ok_or(Nfsstat4::Stale)?;
    let fh = handle::encode_pseudo(ctx.handle_key(), id);
    let owners = owners(ctx, request, PSEUDO_OWNER.0, PSEUDO_OWNER.1);
    // What its mode says: read and search for everyone.
    let acl = needs(request)
        .acl
        .then(|| wire_acl(ctx, &PosixAcl::from_mode(PSEUDO_MODE), None, true));
    let object = Object::Pseudo(PseudoSource {
        fileid: id.fileid(),
        stamp: ns.stamp(),
    });
    f(&source(
        ctx,
        object,
        &fh,
        &owners,
        acl.as_ref(),
        ctx.server.max_args,
    ))
}

/// An export root's `mounted_on_fileid`: the pseudo directory's fileid
/// it is reached from. Reached from an outer export, the entry there is
/// the root's own directory (the same inode, unless the inner export is
/// a mount of its own), so its own fileid stands for it.
pub fn mounted_on(ctx: &OpCtx, file: &File) -> Option<u64> {
    if !file.is_root() {
        return None;
    }
    match ctx
        .namespace()
        .mounted_on(file.export.config.id, ctx.client())
    {
        Some(MountedOn::Pseudo(fileid)) => Some(fileid),
        _ => None,
    }
}

/// Runs `f` on the attribute source of the current filehandle; `held`,
/// for a file another client holds a write delegation of, what its
/// holder answered CB_GETATTR ([`as_held`]).
fn with_current<T>(
    ctx: &mut OpCtx,
    request: &Bitmap4,
    held: Option<(u64, bool)>,
    f: impl FnOnce(&AttrSource) -> Result<T, Nfsstat4>,
) -> Result<T, Nfsstat4> {
    match ctx.current()? {
        Current::Pseudo(id) => with_pseudo(ctx, request, id, f),
        Current::File(file) => {
            let mut attr = ops::getattr(&file.export.fs, &file.node).map_err(from_fs)?;
            if let Some(held) = held {
                as_held(&mut attr, held);
            }
            let on = mounted_on(ctx, &file);
            with_file(ctx, request, file.export, &file.node, &attr, on, f)
        }
    }
}

/// The attributes of a file whose write delegation's holder answered
/// CB_GETATTR with `(size, modified)`: its size is the holder's, and
/// when the holder changed the file its times (and so its `change`) are
/// now, as knfsd sets them (never behind the server's).
fn as_held(attr: &mut Attr, (size, modified): (u64, bool)) {
    attr.size = size;
    if modified {
        let now = super::fh::now();
        attr.mtime = attr.mtime.max(now);
        attr.ctime = attr.ctime.max(now);
    }
}

pub fn getattr(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Getattr(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let request = &args.attr_request;
    // Another client's write delegation: its size and change are the
    // holder's to tell (CB_GETATTR, design section C). Other attributes
    // are the server's (as knfsd's `nfsd4_deleg_getattr_conflict`).
    let mut holder = None;
    if let Some(Fh4::File { fh, .. }) = &ctx.current {
        if request.contains(Attr4::Size.bit()) || request.contains(Attr4::Change.bit()) {
            match super::delegation::getattr_conflict(ctx, fh) {
                Ok(found) => holder = found,
                Err(status) => return status,
            }
        }
    }
    let result = with_current(ctx, request, holder, |src| attrs::getattr(request, src));
    status(result.map(|obj_attributes| {
        GetattrResOk4 { obj_attributes }.encode(reply.encoder());
    }))
}

/// VERIFY (`same` true) and NVERIFY (false): OK when the client's values
/// are ours (VERIFY) or are not (NVERIFY).
fn verify_as(ctx: &mut OpCtx, op: ArgOp, same: bool) -> Nfsstat4 {
    let (ArgOp::Verify(args) | ArgOp::Nverify(args)) = op else {
        return Nfsstat4::Serverfault;
    };
    let theirs = &args.obj_attributes;
    match with_current(ctx, &theirs.attrmask, None, |src| {
        attrs::same_attrs(theirs, src)
    }) {
        Ok(equal) if equal == same => Nfsstat4::Ok,
        Ok(_) if same => Nfsstat4::NotSame,
        Ok(_) => Nfsstat4::Same,
        Err(status) => status,
    }
}

pub fn verify(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    verify_as(ctx, op, true)
}

pub fn nverify(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    verify_as(ctx, op, false)
}

/// The user an `owner` string names (`BADOWNER` for none; an empty
/// string is `INVAL`, as knfsd's `do_name_to_id` answers it).
pub fn uid_of(ctx: &OpCtx, owner: &[u8]) -> Result<u32, Nfsstat4> {
    if owner.is_empty() {
        return Err(Nfsstat4::Inval);
    }
    ctx.nfs4.idmap.uid(owner).map_err(|_| Nfsstat4::Badowner)
}

/// The group an `owner_group` string names (as [`uid_of`]).
pub fn gid_of(ctx: &OpCtx, group: &[u8]) -> Result<u32, Nfsstat4> {
    if group.is_empty() {
        return Err(Nfsstat4::Inval);
    }
    ctx.nfs4.idmap.gid(group).map_err(|_| Nfsstat4::Badowner)
}

/// Sets a file's POSIX ACLs to what the NFSv4 ACL `aces` maps to, as
/// the client (the kernel lets only the owner). What cannot be mapped,
/// and a file system (or a symbolic link) that keeps no ACLs, is
/// `ATTRNOTSUPP`.
fn set_acl(ctx: &OpCtx, export: &Export, node: &Node, aces: &[acl::Ace]) -> Result<(), Nfsstat4> {
    let dir = node.kind() == FileKind::Directory;
    let (access, default) = acl::to_posix(aces, dir)?;
    ctx.as_user(export, || {
        posix::set(node, AclKind::Access, Some(&access))?;
        if dir {
            posix::set(node, AclKind::Default, default.as_ref())?;
        }
        Ok(())
    })
    .map_err(|status| match status {
        Nfsstat4::Notsupp => Nfsstat4::Attrnotsupp,
        other => other,
    })
}

/// The ACL of a create (OPEN, CREATE) set on what it made. As knfsd
/// does, the create stands if the ACL cannot be set (or mapped): `acl`
/// and `dacl` are then left out of `attrset`.
pub fn set_created_acl(
    ctx: &OpCtx,
    export: &Export,
    node: &Node,
    aces: &[Nfsace4],
    attrset: &mut Bitmap4,
) {
    let done = client_aces(ctx, aces).and_then(|aces| set_acl(ctx, export, node, &aces));
    if let Err(status) = done {
        tracing::debug!(?status, "NFSv4 create: its ACL was not set");
        attrset.clear(Attr4::Acl.bit());
        attrset.clear(Attr4::Dacl.bit());
    }
}

/// SETATTR. A size change needs a stateid that allows writing the
/// file (RFC 8881 §18.30.3): an open (or lock) stateid of an open for
/// writing (else `OPENMODE`), or a special stateid no share reservation
/// denies writing (else `LOCKED`). A pseudo directory and a read-only
/// export are `ROFS`. `attrsset` is sent whatever the status.
pub fn setattr(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Setattr(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let fattr = &args.obj_attributes;
    let result = (|| {
        let file = ctx.current_file(Nfsstat4::Rofs)?;
        let (set, acl) =
            attrs::set_attrs_and_acl(ctx.minor, fattr, |o| uid_of(ctx, o), |g| gid_of(ctx, g))?;
        let acl = acl.map(|aces| client_aces(ctx, &aces)).transpose()?;
        ctx.writable(file.export)?;
        if set.size.is_some() {
            let stateid = resolve_current(&args.stateid, ctx.current_stateid)?;
            super::v40::check_io_stateid(ctx, &stateid, file.node.fh(), Use::Write)?;
        }
        if set.is_empty() && acl.is_none() {
            return Ok(());
        }
        let _busy = super::delegation::enter(ctx, file.node.fh(), Access::Write)?;
        let export = file.export;
        if !set.is_empty() {
            ctx.as_user(export, || ops::setattr(&export.fs, &file.node, &set))?;
        }
        if let Some(aces) = acl {
            // After the mode, as knfsd: setting the access ACL sets the
            // mode's permission bits to match.
            set_acl(ctx, export, &file.node, &aces)?;
        }
        export
            .metadata_sync
            .attrs_changed(&file.node)
            .map_err(from_fs)
    })();
    let attrsset = match result {
        Ok(()) => fattr.attrmask.clone(),
        Err(_) => Bitmap4::default(),
    };
    attrsset.encode(reply.encoder());
    status(result)
}
