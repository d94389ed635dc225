//! What the fuzz targets in `fuzz/` check, as plain functions: one
//! `pub fn TARGET(data: &[u8])` per target, which feeds `data` to a decoder
//! the network reaches and panics if a property fails. libFuzzer (through
//! `cargo +nightly fuzz run TARGET`) calls them with generated inputs;
//! `tests/corpus.rs` replays the committed corpus through them on stable,
//! under `cargo test --workspace`.
//!
//! Every target checks that decoding never panics and never hangs (a
//! panic is a failed target; `record` also checks that what is taken for
//! a record stays within the reader's limits, and under libFuzzer any
//! allocation over `-malloc_limit_mb`, 2 GiB by default, fails a target),
//! and where the type also encodes:
//!
//! - `decode(encode(x)) == x` for every value `x` the decoder produced, and
//! - `encode(decode(bytes)) == bytes` for the bytes it consumed, except
//!   inside XDR padding: RFC 4506 section 4.10 says padding is zero, but
//!   our decoders (like the Linux kernel's) skip it unread, so an input
//!   with other padding decodes and re-encodes with zeros. Booleans and
//!   enum discriminants are canonical: the decoders refuse any value but
//!   the defined ones.
//!
//! Protocol targets start with a selector byte that picks the message
//! (a procedure's arguments or a result) to decode from the rest; see
//! [`select`]. [`seeds`] builds the seed corpus (valid encodings of
//! typical messages, plus edge cases).

use std::fmt::Debug;

use dionfs_xdr::{Decode, Decoder, Encode, XdrError};

mod mount3;
mod nfs3;
mod nfs4;
mod nlm4;
mod nsm;
mod portmap;
mod record;
mod rpc;
pub mod seeds;
mod xdr;

pub use mount3::mount3;
pub use nfs3::{nfs3_args, nfs3_readdir_reply, nfs3_results};
pub use nfs4::{nfs4_callback, nfs4_compound, nfs4_fattr, nfs4_results};
pub use nlm4::nlm4;
pub use nsm::nsm;
pub use portmap::portmap;
pub use record::record;
pub use rpc::{call_header, reply_header};
pub use xdr::xdr;

/// A fuzz target.
pub struct Target {
    /// The name of its cargo-fuzz target, `fuzz/fuzz_targets/NAME.rs`, and
    /// of its corpus, `fuzz/corpus/NAME/`.
    pub name: &'static str,
    /// What it runs on each input.
    pub run: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "xdr",
        run: xdr,
    },
    Target {
        name: "record",
        run: record,
    },
    Target {
        name: "call_header",
        run: call_header,
    },
    Target {
        name: "reply_header",
        run: reply_header,
    },
    Target {
        name: "nfs3_args",
        run: nfs3_args,
    },
    Target {
        name: "nfs3_results",
        run: nfs3_results,
    },
    Target {
        name: "nfs3_readdir_reply",
        run: nfs3_readdir_reply,
    },
    Target {
        name: "nfs4_compound",
        run: nfs4_compound,
    },
    Target {
        name: "nfs4_results",
        run: nfs4_results,
    },
    Target {
        name: "nfs4_fattr",
        run: nfs4_fattr,
    },
    Target {
        name: "nfs4_callback",
        run: nfs4_callback,
    },
    Target {
        name: "mount3",
        run: mount3,
    },
    Target {
        name: "nlm4",
        run: nlm4,
    },
    Target {
        name: "nsm",
        run: nsm,
    },
    Target {
        name: "portmap",
        run: portmap,
    },
];

/// The function of the target called `name`.
pub fn target(name: &str) -> Option<fn(&[u8])> {
    TARGETS.iter().find(|t| t.name == name).map(|t| t.run)
}

/// One message a protocol target can decode: a name for seeds and reports,
/// and the check to run on its encoding.
pub struct Message {
    pub name: &'static str,
    pub check: fn(&[u8]),
}

/// Runs the check of the message `data[0]` selects (modulo the number of
/// messages) on the rest of `data`.
pub fn select(messages: &[Message], data: &[u8]) {
    if let Some((&selector, rest)) = data.split_first() {
        (messages[usize::from(selector) % messages.len()].check)(rest);
    }
}

/// The selector byte of the message called `name` (for seeds).
///
/// Panics if there is none: a seed naming a message that does not exist is
/// a bug in the seeds.
pub fn selector(messages: &[Message], name: &str) -> u8 {
    let index = messages.iter().position(|m| m.name == name);
    let index = index.unwrap_or_else(|| panic!("no message {name}"));
    u8::try_from(index).expect("fewer than 256 messages")
}

/// Decodes a `T` from the front of `bytes`, as the server decodes
/// arguments, and checks it (see [`check_value`]). Returns the value and
/// the number of bytes it took, or `None` if `bytes` does not decode.
pub fn check_prefix<T>(bytes: &[u8]) -> Option<(T, usize)>
where
    T: Encode + for<'a> Decode<'a> + PartialEq + Debug,
{
    let mut dec = Decoder::new(bytes);
    match T::decode(&mut dec) {
        Ok(value) => {
            let used = dec.position();
            check_value(&value, &bytes[..used]);
            Some((value, used))
        }
        Err(e) => {
            check_error(&e, bytes.len());
            None
        }
    }
}

/// [`check_prefix`] as a message check, for results (which have no limit).
pub fn check_result<T>(bytes: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + Debug,
{
    check_prefix::<T>(bytes);
}

/// Arguments of a procedure whose longest encoding is `max` bytes, decoded
/// from the front of `bytes` and checked ([`check_prefix`]). The server
/// reads at most `max` bytes of arguments (a longer rest of the record is
/// refused unread), so what a valid value takes must fit in `max`.
pub fn check_args<T>(bytes: &[u8], max: usize, procedure: impl Debug)
where
    T: Encode + for<'a> Decode<'a> + PartialEq + Debug,
{
    if let Some((_, used)) = check_prefix::<T>(bytes) {
        assert!(
            used <= max,
            "{procedure:?} arguments of {used} bytes decode, over the limit of {max}"
        );
    }
}

/// Checks a value decoded from exactly `consumed`: it decodes from those
/// bytes alone with nothing left over, it re-encodes to them (but for
/// padding), and its encoding decodes back to it.
pub fn check_value<T>(value: &T, consumed: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + Debug,
{
    assert_eq!(T::from_xdr(consumed).as_ref(), Ok(value), "strict decode");
    let encoded = value.to_xdr();
    assert_same_but_padding(&encoded, consumed);
    assert_eq!(T::from_xdr(&encoded).as_ref(), Ok(value), "round trip");
}

/// Checks that `encoded` (our encoder's output) equals `consumed` (what
/// the decoder took) except in XDR padding: a byte may differ only if it
/// is not the first of its 4-byte word and the re-encoding has zeros from
/// it to the end of the word (padding follows at least one data byte and
/// fills its word, RFC 4506 section 4.10).
pub fn assert_same_but_padding(encoded: &[u8], consumed: &[u8]) {
    assert_eq!(
        encoded.len(),
        consumed.len(),
        "re-encoding has another length\n encoded: {encoded:02x?}\nconsumed: {consumed:02x?}"
    );
    for (i, (e, c)) in encoded.iter().zip(consumed).enumerate() {
        if e == c {
            continue;
        }
        let word_end = (i | 3) + 1;
        assert!(
            i % 4 != 0 && encoded[i..word_end].iter().all(|&b| b == 0),
            "re-encoding differs at byte {i}, not in padding\n encoded: {encoded:02x?}\nconsumed: {consumed:02x?}"
        );
    }
}

/// Checks that a decoding error of an input of `input_len` bytes says
/// something true of it.
pub fn check_error(e: &XdrError, input_len: usize) {
    match *e {
        XdrError::Truncated { needed, available } => {
            assert!(needed > available, "{e}");
            assert!(available <= input_len, "{e}");
        }
        XdrError::TooLong { len, max } => assert!(len > max, "{e}"),
        XdrError::BadBool(v) => assert!(v > 1, "{e}"),
        XdrError::Trailing(n) => assert!(n > 0 && n <= input_len, "{e}"),
        XdrError::BadDiscriminant { .. } => {}
    }
}
