//! File handles, names, attributes and directories (RFC 8881 section
//! 18): PUTFH PUTROOTFH PUTPUBFH GETFH SAVEFH RESTOREFH LOOKUP LOOKUPP
//! ACCESS GETATTR SETATTR VERIFY NVERIFY CREATE REMOVE RENAME LINK READDIR
//! READLINK SECINFO SECINFO_NO_NAME. The operations without arguments
//! (PUTROOTFH, PUTPUBFH, GETFH, SAVEFH, RESTOREFH, LOOKUPP, READLINK)
//! have no args type.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result};

use crate::codec::{decode_list, encode_list, xdr_enum, xdr_struct, MAX_LIST_ITEMS};
use crate::nfs4::attrs::Fattr4;
use crate::nfs4::types::{
    decode_array, encode_array, Bitmap4, ChangeInfo4, Component4, GssOpaque4, Linktext4, NfsFh4,
    NfsFtype4, Nfsstat4, SpecData4, StateId4, Verifier4, NFS4_MAX_ARRAY_ITEMS,
};

/// `ACCESS4_*` bits (RFC 8881 section 18.1).
pub const ACCESS4_READ: u32 = 0x0000_0001;
pub const ACCESS4_LOOKUP: u32 = 0x0000_0002;
pub const ACCESS4_MODIFY: u32 = 0x0000_0004;
pub const ACCESS4_EXTEND: u32 = 0x0000_0008;
pub const ACCESS4_DELETE: u32 = 0x0000_0010;
pub const ACCESS4_EXECUTE: u32 = 0x0000_0020;
/// RFC 8276 section 8.4.4: the extended-attribute bits.
pub const ACCESS4_XAREAD: u32 = 0x0000_0040;
pub const ACCESS4_XAWRITE: u32 = 0x0000_0080;
pub const ACCESS4_XALIST: u32 = 0x0000_0100;

xdr_struct! {
    /// `PUTFH4args`; the result is its status.
    pub struct PutfhArgs4 {
        pub object: NfsFh4,
    }
}

xdr_struct! {
    /// `GETFH4resok`.
    pub struct GetfhResOk4 {
        pub object: NfsFh4,
    }
}

xdr_struct! {
    /// `LOOKUP4args`; the result is its status.
    pub struct LookupArgs4 {
        pub objname: Component4,
    }
}

xdr_struct! {
    /// `ACCESS4args`: the `ACCESS4_*` bits asked about.
    pub struct AccessArgs4 {
        pub access: u32,
    }
}

xdr_struct! {
    /// `ACCESS4resok`: the bits the server could check, and those granted.
    pub struct AccessResOk4 {
        pub supported: u32,
        pub access: u32,
    }
}

xdr_struct! {
    /// `GETATTR4args`.
    pub struct GetattrArgs4 {
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// `GETATTR4resok`.
    pub struct GetattrResOk4 {
        pub obj_attributes: Fattr4,
    }
}

xdr_struct! {
    /// `SETATTR4args`.
    pub struct SetattrArgs4 {
        pub stateid: StateId4,
        pub obj_attributes: Fattr4,
    }
}

xdr_struct! {
    /// `SETATTR4res`: the status and, whatever it is, the attributes set.
    pub struct SetattrRes4 {
        pub status: Nfsstat4,
        pub attrsset: Bitmap4,
    }
}

xdr_struct! {
    /// `VERIFY4args` and `NVERIFY4args`; the result is the status.
    pub struct VerifyArgs4 {
        pub obj_attributes: Fattr4,
    }
}

/// `createtype4`: what CREATE makes (not regular files: OPEN does those).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateType4 {
    /// `NF4LNK` and its target.
    Link(Linktext4),
    /// `NF4BLK`.
    Block(SpecData4),
    /// `NF4CHR`.
    Char(SpecData4),
    /// `NF4SOCK`.
    Socket,
    /// `NF4FIFO`.
    Fifo,
    /// `NF4DIR`.
    Dir,
    /// Any other type (`NF4REG`, `NF4ATTRDIR`, `NF4NAMEDATTR`): the
    /// union's void default, `NFS4ERR_BADTYPE` in the handler.
    Other(NfsFtype4),
}

impl CreateType4 {
    /// The type on the wire.
    pub fn ftype(&self) -> NfsFtype4 {
        match self {
            CreateType4::Link(_) => NfsFtype4::Lnk,
            CreateType4::Block(_) => NfsFtype4::Blk,
            CreateType4::Char(_) => NfsFtype4::Chr,
            CreateType4::Socket => NfsFtype4::Sock,
            CreateType4::Fifo => NfsFtype4::Fifo,
            CreateType4::Dir => NfsFtype4::Dir,
            CreateType4::Other(t) => *t,
        }
    }
}

impl Encode for CreateType4 {
    fn encode(&self, enc: &mut Encoder) {
        self.ftype().encode(enc);
        match self {
            CreateType4::Link(target) => target.encode(enc),
            CreateType4::Block(spec) | CreateType4::Char(spec) => spec.encode(enc),
            _ => {}
        }
    }
}

impl Decode<'_> for CreateType4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match NfsFtype4::decode(dec)? {
            NfsFtype4::Lnk => CreateType4::Link(Decode::decode(dec)?),
            NfsFtype4::Blk => CreateType4::Block(Decode::decode(dec)?),
            NfsFtype4::Chr => CreateType4::Char(Decode::decode(dec)?),
            NfsFtype4::Sock => CreateType4::Socket,
            NfsFtype4::Fifo => CreateType4::Fifo,
            NfsFtype4::Dir => CreateType4::Dir,
            other => CreateType4::Other(other),
        })
    }
}

xdr_struct! {
    /// `CREATE4args`.
    pub struct CreateArgs4 {
        pub objtype: CreateType4,
        pub objname: Component4,
        pub createattrs: Fattr4,
    }
}

xdr_struct! {
    /// `CREATE4resok`.
    pub struct CreateResOk4 {
        pub cinfo: ChangeInfo4,
        pub attrset: Bitmap4,
    }
}

xdr_struct! {
    /// `REMOVE4args`; `REMOVE4resok` is a [`ChangeInfo4`].
    pub struct RemoveArgs4 {
        pub target: Component4,
    }
}

xdr_struct! {
    /// `RENAME4args`: from the saved handle's directory to the current's.
    pub struct RenameArgs4 {
        pub oldname: Component4,
        pub newname: Component4,
    }
}

xdr_struct! {
    /// `RENAME4resok`.
    pub struct RenameResOk4 {
        pub source_cinfo: ChangeInfo4,
        pub target_cinfo: ChangeInfo4,
    }
}

xdr_struct! {
    /// `LINK4args`: a link to the saved handle in the current directory;
    /// `LINK4resok` is a [`ChangeInfo4`].
    pub struct LinkArgs4 {
        pub newname: Component4,
    }
}

xdr_struct! {
    /// `READDIR4args`.
    pub struct ReaddirArgs4 {
        pub cookie: u64,
        pub cookieverf: Verifier4,
        pub dircount: u32,
        pub maxcount: u32,
        pub attr_request: Bitmap4,
    }
}

xdr_struct! {
    /// `entry4`, without its link to the next (see [`DirList4`]).
    pub struct Entry4 {
        pub cookie: u64,
        pub name: Component4,
        pub attrs: Fattr4,
    }
}

/// `dirlist4`: the entries, as an XDR linked list, and whether the
/// directory ends with them. At most [`MAX_LIST_ITEMS`] entries decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirList4 {
    pub entries: Vec<Entry4>,
    pub eof: bool,
}

impl Encode for DirList4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_list(enc, &self.entries, |e, entry| entry.encode(e));
        enc.bool(self.eof);
    }
}

impl Decode<'_> for DirList4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            entries: decode_list(dec, MAX_LIST_ITEMS, Entry4::decode)?,
            eof: dec.bool()?,
        })
    }
}

xdr_struct! {
    /// `READDIR4resok`.
    pub struct ReaddirResOk4 {
        pub cookieverf: Verifier4,
        pub reply: DirList4,
    }
}

xdr_struct! {
    /// `SECINFO4args`.
    pub struct SecinfoArgs4 {
        pub name: Component4,
    }
}

xdr_enum! {
    /// `rpc_gss_svc_t` (RFC 2203).
    pub enum RpcGssSvc {
        None = 1,
        Integrity = 2,
        Privacy = 3,
    }
}

xdr_struct! {
    /// `rpcsec_gss_info`: one GSS mechanism and service.
    pub struct RpcsecGssInfo {
        pub oid: GssOpaque4,
        pub qop: u32,
        pub service: RpcGssSvc,
    }
}

/// `RPCSEC_GSS`, the one flavour of `secinfo4` with a body.
const RPCSEC_GSS: u32 = 6;

/// `secinfo4`: one security flavour the server accepts for a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secinfo4 {
    /// `RPCSEC_GSS` and its mechanism.
    Gss(RpcsecGssInfo),
    /// Any other flavour (`AUTH_SYS` = 1, `AUTH_NONE` = 0), no body.
    Flavor(u32),
}

impl Encode for Secinfo4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Secinfo4::Gss(info) => {
                enc.u32(RPCSEC_GSS);
                info.encode(enc);
            }
            Secinfo4::Flavor(flavor) => {
                debug_assert_ne!(*flavor, RPCSEC_GSS, "RPCSEC_GSS without its info");
                enc.u32(*flavor);
            }
        }
    }
}

impl Decode<'_> for Secinfo4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match dec.u32()? {
            RPCSEC_GSS => Secinfo4::Gss(Decode::decode(dec)?),
            flavor => Secinfo4::Flavor(flavor),
        })
    }
}

/// `SECINFO4resok` (also SECINFO_NO_NAME's): the flavours, best first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecinfoResOk4(pub Vec<Secinfo4>);

impl Encode for SecinfoResOk4 {
    fn encode(&self, enc: &mut Encoder) {
        encode_array(enc, &self.0);
    }
}

impl Decode<'_> for SecinfoResOk4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self(decode_array(dec, NFS4_MAX_ARRAY_ITEMS, 4)?))
    }
}

xdr_enum! {
    /// `secinfo_style4`: SECINFO_NO_NAME's argument.
    pub enum SecinfoStyle4 {
        CurrentFh = 0,
        Parent = 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::*;
    use crate::nfs4::{ArgOp, Res4};
    use crate::test_util::assert_codec;

    #[test]
    fn file_args_round_trip() {
        for op in typical_ops() {
            match op {
                ArgOp::Access(a) => assert_codec(&a),
                ArgOp::Create(a) => assert_codec(&*a),
                ArgOp::Getattr(a) => assert_codec(&a),
                ArgOp::Link(a) => assert_codec(&a),
                ArgOp::Lookup(a) => assert_codec(&a),
                ArgOp::Nverify(a) | ArgOp::Verify(a) => assert_codec(&a),
                ArgOp::Putfh(a) => assert_codec(&a),
                ArgOp::Readdir(a) => assert_codec(&a),
                ArgOp::Remove(a) => assert_codec(&a),
                ArgOp::Rename(a) => assert_codec(&a),
                ArgOp::Secinfo(a) => assert_codec(&a),
                ArgOp::Setattr(a) => assert_codec(&a),
                ArgOp::SecinfoNoName(a) => assert_codec(&a),
                _ => {}
            }
        }
        assert_codec(&CreateType4::Block(SpecData4::default()));
        assert_codec(&CreateType4::Socket);
        assert_codec(&CreateType4::Fifo);
        assert_codec(&CreateType4::Other(NfsFtype4::NamedAttr));
    }

    #[test]
    fn file_results_round_trip() {
        assert_codec(&Res4::Ok(GetfhResOk4 { object: fh(128) }));
        assert_codec(&Res4::Ok(AccessResOk4 {
            supported: 0x3f,
            access: 0x1,
        }));
        assert_codec(&Res4::Ok(GetattrResOk4 {
            obj_attributes: fattr(40),
        }));
        assert_codec(&Res4::<GetattrResOk4>::Fail(Nfsstat4::Nofilehandle));
        assert_codec(&SetattrRes4 {
            status: Nfsstat4::Inval,
            attrsset: Bitmap4::from_bits(&[33]),
        });
        assert_codec(&Res4::Ok(CreateResOk4 {
            cinfo: cinfo(),
            attrset: Bitmap4::default(),
        }));
        assert_codec(&Res4::Ok(cinfo()));
        assert_codec(&Res4::Ok(RenameResOk4 {
            source_cinfo: cinfo(),
            target_cinfo: ChangeInfo4::default(),
        }));
        let entry = |cookie, name: &str| Entry4 {
            cookie,
            name: Component4::from(name),
            attrs: fattr(8),
        };
        assert_codec(&Res4::Ok(ReaddirResOk4 {
            cookieverf: Verifier4([6; 8]),
            reply: DirList4 {
                entries: vec![entry(3, "a"), entry(4, "bcdef")],
                eof: true,
            },
        }));
        assert_codec(&Res4::Ok(ReaddirResOk4 {
            cookieverf: Verifier4::default(),
            reply: DirList4::default(),
        }));
        assert_codec(&Res4::Ok(Linktext4::from("/a/b")));
        assert_codec(&Res4::Ok(SecinfoResOk4(vec![
            Secinfo4::Gss(RpcsecGssInfo {
                oid: GssOpaque4(vec![0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02]),
                qop: 0,
                service: RpcGssSvc::Integrity,
            }),
            Secinfo4::Flavor(1),
            Secinfo4::Flavor(0),
        ])));
    }
}
