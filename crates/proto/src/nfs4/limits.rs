//! The longest encoding of each NFSv4 operation, so a server can refuse
//! a longer one before reading it into memory (design section 1).
//!
//! Unlike NFSv3's limits, these count the opnum: they bound what
//! [`decode_op`](crate::nfs4::decode_op) consumes. Each is the XDR size
//! with every variable-length item at the maximum its decoder accepts
//! and the longest arm of every union. An operation dionfs does not
//! decode ([`ArgOp::NotSupp`](crate::nfs4::ArgOp::NotSupp),
//! [`ArgOp::Illegal`](crate::nfs4::ArgOp::Illegal)) consumes its opnum
//! only, so its limit is one word. WRITE's limit is of its head
//! ([`ArgsLimit::HeadThenPayload`]): its payload is received into a
//! buffer of its own, bounded by the server's transfer size.

use crate::codec::opaque_var_len;
use crate::nfs4::attrs::FATTR4_MAX_LEN;
use crate::nfs4::ops::{
    NFS4_MAX_COPY_SOURCES, NFS4_MAX_NETID_LEN, NFS4_MAX_NETLOC_LEN, NFS4_MAX_UADDR_LEN,
    WRITE_HEAD_LEN, XATTR_SIZE_MAX,
};
use crate::nfs4::types::{
    Bitmap4, Opnum4, AUTH_SYS_MAX_GIDS, AUTH_SYS_MAX_MACHINE_NAME, NFS4_FHSIZE,
    NFS4_MAX_ARRAY_ITEMS, NFS4_MAX_CB_SEC_PARMS, NFS4_MAX_COMPONENT_LEN, NFS4_MAX_LINKTEXT_LEN,
    NFS4_MAX_SSV_ITEMS, NFS4_OPAQUE_LIMIT, NFS4_SESSIONID_SIZE,
};
use crate::ArgsLimit;

/// An XDR unsigned int, enum or bool: also the opnum.
const WORD: usize = 4;
/// An XDR unsigned hyper.
const HYPER: usize = 8;
/// `verifier4`.
const VERIFIER: usize = 8;
/// `stateid4`.
const STATEID: usize = WORD + 12;
/// `sessionid4`.
const SESSIONID: usize = NFS4_SESSIONID_SIZE;
/// `nfstime4`.
const TIME: usize = HYPER + WORD;
/// `nfs_fh4` at its largest.
const FH: usize = opaque_var_len(NFS4_FHSIZE);
/// `bitmap4` at its largest.
const BITMAP: usize = WORD + Bitmap4::MAX_WORDS as usize * WORD;
/// `fattr4` at its largest.
const FATTR: usize = BITMAP + opaque_var_len(FATTR4_MAX_LEN as usize);
/// `component4` at its largest.
const COMPONENT: usize = opaque_var_len(NFS4_MAX_COMPONENT_LEN as usize);
/// `linktext4` at its largest.
const LINKTEXT: usize = opaque_var_len(NFS4_MAX_LINKTEXT_LEN as usize);
/// An `opaque<NFS4_OPAQUE_LIMIT>` or a string of that limit.
const OPAQUE: usize = opaque_var_len(NFS4_OPAQUE_LIMIT as usize);
/// `nfs_impl_id4`: domain, name and date.
const IMPL_ID: usize = 2 * OPAQUE + TIME;
/// `state_protect_ops4`.
const PROTECT_OPS: usize = 2 * BITMAP;
/// A counted array of SP4_SSV algorithms or handles at its longest.
const SSV_ARRAY: usize = WORD + NFS4_MAX_SSV_ITEMS as usize * OPAQUE;
/// `state_protect4_a` with SP4_SSV, its longest arm.
const STATE_PROTECT_A: usize = WORD + max(PROTECT_OPS, PROTECT_OPS + 2 * SSV_ARRAY + 2 * WORD);
/// `channel_attrs4` with its `rdma_ird`.
const CHANNEL: usize = 6 * WORD + WORD + WORD;
/// `authsys_parms` at its largest.
const AUTH_SYS: usize = WORD
    + opaque_var_len(AUTH_SYS_MAX_MACHINE_NAME as usize)
    + 2 * WORD
    + WORD
    + AUTH_SYS_MAX_GIDS as usize * WORD;
/// `gss_cb_handles4` at its largest.
const GSS_HANDLES: usize = WORD + 2 * OPAQUE;
/// `callback_sec_parms4<>` at its longest.
const CB_SEC_PARMS: usize =
    WORD + NFS4_MAX_CB_SEC_PARMS as usize * (WORD + max(AUTH_SYS, GSS_HANDLES));
/// `createtype4`: a symlink's target is longer than device numbers.
const CREATETYPE: usize = WORD + max(LINKTEXT, 2 * WORD);
/// `state_owner4` (`open_owner4`, `lock_owner4`) at its largest.
const OWNER: usize = HYPER + OPAQUE;
/// `openflag4` with `createhow4` EXCLUSIVE4_1, its longest arm.
const OPENHOW: usize = WORD + WORD + max(FATTR, VERIFIER + FATTR);
/// `open_claim4` with CLAIM_DELEGATE_CUR, its longest arm.
const CLAIM: usize = WORD + max(COMPONENT, STATEID + COMPONENT);
/// `locker4` with `open_to_lock_owner4`, its longer arm.
const LOCKER: usize = WORD + max(WORD + STATEID + WORD + OWNER, STATEID + WORD);
/// `netloc4` at its largest: a name or URL, or a `netaddr4`.
const NETLOC: usize = WORD + max(opaque_var_len(NFS4_MAX_NETLOC_LEN as usize), NETADDR);
/// A `netaddr4`: netid and universal address.
const NETADDR: usize =
    opaque_var_len(NFS4_MAX_NETID_LEN as usize) + opaque_var_len(NFS4_MAX_UADDR_LEN as usize);
/// The stateid, offset and length of ALLOCATE and DEALLOCATE.
const RANGE: usize = STATEID + 2 * HYPER;
/// The two stateids, two offsets and count of COPY and CLONE.
const TWO_FILES: usize = 2 * STATEID + 3 * HYPER;

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

impl Opnum4 {
    /// The longest XDR encoding of this operation, opnum included, that
    /// [`decode_op`](crate::nfs4::decode_op) consumes (see the module
    /// documentation).
    pub const fn max_args_len(self) -> ArgsLimit {
        if let Opnum4::Write = self {
            return ArgsLimit::HeadThenPayload(WORD + WRITE_HEAD_LEN);
        }
        ArgsLimit::Whole(
            WORD + match self {
                Opnum4::Getfh
                | Opnum4::Lookupp
                | Opnum4::Putpubfh
                | Opnum4::Putrootfh
                | Opnum4::Readlink
                | Opnum4::Restorefh
                | Opnum4::Savefh => 0,
                Opnum4::Access | Opnum4::ReclaimComplete | Opnum4::SecinfoNoName => WORD,
                Opnum4::Putfh => FH,
                Opnum4::Lookup | Opnum4::Remove | Opnum4::Link | Opnum4::Secinfo => COMPONENT,
                Opnum4::Rename => 2 * COMPONENT,
                Opnum4::Getattr => BITMAP,
                Opnum4::Setattr => STATEID + FATTR,
                Opnum4::Verify | Opnum4::Nverify => FATTR,
                Opnum4::Create => CREATETYPE + COMPONENT + FATTR,
                Opnum4::Readdir => HYPER + VERIFIER + 2 * WORD + BITMAP,
                Opnum4::ExchangeId => VERIFIER + OPAQUE + WORD + STATE_PROTECT_A + WORD + IMPL_ID,
                Opnum4::CreateSession => HYPER + 2 * WORD + 2 * CHANNEL + WORD + CB_SEC_PARMS,
                Opnum4::DestroySession => SESSIONID,
                Opnum4::DestroyClientid => HYPER,
                Opnum4::Sequence => SESSIONID + 4 * WORD,
                Opnum4::BindConnToSession => SESSIONID + 2 * WORD,
                Opnum4::BackchannelCtl => WORD + CB_SEC_PARMS,
                Opnum4::TestStateid => WORD + NFS4_MAX_ARRAY_ITEMS as usize * STATEID,
                Opnum4::FreeStateid => STATEID,
                Opnum4::Read | Opnum4::ReadPlus => STATEID + HYPER + WORD,
                Opnum4::Commit => HYPER + WORD,
                Opnum4::Open => 3 * WORD + OWNER + OPENHOW + CLAIM,
                Opnum4::Close => WORD + STATEID,
                Opnum4::OpenDowngrade => STATEID + 3 * WORD,
                Opnum4::Lock => WORD + WORD + 2 * HYPER + LOCKER,
                Opnum4::Lockt => WORD + 2 * HYPER + OWNER,
                Opnum4::Locku => 2 * WORD + STATEID + 2 * HYPER,
                Opnum4::Delegreturn => STATEID,
                Opnum4::Allocate | Opnum4::Deallocate => RANGE,
                Opnum4::Seek => STATEID + HYPER + WORD,
                Opnum4::Copy => {
                    TWO_FILES + 2 * WORD + WORD + NFS4_MAX_COPY_SOURCES as usize * NETLOC
                }
                Opnum4::Clone => TWO_FILES,
                Opnum4::Getxattr | Opnum4::Removexattr => COMPONENT,
                Opnum4::Setxattr => WORD + COMPONENT + opaque_var_len(XATTR_SIZE_MAX as usize),
                Opnum4::Listxattrs => HYPER + WORD,
                // Minor version 0's own.
                Opnum4::Setclientid => VERIFIER + OPAQUE + WORD + NETADDR + WORD,
                Opnum4::SetclientidConfirm => HYPER + VERIFIER,
                Opnum4::Renew => HYPER,
                Opnum4::OpenConfirm => STATEID + WORD,
                Opnum4::ReleaseLockowner => OWNER,
                // Not decoded (ArgOp::NotSupp): the opnum only.
                _ => 0,
            },
        )
    }

    /// The longest [`max_args_len`](Self::max_args_len) of any operation:
    /// what a server needs to hold of one operation at a time.
    pub fn longest_args_len() -> usize {
        Opnum4::ALL
            .iter()
            .filter_map(|op| op.max_args_len().whole())
            .max()
            .unwrap_or(WORD)
    }
}

#[cfg(test)]
mod tests {
    use dionfs_xdr::Encode;

    use crate::nfs4::samples::*;
    use crate::nfs4::*;
    use crate::ArgsLimit;

    fn sec_parms() -> Vec<CallbackSecParms4> {
        vec![largest_sec_parms(); NFS4_MAX_CB_SEC_PARMS as usize]
    }

    fn largest_fattr() -> Fattr4 {
        fattr(FATTR4_MAX_LEN)
    }

    /// Every decoded operation with every variable item at its largest.
    fn largest_ops() -> Vec<ArgOp> {
        let name = || component(NFS4_MAX_COMPONENT_LEN);
        let opaque = || Opaque4(filled(NFS4_OPAQUE_LIMIT, b'o'));
        let ssv_items = || gss(NFS4_MAX_SSV_ITEMS as usize, NFS4_OPAQUE_LIMIT);
        vec![
            ArgOp::Access(AccessArgs4 { access: 1 }),
            ArgOp::Create(Box::new(CreateArgs4 {
                objtype: CreateType4::Link(Linktext4(filled(NFS4_MAX_LINKTEXT_LEN, b'l'))),
                objname: name(),
                createattrs: largest_fattr(),
            })),
            ArgOp::Getattr(GetattrArgs4 {
                attr_request: bitmap(),
            }),
            ArgOp::Getfh,
            ArgOp::Link(LinkArgs4 { newname: name() }),
            ArgOp::Lookup(LookupArgs4 { objname: name() }),
            ArgOp::Lookupp,
            ArgOp::Nverify(VerifyArgs4 {
                obj_attributes: largest_fattr(),
            }),
            ArgOp::Putfh(PutfhArgs4 {
                object: fh(NFS4_FHSIZE),
            }),
            ArgOp::Putpubfh,
            ArgOp::Putrootfh,
            ArgOp::Readdir(ReaddirArgs4 {
                cookie: 1,
                cookieverf: Verifier4([1; 8]),
                dircount: 2,
                maxcount: 3,
                attr_request: bitmap(),
            }),
            ArgOp::Readlink,
            ArgOp::Remove(RemoveArgs4 { target: name() }),
            ArgOp::Rename(RenameArgs4 {
                oldname: name(),
                newname: name(),
            }),
            ArgOp::Restorefh,
            ArgOp::Savefh,
            ArgOp::Secinfo(SecinfoArgs4 { name: name() }),
            ArgOp::Setattr(SetattrArgs4 {
                stateid: stateid(),
                obj_attributes: largest_fattr(),
            }),
            ArgOp::Verify(VerifyArgs4 {
                obj_attributes: largest_fattr(),
            }),
            ArgOp::BackchannelCtl(BackchannelCtlArgs4 {
                cb_program: 1,
                sec_parms: sec_parms(),
            }),
            ArgOp::BindConnToSession(BindConnToSessionArgs4 {
                sessid: SessionId4([1; 16]),
                dir: ChannelDirFromClient4::Fore,
                use_conn_in_rdma_mode: true,
            }),
            ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
                clientowner: ClientOwner4 {
                    verifier: Verifier4([2; 8]),
                    ownerid: opaque(),
                },
                flags: 1,
                state_protect: StateProtect4A::Ssv(SsvSpParms4 {
                    ops: ops4_largest(),
                    hash_algs: ssv_items(),
                    encr_algs: ssv_items(),
                    window: 1,
                    num_gss_handles: 2,
                }),
                client_impl_id: Some(impl_id(NFS4_OPAQUE_LIMIT)),
            })),
            ArgOp::CreateSession(Box::new(CreateSessionArgs4 {
                clientid: 1,
                sequence: 2,
                flags: 3,
                fore_chan_attrs: channel(Some(1)),
                back_chan_attrs: channel(Some(1)),
                cb_program: 4,
                sec_parms: sec_parms(),
            })),
            ArgOp::DestroySession(DestroySessionArgs4 {
                sessionid: SessionId4([3; 16]),
            }),
            ArgOp::FreeStateid(FreeStateidArgs4 { stateid: stateid() }),
            ArgOp::SecinfoNoName(SecinfoStyle4::CurrentFh),
            ArgOp::Sequence(SequenceArgs4 {
                sessionid: SessionId4([4; 16]),
                sequenceid: 1,
                slotid: 2,
                highest_slotid: 3,
                cachethis: false,
            }),
            ArgOp::TestStateid(TestStateidArgs4 {
                stateids: vec![stateid(); NFS4_MAX_ARRAY_ITEMS as usize],
            }),
            ArgOp::DestroyClientid(DestroyClientidArgs4 { clientid: 5 }),
            ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: true }),
            ArgOp::Read(read()),
            ArgOp::ReadPlus(read()),
            ArgOp::Commit(CommitArgs4 {
                offset: 1,
                count: 2,
            }),
            ArgOp::Open(Box::new(OpenArgs4 {
                seqid: 1,
                share_access: 2,
                share_deny: 3,
                owner: largest_owner(),
                openhow: OpenFlag4::Create(CreateHow4::Exclusive41(CreatVerfAttr {
                    verf: Verifier4([1; 8]),
                    attrs: largest_fattr(),
                })),
                claim: OpenClaim4::DelegateCur(OpenClaimDelegateCur4 {
                    delegate_stateid: stateid(),
                    file: name(),
                }),
            })),
            ArgOp::Close(CloseArgs4 {
                seqid: 1,
                open_stateid: stateid(),
            }),
            ArgOp::OpenDowngrade(OpenDowngradeArgs4 {
                open_stateid: stateid(),
                seqid: 1,
                share_access: 2,
                share_deny: 3,
            }),
            ArgOp::Lock(Box::new(LockArgs4 {
                locktype: NfsLockType4::Write,
                reclaim: false,
                offset: 1,
                length: 2,
                locker: Locker4::OpenOwner(OpenToLockOwner4 {
                    open_seqid: 1,
                    open_stateid: stateid(),
                    lock_seqid: 2,
                    lock_owner: largest_owner(),
                }),
            })),
            ArgOp::Lockt(LocktArgs4 {
                locktype: NfsLockType4::Read,
                offset: 1,
                length: 2,
                owner: largest_owner(),
            }),
            ArgOp::Locku(LockuArgs4 {
                locktype: NfsLockType4::Read,
                seqid: 1,
                lock_stateid: stateid(),
                offset: 2,
                length: 3,
            }),
            ArgOp::Delegreturn(DelegreturnArgs4 {
                deleg_stateid: stateid(),
            }),
            ArgOp::Allocate(range()),
            ArgOp::Deallocate(range()),
            ArgOp::Seek(SeekArgs4 {
                stateid: stateid(),
                offset: 1,
                what: DataContent4::Data,
            }),
            ArgOp::Copy(Box::new(CopyArgs4 {
                src_stateid: stateid(),
                dst_stateid: stateid(),
                src_offset: 1,
                dst_offset: 2,
                count: 3,
                consecutive: true,
                synchronous: true,
                source_server: vec![
                    Netloc4::Url(Utf8Str(filled(NFS4_MAX_NETLOC_LEN, b'u')));
                    NFS4_MAX_COPY_SOURCES as usize
                ],
            })),
            ArgOp::Clone(CloneArgs4 {
                src_stateid: stateid(),
                dst_stateid: stateid(),
                src_offset: 1,
                dst_offset: 2,
                count: 3,
            }),
            ArgOp::Getxattr(GetxattrArgs4 { name: name() }),
            ArgOp::Setxattr(SetxattrArgs4 {
                option: SetxattrOption4::Either,
                key: name(),
                value: XattrValue4(filled(XATTR_SIZE_MAX, b'v')),
            }),
            ArgOp::Listxattrs(ListxattrsArgs4 {
                cookie: 1,
                maxcount: 2,
            }),
            ArgOp::Removexattr(RemovexattrArgs4 { name: name() }),
        ]
    }

    /// Minor version 0's own ops, every variable item at its largest.
    fn largest_v40_ops() -> Vec<ArgOp> {
        let opaque = || Opaque4(filled(NFS4_OPAQUE_LIMIT, b'o'));
        vec![
            ArgOp::Setclientid(Box::new(SetclientidArgs4 {
                client: NfsClientId4 {
                    verifier: Verifier4([1; 8]),
                    id: opaque(),
                },
                callback: CbClient4 {
                    cb_program: 1,
                    cb_location: Netaddr4 {
                        netid: Utf8Str(filled(NFS4_MAX_NETID_LEN, b'n')),
                        addr: Utf8Str(filled(NFS4_MAX_UADDR_LEN, b'a')),
                    },
                },
                callback_ident: 2,
            })),
            ArgOp::SetclientidConfirm(SetclientidConfirmArgs4 {
                clientid: 1,
                setclientid_confirm: Verifier4([2; 8]),
            }),
            ArgOp::Renew(RenewArgs4 { clientid: 1 }),
            ArgOp::OpenConfirm(OpenConfirmArgs4 {
                open_stateid: stateid(),
                seqid: 3,
            }),
            ArgOp::ReleaseLockowner(ReleaseLockownerArgs4 {
                lock_owner: largest_owner(),
            }),
        ]
    }

    fn largest_owner() -> StateOwner4 {
        StateOwner4 {
            clientid: 1,
            owner: Opaque4(filled(NFS4_OPAQUE_LIMIT, b'o')),
        }
    }

    fn read() -> ReadArgs4 {
        ReadArgs4 {
            stateid: stateid(),
            offset: 1,
            count: 2,
        }
    }

    fn range() -> AllocateArgs4 {
        AllocateArgs4 {
            stateid: stateid(),
            offset: 1,
            length: 2,
        }
    }

    fn ops4_largest() -> StateProtectOps4 {
        StateProtectOps4 {
            must_enforce: bitmap(),
            must_allow: bitmap(),
        }
    }

    #[test]
    fn each_limit_is_the_largest_encoding_of_its_operation() {
        let ops = largest_ops();
        let write = ArgOp::Write(WriteHead4 {
            stateid: stateid(),
            offset: 1,
            stable: StableHow4::DataSync,
            data_len: u32::MAX,
        });
        let bytes = write.to_xdr();
        assert_eq!(
            Opnum4::Write.max_args_len(),
            ArgsLimit::HeadThenPayload(bytes.len())
        );
        assert_eq!(decode_op(&bytes, 1), Ok((write.clone(), bytes.len())));
        let v40 = largest_v40_ops();
        // Minor version 0's own ops decode in it alone.
        for (op, minor) in ops
            .iter()
            .map(|op| (op, 2))
            .chain(v40.iter().map(|op| (op, 0)))
        {
            let bytes = op.to_xdr();
            let opnum = Opnum4::from_u32(op.opnum()).unwrap();
            assert_eq!(
                opnum.max_args_len(),
                ArgsLimit::Whole(bytes.len()),
                "{opnum:?}"
            );
            assert_eq!(decode_op(&bytes, minor), Ok((op.clone(), bytes.len())));
        }
        // Every op decoded is covered above; the rest cost their opnum.
        let covered = |opnum: Opnum4| {
            ops.iter()
                .chain(&v40)
                .any(|op| op.opnum() == opnum.as_u32())
        };
        for &opnum in Opnum4::ALL {
            if opnum != Opnum4::Write && !covered(opnum) {
                assert_eq!(opnum.max_args_len(), ArgsLimit::Whole(4), "{opnum:?}");
                let decoded = decode_op(&opnum.as_u32().to_xdr(), 2).map(|(op, _)| op);
                assert!(
                    matches!(decoded, Ok(ArgOp::NotSupp(_) | ArgOp::Illegal(_))),
                    "{opnum:?}"
                );
            }
        }
    }

    #[test]
    fn the_limits_are_a_few_tens_of_kib() {
        let whole = |op: Opnum4| op.max_args_len().whole().unwrap();
        assert_eq!(whole(Opnum4::Putrootfh), 4);
        assert_eq!(whole(Opnum4::Sequence), 4 + 32);
        assert_eq!(whole(Opnum4::Putfh), 4 + 132);
        assert_eq!(whole(Opnum4::Lookup), 4 + 4100);
        assert_eq!(whole(Opnum4::Read), 4 + 28);
        assert_eq!(whole(Opnum4::Close), 4 + 20);
        // SETXATTR's value (64 KiB) makes it the longest; every other op
        // fits in 32 KiB.
        assert_eq!(Opnum4::longest_args_len(), whole(Opnum4::Setxattr));
        assert_eq!(whole(Opnum4::Setxattr), 4 + 4 + 4100 + 4 + 64 * 1024);
        for &op in Opnum4::ALL {
            if let (Some(n), false) = (op.max_args_len().whole(), op == Opnum4::Setxattr) {
                assert!(n < 32 * 1024, "{op:?}: {n}");
            }
        }
    }
}
