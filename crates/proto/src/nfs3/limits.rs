//! The longest arguments each NFSv3 procedure can have, so a server can
//! refuse a longer call before reading it into memory.
//!
//! Each limit is the XDR size of the procedure's arguments with every
//! variable-length item at the maximum its decoder accepts: a handle of
//! [`NFS3_FHSIZE`] bytes, names of [`NFS3_MAX_NAME_LEN`], a symlink target
//! of [`NFS3_MAX_PATH_LEN`], and the longest arm of every union. A call
//! longer than that cannot decode into anything but trailing garbage.
//! WRITE's limit is for its head only ([`ArgsLimit::HeadThenPayload`]): its
//! payload is received in phases into a buffer of its own, bounded by the
//! server's maximum transfer size.

use crate::codec::opaque_var_len;
use crate::nfs3::data::write_head_len;
use crate::nfs3::types::{
    NfsProc3, NFS3_COOKIEVERFSIZE, NFS3_CREATEVERFSIZE, NFS3_FHSIZE, NFS3_MAX_NAME_LEN,
    NFS3_MAX_PATH_LEN,
};
use crate::ArgsLimit;

/// An XDR unsigned int, enum or bool.
const WORD: usize = 4;
/// An XDR unsigned hyper.
const HYPER: usize = 8;
/// `nfs_fh3` at its largest.
const FH: usize = opaque_var_len(NFS3_FHSIZE);
/// `diropargs3` at its largest: a handle and a name.
const DIROPARGS: usize = FH + opaque_var_len(NFS3_MAX_NAME_LEN as usize);
/// `nfstime3`.
const TIME: usize = 2 * WORD;
/// `set_atime` / `set_mtime` with a client time (the longest arm).
const SET_TIME: usize = WORD + TIME;
/// `sattr3` with every field set: mode, uid, gid (discriminant and u32),
/// size (discriminant and u64), atime and mtime.
const SATTR: usize = 3 * (WORD + WORD) + (WORD + HYPER) + 2 * SET_TIME;
/// `sattrguard3` with a ctime.
const GUARD: usize = WORD + TIME;
/// `createhow3`: the mode, then a `sattr3` (longer than the verifier).
const CREATEHOW: usize = WORD + max(SATTR, NFS3_CREATEVERFSIZE);
/// `mknoddata3` for a device: the type, a `sattr3` and `specdata3`.
const MKNODDATA: usize = WORD + SATTR + 2 * WORD;
/// `symlinkdata3`: a `sattr3` and the target.
const SYMLINKDATA: usize = SATTR + opaque_var_len(NFS3_MAX_PATH_LEN as usize);

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

impl NfsProc3 {
    /// The longest XDR encoding of this procedure's arguments, in bytes
    /// (see the module documentation): for WRITE, of its head.
    pub const fn max_args_len(self) -> ArgsLimit {
        ArgsLimit::Whole(match self {
            NfsProc3::Null => 0,
            NfsProc3::Getattr
            | NfsProc3::Readlink
            | NfsProc3::Fsstat
            | NfsProc3::Fsinfo
            | NfsProc3::Pathconf => FH,
            NfsProc3::Setattr => FH + SATTR + GUARD,
            NfsProc3::Lookup | NfsProc3::Remove | NfsProc3::Rmdir => DIROPARGS,
            NfsProc3::Access => FH + WORD,
            NfsProc3::Read | NfsProc3::Commit => FH + HYPER + WORD,
            NfsProc3::Write => return ArgsLimit::HeadThenPayload(write_head_len(NFS3_FHSIZE)),
            NfsProc3::Create => DIROPARGS + CREATEHOW,
            NfsProc3::Mkdir => DIROPARGS + SATTR,
            NfsProc3::Symlink => DIROPARGS + SYMLINKDATA,
            NfsProc3::Mknod => DIROPARGS + MKNODDATA,
            NfsProc3::Rename => 2 * DIROPARGS,
            NfsProc3::Link => FH + DIROPARGS,
            NfsProc3::Readdir => FH + HYPER + NFS3_COOKIEVERFSIZE + WORD,
            NfsProc3::Readdirplus => FH + HYPER + NFS3_COOKIEVERFSIZE + 2 * WORD,
        })
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::{Decode, Encode};

    use crate::nfs3::*;
    use crate::ArgsLimit;

    fn fh() -> NfsFh3 {
        NfsFh3::new(vec![0xfe; NFS3_FHSIZE]).unwrap()
    }

    fn diropargs() -> DirOpArgs3 {
        DirOpArgs3 {
            dir: fh(),
            name: Filename3(vec![b'n'; NFS3_MAX_NAME_LEN as usize]),
        }
    }

    fn sattr() -> Sattr3 {
        let t = NfsTime3 {
            seconds: 1,
            nseconds: 2,
        };
        Sattr3 {
            mode: Some(0o644),
            uid: Some(1),
            gid: Some(2),
            size: Some(3),
            atime: SetTime::ClientTime(t),
            mtime: SetTime::ClientTime(t),
        }
    }

    /// The largest arguments of every procedure but WRITE, encoded.
    fn largest_args(p: NfsProc3) -> Vec<u8> {
        let device = DeviceData3 {
            dev_attributes: sattr(),
            spec: SpecData3::default(),
        };
        match p {
            NfsProc3::Null => Vec::new(),
            NfsProc3::Getattr => GetattrArgs { object: fh() }.to_xdr(),
            NfsProc3::Setattr => SetattrArgs {
                object: fh(),
                new_attributes: sattr(),
                guard: SattrGuard3(Some(NfsTime3::default())),
            }
            .to_xdr(),
            NfsProc3::Lookup => LookupArgs { what: diropargs() }.to_xdr(),
            NfsProc3::Access => AccessArgs {
                object: fh(),
                access: 0x3f,
            }
            .to_xdr(),
            NfsProc3::Readlink => ReadlinkArgs { symlink: fh() }.to_xdr(),
            NfsProc3::Read => ReadArgs {
                file: fh(),
                offset: 1,
                count: 2,
            }
            .to_xdr(),
            NfsProc3::Write => unreachable!("WRITE has no fixed limit"),
            NfsProc3::Create => CreateArgs {
                target: diropargs(),
                how: CreateHow3::Guarded(sattr()),
            }
            .to_xdr(),
            NfsProc3::Mkdir => MkdirArgs {
                target: diropargs(),
                attributes: sattr(),
            }
            .to_xdr(),
            NfsProc3::Symlink => SymlinkArgs {
                target: diropargs(),
                symlink: SymlinkData3 {
                    symlink_attributes: sattr(),
                    symlink_data: NfsPath3(vec![b'/'; NFS3_MAX_PATH_LEN as usize]),
                },
            }
            .to_xdr(),
            NfsProc3::Mknod => MknodArgs {
                target: diropargs(),
                what: MknodData3::Blk(device),
            }
            .to_xdr(),
            NfsProc3::Remove => RemoveArgs {
                object: diropargs(),
            }
            .to_xdr(),
            NfsProc3::Rmdir => RmdirArgs {
                object: diropargs(),
            }
            .to_xdr(),
            NfsProc3::Rename => RenameArgs {
                from: diropargs(),
                to: diropargs(),
            }
            .to_xdr(),
            NfsProc3::Link => LinkArgs {
                file: fh(),
                link: diropargs(),
            }
            .to_xdr(),
            NfsProc3::Readdir => ReaddirArgs {
                dir: fh(),
                cookie: 1,
                cookieverf: CookieVerf3::default(),
                count: 2,
            }
            .to_xdr(),
            NfsProc3::Readdirplus => ReaddirplusArgs {
                dir: fh(),
                cookie: 1,
                cookieverf: CookieVerf3::default(),
                dircount: 2,
                maxcount: 3,
            }
            .to_xdr(),
            NfsProc3::Fsstat => FsstatArgs { fsroot: fh() }.to_xdr(),
            NfsProc3::Fsinfo => FsinfoArgs { fsroot: fh() }.to_xdr(),
            NfsProc3::Pathconf => PathconfArgs { object: fh() }.to_xdr(),
            NfsProc3::Commit => CommitArgs {
                file: fh(),
                offset: 1,
                count: 2,
            }
            .to_xdr(),
        }
    }

    #[test]
    fn each_limit_is_the_largest_encoding_of_its_arguments() {
        for &p in NfsProc3::ALL {
            let Some(max) = p.max_args_len().whole() else {
                assert_eq!(p, NfsProc3::Write);
                continue;
            };
            assert_eq!(largest_args(p).len(), max, "{p:?}");
        }
    }

    #[test]
    fn the_largest_arguments_decode() {
        // Proves the limits are not below what the decoders accept (a
        // limit computed from a wrong maximum would show up here or above).
        assert!(SymlinkArgs::from_xdr(&largest_args(NfsProc3::Symlink)).is_ok());
        assert!(RenameArgs::from_xdr(&largest_args(NfsProc3::Rename)).is_ok());
        assert!(MknodArgs::from_xdr(&largest_args(NfsProc3::Mknod)).is_ok());
        assert!(CreateArgs::from_xdr(&largest_args(NfsProc3::Create)).is_ok());
        assert!(SetattrArgs::from_xdr(&largest_args(NfsProc3::Setattr)).is_ok());
    }

    #[test]
    fn the_limits_are_a_few_kib() {
        let whole = |p: NfsProc3| p.max_args_len().whole();
        assert_eq!(whole(NfsProc3::Getattr), Some(68));
        assert_eq!(whole(NfsProc3::Lookup), Some(68 + 1028));
        assert_eq!(whole(NfsProc3::Rename), Some(2 * 1096));
        assert_eq!(whole(NfsProc3::Symlink), Some(1096 + 60 + 4100));
        let largest = NfsProc3::ALL.iter().filter_map(|&p| whole(p)).max();
        assert_eq!(largest, whole(NfsProc3::Symlink));
        // WRITE's head with the largest handle (4 + 64), offset, count,
        // stable and the data's length.
        assert_eq!(
            NfsProc3::Write.max_args_len(),
            ArgsLimit::HeadThenPayload(88)
        );
    }
}
