//! MOUNT version 3 (RFC 1813 Appendix I): program 100005, version 3. A
//! client uses it to turn an export path into the root file handle it then
//! uses with NFS.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{
    decode_list, decode_u32_array, encode_list, encode_u32_array, opaque_var_len, xdr_bytes,
    xdr_enum, MAX_LIST_ITEMS,
};
use crate::nfs3::NfsFh3;

/// RPC program number of MOUNT (RFC 1813 Appendix I).
pub const MOUNT_PROGRAM: u32 = 100005;
/// The MOUNT version these codecs speak (RFC 1813 Appendix I).
pub const MOUNT_V3: u32 = 3;
/// Longest export path, `MNTPATHLEN` (RFC 1813 Appendix I).
pub const MNTPATHLEN: u32 = 1024;
/// Longest host or group name, `MNTNAMLEN` (RFC 1813 Appendix I).
pub const MNTNAMLEN: u32 = 255;
/// Largest file handle, `FHSIZE3` (RFC 1813 Appendix I); the same as NFSv3's.
pub const FHSIZE3: usize = crate::nfs3::NFS3_FHSIZE;
/// Most `auth_flavors` accepted when decoding a MNT reply. RFC 1813 leaves
/// the array unbounded; real servers list one to three flavors.
pub const MAX_AUTH_FLAVORS: u32 = 256;

xdr_enum! {
    /// MOUNT v3 procedure numbers (RFC 1813 Appendix I).
    pub enum MountProc3 {
        Null = 0,
        Mnt = 1,
        Dump = 2,
        Umnt = 3,
        Umntall = 4,
        Export = 5,
    }
}

impl MountProc3 {
    /// The longest XDR encoding of this procedure's arguments, in bytes:
    /// a [`DirPath`] of [`MNTPATHLEN`] bytes for MNT and UMNT, nothing for
    /// the others. A server refuses longer calls before reading them.
    pub const fn max_args_len(self) -> usize {
        match self {
            MountProc3::Mnt | MountProc3::Umnt => opaque_var_len(MNTPATHLEN as usize),
            MountProc3::Null | MountProc3::Dump | MountProc3::Umntall | MountProc3::Export => 0,
        }
    }
}

xdr_enum! {
    /// `mountstat3`: the status of a MNT reply (RFC 1813 Appendix I).
    pub enum MountStat3 {
        Ok = 0,
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        Acces = 13,
        NotDir = 20,
        Inval = 22,
        NameTooLong = 63,
        NotSupp = 10004,
        ServerFault = 10006,
    }
}

/// `fhandle3`: the file handle MNT returns, the same type as NFSv3's
/// `nfs_fh3` (RFC 1813 Appendix I).
pub type Fhandle3 = NfsFh3;

xdr_bytes! {
    /// `dirpath`: an export path on the server, at most [`MNTPATHLEN`]
    /// bytes (RFC 1813 Appendix I). The argument of MNT and UMNT.
    pub struct DirPath(max = MNTPATHLEN);
}

xdr_bytes! {
    /// `name`: a client host name or a group name, at most [`MNTNAMLEN`]
    /// bytes (RFC 1813 Appendix I).
    pub struct MountName(max = MNTNAMLEN);
}

/// MNT arguments: the export path (RFC 1813 Appendix I, MOUNTPROC3_MNT).
pub type MntArgs = DirPath;
/// UMNT arguments: the export path (RFC 1813 Appendix I, MOUNTPROC3_UMNT).
pub type UmntArgs = DirPath;

/// `mountres3_ok`: the export's root handle and the RPC authentication
/// flavors the server accepts for it, most preferred first (RFC 1813
/// Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountResOk {
    pub fhandle: Fhandle3,
    /// RFC 1813 `int auth_flavors<>`; flavor numbers are never negative.
    pub auth_flavors: Vec<u32>,
}

impl Encode for MountResOk {
    fn encode(&self, enc: &mut Encoder) {
        self.fhandle.encode(enc);
        encode_u32_array(enc, &self.auth_flavors);
    }
}

impl Decode<'_> for MountResOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            fhandle: NfsFh3::decode(dec)?,
            auth_flavors: decode_u32_array(dec, MAX_AUTH_FLAVORS)?,
        })
    }
}

/// `mountres3`: the MNT reply, a union on [`MountStat3`] whose failure arm
/// is void (RFC 1813 Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes3 {
    /// MNT3_OK.
    Ok(MountResOk),
    /// Any other status; never [`MountStat3::Ok`].
    Fail(MountStat3),
}

impl MountRes3 {
    /// The status word.
    pub fn status(&self) -> MountStat3 {
        match self {
            MountRes3::Ok(_) => MountStat3::Ok,
            MountRes3::Fail(status) => *status,
        }
    }
}

impl Encode for MountRes3 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            MountRes3::Ok(ok) => {
                MountStat3::Ok.encode(enc);
                ok.encode(enc);
            }
            MountRes3::Fail(status) => {
                debug_assert_ne!(*status, MountStat3::Ok, "MountRes3::Fail with MNT3_OK");
                status.encode(enc);
            }
        }
    }
}

impl Decode<'_> for MountRes3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match MountStat3::decode(dec)? {
            MountStat3::Ok => MountRes3::Ok(MountResOk::decode(dec)?),
            status => MountRes3::Fail(status),
        })
    }
}

/// One `mountbody`: a client and the path it mounted (RFC 1813 Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountBody {
    pub hostname: MountName,
    pub directory: DirPath,
}

/// `mountlist`: the DUMP reply, the mounts the server believes are active
/// (RFC 1813 Appendix I). A linked list on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountList(pub Vec<MountBody>);

impl Encode for MountList {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.0, |e, m| {
            m.hostname.encode(e);
            m.directory.encode(e);
        });
    }
}

impl Decode<'_> for MountList {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        let items = decode_list(dec, MAX_LIST_ITEMS, |d| {
            Ok(MountBody {
                hostname: MountName::decode(d)?,
                directory: DirPath::decode(d)?,
            })
        })?;
        Ok(Self(items))
    }
}

/// One `exportnode`: an exported path and the groups (host names, netgroups
/// or address patterns) allowed to mount it; no groups means everyone
/// (RFC 1813 Appendix I).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportNode {
    pub dir: DirPath,
    pub groups: Vec<MountName>,
}

/// `exports`: the EXPORT reply (RFC 1813 Appendix I). A linked list of
/// linked lists on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exports(pub Vec<ExportNode>);

impl Encode for Exports {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.0, |e, node| {
            node.dir.encode(e);
            encode_list(e, &node.groups, |e, g| g.encode(e));
        });
    }
}

impl Decode<'_> for Exports {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        let nodes = decode_list(dec, MAX_LIST_ITEMS, |d| {
            Ok(ExportNode {
                dir: DirPath::decode(d)?,
                groups: decode_list(d, MAX_LIST_ITEMS, MountName::decode)?,
            })
        })?;
        Ok(Self(nodes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;
    use dionfs_xdr::XdrError;
    use proptest::prelude::*;

    #[test]
    fn args_limits_are_the_longest_dirpath_or_nothing() {
        let longest = DirPath(vec![b'/'; MNTPATHLEN as usize]).to_xdr();
        assert_eq!(longest.len(), MountProc3::Mnt.max_args_len());
        assert_eq!(longest.len(), MountProc3::Umnt.max_args_len());
        assert!(DirPath::from_xdr(&longest).is_ok());
        for p in [
            MountProc3::Null,
            MountProc3::Dump,
            MountProc3::Umntall,
            MountProc3::Export,
        ] {
            assert_eq!(p.max_args_len(), 0, "{p:?}");
        }
    }

    #[test]
    fn mnt_args_and_ok_reply_bytes_match_the_rfc_layout() {
        assert_eq!(
            DirPath::from("/srv").to_xdr(),
            [0, 0, 0, 4, b'/', b's', b'r', b'v']
        );
        let res = MountRes3::Ok(MountResOk {
            fhandle: NfsFh3::new(vec![0xab; 2]).unwrap(),
            auth_flavors: vec![1, 0],
        });
        #[rustfmt::skip]
        let expected = [
            0, 0, 0, 0,             // MNT3_OK
            0, 0, 0, 2, 0xab, 0xab, 0, 0, // fhandle3
            0, 0, 0, 2,             // two flavors
            0, 0, 0, 1,             // AUTH_SYS
            0, 0, 0, 0,             // AUTH_NONE
        ];
        assert_eq!(res.to_xdr(), expected);
        assert_codec(&res);
    }

    #[test]
    fn failure_is_just_the_status() {
        let res = MountRes3::Fail(MountStat3::Acces);
        assert_eq!(res.to_xdr(), [0, 0, 0, 13]);
        assert_codec(&res);
        assert!(matches!(
            MountRes3::from_xdr(&[0, 0, 0, 3]),
            Err(XdrError::BadDiscriminant {
                type_name: "MountStat3",
                ..
            })
        ));
    }

    #[test]
    fn oversized_items_are_rejected() {
        let mut enc = Encoder::new();
        enc.string(&[b'a'; 1025]);
        assert_eq!(
            DirPath::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong {
                len: 1025,
                max: 1024
            })
        );
        assert_codec(&DirPath(vec![b'a'; 1024]));
        let mut enc = Encoder::new();
        enc.string(&[b'h'; 256]);
        assert!(matches!(
            MountName::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong { len: 256, max: 255 })
        ));
        // A flavor count beyond the input, and beyond the cap.
        let mut enc = Encoder::new();
        enc.u32(0);
        enc.opaque_var(&[1; 4]);
        enc.u32(100);
        assert!(matches!(
            MountRes3::from_xdr(enc.as_slice()),
            Err(XdrError::Truncated { .. })
        ));
        let mut enc = Encoder::new();
        enc.u32(0);
        enc.opaque_var(&[1; 4]);
        enc.u32(0xffff_ffff);
        assert!(matches!(
            MountRes3::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong { .. })
        ));
    }

    #[test]
    fn procedure_numbers_match_rfc_1813() {
        assert_eq!(MountProc3::from_u32(5), Some(MountProc3::Export));
        assert_eq!(MountProc3::from_u32(6), None);
        assert_eq!(MountProc3::Umntall.as_u32(), 4);
    }

    #[test]
    fn empty_lists_are_one_false() {
        assert_eq!(MountList::default().to_xdr(), [0, 0, 0, 0]);
        assert_eq!(Exports::default().to_xdr(), [0, 0, 0, 0]);
    }

    fn mount_name() -> impl Strategy<Value = MountName> {
        bytes(255).prop_map(MountName)
    }

    fn dir_path() -> impl Strategy<Value = DirPath> {
        bytes(200).prop_map(DirPath)
    }

    proptest! {
        #[test]
        fn round_trips(
            path in dir_path(),
            fh in nfs_fh3(),
            auth_flavors in proptest::collection::vec(any::<u32>(), 0..4),
            fail in proptest::sample::select(&MountStat3::ALL[1..]),
            mounts in proptest::collection::vec((mount_name(), dir_path()), 0..4),
            exports in proptest::collection::vec((dir_path(), proptest::collection::vec(mount_name(), 0..3)), 0..4),
        ) {
            assert_codec(&path);
            assert_codec(&MountRes3::Ok(MountResOk { fhandle: fh, auth_flavors }));
            assert_codec(&MountRes3::Fail(fail));
            assert_codec(&MountList(
                mounts.into_iter().map(|(hostname, directory)| MountBody { hostname, directory }).collect(),
            ));
            assert_codec(&Exports(
                exports.into_iter().map(|(dir, groups)| ExportNode { dir, groups }).collect(),
            ));
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = DirPath::from_xdr(&bytes);
            let _ = MountRes3::from_xdr(&bytes);
            let _ = MountList::from_xdr(&bytes);
            let _ = Exports::from_xdr(&bytes);
        }
    }
}
