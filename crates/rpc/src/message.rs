//! The RPC call header (RFC 5531 section 9). Its credentials (AUTH_NONE,
//! AUTH_SYS) are `auth.rs`'s, re-exported here.
//!
//! A call header is read from a [`RecordReader`] with a few exact reads into
//! stack buffers, so the reader stays positioned on the first byte of the
//! procedure's arguments. Every malformed header is a typed [`CallError`];
//! [`CallError::reply`] says what (if anything) to answer.

use dionfs_xdr::{Decoder, Encode, Encoder, XdrError};
use thiserror::Error;
use tokio::io::AsyncRead;

pub use crate::auth::{
    AuthSys, Credential, OpaqueAuth, AUTH_NONE, AUTH_SYS, AUTH_TLS, MAX_AUTH_BYTES,
    MAX_AUTH_SYS_GIDS, MAX_MACHINE_NAME,
};
use crate::record::{RecordError, RecordReader};
use crate::reply::{self, AuthStat};
pub use crate::{MSG_CALL, MSG_REPLY, RPC_VERSION};

/// xid, msg_type, rpcvers, prog, vers, proc, cred flavor, cred length.
const FIXED_LEN: usize = 32;

/// The header of an RPC call: everything before the procedure's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    /// Program number (e.g. 100003 for NFS).
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub proc_: u32,
    pub cred: Credential,
    pub verf: OpaqueAuth,
}

/// Why a call header was refused.
#[derive(Debug, Error)]
pub enum CallError {
    /// The stream failed or the record is too large: close the connection.
    #[error(transparent)]
    Record(RecordError),
    /// The record ended inside the call header. Nothing sensible can be
    /// answered; the record is dropped.
    #[error("record ended inside the call header")]
    Truncated,
    /// The message is a reply (or garbage): a server never expects one on
    /// this connection, so it is closed.
    #[error("xid {xid}: msg_type {msg_type} is not a call")]
    NotACall { xid: u32, msg_type: u32 },
    /// The caller speaks another RPC version: answer RPC_MISMATCH(2, 2).
    #[error("xid {xid}: RPC version {rpcvers} not supported")]
    RpcMismatch { xid: u32, rpcvers: u32 },
    /// The credential is malformed (bad AUTH_SYS, AUTH_NONE with a body, or
    /// longer than MAX_AUTH_BYTES): answer AUTH_ERROR(AUTH_BADCRED).
    #[error("xid {xid}: malformed credential")]
    BadCredential { xid: u32 },
    /// The verifier is longer than MAX_AUTH_BYTES: answer
    /// AUTH_ERROR(AUTH_BADVERF).
    #[error("xid {xid}: malformed verifier")]
    BadVerifier { xid: u32 },
}

impl CallError {
    /// True if the connection cannot go on: its stream position or its
    /// peer cannot be trusted any more.
    pub fn closes_connection(&self) -> bool {
        matches!(self, CallError::Record(_) | CallError::NotACall { .. })
    }

    /// The reply message (without record mark) to send for this error, if
    /// any. The rest of the record must be skipped either way.
    pub fn reply(&self) -> Option<Vec<u8>> {
        let mut enc = Encoder::with_capacity(32);
        match *self {
            CallError::RpcMismatch { xid, .. } => reply::rpc_mismatch(&mut enc, xid),
            CallError::BadCredential { xid } => reply::auth_error(&mut enc, xid, AuthStat::BadCred),
            CallError::BadVerifier { xid } => reply::auth_error(&mut enc, xid, AuthStat::BadVerf),
            CallError::Record(_) | CallError::Truncated | CallError::NotACall { .. } => {
                return None
            }
        }
        Some(enc.into_vec())
    }
}

impl From<RecordError> for CallError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::PastEnd => CallError::Truncated,
            other => CallError::Record(other),
        }
    }
}

/// The fixed-size start of a call header.
struct Fixed {
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred_flavor: u32,
    cred_len: u32,
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Any XDR failure inside the header means the record ended too early.
fn truncated(_: XdrError) -> CallError {
    CallError::Truncated
}

/// Decodes and checks the fixed start of a call: msg_type, then rpcvers,
/// then the credential length. Checks in wire order, so that even a record
/// too short to hold a whole call gets the right answer (a 24-byte reply is
/// still recognised as a reply).
fn parse_fixed(d: &mut Decoder<'_>) -> Result<Fixed, CallError> {
    let xid = d.u32().map_err(truncated)?;
    let msg_type = d.u32().map_err(truncated)?;
    if msg_type != MSG_CALL {
        return Err(CallError::NotACall { xid, msg_type });
    }
    let rpcvers = d.u32().map_err(truncated)?;
    if rpcvers != RPC_VERSION {
        return Err(CallError::RpcMismatch { xid, rpcvers });
    }
    let prog = d.u32().map_err(truncated)?;
    let vers = d.u32().map_err(truncated)?;
    let proc_ = d.u32().map_err(truncated)?;
    let cred_flavor = d.u32().map_err(truncated)?;
    let cred_len = d.u32().map_err(truncated)?;
    if cred_len > MAX_AUTH_BYTES {
        return Err(CallError::BadCredential { xid });
    }
    Ok(Fixed {
        xid,
        prog,
        vers,
        proc_,
        cred_flavor,
        cred_len,
    })
}

fn parse_credential(xid: u32, flavor: u32, body: &[u8]) -> Result<Credential, CallError> {
    match flavor {
        // RFC 5531 section 10.1: the AUTH_NONE body is empty.
        AUTH_NONE if body.is_empty() => Ok(Credential::None),
        AUTH_NONE => Err(CallError::BadCredential { xid }),
        AUTH_SYS => AuthSys::decode_body(body)
            .map(Credential::Sys)
            .map_err(|_| CallError::BadCredential { xid }),
        // RFC 9289 section 4.1: the AUTH_TLS body is empty too (knfsd's
        // svcauth_tls_accept refuses any other with AUTH_BADCRED).
        AUTH_TLS if body.is_empty() => Ok(Credential::Unsupported(AUTH_TLS)),
        AUTH_TLS => Err(CallError::BadCredential { xid }),
        other => Ok(Credential::Unsupported(other)),
    }
}

/// `len` rounded up to the XDR 4-byte unit. Only called with lengths
/// already checked against MAX_AUTH_BYTES.
fn padded(len: u32) -> usize {
    let len = len as usize;
    len + dionfs_xdr::pad_len(len)
}

/// `read_exact` where the record ending early means a truncated header.
async fn read_header_bytes<R: AsyncRead + Unpin>(
    r: &mut RecordReader<R>,
    buf: &mut [u8],
) -> Result<(), CallError> {
    r.read_exact(buf).await.map_err(CallError::from)
}

/// The start of a message read by [`read_message_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageStart {
    /// A call's header; the record is positioned at its arguments.
    Call(CallHeader),
    /// A reply (to a call the reader's side made, if any): its xid, and
    /// `start`, the bytes of the record read so far (its first 32 at most,
    /// xid and msg_type included). The rest of the record is still to be
    /// read or skipped.
    Reply { xid: u32, start: Vec<u8> },
}

/// Reads a call header from the current record, leaving `r` at the first
/// byte of the arguments. Uses three or four exact reads into stack buffers.
pub async fn read_call_header<R: AsyncRead + Unpin>(
    r: &mut RecordReader<R>,
) -> Result<CallHeader, CallError> {
    match read_message_header(r).await? {
        MessageStart::Call(call) => Ok(call),
        MessageStart::Reply { xid, .. } => Err(CallError::NotACall {
            xid,
            msg_type: MSG_REPLY,
        }),
    }
}

/// [`read_call_header`] for a peer that may also answer calls made on its
/// connection (a back channel): a reply is returned with the bytes of it
/// already read, rather than refused as [`CallError::NotACall`]. Any other
/// message type still is.
pub async fn read_message_header<R: AsyncRead + Unpin>(
    r: &mut RecordReader<R>,
) -> Result<MessageStart, CallError> {
    let mut fixed = [0u8; FIXED_LEN];
    let n = r.read_up_to(&mut fixed).await.map_err(CallError::from)?;
    let f = match parse_fixed(&mut Decoder::new(&fixed[..n])) {
        Err(CallError::NotACall {
            xid,
            msg_type: MSG_REPLY,
        }) => {
            return Ok(MessageStart::Reply {
                xid,
                start: fixed[..n].to_vec(),
            })
        }
        parsed => parsed?,
    };

    // Credential body, then the verifier's flavor and length, in one read.
    const AUTH_BUF: usize = MAX_AUTH_BYTES as usize + 8;
    let mut buf = [0u8; AUTH_BUF];
    let cred_end = padded(f.cred_len);
    read_header_bytes(r, &mut buf[..cred_end + 8]).await?;
    let cred = parse_credential(f.xid, f.cred_flavor, &buf[..f.cred_len as usize])?;
    let verf_flavor = be_u32(&buf, cred_end);
    let verf_len = be_u32(&buf, cred_end + 4);
    if verf_len > MAX_AUTH_BYTES {
        return Err(CallError::BadVerifier { xid: f.xid });
    }
    let verf_end = padded(verf_len);
    read_header_bytes(r, &mut buf[..verf_end]).await?;
    Ok(MessageStart::Call(CallHeader {
        xid: f.xid,
        prog: f.prog,
        vers: f.vers,
        proc_: f.proc_,
        cred,
        verf: OpaqueAuth {
            flavor: verf_flavor,
            body: buf[..verf_len as usize].to_vec(),
        },
    }))
}

impl CallHeader {
    /// Decodes a call header from a buffer holding (at least) the whole
    /// header; the decoder is left at the first byte of the arguments.
    /// Same checks as [`read_call_header`].
    pub fn decode(dec: &mut Decoder<'_>) -> Result<Self, CallError> {
        let f = parse_fixed(dec)?;
        // The verifier's flavor and length before the credential is
        // parsed, as `read_call_header` reads them in one go with its
        // body: a header that ends there is truncated, whatever the
        // credential says.
        let body = dec.opaque_fixed(f.cred_len as usize).map_err(truncated)?;
        let verf_flavor = dec.u32().map_err(truncated)?;
        let verf_len = dec.u32().map_err(truncated)?;
        let cred = parse_credential(f.xid, f.cred_flavor, body)?;
        if verf_len > MAX_AUTH_BYTES {
            return Err(CallError::BadVerifier { xid: f.xid });
        }
        let verf_body = dec.opaque_fixed(verf_len as usize).map_err(truncated)?;
        Ok(CallHeader {
            xid: f.xid,
            prog: f.prog,
            vers: f.vers,
            proc_: f.proc_,
            cred,
            verf: OpaqueAuth {
                flavor: verf_flavor,
                body: verf_body.to_vec(),
            },
        })
    }
}

impl Encode for CallHeader {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.xid);
        enc.u32(MSG_CALL);
        enc.u32(RPC_VERSION);
        enc.u32(self.prog);
        enc.u32(self.vers);
        enc.u32(self.proc_);
        self.cred.encode(enc);
        self.verf.encode(enc);
    }
}

/// The header of a call (AUTH_NONE verifier), for clients and tests; the
/// caller appends the arguments.
pub fn encode_call(xid: u32, prog: u32, vers: u32, proc_: u32, cred: &Credential) -> Vec<u8> {
    CallHeader {
        xid,
        prog,
        vers,
        proc_,
        cred: cred.clone(),
        verf: OpaqueAuth::none(),
    }
    .to_xdr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::record_mark;
    use dionfs_xdr::Decode;
    use proptest::prelude::*;

    fn sys_cred() -> Credential {
        Credential::Sys(AuthSys {
            stamp: 7,
            machine_name: b"client-a".to_vec(),
            uid: 1000,
            gid: 100,
            gids: vec![4, 24, 27],
        })
    }

    /// `msg` as a single-fragment record.
    fn framed(msg: &[u8]) -> Vec<u8> {
        let len = u32::try_from(msg.len()).expect("test message fits u32");
        let mut out = record_mark(len, true).to_vec();
        out.extend_from_slice(msg);
        out
    }

    async fn read_framed(msg: &[u8]) -> (Result<CallHeader, CallError>, Vec<u8>) {
        let bytes = framed(msg);
        let mut r = RecordReader::new(&bytes[..], 1 << 20);
        assert!(r.next_record().await.unwrap());
        let h = read_call_header(&mut r).await;
        let mut rest = Vec::new();
        if h.is_ok() {
            r.read_to_end(&mut rest).await.unwrap();
        }
        (h, rest)
    }

    #[test]
    fn call_layout_matches_rfc5531() {
        let msg = encode_call(0x0a0b_0c0d, 100_003, 3, 6, &Credential::None);
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            0x0a0b_0c0d, 0, 2, 100_003, 3, 6, // xid CALL rpcvers prog vers proc
            0, 0, // cred AUTH_NONE, empty
            0, 0, // verf AUTH_NONE, empty
        ].iter().flat_map(|w: &u32| w.to_be_bytes()).collect();
        assert_eq!(msg, expected);
    }

    #[tokio::test]
    async fn reads_auth_sys_call_and_leaves_the_args() {
        let mut msg = encode_call(42, 100_003, 3, 1, &sys_cred());
        msg.extend_from_slice(b"ARGS");
        let (h, rest) = read_framed(&msg).await;
        let h = h.unwrap();
        assert_eq!((h.xid, h.prog, h.vers, h.proc_), (42, 100_003, 3, 1));
        assert_eq!(h.cred, sys_cred());
        assert_eq!(h.verf, OpaqueAuth::none());
        assert_eq!(rest, b"ARGS");
        // The sync decoder agrees.
        let mut d = Decoder::new(&msg);
        assert_eq!(CallHeader::decode(&mut d).unwrap(), h);
        assert_eq!(d.rest(), b"ARGS");
    }

    #[tokio::test]
    async fn header_split_across_fragments() {
        let mut msg = encode_call(9, 1, 2, 3, &sys_cred());
        msg.extend_from_slice(b"xy");
        let mut bytes = Vec::new();
        for (i, chunk) in msg.chunks(5).enumerate() {
            let last = (i + 1) * 5 >= msg.len();
            bytes.extend_from_slice(&record_mark(chunk.len() as u32, last));
            bytes.extend_from_slice(chunk);
        }
        let mut r = RecordReader::new(&bytes[..], 1024);
        assert!(r.next_record().await.unwrap());
        let h = read_call_header(&mut r).await.unwrap();
        assert_eq!(h.cred, sys_cred());
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"xy");
    }

    #[tokio::test]
    async fn unsupported_flavor_and_verifier_body_are_kept_apart() {
        let mut e = Encoder::new();
        for w in [5u32, MSG_CALL, 2, 100_003, 3, 0, 6] {
            e.u32(w);
        }
        e.opaque_var(b"gss-handle"); // RPCSEC_GSS credential body
        e.u32(6);
        e.opaque_var(b"mic");
        let (h, rest) = read_framed(e.as_slice()).await;
        let h = h.unwrap();
        assert_eq!(h.cred, Credential::Unsupported(6));
        assert_eq!(h.verf.body, b"mic");
        assert!(rest.is_empty());
    }

    fn header_with_cred(xid: u32, rpcvers: u32, flavor: u32, body: &[u8]) -> Vec<u8> {
        let mut e = Encoder::new();
        for w in [xid, MSG_CALL, rpcvers, 100_003, 3, 0, flavor] {
            e.u32(w);
        }
        e.opaque_var(body);
        e.u32(0);
        e.u32(0);
        e.into_vec()
    }

    async fn error_of(msg: &[u8]) -> CallError {
        let (h, _) = read_framed(msg).await;
        let async_err = h.expect_err("header should be refused");
        let sync_err = CallHeader::decode(&mut Decoder::new(msg)).expect_err("sync refuses too");
        assert_eq!(format!("{async_err:?}"), format!("{sync_err:?}"));
        async_err
    }

    #[tokio::test]
    async fn reply_message_is_not_a_call() {
        let mut msg = header_with_cred(3, 2, 0, b"");
        msg[7] = 1;
        let e = error_of(&msg).await;
        assert!(matches!(
            e,
            CallError::NotACall {
                xid: 3,
                msg_type: 1
            }
        ));
        assert!(e.closes_connection());
        assert!(e.reply().is_none());
    }

    #[tokio::test]
    async fn a_reply_is_read_as_one_with_its_first_bytes() {
        let mut e = Encoder::new();
        reply::accepted_success(&mut e, 77);
        e.u32(0xdead_beef);
        e.opaque_var(b"results, longer than the fixed start");
        let msg = e.into_vec();
        let bytes = framed(&msg);
        let mut r = RecordReader::new(&bytes[..], 1 << 20);
        assert!(r.next_record().await.unwrap());
        let MessageStart::Reply { xid, start } = read_message_header(&mut r).await.unwrap() else {
            panic!("a reply read as a call");
        };
        assert_eq!(xid, 77);
        // The start and the rest make up the message.
        assert_eq!(start.len(), FIXED_LEN);
        let mut whole = start;
        r.read_to_end(&mut whole).await.unwrap();
        assert_eq!(whole, msg);
        // A call reads as one; other message types are still refused.
        let call = encode_call(5, 100_003, 3, 0, &Credential::None);
        let bytes = framed(&call);
        let mut r = RecordReader::new(&bytes[..], 1 << 20);
        assert!(r.next_record().await.unwrap());
        let start = read_message_header(&mut r).await.unwrap();
        assert!(matches!(
            start,
            MessageStart::Call(CallHeader { xid: 5, .. })
        ));
        let mut other = header_with_cred(6, 2, 0, b"");
        other[7] = 2;
        let bytes = framed(&other);
        let mut r = RecordReader::new(&bytes[..], 1 << 20);
        assert!(r.next_record().await.unwrap());
        let e = read_message_header(&mut r).await.unwrap_err();
        assert!(matches!(
            e,
            CallError::NotACall {
                xid: 6,
                msg_type: 2
            }
        ));
    }

    #[tokio::test]
    async fn wrong_rpc_version_gets_rpc_mismatch() {
        // Whatever follows rpcvers is another protocol's business.
        let e = error_of(&header_with_cred(4, 3, 0, b"")[..12]).await;
        assert!(matches!(e, CallError::RpcMismatch { xid: 4, rpcvers: 3 }));
        let e = error_of(&header_with_cred(4, 3, 0, b"")).await;
        assert!(matches!(e, CallError::RpcMismatch { xid: 4, rpcvers: 3 }));
        assert!(!e.closes_connection());
        let reply = e.reply().unwrap();
        let h = reply::ReplyHeader::from_xdr(&reply).unwrap();
        assert_eq!(h.xid, 4);
        assert_eq!(
            h.status,
            reply::ReplyStatus::RpcMismatch { low: 2, high: 2 }
        );
    }

    #[tokio::test]
    async fn malformed_credentials_get_auth_badcred() {
        let good = AuthSys {
            stamp: 1,
            machine_name: b"m".to_vec(),
            uid: 0,
            gid: 0,
            gids: vec![],
        }
        .to_xdr();
        let mut too_many_gids = good.clone();
        too_many_gids.truncate(good.len() - 4);
        too_many_gids.extend_from_slice(&17u32.to_be_bytes());
        too_many_gids.extend(std::iter::repeat_n(0u8, 17 * 4));
        let mut long_name = Encoder::new();
        long_name.u32(1);
        long_name.string(&[b'x'; 256]);
        long_name.u32(0);
        long_name.u32(0);
        long_name.u32(0);
        let mut trailing = good.clone();
        trailing.extend_from_slice(&[0; 4]);
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (AUTH_SYS, good[..good.len() - 4].to_vec()), // truncated gids count
            (AUTH_SYS, too_many_gids),
            (AUTH_SYS, long_name.into_vec()),
            (AUTH_SYS, trailing),
            (AUTH_NONE, vec![0; 4]), // AUTH_NONE must be empty
        ];
        for (flavor, body) in cases {
            let e = error_of(&header_with_cred(5, 2, flavor, &body)).await;
            assert!(matches!(e, CallError::BadCredential { xid: 5 }), "{e:?}");
            let h = reply::ReplyHeader::from_xdr(&e.reply().unwrap()).unwrap();
            assert_eq!(h.status, reply::ReplyStatus::AuthError(AuthStat::BadCred));
        }
        // The good body is accepted.
        let (h, _) = read_framed(&header_with_cred(5, 2, AUTH_SYS, &good)).await;
        assert!(matches!(h.unwrap().cred, Credential::Sys(_)));
    }

    #[tokio::test]
    async fn a_bad_credential_cut_before_the_verifier_is_a_truncated_header() {
        // Found by fuzzing: the buffer decoder parsed the credential before
        // reading the verifier's flavor and length, and answered
        // BadCredential where the record reader says Truncated.
        let msg = header_with_cred(12, 2, AUTH_NONE, &[0; 4]);
        for cut in [msg.len() - 8, msg.len() - 5, msg.len() - 1] {
            let e = error_of(&msg[..cut]).await;
            assert!(matches!(e, CallError::Truncated), "cut {cut}: {e:?}");
        }
        let e = error_of(&msg).await;
        assert!(matches!(e, CallError::BadCredential { xid: 12 }));
    }

    #[tokio::test]
    async fn oversized_credential_is_refused_before_its_body_is_read() {
        let mut msg = header_with_cred(6, 2, AUTH_SYS, b"");
        msg[28..32].copy_from_slice(&401u32.to_be_bytes());
        let e = error_of(&msg).await;
        assert!(matches!(e, CallError::BadCredential { xid: 6 }));
    }

    #[tokio::test]
    async fn oversized_verifier_gets_auth_badverf() {
        let mut msg = header_with_cred(8, 2, AUTH_NONE, b"");
        let n = msg.len();
        msg[n - 4..].copy_from_slice(&401u32.to_be_bytes());
        let e = error_of(&msg).await;
        assert!(matches!(e, CallError::BadVerifier { xid: 8 }));
        let h = reply::ReplyHeader::from_xdr(&e.reply().unwrap()).unwrap();
        assert_eq!(h.status, reply::ReplyStatus::AuthError(AuthStat::BadVerf));
    }

    #[tokio::test]
    async fn short_records_are_truncated_headers() {
        let msg = encode_call(1, 2, 3, 4, &sys_cred());
        for cut in [0, 4, 31, 32, 40, msg.len() - 1] {
            let e = error_of(&msg[..cut]).await;
            assert!(matches!(e, CallError::Truncated), "cut {cut}: {e:?}");
            assert!(!e.closes_connection());
            assert!(e.reply().is_none());
        }
    }

    #[tokio::test]
    async fn stream_errors_are_record_errors() {
        let msg = framed(&encode_call(1, 2, 3, 4, &Credential::None));
        let cut = &msg[..msg.len() - 3];
        let mut r = RecordReader::new(cut, 1024);
        assert!(r.next_record().await.unwrap());
        let e = read_call_header(&mut r).await.unwrap_err();
        assert!(matches!(e, CallError::Record(RecordError::Truncated)));
        assert!(e.closes_connection());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = CallHeader::decode(&mut Decoder::new(&bytes));
        }

        #[test]
        fn arbitrary_records_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            rt.block_on(async {
                let framed = framed(&bytes);
                let mut r = RecordReader::new(&framed[..], 1024);
                if r.next_record().await.unwrap() {
                    let _ = read_call_header(&mut r).await;
                }
            });
        }
    }
}
