//! The RPC call header (as the server reads it from a record, and as
//! [`CallHeader::decode`] reads it from a buffer) and the reply header
//! (which the server decodes from the host's rpcbind and from clients'
//! port mappers and lock managers).

use dionfs_rpc::{read_call_header, CallError, CallHeader, Credential, ReplyHeader, ReplyStatus};
use dionfs_rpc::{AuthStat, RecordReader};
use dionfs_xdr::{Decode, Decoder, Encode};

use crate::record::{complete, record_of_fragments};
use crate::{assert_same_but_padding, check_prefix};

/// Target `call_header`: `data` is the start of a call message. Decoded
/// from a buffer and, as the server does, from a record (in one fragment,
/// and in fragments of 7 bytes, which split every field): both must give
/// the same header and leave the same arguments, or the same error. A
/// header re-encodes to the bytes it came from (but for padding, and the
/// body of a credential of a flavor we do not speak, which is dropped) and
/// decodes again to itself. An error's reply, if it has one, is a reply
/// header saying that error.
pub fn call_header(data: &[u8]) {
    let mut dec = Decoder::new(data);
    let from_buffer = CallHeader::decode(&mut dec);
    let used = dec.position();
    match &from_buffer {
        Ok(header) => check_header(header, &data[..used]),
        Err(e) => check_call_error(e),
    }
    for fragment_len in [data.len().max(1), 7] {
        let (from_record, args) = read_from_record(data, fragment_len);
        match (&from_buffer, &from_record) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "buffer and record decode differently");
                assert_eq!(&args, &data[used..], "arguments left differ");
            }
            (Err(a), Err(b)) => assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "buffer and record fail differently"
            ),
            (a, b) => panic!("buffer: {a:?}, record (fragments of {fragment_len}): {b:?}"),
        }
    }
}

/// Reads a call header from `data` framed as one record in fragments of
/// `fragment_len` bytes, as the server does; returns it and the rest of
/// the record (the arguments).
fn read_from_record(data: &[u8], fragment_len: usize) -> (Result<CallHeader, CallError>, Vec<u8>) {
    let stream = record_of_fragments(data, fragment_len);
    let max = u32::try_from(data.len()).expect("fuzz inputs are small");
    let mut reader = RecordReader::new(&stream[..], max);
    assert!(complete(reader.next_record()).expect("a whole record"));
    let header = complete(read_call_header(&mut reader));
    let mut args = Vec::new();
    if header.is_ok() {
        complete(reader.read_to_end(&mut args)).expect("the rest of a whole record");
    }
    (header, args)
}

/// Checks a decoded header against the bytes it came from.
fn check_header(header: &CallHeader, consumed: &[u8]) {
    let encoded = header.to_xdr();
    let mut dec = Decoder::new(&encoded);
    assert_eq!(CallHeader::decode(&mut dec).ok().as_ref(), Some(header));
    assert_eq!(dec.remaining(), 0, "round trip leaves bytes");
    // The credential's length word follows xid, msg_type, rpcvers, prog,
    // vers, proc and its flavor.
    let cred_len = u32::from_be_bytes([consumed[28], consumed[29], consumed[30], consumed[31]]);
    let dropped_body = matches!(header.cred, Credential::Unsupported(_)) && cred_len > 0;
    if !dropped_body {
        assert_same_but_padding(&encoded, consumed);
    }
    if let Credential::Sys(sys) = &header.cred {
        assert!(sys.machine_name.len() <= 255 && sys.gids.len() <= 16);
    }
    assert!(header.verf.body.len() <= 400);
}

/// Checks that an error's reply, if any, says that error.
fn check_call_error(e: &CallError) {
    let expected = match *e {
        CallError::RpcMismatch { xid, .. } => {
            Some((xid, ReplyStatus::RpcMismatch { low: 2, high: 2 }))
        }
        CallError::BadCredential { xid } => Some((xid, ReplyStatus::AuthError(AuthStat::BadCred))),
        CallError::BadVerifier { xid } => Some((xid, ReplyStatus::AuthError(AuthStat::BadVerf))),
        CallError::NotACall { .. } => {
            assert!(e.closes_connection());
            None
        }
        CallError::Truncated => None,
        CallError::Record(_) => panic!("a buffer has no record errors: {e:?}"),
    };
    let reply = e
        .reply()
        .map(|r| ReplyHeader::from_xdr(&r).expect("our reply decodes"));
    assert_eq!(reply.map(|h| (h.xid, h.status)), expected);
}

/// Target `reply_header`: `data` is a reply message; its header (and the
/// verifier of an accepted reply) is decoded and checked like any value
/// ([`check_prefix`]).
pub fn reply_header(data: &[u8]) {
    check_prefix::<ReplyHeader>(data);
}
