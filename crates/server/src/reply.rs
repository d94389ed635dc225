//! Building RPC replies for the programs served here.

use dionfs_rpc::{ReplyHeader, ReplyStatus};
use dionfs_xdr::{Encode, Encoder};

use dionfs_transport::Reply;

/// An accepted, successful reply carrying `results`.
pub fn success<T: Encode>(xid: u32, results: &T) -> Reply {
    let mut enc = success_encoder(xid);
    results.encode(&mut enc);
    Reply::new(enc.into_vec())
}

/// An encoder already holding the header of an accepted, successful reply,
/// for results encoded piece by piece (READ, READDIR).
pub fn success_encoder(xid: u32) -> Encoder {
    let mut enc = Encoder::with_capacity(256);
    ReplyHeader::new(xid, ReplyStatus::Success).encode(&mut enc);
    enc
}

/// GARBAGE_ARGS: the arguments could not be decoded.
pub fn garbage_args(xid: u32) -> Reply {
    Reply::status(xid, ReplyStatus::GarbageArgs)
}
