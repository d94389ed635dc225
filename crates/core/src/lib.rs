//! The protocol-neutral core every RPC program of the server stands on:
//! what is exported and to whom, and the state the programs share.
//!
//! - [`export`]: the configuration and the exports(5) vocabulary (client
//!   lists, squashing, options); [`exports`]: the exports served now, each
//!   with its file system ([`dionfs_fs::ExportFs`]) and data plane.
//! - [`server`]: [`server::Server`], the state every program shares (the
//!   exports, the write verifier, the reply cache, the grace period, the
//!   io_uring and its credentials), and [`reload`], which applies a
//!   changed configuration to it.
//! - [`grace`]: the one grace period after a restart, for every protocol
//!   that reclaims state (NLM today, NFSv4 next); [`locks`]: the byte-range
//!   lock and share-reservation tables, generic over their owner, so that
//!   an NLM lock and an NFSv4 lock on one file see each other;
//!   [`recovery`]: the durable record of the clients holding state, which
//!   a restarted server tells or lets reclaim.
//! - [`delegations`]: which NFSv4 client holds a delegation of which
//!   file, the index every program's conflicting calls check and recall
//!   through.
//! - [`drc`]: the duplicate request cache; [`io_errors`]: READ, WRITE and
//!   COMMIT failures in the log; [`integrity`]: the checksum store's
//!   settling at start and stop.
//!
//! Nothing here decodes a protocol or names a status code: the programs
//! (`dionfs_server`) do, and map [`dionfs_fs::FsError`] to theirs.

pub mod delegations;
pub mod drc;
pub mod export;
pub mod exports;
pub mod grace;
pub mod integrity;
pub mod io_errors;
pub mod locks;
pub mod recovery;
pub mod reload;
pub mod server;
