//! The XDR primitives (RFC 4506) of `dionfs-xdr`, one after another.

use dionfs_xdr::{pad_len, Decode, Decoder, Encoder};

use crate::{assert_same_but_padding, check_error};

/// Lengths and maxima the high half of an operation byte picks from.
const SIZES: [u32; 16] = [
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    15,
    16,
    64,
    255,
    256,
    1024,
    4096,
    u32::MAX,
];

/// One decoded item, to be encoded again.
#[derive(Debug, PartialEq)]
enum Item<'a> {
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    Bool(bool),
    Fixed(&'a [u8]),
    Var(&'a [u8]),
    Len(u32),
    OptionalU64(Option<u64>),
    OptionalVar(Option<&'a [u8]>),
}

impl Item<'_> {
    fn encode(&self, enc: &mut Encoder) {
        match *self {
            Item::U32(v) => enc.u32(v),
            Item::I32(v) => enc.i32(v),
            Item::U64(v) => enc.u64(v),
            Item::I64(v) => enc.i64(v),
            Item::Bool(v) => enc.bool(v),
            Item::Fixed(b) => enc.opaque_fixed(b),
            Item::Var(b) => enc.opaque_var(b),
            Item::Len(n) => enc.u32(n),
            Item::OptionalU64(v) => enc.optional(v.as_ref(), |e, &v| e.u64(v)),
            Item::OptionalVar(v) => enc.optional(v.as_ref(), |e, b| e.opaque_var(b)),
        }
    }

    /// Bytes the item takes on the wire.
    fn wire_len(&self) -> usize {
        let var = |b: &[u8]| 4 + b.len() + pad_len(b.len());
        match *self {
            Item::U32(_) | Item::I32(_) | Item::Bool(_) | Item::Len(_) => 4,
            Item::U64(_) | Item::I64(_) => 8,
            Item::Fixed(b) => b.len() + pad_len(b.len()),
            Item::Var(b) => var(b),
            Item::OptionalU64(v) => 4 + v.map_or(0, |_| 8),
            Item::OptionalVar(v) => 4 + v.map_or(0, var),
        }
    }
}

/// Decodes the item `op` names: its low four bits the primitive (0 to 14;
/// see the arms), its high four bits a length or maximum from [`SIZES`].
fn decode<'a>(op: u8, dec: &mut Decoder<'a>) -> dionfs_xdr::Result<Item<'a>> {
    let size = SIZES[usize::from(op >> 4)];
    Ok(match op & 0x0f {
        0 => Item::U32(dec.u32()?),
        1 => Item::I32(dec.i32()?),
        2 => Item::U64(dec.u64()?),
        3 => Item::I64(dec.i64()?),
        4 => Item::Bool(dec.bool()?),
        5 => Item::Fixed(dec.opaque_fixed(size as usize)?),
        6 => Item::Var(dec.opaque_var(size)?),
        7 => Item::Var(dec.string(size)?),
        8 => {
            let len = dec.opaque_len(size)?;
            assert!(len <= size, "opaque_len {len} over {size}");
            Item::Len(len)
        }
        9 => Item::OptionalU64(dec.optional(Decoder::u64)?),
        10 => Item::OptionalVar(dec.optional(|d| d.opaque_var(size))?),
        // The Decode impls of the integer types.
        11 => Item::U32(u32::decode(dec)?),
        12 => Item::I32(i32::decode(dec)?),
        13 => Item::U64(u64::decode(dec)?),
        // 14; 15 (FINISH) decodes nothing and is handled by the caller.
        _ => Item::Bool(bool::decode(dec)?),
    })
}

/// The operation that checks `Decoder::finish` instead of decoding.
const FINISH: u8 = 15;

/// Target `xdr`: a sequence of operations, each one byte naming a
/// primitive ([`decode`]) followed by that primitive's encoding. Each item
/// decoded takes exactly its wire length, re-encodes to the bytes it took
/// (but for padding), and decodes again to itself; a failure is an error
/// that says something true. The sequence stops at the first failure.
pub fn xdr(data: &[u8]) {
    let mut input = data;
    while let Some((&op, rest)) = input.split_first() {
        let mut dec = Decoder::new(rest);
        if op & 0x0f == FINISH {
            match dec.finish() {
                Ok(()) => assert!(rest.is_empty()),
                Err(e) => check_error(&e, rest.len()),
            }
            input = rest;
            continue;
        }
        match decode(op, &mut dec) {
            Ok(item) => {
                let used = dec.position();
                assert_eq!(used, item.wire_len(), "{item:?} took {used} bytes");
                let mut enc = Encoder::new();
                item.encode(&mut enc);
                assert_same_but_padding(enc.as_slice(), &rest[..used]);
                let again = decode(op, &mut Decoder::new(enc.as_slice()));
                assert_eq!(again.as_ref(), Ok(&item), "round trip");
                input = &rest[used..];
            }
            Err(e) => {
                check_error(&e, rest.len());
                break;
            }
        }
    }
}
