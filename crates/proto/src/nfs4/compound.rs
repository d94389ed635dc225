//! COMPOUND (RFC 8881 sections 16.2 and 15.2): its head, and its
//! operations decoded one at a time from the front of the bytes not yet
//! read, so the server reads a record no further than the operation it
//! is decoding.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::xdr_struct;
use crate::nfs4::ops::{
    AccessArgs4, AccessResOk4, AllocateArgs4, BackchannelCtlArgs4, BindConnToSessionArgs4,
    BindConnToSessionResOk4, CloneArgs4, CloseArgs4, CommitArgs4, CommitResOk4, CopyArgs4,
    CopyRes4, CreateArgs4, CreateResOk4, CreateSessionArgs4, CreateSessionResOk4, DelegreturnArgs4,
    DestroyClientidArgs4, DestroySessionArgs4, ExchangeIdArgs4, ExchangeIdResOk4, FreeStateidArgs4,
    GetattrArgs4, GetattrResOk4, GetfhResOk4, GetxattrArgs4, LinkArgs4, ListxattrsArgs4,
    ListxattrsResOk4, LockArgs4, LockRes4, LocktArgs4, LockuArgs4, LookupArgs4, OpenArgs4,
    OpenConfirmArgs4, OpenDowngradeArgs4, OpenResOk4, PutfhArgs4, ReadArgs4, ReadPlusResOk4,
    ReadResOk4, ReaddirArgs4, ReaddirResOk4, ReclaimCompleteArgs4, ReleaseLockownerArgs4,
    RemoveArgs4, RemovexattrArgs4, RenameArgs4, RenameResOk4, RenewArgs4, SecinfoArgs4,
    SecinfoResOk4, SecinfoStyle4, SeekArgs4, SeekResOk4, SequenceArgs4, SequenceResOk4,
    SetattrArgs4, SetattrRes4, SetclientidArgs4, SetclientidConfirmArgs4, SetclientidRes4,
    SetxattrArgs4, TestStateidArgs4, TestStateidResOk4, VerifyArgs4, WriteHead4, WriteResOk4,
    XattrValue4,
};
use crate::nfs4::types::{
    ChangeInfo4, Linktext4, Nfsstat4, Opnum4, Res4, StateId4, Utf8Str, NFS4_MAX_TAG_LEN,
};
use crate::Void;

xdr_struct! {
    /// The head of `COMPOUND4args`: the tag, the minor version, and the
    /// count of `argarray`, whose operations follow ([`decode_op`]).
    pub struct CompoundHead {
        pub tag: Utf8Str<NFS4_MAX_TAG_LEN>,
        pub minorversion: u32,
        pub numops: u32,
    }
}

xdr_struct! {
    /// The head of `COMPOUND4res`: the status of the last operation run,
    /// the tag sent back, and the count of results that follow, each
    /// after [`encode_result_head`]. The server patches `status` and
    /// `numres` once the operations have run.
    pub struct CompoundResHead {
        pub status: Nfsstat4,
        pub tag: Utf8Str<NFS4_MAX_TAG_LEN>,
        pub numres: u32,
    }
}

/// One operation of a COMPOUND and its arguments (`nfs_argop4`). The
/// arguments of the ops larger than SETATTR's, and rare in a COMPOUND
/// that moves data, are boxed: every op is moved a few times between
/// its decoding and its run, and a COMPOUND's ops are one allocation
/// (208 bytes an op unboxed, 64 boxed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgOp {
    Access(AccessArgs4),
    Create(Box<CreateArgs4>),
    Getattr(GetattrArgs4),
    Getfh,
    Link(LinkArgs4),
    Lookup(LookupArgs4),
    Lookupp,
    Nverify(VerifyArgs4),
    Putfh(PutfhArgs4),
    Putpubfh,
    Putrootfh,
    Readdir(ReaddirArgs4),
    Readlink,
    Remove(RemoveArgs4),
    Rename(RenameArgs4),
    Restorefh,
    Savefh,
    Secinfo(SecinfoArgs4),
    Setattr(SetattrArgs4),
    Verify(VerifyArgs4),
    BackchannelCtl(BackchannelCtlArgs4),
    BindConnToSession(BindConnToSessionArgs4),
    ExchangeId(Box<ExchangeIdArgs4>),
    CreateSession(Box<CreateSessionArgs4>),
    DestroySession(DestroySessionArgs4),
    FreeStateid(FreeStateidArgs4),
    SecinfoNoName(SecinfoStyle4),
    Sequence(SequenceArgs4),
    TestStateid(TestStateidArgs4),
    DestroyClientid(DestroyClientidArgs4),
    ReclaimComplete(ReclaimCompleteArgs4),
    /// WRITE up to its data's length word: the payload stays in the
    /// record ([`WriteHead4::payload_len`] bytes after the head).
    Write(WriteHead4),
    Read(ReadArgs4),
    Commit(CommitArgs4),
    Open(Box<OpenArgs4>),
    Close(CloseArgs4),
    OpenDowngrade(OpenDowngradeArgs4),
    Lock(Box<LockArgs4>),
    Lockt(LocktArgs4),
    Locku(LockuArgs4),
    Delegreturn(DelegreturnArgs4),
    Allocate(AllocateArgs4),
    Deallocate(AllocateArgs4),
    Seek(SeekArgs4),
    ReadPlus(ReadArgs4),
    Copy(Box<CopyArgs4>),
    Clone(CloneArgs4),
    Getxattr(GetxattrArgs4),
    Setxattr(SetxattrArgs4),
    Listxattrs(ListxattrsArgs4),
    Removexattr(RemovexattrArgs4),
    /// The 4.0-only ops (decoded in minor version 0 alone).
    OpenConfirm(OpenConfirmArgs4),
    Renew(RenewArgs4),
    Setclientid(Box<SetclientidArgs4>),
    SetclientidConfirm(SetclientidConfirmArgs4),
    ReleaseLockowner(ReleaseLockownerArgs4),
    /// An operation of the minor version that dionfs does not decode:
    /// the 4.0-only ones in 4.1 and 4.2 (OPEN_CONFIRM, RENEW,
    /// SETCLIENTID, SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER), OPENATTR, and those of
    /// delegations (DELEGPURGE, GET_DIR_DELEGATION, WANT_DELEGATION),
    /// pNFS, SSV and asynchronous copies (design section 8). Only the
    /// opnum is consumed: the server answers `NFS4ERR_NOTSUPP`, which
    /// ends the COMPOUND.
    NotSupp(Opnum4),
    /// An opnum outside the minor version (`NFS4ERR_OP_ILLEGAL`, answered
    /// as `OP_ILLEGAL`): only the opnum is consumed.
    Illegal(u32),
}

/// The last operation of each minor version.
const LAST_OP_OF_MINOR: [u32; 3] = [
    Opnum4::ReleaseLockowner.as_u32(),
    Opnum4::ReclaimComplete.as_u32(),
    Opnum4::Removexattr.as_u32(),
];

impl Opnum4 {
    /// Whether minor version `minor` of NFSv4 has this operation
    /// (`OP_ILLEGAL` is in none).
    pub fn in_minor(self, minor: u32) -> bool {
        let last = LAST_OP_OF_MINOR[(minor as usize).min(LAST_OP_OF_MINOR.len() - 1)];
        self.as_u32() <= last
    }

    /// Whether the operation is one minor version 0 has and 1 forbids
    /// (RFC 8881 section 18 "MNI": answered `NFS4ERR_NOTSUPP`).
    pub fn is_v40_only(self) -> bool {
        matches!(
            self,
            Opnum4::OpenConfirm
                | Opnum4::Renew
                | Opnum4::Setclientid
                | Opnum4::SetclientidConfirm
                | Opnum4::ReleaseLockowner
        )
    }
}

impl ArgOp {
    /// The opnum on the wire.
    pub fn opnum(&self) -> u32 {
        let op = match self {
            ArgOp::Access(_) => Opnum4::Access,
            ArgOp::Create(_) => Opnum4::Create,
            ArgOp::Getattr(_) => Opnum4::Getattr,
            ArgOp::Getfh => Opnum4::Getfh,
            ArgOp::Link(_) => Opnum4::Link,
            ArgOp::Lookup(_) => Opnum4::Lookup,
            ArgOp::Lookupp => Opnum4::Lookupp,
            ArgOp::Nverify(_) => Opnum4::Nverify,
            ArgOp::Putfh(_) => Opnum4::Putfh,
            ArgOp::Putpubfh => Opnum4::Putpubfh,
            ArgOp::Putrootfh => Opnum4::Putrootfh,
            ArgOp::Readdir(_) => Opnum4::Readdir,
            ArgOp::Readlink => Opnum4::Readlink,
            ArgOp::Remove(_) => Opnum4::Remove,
            ArgOp::Rename(_) => Opnum4::Rename,
            ArgOp::Restorefh => Opnum4::Restorefh,
            ArgOp::Savefh => Opnum4::Savefh,
            ArgOp::Secinfo(_) => Opnum4::Secinfo,
            ArgOp::Setattr(_) => Opnum4::Setattr,
            ArgOp::Verify(_) => Opnum4::Verify,
            ArgOp::BackchannelCtl(_) => Opnum4::BackchannelCtl,
            ArgOp::BindConnToSession(_) => Opnum4::BindConnToSession,
            ArgOp::ExchangeId(_) => Opnum4::ExchangeId,
            ArgOp::CreateSession(_) => Opnum4::CreateSession,
            ArgOp::DestroySession(_) => Opnum4::DestroySession,
            ArgOp::FreeStateid(_) => Opnum4::FreeStateid,
            ArgOp::SecinfoNoName(_) => Opnum4::SecinfoNoName,
            ArgOp::Sequence(_) => Opnum4::Sequence,
            ArgOp::TestStateid(_) => Opnum4::TestStateid,
            ArgOp::DestroyClientid(_) => Opnum4::DestroyClientid,
            ArgOp::ReclaimComplete(_) => Opnum4::ReclaimComplete,
            ArgOp::Write(_) => Opnum4::Write,
            ArgOp::Read(_) => Opnum4::Read,
            ArgOp::Commit(_) => Opnum4::Commit,
            ArgOp::Open(_) => Opnum4::Open,
            ArgOp::Close(_) => Opnum4::Close,
            ArgOp::OpenDowngrade(_) => Opnum4::OpenDowngrade,
            ArgOp::Lock(_) => Opnum4::Lock,
            ArgOp::Lockt(_) => Opnum4::Lockt,
            ArgOp::Locku(_) => Opnum4::Locku,
            ArgOp::Delegreturn(_) => Opnum4::Delegreturn,
            ArgOp::Allocate(_) => Opnum4::Allocate,
            ArgOp::Deallocate(_) => Opnum4::Deallocate,
            ArgOp::Seek(_) => Opnum4::Seek,
            ArgOp::ReadPlus(_) => Opnum4::ReadPlus,
            ArgOp::Copy(_) => Opnum4::Copy,
            ArgOp::Clone(_) => Opnum4::Clone,
            ArgOp::Getxattr(_) => Opnum4::Getxattr,
            ArgOp::Setxattr(_) => Opnum4::Setxattr,
            ArgOp::Listxattrs(_) => Opnum4::Listxattrs,
            ArgOp::Removexattr(_) => Opnum4::Removexattr,
            ArgOp::OpenConfirm(_) => Opnum4::OpenConfirm,
            ArgOp::Renew(_) => Opnum4::Renew,
            ArgOp::Setclientid(_) => Opnum4::Setclientid,
            ArgOp::SetclientidConfirm(_) => Opnum4::SetclientidConfirm,
            ArgOp::ReleaseLockowner(_) => Opnum4::ReleaseLockowner,
            ArgOp::NotSupp(op) => *op,
            ArgOp::Illegal(opnum) => return *opnum,
        };
        op.as_u32()
    }

    /// The operation's arguments after `opnum`, decoded; `None` if dionfs
    /// does not decode them.
    fn decode_args(op: Opnum4, dec: &mut Decoder<'_>) -> Result<Option<Self>> {
        Ok(Some(match op {
            Opnum4::Access => ArgOp::Access(Decode::decode(dec)?),
            Opnum4::Create => ArgOp::Create(Box::new(Decode::decode(dec)?)),
            Opnum4::Getattr => ArgOp::Getattr(Decode::decode(dec)?),
            Opnum4::Getfh => ArgOp::Getfh,
            Opnum4::Link => ArgOp::Link(Decode::decode(dec)?),
            Opnum4::Lookup => ArgOp::Lookup(Decode::decode(dec)?),
            Opnum4::Lookupp => ArgOp::Lookupp,
            Opnum4::Nverify => ArgOp::Nverify(Decode::decode(dec)?),
            Opnum4::Putfh => ArgOp::Putfh(Decode::decode(dec)?),
            Opnum4::Putpubfh => ArgOp::Putpubfh,
            Opnum4::Putrootfh => ArgOp::Putrootfh,
            Opnum4::Readdir => ArgOp::Readdir(Decode::decode(dec)?),
            Opnum4::Readlink => ArgOp::Readlink,
            Opnum4::Remove => ArgOp::Remove(Decode::decode(dec)?),
            Opnum4::Rename => ArgOp::Rename(Decode::decode(dec)?),
            Opnum4::Restorefh => ArgOp::Restorefh,
            Opnum4::Savefh => ArgOp::Savefh,
            Opnum4::Secinfo => ArgOp::Secinfo(Decode::decode(dec)?),
            Opnum4::Setattr => ArgOp::Setattr(Decode::decode(dec)?),
            Opnum4::Verify => ArgOp::Verify(Decode::decode(dec)?),
            Opnum4::BackchannelCtl => ArgOp::BackchannelCtl(Decode::decode(dec)?),
            Opnum4::BindConnToSession => ArgOp::BindConnToSession(Decode::decode(dec)?),
            Opnum4::ExchangeId => ArgOp::ExchangeId(Box::new(Decode::decode(dec)?)),
            Opnum4::CreateSession => ArgOp::CreateSession(Box::new(Decode::decode(dec)?)),
            Opnum4::DestroySession => ArgOp::DestroySession(Decode::decode(dec)?),
            Opnum4::FreeStateid => ArgOp::FreeStateid(Decode::decode(dec)?),
            Opnum4::SecinfoNoName => ArgOp::SecinfoNoName(Decode::decode(dec)?),
            Opnum4::Sequence => ArgOp::Sequence(Decode::decode(dec)?),
            Opnum4::TestStateid => ArgOp::TestStateid(Decode::decode(dec)?),
            Opnum4::DestroyClientid => ArgOp::DestroyClientid(Decode::decode(dec)?),
            Opnum4::ReclaimComplete => ArgOp::ReclaimComplete(Decode::decode(dec)?),
            Opnum4::Write => ArgOp::Write(Decode::decode(dec)?),
            Opnum4::Read => ArgOp::Read(Decode::decode(dec)?),
            Opnum4::Commit => ArgOp::Commit(Decode::decode(dec)?),
            Opnum4::Open => ArgOp::Open(Box::new(Decode::decode(dec)?)),
            Opnum4::Close => ArgOp::Close(Decode::decode(dec)?),
            Opnum4::OpenDowngrade => ArgOp::OpenDowngrade(Decode::decode(dec)?),
            Opnum4::Lock => ArgOp::Lock(Box::new(Decode::decode(dec)?)),
            Opnum4::Lockt => ArgOp::Lockt(Decode::decode(dec)?),
            Opnum4::Locku => ArgOp::Locku(Decode::decode(dec)?),
            Opnum4::Delegreturn => ArgOp::Delegreturn(Decode::decode(dec)?),
            Opnum4::Allocate => ArgOp::Allocate(Decode::decode(dec)?),
            Opnum4::Deallocate => ArgOp::Deallocate(Decode::decode(dec)?),
            Opnum4::Seek => ArgOp::Seek(Decode::decode(dec)?),
            Opnum4::ReadPlus => ArgOp::ReadPlus(Decode::decode(dec)?),
            Opnum4::Copy => ArgOp::Copy(Box::new(Decode::decode(dec)?)),
            Opnum4::Clone => ArgOp::Clone(Decode::decode(dec)?),
            Opnum4::Getxattr => ArgOp::Getxattr(Decode::decode(dec)?),
            Opnum4::Setxattr => ArgOp::Setxattr(Decode::decode(dec)?),
            Opnum4::Listxattrs => ArgOp::Listxattrs(Decode::decode(dec)?),
            Opnum4::Removexattr => ArgOp::Removexattr(Decode::decode(dec)?),
            Opnum4::OpenConfirm => ArgOp::OpenConfirm(Decode::decode(dec)?),
            Opnum4::Renew => ArgOp::Renew(Decode::decode(dec)?),
            Opnum4::Setclientid => ArgOp::Setclientid(Box::new(Decode::decode(dec)?)),
            Opnum4::SetclientidConfirm => ArgOp::SetclientidConfirm(Decode::decode(dec)?),
            Opnum4::ReleaseLockowner => ArgOp::ReleaseLockowner(Decode::decode(dec)?),
            _ => return Ok(None),
        }))
    }
}

impl Encode for ArgOp {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.opnum());
        match self {
            ArgOp::Access(a) => a.encode(enc),
            ArgOp::Create(a) => a.encode(enc),
            ArgOp::Getattr(a) => a.encode(enc),
            ArgOp::Link(a) => a.encode(enc),
            ArgOp::Lookup(a) => a.encode(enc),
            ArgOp::Nverify(a) | ArgOp::Verify(a) => a.encode(enc),
            ArgOp::Putfh(a) => a.encode(enc),
            ArgOp::Readdir(a) => a.encode(enc),
            ArgOp::Remove(a) => a.encode(enc),
            ArgOp::Rename(a) => a.encode(enc),
            ArgOp::Secinfo(a) => a.encode(enc),
            ArgOp::Setattr(a) => a.encode(enc),
            ArgOp::BackchannelCtl(a) => a.encode(enc),
            ArgOp::BindConnToSession(a) => a.encode(enc),
            ArgOp::ExchangeId(a) => a.encode(enc),
            ArgOp::CreateSession(a) => a.encode(enc),
            ArgOp::DestroySession(a) => a.encode(enc),
            ArgOp::FreeStateid(a) => a.encode(enc),
            ArgOp::SecinfoNoName(a) => a.encode(enc),
            ArgOp::Sequence(a) => a.encode(enc),
            ArgOp::TestStateid(a) => a.encode(enc),
            ArgOp::DestroyClientid(a) => a.encode(enc),
            ArgOp::ReclaimComplete(a) => a.encode(enc),
            ArgOp::Write(a) => a.encode(enc),
            ArgOp::Read(a) | ArgOp::ReadPlus(a) => a.encode(enc),
            ArgOp::Commit(a) => a.encode(enc),
            ArgOp::Open(a) => a.encode(enc),
            ArgOp::Close(a) => a.encode(enc),
            ArgOp::OpenDowngrade(a) => a.encode(enc),
            ArgOp::Lock(a) => a.encode(enc),
            ArgOp::Lockt(a) => a.encode(enc),
            ArgOp::Locku(a) => a.encode(enc),
            ArgOp::Delegreturn(a) => a.encode(enc),
            ArgOp::Allocate(a) | ArgOp::Deallocate(a) => a.encode(enc),
            ArgOp::Seek(a) => a.encode(enc),
            ArgOp::Copy(a) => a.encode(enc),
            ArgOp::Clone(a) => a.encode(enc),
            ArgOp::Getxattr(a) => a.encode(enc),
            ArgOp::Setxattr(a) => a.encode(enc),
            ArgOp::Listxattrs(a) => a.encode(enc),
            ArgOp::Removexattr(a) => a.encode(enc),
            ArgOp::OpenConfirm(a) => a.encode(enc),
            ArgOp::Renew(a) => a.encode(enc),
            ArgOp::Setclientid(a) => a.encode(enc),
            ArgOp::SetclientidConfirm(a) => a.encode(enc),
            ArgOp::ReleaseLockowner(a) => a.encode(enc),
            ArgOp::Getfh
            | ArgOp::Lookupp
            | ArgOp::Putpubfh
            | ArgOp::Putrootfh
            | ArgOp::Readlink
            | ArgOp::Restorefh
            | ArgOp::Savefh
            | ArgOp::NotSupp(_)
            | ArgOp::Illegal(_) => {}
        }
    }
}

/// One op (opnum and arguments) from the front of `input`, and how many
/// bytes it took: for WRITE only its head, through the data's length
/// word; the payload stays in the record. An op the minor version lacks is [`ArgOp::Illegal`]
/// (pynfs COMP5); one dionfs does not decode is [`ArgOp::NotSupp`]; both
/// consume only the opnum. `Err(Truncated { needed, available })`: the
/// op needs at least `needed - available` more bytes; read them and call
/// again from the op's start. Any other error is `NFS4ERR_BADXDR`.
pub fn decode_op(input: &[u8], minor: u32) -> std::result::Result<(ArgOp, usize), XdrError> {
    let mut dec = Decoder::new(input);
    let opnum = dec.u32()?;
    let op = match Opnum4::from_u32(opnum) {
        Some(op) if op.in_minor(minor) => op,
        _ => return Ok((ArgOp::Illegal(opnum), dec.position())),
    };
    if minor >= 1 && op.is_v40_only() {
        return Ok((ArgOp::NotSupp(op), dec.position()));
    }
    let decoded = ArgOp::decode_args(op, &mut dec)?.unwrap_or(ArgOp::NotSupp(op));
    Ok((decoded, dec.position()))
}

/// Writes the head of one result (`nfs_resop4`): its opnum and status.
/// An [`ArgOp::Illegal`] op's result is `OP_ILLEGAL` with
/// `NFS4ERR_OP_ILLEGAL`, whatever opnum was sent (RFC 8881 section
/// 15.2).
pub fn encode_result_head(enc: &mut Encoder, opnum: u32, status: Nfsstat4) {
    enc.u32(opnum);
    status.encode(enc);
}

/// Declares [`ResOp`] from (variant, opnum, result type) triples.
macro_rules! res_ops {
    ($( $(#[$meta:meta])* $variant:ident($opnum:ident, $ty:ty) ),* $(,)?) => {
        /// One result of a COMPOUND (`nfs_resop4`), as a client decodes it.
        /// The server writes its results itself (after
        /// [`encode_result_head`], or as `opnum` then the result type).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum ResOp {
            $( $(#[$meta])* $variant($ty), )*
            /// `OP_ILLEGAL`'s result.
            Illegal(Nfsstat4),
            /// The result of an operation dionfs does not decode
            /// ([`ArgOp::NotSupp`]): only a failure decodes, the status
            /// alone.
            Other { opnum: Opnum4, status: Nfsstat4 },
        }

        impl ResOp {
            /// The opnum on the wire.
            pub fn opnum(&self) -> Opnum4 {
                match self {
                    $( ResOp::$variant(_) => Opnum4::$opnum, )*
                    ResOp::Illegal(_) => Opnum4::Illegal,
                    ResOp::Other { opnum, .. } => *opnum,
                }
            }
        }

        impl Encode for ResOp {
            fn encode(&self, enc: &mut Encoder) {
                enc.u32(self.opnum().as_u32());
                match self {
                    $( ResOp::$variant(res) => res.encode(enc), )*
                    ResOp::Illegal(status) | ResOp::Other { status, .. } => status.encode(enc),
                }
            }
        }

        impl Decode<'_> for ResOp {
            fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
                Ok(match Opnum4::decode(dec)? {
                    $( Opnum4::$opnum => ResOp::$variant(Decode::decode(dec)?), )*
                    Opnum4::Illegal => ResOp::Illegal(Nfsstat4::decode(dec)?),
                    opnum => match Nfsstat4::decode(dec)? {
                        Nfsstat4::Ok => {
                            return Err(XdrError::BadDiscriminant {
                                type_name: "nfs_resop4 not decoded",
                                value: opnum.as_u32(),
                            })
                        }
                        status => ResOp::Other { opnum, status },
                    },
                })
            }
        }
    };
}

res_ops! {
    Access(Access, Res4<AccessResOk4>),
    Create(Create, Res4<CreateResOk4>),
    Getattr(Getattr, Res4<GetattrResOk4>),
    Getfh(Getfh, Res4<GetfhResOk4>),
    Link(Link, Res4<ChangeInfo4>),
    Lookup(Lookup, Nfsstat4),
    Lookupp(Lookupp, Nfsstat4),
    Nverify(Nverify, Nfsstat4),
    Putfh(Putfh, Nfsstat4),
    Putpubfh(Putpubfh, Nfsstat4),
    Putrootfh(Putrootfh, Nfsstat4),
    Readdir(Readdir, Res4<ReaddirResOk4>),
    Readlink(Readlink, Res4<Linktext4>),
    Remove(Remove, Res4<ChangeInfo4>),
    Rename(Rename, Res4<RenameResOk4>),
    Restorefh(Restorefh, Nfsstat4),
    Savefh(Savefh, Nfsstat4),
    Secinfo(Secinfo, Res4<SecinfoResOk4>),
    Setattr(Setattr, SetattrRes4),
    Verify(Verify, Nfsstat4),
    BackchannelCtl(BackchannelCtl, Nfsstat4),
    BindConnToSession(BindConnToSession, Res4<BindConnToSessionResOk4>),
    ExchangeId(ExchangeId, Res4<ExchangeIdResOk4>),
    CreateSession(CreateSession, Res4<CreateSessionResOk4>),
    DestroySession(DestroySession, Nfsstat4),
    FreeStateid(FreeStateid, Nfsstat4),
    SecinfoNoName(SecinfoNoName, Res4<SecinfoResOk4>),
    Sequence(Sequence, Res4<SequenceResOk4>),
    TestStateid(TestStateid, Res4<TestStateidResOk4>),
    DestroyClientid(DestroyClientid, Nfsstat4),
    ReclaimComplete(ReclaimComplete, Nfsstat4),
    Write(Write, Res4<WriteResOk4>),
    Read(Read, Res4<ReadResOk4>),
    Commit(Commit, Res4<CommitResOk4>),
    Open(Open, Res4<OpenResOk4>),
    Close(Close, Res4<StateId4>),
    OpenDowngrade(OpenDowngrade, Res4<StateId4>),
    Lock(Lock, LockRes4<StateId4>),
    Lockt(Lockt, LockRes4<Void>),
    Locku(Locku, Res4<StateId4>),
    Delegreturn(Delegreturn, Nfsstat4),
    Allocate(Allocate, Nfsstat4),
    Deallocate(Deallocate, Nfsstat4),
    Seek(Seek, Res4<SeekResOk4>),
    ReadPlus(ReadPlus, Res4<ReadPlusResOk4>),
    Copy(Copy, CopyRes4),
    Clone(Clone, Nfsstat4),
    Getxattr(Getxattr, Res4<XattrValue4>),
    Setxattr(Setxattr, Res4<ChangeInfo4>),
    Listxattrs(Listxattrs, Res4<ListxattrsResOk4>),
    Removexattr(Removexattr, Res4<ChangeInfo4>),
    OpenConfirm(OpenConfirm, Res4<StateId4>),
    Renew(Renew, Nfsstat4),
    Setclientid(Setclientid, SetclientidRes4),
    SetclientidConfirm(SetclientidConfirm, Nfsstat4),
    ReleaseLockowner(ReleaseLockowner, Nfsstat4),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{GetfhResOk4, Res4};
    use crate::test_util::assert_codec;

    /// Ops are moved whole between decoding and running: kept small by
    /// boxing the large, rare ones (unboxed, EXCHANGE_ID made every op
    /// 208 bytes).
    #[test]
    fn an_op_is_at_most_64_bytes() {
        assert!(
            std::mem::size_of::<ArgOp>() <= 64,
            "{}",
            std::mem::size_of::<ArgOp>()
        );
    }

    fn encoded(ops: &[ArgOp]) -> Vec<u8> {
        let mut enc = Encoder::new();
        for op in ops {
            op.encode(&mut enc);
        }
        enc.into_vec()
    }

    /// Decodes every op of `bytes` in turn.
    fn decode_all(mut bytes: &[u8], minor: u32) -> Vec<ArgOp> {
        let mut ops = Vec::new();
        while !bytes.is_empty() {
            let (op, used) = decode_op(bytes, minor).expect("decodes");
            assert!(used > 0 && used <= bytes.len());
            bytes = &bytes[used..];
            ops.push(op);
        }
        ops
    }

    #[test]
    fn every_op_decodes_back_to_itself() {
        let ops = typical_ops();
        for op in &ops {
            let bytes = op.to_xdr();
            let opnum = op.opnum();
            // NFSv4.2's ops are illegal in 4.1.
            let in_41 = Opnum4::from_u32(opnum).is_some_and(|op| op.in_minor(1));
            let as_41 = if in_41 {
                Ok((op.clone(), bytes.len()))
            } else {
                Ok((ArgOp::Illegal(opnum), 4))
            };
            assert_eq!(decode_op(&bytes, 1), as_41, "{op:?}");
            assert_eq!(
                decode_op(&bytes, 2),
                Ok((op.clone(), bytes.len())),
                "{op:?}"
            );
        }
        assert_eq!(decode_all(&encoded(&ops), 2), ops);
    }

    #[test]
    fn every_prefix_of_a_compound_is_truncated() {
        let ops = typical_ops();
        let bytes = encoded(&ops);
        // Where each op starts, so a cut can be checked from there.
        let mut starts = vec![0];
        for op in &ops {
            starts.push(starts.last().unwrap() + op.to_xdr().len());
        }
        for cut in 0..bytes.len() {
            let start = *starts.iter().rev().find(|&&s| s <= cut).unwrap();
            let end = *starts.iter().find(|&&s| s > cut).unwrap();
            match decode_op(&bytes[start..cut], 2) {
                Err(XdrError::Truncated { needed, available }) => {
                    assert!(needed > available, "cut {cut}: asks for nothing more");
                    assert!(
                        cut + (needed - available) <= end,
                        "cut {cut}: asks past the op's end"
                    );
                }
                other => panic!("cut {cut} of op at {start}: {other:?}"),
            }
        }
    }

    #[test]
    fn ops_outside_the_minor_version_are_illegal() {
        for opnum in [0u32, 1, 2, 76, 10043, 10044, u32::MAX] {
            let bytes = opnum.to_xdr();
            assert_eq!(decode_op(&bytes, 1), Ok((ArgOp::Illegal(opnum), 4)));
        }
        // NFSv4.2's ops are illegal in 4.1, and 4.1's in 4.0.
        let write_same = Opnum4::WriteSame.as_u32().to_xdr();
        assert_eq!(decode_op(&write_same, 1), Ok((ArgOp::Illegal(70), 4)));
        assert_eq!(
            decode_op(&write_same, 2),
            Ok((ArgOp::NotSupp(Opnum4::WriteSame), 4))
        );
        let seek = Opnum4::Seek.as_u32().to_xdr();
        assert_eq!(decode_op(&seek, 1), Ok((ArgOp::Illegal(69), 4)));
        let sequence = typical_ops().remove(0).to_xdr();
        assert_eq!(decode_op(&sequence, 0), Ok((ArgOp::Illegal(53), 4)));
        // A minor version past 2 is answered by the server before any op.
        assert!(matches!(
            decode_op(&sequence, 3),
            Ok((ArgOp::Sequence(_), 36))
        ));
    }

    #[test]
    fn the_v40_ops_decode_in_minor_version_0_alone() {
        for op in v40_ops() {
            let bytes = op.to_xdr();
            assert_eq!(
                decode_op(&bytes, 0),
                Ok((op.clone(), bytes.len())),
                "{op:?}"
            );
            let opnum = Opnum4::from_u32(op.opnum()).expect("a known op");
            assert!(opnum.is_v40_only());
            for minor in [1, 2] {
                assert_eq!(decode_op(&bytes, minor), Ok((ArgOp::NotSupp(opnum), 4)));
            }
        }
        // 4.0's other ops decode in it; 4.1's are illegal there.
        let putrootfh = ArgOp::Putrootfh.to_xdr();
        assert_eq!(decode_op(&putrootfh, 0), Ok((ArgOp::Putrootfh, 4)));
        let reclaim = Opnum4::ReclaimComplete.as_u32().to_xdr();
        assert_eq!(decode_op(&reclaim, 0), Ok((ArgOp::Illegal(58), 4)));
        // Their results, as a client decodes them.
        for res in [
            ResOp::OpenConfirm(Res4::Ok(StateId4::default())),
            ResOp::Renew(Nfsstat4::StaleClientid),
            ResOp::Setclientid(SetclientidRes4::Fail(Nfsstat4::Resource)),
            ResOp::SetclientidConfirm(Nfsstat4::Ok),
            ResOp::ReleaseLockowner(Nfsstat4::LocksHeld),
        ] {
            assert_codec(&res);
        }
    }

    #[test]
    fn ops_not_decoded_consume_only_their_opnum() {
        for op in [
            Opnum4::Layoutget,
            Opnum4::Openattr,
            Opnum4::Delegpurge,
            Opnum4::WantDelegation,
            Opnum4::SetSsv,
        ] {
            let mut bytes = op.as_u32().to_xdr();
            bytes.extend_from_slice(&[0xff; 8]);
            assert_eq!(decode_op(&bytes, 1), Ok((ArgOp::NotSupp(op), 4)));
        }
        for op in [
            Opnum4::CopyNotify,
            Opnum4::OffloadCancel,
            Opnum4::OffloadStatus,
            Opnum4::IoAdvise,
            Opnum4::Layouterror,
            Opnum4::Layoutstats,
            Opnum4::WriteSame,
        ] {
            let mut bytes = op.as_u32().to_xdr();
            bytes.extend_from_slice(&[0xff; 8]);
            assert_eq!(decode_op(&bytes, 2), Ok((ArgOp::NotSupp(op), 4)));
        }
    }

    /// The server's receive loop: on `Truncated`, read exactly the
    /// missing bytes and decode again from the op's start. Starting from
    /// any cut of a COMPOUND's ops, that reaches each op whole, never
    /// reading past its end.
    #[test]
    fn refilling_what_truncated_asks_for_reaches_each_op_exactly() {
        let ops = typical_ops();
        for op in &ops {
            let bytes = op.to_xdr();
            for cut in 0..bytes.len() {
                let mut have = bytes[..cut].to_vec();
                let decoded = loop {
                    match decode_op(&have, 2) {
                        Ok(done) => break done,
                        Err(XdrError::Truncated { needed, available }) => {
                            let more = needed - available;
                            assert!(more > 0);
                            assert!(
                                have.len() + more <= bytes.len(),
                                "{op:?} cut at {cut}: asks for {more} past its end"
                            );
                            // Each refill adds at least a byte, so this ends.
                            have.extend_from_slice(&bytes[have.len()..have.len() + more]);
                        }
                        Err(e) => panic!("{op:?} cut at {cut}: {e}"),
                    }
                };
                assert_eq!(decoded, (op.clone(), bytes.len()), "cut at {cut}");
            }
        }
    }

    #[test]
    fn bounds_inside_the_new_ops_are_errors_before_allocation() {
        // SETXATTR with a value over 64 KiB claimed.
        let mut setxattr = Opnum4::Setxattr.as_u32().to_xdr();
        setxattr.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, b'k', 0, 0, 0]);
        setxattr.extend_from_slice(&(64 * 1024 + 1u32).to_be_bytes());
        assert_eq!(
            decode_op(&setxattr, 2),
            Err(XdrError::TooLong {
                len: 64 * 1024 + 1,
                max: 64 * 1024
            })
        );
        // COPY with a billion source servers claimed.
        let mut copy = Opnum4::Copy.as_u32().to_xdr();
        copy.extend_from_slice(&[0; 16 + 16 + 24]);
        copy.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        copy.extend_from_slice(&1_000_000_000u32.to_be_bytes());
        assert!(matches!(decode_op(&copy, 2), Err(XdrError::TooLong { .. })));
        // OPEN with an owner of 4 GiB.
        let mut open = Opnum4::Open.as_u32().to_xdr();
        open.extend_from_slice(&[0; 12 + 8]);
        open.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode_op(&open, 1), Err(XdrError::TooLong { .. })));
        // An unknown claim is bad XDR.
        let mut claim = typical_ops()
            .into_iter()
            .find(|op| matches!(op, ArgOp::Open(o) if o.claim == crate::nfs4::OpenClaim4::Fh))
            .unwrap()
            .to_xdr();
        let at = claim.len() - 4;
        claim[at..].copy_from_slice(&7u32.to_be_bytes());
        assert!(matches!(
            decode_op(&claim, 1),
            Err(XdrError::BadDiscriminant { .. })
        ));
    }

    #[test]
    fn huge_lengths_cost_an_error_not_memory() {
        let huge = u32::MAX.to_be_bytes();
        for op in [
            Opnum4::Putfh,
            Opnum4::Lookup,
            Opnum4::Getattr,
            Opnum4::TestStateid,
            Opnum4::Verify,
        ] {
            let mut bytes = op.as_u32().to_xdr();
            bytes.extend_from_slice(&huge);
            bytes.extend_from_slice(&[0; 64]);
            assert!(
                matches!(decode_op(&bytes, 1), Err(XdrError::TooLong { .. })),
                "{op:?}"
            );
        }
    }

    #[test]
    fn results_round_trip_as_a_client_decodes_them() {
        let results = [
            ResOp::Sequence(Res4::Ok(SequenceResOk4 {
                sessionid: crate::nfs4::SessionId4([1; 16]),
                sequenceid: 1,
                slotid: 0,
                highest_slotid: 0,
                target_highest_slotid: 63,
                status_flags: 0,
            })),
            ResOp::Putrootfh(Nfsstat4::Ok),
            ResOp::Getfh(Res4::Ok(GetfhResOk4 { object: fh(16) })),
            ResOp::Lookup(Nfsstat4::Noent),
            ResOp::Setattr(SetattrRes4 {
                status: Nfsstat4::Ok,
                attrsset: crate::nfs4::Bitmap4::from_bits(&[33]),
            }),
            ResOp::Remove(Res4::Ok(cinfo())),
            ResOp::Illegal(Nfsstat4::OpIllegal),
            ResOp::Other {
                opnum: Opnum4::Layoutget,
                status: Nfsstat4::Notsupp,
            },
            ResOp::Open(Res4::Fail(Nfsstat4::Notsupp)),
            ResOp::Close(Res4::Ok(stateid())),
            ResOp::Lock(crate::nfs4::LockRes4::Ok(stateid())),
            ResOp::Lockt(crate::nfs4::LockRes4::Ok(Void)),
            ResOp::Delegreturn(Nfsstat4::BadStateid),
            ResOp::Read(Res4::Ok(crate::nfs4::ReadResOk4 {
                eof: true,
                data: vec![1, 2, 3],
            })),
            ResOp::Copy(crate::nfs4::CopyRes4::Fail(Nfsstat4::Notsupp)),
            ResOp::Clone(Nfsstat4::Xdev),
            ResOp::Setxattr(Res4::Ok(cinfo())),
        ];
        for res in &results {
            assert_codec(res);
        }
        // A result not decoded here decodes only as a failure.
        let mut ok = Opnum4::Layoutget.as_u32().to_xdr();
        ok.extend_from_slice(&[0; 4]);
        assert!(ResOp::from_xdr(&ok).is_err());
    }

    #[test]
    fn heads_round_trip() {
        assert_codec(&CompoundHead {
            tag: Utf8Str::from("mount"),
            minorversion: 1,
            numops: 3,
        });
        assert_codec(&CompoundResHead {
            status: Nfsstat4::Ok,
            tag: Utf8Str::default(),
            numres: 2,
        });
        let mut enc = Encoder::new();
        encode_result_head(&mut enc, Opnum4::Getfh.as_u32(), Nfsstat4::Ok);
        GetfhResOk4 { object: fh(8) }.encode(&mut enc);
        let bytes = enc.into_vec();
        let mut dec = Decoder::new(&bytes);
        assert_eq!(dec.u32(), Ok(10));
        assert_eq!(
            Res4::<GetfhResOk4>::decode(&mut dec),
            Ok(Res4::Ok(GetfhResOk4 { object: fh(8) }))
        );
        let mut enc = Encoder::new();
        encode_result_head(&mut enc, Opnum4::Illegal.as_u32(), Nfsstat4::OpIllegal);
        assert_eq!(enc.into_vec(), [0, 0, 0x27, 0x3c, 0, 0, 0x27, 0x3c]);
    }
}
