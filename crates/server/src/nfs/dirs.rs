//! LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK,
//! READDIR, READDIRPLUS (RFC 1813 sections 3.3.3, 3.3.8-3.3.17).

use dionfs_core::delegations::Access;
use dionfs_fs::{dir, ops, Attr, CreateHow, FsError, Node, SetAttrs, SpecialFile};
use dionfs_proto::nfs3::*;

use super::attrs::attr_of;
use super::convert::{post_op, set_attrs, wcc};
use super::status::from_fs;
use super::Ctx;
use crate::reply::{success, success_encoder};
use dionfs_core::exports::Export;
use dionfs_transport::Reply;

pub fn lookup(ctx: &Ctx, a: LookupArgs) -> LookupRes {
    let fail = |s, dir: Option<&Attr>| {
        NfsRes::fail(
            s,
            LookupResFail {
                dir_attributes: post_op(dir),
            },
        )
    };
    let (export, dir) = match ctx.resolve(&a.what.dir) {
        Ok(x) => x,
        Err(s) => return fail(s, None),
    };
    let dir_attr = attr_of(export, &dir);
    match ctx.as_user(export, || export.fs.lookup(&dir, &a.what.name.0)) {
        Ok((node, attr)) => match NfsFh3::new(node.fh().to_vec()) {
            Ok(object) => NfsRes::Ok(LookupResOk {
                object,
                obj_attributes: post_op(Some(&attr)),
                dir_attributes: post_op(dir_attr.as_ref()),
            }),
            Err(_) => fail(NfsStat3::ServerFault, dir_attr.as_ref()),
        },
        Err(s) => fail(s, dir_attr.as_ref()),
    }
}

/// The shared shape of CREATE, MKDIR, SYMLINK and MKNOD: resolve the
/// directory, refuse on a read-only export, make the object as the caller
/// with `attrs`, make it durable, answer with its handle, its attributes and
/// the directory's wcc data.
fn new_object(
    ctx: &Ctx,
    at: &DirOpArgs3,
    attrs: &SetAttrs,
    make: impl FnOnce(&Export, &Node, &[u8]) -> Result<(Node, Attr), FsError>,
) -> NfsRes<NewObjResOk, DirWcc> {
    let fail = |s, before: Option<&Attr>, after: Option<&Attr>| {
        NfsRes::fail(
            s,
            DirWcc {
                dir_wcc: wcc(before, after),
            },
        )
    };
    let (export, dir) = match ctx.resolve(&at.dir) {
        Ok(x) => x,
        Err(s) => return fail(s, None, None),
    };
    let before = attr_of(export, &dir);
    if let Err(s) = ctx.writable(export) {
        return fail(s, before.as_ref(), before.as_ref());
    }
    let made = ctx
        .as_user(export, || make(export, &dir, &at.name.0))
        // RFC 1813 3.3.8: on stable storage before the reply.
        .and_then(|(node, attr)| {
            let synced = export.metadata_sync.created(&dir, &node, attrs);
            synced.map(|()| (node, attr)).map_err(from_fs)
        });
    let after = attr_of(export, &dir);
    match made {
        Ok((node, attr)) => NfsRes::Ok(NewObjResOk {
            obj: PostOpFh3(NfsFh3::new(node.fh().to_vec()).ok()),
            obj_attributes: post_op(Some(&attr)),
            dir_wcc: wcc(before.as_ref(), after.as_ref()),
        }),
        Err(s) => fail(s, before.as_ref(), after.as_ref()),
    }
}

pub fn create(ctx: &Ctx, a: CreateArgs) -> CreateRes {
    let how = match &a.how {
        CreateHow3::Unchecked(s) => CreateHow::Unchecked(set_attrs(s)),
        CreateHow3::Guarded(s) => CreateHow::Guarded(set_attrs(s)),
        CreateHow3::Exclusive(v) => CreateHow::Exclusive(v.0),
    };
    let attrs = match &how {
        CreateHow::Unchecked(s) | CreateHow::Guarded(s) => s.clone(),
        CreateHow::Exclusive(_) => SetAttrs::default(),
    };
    new_object(ctx, &a.target, &attrs, |x, dir, name| {
        ops::create(&x.fs, dir, name, &how)
    })
}

pub fn mkdir(ctx: &Ctx, a: MkdirArgs) -> MkdirRes {
    let attrs = set_attrs(&a.attributes);
    new_object(ctx, &a.target, &attrs, |x, dir, name| {
        ops::mkdir(&x.fs, dir, name, &attrs)
    })
}

pub fn symlink(ctx: &Ctx, a: SymlinkArgs) -> SymlinkRes {
    let attrs = set_attrs(&a.symlink.symlink_attributes);
    let target = &a.symlink.symlink_data.0;
    new_object(ctx, &a.target, &attrs, |x, dir, name| {
        ops::symlink(&x.fs, dir, name, target, &attrs)
    })
}

pub fn mknod(ctx: &Ctx, a: MknodArgs) -> MknodRes {
    let (special, attrs) = match &a.what {
        MknodData3::Chr(d) => (
            SpecialFile::CharDevice(d.spec.specdata1, d.spec.specdata2),
            &d.dev_attributes,
        ),
        MknodData3::Blk(d) => (
            SpecialFile::BlockDevice(d.spec.specdata1, d.spec.specdata2),
            &d.dev_attributes,
        ),
        MknodData3::Sock(s) => (SpecialFile::Socket, s),
        MknodData3::Fifo(s) => (SpecialFile::Fifo, s),
        MknodData3::Other(_) => {
            return NfsRes::fail(NfsStat3::BadType, DirWcc::default());
        }
    };
    let attrs = set_attrs(attrs);
    new_object(ctx, &a.target, &attrs, |x, dir, name| {
        ops::mknod(&x.fs, dir, name, special, &attrs, x.config.allow_devices)
    })
}

/// REMOVE and RMDIR: a change to one directory (made durable before the
/// reply, RFC 1813 3.3.12) with wcc data either way.
fn unlink(
    ctx: &Ctx,
    at: &DirOpArgs3,
    op: impl FnOnce(&Export, &Node, &[u8]) -> Result<(), FsError>,
) -> NfsRes<DirWcc, DirWcc> {
    let (export, dir) = match ctx.resolve(&at.dir) {
        Ok(x) => x,
        Err(s) => return NfsRes::fail(s, DirWcc::default()),
    };
    let before = attr_of(export, &dir);
    let busy = ctx.delegation_named(export, &dir, &at.name.0);
    let result = ctx
        .writable(export)
        .and(busy)
        .and_then(|_busy| ctx.as_user(export, || op(export, &dir, &at.name.0)))
        .and_then(|()| export.metadata_sync.removed(&dir).map_err(from_fs));
    let dir_wcc = DirWcc {
        dir_wcc: wcc(before.as_ref(), attr_of(export, &dir).as_ref()),
    };
    match result {
        Ok(()) => NfsRes::Ok(dir_wcc),
        Err(s) => NfsRes::fail(s, dir_wcc),
    }
}

pub fn remove(ctx: &Ctx, a: RemoveArgs) -> RemoveRes {
    unlink(ctx, &a.object, |x, dir, name| ops::remove(&x.fs, dir, name))
}

pub fn rmdir(ctx: &Ctx, a: RmdirArgs) -> RmdirRes {
    unlink(ctx, &a.object, |_, dir, name| ops::rmdir(dir, name))
}

pub fn rename(ctx: &Ctx, a: RenameArgs) -> RenameRes {
    let resolved = ctx
        .resolve(&a.from.dir)
        .and_then(|(x, from)| Ok((x, from, ctx.resolve(&a.to.dir)?)));
    let (export, from_dir, (to_export, to_dir)) = match resolved {
        Ok(x) => x,
        Err(s) => return NfsRes::fail(s, RenameWcc::default()),
    };
    let from_before = attr_of(export, &from_dir);
    let to_before = attr_of(export, &to_dir);
    let result = if export.config.id != to_export.config.id {
        Err(NfsStat3::XDev)
    } else {
        let moved = ctx.delegation_named(export, &from_dir, &a.from.name.0);
        let replaced = ctx.delegation_named(export, &to_dir, &a.to.name.0);
        ctx.writable(export)
            .and_then(|()| Ok((moved?, replaced?)))
            .and_then(|_held| {
                ctx.as_user(export, || {
                    ops::rename(&export.fs, &from_dir, &a.from.name.0, &to_dir, &a.to.name.0)
                })
            })
            // RFC 1813 3.3.14: both directories durable before the reply.
            .and_then(|()| {
                let synced = export.metadata_sync.renamed(&from_dir, &to_dir);
                synced.map_err(from_fs)
            })
    };
    let wccs = RenameWcc {
        fromdir_wcc: wcc(from_before.as_ref(), attr_of(export, &from_dir).as_ref()),
        todir_wcc: wcc(to_before.as_ref(), attr_of(export, &to_dir).as_ref()),
    };
    match result {
        Ok(()) => NfsRes::Ok(wccs),
        Err(s) => NfsRes::fail(s, wccs),
    }
}

pub fn link(ctx: &Ctx, a: LinkArgs) -> LinkRes {
    let resolved = ctx
        .resolve(&a.file)
        .and_then(|(x, file)| Ok((x, file, ctx.resolve(&a.link.dir)?)));
    let (export, file, (dir_export, dir)) = match resolved {
        Ok(x) => x,
        Err(s) => return NfsRes::fail(s, LinkWcc::default()),
    };
    let dir_before = attr_of(export, &dir);
    let result = if export.config.id != dir_export.config.id {
        Err(NfsStat3::XDev)
    } else {
        ctx.writable(export)
            .and_then(|()| ctx.delegation(file.fh(), Access::Write))
            .and_then(|_busy| ctx.as_user(export, || ops::link(&file, &dir, &a.link.name.0)))
            // RFC 1813 3.3.15: durable before the reply.
            .and_then(|()| export.metadata_sync.linked(&file, &dir).map_err(from_fs))
    };
    let wccs = LinkWcc {
        file_attributes: post_op(attr_of(export, &file).as_ref()),
        linkdir_wcc: wcc(dir_before.as_ref(), attr_of(export, &dir).as_ref()),
    };
    match result {
        Ok(()) => NfsRes::Ok(wccs),
        Err(s) => NfsRes::fail(s, wccs),
    }
}

/// The smallest encoded directory entry (an empty name): an upper bound on
/// how many entries a reply of a given size can hold.
const MIN_ENTRY_LEN: u32 = 24;

/// A READDIR/READDIRPLUS failure reply.
fn readdir_fail(ctx: &Ctx, s: NfsStat3, dir: Option<&Attr>) -> Reply {
    success(
        ctx.call.xid,
        &ReaddirRes::fail(
            s,
            ReaddirResFail {
                dir_attributes: post_op(dir),
            },
        ),
    )
}

/// Resolves the directory and checks the client's cookie verifier.
fn open_listing<'a>(
    ctx: &Ctx<'a>,
    fh: &NfsFh3,
    cookie: u64,
    verf: CookieVerf3,
) -> Result<(&'a Export, Node, Option<Attr>, CookieVerf3), Reply> {
    let (export, dir) = ctx.resolve(fh).map_err(|s| readdir_fail(ctx, s, None))?;
    let attr = attr_of(export, &dir);
    let ours = CookieVerf3(dir::cookie_verifier(&dir));
    // RFC 1813 3.3.16: a cookie from another listing generation is stale.
    if cookie != 0 && verf != ours && verf != CookieVerf3::default() {
        return Err(readdir_fail(ctx, NfsStat3::BadCookie, attr.as_ref()));
    }
    Ok((export, dir, attr, ours))
}

pub fn readdir(ctx: &Ctx, a: ReaddirArgs) -> Reply {
    let (export, dir, attr, verf) = match open_listing(ctx, &a.dir, a.cookie, a.cookieverf) {
        Ok(x) => x,
        Err(reply) => return reply,
    };
    let count = a.count.min(export.config.max_transfer);
    let max_entries = (count / MIN_ENTRY_LEN + 1) as usize;
    let batch = match ctx.as_user(export, || {
        dir::read_dir(&export.fs, &dir, a.cookie, max_entries)
    }) {
        Ok(b) => b,
        Err(s) => return readdir_fail(ctx, s, attr.as_ref()),
    };
    let mut enc = ReaddirEncoder::new(
        success_encoder(ctx.call.xid),
        &post_op(attr.as_ref()),
        verf,
        count,
    );
    let mut all = true;
    for e in &batch.entries {
        if !enc.push(e.fileid, &e.name, e.cookie) {
            all = false;
            break;
        }
    }
    if enc.is_empty() && !batch.entries.is_empty() {
        return readdir_fail(ctx, NfsStat3::TooSmall, attr.as_ref());
    }
    Reply::new(enc.finish(all && batch.eof).into_vec())
}

pub fn readdirplus(ctx: &Ctx, a: ReaddirplusArgs) -> Reply {
    let (export, dir, attr, verf) = match open_listing(ctx, &a.dir, a.cookie, a.cookieverf) {
        Ok(x) => x,
        Err(reply) => return reply,
    };
    let maxcount = a.maxcount.min(export.config.max_transfer);
    let max_entries = (maxcount.min(a.dircount.max(MIN_ENTRY_LEN)) / MIN_ENTRY_LEN + 1) as usize;
    let batch = match ctx.as_user(export, || {
        dir::read_dir(&export.fs, &dir, a.cookie, max_entries)
    }) {
        Ok(b) => b,
        Err(s) => return readdir_fail(ctx, s, attr.as_ref()),
    };
    let mut enc = ReaddirplusEncoder::new(
        success_encoder(ctx.call.xid),
        &post_op(attr.as_ref()),
        verf,
        a.dircount,
        maxcount,
    );
    let mut all = true;
    for e in &batch.entries {
        // An entry that vanished since it was listed goes out without
        // attributes and handle (both are optional in entryplus3).
        let found = ctx.as_user(export, || export.fs.lookup(&dir, &e.name)).ok();
        let (attrs, fh) = match &found {
            Some((node, attr)) => (
                post_op(Some(attr)),
                PostOpFh3(NfsFh3::new(node.fh().to_vec()).ok()),
            ),
            None => (post_op(None), PostOpFh3(None)),
        };
        if !enc.push(e.fileid, &e.name, e.cookie, &attrs, &fh) {
            all = false;
            break;
        }
    }
    if enc.is_empty() && !batch.entries.is_empty() {
        return readdir_fail(ctx, NfsStat3::TooSmall, attr.as_ref());
    }
    Reply::new(enc.finish(all && batch.eof).into_vec())
}
