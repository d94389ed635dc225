//! Conversions between the backend's types (`dionfs_fs`) and the wire types
//! of RFC 1813 (`dionfs_proto::nfs3`).

use dionfs_fs::{Attr, FileKind, SetAttrs, SetTime as FsSetTime, Time};
use dionfs_proto::nfs3::{
    Fattr3, Ftype3, NfsTime3, PostOpAttr, PreOpAttr, Sattr3, SetTime, SpecData3, WccAttr, WccData,
};

/// `fattr3` from the backend's attributes.
pub fn fattr3(a: &Attr) -> Fattr3 {
    Fattr3 {
        ftype: ftype3(a.kind),
        mode: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        size: a.size,
        used: a.used,
        rdev: SpecData3 {
            specdata1: a.rdev_major,
            specdata2: a.rdev_minor,
        },
        fsid: a.fsid,
        fileid: a.fileid,
        atime: nfstime3(a.atime),
        mtime: nfstime3(a.mtime),
        ctime: nfstime3(a.ctime),
    }
}

pub fn ftype3(k: FileKind) -> Ftype3 {
    match k {
        FileKind::Regular => Ftype3::Reg,
        FileKind::Directory => Ftype3::Dir,
        FileKind::BlockDevice => Ftype3::Blk,
        FileKind::CharDevice => Ftype3::Chr,
        FileKind::Symlink => Ftype3::Lnk,
        FileKind::Socket => Ftype3::Sock,
        FileKind::Fifo => Ftype3::Fifo,
    }
}

/// `nfstime3` holds unsigned 32-bit seconds: times before 1970 or after
/// 2106 are clamped rather than wrapped.
pub fn nfstime3(t: Time) -> NfsTime3 {
    NfsTime3 {
        seconds: t.seconds.clamp(0, i64::from(u32::MAX)) as u32,
        nseconds: t.nanos,
    }
}

pub fn time_from_nfs(t: NfsTime3) -> Time {
    Time {
        seconds: i64::from(t.seconds),
        nanos: t.nseconds.min(999_999_999),
    }
}

/// `post_op_attr` from an optional attribute fetch (attributes are optional
/// after an operation; a failed fetch is not an error of the operation).
pub fn post_op(a: Option<&Attr>) -> PostOpAttr {
    PostOpAttr(a.map(fattr3))
}

/// `pre_op_attr`: the subset of attributes taken before a change.
pub fn pre_op(a: Option<&Attr>) -> PreOpAttr {
    PreOpAttr(a.map(|a| WccAttr {
        size: a.size,
        mtime: nfstime3(a.mtime),
        ctime: nfstime3(a.ctime),
    }))
}

/// `wcc_data` from the attributes before and after a change.
pub fn wcc(before: Option<&Attr>, after: Option<&Attr>) -> WccData {
    WccData {
        before: pre_op(before),
        after: post_op(after),
    }
}

/// What SETATTR/CREATE/MKDIR/... asked to set, in the backend's terms.
pub fn set_attrs(s: &Sattr3) -> SetAttrs {
    let time = |t: &SetTime| match t {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(FsSetTime::ServerNow),
        SetTime::ClientTime(t) => Some(FsSetTime::Client(time_from_nfs(*t))),
    };
    SetAttrs {
        mode: s.mode.map(|m| m & 0o7777),
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        atime: time(&s.atime),
        mtime: time(&s.mtime),
    }
}
