//! Arguments and results of the NFSv3 procedures about attributes and file
//! systems: GETATTR, SETATTR, ACCESS, READLINK, FSSTAT, FSINFO, PATHCONF
//! (RFC 1813 sections 3.3.1 to 3.3.5 and 3.3.18 to 3.3.20).

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{xdr_struct, Void};
use crate::nfs3::types::{Fattr3, NfsFh3, NfsPath3, NfsRes, NfsTime3, PostOpAttr, Sattr3, WccData};

xdr_struct! {
    /// GETATTR3args (RFC 1813 section 3.3.1).
    pub struct GetattrArgs {
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// GETATTR3resok (RFC 1813 section 3.3.1).
    pub struct GetattrResOk {
        pub obj_attributes: Fattr3,
    }
}

/// GETATTR3res (RFC 1813 section 3.3.1); a failure carries nothing.
pub type GetattrRes = NfsRes<GetattrResOk, Void>;

/// `sattrguard3`: SETATTR applies only if the object's ctime still equals
/// `Some(ctime)` (RFC 1813 section 3.3.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SattrGuard3(pub Option<NfsTime3>);

impl Encode for SattrGuard3 {
    fn encode(&self, enc: &mut Encoder) {
        enc.optional(self.0.as_ref(), |e, t| t.encode(e));
    }
}

impl Decode<'_> for SattrGuard3 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(dec.optional(NfsTime3::decode)?))
    }
}

xdr_struct! {
    /// SETATTR3args (RFC 1813 section 3.3.2).
    pub struct SetattrArgs {
        pub object: NfsFh3,
        pub new_attributes: Sattr3,
        pub guard: SattrGuard3,
    }
}

xdr_struct! {
    /// SETATTR3resok (RFC 1813 section 3.3.2).
    pub struct SetattrResOk {
        pub obj_wcc: WccData,
    }
}

xdr_struct! {
    /// SETATTR3resfail (RFC 1813 section 3.3.2).
    pub struct SetattrResFail {
        pub obj_wcc: WccData,
    }
}

/// SETATTR3res (RFC 1813 section 3.3.2).
pub type SetattrRes = NfsRes<SetattrResOk, SetattrResFail>;

xdr_struct! {
    /// ACCESS3args (RFC 1813 section 3.3.4): `access` is a mask of `ACCESS3_*` bits.
    pub struct AccessArgs {
        pub object: NfsFh3,
        pub access: u32,
    }
}

xdr_struct! {
    /// ACCESS3resok (RFC 1813 section 3.3.4): `access` is the granted subset.
    pub struct AccessResOk {
        pub obj_attributes: PostOpAttr,
        pub access: u32,
    }
}

xdr_struct! {
    /// ACCESS3resfail (RFC 1813 section 3.3.4).
    pub struct AccessResFail {
        pub obj_attributes: PostOpAttr,
    }
}

/// ACCESS3res (RFC 1813 section 3.3.4).
pub type AccessRes = NfsRes<AccessResOk, AccessResFail>;

xdr_struct! {
    /// READLINK3args (RFC 1813 section 3.3.5).
    pub struct ReadlinkArgs {
        pub symlink: NfsFh3,
    }
}

xdr_struct! {
    /// READLINK3resok (RFC 1813 section 3.3.5).
    pub struct ReadlinkResOk {
        pub symlink_attributes: PostOpAttr,
        pub data: NfsPath3,
    }
}

xdr_struct! {
    /// READLINK3resfail (RFC 1813 section 3.3.5).
    pub struct ReadlinkResFail {
        pub symlink_attributes: PostOpAttr,
    }
}

/// READLINK3res (RFC 1813 section 3.3.5).
pub type ReadlinkRes = NfsRes<ReadlinkResOk, ReadlinkResFail>;

xdr_struct! {
    /// FSSTAT3args (RFC 1813 section 3.3.18).
    pub struct FsstatArgs {
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// FSSTAT3resok (RFC 1813 section 3.3.18): total, free and available
    /// bytes and file slots, and how long (seconds) they are unlikely to change.
    pub struct FsstatResOk {
        pub obj_attributes: PostOpAttr,
        pub tbytes: u64,
        pub fbytes: u64,
        pub abytes: u64,
        pub tfiles: u64,
        pub ffiles: u64,
        pub afiles: u64,
        pub invarsec: u32,
    }
}

xdr_struct! {
    /// FSSTAT3resfail (RFC 1813 section 3.3.18).
    pub struct FsstatResFail {
        pub obj_attributes: PostOpAttr,
    }
}

/// FSSTAT3res (RFC 1813 section 3.3.18).
pub type FsstatRes = NfsRes<FsstatResOk, FsstatResFail>;

xdr_struct! {
    /// FSINFO3args (RFC 1813 section 3.3.19).
    pub struct FsinfoArgs {
        pub fsroot: NfsFh3,
    }
}

xdr_struct! {
    /// FSINFO3resok (RFC 1813 section 3.3.19): transfer sizes the server
    /// supports and prefers; `properties` is a mask of `FSF3_*` bits.
    pub struct FsinfoResOk {
        pub obj_attributes: PostOpAttr,
        pub rtmax: u32,
        pub rtpref: u32,
        pub rtmult: u32,
        pub wtmax: u32,
        pub wtpref: u32,
        pub wtmult: u32,
        pub dtpref: u32,
        pub maxfilesize: u64,
        pub time_delta: NfsTime3,
        pub properties: u32,
    }
}

xdr_struct! {
    /// FSINFO3resfail (RFC 1813 section 3.3.19).
    pub struct FsinfoResFail {
        pub obj_attributes: PostOpAttr,
    }
}

/// FSINFO3res (RFC 1813 section 3.3.19).
pub type FsinfoRes = NfsRes<FsinfoResOk, FsinfoResFail>;

xdr_struct! {
    /// PATHCONF3args (RFC 1813 section 3.3.20).
    pub struct PathconfArgs {
        pub object: NfsFh3,
    }
}

xdr_struct! {
    /// PATHCONF3resok (RFC 1813 section 3.3.20).
    pub struct PathconfResOk {
        pub obj_attributes: PostOpAttr,
        pub linkmax: u32,
        pub name_max: u32,
        pub no_trunc: bool,
        pub chown_restricted: bool,
        pub case_insensitive: bool,
        pub case_preserving: bool,
    }
}

xdr_struct! {
    /// PATHCONF3resfail (RFC 1813 section 3.3.20).
    pub struct PathconfResFail {
        pub obj_attributes: PostOpAttr,
    }
}

/// PATHCONF3res (RFC 1813 section 3.3.20).
pub type PathconfRes = NfsRes<PathconfResOk, PathconfResFail>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::types::NfsStat3;
    use crate::test_util::*;
    use dionfs_xdr::XdrError;
    use proptest::prelude::*;

    #[test]
    fn getattr_args_bytes_match_the_rfc_layout() {
        let args = GetattrArgs {
            object: NfsFh3::new(vec![0xaa, 0xbb, 0xcc, 0xdd, 0xee]).unwrap(),
        };
        // nfs_fh3: opaque<64> = length 5, five bytes, three bytes of padding.
        assert_eq!(
            args.to_xdr(),
            [0, 0, 0, 5, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0, 0, 0]
        );
    }

    #[test]
    fn getattr_failure_is_just_the_status() {
        let res: GetattrRes = NfsRes::fail(NfsStat3::Stale, Void);
        assert_eq!(res.to_xdr(), 70u32.to_be_bytes());
        assert_codec(&res);
        let ok: GetattrRes = NfsRes::Ok(GetattrResOk {
            obj_attributes: sample_fattr3(),
        });
        assert_eq!(ok.to_xdr().len(), 4 + 84);
        assert_codec(&ok);
    }

    #[test]
    fn setattr_guard_bad_bool_is_rejected() {
        let mut bytes = GetattrArgs {
            object: NfsFh3::default(),
        }
        .to_xdr();
        bytes.extend_from_slice(&Sattr3::default().to_xdr());
        bytes.extend_from_slice(&[0, 0, 0, 2]);
        assert_eq!(SetattrArgs::from_xdr(&bytes), Err(XdrError::BadBool(2)));
    }

    fn fsinfo_ok() -> impl Strategy<Value = FsinfoResOk> {
        (
            post_op_attr(),
            any::<[u32; 7]>(),
            any::<u64>(),
            nfs_time3(),
            any::<u32>(),
        )
            .prop_map(|(obj_attributes, t, maxfilesize, time_delta, properties)| {
                FsinfoResOk {
                    obj_attributes,
                    rtmax: t[0],
                    rtpref: t[1],
                    rtmult: t[2],
                    wtmax: t[3],
                    wtpref: t[4],
                    wtmult: t[5],
                    dtpref: t[6],
                    maxfilesize,
                    time_delta,
                    properties,
                }
            })
    }

    fn fsstat_ok() -> impl Strategy<Value = FsstatResOk> {
        (post_op_attr(), any::<[u64; 6]>(), any::<u32>()).prop_map(
            |(obj_attributes, n, invarsec)| FsstatResOk {
                obj_attributes,
                tbytes: n[0],
                fbytes: n[1],
                abytes: n[2],
                tfiles: n[3],
                ffiles: n[4],
                afiles: n[5],
                invarsec,
            },
        )
    }

    fn pathconf_ok() -> impl Strategy<Value = PathconfResOk> {
        (post_op_attr(), any::<(u32, u32)>(), any::<[bool; 4]>()).prop_map(
            |(obj_attributes, (linkmax, name_max), b)| PathconfResOk {
                obj_attributes,
                linkmax,
                name_max,
                no_trunc: b[0],
                chown_restricted: b[1],
                case_insensitive: b[2],
                case_preserving: b[3],
            },
        )
    }

    proptest! {
        #[test]
        fn args_round_trip(
            fh in nfs_fh3(),
            new_attributes in sattr3(),
            guard in proptest::option::of(nfs_time3()),
            access in any::<u32>(),
        ) {
            assert_codec(&GetattrArgs { object: fh.clone() });
            assert_codec(&SetattrArgs {
                object: fh.clone(),
                new_attributes,
                guard: SattrGuard3(guard),
            });
            assert_codec(&AccessArgs { object: fh.clone(), access });
            assert_codec(&ReadlinkArgs { symlink: fh.clone() });
            assert_codec(&FsstatArgs { fsroot: fh.clone() });
            assert_codec(&FsinfoArgs { fsroot: fh.clone() });
            assert_codec(&PathconfArgs { object: fh });
        }

        #[test]
        fn getattr_and_setattr_results_round_trip(
            getattr in nfs_res(fattr3().prop_map(|obj_attributes| GetattrResOk { obj_attributes }), Just(Void)),
            setattr in nfs_res(
                wcc_data().prop_map(|obj_wcc| SetattrResOk { obj_wcc }),
                wcc_data().prop_map(|obj_wcc| SetattrResFail { obj_wcc }),
            ),
        ) {
            assert_codec(&getattr);
            assert_codec(&setattr);
        }

        #[test]
        fn access_and_readlink_results_round_trip(
            access in nfs_res(
                (post_op_attr(), any::<u32>()).prop_map(|(obj_attributes, access)| AccessResOk { obj_attributes, access }),
                post_op_attr().prop_map(|obj_attributes| AccessResFail { obj_attributes }),
            ),
            readlink in nfs_res(
                (post_op_attr(), nfs_path3()).prop_map(|(symlink_attributes, data)| ReadlinkResOk { symlink_attributes, data }),
                post_op_attr().prop_map(|symlink_attributes| ReadlinkResFail { symlink_attributes }),
            ),
        ) {
            assert_codec(&access);
            assert_codec(&readlink);
        }

        #[test]
        fn fs_results_round_trip(
            fsstat in nfs_res(fsstat_ok(), post_op_attr().prop_map(|obj_attributes| FsstatResFail { obj_attributes })),
            fsinfo in nfs_res(fsinfo_ok(), post_op_attr().prop_map(|obj_attributes| FsinfoResFail { obj_attributes })),
            pathconf in nfs_res(pathconf_ok(), post_op_attr().prop_map(|obj_attributes| PathconfResFail { obj_attributes })),
        ) {
            assert_codec(&fsstat);
            assert_codec(&fsinfo);
            assert_codec(&pathconf);
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = GetattrArgs::from_xdr(&bytes);
            let _ = SetattrArgs::from_xdr(&bytes);
            let _ = AccessArgs::from_xdr(&bytes);
            let _ = GetattrRes::from_xdr(&bytes);
            let _ = SetattrRes::from_xdr(&bytes);
            let _ = ReadlinkRes::from_xdr(&bytes);
            let _ = FsstatRes::from_xdr(&bytes);
            let _ = FsinfoRes::from_xdr(&bytes);
            let _ = PathconfRes::from_xdr(&bytes);
        }
    }
}
