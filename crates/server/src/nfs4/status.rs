//! The one place where backend and data-plane errors become `nfsstat4`
//! (design section 0), as `nfs/status.rs` is for NFSv3.

use dionfs_dataplane::DataError;
use dionfs_fs::FsError;
use dionfs_proto::nfs4::Nfsstat4;

/// The NFSv4 status for a backend error (RFC 8881 section 15.1), as
/// knfsd's `nfserrno` gives it to a v4 client.
pub fn from_fs(e: FsError) -> Nfsstat4 {
    match e {
        FsError::Perm => Nfsstat4::Perm,
        FsError::NoEnt => Nfsstat4::Noent,
        FsError::Io => Nfsstat4::Io,
        // NFSv4 has no NODEV: the device is not there, which is NXIO.
        FsError::Nxio | FsError::NoDev => Nfsstat4::Nxio,
        FsError::Access => Nfsstat4::Access,
        FsError::Exist => Nfsstat4::Exist,
        FsError::Xdev => Nfsstat4::Xdev,
        FsError::NotDir => Nfsstat4::Notdir,
        FsError::IsDir => Nfsstat4::Isdir,
        FsError::Inval => Nfsstat4::Inval,
        // NFSv4 names a symbolic link met where a directory was wanted
        // (RFC 8881 section 18.13.4: LOOKUP answers SYMLINK).
        FsError::Loop => Nfsstat4::Symlink,
        FsError::FBig => Nfsstat4::Fbig,
        FsError::NoSpc => Nfsstat4::Nospc,
        FsError::Rofs => Nfsstat4::Rofs,
        FsError::MLink => Nfsstat4::Mlink,
        FsError::NameTooLong => Nfsstat4::Nametoolong,
        FsError::NotEmpty => Nfsstat4::Notempty,
        FsError::DQuot => Nfsstat4::Dquot,
        FsError::Stale => Nfsstat4::Stale,
        FsError::BadHandle => Nfsstat4::Badhandle,
        // NFSv4 has no guarded SETATTR: a guard that did not match is
        // NFSv3's; should one reach a v4 caller, nothing was changed.
        FsError::GuardMismatch => Nfsstat4::NotSame,
        FsError::BadCookie => Nfsstat4::BadCookie,
        FsError::NotSupp => Nfsstat4::Notsupp,
        FsError::TooSmall => Nfsstat4::Toosmall,
        FsError::ServerFault => Nfsstat4::Serverfault,
        FsError::BadType => Nfsstat4::Badtype,
        // NFS4ERR_RESOURCE is not a 4.1 error (design section 4.8).
        FsError::Again => Nfsstat4::Delay,
    }
}

/// The NFSv4 status for a data-plane error.
pub fn from_data(e: &DataError) -> Nfsstat4 {
    from_fs(FsError::from_errno(rustix::io::Errno::from_raw_os_error(
        e.errno(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_v4_statuses() {
        assert_eq!(from_fs(FsError::Again), Nfsstat4::Delay);
        assert_eq!(from_fs(FsError::Loop), Nfsstat4::Symlink);
        assert_eq!(from_fs(FsError::NoDev), Nfsstat4::Nxio);
        assert_eq!(from_fs(FsError::Stale), Nfsstat4::Stale);
        let nospace = DataError::Io(std::io::Error::from_raw_os_error(libc_enospc()));
        assert_eq!(from_data(&nospace), Nfsstat4::Nospc);
        assert_eq!(from_data(&DataError::FileTooBig), Nfsstat4::Fbig);
    }

    /// ENOSPC, without a libc dependency in this crate.
    fn libc_enospc() -> i32 {
        rustix::io::Errno::NOSPC.raw_os_error()
    }
}
