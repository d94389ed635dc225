//! GETXATTR, SETXATTR, LISTXATTRS and REMOVEXATTR (RFC 8276, NFSv4.2):
//! the `user.` extended attributes of the current file, through
//! `fs::ops`'s xattr calls as the squashed caller (the kernel checks
//! that the caller may read or write the file). Names travel without the
//! `user.` prefix. A change is `ROFS` on a read-only export and made
//! durable (`MetadataSync`) like any change of attributes; it moves the
//! file's ctime, and so its `change`, which its `change_info4` reports.
//! Nothing here touches data, so checksums are not involved.

use dionfs_core::exports::Export;
use dionfs_fs::ops::{self, XattrError, XattrSet};
use dionfs_fs::{FsError, Node};
use dionfs_proto::nfs4::{
    ArgOp, ChangeInfo4, Component4, ListxattrsResOk4, Nfsstat4, SetxattrOption4, XattrValue4,
};
use dionfs_xdr::Encode;

use super::attrs::change;
use super::compound::OpCtx;
use super::fh::File;
use super::lookup::status;
use super::reply::CompoundReply;
use super::status::from_fs;

/// The longest attribute name Linux keeps (`XATTR_NAME_MAX`), with its
/// `user.` prefix.
const XATTR_NAME_MAX: usize = 255;

/// Bytes of a LISTXATTRS result besides its names: the cookie, the
/// array's count and `eof`.
const LIST_OVERHEAD: usize = 8 + 4 + 4;

/// A client's attribute name: empty is `INVAL`, longer than Linux keeps
/// with its prefix `NAMETOOLONG`. (RFC 8276 asks for UTF-8 names but
/// Linux keeps any bytes; a NUL byte is refused by `fs::ops`.)
fn check_key(key: &Component4) -> Result<&[u8], Nfsstat4> {
    let name = key.as_bytes();
    if name.is_empty() {
        return Err(Nfsstat4::Inval);
    }
    if name.len() + b"user.".len() > XATTR_NAME_MAX {
        return Err(Nfsstat4::Nametoolong);
    }
    Ok(name)
}

/// The status of an xattr call's failure (RFC 8276 section 8.4): no such
/// attribute is `NOXATTR`, a value past what the file system keeps
/// `XATTR2BIG`, a file system without user attributes `NOTSUPP`.
fn from_xattr(e: XattrError) -> Nfsstat4 {
    match e {
        XattrError::NoAttr => Nfsstat4::Noxattr,
        XattrError::Fs(FsError::FBig) => Nfsstat4::Xattr2big,
        XattrError::Fs(e) => from_fs(e),
    }
}

/// The current file, which must be an export's: a pseudo directory has
/// no extended attributes (`NOTSUPP`, as its `xattr_support` says).
fn current<'a>(ctx: &mut OpCtx<'a>) -> Result<File<'a>, Nfsstat4> {
    ctx.current_file(Nfsstat4::Notsupp)
}

/// Runs xattr call `f` as the caller.
fn as_user<T>(
    ctx: &OpCtx,
    export: &Export,
    f: impl FnOnce() -> Result<T, XattrError>,
) -> Result<T, Nfsstat4> {
    ctx.as_user(export, || Ok(f()))?.map_err(from_xattr)
}

/// The `change` of `node` (0 if it cannot be read: the client then sees
/// a change).
fn change_of(export: &Export, node: &Node) -> u64 {
    ops::getattr(&export.fs, node).map_or(0, |a| change(a.ctime))
}

/// Runs `f`, a change of `file`'s attributes, and makes it durable;
/// returns the file's `change_info4`.
fn changing(
    ctx: &OpCtx,
    file: &File,
    f: impl FnOnce() -> Result<(), XattrError>,
) -> Result<ChangeInfo4, Nfsstat4> {
    ctx.writable(file.export)?;
    let before = change_of(file.export, &file.node);
    as_user(ctx, file.export, f)?;
    file.export
        .metadata_sync
        .attrs_changed(&file.node)
        .map_err(from_fs)?;
    Ok(ChangeInfo4 {
        atomic: false,
        before,
        after: change_of(file.export, &file.node),
    })
}

pub fn getxattr(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Getxattr(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let file = current(ctx)?;
        let name = check_key(&args.name)?;
        as_user(ctx, file.export, || ops::getxattr(&file.node, name))
    })();
    status(result.map(|value| XattrValue4(value).encode(reply.encoder())))
}

pub fn setxattr(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Setxattr(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let file = current(ctx)?;
        let name = check_key(&args.key)?;
        let how = match args.option {
            SetxattrOption4::Either => XattrSet::Either,
            SetxattrOption4::Create => XattrSet::Create,
            SetxattrOption4::Replace => XattrSet::Replace,
        };
        changing(ctx, &file, || {
            ops::setxattr(&file.node, name, &args.value.0, how)
        })
    })();
    status(result.map(|cinfo| cinfo.encode(reply.encoder())))
}

pub fn removexattr(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Removexattr(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let file = current(ctx)?;
        let name = check_key(&args.name)?;
        changing(ctx, &file, || ops::removexattr(&file.node, name))
    })();
    status(result.map(|cinfo| cinfo.encode(reply.encoder())))
}

/// LISTXATTRS: the names from position `cookie` of the file's list, as
/// many as fit in `maxcount` bytes of result; the next cookie is the
/// position after the last name sent. A cookie past the list is
/// `BADCOOKIE`; a `maxcount` that holds not even the next name,
/// `TOOSMALL`.
pub fn listxattrs(ctx: &mut OpCtx, op: ArgOp, reply: &mut CompoundReply) -> Nfsstat4 {
    let ArgOp::Listxattrs(args) = op else {
        return Nfsstat4::Serverfault;
    };
    let result = (|| {
        let file = current(ctx)?;
        let names = as_user(ctx, file.export, || ops::listxattrs(&file.node))?;
        page(names, args.cookie, args.maxcount as usize)
    })();
    status(result.map(|res| res.encode(reply.encoder())))
}

/// The page of `names` from position `cookie` that fits in `maxcount`
/// bytes of result.
fn page(names: Vec<Vec<u8>>, cookie: u64, maxcount: usize) -> Result<ListxattrsResOk4, Nfsstat4> {
    let start = usize::try_from(cookie)
        .ok()
        .filter(|&start| start <= names.len())
        .ok_or(Nfsstat4::BadCookie)?;
    let mut used = LIST_OVERHEAD;
    let mut page = Vec::new();
    for name in names.iter().skip(start) {
        let size = 4 + name.len().next_multiple_of(4);
        if used + size > maxcount {
            break;
        }
        used += size;
        page.push(Component4::from(name.clone()));
    }
    let next = start + page.len();
    if page.is_empty() && (next < names.len() || maxcount < LIST_OVERHEAD) {
        return Err(Nfsstat4::Toosmall);
    }
    Ok(ListxattrsResOk4 {
        cookie: next as u64,
        names: page,
        eof: next == names.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<Vec<u8>> {
        list.iter().map(|n| n.as_bytes().to_vec()).collect()
    }

    #[test]
    fn listxattrs_pages_by_position_within_maxcount() {
        let all = names(&["a", "bbbbb", "c"]);
        // Each name takes 8 bytes but "bbbbb", 12.
        let first = page(all.clone(), 0, LIST_OVERHEAD + 8).unwrap();
        assert_eq!(first.names, vec![Component4::from("a")]);
        assert_eq!((first.cookie, first.eof), (1, false));
        let rest = page(all.clone(), 1, 1000).unwrap();
        assert_eq!(rest.names.len(), 2);
        assert_eq!((rest.cookie, rest.eof), (3, true));
        let end = page(all.clone(), 3, 1000).unwrap();
        assert!(end.names.is_empty() && end.eof);
        assert_eq!(page(all.clone(), 4, 1000), Err(Nfsstat4::BadCookie));
        assert_eq!(
            page(all.clone(), 1, LIST_OVERHEAD + 8),
            Err(Nfsstat4::Toosmall)
        );
        assert_eq!(page(Vec::new(), 0, 4), Err(Nfsstat4::Toosmall));
        assert!(page(Vec::new(), 0, LIST_OVERHEAD).unwrap().eof);
    }

    #[test]
    fn keys_are_checked_with_their_prefix() {
        assert_eq!(check_key(&Component4::from("")), Err(Nfsstat4::Inval));
        let longest = "x".repeat(XATTR_NAME_MAX - 5);
        assert!(check_key(&Component4::from(longest.as_str())).is_ok());
        let longer = format!("{longest}x");
        assert_eq!(
            check_key(&Component4::from(longer.as_str())),
            Err(Nfsstat4::Nametoolong)
        );
    }
}
