//! Protocol codecs for dionfs: NFS version 3 and MOUNT version 3
//! (RFC 1813, MOUNT in its Appendix I), NFS version 4.1 and 4.2 (RFC
//! 8881, RFC 7862; the operations in [`nfs4`]), NLM, NSM and the port
//! mapper, built on the XDR primitives of `dionfs-xdr`.
//!
//! Pure types with [`Encode`](dionfs_xdr::Encode) and
//! [`Decode`](dionfs_xdr::Decode): no I/O, no async. Types own their bytes
//! (`Vec<u8>`) so they cross threads freely. Decoding never panics on any
//! input: malformed bytes are a typed [`XdrError`](dionfs_xdr::XdrError),
//! and every variable-length item is bounded before anything is allocated.
//!
//! The bulk-data paths have split codecs so the server can keep payloads
//! out of XDR buffers: [`nfs3::WriteArgsHead`] (WRITE call up to its data),
//! [`nfs3::encode_read_ok_head`] (READ reply up to its data), and the
//! incremental [`nfs3::ReaddirEncoder`] / [`nfs3::ReaddirplusEncoder`] that
//! honour the client's byte limits.

mod codec;
pub mod mount3;
pub mod nfs3;
pub mod nfs4;
pub mod nlm4;
pub mod nsm;

#[cfg(test)]
mod test_util;

pub use codec::{opaque_var_len, ArgsLimit, Void, MAX_LIST_ITEMS};
pub mod portmap;
