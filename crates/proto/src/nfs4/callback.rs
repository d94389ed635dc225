//! The callback program (RFC 8881 sections 16.2.3.1 and 20): what the
//! server sends a client on the session's back channel. CB_NULL has no
//! arguments or result; CB_COMPOUND carries CB_SEQUENCE (and, with
//! delegations, CB_RECALL). The server encodes [`CbCompoundArgs4`] and
//! decodes the client's reply with [`decode_cb_compound_reply`], bounded
//! by the back channel's own reply limit. The test client does the
//! reverse, so both directions encode and decode.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, Result, XdrError};

use crate::codec::{xdr_enum, xdr_struct};
use crate::nfs4::attrs::Fattr4;
use crate::nfs4::types::{
    decode_array, encode_array, Bitmap4, NfsFh4, Nfsstat4, Res4, SessionId4, StateId4, Utf8Str,
    NFS4_MAX_ARRAY_ITEMS, NFS4_MAX_TAG_LEN,
};

/// The callback program number in `nfs4.x`. A 4.1 client chooses its own
/// in CREATE_SESSION and BACKCHANNEL_CTL (`cb_program`); Linux sends this
/// one.
pub const NFS4_CALLBACK: u32 = 0x4000_0000;
/// `CB_NULL`: the probe.
pub const CB_NULL: u32 = 0;
/// `CB_COMPOUND`.
pub const CB_COMPOUND: u32 = 1;
/// The longest CB_COMPOUND reply decoded (the body after the RPC reply
/// header): the back channel's `MAX_REPLY`. A reply to CB_SEQUENCE and
/// CB_RECALL is a few dozen bytes.
pub const CB_MAX_REPLY: usize = 64 * 1024;
/// The most operations of a CB_COMPOUND decoded, in its arguments or its
/// reply: the server sends two at most (CB_SEQUENCE, then one more).
pub const NFS4_MAX_CB_OPS: u32 = 16;
/// The most referring call lists of a CB_SEQUENCE decoded: one per
/// session of the client (at most 16, design section 4.8).
pub const NFS4_MAX_REFERRING_CALL_LISTS: u32 = 16;

xdr_enum! {
    /// `nfs_cb_opnum4`: the operations of a CB_COMPOUND.
    pub enum CbOpnum4 {
        Getattr = 3,
        Recall = 4,
        Layoutrecall = 5,
        Notify = 6,
        PushDeleg = 7,
        RecallAny = 8,
        RecallableObjAvail = 9,
        RecallSlot = 10,
        Sequence = 11,
        WantsCancelled = 12,
        NotifyLock = 13,
        NotifyDeviceid = 14,
        Offload = 15,
        Illegal = 10044,
    }
}

xdr_struct! {
    /// `referring_call4`: a fore-channel request the callback is about.
    #[derive(Copy)]
    pub struct ReferringCall4 {
        pub sequenceid: u32,
        pub slotid: u32,
    }
}

/// `referring_call_list4`: the referring calls of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferringCallList4 {
    pub sessionid: SessionId4,
    /// `rcl_referring_calls<>`: at most [`NFS4_MAX_ARRAY_ITEMS`] decoded.
    pub referring_calls: Vec<ReferringCall4>,
}

impl Encode for ReferringCallList4 {
    fn encode(&self, enc: &mut Encoder) {
        self.sessionid.encode(enc);
        encode_array(enc, &self.referring_calls);
    }
}

impl Decode<'_> for ReferringCallList4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            sessionid: Decode::decode(dec)?,
            referring_calls: decode_array(dec, NFS4_MAX_ARRAY_ITEMS, 8)?,
        })
    }
}

/// `CB_SEQUENCE4args` (RFC 8881 section 20.9): the back channel's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbSequenceArgs4 {
    pub sessionid: SessionId4,
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub cachethis: bool,
    /// `csa_referring_call_lists<>`: at most
    /// [`NFS4_MAX_REFERRING_CALL_LISTS`] decoded.
    pub referring_call_lists: Vec<ReferringCallList4>,
}

/// The shortest `referring_call_list4`: a session id and no calls.
const REFERRING_CALL_LIST_MIN_LEN: usize = 16 + 4;

impl Encode for CbSequenceArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        self.sessionid.encode(enc);
        enc.u32(self.sequenceid);
        enc.u32(self.slotid);
        enc.u32(self.highest_slotid);
        enc.bool(self.cachethis);
        encode_array(enc, &self.referring_call_lists);
    }
}

impl Decode<'_> for CbSequenceArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            sessionid: Decode::decode(dec)?,
            sequenceid: dec.u32()?,
            slotid: dec.u32()?,
            highest_slotid: dec.u32()?,
            cachethis: dec.bool()?,
            referring_call_lists: decode_array(
                dec,
                NFS4_MAX_REFERRING_CALL_LISTS,
                REFERRING_CALL_LIST_MIN_LEN,
            )?,
        })
    }
}

xdr_struct! {
    /// `CB_SEQUENCE4resok`.
    pub struct CbSequenceResOk4 {
        pub sessionid: SessionId4,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub target_highest_slotid: u32,
    }
}

xdr_struct! {
    /// `CB_RECALL4args` (RFC 8881 section 20.2): give delegation
    /// `stateid` of file `fh` back.
    pub struct CbRecallArgs4 {
        pub stateid: StateId4,
        pub truncate: bool,
        pub fh: NfsFh4,
    }
}

xdr_struct! {
    /// `CB_GETATTR4args` (RFC 8881 section 20.1): the attributes of file
    /// `fh` a write delegation's holder has (size and change).
    pub struct CbGetattrArgs4 {
        pub fh: NfsFh4,
        pub attr_request: Bitmap4,
    }
}

/// One operation of a CB_COMPOUND the server sends (`nfs_cb_argop4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbArgOp {
    Sequence(CbSequenceArgs4),
    Getattr(CbGetattrArgs4),
    Recall(CbRecallArgs4),
}

impl CbArgOp {
    /// The opnum on the wire.
    pub fn opnum(&self) -> CbOpnum4 {
        match self {
            CbArgOp::Sequence(_) => CbOpnum4::Sequence,
            CbArgOp::Getattr(_) => CbOpnum4::Getattr,
            CbArgOp::Recall(_) => CbOpnum4::Recall,
        }
    }
}

impl Encode for CbArgOp {
    fn encode(&self, enc: &mut Encoder) {
        self.opnum().encode(enc);
        match self {
            CbArgOp::Sequence(args) => args.encode(enc),
            CbArgOp::Getattr(args) => args.encode(enc),
            CbArgOp::Recall(args) => args.encode(enc),
        }
    }
}

/// Decodes the operations the server sends; any other is an error (only
/// the test client decodes these).
impl Decode<'_> for CbArgOp {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        match CbOpnum4::decode(dec)? {
            CbOpnum4::Sequence => Ok(CbArgOp::Sequence(Decode::decode(dec)?)),
            CbOpnum4::Getattr => Ok(CbArgOp::Getattr(Decode::decode(dec)?)),
            CbOpnum4::Recall => Ok(CbArgOp::Recall(Decode::decode(dec)?)),
            other => Err(XdrError::BadDiscriminant {
                type_name: "nfs_cb_argop4 not sent by dionfs",
                value: other.as_u32(),
            }),
        }
    }
}

/// `CB_COMPOUND4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompoundArgs4 {
    pub tag: Utf8Str<NFS4_MAX_TAG_LEN>,
    /// The session's minor version.
    pub minorversion: u32,
    /// Meaningless in 4.1 (the session names the client); 0.
    pub callback_ident: u32,
    /// `argarray<>`: at most [`NFS4_MAX_CB_OPS`] decoded.
    pub ops: Vec<CbArgOp>,
}

impl Encode for CbCompoundArgs4 {
    fn encode(&self, enc: &mut Encoder) {
        self.tag.encode(enc);
        enc.u32(self.minorversion);
        enc.u32(self.callback_ident);
        encode_array(enc, &self.ops);
    }
}

impl Decode<'_> for CbCompoundArgs4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            tag: Decode::decode(dec)?,
            minorversion: dec.u32()?,
            callback_ident: dec.u32()?,
            ops: decode_array(dec, NFS4_MAX_CB_OPS, 4)?,
        })
    }
}

/// One result of a CB_COMPOUND reply (`nfs_cb_resop4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbResOp {
    /// `CB_SEQUENCE4res`.
    Sequence(Res4<CbSequenceResOk4>),
    /// `CB_GETATTR4res`: the attributes a delegation holder has.
    Getattr(Res4<Fattr4>),
    /// The result of any other operation, all of which are their status
    /// alone; `opnum` is never `Sequence`, `Getattr` or `Illegal`.
    Status { opnum: CbOpnum4, status: Nfsstat4 },
    /// `CB_ILLEGAL4res`.
    Illegal(Nfsstat4),
}

impl CbResOp {
    /// The opnum on the wire.
    pub fn opnum(&self) -> CbOpnum4 {
        match self {
            CbResOp::Sequence(_) => CbOpnum4::Sequence,
            CbResOp::Getattr(_) => CbOpnum4::Getattr,
            CbResOp::Status { opnum, .. } => *opnum,
            CbResOp::Illegal(_) => CbOpnum4::Illegal,
        }
    }

    /// The operation's status.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            CbResOp::Sequence(res) => res.status(),
            CbResOp::Getattr(res) => res.status(),
            CbResOp::Status { status, .. } | CbResOp::Illegal(status) => *status,
        }
    }
}

impl Encode for CbResOp {
    fn encode(&self, enc: &mut Encoder) {
        self.opnum().encode(enc);
        match self {
            CbResOp::Sequence(res) => res.encode(enc),
            CbResOp::Getattr(res) => res.encode(enc),
            CbResOp::Status { opnum, status } => {
                debug_assert!(
                    !matches!(
                        opnum,
                        CbOpnum4::Sequence | CbOpnum4::Getattr | CbOpnum4::Illegal
                    ),
                    "CbResOp::Status for {opnum:?}"
                );
                status.encode(enc);
            }
            CbResOp::Illegal(status) => status.encode(enc),
        }
    }
}

impl Decode<'_> for CbResOp {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(match CbOpnum4::decode(dec)? {
            CbOpnum4::Sequence => CbResOp::Sequence(Decode::decode(dec)?),
            CbOpnum4::Getattr => CbResOp::Getattr(Decode::decode(dec)?),
            CbOpnum4::Illegal => CbResOp::Illegal(Decode::decode(dec)?),
            opnum => CbResOp::Status {
                opnum,
                status: Decode::decode(dec)?,
            },
        })
    }
}

/// `CB_COMPOUND4res`: the status of the last operation the client ran,
/// the tag, and one result per operation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbCompoundRes4 {
    pub status: Nfsstat4,
    pub tag: Utf8Str<NFS4_MAX_TAG_LEN>,
    /// `resarray<>`: at most [`NFS4_MAX_CB_OPS`] decoded.
    pub results: Vec<CbResOp>,
}

/// The shortest `nfs_cb_resop4`: an opnum and a failure status.
const CB_RESOP_MIN_LEN: usize = 8;

impl Encode for CbCompoundRes4 {
    fn encode(&self, enc: &mut Encoder) {
        self.status.encode(enc);
        self.tag.encode(enc);
        encode_array(enc, &self.results);
    }
}

impl Decode<'_> for CbCompoundRes4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self> {
        Ok(Self {
            status: Decode::decode(dec)?,
            tag: Decode::decode(dec)?,
            results: decode_array(dec, NFS4_MAX_CB_OPS, CB_RESOP_MIN_LEN)?,
        })
    }
}

/// Decodes a client's reply to CB_COMPOUND: `body` is everything after
/// the RPC reply header, and must be one whole `CB_COMPOUND4res` of at
/// most [`CB_MAX_REPLY`] bytes (a longer one is refused unread).
pub fn decode_cb_compound_reply(body: &[u8]) -> std::result::Result<CbCompoundRes4, XdrError> {
    if body.len() > CB_MAX_REPLY {
        return Err(XdrError::TooLong {
            len: u32::try_from(body.len()).unwrap_or(u32::MAX),
            max: CB_MAX_REPLY as u32,
        });
    }
    CbCompoundRes4::from_xdr(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::samples::*;
    use crate::test_util::assert_codec;

    fn cb_sequence() -> CbSequenceArgs4 {
        CbSequenceArgs4 {
            sessionid: SessionId4([3; 16]),
            sequenceid: 1,
            slotid: 0,
            highest_slotid: 0,
            cachethis: false,
            referring_call_lists: vec![
                ReferringCallList4 {
                    sessionid: SessionId4([4; 16]),
                    referring_calls: vec![
                        ReferringCall4 {
                            sequenceid: 7,
                            slotid: 2,
                        },
                        ReferringCall4 {
                            sequenceid: 9,
                            slotid: 0,
                        },
                    ],
                },
                ReferringCallList4 {
                    sessionid: SessionId4([5; 16]),
                    referring_calls: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn cb_compound_args_round_trip() {
        assert_codec(&cb_sequence());
        let args = CbCompoundArgs4 {
            tag: Utf8Str::from("cb"),
            minorversion: 1,
            callback_ident: 0,
            ops: vec![CbArgOp::Sequence(cb_sequence())],
        };
        assert_codec(&args);
        assert_codec(&CbCompoundArgs4 {
            ops: vec![
                CbArgOp::Sequence(cb_sequence()),
                CbArgOp::Recall(CbRecallArgs4 {
                    stateid: StateId4 {
                        seqid: 1,
                        other: [9; 12],
                    },
                    truncate: false,
                    fh: NfsFh4::new(vec![1, 2, 3]).unwrap(),
                }),
            ],
            ..args.clone()
        });
        let getattr = CbCompoundArgs4 {
            ops: vec![CbArgOp::Getattr(CbGetattrArgs4 {
                fh: NfsFh4::new(vec![4, 5]).unwrap(),
                attr_request: Bitmap4::from_bits(&[3, 4]),
            })],
            minorversion: 0,
            callback_ident: 7,
            ..args.clone()
        };
        assert_codec(&getattr);
        // One op, CB_GETATTR (3), the handle, then the bitmap (one word:
        // bits 3 and 4).
        let bytes = getattr.to_xdr();
        assert_eq!(&bytes[12..16], &[0, 0, 0, 7]);
        assert_eq!(
            &bytes[16..32],
            &[0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 2, 4, 5, 0, 0]
        );
        assert_eq!(&bytes[32..], &[0, 0, 0, 1, 0, 0, 0, 0x18]);
        // The head as RFC 8881 section 20 lays it out.
        let bytes = args.to_xdr();
        assert_eq!(&bytes[..8], &[0, 0, 0, 2, b'c', b'b', 0, 0]);
        assert_eq!(&bytes[8..20], &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(&bytes[20..24], &[0, 0, 0, 11]);
    }

    #[test]
    fn cb_compound_replies_round_trip() {
        let ok = CbCompoundRes4 {
            status: Nfsstat4::Ok,
            tag: Utf8Str::from("cb"),
            results: vec![
                CbResOp::Sequence(Res4::Ok(CbSequenceResOk4 {
                    sessionid: SessionId4([3; 16]),
                    sequenceid: 1,
                    slotid: 0,
                    highest_slotid: 0,
                    target_highest_slotid: 0,
                })),
                CbResOp::Status {
                    opnum: CbOpnum4::Recall,
                    status: Nfsstat4::Ok,
                },
                CbResOp::Getattr(Res4::Ok(fattr(8))),
            ],
        };
        assert_codec(&ok);
        assert_eq!(decode_cb_compound_reply(&ok.to_xdr()), Ok(ok));
        assert_codec(&CbCompoundRes4 {
            status: Nfsstat4::BadStateid,
            tag: Utf8Str::default(),
            results: vec![
                CbResOp::Sequence(Res4::Fail(Nfsstat4::Badsession)),
                CbResOp::Illegal(Nfsstat4::OpIllegal),
            ],
        });
    }

    #[test]
    fn cb_bounds_are_errors_before_allocation() {
        let reply = CbCompoundRes4 {
            status: Nfsstat4::Ok,
            tag: Utf8Str::default(),
            results: Vec::new(),
        };
        let mut long = reply.to_xdr();
        long.resize(CB_MAX_REPLY + 1, 0);
        assert_eq!(
            decode_cb_compound_reply(&long),
            Err(XdrError::TooLong {
                len: CB_MAX_REPLY as u32 + 1,
                max: CB_MAX_REPLY as u32
            })
        );
        // Trailing bytes within the bound are bad XDR too.
        let mut trailing = reply.to_xdr();
        trailing.extend_from_slice(&[0; 4]);
        assert_eq!(
            decode_cb_compound_reply(&trailing),
            Err(XdrError::Trailing(4))
        );
        // More results than ever sent, or more than the input holds.
        let mut many = vec![0; 8];
        many.extend_from_slice(&(NFS4_MAX_CB_OPS + 1).to_be_bytes());
        assert!(matches!(
            decode_cb_compound_reply(&many),
            Err(XdrError::TooLong { .. })
        ));
        let mut claimed = vec![0; 8];
        claimed.extend_from_slice(&NFS4_MAX_CB_OPS.to_be_bytes());
        assert!(matches!(
            decode_cb_compound_reply(&claimed),
            Err(XdrError::Truncated { .. })
        ));
        let mut lists = vec![0; 16 + 16];
        lists.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            CbSequenceArgs4::from_xdr(&lists),
            Err(XdrError::TooLong { .. })
        ));
        assert!(CbArgOp::from_xdr(&4u32.to_be_bytes()).is_err());
        assert!(CbResOp::from_xdr(&2u32.to_be_bytes()).is_err());
    }
}
