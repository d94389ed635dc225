//! NFSv4.1 and 4.2 (RFC 8881, RFC 7862): a COMPOUND's arguments as the
//! server decodes them, one operation at a time, and the attributes a
//! client sets (`fattr4` values against their bitmap).

use dionfs_proto::nfs4::*;
use dionfs_proto::ArgsLimit;
use dionfs_xdr::{Decode, Decoder, Encode, XdrError};

use crate::{assert_same_but_padding, check_error, check_prefix};

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
