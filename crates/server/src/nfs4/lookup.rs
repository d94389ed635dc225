//! LOOKUP, LOOKUPP, SECINFO and SECINFO_NO_NAME (RFC 8881 §18.13,
//! §18.14, §18.29, §18.45): names across the pseudo-filesystem and into
//! and out of exports (design section 6). The tree itself is
//! [`super::namespace`].

use dionfs_proto::nfs4::{ArgOp, Component4, Nfsstat4, Secinfo4, SecinfoResOk4, SecinfoStyle4};
use dionfs_xdr::Encode;

use super::compound::OpCtx;
use super::fh::{require_dir, Current, Fh4, File};
use super::namespace::ExportParent;
use super::reply::CompoundReply;

/// Linux `NAME_MAX`, NFSv4's `maxname` here.
const NAME_MAX: usize = 255;

/// `AUTH_NONE` and `AUTH_SYS`.
const AUTH_NONE: u32 = 0;
const AUTH_SYS: u32 = 1;

/// The status of an op that ran as `result`.
pub(super) fn status(result: Result<(), Nfsstat4>) -> Nfsstat4 {
    result.err().unwrap_or(Nfsstat4::Ok)
}

/// A name a client gives, checked as knfsd's `check_filename` does, and
/// for UTF-8 (RFC 8881 §14.1.1): empty or not UTF-8 is `INVAL`, past 255
/// bytes `NAMETOOLONG`, `.`, `..` or one with a `/` `BADNAME`.
pub fn check_name(name: &Component4) -> Result<&[u8], Nfsstat4> {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Err(Nfsstat4::Inval);
    }
    if bytes.len() > NAME_MAX {
        return Err(Nfsstat4::Nametoolong);
    }
    match std::str::from_utf8(bytes) {
        // Noncharacters (U+FFFE, U+FDD0...) are not for interchange
        // (pynfs RNM8 sends U+FFFE).
        Ok(s) if !s.chars().any(is_noncharacter) => {}
        _ => return Err(Nfsstat4::Inval),
    }
    if bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(Nfsstat4::Badname);
    }
    Ok(bytes)
}

/// Unicode's noncharacters: U+FDD0 to U+FDEF, and the last two code
/// points of every plane.
fn is_noncharacter(c: char) -> bool {
    let c = u32::from(c);
    (0xFDD0..=0xFDEF).contains(&c) || c & 0xFFFE == 0xFFFE
}

/// What `name` in the current directory is: a pseudo directory, an
/// export's root the client may use (crossing into it), or a file.
fn find(ctx: &mut OpCtx, name: &Component4) -> Result<Fh4, Nfsstat4> {
    let current = ctx.current()?;
    match &current {
        Current::Pseudo(_) => {}
        Current::File(file) => require_dir(file.node.kind())?,
    }
    // `.` is the directory itself. knfsd answers BADNAME (and pynfs
    // LOOK8 wants NOENT or BADNAME), but nfs-rs 0.8.7 looks up `.` for
    // the root of what it mounted before every operation there, so a
    // server that refuses it cannot be used by that client at all. Its
    // 4.0 client copes with BADNAME, as NFS-Ganesha answers it there.
    if name.as_bytes() == b"." && ctx.minor != 0 {
        return Ok(match current {
            Current::Pseudo(id) => Fh4::Pseudo(id),
            Current::File(File { export, node }) => Fh4::File {
                export: export.config.id,
                fh: node.fh().to_vec(),
                node: Some(node),
                file: None,
            },
        });
    }
    let name = check_name(name)?;
    match current {
        Current::Pseudo(id) => {
            let ns = ctx.namespace();
            let dir = ns.node(id).ok_or(Nfsstat4::Stale)?;
            let fh =
                Fh4::found(dir.lookup(name, ctx.client()), ctx.exports).ok_or(Nfsstat4::Noent)?;
            if let Fh4::File { export, .. } = &fh {
                // `secure` is checked as the client crosses in.
                ctx.export(*export)?;
            }
            Ok(fh)
        }
        Current::File(File { export, node }) => {
            let (found, attr) = ctx.as_user(export, || export.fs.lookup(&node, name))?;
            let id = export.config.id;
            if attr.kind == dionfs_fs::FileKind::Directory {
                let ns = ctx.namespace();
                if ns.has_nested(id) {
                    if let Some(inner) = ns.crossing(id, attr.fsid, attr.fileid, ctx.client()) {
                        let inner = ctx.export(inner)?;
                        return Ok(Fh4::File {
                            export: inner.config.id,
                            fh: inner.fs.root_handle().to_vec(),
                            node: None,
                            file: None,
                        });
                    }
                }
            }
            Ok(Fh4::file(export, found))
        }
    }
}

pub fn lookup(ctx: &mut OpCtx, op: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Lookup(args) = op else {
        return Nfsstat4::Serverfault;
    };
    status(find(ctx, &args.objname).map(|fh| ctx.current = Some(fh)))
}

/// The directory above the current one: up the pseudo-filesystem, out of
/// an export's root to where it is mounted, or `..` inside an export.
/// `NOENT` above the client's root.
fn parent(ctx: &mut OpCtx) -> Result<Fh4, Nfsstat4> {
    match ctx.current()? {
        Current::Pseudo(id) => {
            let ns = ctx.namespace();
            let dir = ns.node(id).ok_or(Nfsstat4::Stale)?;
            dir.parent().map(Fh4::Pseudo).ok_or(Nfsstat4::Noent)
        }
        Current::File(file) => {
            require_dir(file.node.kind())?;
            let File { export, node } = file;
            if node.fh() != export.fs.root_handle() {
                let (up, _) = ctx.as_user(export, || export.fs.lookup(&node, b".."))?;
                return Ok(Fh4::file(export, up));
            }
            let ns = ctx.namespace();
            match ns.export_parent(export.config.id, ctx.client()) {
                None => Err(Nfsstat4::Stale),
                Some(ExportParent::None) => Err(Nfsstat4::Noent),
                Some(ExportParent::Pseudo(id)) => Ok(Fh4::Pseudo(id)),
                Some(ExportParent::InExport { export, dir }) => {
                    let outer = ctx.export(export)?;
                    let mut at = outer
                        .fs
                        .resolve(outer.fs.root_handle())
                        .map_err(super::status::from_fs)?;
                    for name in &dir {
                        at = ctx.as_user(outer, || outer.fs.lookup(&at, name))?.0;
                    }
                    Ok(Fh4::file(outer, at))
                }
            }
        }
    }
}

pub fn lookupp(ctx: &mut OpCtx, _: ArgOp, _: &mut CompoundReply) -> Nfsstat4 {
    status(parent(ctx).map(|fh| ctx.current = Some(fh)))
}

/// What every name is served with: AUTH_SYS, and AUTH_NONE.
fn flavors(reply: &mut CompoundReply) {
    SecinfoResOk4(vec![
        Secinfo4::Flavor(AUTH_SYS),
        Secinfo4::Flavor(AUTH_NONE),
    ])
    .encode(reply.encoder());
}

/// SECINFO: the flavours of a name that exists in the current directory.
/// It consumes the current filehandle (RFC 8881 §2.6.3.1.1.8).
pub fn secinfo(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Secinfo(args) = op else {
        return Nfsstat4::Serverfault;
    };
    ctx.secinfo = true;
    let found = find(ctx, &args.name);
    ctx.secinfo = false;
    status(found.map(|_| {
        ctx.current = None;
        flavors(reply);
    }))
}

/// SECINFO_NO_NAME: the flavours of the current filehandle or of its
/// parent (`NOENT` above the client's root). It consumes the current
/// filehandle, so a GETFH after it is `NOFILEHANDLE` (pynfs SECNN2).
pub fn secinfo_no_name(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::SecinfoNoName(style) = op else {
        return Nfsstat4::Serverfault;
    };
    ctx.secinfo = true;
    let checked = match style {
        SecinfoStyle4::CurrentFh => ctx.current().map(|_| ()),
        SecinfoStyle4::Parent => parent(ctx).map(|_| ()),
    };
    ctx.secinfo = false;
    status(checked.map(|()| {
        ctx.current = None;
        flavors(reply);
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_knfsd_does() {
        let name = |b: &[u8]| Component4::from(b.to_vec());
        assert_eq!(check_name(&name(b"a")), Ok(&b"a"[..]));
        assert_eq!(check_name(&name(b"")), Err(Nfsstat4::Inval));
        assert_eq!(check_name(&name(&[b'x'; 256])), Err(Nfsstat4::Nametoolong));
        assert_eq!(check_name(&name(&[b'x'; 255])).map(<[u8]>::len), Ok(255));
        assert_eq!(check_name(&name(b"\xff\xfe")), Err(Nfsstat4::Inval));
        assert_eq!(check_name(&name(b"\xef\xbf\xbe")), Err(Nfsstat4::Inval));
        assert_eq!(check_name(&name(b"\xed\xa0\x80")), Err(Nfsstat4::Inval));
        assert_eq!(check_name(&name("é".as_bytes())), Ok("é".as_bytes()));
        assert_eq!(check_name(&name(b".")), Err(Nfsstat4::Badname));
        assert_eq!(check_name(&name(b"..")), Err(Nfsstat4::Badname));
        assert_eq!(check_name(&name(b"a/b")), Err(Nfsstat4::Badname));
    }
}
