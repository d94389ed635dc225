//! What a call's reply is: one record, its header bytes and, for the
//! large ones, a payload sent from where it lies and the bytes after it.

use dionfs_rpc::{ReplyHeader, ReplyStatus};
use dionfs_xdr::Encode;

/// Bytes sent after a reply's header, from wherever they already are (a
/// pooled I/O buffer holding READ data, say). Kept alive until written.
/// `Sync` because the writing task holds a reference to it across awaits.
pub trait ReplyPayload: Send + Sync + 'static {
    /// The bytes to send. XDR padding is added by the connection.
    fn bytes(&self) -> &[u8];
}

impl ReplyPayload for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A reply message, sent as one record: `header`, then the payload's bytes,
/// then zero padding to a multiple of 4 (RFC 4506 section 4.10), then
/// `trailer`.
///
/// For an opaque result such as READ data, `header` ends with the opaque
/// length and the payload holds the bytes. Results that follow the opaque
/// (those of the operations after a READ in an NFSv4 COMPOUND) go in
/// `trailer`, so the payload is still sent without copying; a reply whose
/// opaque comes last (every NFSv3 one) leaves it empty.
pub struct Reply {
    /// The RPC reply message (reply header and results), without record mark.
    pub header: Vec<u8>,
    /// The payload, sent after `header` without copying.
    pub data: Option<Box<dyn ReplyPayload>>,
    /// Bytes sent after the payload's padding (or after `header` without
    /// payload). Empty, it costs no allocation and adds nothing to the
    /// write.
    pub trailer: Vec<u8>,
}

impl Reply {
    /// A reply that is all in `header`.
    pub fn new(header: Vec<u8>) -> Self {
        Self {
            header,
            data: None,
            trailer: Vec::new(),
        }
    }

    /// A reply whose tail is sent from `data` without copying.
    pub fn with_data(header: Vec<u8>, data: Box<dyn ReplyPayload>) -> Self {
        Self {
            header,
            data: Some(data),
            trailer: Vec::new(),
        }
    }

    /// This reply with `trailer` sent after its payload and padding.
    pub fn with_trailer(self, trailer: Vec<u8>) -> Self {
        Self { trailer, ..self }
    }

    /// A reply with only an RPC reply header, for the non-success statuses
    /// (PROG_UNAVAIL, GARBAGE_ARGS, AUTH_ERROR, ...).
    pub fn status(xid: u32, status: ReplyStatus) -> Self {
        Self::new(ReplyHeader::new(xid, status).to_xdr())
    }

    /// PROG_MISMATCH for a program served in versions `low` to `high`.
    pub fn only_versions(xid: u32, low: u32, high: u32) -> Self {
        Self::status(xid, ReplyStatus::ProgMismatch { low, high })
    }

    /// PROG_MISMATCH for a program served in one `version` only.
    pub fn only_version(xid: u32, version: u32) -> Self {
        Self::only_versions(xid, version, version)
    }

    /// The payload's bytes (empty without payload).
    pub fn data_bytes(&self) -> &[u8] {
        self.data.as_deref().map_or(&[], |d| d.bytes())
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reply")
            .field("header_len", &self.header.len())
            .field("data_len", &self.data_bytes().len())
            .field("trailer_len", &self.trailer.len())
            .finish()
    }
}
