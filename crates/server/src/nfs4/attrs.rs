//! NFSv4 attributes (RFC 8881 §5, RFC 7862 §12.2, RFC 8276 §8.2): the
//! `fattr4` of a file or a pseudo directory for GETATTR and READDIR, the
//! comparison VERIFY and NVERIFY make, and what SETATTR asks the file
//! system to change. Docs: docs/nfs4-design.md section 7.
//!
//! The values come from one statx (`dionfs_fs::Attr`, the data plane's
//! size for a regular file), the export's statvfs when a space or files
//! attribute is asked for, and what only the caller knows: the handle,
//! fsid and `mounted_on_fileid` (the namespace), the owner strings
//! (idmap), the lease and the session's transfer sizes. [`needs`] says
//! which of the costly inputs a request needs.
//!
//! `change` is `ctime.sec << 30 | ctime.nsec`, what knfsd uses on file
//! systems without i_version (`time_to_chattr`): statx has no change
//! cookie (`STATX_CHANGE_COOKIE` is internal to the kernel), and every
//! change a client could see moves ctime, local ones on the server too.
//! Since it can move backwards with the clock, `change_attr_type` says
//! `NFS4_CHANGE_TYPE_IS_TIME_METADATA`.

use dionfs_fs::{Attr, FileKind, FsStat, SetAttrs, SetTime, Time};
use dionfs_proto::nfs4::{
    decode_settable, Attr4, Bitmap4, Fattr4, FattrEncoder, Fsid4, NfsFtype4, NfsTime4, Nfsace4,
    Nfsacl4, Nfsstat4, SetTime4, SettableError, SpecData4, ACL4_SUPPORT_ALLOW_ACL,
    ACL4_SUPPORT_DENY_ACL,
};
use dionfs_xdr::{Encode, Encoder};

use super::namespace::{export_fsid, PSEUDO_FSID};

/// The attributes of minor version 1 that dionfs supports, in bit order.
const SUPPORTED_4_1: &[Attr4] = &[
    Attr4::SupportedAttrs,
    Attr4::Type,
    Attr4::FhExpireType,
    Attr4::Change,
    Attr4::Size,
    Attr4::LinkSupport,
    Attr4::SymlinkSupport,
    Attr4::NamedAttr,
    Attr4::Fsid,
    Attr4::UniqueHandles,
    Attr4::LeaseTime,
    Attr4::RdattrError,
    Attr4::Acl,
    Attr4::Aclsupport,
    Attr4::Cansettime,
    Attr4::CaseInsensitive,
    Attr4::CasePreserving,
    Attr4::ChownRestricted,
    Attr4::Filehandle,
    Attr4::Fileid,
    Attr4::FilesAvail,
    Attr4::FilesFree,
    Attr4::FilesTotal,
    Attr4::Homogeneous,
    Attr4::Maxfilesize,
    Attr4::Maxlink,
    Attr4::Maxname,
    Attr4::Maxread,
    Attr4::Maxwrite,
    Attr4::Mode,
    Attr4::NoTrunc,
    Attr4::Numlinks,
    Attr4::Owner,
    Attr4::OwnerGroup,
    Attr4::Rawdev,
    Attr4::SpaceAvail,
    Attr4::SpaceFree,
    Attr4::SpaceTotal,
    Attr4::SpaceUsed,
    Attr4::TimeAccess,
    Attr4::TimeAccessSet,
    Attr4::TimeCreate,
    Attr4::TimeDelta,
    Attr4::TimeMetadata,
    Attr4::TimeModify,
    Attr4::TimeModifySet,
    Attr4::MountedOnFileid,
    Attr4::Dacl,
    Attr4::SuppattrExclcreat,
];

/// What minor version 2 adds (RFC 7862 §12.2, RFC 8276 §8.2).
const ADDED_4_2: &[Attr4] = &[
    Attr4::CloneBlksize,
    Attr4::ChangeAttrType,
    Attr4::XattrSupport,
];

/// What SETATTR sets (and OPEN and CREATE with their `createattrs`, but
/// the ACLs: [`ACLS`]).
const SETTABLE: &[Attr4] = &[
    Attr4::Size,
    Attr4::Acl,
    Attr4::Mode,
    Attr4::Owner,
    Attr4::OwnerGroup,
    Attr4::TimeAccessSet,
    Attr4::TimeModifySet,
    Attr4::Dacl,
];

/// The ACL attributes (mapped to the file's POSIX ACLs: [`super::acl`]).
const ACLS: &[Attr4] = &[Attr4::Acl, Attr4::Dacl];

/// `aclsupport`: ALLOW and DENY ACEs (what a POSIX ACL can say; AUDIT
/// and ALARM it cannot).
const ACL_SUPPORT: u32 = ACL4_SUPPORT_ALLOW_ACL | ACL4_SUPPORT_DENY_ACL;

/// What an EXCLUSIVE4_1 create may set: the settable ones but the times,
/// which hold the verifier (as knfsd's `NFSD_SUPPATTR_EXCLCREAT_WORD1`).
const EXCLCREAT: &[Attr4] = &[Attr4::Size, Attr4::Mode, Attr4::Owner, Attr4::OwnerGroup];

/// The attributes GETATTR cannot return (RFC 8881 §5.6: `INVAL`).
const WRITE_ONLY: &[Attr4] = &[Attr4::TimeAccessSet, Attr4::TimeModifySet];

/// The attributes from the export's statvfs.
const FROM_STATVFS: &[Attr4] = &[
    Attr4::FilesAvail,
    Attr4::FilesFree,
    Attr4::FilesTotal,
    Attr4::SpaceAvail,
    Attr4::SpaceFree,
    Attr4::SpaceTotal,
];

/// `fh_expire_type`: handles never expire (RFC 8881 §4.2.1).
const FH4_PERSISTENT: u32 = 0;
/// `change_attr_type4`'s `NFS4_CHANGE_TYPE_IS_TIME_METADATA` (RFC 7862 §12.2.3).
const NFS4_CHANGE_TYPE_IS_TIME_METADATA: u32 = 3;
/// `maxlink`.
const MAXLINK: u32 = 32000;
/// `maxname`: Linux `NAME_MAX`.
const MAXNAME: u32 = dionfs_fs::NAME_MAX as u32;
/// `time_delta`: the server keeps nanoseconds.
const TIME_DELTA: NfsTime4 = NfsTime4 {
    seconds: 0,
    nseconds: 1,
};

/// The mode of a pseudo directory: anyone may list and cross it, nobody
/// may change it.
pub const PSEUDO_MODE: u32 = 0o555;
/// The owner and group of a pseudo directory (root), for the caller to
/// map to its `owner` and `owner_group` strings.
pub const PSEUDO_OWNER: (u32, u32) = (0, 0);

fn bitmap_of(attrs: &[&[Attr4]]) -> Bitmap4 {
    let mut map = Bitmap4::default();
    for attr in attrs.iter().flat_map(|a| a.iter()) {
        map.set(attr.bit());
    }
    map
}

fn contains(list: &[Attr4], bit: u32) -> bool {
    list.iter().any(|a| a.bit() == bit)
}

/// The last attribute of minor version 0 (RFC 7530 section 5.8);
/// `dacl`, `suppattr_exclcreat` and the rest came with 4.1.
const LAST_4_0: u32 = Attr4::MountedOnFileid.bit();

/// Whether attribute `bit` exists for minor version `minor`.
pub fn supported(minor: u32, bit: u32) -> bool {
    match minor {
        0 => bit <= LAST_4_0 && contains(SUPPORTED_4_1, bit),
        1 => contains(SUPPORTED_4_1, bit),
        _ => contains(SUPPORTED_4_1, bit) || contains(ADDED_4_2, bit),
    }
}

/// `supported_attrs` of minor version `minor`.
pub fn supported_attrs(minor: u32) -> Bitmap4 {
    match minor {
        0 => {
            let attrs: Vec<Attr4> = SUPPORTED_4_1
                .iter()
                .copied()
                .filter(|a| a.bit() <= LAST_4_0)
                .collect();
            bitmap_of(&[&attrs])
        }
        1 => bitmap_of(&[SUPPORTED_4_1]),
        _ => bitmap_of(&[SUPPORTED_4_1, ADDED_4_2]),
    }
}

/// Room a COMPOUND needs beside the data of its one READ or WRITE (RPC
/// and COMPOUND headers, SEQUENCE, PUTFH, GETATTR).
const COMPOUND_ROOM: u32 = 1024;

/// `maxread` and `maxwrite` of an export whose `max_transfer` is given,
/// to a session whose fore channel takes requests of `max_request` and
/// replies of `max_response` bytes: what one READ or WRITE may carry
/// with the rest of its COMPOUND around it.
pub fn max_read_write(max_transfer: u32, max_response: u32, max_request: u32) -> (u64, u64) {
    let within = |channel: u32| u64::from(max_transfer.min(channel.saturating_sub(COMPOUND_ROOM)));
    (within(max_response), within(max_request))
}

/// `change` from a ctime.
pub fn change(ctime: Time) -> u64 {
    ((ctime.seconds as u64) << 30) | u64::from(ctime.nanos)
}

fn nfstime4(t: Time) -> NfsTime4 {
    NfsTime4 {
        seconds: t.seconds,
        nseconds: t.nanos,
    }
}

fn ftype4(kind: FileKind) -> NfsFtype4 {
    match kind {
        FileKind::Regular => NfsFtype4::Reg,
        FileKind::Directory => NfsFtype4::Dir,
        FileKind::BlockDevice => NfsFtype4::Blk,
        FileKind::CharDevice => NfsFtype4::Chr,
        FileKind::Symlink => NfsFtype4::Lnk,
        FileKind::Socket => NfsFtype4::Sock,
        FileKind::Fifo => NfsFtype4::Fifo,
    }
}

/// A file of an export, as its attributes need it.
#[derive(Debug, Clone)]
pub struct FileSource<'a> {
    /// Its statx (for a regular file, with the data plane's size:
    /// `ops::getattr`).
    pub attr: &'a Attr,
    /// Its export's id: the fsid.
    pub export: u16,
    /// For an export's root, the fileid of the directory it is reached
    /// from (the namespace's `MountedOn`); `None` for any other file,
    /// whose `mounted_on_fileid` is its fileid.
    pub mounted_on_fileid: Option<u64>,
    /// The export's statvfs, if the request [`needs`] it.
    pub fs_stat: Option<FsStat>,
    /// Whether the export stores `user.` extended attributes.
    pub xattr_support: bool,
}

/// A pseudo directory, as its attributes need it: a read-only directory
/// on the pseudo file system, with no space of its own.
#[derive(Debug, Clone, Copy)]
pub struct PseudoSource {
    /// Its fileid (the namespace's path hash).
    pub fileid: u64,
    /// Its every time (the namespace's stamp), and the source of its
    /// `change`.
    pub stamp: Time,
}

/// Whose attributes.
#[derive(Debug, Clone)]
pub enum Object<'a> {
    File(FileSource<'a>),
    Pseudo(PseudoSource),
}

impl Object<'_> {
    /// The uid and gid the `owner` and `owner_group` strings name.
    pub fn owner_ids(&self) -> (u32, u32) {
        match self {
            Object::File(f) => (f.attr.uid, f.attr.gid),
            Object::Pseudo(_) => PSEUDO_OWNER,
        }
    }
}

/// Everything one object's `fattr4` is made of.
#[derive(Debug, Clone)]
pub struct AttrSource<'a> {
    /// The COMPOUND's minor version (1 or 2): which attributes exist.
    pub minor: u32,
    pub object: Object<'a>,
    /// Its handle (`filehandle`).
    pub fh: &'a [u8],
    /// `owner` and `owner_group` of [`Object::owner_ids`], mapped
    /// already, if the request [`needs`] them.
    pub owner: Option<&'a str>,
    pub owner_group: Option<&'a str>,
    /// `acl` and `dacl`'s ACEs, mapped from the file's POSIX ACLs
    /// already, if the request [`needs`] them.
    pub acl: Option<&'a Nfsacl4>,
    /// `lease_time`, in seconds.
    pub lease_time: u32,
    /// `maxread` and `maxwrite`: [`max_read_write`].
    pub maxread: u64,
    pub maxwrite: u64,
}

/// The costly inputs a request needs: the owner strings (an NSS lookup
/// when mapping to names), the export's statvfs (a system call) and the
/// file's ACL (two `getxattr`s, and a lookup of each name in it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub owner: bool,
    pub owner_group: bool,
    pub fs_stat: bool,
    pub acl: bool,
}

/// What [`AttrSource`] must hold for `request`.
pub fn needs(request: &Bitmap4) -> Needs {
    Needs {
        owner: request.contains(Attr4::Owner.bit()),
        owner_group: request.contains(Attr4::OwnerGroup.bit()),
        fs_stat: FROM_STATVFS.iter().any(|a| request.contains(a.bit())),
        acl: ACLS.iter().any(|a| request.contains(a.bit())),
    }
}

/// Whether `src` holds what `request` needs; a caller that did not fill
/// it in is the server's fault.
fn check_inputs(request: &Bitmap4, src: &AttrSource) -> Result<(), Nfsstat4> {
    let needs = needs(request);
    let missing = (needs.owner && src.owner.is_none())
        || (needs.owner_group && src.owner_group.is_none())
        || (needs.acl && src.acl.is_none())
        || (needs.fs_stat && matches!(&src.object, Object::File(f) if f.fs_stat.is_none()));
    if missing {
        tracing::error!(?needs, "NFSv4 attributes asked for without their inputs");
        return Err(Nfsstat4::Serverfault);
    }
    Ok(())
}

/// GETATTR (and a READDIR entry's attributes): the values of the
/// attributes of `request` that exist, in bit order; the others (unknown,
/// unsupported, of minor version 2 in 4.1, `time_create` where the file
/// system keeps none) are left out of the result's bitmap. The
/// write-only `time_access_set` and `time_modify_set` are `INVAL`.
pub fn getattr(request: &Bitmap4, src: &AttrSource) -> Result<Fattr4, Nfsstat4> {
    if WRITE_ONLY.iter().any(|a| request.contains(a.bit())) {
        return Err(Nfsstat4::Inval);
    }
    check_inputs(request, src)?;
    Ok(encode(request, src))
}

/// The attributes of a READDIR entry whose lookup failed with `status`:
/// only `rdattr_error`, if the client asked for it; if not, `None`, and
/// READDIR fails with `status` (RFC 8881 §5.8.1.12).
pub fn rdattr_error(request: &Bitmap4, status: Nfsstat4) -> Option<Fattr4> {
    request.contains(Attr4::RdattrError.bit()).then(|| {
        FattrEncoder::encode(
            &Bitmap4::from_bits(&[Attr4::RdattrError.bit()]),
            |_, enc| {
                status.encode(enc);
                true
            },
        )
    })
}

/// VERIFY and NVERIFY (RFC 8881 §18.31, §18.15): whether `client`'s
/// values are ours, byte for byte, for its attributes. An attribute that
/// does not exist is `ATTRNOTSUPP`; `rdattr_error` and the write-only
/// ones are `INVAL` (pynfs st_verify, as knfsd).
pub fn same_attrs(client: &Fattr4, src: &AttrSource) -> Result<bool, Nfsstat4> {
    let request = &client.attrmask;
    if request.bits().any(|bit| !supported(src.minor, bit)) {
        return Err(Nfsstat4::Attrnotsupp);
    }
    if request.contains(Attr4::RdattrError.bit())
        || WRITE_ONLY.iter().any(|a| request.contains(a.bit()))
    {
        return Err(Nfsstat4::Inval);
    }
    check_inputs(request, src)?;
    let ours = encode(request, src);
    Ok(ours.attrmask.bits().eq(request.bits()) && ours.attr_vals == client.attr_vals)
}

/// The attributes EXCLUSIVE4_1 sets: what `fattr` asks the file system
/// to change, as [`set_attrs_and_acl`] reads it, without an ACL
/// (`INVAL`: `suppattr_exclcreat` does not offer one). An attribute
/// that does not exist is `ATTRNOTSUPP`, one that exists but cannot be set `INVAL` (RFC 8881
/// §18.30, checked over the whole bitmap first, as knfsd); values that
/// do not decode are `BADXDR`, a time with a nanosecond count past a
/// second `INVAL`. `uid_of` and `gid_of` map owner strings (`BADOWNER`
/// for one they do not know). The attributes set, on success, are
/// `fattr.attrmask`.
pub fn set_attrs(
    minor: u32,
    fattr: &Fattr4,
    uid_of: impl FnOnce(&[u8]) -> Result<u32, Nfsstat4>,
    gid_of: impl FnOnce(&[u8]) -> Result<u32, Nfsstat4>,
) -> Result<SetAttrs, Nfsstat4> {
    match set_attrs_and_acl(minor, fattr, uid_of, gid_of)? {
        (set, None) => Ok(set),
        (_, Some(_)) => Err(Nfsstat4::Inval),
    }
}

/// SETATTR: what `fattr` asks the file system to change, and the ACEs
/// of its `acl` or `dacl`, if it sets one (both at once are `INVAL`).
pub fn set_attrs_and_acl(
    minor: u32,
    fattr: &Fattr4,
    uid_of: impl FnOnce(&[u8]) -> Result<u32, Nfsstat4>,
    gid_of: impl FnOnce(&[u8]) -> Result<u32, Nfsstat4>,
) -> Result<(SetAttrs, Option<Vec<Nfsace4>>), Nfsstat4> {
    let mask = &fattr.attrmask;
    if mask.bits().any(|bit| !supported(minor, bit)) {
        return Err(Nfsstat4::Attrnotsupp);
    }
    if mask.bits().any(|bit| !contains(SETTABLE, bit)) {
        return Err(Nfsstat4::Inval);
    }
    let set = decode_settable(mask, fattr.attr_vals.as_bytes()).map_err(|e| match e {
        SettableError::Xdr(_) => Nfsstat4::Badxdr,
        SettableError::NotSettable(_) => Nfsstat4::Inval,
    })?;
    let time = |t: Option<SetTime4>| -> Result<Option<SetTime>, Nfsstat4> {
        Ok(match t {
            None => None,
            Some(SetTime4::ServerTime) => Some(SetTime::ServerNow),
            Some(SetTime4::ClientTime(t)) if t.nseconds >= 1_000_000_000 => {
                return Err(Nfsstat4::Inval)
            }
            Some(SetTime4::ClientTime(t)) => Some(SetTime::Client(Time {
                seconds: t.seconds,
                nanos: t.nseconds,
            })),
        })
    };
    let acl = match (set.acl, set.dacl) {
        (Some(_), Some(_)) => return Err(Nfsstat4::Inval),
        (Some(acl), None) => Some(acl.0),
        (None, Some(dacl)) if dacl.na41_flag != 0 => return Err(Nfsstat4::Attrnotsupp),
        (None, Some(dacl)) => Some(dacl.na41_aces.0),
        (None, None) => None,
    };
    let attrs = SetAttrs {
        mode: set.mode.map(|m| m & 0o7777),
        uid: set.owner.map(|o| uid_of(o.as_bytes())).transpose()?,
        gid: set.owner_group.map(|g| gid_of(g.as_bytes())).transpose()?,
        size: set.size,
        atime: time(set.time_access_set)?,
        mtime: time(set.time_modify_set)?,
    };
    Ok((attrs, acl))
}

/// The `fattr4` of `request` from `src`, whose inputs are checked.
fn encode(request: &Bitmap4, src: &AttrSource) -> Fattr4 {
    let values = Values::of(&src.object);
    FattrEncoder::encode(request, |bit, enc| {
        supported(src.minor, bit)
            && Attr4::from_u32(bit).is_some_and(|a| value(a, src, &values, enc))
    })
}

/// The values an object has, whichever kind it is.
struct Values<'a> {
    kind: NfsFtype4,
    mode: u32,
    nlink: u32,
    size: u64,
    used: u64,
    rawdev: SpecData4,
    fsid: Fsid4,
    fileid: u64,
    mounted_on_fileid: u64,
    atime: Time,
    mtime: Time,
    ctime: Time,
    btime: Option<Time>,
    fs_stat: Option<&'a FsStat>,
    blksize: u32,
    xattr_support: bool,
}

impl<'a> Values<'a> {
    fn of(object: &'a Object<'a>) -> Values<'a> {
        match object {
            Object::File(f) => Values {
                kind: ftype4(f.attr.kind),
                mode: f.attr.mode,
                nlink: f.attr.nlink,
                size: f.attr.size,
                used: f.attr.used,
                rawdev: SpecData4 {
                    specdata1: f.attr.rdev_major,
                    specdata2: f.attr.rdev_minor,
                },
                fsid: export_fsid(f.export),
                fileid: f.attr.fileid,
                mounted_on_fileid: f.mounted_on_fileid.unwrap_or(f.attr.fileid),
                atime: f.attr.atime,
                mtime: f.attr.mtime,
                ctime: f.attr.ctime,
                btime: f.attr.btime,
                fs_stat: f.fs_stat.as_ref(),
                blksize: f.attr.blksize,
                xattr_support: f.xattr_support,
            },
            Object::Pseudo(p) => Values {
                kind: NfsFtype4::Dir,
                mode: PSEUDO_MODE,
                nlink: 2,
                size: 0,
                used: 0,
                rawdev: SpecData4::default(),
                fsid: PSEUDO_FSID,
                fileid: p.fileid,
                mounted_on_fileid: p.fileid,
                atime: p.stamp,
                mtime: p.stamp,
                ctime: p.stamp,
                btime: Some(p.stamp),
                fs_stat: None,
                blksize: 0,
                xattr_support: false,
            },
        }
    }
}

/// Appends the value of `attr`, or returns false (appending nothing) if
/// this object has none.
fn value(attr: Attr4, src: &AttrSource, v: &Values, enc: &mut Encoder) -> bool {
    let stat = |pick: fn(&FsStat) -> u64| v.fs_stat.map_or(0, pick);
    match attr {
        Attr4::SupportedAttrs => supported_attrs(src.minor).encode(enc),
        Attr4::Type => v.kind.encode(enc),
        Attr4::FhExpireType => enc.u32(FH4_PERSISTENT),
        Attr4::Change => enc.u64(change(v.ctime)),
        Attr4::Size => enc.u64(v.size),
        Attr4::LinkSupport
        | Attr4::SymlinkSupport
        | Attr4::UniqueHandles
        | Attr4::Cansettime
        | Attr4::CasePreserving
        | Attr4::ChownRestricted
        | Attr4::Homogeneous
        | Attr4::NoTrunc => enc.bool(true),
        Attr4::NamedAttr | Attr4::CaseInsensitive => enc.bool(false),
        Attr4::Fsid => v.fsid.encode(enc),
        Attr4::LeaseTime => enc.u32(src.lease_time),
        Attr4::RdattrError => Nfsstat4::Ok.encode(enc),
        Attr4::Filehandle => enc.opaque_var(src.fh),
        Attr4::Fileid => enc.u64(v.fileid),
        Attr4::FilesAvail => enc.u64(stat(|s| s.avail_files)),
        Attr4::FilesFree => enc.u64(stat(|s| s.free_files)),
        Attr4::FilesTotal => enc.u64(stat(|s| s.total_files)),
        Attr4::Maxfilesize => enc.u64(i64::MAX as u64),
        Attr4::Maxlink => enc.u32(MAXLINK),
        Attr4::Maxname => enc.u32(MAXNAME),
        Attr4::Maxread => enc.u64(src.maxread),
        Attr4::Maxwrite => enc.u64(src.maxwrite),
        Attr4::Mode => enc.u32(v.mode),
        Attr4::Numlinks => enc.u32(v.nlink),
        Attr4::Owner => match src.owner {
            Some(owner) => enc.string(owner.as_bytes()),
            None => return false,
        },
        Attr4::OwnerGroup => match src.owner_group {
            Some(group) => enc.string(group.as_bytes()),
            None => return false,
        },
        Attr4::Rawdev => v.rawdev.encode(enc),
        Attr4::SpaceAvail => enc.u64(stat(|s| s.avail_bytes)),
        Attr4::SpaceFree => enc.u64(stat(|s| s.free_bytes)),
        Attr4::SpaceTotal => enc.u64(stat(|s| s.total_bytes)),
        Attr4::SpaceUsed => enc.u64(v.used),
        Attr4::TimeAccess => nfstime4(v.atime).encode(enc),
        Attr4::TimeCreate => match v.btime {
            Some(t) => nfstime4(t).encode(enc),
            None => return false,
        },
        Attr4::TimeDelta => TIME_DELTA.encode(enc),
        Attr4::TimeMetadata => nfstime4(v.ctime).encode(enc),
        Attr4::TimeModify => nfstime4(v.mtime).encode(enc),
        Attr4::MountedOnFileid => enc.u64(v.mounted_on_fileid),
        Attr4::SuppattrExclcreat => bitmap_of(&[EXCLCREAT]).encode(enc),
        Attr4::CloneBlksize => enc.u32(v.blksize),
        Attr4::ChangeAttrType => enc.u32(NFS4_CHANGE_TYPE_IS_TIME_METADATA),
        Attr4::XattrSupport => enc.bool(v.xattr_support),
        Attr4::Aclsupport => enc.u32(ACL_SUPPORT),
        Attr4::Acl => match src.acl {
            Some(aces) => aces.encode(enc),
            None => return false,
        },
        Attr4::Dacl => match src.acl {
            Some(aces) => {
                // No ACL4_AUTO_INHERIT, PROTECTED or DEFAULTED: POSIX
                // keeps none.
                enc.u32(0);
                aces.encode(enc);
            }
            None => return false,
        },
        // Write-only (refused before), and what is not supported.
        _ => return false,
    }
    true
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use dionfs_proto::nfs4::{AttrList4, Nfsacl4, Nfsacl41, Owner4, SetAttrs4};
    use dionfs_xdr::{Decode, Decoder};

    use super::*;

    /// An attribute value as a client decodes it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Val {
        U32(u32),
        U64(u64),
        Bool(bool),
        Bitmap(Vec<u32>),
        Bytes(Vec<u8>),
        Time(i64, u32),
        Pair(u64, u64),
        /// An ACL (`dacl`'s flags first).
        Acl(Option<u32>, Vec<Nfsace4>),
    }

    /// Decodes a `fattr4` as a client would (RFC 8881 §5.8's types),
    /// every byte accounted for.
    fn decode(f: &Fattr4) -> BTreeMap<u32, Val> {
        let mut dec = Decoder::new(f.attr_vals.as_bytes());
        let mut out = BTreeMap::new();
        for bit in f.attrmask.bits() {
            let attr = Attr4::from_u32(bit).expect("known attribute");
            use Attr4::*;
            let v = match attr {
                SupportedAttrs | SuppattrExclcreat => {
                    Val::Bitmap(Bitmap4::decode(&mut dec).expect("bitmap").0)
                }
                Type | FhExpireType | LeaseTime | RdattrError | Maxlink | Maxname | Mode
                | Numlinks | CloneBlksize | ChangeAttrType | Aclsupport => {
                    Val::U32(dec.u32().expect("u32"))
                }
                Acl => Val::Acl(None, Nfsacl4::decode(&mut dec).expect("acl").0),
                Dacl => {
                    let d = Nfsacl41::decode(&mut dec).expect("dacl");
                    Val::Acl(Some(d.na41_flag), d.na41_aces.0)
                }
                Change | Size | Fileid | FilesAvail | FilesFree | FilesTotal | Maxfilesize
                | Maxread | Maxwrite | SpaceAvail | SpaceFree | SpaceTotal | SpaceUsed
                | MountedOnFileid => Val::U64(dec.u64().expect("u64")),
                LinkSupport | SymlinkSupport | NamedAttr | UniqueHandles | Cansettime
                | CaseInsensitive | CasePreserving | ChownRestricted | Homogeneous | NoTrunc
                | XattrSupport => Val::Bool(dec.bool().expect("bool")),
                Filehandle => Val::Bytes(dec.opaque_var(128).expect("fh").to_vec()),
                Owner | OwnerGroup => Val::Bytes(dec.string(1024).expect("owner").to_vec()),
                Fsid => Val::Pair(dec.u64().expect("major"), dec.u64().expect("minor")),
                Rawdev => Val::Pair(
                    u64::from(dec.u32().expect("major")),
                    u64::from(dec.u32().expect("minor")),
                ),
                TimeAccess | TimeCreate | TimeDelta | TimeMetadata | TimeModify => {
                    let t = NfsTime4::decode(&mut dec).expect("time");
                    Val::Time(t.seconds, t.nseconds)
                }
                other => panic!("unexpected attribute {other:?}"),
            };
            out.insert(bit, v);
        }
        dec.finish().expect("no bytes left over");
        out
    }

    fn file_attr() -> Attr {
        Attr {
            kind: FileKind::Regular,
            mode: 0o4751,
            nlink: 3,
            uid: 1000,
            gid: 100,
            size: 1 << 33,
            used: 4096 * 3,
            rdev_major: 0,
            rdev_minor: 0,
            fsid: 0x0000_0008_0000_0001,
            fileid: 777,
            atime: Time {
                seconds: 1_700_000_001,
                nanos: 1,
            },
            mtime: Time {
                seconds: 1_700_000_002,
                nanos: 2,
            },
            ctime: Time {
                seconds: 1_700_000_003,
                nanos: 999_999_999,
            },
            btime: Some(Time {
                seconds: 1_600_000_000,
                nanos: 0,
            }),
            blksize: 4096,
        }
    }

    const FS_STAT: FsStat = FsStat {
        total_bytes: 100 << 30,
        free_bytes: 40 << 30,
        avail_bytes: 35 << 30,
        total_files: 1_000_000,
        free_files: 900_000,
        avail_files: 899_000,
    };

    /// The ACL of a file: its values are the caller's (`super::acl`
    /// maps them), encoded as given.
    static FILE_ACL: std::sync::LazyLock<Nfsacl4> = std::sync::LazyLock::new(|| {
        Nfsacl4(vec![Nfsace4 {
            acetype: 0,
            flag: 0,
            access_mask: 0x1,
            who: Owner4::from("OWNER@"),
        }])
    });

    fn file_source<'a>(attr: &'a Attr, minor: u32) -> AttrSource<'a> {
        AttrSource {
            minor,
            object: Object::File(FileSource {
                attr,
                export: 0x1234,
                mounted_on_fileid: None,
                fs_stat: Some(FS_STAT),
                xattr_support: true,
            }),
            fh: b"0123456789abcdefghijklmnopqrstuvwxyz0123",
            owner: Some("1000"),
            owner_group: Some("100"),
            acl: Some(&FILE_ACL),
            lease_time: 90,
            maxread: 1 << 20,
            maxwrite: 1 << 20,
        }
    }

    /// Every attribute number there is, and some that are not.
    fn everything() -> Bitmap4 {
        Bitmap4(vec![u32::MAX, u32::MAX, u32::MAX])
    }

    fn bits(attrs: &[Attr4]) -> Bitmap4 {
        Bitmap4::from_bits(&attrs.iter().map(|a| a.bit()).collect::<Vec<_>>())
    }

    fn readable(minor: u32) -> Bitmap4 {
        let mut map = Bitmap4::default();
        for bit in supported_attrs(minor).bits() {
            if !contains(WRITE_ONLY, bit) {
                map.set(bit);
            }
        }
        map
    }

    #[test]
    fn every_row_of_the_table_for_a_file() {
        let attr = file_attr();
        let src = file_source(&attr, 2);
        let got = decode(&getattr(&readable(2), &src).expect("getattr"));
        let t = |t: Time| Val::Time(t.seconds, t.nanos);
        use Attr4::*;
        let want: BTreeMap<u32, Val> = [
            (SupportedAttrs, Val::Bitmap(supported_attrs(2).0)),
            (Type, Val::U32(1)),
            (FhExpireType, Val::U32(0)),
            (Change, Val::U64((1_700_000_003u64 << 30) | 999_999_999)),
            (Size, Val::U64(1 << 33)),
            (LinkSupport, Val::Bool(true)),
            (SymlinkSupport, Val::Bool(true)),
            (NamedAttr, Val::Bool(false)),
            (Fsid, Val::Pair(0x1235, 0)),
            (UniqueHandles, Val::Bool(true)),
            (LeaseTime, Val::U32(90)),
            (RdattrError, Val::U32(0)),
            (Acl, Val::Acl(None, FILE_ACL.0.clone())),
            (Aclsupport, Val::U32(3)),
            (Cansettime, Val::Bool(true)),
            (CaseInsensitive, Val::Bool(false)),
            (CasePreserving, Val::Bool(true)),
            (ChownRestricted, Val::Bool(true)),
            (Filehandle, Val::Bytes(src.fh.to_vec())),
            (Fileid, Val::U64(777)),
            (FilesAvail, Val::U64(899_000)),
            (FilesFree, Val::U64(900_000)),
            (FilesTotal, Val::U64(1_000_000)),
            (Homogeneous, Val::Bool(true)),
            (Maxfilesize, Val::U64(i64::MAX as u64)),
            (Maxlink, Val::U32(32000)),
            (Maxname, Val::U32(255)),
            (Maxread, Val::U64(1 << 20)),
            (Maxwrite, Val::U64(1 << 20)),
            (Mode, Val::U32(0o4751)),
            (NoTrunc, Val::Bool(true)),
            (Numlinks, Val::U32(3)),
            (Owner, Val::Bytes(b"1000".to_vec())),
            (OwnerGroup, Val::Bytes(b"100".to_vec())),
            (Rawdev, Val::Pair(0, 0)),
            (SpaceAvail, Val::U64(35 << 30)),
            (SpaceFree, Val::U64(40 << 30)),
            (SpaceTotal, Val::U64(100 << 30)),
            (SpaceUsed, Val::U64(4096 * 3)),
            (TimeAccess, t(attr.atime)),
            (TimeCreate, Val::Time(1_600_000_000, 0)),
            (TimeDelta, Val::Time(0, 1)),
            (TimeMetadata, t(attr.ctime)),
            (TimeModify, t(attr.mtime)),
            (MountedOnFileid, Val::U64(777)),
            (Dacl, Val::Acl(Some(0), FILE_ACL.0.clone())),
            (
                SuppattrExclcreat,
                Val::Bitmap(bits(&[Size, Mode, Owner, OwnerGroup]).0),
            ),
            (CloneBlksize, Val::U32(4096)),
            (ChangeAttrType, Val::U32(3)),
            (XattrSupport, Val::Bool(true)),
        ]
        .into_iter()
        .map(|(a, v)| (a.bit(), v))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn minor_version_2_adds_three_attributes() {
        let four_one: Vec<u32> = supported_attrs(1).bits().collect();
        let four_two: Vec<u32> = supported_attrs(2).bits().collect();
        let added: Vec<u32> = four_two
            .iter()
            .copied()
            .filter(|b| !four_one.contains(b))
            .collect();
        assert_eq!(added, [77, 79, 82]);
        assert!(four_one.iter().all(|b| four_two.contains(b)));
        // What the table leaves out, in either version.
        for gone in [
            Attr4::Sacl,
            Attr4::Archive,
            Attr4::FsLocations,
            Attr4::Hidden,
            Attr4::Mimetype,
            Attr4::QuotaAvailHard,
            Attr4::System,
            Attr4::TimeBackup,
            Attr4::FsLayoutTypes,
        ] {
            assert!(!four_two.contains(&gone.bit()), "{gone:?}");
        }
        // Both write-only times are supported (settable), as every
        // mandatory attribute.
        for b in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 19, 48, 54, 75] {
            assert!(four_one.contains(&b), "{b}");
        }

        // 4.1 leaves the 4.2 rows out of a GETATTR asking for them.
        let attr = file_attr();
        let ask = bits(&[Attr4::Type, Attr4::CloneBlksize, Attr4::XattrSupport]);
        let got = getattr(&ask, &file_source(&attr, 1)).expect("getattr");
        assert_eq!(got.attrmask, bits(&[Attr4::Type]));
    }

    #[test]
    fn unsupported_attributes_are_left_out_of_the_result() {
        let attr = file_attr();
        let src = file_source(&attr, 2);
        let ask = bits(&[Attr4::Size, Attr4::Sacl, Attr4::Archive, Attr4::Mode]);
        let got = getattr(&ask, &src).expect("getattr");
        assert_eq!(got.attrmask, bits(&[Attr4::Size, Attr4::Mode]));
        assert_eq!(
            got.attr_vals.as_bytes(),
            [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x09, 0xe9]
        );
        // Bits no attribute has, past the last known one.
        let odd = Bitmap4(vec![0, 0, 1 << 31]);
        assert_eq!(getattr(&odd, &src).expect("getattr"), Fattr4::default());
        // No birth time: time_create left out.
        let mut no_btime = file_attr();
        no_btime.btime = None;
        let got =
            getattr(&bits(&[Attr4::TimeCreate]), &file_source(&no_btime, 1)).expect("getattr");
        assert_eq!(got, Fattr4::default());
    }

    #[test]
    fn write_only_times_are_invalid_in_getattr() {
        let attr = file_attr();
        let src = file_source(&attr, 1);
        for bit in [Attr4::TimeAccessSet, Attr4::TimeModifySet] {
            assert_eq!(
                getattr(&bits(&[Attr4::Size, bit]), &src),
                Err(Nfsstat4::Inval)
            );
        }
        assert_eq!(getattr(&everything(), &src), Err(Nfsstat4::Inval));
    }

    #[test]
    fn change_is_ctime_seconds_shifted_and_nanoseconds() {
        assert_eq!(
            change(Time {
                seconds: 0,
                nanos: 0
            }),
            0
        );
        assert_eq!(
            change(Time {
                seconds: 1,
                nanos: 0
            }),
            1 << 30
        );
        assert_eq!(
            change(Time {
                seconds: 1_700_000_000,
                nanos: 123
            }),
            (1_700_000_000u64 << 30) | 123
        );
        // A change within one second moves it, and the next second is
        // above every nanosecond of this one.
        let a = change(Time {
            seconds: 5,
            nanos: 999_999_999,
        });
        let b = change(Time {
            seconds: 6,
            nanos: 0,
        });
        assert!(a < b);
        assert_ne!(
            change(Time {
                seconds: 5,
                nanos: 1
            }),
            change(Time {
                seconds: 5,
                nanos: 2
            })
        );
    }

    #[test]
    fn reads_and_writes_fit_the_export_and_the_session() {
        // A session as Linux asks for one on a 1 MiB export: the export
        // bounds it.
        let channel = (1 << 20) + 8 * 1024;
        assert_eq!(
            max_read_write(1 << 20, channel, channel),
            (1 << 20, 1 << 20)
        );
        // Small channels bound it, with room for the rest of the COMPOUND.
        assert_eq!(
            max_read_write(1 << 20, 64 * 1024, 32 * 1024),
            (63 * 1024, 31 * 1024)
        );
        assert_eq!(max_read_write(1 << 20, 512, 0), (0, 0));
    }

    #[test]
    fn the_inputs_a_request_needs() {
        assert_eq!(needs(&bits(&[Attr4::Size, Attr4::Mode])), Needs::default());
        assert_eq!(
            needs(&bits(&[Attr4::Owner, Attr4::SpaceUsed])),
            Needs {
                owner: true,
                ..Needs::default()
            }
        );
        assert_eq!(
            needs(&bits(&[Attr4::OwnerGroup, Attr4::FilesFree])),
            Needs {
                owner_group: true,
                fs_stat: true,
                ..Needs::default()
            }
        );
        let attr = file_attr();
        let mut src = file_source(&attr, 1);
        src.owner = None;
        assert_eq!(
            getattr(&bits(&[Attr4::Owner]), &src),
            Err(Nfsstat4::Serverfault)
        );
        assert!(getattr(&bits(&[Attr4::OwnerGroup]), &src).is_ok());
        if let Object::File(f) = &mut src.object {
            f.fs_stat = None;
        }
        assert_eq!(
            getattr(&bits(&[Attr4::SpaceFree]), &src),
            Err(Nfsstat4::Serverfault)
        );
    }

    #[test]
    fn an_export_root_reports_where_it_is_mounted_on() {
        let mut attr = file_attr();
        attr.kind = FileKind::Directory;
        let mut src = file_source(&attr, 1);
        if let Object::File(f) = &mut src.object {
            f.mounted_on_fileid = Some(0xfeed);
        }
        let got = decode(
            &getattr(
                &bits(&[Attr4::Type, Attr4::Fileid, Attr4::MountedOnFileid]),
                &src,
            )
            .expect("getattr"),
        );
        assert_eq!(got[&Attr4::Type.bit()], Val::U32(2));
        assert_eq!(got[&Attr4::Fileid.bit()], Val::U64(777));
        assert_eq!(got[&Attr4::MountedOnFileid.bit()], Val::U64(0xfeed));
    }

    #[test]
    fn a_device_reports_its_numbers() {
        let mut attr = file_attr();
        attr.kind = FileKind::CharDevice;
        attr.rdev_major = 4;
        attr.rdev_minor = 64;
        let got = decode(
            &getattr(&bits(&[Attr4::Type, Attr4::Rawdev]), &file_source(&attr, 1))
                .expect("getattr"),
        );
        assert_eq!(got[&Attr4::Type.bit()], Val::U32(4));
        assert_eq!(got[&Attr4::Rawdev.bit()], Val::Pair(4, 64));
    }

    #[test]
    fn pseudo_directories_are_read_only_directories_of_fsid_zero() {
        let stamp = Time {
            seconds: 1_750_000_000,
            nanos: 7,
        };
        let src = AttrSource {
            minor: 2,
            object: Object::Pseudo(PseudoSource {
                fileid: 0xabcdef,
                stamp,
            }),
            fh: &[2; 25],
            owner: Some("0"),
            owner_group: Some("0"),
            acl: Some(&Nfsacl4(Vec::new())),
            lease_time: 90,
            maxread: 1 << 20,
            maxwrite: 1 << 20,
        };
        assert_eq!(src.object.owner_ids(), (0, 0));
        // No statvfs needed: a pseudo directory has no space.
        let got = decode(&getattr(&readable(2), &src).expect("getattr"));
        let t = Val::Time(stamp.seconds, stamp.nanos);
        assert_eq!(got[&Attr4::Type.bit()], Val::U32(2));
        assert_eq!(got[&Attr4::Mode.bit()], Val::U32(0o555));
        assert_eq!(got[&Attr4::Fileid.bit()], Val::U64(0xabcdef));
        assert_eq!(got[&Attr4::MountedOnFileid.bit()], Val::U64(0xabcdef));
        assert_eq!(got[&Attr4::Fsid.bit()], Val::Pair(0, 0));
        assert_eq!(got[&Attr4::Change.bit()], Val::U64(change(stamp)));
        for a in [
            Attr4::TimeAccess,
            Attr4::TimeModify,
            Attr4::TimeMetadata,
            Attr4::TimeCreate,
        ] {
            assert_eq!(got[&a.bit()], t, "{a:?}");
        }
        for a in [
            Attr4::SpaceTotal,
            Attr4::FilesFree,
            Attr4::SpaceUsed,
            Attr4::Size,
        ] {
            assert_eq!(got[&a.bit()], Val::U64(0), "{a:?}");
        }
        assert_eq!(got[&Attr4::XattrSupport.bit()], Val::Bool(false));
        assert_eq!(got[&Attr4::Filehandle.bit()], Val::Bytes(vec![2; 25]));
        assert_eq!(got[&Attr4::Owner.bit()], Val::Bytes(b"0".to_vec()));
    }

    #[test]
    fn rdattr_error_only_when_asked() {
        let ask = bits(&[Attr4::Type, Attr4::RdattrError, Attr4::Size]);
        let f = rdattr_error(&ask, Nfsstat4::Access).expect("asked");
        assert_eq!(f.attrmask, bits(&[Attr4::RdattrError]));
        assert_eq!(f.attr_vals.as_bytes(), 13u32.to_be_bytes());
        assert_eq!(rdattr_error(&bits(&[Attr4::Type]), Nfsstat4::Access), None);
    }

    /// The client's `fattr4` of `attrs`, from our own GETATTR with some
    /// other values in it.
    fn client_fattr(src: &AttrSource, attrs: &[Attr4]) -> Fattr4 {
        getattr(&bits(attrs), src).expect("getattr")
    }

    #[test]
    fn verify_compares_our_encoding_with_the_clients_bytes() {
        let attr = file_attr();
        let src = file_source(&attr, 2);
        let mandatory = [
            Attr4::SupportedAttrs,
            Attr4::Type,
            Attr4::FhExpireType,
            Attr4::Change,
            Attr4::Size,
            Attr4::LinkSupport,
            Attr4::SymlinkSupport,
            Attr4::NamedAttr,
            Attr4::Fsid,
            Attr4::UniqueHandles,
            Attr4::LeaseTime,
            Attr4::Filehandle,
            Attr4::SuppattrExclcreat,
            Attr4::Owner,
            Attr4::SpaceFree,
            Attr4::XattrSupport,
        ];
        let theirs = client_fattr(&src, &mandatory);
        assert_eq!(same_attrs(&theirs, &src), Ok(true));

        // One byte off (the size one more): not the same.
        let mut bigger = file_attr();
        bigger.size += 1;
        let theirs = client_fattr(&file_source(&bigger, 2), &[Attr4::Size]);
        assert_eq!(same_attrs(&theirs, &src), Ok(false));
        // Another owner string for the same uid: not the same either.
        let mut named = file_source(&attr, 2);
        named.owner = Some("alice@example.org");
        let theirs = client_fattr(&named, &[Attr4::Owner]);
        assert_eq!(same_attrs(&theirs, &src), Ok(false));
        // Values longer or shorter than the bitmap says.
        let mut long = client_fattr(&src, &[Attr4::Type]);
        long.attr_vals.0.extend_from_slice(&[0; 4]);
        assert_eq!(same_attrs(&long, &src), Ok(false));
        let short = Fattr4 {
            attrmask: bits(&[Attr4::Size]),
            attr_vals: AttrList4(vec![0, 0, 0, 2]),
        };
        assert_eq!(same_attrs(&short, &src), Ok(false));
        // An empty bitmap verifies (nothing differs).
        assert_eq!(same_attrs(&Fattr4::default(), &src), Ok(true));
    }

    #[test]
    fn verify_refuses_what_it_cannot_compare() {
        let attr = file_attr();
        let src = file_source(&attr, 1);
        let with = |attrs: &[Attr4], vals: Vec<u8>| Fattr4 {
            attrmask: bits(attrs),
            attr_vals: AttrList4(vals),
        };
        for bad in [
            Attr4::RdattrError,
            Attr4::TimeAccessSet,
            Attr4::TimeModifySet,
        ] {
            assert_eq!(
                same_attrs(&with(&[Attr4::Type, bad], vec![0; 12]), &src),
                Err(Nfsstat4::Inval),
                "{bad:?}"
            );
        }
        for unsupported in [
            Attr4::Sacl,
            Attr4::Archive,
            Attr4::TimeBackup,
            Attr4::XattrSupport,
        ] {
            assert_eq!(
                same_attrs(&with(&[unsupported], vec![0; 4]), &src),
                Err(Nfsstat4::Attrnotsupp),
                "{unsupported:?}"
            );
        }
        // Unsupported first, whatever else the bitmap holds.
        assert_eq!(
            same_attrs(
                &with(&[Attr4::RdattrError, Attr4::Hidden], vec![0; 8]),
                &src
            ),
            Err(Nfsstat4::Attrnotsupp)
        );
        assert_eq!(
            same_attrs(
                &Fattr4 {
                    attrmask: Bitmap4(vec![0, 0, 1 << 31]),
                    attr_vals: AttrList4(vec![]),
                },
                &src
            ),
            Err(Nfsstat4::Attrnotsupp)
        );
    }

    fn numeric(name: &[u8]) -> Result<u32, Nfsstat4> {
        std::str::from_utf8(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Nfsstat4::Badowner)
    }

    #[test]
    fn an_acl_is_set_by_setattr_alone_and_once() {
        let aces = Nfsacl4(vec![Nfsace4 {
            acetype: 0,
            flag: 0,
            access_mask: 0x1,
            who: Owner4::from("EVERYONE@"),
        }]);
        let acl = SetAttrs4 {
            mode: Some(0o644),
            acl: Some(aces.clone()),
            ..SetAttrs4::default()
        };
        let (set, got) = set_attrs_and_acl(1, &acl.to_fattr(), numeric, numeric).expect("acl");
        assert_eq!(set.mode, Some(0o644));
        assert_eq!(got, Some(aces.0.clone()));
        let dacl = |flag| SetAttrs4 {
            dacl: Some(Nfsacl41 {
                na41_flag: flag,
                na41_aces: aces.clone(),
            }),
            ..SetAttrs4::default()
        };
        let (_, got) = set_attrs_and_acl(1, &dacl(0).to_fattr(), numeric, numeric).expect("dacl");
        assert_eq!(got, Some(aces.0.clone()));
        // ACL4_PROTECTED: POSIX cannot keep it.
        assert_eq!(
            set_attrs_and_acl(1, &dacl(2).to_fattr(), numeric, numeric),
            Err(Nfsstat4::Attrnotsupp)
        );
        let both = SetAttrs4 {
            acl: Some(aces.clone()),
            ..dacl(0)
        };
        assert_eq!(
            set_attrs_and_acl(1, &both.to_fattr(), numeric, numeric),
            Err(Nfsstat4::Inval)
        );
        // Not by EXCLUSIVE4_1 (suppattr_exclcreat offers none).
        assert_eq!(
            set_attrs(1, &acl.to_fattr(), numeric, numeric),
            Err(Nfsstat4::Inval)
        );
    }

    #[test]
    fn setattr_converts_what_the_client_set() {
        let set = SetAttrs4 {
            size: Some(12345),
            mode: Some(0o104755),
            owner: Some(Owner4::from("1001")),
            owner_group: Some(Owner4::from("50")),
            time_access_set: Some(SetTime4::ServerTime),
            time_modify_set: Some(SetTime4::ClientTime(NfsTime4 {
                seconds: -5,
                nseconds: 999_999_999,
            })),
            ..SetAttrs4::default()
        };
        assert_eq!(
            set_attrs(1, &set.to_fattr(), numeric, numeric),
            Ok(SetAttrs {
                mode: Some(0o4755),
                uid: Some(1001),
                gid: Some(50),
                size: Some(12345),
                atime: Some(SetTime::ServerNow),
                mtime: Some(SetTime::Client(Time {
                    seconds: -5,
                    nanos: 999_999_999,
                })),
            })
        );
        let only_mode = SetAttrs4 {
            mode: Some(0o600),
            ..SetAttrs4::default()
        };
        let never = |_: &[u8]| -> Result<u32, Nfsstat4> { panic!("no owner to map") };
        assert_eq!(
            set_attrs(2, &only_mode.to_fattr(), never, never),
            Ok(SetAttrs {
                mode: Some(0o600),
                ..SetAttrs::default()
            })
        );
        assert_eq!(
            set_attrs(1, &SetAttrs4::default().to_fattr(), never, never),
            Ok(SetAttrs::default())
        );
    }

    #[test]
    fn setattr_refuses_read_only_unsupported_and_malformed_attributes() {
        let with = |attrs: &[Attr4], vals: Vec<u8>| Fattr4 {
            attrmask: bits(attrs),
            attr_vals: AttrList4(vals),
        };
        // Supported but not settable.
        for read_only in [
            Attr4::Type,
            Attr4::Change,
            Attr4::Fileid,
            Attr4::TimeCreate,
            Attr4::TimeModify,
            Attr4::SpaceUsed,
            Attr4::RdattrError,
        ] {
            assert_eq!(
                set_attrs(
                    1,
                    &with(&[Attr4::Mode, read_only], vec![0; 16]),
                    numeric,
                    numeric
                ),
                Err(Nfsstat4::Inval),
                "{read_only:?}"
            );
        }
        // Settable in the protocol, not supported here (or not in 4.1).
        for unsupported in [
            Attr4::Sacl,
            Attr4::Archive,
            Attr4::Hidden,
            Attr4::TimeBackup,
            Attr4::ModeSetMasked,
        ] {
            assert_eq!(
                set_attrs(
                    2,
                    &with(&[Attr4::Mode, unsupported], vec![0; 16]),
                    numeric,
                    numeric
                ),
                Err(Nfsstat4::Attrnotsupp),
                "{unsupported:?}"
            );
        }
        assert_eq!(
            set_attrs(
                1,
                &with(&[Attr4::XattrSupport], vec![0; 4]),
                numeric,
                numeric
            ),
            Err(Nfsstat4::Attrnotsupp)
        );
        // Short or long values.
        assert_eq!(
            set_attrs(1, &with(&[Attr4::Size], vec![0; 4]), numeric, numeric),
            Err(Nfsstat4::Badxdr)
        );
        assert_eq!(
            set_attrs(1, &with(&[Attr4::Mode], vec![0; 8]), numeric, numeric),
            Err(Nfsstat4::Badxdr)
        );
        // A nanosecond count of a second or more.
        let late = SetAttrs4 {
            time_modify_set: Some(SetTime4::ClientTime(NfsTime4 {
                seconds: 1,
                nseconds: 1_000_000_000,
            })),
            ..SetAttrs4::default()
        };
        assert_eq!(
            set_attrs(1, &late.to_fattr(), numeric, numeric),
            Err(Nfsstat4::Inval)
        );
        // An owner the mapping does not know.
        let stranger = SetAttrs4 {
            owner: Some(Owner4::from("nobody@elsewhere")),
            ..SetAttrs4::default()
        };
        assert_eq!(
            set_attrs(1, &stranger.to_fattr(), numeric, numeric),
            Err(Nfsstat4::Badowner)
        );
    }
}
