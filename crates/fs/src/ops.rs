//! Metadata operations of one export, one function per NFS procedure
//! (as knfsd's `vfs.c`), each given the [`ExportFs`] it works in when it
//! needs more than the nodes it is given.
//!
//! Every call is blocking and is made by the server inside
//! `dionfs_sys::cred::with_creds(caller)`, so the kernel checks permissions
//! as the (squashed) caller and new files are owned by it. Calls work
//! relative to the `O_PATH` descriptors of [`Node`]s (`*at()` with
//! `AT_EMPTY_PATH`), or through `/proc/thread-self/fd/N` for the few calls
//! that have no empty-path form (chmod, truncate, access, link).
//!
//! Names are checked as in knfsd (`export::check_name`); `.`
//! and `..` are refused with the status knfsd gives for each procedure.

use std::ffi::CString;
use std::os::fd::{BorrowedFd, OwnedFd};

use dionfs_dataplane::{SizeProbe, SizeSeen};
use dionfs_sys::cred;
use rustix::fs::{
    chmodat, chownat, fstatvfs, linkat, mkdirat, mknodat, readlinkat, renameat, symlinkat,
    unlinkat, utimensat, Access, AtFlags, FileType, Gid, Mode, OFlags, Timespec, Timestamps, Uid,
    CWD, UTIME_NOW, UTIME_OMIT,
};
use rustix::io::Errno;

use crate::access_memo::Stamp;
use crate::attr::{Attr, FileKind, SetAttrs, SetTime, Time};
use crate::export::{
    check_name, create_beneath, is_dot_or_dotdot, open_beneath, proc_fd_path, ExportFs, Node,
};
use crate::{FsError, OpenFile};
use dionfs_sys::cred::Creds;

/// RFC 1813 ACCESS3 bits.
pub mod access3 {
    /// Read data from a file or read a directory.
    pub const READ: u32 = 0x0001;
    /// Look up a name in a directory.
    pub const LOOKUP: u32 = 0x0002;
    /// Rewrite existing file data or modify existing directory entries.
    pub const MODIFY: u32 = 0x0004;
    /// Write new data or add directory entries.
    pub const EXTEND: u32 = 0x0008;
    /// Delete an existing directory entry.
    pub const DELETE: u32 = 0x0010;
    /// Execute a file.
    pub const EXECUTE: u32 = 0x0020;
}

/// How CREATE treats an existing file (RFC 1813 §3.3.8 `createhow3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow {
    /// Create, or use the existing regular file (only `size` is applied to
    /// an existing one, as knfsd does).
    Unchecked(SetAttrs),
    /// Create; `Exist` if the name exists.
    Guarded(SetAttrs),
    /// Create exactly once per verifier: the verifier is stored in the new
    /// file's atime/mtime (knfsd's scheme), so a retransmitted CREATE with
    /// the same verifier finds "its" file and succeeds, another gets
    /// `Exist`. The client then sets the real attributes with SETATTR.
    Exclusive([u8; 8]),
}

/// The special files MKNOD creates (RFC 1813 §3.3.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecialFile {
    /// `NF3FIFO`.
    Fifo,
    /// `NF3SOCK`.
    Socket,
    /// `NF3CHR` with major and minor numbers.
    CharDevice(u32, u32),
    /// `NF3BLK` with major and minor numbers.
    BlockDevice(u32, u32),
}

/// FSSTAT's numbers (RFC 1813 §3.3.18), from `statvfs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    /// Size of the filesystem in bytes.
    pub total_bytes: u64,
    /// Free bytes.
    pub free_bytes: u64,
    /// Bytes free to non-privileged users.
    pub avail_bytes: u64,
    /// Total file slots (inodes).
    pub total_files: u64,
    /// Free file slots.
    pub free_files: u64,
    /// File slots free to non-privileged users.
    pub avail_files: u64,
}

/// PATHCONF's answers (RFC 1813 §3.3.20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConf {
    /// Maximum hard links; knfsd reports 255 ("at least").
    pub link_max: u32,
    /// Maximum name length.
    pub name_max: u32,
    /// Long names are rejected, not truncated.
    pub no_trunc: bool,
    /// Only root may chown.
    pub chown_restricted: bool,
    /// Names are case-sensitive.
    pub case_insensitive: bool,
    /// Names keep their case.
    pub case_preserving: bool,
}

/// Mode of a new file when the client sends none.
const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of a new directory when the client sends none.
const DEFAULT_DIR_MODE: u32 = 0o755;
/// Mode of a file made by an EXCLUSIVE create until the client's SETATTR.
const EXCLUSIVE_MODE: u32 = 0o600;
/// Linux `PATH_MAX`: the longest symlink target.
const PATH_MAX: usize = 4096;

/// GETATTR. A regular file open in the data plane reports the data
/// plane's size, which never shows an extending write half-done.
pub fn getattr(fs: &ExportFs, node: &Node) -> Result<Attr, FsError> {
    if node.kind != FileKind::Regular {
        return Attr::of_fd(node.fd());
    }
    match fs.cache.get_live(&(fs.fs_id, node.kernel.clone())) {
        Some(file) => {
            let probe = file.data().size_probe();
            Ok(with_data_size(Attr::of_fd(node.fd())?, probe, &file))
        }
        None => Attr::of_fd(node.fd()),
    }
}

/// SETATTR: applies the size first, then owner, mode and times (so an
/// explicit mtime survives the truncation and a mode survives the
/// set-id clearing of chown), and returns the new attributes. The
/// server checks the ctime guard against [`getattr`] first
/// (`NotSync`). Mode changes of symlinks are ignored, as knfsd does.
pub fn setattr(fs: &ExportFs, node: &Node, attrs: &SetAttrs) -> Result<Attr, FsError> {
    if let Some(size) = attrs.size {
        set_size(fs, node, size)?;
    }
    if attrs.uid.is_some() || attrs.gid.is_some() {
        chownat(
            node.fd(),
            c"",
            attrs.uid.map(Uid::from_raw),
            attrs.gid.map(Gid::from_raw),
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )?;
    }
    if let Some(mode) = attrs.mode {
        if node.kind != FileKind::Symlink {
            chmodat(
                CWD,
                proc_fd_path(node.fd()).as_c_str(),
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )?;
        }
    }
    if attrs.atime.is_some() || attrs.mtime.is_some() {
        let times = Timestamps {
            last_access: timespec(attrs.atime),
            last_modification: timespec(attrs.mtime),
        };
        let set = || {
            utimensat(
                node.fd(),
                c"",
                &times,
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(std::io::Error::from)
        };
        // With checksums, an mtime the server sets is its own change,
        // not one behind its back (which would rebuild the checksums
        // at the next mismatch instead of reporting it).
        match checksummed_file(fs, node, attrs.mtime.is_some())? {
            Some(file) => {
                let sums = file.data().integrity().ok_or(FsError::Io)?;
                sums.server_change(file.data().buffered_fd(), set)?
            }
            None => set()?,
        }
    }
    getattr(fs, node)
}

/// The open file of `node` if `wanted`, it is a regular file and the
/// export keeps checksums (opened if it was not).
fn checksummed_file(
    fs: &ExportFs,
    node: &Node,
    wanted: bool,
) -> Result<Option<std::sync::Arc<OpenFile>>, FsError> {
    if !wanted || node.kind != FileKind::Regular || fs.integrity.is_none() {
        return Ok(None);
    }
    let file = fs.open_file_of(node)?;
    Ok(file.data().integrity().is_some().then_some(file))
}

/// Truncates or extends a regular file to `size` bytes. Needs write
/// permission, or ownership of the file (knfsd's owner override: a
/// client may create a file read-only and still set its size).
///
/// Goes through the file's one data-plane [`OpenFile`]
/// ([`dionfs_dataplane::DataFile::truncate`]), under its whole-file
/// range lock, so it never races a read-modify-write in flight. Call
/// it under the caller's credentials: the `ftruncate` then clears
/// set-user-ID and set-group-ID bits as a local truncate would.
pub fn set_size(fs: &ExportFs, node: &Node, size: u64) -> Result<(), FsError> {
    match node.kind {
        FileKind::Regular => {}
        FileKind::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::Inval),
    }
    if size > i64::MAX as u64 {
        return Err(FsError::FBig);
    }
    check_io_access(node, true)?;
    let file = fs.open_file_of(node)?;
    file.data().truncate(size).map_err(|e| {
        Errno::from_io_error(&e)
            .map(FsError::from)
            .unwrap_or(FsError::ServerFault)
    })?;
    Ok(())
}

/// Attributes of an open file (READ, WRITE and COMMIT replies): one
/// statx. A file with no links left was deleted behind the server's
/// back (REMOVE and RENAME evict what they unlink): it is dropped from
/// the open-file cache and its handle is [`FsError::Stale`], as knfsd
/// answers for an unlinked inode.
pub fn file_attr(fs: &ExportFs, file: &OpenFile) -> Result<Attr, FsError> {
    file_attr_seen(fs, file).map(|(attr, _)| attr)
}

/// [`file_attr`], and the kernel's size it read, for a READ that follows
/// (`DataPlane::read_without_blocking`).
pub fn file_attr_seen(fs: &ExportFs, file: &OpenFile) -> Result<(Attr, SizeSeen), FsError> {
    let probe = file.data().size_probe();
    let attr = Attr::of_fd(file.fd())?;
    if attr.nlink == 0 {
        fs.cache.evict(&(fs.fs_id, file.kernel().clone()));
        return Err(FsError::Stale);
    }
    let seen = SizeSeen::new(probe, attr.size);
    Ok((with_data_size(attr, probe, file), seen))
}

/// [`check_io_access`] for a file opened with
/// [`ExportFs::open_file`].
pub fn check_file_access(file: &OpenFile, write: bool) -> Result<(), FsError> {
    check_io_access_of(file.fd(), FileKind::Regular, write)
}

/// Whether [`check_file_access`] granted `creds` this access
/// to `file` since it last changed: `attr` must come from a statx made
/// after the caller's call arrived (see `access_memo.rs`). No system
/// call, no credential switch.
pub fn file_access_granted(file: &OpenFile, creds: &Creds, write: bool, attr: &Attr) -> bool {
    file.access.granted(creds, write, Stamp::of(attr))
}

/// [`check_file_access`] that remembers a grant, to the
/// calling thread's credentials, for [`file_access_granted`];
/// `attr` must come from a statx made before this call.
pub fn check_file_access_remembered(
    file: &OpenFile,
    write: bool,
    attr: &Attr,
) -> Result<(), FsError> {
    check_file_access(file, write)?;
    file.access.grant(&cred::current(), write, Stamp::of(attr));
    Ok(())
}

/// ACCESS: which of the `requested` ACCESS3 bits the caller has,
/// checked by the kernel (`faccessat2(AT_EACCESS)` under the caller's
/// credentials). The bits map to kernel checks as in knfsd
/// (`nfs3_diraccess` / `nfs3_regaccess` / `nfs3_anyaccess`). The server
/// clears MODIFY/EXTEND/DELETE itself on read-only exports.
pub fn access(node: &Node, requested: u32) -> Result<u32, FsError> {
    use access3::*;
    let r = Access::READ_OK;
    let w = Access::WRITE_OK;
    let x = Access::EXEC_OK;
    let map: &[(u32, Access)] = match node.kind {
        FileKind::Directory => &[
            (READ, r),
            (LOOKUP, x),
            (MODIFY, w.union(x)),
            (EXTEND, w.union(x)),
            (DELETE, w.union(x)),
        ],
        FileKind::Regular => &[(READ, r), (MODIFY, w), (EXTEND, w), (EXECUTE, x)],
        _ => &[(READ, r), (MODIFY, w), (EXTEND, w), (EXECUTE, x)],
    };
    let mut granted = 0;
    // Each distinct kernel check is made once.
    let mut answers: Vec<(Access, bool)> = Vec::with_capacity(4);
    for &(bit, mode) in map {
        if requested & bit == 0 {
            continue;
        }
        let allowed = match answers.iter().find(|(m, _)| *m == mode) {
            Some(&(_, allowed)) => allowed,
            None => {
                let allowed = kernel_allows(node.fd(), mode)?;
                answers.push((mode, allowed));
                allowed
            }
        };
        if allowed {
            granted |= bit;
        }
    }
    // Owner override for reading regular files (knfsd's
    // NFSD_MAY_OWNER_OVERRIDE in nfs3_regaccess).
    if node.kind == FileKind::Regular
        && requested & READ != 0
        && granted & READ == 0
        && caller_owns(node.fd())?
    {
        granted |= READ;
    }
    Ok(granted)
}

/// The permission check for READ (`write == false`) and WRITE of a
/// regular file, like knfsd's `nfsd_permission` for those: read needs
/// read *or execute* permission (clients read executables to run
/// them), write needs write permission, and the owner may always do
/// both. Call it inside `with_creds` before using the open file.
pub fn check_io_access(node: &Node, write: bool) -> Result<(), FsError> {
    check_io_access_of(node.fd(), node.kind, write)
}

fn check_io_access_of(fd: BorrowedFd<'_>, kind: FileKind, write: bool) -> Result<(), FsError> {
    match kind {
        FileKind::Regular => {}
        FileKind::Directory => return Err(FsError::IsDir),
        _ => return Err(FsError::Inval),
    }
    let allowed = if write {
        kernel_allows(fd, Access::WRITE_OK)?
    } else {
        kernel_allows(fd, Access::READ_OK)? || kernel_allows(fd, Access::EXEC_OK)?
    };
    if allowed || caller_owns(fd)? {
        Ok(())
    } else {
        Err(FsError::Access)
    }
}

/// READLINK.
pub fn readlink(node: &Node) -> Result<Vec<u8>, FsError> {
    if node.kind != FileKind::Symlink {
        return Err(FsError::Inval);
    }
    Ok(readlinkat(node.fd(), c"", Vec::new())?.into_bytes())
}

/// `name` checked as a new or existing entry of directory `dir`: `.` and
/// `..` are `dot` (the status knfsd gives for the procedure).
fn entry_name(dir: &Node, name: &[u8], dot: FsError) -> Result<CString, FsError> {
    dir.require_dir()?;
    let name = check_name(name)?;
    if is_dot_or_dotdot(&name) {
        return Err(dot);
    }
    Ok(name)
}

/// CREATE of a regular file; returns the file and its attributes.
pub fn create(
    fs: &ExportFs,
    dir: &Node,
    name: &[u8],
    how: &CreateHow,
) -> Result<(Node, Attr), FsError> {
    let name = entry_name(dir, name, FsError::Exist)?;
    let mode = match how {
        CreateHow::Unchecked(attrs) | CreateHow::Guarded(attrs) => {
            attrs.mode.unwrap_or(DEFAULT_FILE_MODE)
        }
        CreateHow::Exclusive(_) => EXCLUSIVE_MODE,
    };
    // O_RDONLY: a freshly created file is opened without a permission
    // check, whatever its mode.
    let created = create_beneath(
        dir.fd(),
        &name,
        OFlags::CREATE | OFlags::EXCL | OFlags::RDONLY | OFlags::NOFOLLOW,
        Mode::from_raw_mode(mode & 0o7777),
    );
    let created = match created {
        Ok(fd) => fd,
        Err(FsError::Exist) => return create_existing(fs, dir, &name, how),
        Err(e) => return Err(e),
    };
    let (node, attr) = fs.node_from_fd(created)?;
    match how {
        CreateHow::Unchecked(attrs) | CreateHow::Guarded(attrs) => {
            let size = attrs.size.filter(|&s| s != 0);
            finish_new(fs, node, attr, attrs, size, attrs.mode)
        }
        CreateHow::Exclusive(verf) => {
            let (atime, mtime) = verifier_times(verf);
            let attrs = SetAttrs {
                atime: Some(SetTime::Client(atime)),
                mtime: Some(SetTime::Client(mtime)),
                ..SetAttrs::default()
            };
            let attr = setattr(fs, &node, &attrs)?;
            Ok((node, attr))
        }
    }
}

/// CREATE found `name` already there.
fn create_existing(
    fs: &ExportFs,
    dir: &Node,
    name: &std::ffi::CString,
    how: &CreateHow,
) -> Result<(Node, Attr), FsError> {
    let fd = match how {
        CreateHow::Guarded(_) => return Err(FsError::Exist),
        _ => open_beneath(dir.fd(), name, OFlags::PATH | OFlags::NOFOLLOW)?,
    };
    let (node, attr) = fs.node_from_fd(fd)?;
    if attr.kind != FileKind::Regular {
        return Err(FsError::Exist);
    }
    match how {
        CreateHow::Unchecked(attrs) => match attrs.size {
            Some(size) => {
                set_size(fs, &node, size)?;
                let attr = getattr(fs, &node)?;
                Ok((node, attr))
            }
            None => Ok((node, attr)),
        },
        CreateHow::Exclusive(verf) => {
            let (atime, mtime) = verifier_times(verf);
            if attr.atime.seconds == atime.seconds
                && attr.mtime.seconds == mtime.seconds
                && attr.size == 0
            {
                // Our own earlier reply got lost: same verifier.
                Ok((node, attr))
            } else {
                Err(FsError::Exist)
            }
        }
        CreateHow::Guarded(_) => Err(FsError::Exist),
    }
}

/// Applies what creation itself could not set: owner and group (if the
/// client asked for other than the caller's), `size`, times, and the
/// mode bits that `mkdir`/`open` mask off (set-uid/set-gid). The size
/// and mode of `attrs` are not looked at: `size` and `mode` say what is
/// left to set of them.
fn finish_new(
    fs: &ExportFs,
    node: Node,
    attr: Attr,
    attrs: &SetAttrs,
    size: Option<u64>,
    mode: Option<u32>,
) -> Result<(Node, Attr), FsError> {
    let mut rest = SetAttrs {
        size,
        ..attrs.clone()
    };
    rest.uid = rest.uid.filter(|&uid| uid != attr.uid);
    rest.gid = rest.gid.filter(|&gid| gid != attr.gid);
    // The permission bits went to the create (the server's umask is 0)
    // and are not set again: where the directory has a default ACL, it
    // and the mode made the new file's permissions, as for a local
    // create (a chmod after would give others what the default ACL
    // denies them). Only the set-uid, set-gid and sticky bits the create
    // left out are added, to the permissions it made.
    let special = mode.map_or(0, |m| m & 0o7000);
    rest.mode = (special & !attr.mode != 0).then_some((attr.mode & 0o777) | special);
    if node.kind == FileKind::Symlink {
        rest.mode = None;
    }
    if rest.is_empty() {
        return Ok((node, attr));
    }
    let attr = setattr(fs, &node, &rest)?;
    Ok((node, attr))
}

/// MKDIR.
pub fn mkdir(
    fs: &ExportFs,
    dir: &Node,
    name: &[u8],
    attrs: &SetAttrs,
) -> Result<(Node, Attr), FsError> {
    let name = entry_name(dir, name, FsError::Exist)?;
    let mode = attrs.mode.unwrap_or(DEFAULT_DIR_MODE);
    mkdirat(
        dir.fd(),
        name.as_c_str(),
        Mode::from_raw_mode(mode & 0o7777),
    )?;
    let fd = open_beneath(
        dir.fd(),
        &name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    )?;
    let (node, attr) = fs.node_from_fd(fd)?;
    finish_new(fs, node, attr, attrs, None, Some(mode))
}

/// SYMLINK: creates `name` pointing at `target`, stored exactly as the
/// client sent it and never resolved by us.
pub fn symlink(
    fs: &ExportFs,
    dir: &Node,
    name: &[u8],
    target: &[u8],
    attrs: &SetAttrs,
) -> Result<(Node, Attr), FsError> {
    let name = entry_name(dir, name, FsError::Exist)?;
    if target.len() > PATH_MAX {
        return Err(FsError::NameTooLong);
    }
    if target.is_empty() || target.contains(&0) {
        return Err(FsError::Inval);
    }
    symlinkat(target, dir.fd(), name.as_c_str())?;
    let fd = open_beneath(dir.fd(), &name, OFlags::PATH | OFlags::NOFOLLOW)?;
    let (node, attr) = fs.node_from_fd(fd)?;
    finish_new(fs, node, attr, attrs, None, None)
}

/// MKNOD. Device files only where the export allows them
/// (`allow_devices`); even then the kernel requires `CAP_MKNOD`, which
/// only an unsquashed root caller has.
pub fn mknod(
    fs: &ExportFs,
    dir: &Node,
    name: &[u8],
    special: SpecialFile,
    attrs: &SetAttrs,
    allow_devices: bool,
) -> Result<(Node, Attr), FsError> {
    let name = entry_name(dir, name, FsError::Exist)?;
    let (file_type, dev) = match special {
        SpecialFile::Fifo => (FileType::Fifo, 0),
        SpecialFile::Socket => (FileType::Socket, 0),
        SpecialFile::CharDevice(major, minor) => {
            (FileType::CharacterDevice, rustix::fs::makedev(major, minor))
        }
        SpecialFile::BlockDevice(major, minor) => {
            (FileType::BlockDevice, rustix::fs::makedev(major, minor))
        }
    };
    let is_device = matches!(
        special,
        SpecialFile::CharDevice(..) | SpecialFile::BlockDevice(..)
    );
    if is_device && !allow_devices {
        return Err(FsError::Perm);
    }
    let mode = attrs.mode.unwrap_or(DEFAULT_FILE_MODE);
    mknodat(
        dir.fd(),
        name.as_c_str(),
        file_type,
        Mode::from_raw_mode(mode & 0o7777),
        dev,
    )?;
    let fd = open_beneath(dir.fd(), &name, OFlags::PATH | OFlags::NOFOLLOW)?;
    let (node, attr) = fs.node_from_fd(fd)?;
    finish_new(fs, node, attr, attrs, None, Some(mode))
}

/// REMOVE: unlinks a non-directory (`IsDir` for a directory, as
/// unlink(2) says). If that was the file's last name, its entry in the
/// open-file cache is evicted so the server does not keep it alive.
pub fn remove(fs: &ExportFs, dir: &Node, name: &[u8]) -> Result<(), FsError> {
    let name = entry_name(dir, name, FsError::Access)?;
    let victim = open_beneath(dir.fd(), &name, OFlags::PATH | OFlags::NOFOLLOW)?;
    unlinkat(dir.fd(), name.as_c_str(), AtFlags::empty())?;
    evict_if_gone(fs, victim);
    Ok(())
}

/// RMDIR.
pub fn rmdir(dir: &Node, name: &[u8]) -> Result<(), FsError> {
    let name = entry_name(dir, name, FsError::Access)?;
    unlinkat(dir.fd(), name.as_c_str(), AtFlags::REMOVEDIR)?;
    Ok(())
}

/// NFSv4 REMOVE (RFC 8881 section 18.25): removes `name` from `dir`
/// whatever it is, a directory as RMDIR would (`NotEmpty` unless empty),
/// anything else as REMOVE would, a symlink to a directory included (the
/// link goes, not what it points to). Names are checked as for those two;
/// a regular file whose last name this was is evicted from the open-file
/// cache, as by [`remove`].
///
/// The kernel picks: `unlinkat` without flags first, which removes any
/// non-directory and refuses a directory with `EISDIR` (Linux's answer,
/// `may_delete` in fs/namei.c) before it has changed anything; only then
/// `AT_REMOVEDIR`. So the type is decided under the directory's lock by
/// the call that removes, not by a `stat` made before it that a rename in
/// between could make wrong, and a file costs the one call `remove`
/// makes. knfsd's `nfsd_unlink` looks the name up and picks from its
/// inode's type, under the same lock, which a process outside the
/// kernel cannot hold. `EPERM` (what POSIX lets unlink answer for a
/// directory) is not retried as a directory: Linux answers it only for
/// a sticky directory or an append-only or immutable file, checks
/// `may_delete` makes for both calls before it looks at the type, so
/// `rmdir` would refuse alike. If the directory is replaced by a file
/// between the two calls (`ENOTDIR` from the second), the name is
/// unlinked once more, the answer whatever that gives.
pub fn remove_any(fs: &ExportFs, dir: &Node, name: &[u8]) -> Result<(), FsError> {
    let name = entry_name(dir, name, FsError::Access)?;
    let victim = open_beneath(dir.fd(), &name, OFlags::PATH | OFlags::NOFOLLOW)?;
    let removed = match unlinkat(dir.fd(), name.as_c_str(), AtFlags::empty()) {
        Err(Errno::ISDIR) => match unlinkat(dir.fd(), name.as_c_str(), AtFlags::REMOVEDIR) {
            Err(Errno::NOTDIR) => unlinkat(dir.fd(), name.as_c_str(), AtFlags::empty()),
            other => other,
        },
        other => other,
    };
    removed?;
    evict_if_gone(fs, victim);
    Ok(())
}

/// RENAME within this export (the server answers `Xdev` for handles of
/// two exports). A regular file replaced by the rename is evicted from
/// the open-file cache if that was its last name.
pub fn rename(
    fs: &ExportFs,
    from_dir: &Node,
    from_name: &[u8],
    to_dir: &Node,
    to_name: &[u8],
) -> Result<(), FsError> {
    from_dir.require_dir()?;
    to_dir.require_dir()?;
    let from_name = check_name(from_name)?;
    let to_name = check_name(to_name)?;
    if is_dot_or_dotdot(&from_name) || is_dot_or_dotdot(&to_name) {
        // knfsd's nfsd_rename answers PERM here.
        return Err(FsError::Perm);
    }
    let victim = match open_beneath(to_dir.fd(), &to_name, OFlags::PATH | OFlags::NOFOLLOW) {
        Ok(fd) => Some(fd),
        Err(FsError::NoEnt) => None,
        Err(e) => return Err(e),
    };
    renameat(
        from_dir.fd(),
        from_name.as_c_str(),
        to_dir.fd(),
        to_name.as_c_str(),
    )?;
    if let Some(victim) = victim {
        evict_if_gone(fs, victim);
    }
    Ok(())
}

/// LINK: a new name `name` in `dir` for `file`.
pub fn link(file: &Node, dir: &Node, name: &[u8]) -> Result<(), FsError> {
    dir.require_dir()?;
    if file.kind == FileKind::Directory {
        return Err(FsError::IsDir);
    }
    let name = check_name(name)?;
    if is_dot_or_dotdot(&name) {
        return Err(FsError::Exist);
    }
    // linkat(fd, "", AT_EMPTY_PATH) would need CAP_DAC_READ_SEARCH,
    // which a squashed thread does not have; the /proc path does not.
    linkat(
        CWD,
        proc_fd_path(file.fd()).as_c_str(),
        dir.fd(),
        name.as_c_str(),
        AtFlags::SYMLINK_FOLLOW,
    )?;
    Ok(())
}

/// FSSTAT.
pub fn fsstat(node: &Node) -> Result<FsStat, FsError> {
    let st = fstatvfs(node.fd())?;
    let bytes = |blocks: u64| blocks.saturating_mul(st.f_frsize);
    Ok(FsStat {
        total_bytes: bytes(st.f_blocks),
        free_bytes: bytes(st.f_bfree),
        avail_bytes: bytes(st.f_bavail),
        total_files: st.f_files,
        free_files: st.f_ffree,
        avail_files: st.f_favail,
    })
}

/// PATHCONF (the same for every file of a Linux export).
pub fn pathconf(_node: &Node) -> PathConf {
    PathConf {
        link_max: 255,
        name_max: crate::export::NAME_MAX as u32,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    }
}

/// Whether the calling thread's fsuid owns `node`.
fn caller_owns(fd: BorrowedFd<'_>) -> Result<bool, FsError> {
    Ok(Attr::of_fd(fd)?.uid == cred::current_uid())
}

/// After an unlink or a rename over it: if `victim` (opened before)
/// was a regular file that now has no name left, close the server's
/// cached descriptors of it.
fn evict_if_gone(fs: &ExportFs, victim: OwnedFd) {
    if fs.cache.is_empty() && fs.integrity.is_none() {
        return;
    }
    let Ok(attr) = Attr::of_fd(&victim) else {
        return;
    };
    if attr.kind != FileKind::Regular || attr.nlink != 0 {
        return;
    }
    if let Ok((kernel, _)) =
        dionfs_sys::handle::name_to_handle_at(&victim, c"", AtFlags::EMPTY_PATH)
    {
        // Its checksums go with it (integrity exports).
        if let Some(store) = &fs.integrity {
            store.remove(&crate::export::integrity_key(fs.fs_id, &kernel));
        }
        fs.cache.evict(&(fs.fs_id, kernel));
    }
}

/// The namespace of the extended attributes NFSv4.2 serves (RFC 8276
/// section 6: a client's names are the `user.` namespace's, without the
/// prefix).
const USER_XATTR: &[u8] = b"user.";

/// The largest value and the longest name list Linux keeps
/// (`XATTR_SIZE_MAX`, `XATTR_LIST_MAX`).
const XATTR_MAX: usize = 64 * 1024;

/// Whether SETXATTR may create the attribute, replace it, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    Either,
    /// `XATTR_CREATE`: `Exist` if it is there.
    Create,
    /// `XATTR_REPLACE`: [`XattrError::NoAttr`] if it is not.
    Replace,
}

/// Why an extended-attribute call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrError {
    /// The file has no attribute of that name (`ENODATA`).
    NoAttr,
    /// Any other failure. A value or list past what Linux keeps is
    /// `FBig` (`E2BIG`, `ERANGE`).
    Fs(FsError),
}

impl From<Errno> for XattrError {
    fn from(e: Errno) -> XattrError {
        match e {
            Errno::NODATA => XattrError::NoAttr,
            Errno::RANGE => XattrError::Fs(FsError::FBig),
            e => XattrError::Fs(FsError::from_errno(e)),
        }
    }
}

/// `user.` and `name`, refusing a name with a NUL byte (`Inval`).
fn user_xattr(name: &[u8]) -> Result<CString, XattrError> {
    CString::new([USER_XATTR, name].concat()).map_err(|_| XattrError::Fs(FsError::Inval))
}

/// The value of the user attribute `name` of `node` (without its
/// `user.` prefix), read as the caller through `/proc/thread-self/fd`
/// (an `O_PATH` descriptor refuses `fgetxattr`): the kernel checks the
/// caller may read the file.
pub fn getxattr(node: &Node, name: &[u8]) -> Result<Vec<u8>, XattrError> {
    let name = user_xattr(name)?;
    let mut value = vec![0; XATTR_MAX];
    let len = rustix::fs::getxattr(
        proc_fd_path(node.fd()).as_c_str(),
        name.as_c_str(),
        &mut value[..],
    )?;
    value.truncate(len);
    Ok(value)
}

/// Sets the user attribute `name` of `node` to `value`, as the caller
/// (who must be able to write the file), creating or replacing it as
/// `how` allows.
pub fn setxattr(node: &Node, name: &[u8], value: &[u8], how: XattrSet) -> Result<(), XattrError> {
    let name = user_xattr(name)?;
    let flags = match how {
        XattrSet::Either => rustix::fs::XattrFlags::empty(),
        XattrSet::Create => rustix::fs::XattrFlags::CREATE,
        XattrSet::Replace => rustix::fs::XattrFlags::REPLACE,
    };
    rustix::fs::setxattr(
        proc_fd_path(node.fd()).as_c_str(),
        name.as_c_str(),
        value,
        flags,
    )?;
    Ok(())
}

/// The names of `node`'s user attributes, without their prefix, in the
/// kernel's order (which a file keeps while its attributes do not
/// change: LISTXATTRS pages by position in it).
pub fn listxattrs(node: &Node) -> Result<Vec<Vec<u8>>, XattrError> {
    let mut list = vec![0; XATTR_MAX];
    let len = rustix::fs::listxattr(proc_fd_path(node.fd()).as_c_str(), &mut list[..])?;
    Ok(list[..len]
        .split(|&b| b == 0)
        .filter_map(|name| name.strip_prefix(USER_XATTR))
        .filter(|name| !name.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Removes the user attribute `name` of `node`, as the caller.
pub fn removexattr(node: &Node, name: &[u8]) -> Result<(), XattrError> {
    let name = user_xattr(name)?;
    rustix::fs::removexattr(proc_fd_path(node.fd()).as_c_str(), name.as_c_str())?;
    Ok(())
}

/// Whether `node`'s filesystem keeps user attributes: a read of one
/// that is not there answers `ENODATA` there, `EOPNOTSUPP` where the
/// namespace is refused (a mount with `nouser_xattr`, old tmpfs).
pub fn user_xattrs_supported(node: &Node) -> bool {
    let Ok(name) = user_xattr(b"dionfs.probe") else {
        return false;
    };
    !matches!(
        rustix::fs::getxattr(
            proc_fd_path(node.fd()).as_c_str(),
            name.as_c_str(),
            &mut [0u8; 0][..]
        ),
        Err(Errno::OPNOTSUPP | Errno::NOSYS)
    )
}

/// `attr` with the size the data plane reports for `file`.
fn with_data_size(mut attr: Attr, probe: SizeProbe, file: &OpenFile) -> Attr {
    if let Ok(size) = file.data().size_given(probe, attr.size) {
        attr.size = size;
    }
    attr
}

/// Whether the kernel grants `mode` on the file `fd` refers to (an `O_PATH`
/// descriptor will do) to the thread's current fs credentials.
/// `AT_EACCESS` makes faccessat use the fsuid, fsgid and groups (without it,
/// it would check the real uid: root); `AT_EMPTY_PATH` checks the
/// descriptor's own file, with no path walk (a `/proc/self/fd` path costs
/// a lookup through procfs: a tenth of a 4 KiB READ's server time).
fn kernel_allows(fd: BorrowedFd<'_>, mode: Access) -> Result<bool, FsError> {
    match dionfs_sys::io::access_fd(fd, mode) {
        Ok(()) => Ok(true),
        Err(e) => match Errno::from_io_error(&e) {
            Some(Errno::ACCESS | Errno::PERM | Errno::ROFS | Errno::TXTBSY) => Ok(false),
            _ => Err(e.into()),
        },
    }
}

/// The `utimensat` value for one optional time.
fn timespec(time: Option<SetTime>) -> Timespec {
    match time {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        Some(SetTime::ServerNow) => Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_NOW,
        },
        Some(SetTime::Client(t)) => Timespec {
            tv_sec: t.seconds,
            tv_nsec: i64::from(t.nanos.min(999_999_999)),
        },
    }
}

/// The (atime, mtime) an EXCLUSIVE create stores its verifier in, as
/// knfsd does: the two big-endian halves with the top bit cleared, so the
/// times stay positive for 32-bit `nfstime3` seconds.
fn verifier_times(verf: &[u8; 8]) -> (Time, Time) {
    let half = |b: &[u8]| {
        let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0x7fff_ffff;
        Time {
            seconds: i64::from(word),
            nanos: 0,
        }
    };
    let mtime = half(&verf[..4]);
    let atime = half(&verf[4..]);
    (atime, mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::MacKey;
    use crate::testutil::{export, nobody, LoopFs};
    use dionfs_sys::cred::with_creds;

    fn guarded(mode: u32) -> CreateHow {
        CreateHow::Guarded(SetAttrs {
            mode: Some(mode),
            ..SetAttrs::default()
        })
    }

    /// An export of a directory on `fs`, mode 0755 owned by root (set
    /// explicitly: `ExportFs::open` clears the process umask, so other
    /// tests' directories may be 0777).
    fn setup(fs: &LoopFs) -> ExportFs {
        use std::os::unix::fs::PermissionsExt;
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        export(&dir, 1, MacKey::from_bytes([9; 32]))
    }

    #[test]
    fn a_directory_s_default_acl_and_the_mode_make_a_new_file_s_permissions() {
        use crate::acl::{self, AclKind, PosixAcl, Tag};
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let dirs = SetAttrs {
            mode: Some(0o2775),
            ..SetAttrs::default()
        };
        let (dir, attr) = mkdir(&exp, &root, b"d", &dirs).expect("mkdir");
        // mkdir(2) leaves set-gid out; it is added after.
        assert_eq!(attr.mode, 0o2775);
        let default = PosixAcl::of(&[
            (Tag::UserObj, 7),
            (Tag::User(1002), 7),
            (Tag::GroupObj, 5),
            (Tag::Mask, 7),
            (Tag::Other, 0),
        ]);
        acl::set(&dir, AclKind::Default, Some(&default)).expect("setfacl");
        let (file, attr) = create(&exp, &dir, b"f", &guarded(0o644)).expect("create");
        // The local rule: the default ACL masked by the mode asked for;
        // others get nothing, whatever 0644 says of them.
        assert_eq!(attr.mode, 0o640);
        let access = acl::get(&file, AclKind::Access)
            .expect("getfacl")
            .expect("an inherited ACL");
        assert_eq!(access.get(Tag::Other).map(|e| e.perm), Some(0));
        assert_eq!(access.get(Tag::User(1002)).map(|e| e.perm), Some(7));
        assert_eq!(access.get(Tag::Mask).map(|e| e.perm), Some(4));
    }

    #[test]
    fn create_modes_and_errors() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let (file, attr) = create(&exp, &root, b"f", &guarded(0o640)).expect("create");
        assert_eq!(attr.kind, FileKind::Regular);
        assert_eq!(attr.mode, 0o640, "no umask applied");
        assert_eq!(file.kind(), FileKind::Regular);
        assert_eq!(
            create(&exp, &root, b"f", &guarded(0o600)).err(),
            Some(FsError::Exist)
        );
        // UNCHECKED on an existing file applies only the size.
        std::fs::write(exp_path(&exp, &file), b"hello").expect("write");
        let unchecked = CreateHow::Unchecked(SetAttrs {
            mode: Some(0o777),
            size: Some(2),
            ..SetAttrs::default()
        });
        let (_, attr) = create(&exp, &root, b"f", &unchecked).expect("unchecked");
        assert_eq!((attr.size, attr.mode), (2, 0o640));
        // UNCHECKED over a directory is EXIST.
        mkdir(&exp, &root, b"d", &SetAttrs::default()).expect("mkdir");
        assert_eq!(
            create(&exp, &root, b"d", &unchecked).err(),
            Some(FsError::Exist)
        );
        // Names.
        assert_eq!(
            create(&exp, &root, b".", &guarded(0o600)).err(),
            Some(FsError::Exist)
        );
        assert_eq!(
            create(&exp, &root, b"..", &guarded(0o600)).err(),
            Some(FsError::Exist)
        );
        assert_eq!(
            create(&exp, &root, &[b'n'; 256], &guarded(0o600)).err(),
            Some(FsError::NameTooLong)
        );
        assert_eq!(
            create(&exp, &root, b"a/b", &guarded(0o600)).err(),
            Some(FsError::Access)
        );
        assert_eq!(
            create(&exp, &file, b"x", &guarded(0o600)).err(),
            Some(FsError::NotDir)
        );
        // Set-id bits and an initial size are applied after creation.
        let how = CreateHow::Guarded(SetAttrs {
            mode: Some(0o4755),
            size: Some(4096),
            ..SetAttrs::default()
        });
        let (_, attr) = create(&exp, &root, b"suid", &how).expect("create suid");
        assert_eq!((attr.mode, attr.size), (0o4755, 4096));
    }

    /// The path of a node through /proc (for writing test data).
    fn exp_path(_exp: &ExportFs, node: &Node) -> std::path::PathBuf {
        std::fs::read_link(proc_fd_path(node.fd()).to_str().expect("utf-8")).expect("readlink")
    }

    #[test]
    fn exclusive_create_retransmit() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let verf = *b"\x81\x02\x03\x04\x05\x06\x07\x08";
        let (first, attr) =
            create(&exp, &root, b"x", &CreateHow::Exclusive(verf)).expect("exclusive");
        assert_eq!(attr.mtime.seconds, 0x0102_0304);
        assert_eq!(attr.atime.seconds, 0x0506_0708);
        // Retransmission: same verifier, same file.
        let (again, _) =
            create(&exp, &root, b"x", &CreateHow::Exclusive(verf)).expect("retransmit");
        assert_eq!(again.fh(), first.fh());
        // Another verifier: EXIST.
        let other = *b"\x01\x02\x03\x04\x05\x06\x07\x09";
        assert_eq!(
            create(&exp, &root, b"x", &CreateHow::Exclusive(other)).err(),
            Some(FsError::Exist)
        );
        // After the client's SETATTR the verifier no longer matches.
        let now = SetAttrs {
            atime: Some(SetTime::ServerNow),
            mtime: Some(SetTime::ServerNow),
            mode: Some(0o644),
            ..SetAttrs::default()
        };
        let attr = setattr(&exp, &first, &now).expect("setattr");
        assert_eq!(attr.mode, 0o644);
        assert_eq!(
            create(&exp, &root, b"x", &CreateHow::Exclusive(verf)).err(),
            Some(FsError::Exist)
        );
    }

    #[test]
    fn setattr_getattr() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let (file, _) = create(&exp, &root, b"f", &guarded(0o600)).expect("create");
        let when = Time {
            seconds: 1_000_000_000,
            nanos: 123_456_789,
        };
        let attrs = SetAttrs {
            mode: Some(0o751),
            uid: Some(1000),
            gid: Some(2000),
            size: Some(12345),
            atime: Some(SetTime::Client(when)),
            mtime: Some(SetTime::Client(when)),
        };
        let attr = setattr(&exp, &file, &attrs).expect("setattr");
        assert_eq!(
            (attr.mode, attr.uid, attr.gid, attr.size),
            (0o751, 1000, 2000, 12345)
        );
        assert_eq!((attr.atime, attr.mtime), (when, when));
        assert_eq!(getattr(&exp, &file).expect("getattr"), attr);
        assert_eq!(attr.nlink, 1);
        assert!(attr.fsid != 0 && attr.fileid != 0);

        // Size of a directory: ISDIR; of a symlink: INVAL. Mode of a
        // symlink is ignored.
        let size = SetAttrs {
            size: Some(0),
            ..SetAttrs::default()
        };
        assert_eq!(setattr(&exp, &root, &size).err(), Some(FsError::IsDir));
        let (link, _) = symlink(&exp, &root, b"l", b"f", &SetAttrs::default()).expect("symlink");
        assert_eq!(setattr(&exp, &link, &size).err(), Some(FsError::Inval));
        let mode = SetAttrs {
            mode: Some(0o600),
            ..SetAttrs::default()
        };
        assert_eq!(
            setattr(&exp, &link, &mode).map(|a| a.kind),
            Ok(FileKind::Symlink)
        );

        // As nobody: no chown, no chmod of another's file.
        with_creds(&nobody(), || {
            let chown = SetAttrs {
                uid: Some(65534),
                ..SetAttrs::default()
            };
            assert_eq!(setattr(&exp, &file, &chown).err(), Some(FsError::Perm));
            assert_eq!(setattr(&exp, &file, &mode).err(), Some(FsError::Perm));
            assert_eq!(setattr(&exp, &file, &size).err(), Some(FsError::Access));
        })
        .expect("creds");
    }

    #[test]
    fn squashed_caller_permissions() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let (private, _) = mkdir(
            &exp,
            &root,
            b"private",
            &SetAttrs {
                mode: Some(0o700),
                ..SetAttrs::default()
            },
        )
        .expect("mkdir");
        let (shared, _) = mkdir(
            &exp,
            &root,
            b"shared",
            &SetAttrs {
                mode: Some(0o1777),
                ..SetAttrs::default()
            },
        )
        .expect("mkdir");
        let (secret, _) = create(&exp, &root, b"secret", &guarded(0o600)).expect("create");
        let (public, _) = create(&exp, &root, b"public", &guarded(0o644)).expect("create");
        with_creds(&nobody(), || {
            // The export root is 0755 root: no creating there.
            assert_eq!(
                create(&exp, &root, b"n", &guarded(0o644)).err(),
                Some(FsError::Access)
            );
            assert_eq!(
                mkdir(&exp, &root, b"n", &SetAttrs::default()).err(),
                Some(FsError::Access)
            );
            assert_eq!(remove(&exp, &root, b"public").err(), Some(FsError::Access));
            assert_eq!(exp.lookup(&private, b"x").err(), Some(FsError::Access));
            assert_eq!(
                crate::dir::read_dir(&exp, &private, 0, 10).err(),
                Some(FsError::Access)
            );
            assert_eq!(check_io_access(&secret, false), Err(FsError::Access));
            assert_eq!(check_io_access(&public, false), Ok(()));
            assert_eq!(check_io_access(&public, true), Err(FsError::Access));
            use access3::*;
            let all = READ | LOOKUP | MODIFY | EXTEND | DELETE | EXECUTE;
            assert_eq!(access(&public, all), Ok(READ));
            assert_eq!(access(&secret, all), Ok(0));
            assert_eq!(access(&root, all), Ok(READ | LOOKUP));
            assert_eq!(
                access(&shared, all),
                Ok(READ | LOOKUP | MODIFY | EXTEND | DELETE)
            );
            assert_eq!(access(&private, READ), Ok(0));

            // In a world-writable directory nobody creates files it owns,
            // and keeps owner rights on a read-only file it made.
            let (mine, attr) = create(&exp, &shared, b"mine", &guarded(0o444)).expect("create");
            assert_eq!((attr.uid, attr.gid), (65534, 65534));
            assert_eq!(check_io_access(&mine, true), Ok(()), "owner override");
            assert_eq!(access(&mine, READ | MODIFY), Ok(READ));
            set_size(&exp, &mine, 10).expect("owner may truncate");
            setattr(
                &exp,
                &mine,
                &SetAttrs {
                    mode: Some(0o600),
                    ..SetAttrs::default()
                },
            )
            .expect("chmod own");
            // Sticky directory: nobody cannot remove root's file there.
        })
        .expect("creds");
        let (_, _) = create(&exp, &shared, b"roots", &guarded(0o666)).expect("create");
        with_creds(&nobody(), || {
            assert_eq!(remove(&exp, &shared, b"roots").err(), Some(FsError::Perm));
            remove(&exp, &shared, b"mine").expect("remove own");
        })
        .expect("creds");
        // As root everything is allowed.
        assert_eq!(
            access(&secret, access3::READ | access3::MODIFY),
            Ok(access3::READ | access3::MODIFY)
        );
    }

    #[test]
    fn directories_links_and_renames() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let (d, attr) = mkdir(
            &exp,
            &root,
            b"d",
            &SetAttrs {
                mode: Some(0o2750),
                ..SetAttrs::default()
            },
        )
        .expect("mkdir");
        assert_eq!((attr.kind, attr.mode), (FileKind::Directory, 0o2750));
        assert_eq!(
            mkdir(&exp, &root, b"d", &SetAttrs::default()).err(),
            Some(FsError::Exist)
        );
        let (f, _) = create(&exp, &d, b"f", &guarded(0o644)).expect("create");

        // RMDIR / REMOVE errors.
        assert_eq!(rmdir(&root, b"d").err(), Some(FsError::NotEmpty));
        assert_eq!(remove(&exp, &root, b"d").err(), Some(FsError::IsDir));
        assert_eq!(rmdir(&d, b"f").err(), Some(FsError::NotDir));
        assert_eq!(remove(&exp, &root, b"nothing").err(), Some(FsError::NoEnt));
        assert_eq!(rmdir(&root, b".").err(), Some(FsError::Access));
        assert_eq!(remove(&exp, &root, b"..").err(), Some(FsError::Access));

        // LINK.
        link(&f, &root, b"f2").expect("link");
        assert_eq!(getattr(&exp, &f).expect("attr").nlink, 2);
        assert_eq!(link(&f, &root, b"f2").err(), Some(FsError::Exist));
        assert_eq!(link(&d, &root, b"d2").err(), Some(FsError::IsDir));
        let (l, _) =
            symlink(&exp, &root, b"sl", b"/nowhere", &SetAttrs::default()).expect("symlink");
        link(&l, &root, b"sl2").expect("hard link to a symlink");
        let (sl2, attr) = exp.lookup(&root, b"sl2").expect("lookup");
        assert_eq!(attr.kind, FileKind::Symlink);
        assert_eq!(readlink(&sl2), Ok(b"/nowhere".to_vec()));

        // RENAME across directories, over a file, and its errors.
        rename(&exp, &root, b"f2", &d, b"moved").expect("rename");
        assert_eq!(exp.lookup(&root, b"f2").err(), Some(FsError::NoEnt));
        assert_eq!(exp.lookup(&d, b"moved").expect("moved").0.fh(), f.fh());
        rename(&exp, &d, b"moved", &d, b"f").expect("rename onto another name of itself");
        assert_eq!(
            rename(&exp, &root, b"missing", &d, b"x").err(),
            Some(FsError::NoEnt)
        );
        assert_eq!(
            rename(&exp, &root, b".", &d, b"x").err(),
            Some(FsError::Perm)
        );
        assert_eq!(
            rename(&exp, &root, b"d", &d, b"inside").err(),
            Some(FsError::Inval)
        );
        mkdir(&exp, &root, b"e", &SetAttrs::default()).expect("mkdir e");
        assert_eq!(
            rename(&exp, &root, b"e", &root, b"d").err(),
            Some(FsError::NotEmpty)
        );
        assert_eq!(
            rename(&exp, &root, b"sl", &root, b"e").err(),
            Some(FsError::IsDir)
        );

        remove(&exp, &d, b"f").expect("remove");
        remove(&exp, &d, b"moved").ok();
        rmdir(&root, b"d").expect("rmdir");
        assert_eq!(exp.lookup(&root, b"d").err(), Some(FsError::NoEnt));
    }

    #[test]
    fn remove_any_removes_whatever_the_name_is() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let gone = |name: &[u8]| exp.lookup(&root, name).err() == Some(FsError::NoEnt);

        // A file.
        create(&exp, &root, b"f", &guarded(0o644)).expect("create");
        remove_any(&exp, &root, b"f").expect("remove a file");
        assert!(gone(b"f"));

        // An empty directory.
        mkdir(&exp, &root, b"empty", &SetAttrs::default()).expect("mkdir");
        remove_any(&exp, &root, b"empty").expect("remove an empty directory");
        assert!(gone(b"empty"));

        // A directory with something in it stays, and says so.
        let (full, _) = mkdir(&exp, &root, b"full", &SetAttrs::default()).expect("mkdir");
        create(&exp, &full, b"inside", &guarded(0o644)).expect("create");
        assert_eq!(
            remove_any(&exp, &root, b"full").err(),
            Some(FsError::NotEmpty)
        );
        exp.lookup(&full, b"inside").expect("still there");

        // A symlink to a directory goes as a link; the directory stays.
        symlink(&exp, &root, b"link", b"full", &SetAttrs::default()).expect("symlink");
        remove_any(&exp, &root, b"link").expect("remove a symlink to a directory");
        assert!(gone(b"link"));
        assert_eq!(
            exp.lookup(&root, b"full").expect("target").1.kind,
            FileKind::Directory
        );

        // Names as REMOVE and RMDIR check them.
        assert_eq!(
            remove_any(&exp, &root, b"missing").err(),
            Some(FsError::NoEnt)
        );
        assert_eq!(remove_any(&exp, &root, b".").err(), Some(FsError::Access));
        assert_eq!(remove_any(&exp, &root, b"..").err(), Some(FsError::Access));
        assert_eq!(remove_any(&exp, &root, b"a/b").err(), Some(FsError::Access));
        assert_eq!(
            remove_any(&exp, &root, &[b'n'; 256]).err(),
            Some(FsError::NameTooLong)
        );
        let (file, _) = create(&exp, &root, b"plain", &guarded(0o644)).expect("create");
        assert_eq!(
            remove_any(&exp, &file, b"x").err(),
            Some(FsError::NotDir),
            "a file is no directory to remove from"
        );

        // As another user: the kernel's permission check, for a directory
        // too (root's 0755 export directory).
        mkdir(&exp, &root, b"theirs", &SetAttrs::default()).expect("mkdir");
        let refused = with_creds(&nobody(), || remove_any(&exp, &root, b"theirs")).expect("creds");
        assert_eq!(refused.err(), Some(FsError::Access));
        let refused = with_creds(&nobody(), || remove_any(&exp, &root, b"plain")).expect("creds");
        assert_eq!(refused.err(), Some(FsError::Access));
    }

    #[test]
    fn symlinks_and_special_files() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let target = b"../../../etc/passwd\xff";
        let (link, attr) =
            symlink(&exp, &root, b"l", target, &SetAttrs::default()).expect("symlink");
        assert_eq!(attr.kind, FileKind::Symlink);
        assert_eq!(attr.size, target.len() as u64);
        assert_eq!(readlink(&link), Ok(target.to_vec()));
        assert_eq!(readlink(&root).err(), Some(FsError::Inval));
        assert_eq!(
            symlink(&exp, &root, b"l", b"x", &SetAttrs::default()).err(),
            Some(FsError::Exist)
        );
        assert_eq!(
            symlink(&exp, &root, b"e", b"", &SetAttrs::default()).err(),
            Some(FsError::Inval)
        );

        let (fifo, attr) = mknod(
            &exp,
            &root,
            b"fifo",
            SpecialFile::Fifo,
            &SetAttrs {
                mode: Some(0o600),
                ..SetAttrs::default()
            },
            false,
        )
        .expect("fifo");
        assert_eq!((attr.kind, attr.mode), (FileKind::Fifo, 0o600));
        assert_eq!(fifo.kind(), FileKind::Fifo);
        let device = |name: &[u8], special, allow_devices| {
            mknod(
                &exp,
                &root,
                name,
                special,
                &SetAttrs::default(),
                allow_devices,
            )
        };
        let (_, attr) = device(b"sock", SpecialFile::Socket, false).expect("socket");
        assert_eq!(attr.kind, FileKind::Socket);
        assert_eq!(
            device(b"null", SpecialFile::CharDevice(1, 3), false).err(),
            Some(FsError::Perm)
        );
        let (_, attr) = device(b"null", SpecialFile::CharDevice(1, 3), true).expect("chr as root");
        assert_eq!(
            (attr.kind, attr.rdev_major, attr.rdev_minor),
            (FileKind::CharDevice, 1, 3)
        );
        let (_, attr) =
            device(b"blk", SpecialFile::BlockDevice(7, 200), true).expect("blk as root");
        assert_eq!(
            (attr.kind, attr.rdev_major, attr.rdev_minor),
            (FileKind::BlockDevice, 7, 200)
        );
        // Devices need CAP_MKNOD, which a squashed caller lacks.
        let (shared, _) = mkdir(
            &exp,
            &root,
            b"shared",
            &SetAttrs {
                mode: Some(0o777),
                ..SetAttrs::default()
            },
        )
        .expect("mkdir");
        with_creds(&nobody(), || {
            assert_eq!(
                mknod(
                    &exp,
                    &shared,
                    b"null",
                    SpecialFile::CharDevice(1, 3),
                    &SetAttrs::default(),
                    true
                )
                .err(),
                Some(FsError::Perm)
            );
        })
        .expect("creds");
    }

    #[test]
    fn fsstat_and_pathconf() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let exp = setup(&fs);
        let root = exp.resolve(exp.root_handle()).expect("root");
        let st = fsstat(&root).expect("fsstat");
        assert!(st.total_bytes > 32 << 20 && st.total_bytes <= 64 << 20);
        assert!(st.free_bytes <= st.total_bytes && st.avail_bytes <= st.free_bytes);
        assert!(st.total_files > 0 && st.free_files <= st.total_files);
        let pc = pathconf(&root);
        assert_eq!(pc.name_max, 255);
        assert!(pc.no_trunc && pc.chown_restricted && !pc.case_insensitive && pc.case_preserving);
    }
}
