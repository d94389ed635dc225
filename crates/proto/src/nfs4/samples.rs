//! Sample values of every NFSv4 type for the codec tests: typical ones,
//! and for the limits tests every variable item at its decoder's maximum.

use crate::nfs4::*;

/// A byte string of `len` copies of `b`.
pub fn filled(len: u32, b: u8) -> Vec<u8> {
    vec![b; len as usize]
}

pub fn fh(len: usize) -> NfsFh4 {
    NfsFh4::new(vec![0xfe; len]).unwrap()
}

pub fn stateid() -> StateId4 {
    StateId4 {
        seqid: 7,
        other: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
    }
}

pub fn time() -> NfsTime4 {
    NfsTime4 {
        seconds: -2,
        nseconds: 999_999_999,
    }
}

pub fn cinfo() -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: true,
        before: 1,
        after: u64::MAX,
    }
}

pub fn channel(rdma_ird: Option<u32>) -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 16,
        maxrequests: 64,
        rdma_ird,
    }
}

/// A three-word bitmap, the longest decoded.
pub fn bitmap() -> Bitmap4 {
    Bitmap4(vec![u32::MAX; Bitmap4::MAX_WORDS as usize])
}

pub fn ops4() -> StateProtectOps4 {
    StateProtectOps4 {
        must_enforce: bitmap(),
        must_allow: Bitmap4::from_bits(&[53]),
    }
}

/// `n` OIDs or handles of `len` bytes.
pub fn gss(n: usize, len: u32) -> Vec<GssOpaque4> {
    (0..n).map(|_| GssOpaque4(filled(len, b'g'))).collect()
}

pub fn impl_id(len: u32) -> NfsImplId4 {
    NfsImplId4 {
        domain: Utf8Str(filled(len, b'd')),
        name: Utf8Str(filled(len, b'n')),
        date: time(),
    }
}

pub fn authsys(max: bool) -> AuthSysParms {
    AuthSysParms {
        stamp: 3,
        machinename: Utf8Str(filled(
            if max { AUTH_SYS_MAX_MACHINE_NAME } else { 4 },
            b'm',
        )),
        uid: 1000,
        gid: 100,
        gids: vec![5; if max { AUTH_SYS_MAX_GIDS as usize } else { 2 }],
    }
}

pub fn gss_handles(len: u32) -> GssCbHandles4 {
    GssCbHandles4 {
        service: 1,
        handle_from_server: GssOpaque4(filled(len, b's')),
        handle_from_client: GssOpaque4(filled(len, b'c')),
    }
}

pub fn fattr(len: u32) -> Fattr4 {
    Fattr4 {
        attrmask: bitmap(),
        attr_vals: AttrList4(filled(len, 0xab)),
    }
}

pub fn component(len: u32) -> Component4 {
    Component4(filled(len, b'n'))
}

/// The largest `callback_sec_parms4`: RPCSEC_GSS with handles at their
/// limit.
pub fn largest_sec_parms() -> CallbackSecParms4 {
    CallbackSecParms4::RpcsecGss(gss_handles(NFS4_OPAQUE_LIMIT))
}

/// One of each argument-carrying operation with typical values.
/// One of each op minor version 0 alone has.
pub fn v40_ops() -> Vec<ArgOp> {
    let owner = StateOwner4 {
        clientid: 0x0102_0304_0506_0708,
        owner: Opaque4::from(b"lock-owner".to_vec()),
    };
    vec![
        ArgOp::Setclientid(Box::new(SetclientidArgs4 {
            client: NfsClientId4 {
                verifier: Verifier4([3; 8]),
                id: Opaque4::from(b"Linux NFSv4.0 realclient/192.168.77.1 tcp".to_vec()),
            },
            callback: CbClient4 {
                cb_program: 0x4000_0000,
                cb_location: Netaddr4 {
                    netid: Utf8Str::from("tcp"),
                    addr: Utf8Str::from("192.168.77.2.3.232"),
                },
            },
            callback_ident: 1,
        })),
        ArgOp::SetclientidConfirm(SetclientidConfirmArgs4 {
            clientid: 0x0102_0304_0506_0708,
            setclientid_confirm: Verifier4([4; 8]),
        }),
        ArgOp::Renew(RenewArgs4 {
            clientid: 0x0102_0304_0506_0708,
        }),
        ArgOp::OpenConfirm(OpenConfirmArgs4 {
            open_stateid: StateId4 {
                seqid: 1,
                other: [5; 12],
            },
            seqid: 2,
        }),
        ArgOp::ReleaseLockowner(ReleaseLockownerArgs4 { lock_owner: owner }),
    ]
}

pub fn typical_ops() -> Vec<ArgOp> {
    vec![
        ArgOp::Sequence(SequenceArgs4 {
            sessionid: SessionId4([9; 16]),
            sequenceid: 1,
            slotid: 0,
            highest_slotid: 3,
            cachethis: true,
        }),
        ArgOp::Putrootfh,
        ArgOp::Putpubfh,
        ArgOp::Putfh(PutfhArgs4 { object: fh(28) }),
        ArgOp::Getfh,
        ArgOp::Savefh,
        ArgOp::Restorefh,
        ArgOp::Lookup(LookupArgs4 {
            objname: component(5),
        }),
        ArgOp::Lookupp,
        ArgOp::Access(AccessArgs4 { access: 0x3f }),
        ArgOp::Getattr(GetattrArgs4 {
            attr_request: Bitmap4(vec![0x0010_011a, 0x00b0_a23a]),
        }),
        ArgOp::Setattr(SetattrArgs4 {
            stateid: stateid(),
            obj_attributes: SetAttrs4 {
                size: Some(5),
                mode: Some(0o600),
                ..SetAttrs4::default()
            }
            .to_fattr(),
        }),
        ArgOp::Verify(VerifyArgs4 {
            obj_attributes: fattr(8),
        }),
        ArgOp::Nverify(VerifyArgs4 {
            obj_attributes: fattr(12),
        }),
        ArgOp::Create(Box::new(CreateArgs4 {
            objtype: CreateType4::Link(Linktext4::from("../target")),
            objname: component(3),
            createattrs: Fattr4::default(),
        })),
        ArgOp::Create(Box::new(CreateArgs4 {
            objtype: CreateType4::Char(SpecData4 {
                specdata1: 1,
                specdata2: 3,
            }),
            objname: component(4),
            createattrs: fattr(4),
        })),
        ArgOp::Create(Box::new(CreateArgs4 {
            objtype: CreateType4::Dir,
            objname: component(4),
            createattrs: fattr(4),
        })),
        ArgOp::Create(Box::new(CreateArgs4 {
            objtype: CreateType4::Other(NfsFtype4::Reg),
            objname: component(4),
            createattrs: fattr(0),
        })),
        ArgOp::Remove(RemoveArgs4 {
            target: component(6),
        }),
        ArgOp::Rename(RenameArgs4 {
            oldname: component(1),
            newname: component(2),
        }),
        ArgOp::Link(LinkArgs4 {
            newname: component(7),
        }),
        ArgOp::Readdir(ReaddirArgs4 {
            cookie: 3,
            cookieverf: Verifier4([1; 8]),
            dircount: 4096,
            maxcount: 32768,
            attr_request: Bitmap4::from_bits(&[1, 4, 20]),
        }),
        ArgOp::Readlink,
        ArgOp::Secinfo(SecinfoArgs4 { name: component(3) }),
        ArgOp::SecinfoNoName(SecinfoStyle4::Parent),
        ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4([2; 8]),
                ownerid: Opaque4::from("Linux NFSv4.1 client"),
            },
            flags: EXCHGID4_FLAG_USE_NON_PNFS,
            state_protect: StateProtect4A::None,
            client_impl_id: Some(impl_id(6)),
        })),
        ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4([3; 8]),
                ownerid: Opaque4::from("x"),
            },
            flags: 0,
            state_protect: StateProtect4A::MachCred(ops4()),
            client_impl_id: None,
        })),
        ArgOp::CreateSession(Box::new(CreateSessionArgs4 {
            clientid: 0x0102_0304_0506_0708,
            sequence: 1,
            flags: CREATE_SESSION4_FLAG_CONN_BACK_CHAN,
            fore_chan_attrs: channel(None),
            back_chan_attrs: channel(Some(2)),
            cb_program: 0x4000_0000,
            sec_parms: vec![
                CallbackSecParms4::AuthNone,
                CallbackSecParms4::AuthSys(authsys(false)),
                CallbackSecParms4::RpcsecGss(gss_handles(3)),
            ],
        })),
        ArgOp::DestroySession(DestroySessionArgs4 {
            sessionid: SessionId4([4; 16]),
        }),
        ArgOp::DestroyClientid(DestroyClientidArgs4 { clientid: 77 }),
        ArgOp::BindConnToSession(BindConnToSessionArgs4 {
            sessid: SessionId4([5; 16]),
            dir: ChannelDirFromClient4::BackOrBoth,
            use_conn_in_rdma_mode: false,
        }),
        ArgOp::BackchannelCtl(BackchannelCtlArgs4 {
            cb_program: 9,
            sec_parms: vec![CallbackSecParms4::AuthSys(authsys(true))],
        }),
        ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: false }),
        ArgOp::TestStateid(TestStateidArgs4 {
            stateids: vec![stateid(), StateId4::default()],
        }),
        ArgOp::FreeStateid(FreeStateidArgs4 { stateid: stateid() }),
        ArgOp::Write(WriteHead4 {
            stateid: stateid(),
            offset: 8192,
            stable: StableHow4::Unstable,
            data_len: 4096,
        }),
    ]
    .into_iter()
    .chain(typical_state_ops())
    .chain(typical_data_ops())
    .collect()
}

pub fn open_owner() -> StateOwner4 {
    StateOwner4 {
        clientid: 0x0102_0304_0506_0708,
        owner: Opaque4::from("open id:\x00\x01"),
    }
}

/// An OPEN of `claim`, creating as `how` says if it is given.
pub fn open(how: Option<CreateHow4>, claim: OpenClaim4) -> ArgOp {
    ArgOp::Open(Box::new(OpenArgs4 {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH | OPEN4_SHARE_ACCESS_WANT_NO_DELEG,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: open_owner(),
        openhow: match how {
            None => OpenFlag4::NoCreate,
            Some(how) => OpenFlag4::Create(how),
        },
        claim,
    }))
}

/// OPEN with every `createhow4` and every `open_claim4`, the other state
/// operations, and LOCK with both `locker4` arms.
pub fn typical_state_ops() -> Vec<ArgOp> {
    let name = || OpenClaim4::Null(component(4));
    let attrs = SetAttrs4 {
        mode: Some(0o644),
        ..SetAttrs4::default()
    }
    .to_fattr();
    vec![
        open(None, name()),
        open(Some(CreateHow4::Unchecked(attrs.clone())), name()),
        open(Some(CreateHow4::Guarded(Fattr4::default())), name()),
        open(Some(CreateHow4::Exclusive(Verifier4([5; 8]))), name()),
        open(
            Some(CreateHow4::Exclusive41(CreatVerfAttr {
                verf: Verifier4([6; 8]),
                attrs,
            })),
            name(),
        ),
        open(None, OpenClaim4::Fh),
        open(None, OpenClaim4::Previous(OpenDelegationType4::None)),
        open(
            None,
            OpenClaim4::DelegateCur(OpenClaimDelegateCur4 {
                delegate_stateid: stateid(),
                file: component(5),
            }),
        ),
        open(None, OpenClaim4::DelegatePrev(component(6))),
        open(None, OpenClaim4::DelegCurFh(stateid())),
        open(None, OpenClaim4::DelegPrevFh),
        ArgOp::Close(CloseArgs4 {
            seqid: 0,
            open_stateid: stateid(),
        }),
        ArgOp::OpenDowngrade(OpenDowngradeArgs4 {
            open_stateid: stateid(),
            seqid: 0,
            share_access: OPEN4_SHARE_ACCESS_READ,
            share_deny: OPEN4_SHARE_DENY_NONE,
        }),
        ArgOp::Lock(Box::new(LockArgs4 {
            locktype: NfsLockType4::WriteW,
            reclaim: false,
            offset: 0,
            length: u64::MAX,
            locker: Locker4::OpenOwner(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: stateid(),
                lock_seqid: 0,
                lock_owner: StateOwner4 {
                    clientid: 9,
                    owner: Opaque4::from("lock id"),
                },
            }),
        })),
        ArgOp::Lock(Box::new(LockArgs4 {
            locktype: NfsLockType4::Read,
            reclaim: true,
            offset: 100,
            length: 1,
            locker: Locker4::LockOwner(ExistLockOwner4 {
                lock_stateid: stateid(),
                lock_seqid: 0,
            }),
        })),
        ArgOp::Lockt(LocktArgs4 {
            locktype: NfsLockType4::Write,
            offset: 5,
            length: 10,
            owner: open_owner(),
        }),
        ArgOp::Locku(LockuArgs4 {
            locktype: NfsLockType4::Write,
            seqid: 0,
            lock_stateid: stateid(),
            offset: 0,
            length: u64::MAX,
        }),
        ArgOp::Delegreturn(DelegreturnArgs4 {
            deleg_stateid: stateid(),
        }),
    ]
}

/// READ, COMMIT, and NFSv4.2's data and xattr operations.
pub fn typical_data_ops() -> Vec<ArgOp> {
    let range = AllocateArgs4 {
        stateid: stateid(),
        offset: 4096,
        length: 1 << 20,
    };
    let read = ReadArgs4 {
        stateid: stateid(),
        offset: 1 << 33,
        count: 1 << 20,
    };
    vec![
        ArgOp::Read(read),
        ArgOp::Commit(CommitArgs4 {
            offset: 0,
            count: 0,
        }),
        ArgOp::Allocate(range.clone()),
        ArgOp::Deallocate(range),
        ArgOp::Seek(SeekArgs4 {
            stateid: stateid(),
            offset: 0,
            what: DataContent4::Hole,
        }),
        ArgOp::ReadPlus(read),
        ArgOp::Copy(Box::new(CopyArgs4 {
            src_stateid: stateid(),
            dst_stateid: StateId4::default(),
            src_offset: 0,
            dst_offset: 4096,
            count: 0,
            consecutive: true,
            synchronous: false,
            source_server: Vec::new(),
        })),
        ArgOp::Copy(Box::new(CopyArgs4 {
            src_stateid: stateid(),
            dst_stateid: stateid(),
            src_offset: 1,
            dst_offset: 2,
            count: 3,
            consecutive: false,
            synchronous: true,
            source_server: vec![
                Netloc4::Name(Utf8Str::from("src.example.org")),
                Netloc4::Url(Utf8Str::from("nfs://src/x")),
                Netloc4::Netaddr(Netaddr4 {
                    netid: Utf8Str::from("tcp"),
                    addr: Utf8Str::from("192.0.2.1.8.1"),
                }),
            ],
        })),
        ArgOp::Clone(CloneArgs4 {
            src_stateid: stateid(),
            dst_stateid: stateid(),
            src_offset: 0,
            dst_offset: 65536,
            count: 65536,
        }),
        ArgOp::Getxattr(GetxattrArgs4 { name: component(8) }),
        ArgOp::Setxattr(SetxattrArgs4 {
            option: SetxattrOption4::Create,
            key: component(3),
            value: XattrValue4::from("a value"),
        }),
        ArgOp::Listxattrs(ListxattrsArgs4 {
            cookie: 0,
            maxcount: 4096,
        }),
        ArgOp::Removexattr(RemovexattrArgs4 { name: component(3) }),
    ]
}
