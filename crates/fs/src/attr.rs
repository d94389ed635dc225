//! File attributes as the backend reports them (the server turns an
//! [`Attr`] into `fattr3`) and the changes SETATTR may ask for.

use std::os::fd::AsFd;

use rustix::fs::{statx, AtFlags, FileType, StatxFlags};

use crate::FsError;

/// The type of a file (RFC 1813 `ftype3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// `NF3REG`
    Regular,
    /// `NF3DIR`
    Directory,
    /// `NF3BLK`
    BlockDevice,
    /// `NF3CHR`
    CharDevice,
    /// `NF3LNK`
    Symlink,
    /// `NF3SOCK`
    Socket,
    /// `NF3FIFO`
    Fifo,
}

impl FileKind {
    pub(crate) fn from_mode(mode: u32) -> Result<FileKind, FsError> {
        Ok(match FileType::from_raw_mode(mode) {
            FileType::RegularFile => FileKind::Regular,
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::Fifo => FileKind::Fifo,
            FileType::Socket => FileKind::Socket,
            FileType::CharacterDevice => FileKind::CharDevice,
            FileType::BlockDevice => FileKind::BlockDevice,
            _ => return Err(FsError::ServerFault),
        })
    }
}

/// A timestamp with nanoseconds (the server narrows seconds to `nfstime3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time {
    /// Seconds since the epoch.
    pub seconds: i64,
    /// Nanoseconds, below 1e9.
    pub nanos: u32,
}

/// The attributes of one file, from `statx(2)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// File type.
    pub kind: FileKind,
    /// Permission bits including set-uid, set-gid and sticky (`& 0o7777`).
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Bytes allocated on disk (`blocks * 512`).
    pub used: u64,
    /// Device number of a block or character device.
    pub rdev_major: u32,
    /// Device number of a block or character device.
    pub rdev_minor: u32,
    /// The filesystem the file lives on (`(dev_major << 32) | dev_minor`).
    pub fsid: u64,
    /// Inode number.
    pub fileid: u64,
    /// Last access.
    pub atime: Time,
    /// Last data modification.
    pub mtime: Time,
    /// Last status change; the server's SETATTR guard compares this.
    pub ctime: Time,
    /// Creation (NFSv4 `time_create`), where the filesystem records it.
    pub btime: Option<Time>,
    /// The filesystem's preferred I/O size for the file (`stx_blksize`).
    pub blksize: u32,
}

/// The `statx` fields [`Attr`] asks for: the basic ones, and the birth
/// time, which a filesystem that keeps none leaves out of the mask it
/// returns (a request for it costs nothing there).
const ATTR_MASK: StatxFlags = StatxFlags::BASIC_STATS.union(StatxFlags::BTIME);

impl Attr {
    /// `statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)` of an open (or
    /// `O_PATH`) descriptor.
    pub(crate) fn of_fd<Fd: AsFd>(fd: Fd) -> Result<Attr, FsError> {
        let stx = statx(
            fd,
            c"",
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            ATTR_MASK,
        )?;
        let time = |t: rustix::fs::StatxTimestamp| Time {
            seconds: t.tv_sec,
            nanos: t.tv_nsec,
        };
        let mode = u32::from(stx.stx_mode);
        Ok(Attr {
            kind: FileKind::from_mode(mode)?,
            mode: mode & 0o7777,
            nlink: stx.stx_nlink,
            uid: stx.stx_uid,
            gid: stx.stx_gid,
            size: stx.stx_size,
            used: stx.stx_blocks.saturating_mul(512),
            rdev_major: stx.stx_rdev_major,
            rdev_minor: stx.stx_rdev_minor,
            fsid: (u64::from(stx.stx_dev_major) << 32) | u64::from(stx.stx_dev_minor),
            fileid: stx.stx_ino,
            atime: time(stx.stx_atime),
            mtime: time(stx.stx_mtime),
            ctime: time(stx.stx_ctime),
            btime: StatxFlags::from_bits_retain(stx.stx_mask)
                .contains(StatxFlags::BTIME)
                .then(|| time(stx.stx_btime)),
            blksize: stx.stx_blksize,
        })
    }
}

/// A time SETATTR may set (RFC 1813 `time_how`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    /// `SET_TO_SERVER_TIME`.
    ServerNow,
    /// `SET_TO_CLIENT_TIME`.
    Client(Time),
}

/// The attributes SETATTR, CREATE, MKDIR, SYMLINK and MKNOD may set
/// (RFC 1813 `sattr3`); `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs {
    /// New permission bits (`& 0o7777`).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<SetTime>,
    /// New modification time.
    pub mtime: Option<SetTime>,
}

impl SetAttrs {
    /// Whether nothing is to be set.
    pub fn is_empty(&self) -> bool {
        *self == SetAttrs::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn birth_time_and_block_size_come_from_statx() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let file = std::fs::File::create(&path).expect("create");
        let attr = Attr::of_fd(&file).expect("statx");
        assert!(attr.blksize > 0);
        // std asks statx for the birth time too; it and we must agree on
        // whether this filesystem keeps one, and on its value.
        match std::fs::metadata(&path).expect("metadata").created() {
            Ok(created) => {
                let since = created
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("after 1970");
                assert_eq!(
                    attr.btime,
                    Some(Time {
                        seconds: since.as_secs() as i64,
                        nanos: since.subsec_nanos(),
                    })
                );
                assert!(attr.btime <= Some(attr.ctime));
            }
            Err(_) => assert_eq!(attr.btime, None),
        }
    }
}
