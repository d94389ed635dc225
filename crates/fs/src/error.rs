//! The filesystem backend's one error type, in no protocol's words: what
//! went wrong, as the kernel's errno or the backend's own checks say.
//! Each protocol maps it to its status codes in one place (NFSv3:
//! `dionfs_server::nfs::status`). Kernel errors are turned into variants
//! the way knfsd's `nfserrno()` does.

use std::io;

use rustix::io::Errno;

/// Why a filesystem operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    /// EPERM: not the owner, or the operation is not permitted.
    #[error("operation not permitted")]
    Perm,
    /// ENOENT.
    #[error("no such file or directory")]
    NoEnt,
    /// EIO: a hard error, or an errno with no better variant.
    #[error("I/O error")]
    Io,
    /// ENXIO.
    #[error("no such device or address")]
    Nxio,
    /// EACCES (EBUSY, ETXTBSY too, as knfsd maps them): permission denied,
    /// also for names with `/` or NUL.
    #[error("permission denied")]
    Access,
    /// EEXIST.
    #[error("file exists")]
    Exist,
    /// EXDEV: link or rename across filesystems or exports.
    #[error("cross-device link")]
    Xdev,
    /// ENODEV.
    #[error("no such device")]
    NoDev,
    /// ENOTDIR.
    #[error("not a directory")]
    NotDir,
    /// EISDIR.
    #[error("is a directory")]
    IsDir,
    /// EINVAL, or arguments the backend refuses (a size set on a symlink).
    #[error("invalid argument")]
    Inval,
    /// ELOOP: a symbolic link where one may not be followed (NFSv3 calls
    /// it invalid, NFSv4 has a status of its own).
    #[error("too many levels of symbolic links")]
    Loop,
    /// EFBIG, E2BIG, EOVERFLOW: past the file-size limit.
    #[error("file too large")]
    FBig,
    /// ENOSPC.
    #[error("no space left on device")]
    NoSpc,
    /// EROFS.
    #[error("read-only filesystem")]
    Rofs,
    /// EMLINK.
    #[error("too many links")]
    MLink,
    /// ENAMETOOLONG: a name longer than 255 bytes.
    #[error("name too long")]
    NameTooLong,
    /// ENOTEMPTY.
    #[error("directory not empty")]
    NotEmpty,
    /// EDQUOT.
    #[error("quota exceeded")]
    DQuot,
    /// ESTALE, or a handle naming a file that no longer exists (or a
    /// directory no longer inside the export).
    #[error("stale file handle")]
    Stale,
    /// Not a handle this server issued (length, version, MAC).
    #[error("bad file handle")]
    BadHandle,
    /// A guarded change whose guard did not match (an NFSv3 SETATTR's
    /// ctime): nothing was changed.
    #[error("guard mismatch")]
    GuardMismatch,
    /// A directory cookie the directory cannot seek to.
    #[error("bad directory cookie")]
    BadCookie,
    /// EOPNOTSUPP, ENOSYS.
    #[error("operation not supported")]
    NotSupp,
    /// A reply buffer too small for a single directory entry.
    #[error("buffer too small")]
    TooSmall,
    /// EMFILE, ENFILE, EBADF, EFAULT: a bug or resource failure on the
    /// server's side.
    #[error("server fault")]
    ServerFault,
    /// A file type this export does not create (devices on an export that
    /// does not allow them).
    #[error("bad file type")]
    BadType,
    /// EAGAIN, ENOMEM, ETIMEDOUT, EINTR: temporarily unable; the client
    /// should try again later.
    #[error("try again later")]
    Again,
}

impl FsError {
    /// Maps a kernel errno the way knfsd's `nfserrno()` does.
    pub fn from_errno(errno: Errno) -> FsError {
        match errno {
            Errno::PERM => FsError::Perm,
            Errno::NOENT => FsError::NoEnt,
            Errno::IO => FsError::Io,
            Errno::NXIO => FsError::Nxio,
            // knfsd maps EBUSY (e.g. renaming a mount point) and ETXTBSY to
            // ACCES as well.
            Errno::ACCESS | Errno::BUSY | Errno::TXTBSY => FsError::Access,
            Errno::EXIST => FsError::Exist,
            Errno::XDEV => FsError::Xdev,
            Errno::NODEV => FsError::NoDev,
            Errno::NOTDIR => FsError::NotDir,
            Errno::ISDIR => FsError::IsDir,
            Errno::INVAL => FsError::Inval,
            Errno::LOOP => FsError::Loop,
            Errno::FBIG | Errno::TOOBIG | Errno::OVERFLOW => FsError::FBig,
            Errno::NOSPC => FsError::NoSpc,
            Errno::ROFS => FsError::Rofs,
            Errno::MLINK => FsError::MLink,
            Errno::NAMETOOLONG => FsError::NameTooLong,
            Errno::NOTEMPTY => FsError::NotEmpty,
            Errno::DQUOT => FsError::DQuot,
            Errno::STALE => FsError::Stale,
            Errno::OPNOTSUPP | Errno::NOSYS => FsError::NotSupp,
            Errno::AGAIN | Errno::NOMEM | Errno::TIMEDOUT | Errno::INTR => FsError::Again,
            Errno::MFILE | Errno::NFILE | Errno::BADF | Errno::FAULT => FsError::ServerFault,
            _ => FsError::Io,
        }
    }
}

impl From<Errno> for FsError {
    fn from(errno: Errno) -> FsError {
        FsError::from_errno(errno)
    }
}

impl From<io::Error> for FsError {
    fn from(err: io::Error) -> FsError {
        match err.raw_os_error() {
            Some(code) => FsError::from_errno(Errno::from_raw_os_error(code)),
            None => FsError::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_map_like_knfsd() {
        assert_eq!(FsError::from(Errno::NOENT), FsError::NoEnt);
        assert_eq!(FsError::from(Errno::NOTEMPTY), FsError::NotEmpty);
        assert_eq!(FsError::from(Errno::TXTBSY), FsError::Access);
        assert_eq!(FsError::from(Errno::STALE), FsError::Stale);
        assert_eq!(FsError::from(Errno::HOSTDOWN), FsError::Io);
        let io = io::Error::from_raw_os_error(Errno::DQUOT.raw_os_error());
        assert_eq!(FsError::from(io), FsError::DQuot);
        assert_eq!(FsError::from(io::Error::other("no errno")), FsError::Io);
    }
}
