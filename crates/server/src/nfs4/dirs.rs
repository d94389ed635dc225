//! ACCESS, READLINK, READDIR, CREATE, REMOVE, RENAME and LINK (RFC 8881
//! §18.1, §18.24, §18.23, §18.4, §18.25, §18.26, §18.9), through the
//! same `fs` functions NFSv3 calls, with the export's options applied as
//! NFSv3 applies them: squashed credentials, `ROFS` on read-only exports
//! (and on the pseudo-filesystem), and `MetadataSync` after each change.
//!
//! A change's `change_info4` holds the directory's `change` before and
//! after, read around the change but not atomically with it
//! (`atomic` false).

use dionfs_core::delegations::Access;
use dionfs_core::exports::Export;
use dionfs_fs::{access3, dir, ops, FileKind, FsError, Node, SetAttrs, SpecialFile};
use dionfs_proto::nfs4::{
    AccessResOk4, ArgOp, Bitmap4, ChangeInfo4, Component4, CreateResOk4, CreateType4, DirList4,
    Entry4, Fattr4, Linktext4, Nfsstat4, ReaddirArgs4, ReaddirResOk4, RenameResOk4, Verifier4,
    ACCESS4_DELETE, ACCESS4_EXECUTE, ACCESS4_EXTEND, ACCESS4_LOOKUP, ACCESS4_MODIFY, ACCESS4_READ,
    ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE,
};
use dionfs_xdr::{Encode, Encoder};

use super::attr_ops::{gid_of, set_created_acl, uid_of, with_file, with_pseudo};
use super::attrs::{self, change};
use super::compound::OpCtx;
use super::delegation;
use super::fh::{require_dir, Current, Fh4, File};
use super::lookup::{check_name, status};
use super::namespace::Found;
use super::reply::CompoundReply;
use super::status::from_fs;

/// The ACCESS bits of RFC 8881 (the same values as NFSv3's).
const ACCESS4_ALL: u32 = ACCESS4_READ
    | ACCESS4_LOOKUP
    | ACCESS4_MODIFY
    | ACCESS4_EXTEND
    | ACCESS4_DELETE
    | ACCESS4_EXECUTE;

/// The extended-attribute bits of NFSv4.2 (RFC 8276 section 8.4.1.1).
const ACCESS4_XATTRS: u32 = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;

/// ACCESS: v3's `ops::access` under the client's credentials, the
/// changing bits taken away on a read-only export; a pseudo directory
/// grants READ and LOOKUP only. In 4.2 the extended-attribute bits are
/// the file's: XAREAD and XALIST are READ's, XAWRITE is MODIFY's (the
/// kernel asks the same of `user.` attributes).
pub fn access(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Access(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let served = if ctx.minor >= 2 {
        ACCESS4_ALL | ACCESS4_XATTRS
    } else {
        ACCESS4_ALL
    };
    let asked = args.access & served;
    let result = match ctx.current() {
        Err(status) => Err(status),
        Ok(Current::Pseudo(_)) => {
            let supported = asked & meaningful(FileKind::Directory);
            Ok((supported, supported & (ACCESS4_READ | ACCESS4_LOOKUP)))
        }
        Ok(Current::File(File { export, node })) => {
            let supported = asked & meaningful(node.kind());
            let mut asked = supported & ACCESS4_ALL;
            if supported & (ACCESS4_XAREAD | ACCESS4_XALIST) != 0 {
                asked |= ACCESS4_READ;
            }
            if supported & ACCESS4_XAWRITE != 0 {
                asked |= ACCESS4_MODIFY;
            }
            ctx.as_user(export, || ops::access(&node, asked))
                .map(|granted| {
                    if ctx.options(export).read_only() {
                        granted & !(access3::MODIFY | access3::EXTEND | access3::DELETE)
                    } else {
                        granted
                    }
                })
                .map(|granted| {
                    let mut xattrs = 0;
                    if granted & ACCESS4_READ != 0 {
                        xattrs |= ACCESS4_XAREAD | ACCESS4_XALIST;
                    }
                    if granted & ACCESS4_MODIFY != 0 {
                        xattrs |= ACCESS4_XAWRITE;
                    }
                    (supported, (granted & supported) | (xattrs & supported))
                })
        }
    };
    status(result.map(|(supported, access)| {
        AccessResOk4 { supported, access }.encode(reply.encoder());
    }))
}

/// The access bits that mean something for a file of `kind` (knfsd's
/// `nfs3_diraccess`, `nfs3_regaccess` and `nfs3_anyaccess`): a directory
/// is looked up in and deleted from, not executed; anything else is
/// executed, not looked up in or deleted from. A client that asks for
/// the others is told they are not supported (pynfs ACC2).
fn meaningful(kind: FileKind) -> u32 {
    match kind {
        FileKind::Directory => !ACCESS4_EXECUTE,
        _ => !(ACCESS4_LOOKUP | ACCESS4_DELETE),
    }
}

pub fn readlink(ctx: &mut OpCtx, _: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let result = (|| {
        let File { export, node } = ctx.current_file(Nfsstat4::Inval)?;
        if node.kind() != FileKind::Symlink {
            return Err(Nfsstat4::Inval);
        }
        ctx.as_user(export, || ops::readlink(&node))
    })();
    status(result.map(|target| Linktext4::from(target).encode(reply.encoder())))
}

/// The current filehandle as a directory to change: `ROFS` on the
/// pseudo-filesystem or a read-only export, `NOTDIR` (`SYMLINK`) for a
/// file that is not one.
fn dir_to_change<'a>(ctx: &mut OpCtx<'a>) -> Result<File<'a>, Nfsstat4> {
    let dir = ctx.current_file(Nfsstat4::Rofs)?;
    require_dir(dir.node.kind())?;
    Ok(dir)
}

/// The `change` of directory `dir` (0 if its attributes cannot be read:
/// the client then sees a change).
fn change_of(export: &Export, dir: &Node) -> u64 {
    ops::getattr(&export.fs, dir).map_or(0, |a| change(a.ctime))
}

/// Runs `change` on directory `dir` and returns its change_info.
fn changing(
    export: &Export,
    dir: &Node,
    change: impl FnOnce() -> Result<(), Nfsstat4>,
) -> Result<ChangeInfo4, Nfsstat4> {
    let before = change_of(export, dir);
    change()?;
    Ok(ChangeInfo4 {
        atomic: false,
        before,
        after: change_of(export, dir),
    })
}

/// CREATE: a directory, symbolic link, device, socket or FIFO (regular
/// files are OPEN's: `BADTYPE`), with `createattrs`, made durable before
/// the reply; the new object becomes the current filehandle.
pub fn create(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Create(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let File { export, node: dir } = dir_to_change(ctx)?;
        if let CreateType4::Other(_) = args.objtype {
            return Err(Nfsstat4::Badtype);
        }
        let name = check_name(&args.objname)?;
        let (set, acl) = attrs::set_attrs_and_acl(
            ctx.minor,
            &args.createattrs,
            |o| uid_of(ctx, o),
            |g| gid_of(ctx, g),
        )?;
        if set.size.is_some() {
            // Only a regular file has a size to set.
            return Err(Nfsstat4::Inval);
        }
        if let CreateType4::Link(target) = &args.objtype {
            if target.as_bytes().is_empty() {
                return Err(Nfsstat4::Inval);
            }
        }
        ctx.writable(export)?;
        let mut made = None;
        let mut attrset = args.createattrs.attrmask.clone();
        let cinfo = changing(export, &dir, || {
            let (object, _) =
                ctx.as_user(export, || make(export, &dir, name, &args.objtype, &set))?;
            if let Some(aces) = &acl {
                // Before the create is made durable, with it.
                set_created_acl(ctx, export, &object, aces, &mut attrset);
            }
            export
                .metadata_sync
                .created(&dir, &object, &set)
                .map_err(from_fs)?;
            made = Some(object);
            Ok(())
        })?;
        let object = made.ok_or(Nfsstat4::Serverfault)?;
        ctx.current = Some(Fh4::file(export, object));
        Ok(CreateResOk4 { cinfo, attrset })
    })();
    status(result.map(|ok| ok.encode(reply.encoder())))
}

/// Makes what CREATE asks for.
fn make(
    export: &Export,
    dir: &Node,
    name: &[u8],
    what: &CreateType4,
    set: &SetAttrs,
) -> Result<(Node, dionfs_fs::Attr), FsError> {
    let special = |s| ops::mknod(&export.fs, dir, name, s, set, export.config.allow_devices);
    match what {
        CreateType4::Dir => ops::mkdir(&export.fs, dir, name, set),
        CreateType4::Link(target) => ops::symlink(&export.fs, dir, name, target.as_bytes(), set),
        CreateType4::Block(d) => special(SpecialFile::BlockDevice(d.specdata1, d.specdata2)),
        CreateType4::Char(d) => special(SpecialFile::CharDevice(d.specdata1, d.specdata2)),
        CreateType4::Socket => special(SpecialFile::Socket),
        CreateType4::Fifo => special(SpecialFile::Fifo),
        CreateType4::Other(_) => Err(FsError::BadType),
    }
}

/// REMOVE: unlinks a file, or removes an empty directory
/// (`fs::ops::remove_any`).
pub fn remove(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Remove(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let File { export, node: dir } = dir_to_change(ctx)?;
        // No file a client may reclaim goes away in the grace period.
        if ctx.nfs4.state.in_grace() {
            return Err(Nfsstat4::Grace);
        }
        let name = check_name(&args.target)?;
        ctx.writable(export)?;
        let _busy = delegation::enter_named(ctx, export, &dir, name)?;
        changing(export, &dir, || {
            ctx.as_user(export, || ops::remove_any(&export.fs, &dir, name))?;
            export.metadata_sync.removed(&dir).map_err(from_fs)
        })
    })();
    status(result.map(|cinfo| cinfo.encode(reply.encoder())))
}

/// The saved and current filehandles as two directories of one export
/// to change (RENAME's source and target, LINK's file and directory):
/// `XDEV` across exports or between the pseudo-filesystem and an export,
/// `ROFS` within the pseudo-filesystem.
fn saved_and_current<'a>(ctx: &mut OpCtx<'a>) -> Result<(File<'a>, File<'a>), Nfsstat4> {
    let saved = ctx.saved()?;
    let current = ctx.current()?;
    match (saved, current) {
        (Current::File(saved), Current::File(current)) => {
            if saved.export.config.id != current.export.config.id {
                return Err(Nfsstat4::Xdev);
            }
            Ok((saved, current))
        }
        (Current::Pseudo(_), Current::Pseudo(_)) => Err(Nfsstat4::Rofs),
        _ => Err(Nfsstat4::Xdev),
    }
}

pub fn rename(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Rename(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let (from, to) = saved_and_current(ctx)?;
        require_dir(from.node.kind())?;
        require_dir(to.node.kind())?;
        if ctx.nfs4.state.in_grace() {
            return Err(Nfsstat4::Grace);
        }
        let old = check_name(&args.oldname)?;
        let new = check_name(&args.newname)?;
        let export = from.export;
        ctx.writable(export)?;
        let _moved = delegation::enter_named(ctx, export, &from.node, old)?;
        let _replaced = delegation::enter_named(ctx, export, &to.node, new)?;
        let source_before = change_of(export, &from.node);
        let target_cinfo = changing(export, &to.node, || {
            ctx.as_user(export, || {
                ops::rename(&export.fs, &from.node, old, &to.node, new)
            })?;
            export
                .metadata_sync
                .renamed(&from.node, &to.node)
                .map_err(from_fs)
        })?;
        Ok(RenameResOk4 {
            source_cinfo: ChangeInfo4 {
                atomic: false,
                before: source_before,
                after: change_of(export, &from.node),
            },
            target_cinfo,
        })
    })();
    status(result.map(|ok| ok.encode(reply.encoder())))
}

/// LINK: a new name in the current directory for the saved file.
pub fn link(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Link(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let (file, dir) = saved_and_current(ctx)?;
        require_dir(dir.node.kind())?;
        if file.node.kind() == FileKind::Directory {
            return Err(Nfsstat4::Isdir);
        }
        let name = check_name(&args.newname)?;
        let export = dir.export;
        ctx.writable(export)?;
        let _busy = delegation::enter(ctx, file.node.fh(), Access::Write)?;
        changing(export, &dir.node, || {
            ctx.as_user(export, || ops::link(&file.node, &dir.node, name))?;
            export
                .metadata_sync
                .linked(&file.node, &dir.node)
                .map_err(from_fs)
        })
    })();
    status(result.map(|cinfo| cinfo.encode(reply.encoder())))
}

/// What a READDIR reply costs beside its entries: the cookie verifier,
/// the end of the entry list and `eof`.
const READDIR_HEAD: usize = 8 + 4 + 4;

/// Cookies 1 and 2 are `.` and `..`, never sent (as knfsd): a client
/// that sends one gets `BAD_COOKIE`. Pseudo directories number their
/// entries from 3.
const FIRST_COOKIE: u64 = 3;

/// Entries read from an export directory per `read_dir` call.
const BATCH: usize = 128;

/// A READDIR reply being filled up to `maxcount` and `dircount`.
struct Listing {
    entries: Vec<Entry4>,
    /// Bytes of the reply so far, and the bound.
    size: usize,
    max: usize,
    /// Bytes of cookies and names so far (what `dircount` bounds), and
    /// the bound (0: none).
    dir_size: usize,
    dircount: usize,
}

impl Listing {
    /// Adds an entry if it fits; says whether it did. The first entry
    /// that does not fit `maxcount` makes an empty listing `TOOSMALL`.
    fn push(&mut self, entry: Entry4) -> Result<bool, Nfsstat4> {
        let mut enc = Encoder::new();
        entry.encode(&mut enc);
        // The entry and the `value_follows` before it.
        let len = 4 + enc.len();
        let dir_len = 8 + 4 + entry.name.as_bytes().len().div_ceil(4) * 4;
        let over_dircount = self.dircount > 0 && self.dir_size + dir_len > self.dircount;
        if self.size + len > self.max || (over_dircount && !self.entries.is_empty()) {
            if self.entries.is_empty() {
                return Err(Nfsstat4::Toosmall);
            }
            return Ok(false);
        }
        self.size += len;
        self.dir_size += dir_len;
        self.entries.push(entry);
        Ok(true)
    }
}

/// READDIR (design section 7): the cookie verifier is zeros and is not
/// checked, `.` and `..` are left out, each entry carries the attributes
/// asked for (only `rdattr_error` for one whose lookup fails, when asked
/// for; else the READDIR fails). An export root inside the directory is
/// listed with its own attributes and its `mounted_on_fileid`; a pseudo
/// directory lists only what the client may see.
pub fn readdir(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Readdir(args) = op else {
        return Nfsstat4::Serverfault;
    };
    // Room left in the reply for this result (beside the status).
    let room = ctx.slot.map_or(usize::MAX, |slot| {
        (slot.max_response() as usize).saturating_sub(reply.encoder().len() + 8)
    });
    let result = (|| {
        let current = ctx.current()?;
        if let Current::File(file) = &current {
            require_dir(file.node.kind())?;
        }
        if args.cookie == 1 || args.cookie == 2 {
            return Err(Nfsstat4::BadCookie);
        }
        let max = (args.maxcount as usize).min(room);
        if max < READDIR_HEAD {
            return Err(Nfsstat4::Toosmall);
        }
        let mut listing = Listing {
            entries: Vec::new(),
            size: READDIR_HEAD,
            max,
            dir_size: 0,
            dircount: args.dircount as usize,
        };
        let eof = match current {
            Current::Pseudo(id) => list_pseudo(ctx, &args, id, &mut listing)?,
            Current::File(file) => list_export(ctx, &args, &file, &mut listing)?,
        };
        Ok(ReaddirResOk4 {
            cookieverf: Verifier4([0; 8]),
            reply: DirList4 {
                entries: listing.entries,
                eof,
            },
        })
    })();
    status(result.map(|ok| ok.encode(reply.encoder())))
}

/// An entry's attributes, or only `rdattr_error` if they could not be
/// had and the client asked for it.
fn entry_attrs(request: &Bitmap4, attrs: Result<Fattr4, Nfsstat4>) -> Result<Fattr4, Nfsstat4> {
    match attrs {
        Ok(fattr) => Ok(fattr),
        // A request the server cannot answer for any entry.
        Err(Nfsstat4::Inval) => Err(Nfsstat4::Inval),
        Err(status) => attrs::rdattr_error(request, status).ok_or(status),
    }
}

/// Lists pseudo directory `id`; returns `eof`.
fn list_pseudo(
    ctx: &mut OpCtx,
    args: &ReaddirArgs4,
    id: dionfs_fs::handle::PathId,
    listing: &mut Listing,
) -> Result<bool, Nfsstat4> {
    let ns = ctx.namespace();
    let dir = ns.node(id).ok_or(Nfsstat4::Stale)?;
    let request = &args.attr_request;
    for (i, entry) in dir.readdir(ctx.client()).iter().enumerate() {
        let cookie = FIRST_COOKIE + i as u64;
        if cookie <= args.cookie {
            continue;
        }
        let fattr = match entry.found {
            Found::Pseudo(child) => {
                with_pseudo(ctx, request, child, |src| attrs::getattr(request, src))
            }
            Found::ExportRoot(export) => export_root_attrs(ctx, request, export, entry.fileid),
            Found::NotFound => continue,
        };
        let entry = Entry4 {
            cookie,
            name: Component4::from(entry.name.to_vec()),
            attrs: entry_attrs(request, fattr)?,
        };
        if !listing.push(entry)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The attributes of the root of export `id`, reached from a directory
/// entry whose fileid is `mounted_on`.
fn export_root_attrs(
    ctx: &OpCtx,
    request: &Bitmap4,
    id: u16,
    mounted_on: u64,
) -> Result<Fattr4, Nfsstat4> {
    let export = ctx.exports.by_id(id).ok_or(Nfsstat4::Stale)?;
    let root = export
        .fs
        .resolve(export.fs.root_handle())
        .map_err(from_fs)?;
    let attr = ops::getattr(&export.fs, &root).map_err(from_fs)?;
    with_file(
        ctx,
        request,
        export,
        &root,
        &attr,
        Some(mounted_on),
        |src| attrs::getattr(request, src),
    )
}

/// Lists directory `file` of an export from `args.cookie`; returns
/// `eof`.
fn list_export(
    ctx: &mut OpCtx,
    args: &ReaddirArgs4,
    file: &File,
    listing: &mut Listing,
) -> Result<bool, Nfsstat4> {
    let export = file.export;
    let request = &args.attr_request;
    let ns = ctx.namespace();
    let nested = ns.has_nested(export.config.id);
    let mut cookie = args.cookie;
    loop {
        let batch = ctx.as_user(export, || {
            dir::read_dir(&export.fs, &file.node, cookie, BATCH)
        })?;
        for e in &batch.entries {
            cookie = e.cookie;
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let fattr = if request.is_empty() {
                Ok(Fattr4::default())
            } else {
                ctx.as_user(export, || export.fs.lookup(&file.node, &e.name))
                    .and_then(|(node, attr)| {
                        let inner = (nested && attr.kind == FileKind::Directory)
                            .then(|| {
                                ns.crossing(export.config.id, attr.fsid, attr.fileid, ctx.client())
                            })
                            .flatten();
                        match inner {
                            Some(inner) => export_root_attrs(ctx, request, inner, e.fileid),
                            None => with_file(ctx, request, export, &node, &attr, None, |src| {
                                attrs::getattr(request, src)
                            }),
                        }
                    })
            };
            let entry = Entry4 {
                cookie: e.cookie,
                name: Component4::from(e.name.clone()),
                attrs: entry_attrs(request, fattr)?,
            };
            if !listing.push(entry)? {
                return Ok(false);
            }
        }
        if batch.eof {
            return Ok(true);
        }
        if batch.entries.is_empty() {
            return Ok(true);
        }
    }
}
