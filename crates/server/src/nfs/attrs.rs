//! GETATTR, SETATTR, ACCESS, READLINK, FSSTAT, FSINFO, PATHCONF
//! (RFC 1813 sections 3.3.1-3.3.5, 3.3.18-3.3.20).

use dionfs_core::delegations::Access;
use dionfs_fs::{access3, ops, Attr, Node, OpenFile};
use dionfs_proto::nfs3::*;
use dionfs_proto::Void;

use super::convert::{fattr3, nfstime3, post_op, set_attrs, wcc};
use super::status::from_fs;
use super::Ctx;
use dionfs_core::exports::Export;

/// Attributes of a file the caller already holds open (READ, WRITE,
/// COMMIT): no second trip through the handle and the cache.
pub(super) fn open_file_attr(export: &Export, file: &OpenFile) -> Option<Attr> {
    ops::file_attr(&export.fs, file).ok()
}

/// Attributes for a reply; failing to get them is not the call's failure.
pub(super) fn attr_of(export: &Export, node: &Node) -> Option<Attr> {
    ops::getattr(&export.fs, node).ok()
}

pub fn getattr(ctx: &Ctx, a: GetattrArgs) -> GetattrRes {
    let attr = ctx
        .resolve(&a.object)
        .and_then(|(x, node)| ops::getattr(&x.fs, &node).map_err(from_fs));
    match attr {
        Ok(attr) => NfsRes::Ok(GetattrResOk {
            obj_attributes: fattr3(&attr),
        }),
        Err(status) => NfsRes::fail(status, Void),
    }
}

pub fn setattr(ctx: &Ctx, a: SetattrArgs) -> SetattrRes {
    let fail = |status, before: Option<&Attr>, after: Option<&Attr>| {
        NfsRes::fail(
            status,
            SetattrResFail {
                obj_wcc: wcc(before, after),
            },
        )
    };
    let (export, node) = match ctx.resolve(&a.object) {
        Ok(x) => x,
        Err(s) => return fail(s, None, None),
    };
    let before = attr_of(export, &node);
    if let Err(s) = ctx.writable(export) {
        return fail(s, before.as_ref(), before.as_ref());
    }
    // The guard (RFC 1813 3.3.2): apply only if ctime is what the client saw.
    if let (Some(guard), Some(b)) = (a.guard.0, before.as_ref()) {
        if nfstime3(b.ctime) != guard {
            return fail(NfsStat3::NotSync, before.as_ref(), before.as_ref());
        }
    }
    let set = set_attrs(&a.new_attributes);
    let _busy = if set.is_empty() {
        None
    } else {
        match ctx.delegation(a.object.as_bytes(), Access::Write) {
            Ok(busy) => Some(busy),
            Err(s) => return fail(s, before.as_ref(), before.as_ref()),
        }
    };
    // A regular file's size goes through its one data-plane file, under
    // its range lock (`ops::set_size`), with the caller's credentials
    // like everything else here. RFC 1813 3.3.2: durable before the reply.
    let result = if set.is_empty() {
        Ok(())
    } else {
        ctx.as_user(export, || ops::setattr(&export.fs, &node, &set).map(|_| ()))
            .and_then(|()| export.metadata_sync.attrs_changed(&node).map_err(from_fs))
    };
    let after = attr_of(export, &node);
    match result {
        Ok(()) => NfsRes::Ok(SetattrResOk {
            obj_wcc: wcc(before.as_ref(), after.as_ref()),
        }),
        Err(s) => fail(s, before.as_ref(), after.as_ref()),
    }
}

pub fn access(ctx: &Ctx, a: AccessArgs) -> AccessRes {
    let (export, node) = match ctx.resolve(&a.object) {
        Ok(x) => x,
        Err(s) => {
            return NfsRes::fail(
                s,
                AccessResFail {
                    obj_attributes: post_op(None),
                },
            )
        }
    };
    let attr = attr_of(export, &node);
    match ctx.as_user(export, || ops::access(&node, a.access)) {
        Ok(mut granted) => {
            if ctx.options(export).read_only() {
                granted &= !(access3::MODIFY | access3::EXTEND | access3::DELETE);
            }
            NfsRes::Ok(AccessResOk {
                obj_attributes: post_op(attr.as_ref()),
                access: granted,
            })
        }
        Err(s) => NfsRes::fail(
            s,
            AccessResFail {
                obj_attributes: post_op(attr.as_ref()),
            },
        ),
    }
}

pub fn readlink(ctx: &Ctx, a: ReadlinkArgs) -> ReadlinkRes {
    let fail = |s, attr: Option<&Attr>| {
        NfsRes::fail(
            s,
            ReadlinkResFail {
                symlink_attributes: post_op(attr),
            },
        )
    };
    let (export, node) = match ctx.resolve(&a.symlink) {
        Ok(x) => x,
        Err(s) => return fail(s, None),
    };
    let attr = attr_of(export, &node);
    match ctx.as_user(export, || ops::readlink(&node)) {
        Ok(target) => NfsRes::Ok(ReadlinkResOk {
            symlink_attributes: post_op(attr.as_ref()),
            data: NfsPath3(target),
        }),
        Err(s) => fail(s, attr.as_ref()),
    }
}

pub fn fsstat(ctx: &Ctx, a: FsstatArgs) -> FsstatRes {
    let fail = |s| {
        NfsRes::fail(
            s,
            FsstatResFail {
                obj_attributes: post_op(None),
            },
        )
    };
    let (export, node) = match ctx.resolve(&a.fsroot) {
        Ok(x) => x,
        Err(s) => return fail(s),
    };
    match ops::fsstat(&node) {
        Ok(st) => NfsRes::Ok(FsstatResOk {
            obj_attributes: post_op(attr_of(export, &node).as_ref()),
            tbytes: st.total_bytes,
            fbytes: st.free_bytes,
            abytes: st.avail_bytes,
            tfiles: st.total_files,
            ffiles: st.free_files,
            afiles: st.avail_files,
            invarsec: 0,
        }),
        Err(e) => fail(from_fs(e)),
    }
}

/// Preferred READDIR size: large enough that a 2,000-entry directory takes a
/// handful of round trips.
const DTPREF: u32 = 64 * 1024;

pub fn fsinfo(ctx: &Ctx, a: FsinfoArgs) -> FsinfoRes {
    let (export, node) = match ctx.resolve(&a.fsroot) {
        Ok(x) => x,
        Err(s) => {
            return NfsRes::fail(
                s,
                FsinfoResFail {
                    obj_attributes: post_op(None),
                },
            )
        }
    };
    let max = export.config.max_transfer;
    NfsRes::Ok(FsinfoResOk {
        obj_attributes: post_op(attr_of(export, &node).as_ref()),
        rtmax: max,
        rtpref: max,
        rtmult: 4096,
        wtmax: max,
        wtpref: max,
        wtmult: 4096,
        dtpref: DTPREF,
        maxfilesize: i64::MAX as u64,
        time_delta: NfsTime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
    })
}

pub fn pathconf(ctx: &Ctx, a: PathconfArgs) -> PathconfRes {
    let (export, node) = match ctx.resolve(&a.object) {
        Ok(x) => x,
        Err(s) => {
            return NfsRes::fail(
                s,
                PathconfResFail {
                    obj_attributes: post_op(None),
                },
            )
        }
    };
    let pc = ops::pathconf(&node);
    NfsRes::Ok(PathconfResOk {
        obj_attributes: post_op(attr_of(export, &node).as_ref()),
        linkmax: pc.link_max,
        name_max: pc.name_max,
        no_trunc: pc.no_trunc,
        chown_restricted: pc.chown_restricted,
        case_insensitive: pc.case_insensitive,
        case_preserving: pc.case_preserving,
    })
}
