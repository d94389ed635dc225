//! The one place where backend and data-plane errors become `nfsstat3`.

use dionfs_dataplane::DataError;
use dionfs_fs::FsError;
use dionfs_proto::nfs3::NfsStat3;

/// The NFS status for a backend error (RFC 1813 section 2.6).
pub fn from_fs(e: FsError) -> NfsStat3 {
    match e {
        FsError::Perm => NfsStat3::Perm,
        FsError::NoEnt => NfsStat3::NoEnt,
        FsError::Io => NfsStat3::Io,
        FsError::Nxio => NfsStat3::NxIo,
        FsError::Access => NfsStat3::Acces,
        FsError::Exist => NfsStat3::Exist,
        FsError::Xdev => NfsStat3::XDev,
        FsError::NoDev => NfsStat3::NoDev,
        FsError::NotDir => NfsStat3::NotDir,
        FsError::IsDir => NfsStat3::IsDir,
        // NFSv3 has no status of its own for ELOOP: knfsd answers INVAL.
        FsError::Inval | FsError::Loop => NfsStat3::Inval,
        FsError::FBig => NfsStat3::FBig,
        FsError::NoSpc => NfsStat3::NoSpc,
        FsError::Rofs => NfsStat3::Rofs,
        FsError::MLink => NfsStat3::MLink,
        FsError::NameTooLong => NfsStat3::NameTooLong,
        FsError::NotEmpty => NfsStat3::NotEmpty,
        FsError::DQuot => NfsStat3::DQuot,
        FsError::Stale => NfsStat3::Stale,
        FsError::BadHandle => NfsStat3::BadHandle,
        FsError::GuardMismatch => NfsStat3::NotSync,
        FsError::BadCookie => NfsStat3::BadCookie,
        FsError::NotSupp => NfsStat3::NotSupp,
        FsError::TooSmall => NfsStat3::TooSmall,
        FsError::ServerFault => NfsStat3::ServerFault,
        FsError::BadType => NfsStat3::BadType,
        FsError::Again => NfsStat3::Jukebox,
    }
}

/// The NFS status for a data-plane error.
pub fn from_data(e: &DataError) -> NfsStat3 {
    from_fs(FsError::from_errno(rustix::io::Errno::from_raw_os_error(
        e.errno(),
    )))
}
