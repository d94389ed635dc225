//! RPC reply headers (RFC 5531 section 9, `reply_body`).
//!
//! The server writes a header with one of the shorthand functions
//! ([`accepted_success`], [`prog_unavail`], ...) and, after a success header,
//! appends the procedure's results to the same [`Encoder`]. Accepted replies
//! always carry an AUTH_NONE verifier: we offer no verifier-based flavor.
//! [`ReplyHeader`] also decodes replies, for clients and tests.

use dionfs_xdr::{Decode, Decoder, Encode, Encoder, XdrError};

use crate::auth::{OpaqueAuth, MAX_AUTH_BYTES};
use crate::{MSG_REPLY, RPC_VERSION};

/// `reply_stat`: the call was accepted (its verifier checked out).
const MSG_ACCEPTED: u32 = 0;
/// `reply_stat`: the call was refused (RPC version or authentication).
const MSG_DENIED: u32 = 1;

/// `accept_stat` values.
const SUCCESS: u32 = 0;
const PROG_UNAVAIL: u32 = 1;
const PROG_MISMATCH: u32 = 2;
const PROC_UNAVAIL: u32 = 3;
const GARBAGE_ARGS: u32 = 4;
const SYSTEM_ERR: u32 = 5;

/// `reject_stat` values.
const RPC_MISMATCH: u32 = 0;
const AUTH_ERROR: u32 = 1;

/// Why authentication failed (`auth_stat`, RFC 5531 section 9 and RFC 2203
/// for the RPCSEC_GSS values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStat {
    Ok = 0,
    /// Bad credential (seal broken, or malformed).
    BadCred = 1,
    /// The client must begin a new session.
    RejectedCred = 2,
    /// Bad verifier.
    BadVerf = 3,
    /// Verifier expired or replayed.
    RejectedVerf = 4,
    /// Rejected for security reasons (e.g. flavor not allowed for this export).
    TooWeak = 5,
    InvalidResp = 6,
    Failed = 7,
    RpcsecGssCredProblem = 13,
    RpcsecGssCtxProblem = 14,
}

impl AuthStat {
    fn from_u32(v: u32) -> Result<Self, XdrError> {
        Ok(match v {
            0 => AuthStat::Ok,
            1 => AuthStat::BadCred,
            2 => AuthStat::RejectedCred,
            3 => AuthStat::BadVerf,
            4 => AuthStat::RejectedVerf,
            5 => AuthStat::TooWeak,
            6 => AuthStat::InvalidResp,
            7 => AuthStat::Failed,
            13 => AuthStat::RpcsecGssCredProblem,
            14 => AuthStat::RpcsecGssCtxProblem,
            value => {
                return Err(XdrError::BadDiscriminant {
                    type_name: "auth_stat",
                    value,
                })
            }
        })
    }
}

/// What a reply says about its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStatus {
    /// Accepted and executed; the procedure's results follow the header.
    Success,
    /// The program is not served here.
    ProgUnavail,
    /// The program is served, but not in the requested version.
    ProgMismatch { low: u32, high: u32 },
    /// The program has no such procedure.
    ProcUnavail,
    /// The arguments could not be decoded.
    GarbageArgs,
    /// The server failed (e.g. out of memory) without a program-level status.
    SystemErr,
    /// Denied: the RPC protocol version is not supported.
    RpcMismatch { low: u32, high: u32 },
    /// Denied: the credential or verifier was refused.
    AuthError(AuthStat),
}

/// In RFC 5531's words (`PROG_UNAVAIL`), for error messages and logs.
impl std::fmt::Display for ReplyStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplyStatus::Success => f.write_str("SUCCESS"),
            ReplyStatus::ProgUnavail => f.write_str("PROG_UNAVAIL"),
            ReplyStatus::ProgMismatch { low, high } => {
                write!(f, "PROG_MISMATCH (versions {low} to {high})")
            }
            ReplyStatus::ProcUnavail => f.write_str("PROC_UNAVAIL"),
            ReplyStatus::GarbageArgs => f.write_str("GARBAGE_ARGS"),
            ReplyStatus::SystemErr => f.write_str("SYSTEM_ERR"),
            ReplyStatus::RpcMismatch { low, high } => {
                write!(f, "RPC_MISMATCH (versions {low} to {high})")
            }
            ReplyStatus::AuthError(stat) => write!(f, "AUTH_ERROR ({})", *stat as u32),
        }
    }
}

/// A decoded reply header. The verifier is only meaningful for accepted
/// replies (denied replies carry none; it is then AUTH_NONE here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: u32,
    pub verf: OpaqueAuth,
    pub status: ReplyStatus,
}

impl ReplyHeader {
    /// A header with an AUTH_NONE verifier.
    pub fn new(xid: u32, status: ReplyStatus) -> Self {
        Self {
            xid,
            verf: OpaqueAuth::none(),
            status,
        }
    }
}

impl Encode for ReplyHeader {
    fn encode(&self, enc: &mut Encoder) {
        enc.u32(self.xid);
        enc.u32(MSG_REPLY);
        let accepted = |enc: &mut Encoder, stat: u32| {
            enc.u32(MSG_ACCEPTED);
            self.verf.encode(enc);
            enc.u32(stat);
        };
        match self.status {
            ReplyStatus::Success => accepted(enc, SUCCESS),
            ReplyStatus::ProgUnavail => accepted(enc, PROG_UNAVAIL),
            ReplyStatus::ProgMismatch { low, high } => {
                accepted(enc, PROG_MISMATCH);
                enc.u32(low);
                enc.u32(high);
            }
            ReplyStatus::ProcUnavail => accepted(enc, PROC_UNAVAIL),
            ReplyStatus::GarbageArgs => accepted(enc, GARBAGE_ARGS),
            ReplyStatus::SystemErr => accepted(enc, SYSTEM_ERR),
            ReplyStatus::RpcMismatch { low, high } => {
                enc.u32(MSG_DENIED);
                enc.u32(RPC_MISMATCH);
                enc.u32(low);
                enc.u32(high);
            }
            ReplyStatus::AuthError(stat) => {
                enc.u32(MSG_DENIED);
                enc.u32(AUTH_ERROR);
                enc.u32(stat as u32);
            }
        }
    }
}

impl Decode<'_> for ReplyHeader {
    /// Decodes a reply header, leaving the decoder at the results (if any).
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let xid = d.u32()?;
        let msg_type = d.u32()?;
        if msg_type != MSG_REPLY {
            return Err(XdrError::BadDiscriminant {
                type_name: "msg_type",
                value: msg_type,
            });
        }
        let mut verf = OpaqueAuth::none();
        let status = match d.u32()? {
            MSG_ACCEPTED => {
                verf.flavor = d.u32()?;
                verf.body = d.opaque_var(MAX_AUTH_BYTES)?.to_vec();
                match d.u32()? {
                    SUCCESS => ReplyStatus::Success,
                    PROG_UNAVAIL => ReplyStatus::ProgUnavail,
                    PROG_MISMATCH => ReplyStatus::ProgMismatch {
                        low: d.u32()?,
                        high: d.u32()?,
                    },
                    PROC_UNAVAIL => ReplyStatus::ProcUnavail,
                    GARBAGE_ARGS => ReplyStatus::GarbageArgs,
                    SYSTEM_ERR => ReplyStatus::SystemErr,
                    value => {
                        return Err(XdrError::BadDiscriminant {
                            type_name: "accept_stat",
                            value,
                        })
                    }
                }
            }
            MSG_DENIED => match d.u32()? {
                RPC_MISMATCH => ReplyStatus::RpcMismatch {
                    low: d.u32()?,
                    high: d.u32()?,
                },
                AUTH_ERROR => ReplyStatus::AuthError(AuthStat::from_u32(d.u32()?)?),
                value => {
                    return Err(XdrError::BadDiscriminant {
                        type_name: "reject_stat",
                        value,
                    })
                }
            },
            value => {
                return Err(XdrError::BadDiscriminant {
                    type_name: "reply_stat",
                    value,
                })
            }
        };
        Ok(Self { xid, verf, status })
    }
}

fn header(enc: &mut Encoder, xid: u32, status: ReplyStatus) {
    ReplyHeader::new(xid, status).encode(enc);
}

/// SUCCESS header; the caller appends the procedure's results.
pub fn accepted_success(enc: &mut Encoder, xid: u32) {
    header(enc, xid, ReplyStatus::Success);
}

/// PROG_UNAVAIL: the program is not served here.
pub fn prog_unavail(enc: &mut Encoder, xid: u32) {
    header(enc, xid, ReplyStatus::ProgUnavail);
}

/// PROG_MISMATCH: the versions of the program that are served.
pub fn prog_mismatch(enc: &mut Encoder, xid: u32, low: u32, high: u32) {
    header(enc, xid, ReplyStatus::ProgMismatch { low, high });
}

/// PROC_UNAVAIL: no such procedure in this program version.
pub fn proc_unavail(enc: &mut Encoder, xid: u32) {
    header(enc, xid, ReplyStatus::ProcUnavail);
}

/// GARBAGE_ARGS: the arguments could not be decoded.
pub fn garbage_args(enc: &mut Encoder, xid: u32) {
    header(enc, xid, ReplyStatus::GarbageArgs);
}

/// SYSTEM_ERR: the server failed without a program-level status.
pub fn system_err(enc: &mut Encoder, xid: u32) {
    header(enc, xid, ReplyStatus::SystemErr);
}

/// Denied with RPC_MISMATCH(2, 2): only RPC version 2 is spoken.
pub fn rpc_mismatch(enc: &mut Encoder, xid: u32) {
    header(
        enc,
        xid,
        ReplyStatus::RpcMismatch {
            low: RPC_VERSION,
            high: RPC_VERSION,
        },
    );
}

/// Denied with AUTH_ERROR.
pub fn auth_error(enc: &mut Encoder, xid: u32, stat: AuthStat) {
    header(enc, xid, ReplyStatus::AuthError(stat));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_the_rfc_names_them() {
        assert_eq!(ReplyStatus::ProgUnavail.to_string(), "PROG_UNAVAIL");
        let mismatch = ReplyStatus::ProgMismatch { low: 1, high: 3 };
        assert_eq!(mismatch.to_string(), "PROG_MISMATCH (versions 1 to 3)");
        let auth = ReplyStatus::AuthError(AuthStat::TooWeak);
        assert_eq!(auth.to_string(), "AUTH_ERROR (5)");
    }

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    fn encoded(f: impl FnOnce(&mut Encoder)) -> Vec<u8> {
        let mut e = Encoder::new();
        f(&mut e);
        e.into_vec()
    }

    #[test]
    fn accepted_layouts_match_rfc5531() {
        // xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE (flavor, len 0), accept_stat
        assert_eq!(
            encoded(|e| accepted_success(e, 7)),
            words(&[7, 1, 0, 0, 0, 0])
        );
        assert_eq!(encoded(|e| prog_unavail(e, 7)), words(&[7, 1, 0, 0, 0, 1]));
        assert_eq!(
            encoded(|e| prog_mismatch(e, 7, 2, 3)),
            words(&[7, 1, 0, 0, 0, 2, 2, 3])
        );
        assert_eq!(encoded(|e| proc_unavail(e, 7)), words(&[7, 1, 0, 0, 0, 3]));
        assert_eq!(encoded(|e| garbage_args(e, 7)), words(&[7, 1, 0, 0, 0, 4]));
        assert_eq!(encoded(|e| system_err(e, 7)), words(&[7, 1, 0, 0, 0, 5]));
    }

    #[test]
    fn denied_layouts_match_rfc5531() {
        // xid, REPLY, MSG_DENIED, RPC_MISMATCH, low, high
        assert_eq!(encoded(|e| rpc_mismatch(e, 9)), words(&[9, 1, 1, 0, 2, 2]));
        // xid, REPLY, MSG_DENIED, AUTH_ERROR, auth_stat
        assert_eq!(
            encoded(|e| auth_error(e, 9, AuthStat::BadCred)),
            words(&[9, 1, 1, 1, 1])
        );
        assert_eq!(
            encoded(|e| auth_error(e, 9, AuthStat::TooWeak)),
            words(&[9, 1, 1, 1, 5])
        );
    }

    #[test]
    fn every_status_round_trips() {
        let statuses = [
            ReplyStatus::Success,
            ReplyStatus::ProgUnavail,
            ReplyStatus::ProgMismatch { low: 1, high: 3 },
            ReplyStatus::ProcUnavail,
            ReplyStatus::GarbageArgs,
            ReplyStatus::SystemErr,
            ReplyStatus::RpcMismatch { low: 2, high: 2 },
            ReplyStatus::AuthError(AuthStat::RejectedVerf),
            ReplyStatus::AuthError(AuthStat::RpcsecGssCtxProblem),
        ];
        for status in statuses {
            let h = ReplyHeader::new(0xdead_beef, status);
            assert_eq!(ReplyHeader::from_xdr(&h.to_xdr()).unwrap(), h);
        }
    }

    #[test]
    fn success_leaves_decoder_at_results() {
        let mut e = Encoder::new();
        accepted_success(&mut e, 1);
        e.u32(0xabcd);
        let bytes = e.into_vec();
        let mut d = Decoder::new(&bytes);
        assert_eq!(
            ReplyHeader::decode(&mut d).unwrap().status,
            ReplyStatus::Success
        );
        assert_eq!(d.u32().unwrap(), 0xabcd);
    }

    #[test]
    fn malformed_replies_are_typed_errors() {
        let bad = |ws: &[u32]| ReplyHeader::from_xdr(&words(ws)).unwrap_err();
        assert!(matches!(bad(&[1, 0]), XdrError::BadDiscriminant { .. })); // a call
        assert!(matches!(bad(&[1, 1, 2]), XdrError::BadDiscriminant { .. }));
        assert!(matches!(
            bad(&[1, 1, 0, 0, 0, 9]),
            XdrError::BadDiscriminant { .. }
        ));
        assert!(matches!(
            bad(&[1, 1, 1, 2]),
            XdrError::BadDiscriminant { .. }
        ));
        assert!(matches!(
            bad(&[1, 1, 1, 1, 8]),
            XdrError::BadDiscriminant { .. }
        ));
        assert!(matches!(bad(&[1, 1, 0, 0, 401]), XdrError::TooLong { .. }));
        assert!(matches!(bad(&[1, 1, 0, 0]), XdrError::Truncated { .. }));
    }
}
