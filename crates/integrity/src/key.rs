//! What the store knows a data file by: its identity ([`FileKey`]:
//! filesystem and kernel file handle), which names its checksum file, and
//! its [`Version`] (mtime and size), which tells a change behind the
//! server's back.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;

/// The extended attribute of a checksum file that names its file's key.
const KEY_XATTR: &str = "user.dionfs.key";

/// The identity of an inode: its filesystem and its kernel file handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// The filesystem (as the open-file cache keys it).
    pub fs_id: u64,
    /// `name_to_handle_at`'s handle type.
    pub handle_type: i32,
    /// `name_to_handle_at`'s handle bytes (inode number and generation).
    pub handle: Vec<u8>,
}

impl FileKey {
    /// 128 bits of a hash of the key: the store file's name.
    pub fn id(&self) -> [u8; 16] {
        let mut h = blake3::Hasher::new();
        h.update(&self.fs_id.to_le_bytes());
        h.update(&self.handle_type.to_le_bytes());
        h.update(&self.handle);
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.finalize().as_bytes()[..16]);
        id
    }

    /// Names the file a checksum file belongs to in the checksum file
    /// itself ([`KEY_XATTR`]), so that [`Store::sweep`] can tell whether
    /// it still exists. Best effort: a filesystem without user xattrs
    /// only loses the sweep.
    pub(crate) fn write_xattr(&self, file: &File) {
        let mut v = Vec::with_capacity(12 + self.handle.len());
        v.extend_from_slice(&self.fs_id.to_le_bytes());
        v.extend_from_slice(&self.handle_type.to_le_bytes());
        v.extend_from_slice(&self.handle);
        if let Err(e) = rustix::fs::fsetxattr(file, KEY_XATTR, &v, rustix::fs::XattrFlags::empty())
        {
            tracing::debug!(file = %self, error = %e, "cannot name the file in its checksum file");
        }
    }

    /// The key [`FileKey::write_xattr`] stored on `file`, if any.
    pub(crate) fn read_xattr(file: &File) -> Option<FileKey> {
        let mut v = vec![0u8; 12 + 256];
        let n = rustix::fs::fgetxattr(file, KEY_XATTR, &mut v).ok()?;
        let v = v.get(..n)?;
        if v.len() < 12 {
            return None;
        }
        let mut fs_id = [0u8; 8];
        fs_id.copy_from_slice(&v[..8]);
        let mut handle_type = [0u8; 4];
        handle_type.copy_from_slice(&v[8..12]);
        Some(FileKey {
            fs_id: u64::from_le_bytes(fs_id),
            handle_type: i32::from_le_bytes(handle_type),
            handle: v[12..].to_vec(),
        })
    }

    pub(crate) fn relative_path(&self) -> PathBuf {
        let hex: String = self.id().iter().map(|b| format!("{b:02x}")).collect();
        PathBuf::from("files")
            .join(&hex[..2])
            .join(format!("{hex}.crc"))
    }
}

/// For log lines where only the key is known (no open descriptor to read
/// the file's path from, see [`path_of`]): the checksum file it names,
/// under the store (`STATE_DIR/integrity`).
impl std::fmt::Display for FileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "checksums {}", self.relative_path().display())
    }
}

/// For log lines: the kernel's current path of the open file `fd`, else
/// its descriptor number.
pub(crate) fn path_of(fd: BorrowedFd<'_>) -> String {
    let fd = fd.as_raw_fd();
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map_or_else(|_| format!("fd {fd}"), |p| p.display().to_string())
}

/// What a file's data looked like after the server's last change of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Version {
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Size in bytes.
    pub size: u64,
}

impl Version {
    /// The version of the open file `fd` now.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Version> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Version {
            mtime_sec: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec as u32,
            size: st.st_size as u64,
        })
    }
}
