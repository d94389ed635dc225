//! NFS version 3 (RFC 1813): program 100003, version 3.
//!
//! Every procedure has an args type and a result type, each with both
//! [`Encode`](dionfs_xdr::Encode) and [`Decode`](dionfs_xdr::Decode) (the
//! server decodes args and encodes results; tests and clients do the
//! reverse). Results other than NULL's are [`NfsRes`]: a union on
//! [`NfsStat3`] of the procedure's `resok` and `resfail`.
//!
//! | proc | args | result |
//! |------|------|--------|
//! | NULL | [`Void`](crate::Void) | [`Void`](crate::Void) |
//! | GETATTR | [`GetattrArgs`] | [`GetattrRes`] |
//! | SETATTR | [`SetattrArgs`] | [`SetattrRes`] |
//! | LOOKUP | [`LookupArgs`] | [`LookupRes`] |
//! | ACCESS | [`AccessArgs`] | [`AccessRes`] |
//! | READLINK | [`ReadlinkArgs`] | [`ReadlinkRes`] |
//! | READ | [`ReadArgs`] | [`ReadRes`], server: [`encode_read_ok_head`] |
//! | WRITE | [`WriteArgs`], server: [`WriteArgsHead`] | [`WriteRes`] |
//! | CREATE | [`CreateArgs`] | [`CreateRes`] |
//! | MKDIR | [`MkdirArgs`] | [`MkdirRes`] |
//! | SYMLINK | [`SymlinkArgs`] | [`SymlinkRes`] |
//! | MKNOD | [`MknodArgs`] | [`MknodRes`] |
//! | REMOVE | [`RemoveArgs`] | [`RemoveRes`] |
//! | RMDIR | [`RmdirArgs`] | [`RmdirRes`] |
//! | RENAME | [`RenameArgs`] | [`RenameRes`] |
//! | LINK | [`LinkArgs`] | [`LinkRes`] |
//! | READDIR | [`ReaddirArgs`] | [`ReaddirRes`], server: [`ReaddirEncoder`] |
//! | READDIRPLUS | [`ReaddirplusArgs`] | [`ReaddirplusRes`], server: [`ReaddirplusEncoder`] |
//! | FSSTAT | [`FsstatArgs`] | [`FsstatRes`] |
//! | FSINFO | [`FsinfoArgs`] | [`FsinfoRes`] |
//! | PATHCONF | [`PathconfArgs`] | [`PathconfRes`] |
//! | COMMIT | [`CommitArgs`] | [`CommitRes`] |
//!
//! [`NfsProc3::max_args_len`] gives the longest arguments of each procedure,
//! so a server can refuse a longer call before reading it.

mod attrs;
mod data;
mod dirs;
mod limits;
mod readdir;
mod types;

pub use attrs::*;
pub use data::*;
pub use dirs::*;
pub use readdir::*;
pub use types::*;
