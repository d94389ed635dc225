//! ONC RPC version 2 (RFC 5531) over TCP: record marking, call headers with
//! AUTH_NONE / AUTH_SYS credentials, and reply headers.
//!
//! This crate knows nothing of NFS: it frames and authenticates calls and
//! encodes the RPC part of replies. Programs (NFS, MOUNT, portmap) live above.
//!
//! - [`record`]: [`RecordReader`] reads one record at a time with exact reads
//!   (no read-ahead), enforcing a maximum record size before allocating.
//! - `auth.rs`: the authentication fields ([`OpaqueAuth`], [`Credential`],
//!   [`AuthSys`]), shared by calls and replies.
//! - [`message`]: [`CallHeader`], [`read_call_header`] (and
//!   [`read_message_header`], which also takes replies), [`CallError`].
//! - [`reply`]: reply header encoders and [`ReplyHeader`] for clients.

mod auth;
pub mod message;
pub mod record;
pub mod reply;

pub use auth::{AuthSys, Credential, OpaqueAuth};
pub use message::{
    encode_call, read_call_header, read_message_header, CallError, CallHeader, MessageStart,
};
pub use record::{framed, read_record_blocking, record_mark, RecordError, RecordReader};
pub use reply::{AuthStat, ReplyHeader, ReplyStatus};

/// The only RPC protocol version we speak (RFC 5531 section 9).
pub const RPC_VERSION: u32 = 2;
/// `msg_type` of a call.
pub const MSG_CALL: u32 = 0;
/// `msg_type` of a reply.
pub const MSG_REPLY: u32 = 1;
