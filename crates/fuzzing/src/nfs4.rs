//! NFSv4.1 and 4.2 (RFC 8881, RFC 7862): a COMPOUND's arguments as the
//! server decodes them, one operation at a time; its results as a client
//! decodes them; the attributes a client sets (`fattr4` values against
//! their bitmap); and a client's reply to the server's CB_COMPOUND.

use dionfs_proto::nfs4::*;
use dionfs_proto::{ArgsLimit, Void};
use dionfs_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::{
    assert_same_but_padding, check_error, check_prefix, check_result, check_value, select, Message,
};

/// The most operations the check decodes from one input: enough to reach
/// anything a longer COMPOUND could, and it keeps a huge `numops` from
/// costing time.
const MAX_OPS: u32 = 64;

/// A COMPOUND's arguments: its head, then [`decode_op`] in a loop, as the
/// server's receive loop runs it. Each op takes at least its opnum and
/// at most its `max_args_len`, round-trips (but for padding), decodes the
/// same from exactly the bytes it took, and is `Truncated` one byte
/// short. A WRITE's payload is skipped, as the server receives it apart.
/// An error says something true of the input; `Truncated` always
/// asks for more bytes. The loop ends where the server's would: at an
/// error, or after an op it answers `NOTSUPP` or `OP_ILLEGAL`.
pub fn nfs4_compound(data: &[u8]) {
    let Some((head, used)) = check_prefix::<CompoundHead>(data) else {
        return;
    };
    let minor = head.minorversion;
    let mut rest = &data[used..];
    for _ in 0..head.numops.min(MAX_OPS) {
        match decode_op(rest, minor) {
            Ok((op, used)) => {
                check_op(&op, &rest[..used], minor);
                rest = &rest[used..];
                match op {
                    ArgOp::NotSupp(_) | ArgOp::Illegal(_) => return,
                    // The server receives the payload apart; skip it.
                    ArgOp::Write(head) => match rest.get(head.payload_len()..) {
                        Some(after) => rest = after,
                        None => return,
                    },
                    _ => {}
                }
            }
            Err(e) => {
                check_error(&e, rest.len());
                return;
            }
        }
    }
}

/// Checks one op [`decode_op`] took from exactly `consumed`.
fn check_op(op: &ArgOp, consumed: &[u8], minor: u32) {
    let used = consumed.len();
    let opnum = op.opnum();
    assert!(used >= 4, "{opnum}: took {used} bytes, less than its opnum");
    let limit = match op {
        ArgOp::Illegal(_) => 4,
        _ => match Opnum4::from_u32(opnum)
            .expect("a decoded op has a known opnum")
            .max_args_len()
        {
            ArgsLimit::Whole(n) => n,
            ArgsLimit::HeadThenPayload(n) => {
                assert!(matches!(op, ArgOp::Write(_)), "{opnum} has a payload");
                n
            }
        },
    };
    assert!(
        used <= limit,
        "op {opnum} of {used} bytes decodes, over the limit of {limit}"
    );
    assert_eq!(decode_op(consumed, minor).as_ref(), Ok(&(op.clone(), used)));
    assert!(
        matches!(
            decode_op(&consumed[..used - 1], minor),
            Err(XdrError::Truncated { .. })
        ),
        "op {opnum} one byte short is not truncated"
    );
    let encoded = op.to_xdr();
    assert_same_but_padding(&encoded, consumed);
    assert_eq!(
        decode_op(&encoded, minor),
        Ok((op.clone(), used)),
        "round trip"
    );
}

/// The attributes to set of SETATTR, CREATE or OPEN: a bitmap from the
/// front of the input, then its values ([`decode_settable`]). What
/// decodes re-encodes ([`SetAttrs4::to_fattr`]) to the same bits and the
/// same values but for padding. The bitmap also drives a
/// [`FattrEncoder`].
pub fn nfs4_fattr(data: &[u8]) {
    let mut dec = Decoder::new(data);
    let mask = match Bitmap4::decode(&mut dec) {
        Ok(mask) => mask,
        Err(e) => {
            check_error(&e, data.len());
            return;
        }
    };
    check_fattr_encoder(&mask);
    let vals = dec.rest();
    match decode_settable(&mask, vals) {
        Ok(attrs) => {
            let fattr = attrs.to_fattr();
            assert!(
                fattr.attrmask.bits().eq(mask.bits()),
                "bits {mask:?} re-encode as {:?}",
                fattr.attrmask
            );
            assert_same_but_padding(fattr.attr_vals.as_bytes(), vals);
            assert_eq!(
                decode_settable(&fattr.attrmask, fattr.attr_vals.as_bytes()),
                Ok(attrs),
                "round trip"
            );
        }
        Err(SettableError::Xdr(e)) => check_error(&e, vals.len()),
        Err(SettableError::NotSettable(bit)) => {
            assert!(mask.contains(bit), "refused bit {bit} is not in {mask:?}");
            assert!(!settable(bit), "settable bit {bit} refused");
        }
    }
}

/// [`FattrEncoder`] asked for `request`, with values for every other
/// attribute: the bitmap it returns holds those, and their values in bit
/// order.
fn check_fattr_encoder(request: &Bitmap4) {
    let supported = |bit: u32| bit.is_multiple_of(2);
    let fattr = FattrEncoder::encode(request, |bit, enc| {
        if supported(bit) {
            enc.u32(bit);
        }
        supported(bit)
    });
    let want: Vec<u32> = request.bits().filter(|&b| supported(b)).collect();
    assert_eq!(fattr.attrmask.bits().collect::<Vec<_>>(), want);
    let vals: Vec<u8> = want.iter().flat_map(|b| b.to_be_bytes()).collect();
    assert_eq!(fattr.attr_vals.as_bytes(), vals);
}

/// Whether dionfs sets the attribute numbered `bit`.
fn settable(bit: u32) -> bool {
    [
        Attr4::Size,
        Attr4::Mode,
        Attr4::Owner,
        Attr4::OwnerGroup,
        Attr4::TimeAccessSet,
        Attr4::TimeModifySet,
    ]
    .iter()
    .any(|a| a.bit() == bit)
}

/// Each result a client decodes, by the op whose result it is (one
/// entry per result type; `status` stands for every op whose result is
/// its status alone), then a whole COMPOUND reply.
pub(crate) const RESULTS: &[Message] = &[
    Message {
        name: "COMPOUND",
        check: compound_result,
    },
    Message {
        name: "status",
        check: check_result::<Nfsstat4>,
    },
    Message {
        name: "ACCESS",
        check: check_result::<Res4<AccessResOk4>>,
    },
    Message {
        name: "BIND_CONN_TO_SESSION",
        check: check_result::<Res4<BindConnToSessionResOk4>>,
    },
    Message {
        name: "CLOSE",
        check: check_result::<Res4<StateId4>>,
    },
    Message {
        name: "COMMIT",
        check: check_result::<Res4<CommitResOk4>>,
    },
    Message {
        name: "COPY",
        check: check_result::<CopyRes4>,
    },
    Message {
        name: "CREATE",
        check: check_result::<Res4<CreateResOk4>>,
    },
    Message {
        name: "CREATE_SESSION",
        check: check_result::<Res4<CreateSessionResOk4>>,
    },
    Message {
        name: "EXCHANGE_ID",
        check: check_result::<Res4<ExchangeIdResOk4>>,
    },
    Message {
        name: "GETATTR",
        check: check_result::<Res4<GetattrResOk4>>,
    },
    Message {
        name: "GETFH",
        check: check_result::<Res4<GetfhResOk4>>,
    },
    Message {
        name: "GETXATTR",
        check: check_result::<Res4<XattrValue4>>,
    },
    Message {
        name: "LINK",
        check: check_result::<Res4<ChangeInfo4>>,
    },
    Message {
        name: "LISTXATTRS",
        check: check_result::<Res4<ListxattrsResOk4>>,
    },
    Message {
        name: "LOCK",
        check: check_result::<LockRes4<StateId4>>,
    },
    Message {
        name: "LOCKT",
        check: check_result::<LockRes4<Void>>,
    },
    Message {
        name: "OPEN",
        check: check_result::<Res4<OpenResOk4>>,
    },
    Message {
        name: "READ",
        check: read_result,
    },
    Message {
        name: "READ_PLUS",
        check: read_plus_result,
    },
    Message {
        name: "READDIR",
        check: check_result::<Res4<ReaddirResOk4>>,
    },
    Message {
        name: "READLINK",
        check: check_result::<Res4<Linktext4>>,
    },
    Message {
        name: "RENAME",
        check: check_result::<Res4<RenameResOk4>>,
    },
    Message {
        name: "SECINFO",
        check: check_result::<Res4<SecinfoResOk4>>,
    },
    Message {
        name: "SEEK",
        check: check_result::<Res4<SeekResOk4>>,
    },
    Message {
        name: "SEQUENCE",
        check: check_result::<Res4<SequenceResOk4>>,
    },
    Message {
        name: "SETATTR",
        check: check_result::<SetattrRes4>,
    },
    Message {
        name: "TEST_STATEID",
        check: check_result::<Res4<TestStateidResOk4>>,
    },
    Message {
        name: "WRITE",
        check: check_result::<Res4<WriteResOk4>>,
    },
];

/// Target `nfs4_results`: `data[0]` picks the result (see [`RESULTS`]),
/// the rest is its encoding. Each is decoded as a client does, re-encoded
/// and compared (but for padding). The server writes READ and READ_PLUS
/// by their heads, so for those the heads and segments it writes must
/// equal what the client decoded.
pub fn nfs4_results(data: &[u8]) {
    select(RESULTS, data);
}

/// A COMPOUND reply: its head, then each result ([`ResOp`]) in turn, as
/// a client reads them.
fn compound_result(bytes: &[u8]) {
    let Some((head, used)) = check_prefix::<CompoundResHead>(bytes) else {
        return;
    };
    let mut rest = &bytes[used..];
    for _ in 0..head.numres.min(MAX_OPS) {
        match check_prefix::<ResOp>(rest) {
            Some((_, used)) => rest = &rest[used..],
            None => return,
        }
    }
}

/// READ's result, and the server's way of writing it: the head, then the
/// data and its padding.
fn read_result(bytes: &[u8]) {
    let Some((Res4::Ok(ok), used)) = check_prefix::<Res4<ReadResOk4>>(bytes) else {
        return;
    };
    let mut enc = Encoder::new();
    Nfsstat4::Ok.encode(&mut enc);
    encode_read_ok_head(&mut enc, ok.eof, data_len(&ok.data));
    enc.opaque_fixed(&ok.data);
    assert_same_but_padding(enc.as_slice(), &bytes[..used]);
}

/// READ_PLUS's result, and the server's way of writing it: the head,
/// then each segment, a data segment's payload written apart.
fn read_plus_result(bytes: &[u8]) {
    let Some((Res4::Ok(ok), used)) = check_prefix::<Res4<ReadPlusResOk4>>(bytes) else {
        return;
    };
    let mut enc = Encoder::new();
    Nfsstat4::Ok.encode(&mut enc);
    let segments = u32::try_from(ok.contents.len()).expect("segments bounded when decoded");
    encode_read_plus_head(&mut enc, ok.eof, segments);
    for segment in &ok.contents {
        match segment {
            ReadPlusContent4::Hole(hole) => {
                encode_read_plus_hole(&mut enc, hole.offset, hole.length)
            }
            ReadPlusContent4::Data(data) => {
                encode_read_plus_data_head(&mut enc, data.offset, data_len(&data.data));
                enc.opaque_fixed(&data.data);
            }
        }
    }
    assert_same_but_padding(enc.as_slice(), &bytes[..used]);
}

/// The length word of decoded data, which fits one: it came from one.
fn data_len(data: &[u8]) -> u32 {
    u32::try_from(data.len()).expect("decoded from a length word")
}

/// Target `nfs4_callback`: a client's reply to CB_COMPOUND, the body
/// after the RPC reply header, as the server decodes it
/// ([`decode_cb_compound_reply`]): a whole `CB_COMPOUND4res` of at most
/// [`CB_MAX_REPLY`] bytes, which re-encodes to the same bytes (but for
/// padding).
pub fn nfs4_callback(data: &[u8]) {
    match decode_cb_compound_reply(data) {
        Ok(reply) => {
            assert!(data.len() <= CB_MAX_REPLY, "a reply over the bound decoded");
            assert!(
                reply.results.len() <= NFS4_MAX_CB_OPS as usize,
                "{} results decoded",
                reply.results.len()
            );
            check_value(&reply, data);
        }
        Err(e) => check_error(&e, data.len()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::seeds;

    /// The opnums whose ops `decode_op` decodes at `minor`: those that
    /// ask for arguments after their opnum, and those without arguments,
    /// not those it answers `NOTSUPP` or `OP_ILLEGAL`.
    fn decoded_ops(minor: u32) -> BTreeSet<u32> {
        (0..=u32::from(u8::MAX))
            .filter(|op| match decode_op(&op.to_be_bytes(), minor) {
                Err(XdrError::Truncated { .. }) => true,
                Ok((ArgOp::NotSupp(_) | ArgOp::Illegal(_), _)) => false,
                Ok(_) => true,
                Err(_) => false,
            })
            .collect()
    }

    /// The opnums of each op in the COMPOUND `data`, as the target reads
    /// them.
    fn ops_of(data: &[u8]) -> Vec<u32> {
        let Some((head, used)) = check_prefix::<CompoundHead>(data) else {
            return Vec::new();
        };
        let mut rest = &data[used..];
        let mut found = Vec::new();
        for _ in 0..head.numops.min(MAX_OPS) {
            let Ok((op, used)) = decode_op(rest, head.minorversion) else {
                break;
            };
            found.push(op.opnum());
            rest = &rest[used..];
            if let ArgOp::Write(head) = op {
                match rest.get(head.payload_len()..) {
                    Some(after) => rest = after,
                    None => break,
                }
            }
        }
        found
    }

    /// Every op the server decodes has a seed that reaches it, so that
    /// the fuzzer starts from each one's arguments.
    #[test]
    fn every_decoded_op_has_a_compound_seed() {
        let seeded: BTreeSet<u32> = seeds::all()
            .iter()
            .filter(|s| s.target == "nfs4_compound")
            .flat_map(|s| ops_of(&s.bytes))
            .collect();
        let decoded = decoded_ops(2);
        // RFC 8881's and RFC 7862's ops but those dionfs answers NOTSUPP.
        assert!(decoded.len() > 50, "{decoded:?}");
        let missing: Vec<_> = decoded.difference(&seeded).collect();
        assert!(missing.is_empty(), "ops without a seed: {missing:?}");
    }

    /// Every result a client decodes has a seed.
    #[test]
    fn every_result_has_a_seed() {
        let seeded: BTreeSet<u8> = seeds::all()
            .iter()
            .filter(|s| s.target == "nfs4_results")
            .filter_map(|s| s.bytes.first().copied())
            .collect();
        for m in RESULTS {
            let sel = crate::selector(RESULTS, m.name);
            assert!(seeded.contains(&sel), "no seed of {}", m.name);
        }
    }
}
