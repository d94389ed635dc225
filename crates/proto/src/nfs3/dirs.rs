//! Arguments and results of the NFSv3 procedures that look up, create and
//! remove names: LOOKUP, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
//! RENAME, LINK (RFC 1813 sections 3.3.3 and 3.3.8 to 3.3.15). READDIR and
//! READDIRPLUS are in [`super::readdir`].
//!
//! Several procedures share a result shape; the shared struct is defined once
//! and each procedure's RFC name is an alias of it.

use crate::codec::xdr_struct;
use crate::nfs3::types::{
    CreateHow3, DirOpArgs3, MknodData3, NfsFh3, NfsPath3, NfsRes, PostOpAttr, PostOpFh3, Sattr3,
    WccData,
};

xdr_struct! {
    /// LOOKUP3args (RFC 1813 section 3.3.3).
    pub struct LookupArgs {
        pub what: DirOpArgs3,
    }
}

xdr_struct! {
    /// LOOKUP3resok (RFC 1813 section 3.3.3).
    pub struct LookupResOk {
        pub object: NfsFh3,
        pub obj_attributes: PostOpAttr,
        pub dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// LOOKUP3resfail (RFC 1813 section 3.3.3).
    pub struct LookupResFail {
        pub dir_attributes: PostOpAttr,
    }
}

/// LOOKUP3res (RFC 1813 section 3.3.3).
pub type LookupRes = NfsRes<LookupResOk, LookupResFail>;

xdr_struct! {
    /// The success of a procedure that makes a new name: CREATE3resok,
    /// MKDIR3resok, SYMLINK3resok, MKNOD3resok (RFC 1813 sections 3.3.8 to
    /// 3.3.11), all the same shape.
    pub struct NewObjResOk {
        pub obj: PostOpFh3,
        pub obj_attributes: PostOpAttr,
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    /// A result holding only the directory's weak cache consistency data:
    /// CREATE3resfail, MKDIR3resfail, SYMLINK3resfail, MKNOD3resfail,
    /// REMOVE3resok/resfail, RMDIR3resok/resfail (RFC 1813 sections 3.3.8
    /// to 3.3.13).
    #[derive(Default)]
    pub struct DirWcc {
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    /// CREATE3args (RFC 1813 section 3.3.8).
    pub struct CreateArgs {
        /// RFC 1813 `where`: the directory and the new name.
        pub target: DirOpArgs3,
        pub how: CreateHow3,
    }
}

/// CREATE3resok (RFC 1813 section 3.3.8).
pub type CreateResOk = NewObjResOk;
/// CREATE3resfail (RFC 1813 section 3.3.8).
pub type CreateResFail = DirWcc;
/// CREATE3res (RFC 1813 section 3.3.8).
pub type CreateRes = NfsRes<CreateResOk, CreateResFail>;

xdr_struct! {
    /// MKDIR3args (RFC 1813 section 3.3.9).
    pub struct MkdirArgs {
        /// RFC 1813 `where`: the parent directory and the new name.
        pub target: DirOpArgs3,
        pub attributes: Sattr3,
    }
}

/// MKDIR3resok (RFC 1813 section 3.3.9).
pub type MkdirResOk = NewObjResOk;
/// MKDIR3resfail (RFC 1813 section 3.3.9).
pub type MkdirResFail = DirWcc;
/// MKDIR3res (RFC 1813 section 3.3.9).
pub type MkdirRes = NfsRes<MkdirResOk, MkdirResFail>;

xdr_struct! {
    /// `symlinkdata3`: attributes and target of a new symbolic link
    /// (RFC 1813 section 3.3.10).
    pub struct SymlinkData3 {
        pub symlink_attributes: Sattr3,
        pub symlink_data: NfsPath3,
    }
}

xdr_struct! {
    /// SYMLINK3args (RFC 1813 section 3.3.10).
    pub struct SymlinkArgs {
        /// RFC 1813 `where`: the directory and the new name.
        pub target: DirOpArgs3,
        pub symlink: SymlinkData3,
    }
}

/// SYMLINK3resok (RFC 1813 section 3.3.10).
pub type SymlinkResOk = NewObjResOk;
/// SYMLINK3resfail (RFC 1813 section 3.3.10).
pub type SymlinkResFail = DirWcc;
/// SYMLINK3res (RFC 1813 section 3.3.10).
pub type SymlinkRes = NfsRes<SymlinkResOk, SymlinkResFail>;

xdr_struct! {
    /// MKNOD3args (RFC 1813 section 3.3.11).
    pub struct MknodArgs {
        /// RFC 1813 `where`: the directory and the new name.
        pub target: DirOpArgs3,
        pub what: MknodData3,
    }
}

/// MKNOD3resok (RFC 1813 section 3.3.11).
pub type MknodResOk = NewObjResOk;
/// MKNOD3resfail (RFC 1813 section 3.3.11).
pub type MknodResFail = DirWcc;
/// MKNOD3res (RFC 1813 section 3.3.11).
pub type MknodRes = NfsRes<MknodResOk, MknodResFail>;

xdr_struct! {
    /// REMOVE3args (RFC 1813 section 3.3.12).
    pub struct RemoveArgs {
        pub object: DirOpArgs3,
    }
}

/// REMOVE3res (RFC 1813 section 3.3.12): success and failure both carry
/// the directory's wcc data.
pub type RemoveRes = NfsRes<DirWcc, DirWcc>;

xdr_struct! {
    /// RMDIR3args (RFC 1813 section 3.3.13).
    pub struct RmdirArgs {
        pub object: DirOpArgs3,
    }
}

/// RMDIR3res (RFC 1813 section 3.3.13): success and failure both carry
/// the directory's wcc data.
pub type RmdirRes = NfsRes<DirWcc, DirWcc>;

xdr_struct! {
    /// RENAME3args (RFC 1813 section 3.3.14).
    pub struct RenameArgs {
        pub from: DirOpArgs3,
        pub to: DirOpArgs3,
    }
}

xdr_struct! {
    /// RENAME3resok and RENAME3resfail, the same shape (RFC 1813 section 3.3.14).
    #[derive(Default)]
    pub struct RenameWcc {
        pub fromdir_wcc: WccData,
        pub todir_wcc: WccData,
    }
}

/// RENAME3res (RFC 1813 section 3.3.14).
pub type RenameRes = NfsRes<RenameWcc, RenameWcc>;

xdr_struct! {
    /// LINK3args (RFC 1813 section 3.3.15): make `link` a new name for `file`.
    pub struct LinkArgs {
        pub file: NfsFh3,
        pub link: DirOpArgs3,
    }
}

xdr_struct! {
    /// LINK3resok and LINK3resfail, the same shape (RFC 1813 section 3.3.15).
    #[derive(Default)]
    pub struct LinkWcc {
        pub file_attributes: PostOpAttr,
        pub linkdir_wcc: WccData,
    }
}

/// LINK3res (RFC 1813 section 3.3.15).
pub type LinkRes = NfsRes<LinkWcc, LinkWcc>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs3::types::{CreateVerf3, Filename3, Ftype3, NfsStat3};
    use crate::test_util::*;
    use dionfs_xdr::{Decode, Encode, Encoder, XdrError};
    use proptest::prelude::*;

    #[test]
    fn lookup_args_bytes_match_the_rfc_layout() {
        let args = LookupArgs {
            what: DirOpArgs3 {
                dir: NfsFh3::new(vec![1, 2, 3, 4, 5, 6, 7, 8]).unwrap(),
                name: Filename3::from("hello"),
            },
        };
        #[rustfmt::skip]
        let expected = [
            0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8,   // dir: nfs_fh3, no padding
            0, 0, 0, 5, b'h', b'e', b'l', b'l',   // name: filename3
            b'o', 0, 0, 0,                        //   with 3 bytes of padding
        ];
        assert_eq!(args.to_xdr(), expected);
        assert_eq!(LookupArgs::from_xdr(&expected), Ok(args));
    }

    #[test]
    fn exclusive_create_bytes_match_the_rfc_layout() {
        let args = CreateArgs {
            target: DirOpArgs3 {
                dir: NfsFh3::new(vec![9]).unwrap(),
                name: Filename3::from("f"),
            },
            how: CreateHow3::Exclusive(CreateVerf3([1, 2, 3, 4, 5, 6, 7, 8])),
        };
        #[rustfmt::skip]
        let expected = [
            0, 0, 0, 1, 9, 0, 0, 0,       // dir
            0, 0, 0, 1, b'f', 0, 0, 0,    // name
            0, 0, 0, 2,                   // EXCLUSIVE
            1, 2, 3, 4, 5, 6, 7, 8,       // createverf3
        ];
        assert_eq!(args.to_xdr(), expected);
        assert_codec(&args);
    }

    #[test]
    fn malformed_names_and_modes_are_rejected() {
        let mut enc = Encoder::new();
        enc.opaque_var(&[1; 4]);
        enc.u32(0xffff_ffff); // name length
        assert!(matches!(
            LookupArgs::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong {
                len: 0xffff_ffff,
                max: 1024
            })
        ));

        let mut enc = Encoder::new();
        enc.opaque_var(&[1; 65]);
        enc.string(b"x");
        assert!(matches!(
            LookupArgs::from_xdr(enc.as_slice()),
            Err(XdrError::TooLong { len: 65, max: 64 })
        ));

        let mut enc = Encoder::new();
        enc.opaque_var(&[1; 4]);
        enc.string(b"x");
        enc.u32(3); // createmode3 has no 3
        assert!(matches!(
            CreateArgs::from_xdr(enc.as_slice()),
            Err(XdrError::BadDiscriminant {
                type_name: "CreateMode3",
                value: 3
            })
        ));

        let mut enc = Encoder::new();
        enc.opaque_var(&[1; 4]);
        enc.string(b"x");
        enc.u32(8); // ftype3 has no 8
        assert!(matches!(
            MknodArgs::from_xdr(enc.as_slice()),
            Err(XdrError::BadDiscriminant {
                type_name: "Ftype3",
                value: 8
            })
        ));
    }

    #[test]
    fn mknod_of_a_regular_file_decodes_for_the_server_to_refuse() {
        let mut enc = Encoder::new();
        enc.opaque_var(&[1; 4]);
        enc.string(b"x");
        Ftype3::Reg.encode(&mut enc);
        let args = MknodArgs::from_xdr(enc.as_slice()).unwrap();
        assert_eq!(args.what, MknodData3::Other(Ftype3::Reg));
    }

    #[test]
    fn remove_failure_carries_wcc() {
        let res: RemoveRes = NfsRes::fail(NfsStat3::NotEmpty, DirWcc::default());
        assert_eq!(res.to_xdr(), [0, 0, 0, 66, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_codec(&res);
    }

    fn new_obj_ok() -> impl Strategy<Value = NewObjResOk> {
        (post_op_fh3(), post_op_attr(), wcc_data()).prop_map(|(obj, obj_attributes, dir_wcc)| {
            NewObjResOk {
                obj,
                obj_attributes,
                dir_wcc,
            }
        })
    }

    fn dir_wcc() -> impl Strategy<Value = DirWcc> {
        wcc_data().prop_map(|dir_wcc| DirWcc { dir_wcc })
    }

    proptest! {
        #[test]
        fn args_round_trip(
            what in dir_op_args3(),
            other in dir_op_args3(),
            file in nfs_fh3(),
            how in create_how3(),
            attributes in sattr3(),
            symlink_data in nfs_path3(),
            node in mknod_data3(),
        ) {
            assert_codec(&LookupArgs { what: what.clone() });
            assert_codec(&CreateArgs { target: what.clone(), how });
            assert_codec(&MkdirArgs { target: what.clone(), attributes });
            assert_codec(&SymlinkArgs {
                target: what.clone(),
                symlink: SymlinkData3 { symlink_attributes: attributes, symlink_data },
            });
            assert_codec(&MknodArgs { target: what.clone(), what: node });
            assert_codec(&RemoveArgs { object: what.clone() });
            assert_codec(&RmdirArgs { object: what.clone() });
            assert_codec(&RenameArgs { from: what.clone(), to: other });
            assert_codec(&LinkArgs { file, link: what });
        }

        #[test]
        fn lookup_and_create_results_round_trip(
            lookup in nfs_res(
                (nfs_fh3(), post_op_attr(), post_op_attr()).prop_map(|(object, obj_attributes, dir_attributes)| {
                    LookupResOk { object, obj_attributes, dir_attributes }
                }),
                post_op_attr().prop_map(|dir_attributes| LookupResFail { dir_attributes }),
            ),
            create in nfs_res(new_obj_ok(), dir_wcc()),
        ) {
            assert_codec(&lookup);
            assert_codec::<CreateRes>(&create);
        }

        #[test]
        fn remove_rename_link_results_round_trip(
            remove in nfs_res(dir_wcc(), dir_wcc()),
            rename in nfs_res(
                (wcc_data(), wcc_data()).prop_map(|(fromdir_wcc, todir_wcc)| RenameWcc { fromdir_wcc, todir_wcc }),
                Just(RenameWcc::default()),
            ),
            link in nfs_res(
                (post_op_attr(), wcc_data()).prop_map(|(file_attributes, linkdir_wcc)| LinkWcc { file_attributes, linkdir_wcc }),
                Just(LinkWcc::default()),
            ),
        ) {
            assert_codec::<RemoveRes>(&remove);
            assert_codec::<RenameRes>(&rename);
            assert_codec::<LinkRes>(&link);
        }

        #[test]
        fn any_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = LookupArgs::from_xdr(&bytes);
            let _ = CreateArgs::from_xdr(&bytes);
            let _ = MkdirArgs::from_xdr(&bytes);
            let _ = SymlinkArgs::from_xdr(&bytes);
            let _ = MknodArgs::from_xdr(&bytes);
            let _ = RenameArgs::from_xdr(&bytes);
            let _ = LinkArgs::from_xdr(&bytes);
            let _ = LookupRes::from_xdr(&bytes);
            let _ = CreateRes::from_xdr(&bytes);
            let _ = RenameRes::from_xdr(&bytes);
            let _ = LinkRes::from_xdr(&bytes);
        }
    }
}
