//! The filesystem backend's one error type.
//!
//! Every variant corresponds to exactly one `nfsstat3` (RFC 1813 §2.6), so
//! the server's status mapping is a plain `match`. Kernel errors are turned
//! into variants the way knfsd's `nfserrno()` does.

use std::io;

use rustix::io::Errno;

/// Why a filesystem operation failed; one variant per `NFS3ERR_*` status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    /// `NFS3ERR_PERM`: not the owner / operation not permitted.
    #[error("operation not permitted")]
    Perm,
    /// `NFS3ERR_NOENT`.
    #[error("no such file or directory")]
    NoEnt,
    /// `NFS3ERR_IO`: a hard error, or an errno we have no better status for.
    #[error("I/O error")]
    Io,
    /// `NFS3ERR_NXIO`.
    #[error("no such device or address")]
    Nxio,
    /// `NFS3ERR_ACCES`: permission denied, also for names with `/` or NUL.
    #[error("permission denied")]
    Access,
    /// `NFS3ERR_EXIST`.
    #[error("file exists")]
    Exist,
    /// `NFS3ERR_XDEV`: link or rename across filesystems or exports.
    #[error("cross-device link")]
    Xdev,
    /// `NFS3ERR_NODEV`.
    #[error("no such device")]
    NoDev,
    /// `NFS3ERR_NOTDIR`.
    #[error("not a directory")]
    NotDir,
    /// `NFS3ERR_ISDIR`.
    #[error("is a directory")]
    IsDir,
    /// `NFS3ERR_INVAL`.
    #[error("invalid argument")]
    Inval,
    /// `NFS3ERR_FBIG`.
    #[error("file too large")]
    FBig,
    /// `NFS3ERR_NOSPC`.
    #[error("no space left on device")]
    NoSpc,
    /// `NFS3ERR_ROFS`.
    #[error("read-only filesystem")]
    Rofs,
    /// `NFS3ERR_MLINK`.
    #[error("too many links")]
    MLink,
    /// `NFS3ERR_NAMETOOLONG`: a name longer than 255 bytes.
    #[error("name too long")]
    NameTooLong,
    /// `NFS3ERR_NOTEMPTY`.
    #[error("directory not empty")]
    NotEmpty,
    /// `NFS3ERR_DQUOT`.
    #[error("quota exceeded")]
    DQuot,
    /// `NFS3ERR_STALE`: the handle names a file that no longer exists (or
    /// a directory that is no longer inside the export).
    #[error("stale file handle")]
    Stale,
    /// `NFS3ERR_BADHANDLE`: not a handle we issued (length, version, MAC).
    #[error("bad file handle")]
    BadHandle,
    /// `NFS3ERR_NOT_SYNC`: a SETATTR guard did not match (set by the server).
    #[error("guard ctime mismatch")]
    NotSync,
    /// `NFS3ERR_BAD_COOKIE`: a READDIR cookie the directory cannot seek to.
    #[error("bad readdir cookie")]
    BadCookie,
    /// `NFS3ERR_NOTSUPP`.
    #[error("operation not supported")]
    NotSupp,
    /// `NFS3ERR_TOOSMALL`: a READDIR reply could not hold a single entry
    /// (set by the server, which enforces the byte limits).
    #[error("buffer too small")]
    TooSmall,
    /// `NFS3ERR_SERVERFAULT`: a bug or resource failure on our side.
    #[error("server fault")]
    ServerFault,
    /// `NFS3ERR_BADTYPE`: MKNOD of a type we do not create (devices on an
    /// export that does not allow them).
    #[error("bad file type")]
    BadType,
    /// `NFS3ERR_JUKEBOX`: temporarily unable (out of memory, try again).
    #[error("try again later")]
    Jukebox,
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
            Errno::INVAL | Errno::LOOP => FsError::Inval,
            Errno::FBIG | Errno::TOOBIG | Errno::OVERFLOW => FsError::FBig,
            Errno::NOSPC => FsError::NoSpc,
            Errno::ROFS => FsError::Rofs,
            Errno::MLINK => FsError::MLink,
            Errno::NAMETOOLONG => FsError::NameTooLong,
            Errno::NOTEMPTY => FsError::NotEmpty,
            Errno::DQUOT => FsError::DQuot,
            Errno::STALE => FsError::Stale,
            Errno::OPNOTSUPP | Errno::NOSYS => FsError::NotSupp,
            Errno::AGAIN | Errno::NOMEM | Errno::TIMEDOUT | Errno::INTR => FsError::Jukebox,
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
