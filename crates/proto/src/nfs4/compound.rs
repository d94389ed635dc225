//! COMPOUND (RFC 8881 sections 16.2 and 15.2): its head, and its
//! operations decoded one at a time from the front of the bytes not yet
//! read, so the server reads a record no further than the operation it
//! is decoding.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::xdr_struct;
use crate::nfs4::ops::{
    AccessArgs4, AccessResOk4, BackchannelCtlArgs4, BindConnToSessionArgs4,
    BindConnToSessionResOk4, CreateArgs4, CreateResOk4, CreateSessionArgs4, CreateSessionResOk4,
    DestroyClientidArgs4, DestroySessionArgs4, ExchangeIdArgs4, ExchangeIdResOk4, FreeStateidArgs4,
    GetattrArgs4, GetattrResOk4, GetfhResOk4, LinkArgs4, LookupArgs4, PutfhArgs4, ReaddirArgs4,
    ReaddirResOk4, ReclaimCompleteArgs4, RemoveArgs4, RenameArgs4, RenameResOk4, SecinfoArgs4,
    SecinfoResOk4, SecinfoStyle4, SequenceArgs4, SequenceResOk4, SetattrArgs4, SetattrRes4,
    TestStateidArgs4, TestStateidResOk4, VerifyArgs4, WriteHead4, WriteResOk4,
};
use crate::nfs4::types::{
    ChangeInfo4, Linktext4, Nfsstat4, Opnum4, Res4, Utf8Str, NFS4_MAX_TAG_LEN,
};

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

/// One operation of a COMPOUND and its arguments (`nfs_argop4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgOp {
    Access(AccessArgs4),
    Create(CreateArgs4),
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
    ExchangeId(ExchangeIdArgs4),
    CreateSession(CreateSessionArgs4),
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
    /// An operation of the minor version that dionfs does not decode:
    /// the 4.0-only ones (OPEN_CONFIRM, RENEW, SETCLIENTID,
    /// SETCLIENTID_CONFIRM, RELEASE_LOCKOWNER), pNFS and delegations, and
    /// those whose codec has not landed yet. Only the opnum is consumed:
    /// the server answers `NFS4ERR_NOTSUPP`, which ends the COMPOUND.
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
            Opnum4::Create => ArgOp::Create(Decode::decode(dec)?),
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
            Opnum4::ExchangeId => ArgOp::ExchangeId(Decode::decode(dec)?),
            Opnum4::CreateSession => ArgOp::CreateSession(Decode::decode(dec)?),
            Opnum4::DestroySession => ArgOp::DestroySession(Decode::decode(dec)?),
            Opnum4::FreeStateid => ArgOp::FreeStateid(Decode::decode(dec)?),
            Opnum4::SecinfoNoName => ArgOp::SecinfoNoName(Decode::decode(dec)?),
            Opnum4::Sequence => ArgOp::Sequence(Decode::decode(dec)?),
            Opnum4::TestStateid => ArgOp::TestStateid(Decode::decode(dec)?),
            Opnum4::DestroyClientid => ArgOp::DestroyClientid(Decode::decode(dec)?),
            Opnum4::ReclaimComplete => ArgOp::ReclaimComplete(Decode::decode(dec)?),
            Opnum4::Write => ArgOp::Write(Decode::decode(dec)?),
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
            /// The result of an operation whose result type is not decoded
            /// here: only a failure decodes (the status alone, which is all
            /// such a result carries but for LOCK's and LOCKT's `DENIED`).
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{GetfhResOk4, Res4};
    use crate::test_util::assert_codec;

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
            assert_eq!(
                decode_op(&bytes, 1),
                Ok((op.clone(), bytes.len())),
                "{op:?}"
            );
            assert_eq!(
                decode_op(&bytes, 2),
                Ok((op.clone(), bytes.len())),
                "{op:?}"
            );
        }
        assert_eq!(decode_all(&encoded(&ops), 1), ops);
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
            match decode_op(&bytes[start..cut], 1) {
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
        let seek = Opnum4::Seek.as_u32().to_xdr();
        assert_eq!(decode_op(&seek, 1), Ok((ArgOp::Illegal(69), 4)));
        assert_eq!(decode_op(&seek, 2), Ok((ArgOp::NotSupp(Opnum4::Seek), 4)));
        let sequence = typical_ops().remove(0).to_xdr();
        assert_eq!(decode_op(&sequence, 0), Ok((ArgOp::Illegal(53), 4)));
        // A minor version past 2 is answered by the server before any op.
        assert!(matches!(
            decode_op(&sequence, 3),
            Ok((ArgOp::Sequence(_), 36))
        ));
    }

    #[test]
    fn ops_not_decoded_consume_only_their_opnum() {
        for op in [
            Opnum4::Renew,
            Opnum4::Setclientid,
            Opnum4::OpenConfirm,
            Opnum4::ReleaseLockowner,
            Opnum4::Layoutget,
            Opnum4::Open,
        ] {
            let mut bytes = op.as_u32().to_xdr();
            bytes.extend_from_slice(&[0xff; 8]);
            assert_eq!(decode_op(&bytes, 1), Ok((ArgOp::NotSupp(op), 4)));
        }
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
                opnum: Opnum4::Open,
                status: Nfsstat4::Notsupp,
            },
        ];
        for res in &results {
            assert_codec(res);
        }
        // A result not decoded here decodes only as a failure.
        let mut ok = Opnum4::Open.as_u32().to_xdr();
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
