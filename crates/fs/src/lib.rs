//! The filesystem backend: authenticated NFS file handles, the metadata
//! operations of the NFS procedures through `*at()` calls that never leave
//! the export, and the open-file cache for the data plane.
//!
//! How the server uses it:
//! - One [`ExportFs`] per export (`ExportFs::open(root, id, key, cache)`),
//!   all sharing one [`OpenFileCache`] and the server's [`MacKey`]
//!   (`MacKey::load_or_create(state_dir)`).
//! - [`handle::export_id`] routes an incoming handle to its export;
//!   [`ExportFs::resolve`] verifies it and opens the file. Resolve before
//!   switching credentials (it needs root for `open_by_handle_at` and
//!   switches to root itself otherwise, which costs a few syscalls).
//! - NFSv4's pseudo-filesystem directories (the pseudo-root and the
//!   directories on the way to the exports) have handles of their own,
//!   [`handle::encode_pseudo`] and [`handle::decode_pseudo`], under the
//!   same key; they belong to no export ([`handle::export_id`] is `None`).
//! - Every call blocks: run it on tokio's blocking pool, the metadata
//!   operations inside `dionfs_sys::cred::with_creds(&caller, || ..)`
//!   (which returns `io::Result`: a failed switch is a server fault).
//! - READ/WRITE/COMMIT: [`ExportFs::open_file`] (cached, one open file
//!   per inode whichever export reaches it; may run as either identity),
//!   then [`ops::check_file_access`] under the caller's credentials,
//!   then the data plane on `file.data()`. Size changes go through the same
//!   open file ([`ops::set_size`]). REMOVE and RENAME evict files
//!   that lost their last name by themselves.
//! - The metadata procedures are the functions of [`ops`] (one per
//!   procedure, as knfsd's `vfs.c`: `ops::mkdir(&export_fs, dir, name,
//!   attrs)`) and [`dir::read_dir`]; [`ExportFs`] itself is the export's
//!   identity, its handles, lookups and open files.
//! - CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, SETATTR:
//!   after the change, and before the reply, the export's [`MetadataSync`]
//!   makes it durable (a no-op on `async` exports).
//! - [`FsError`] says what went wrong in no protocol's words; each protocol
//!   maps it to its status codes in one place.

mod access_memo;
pub mod acl;
mod attr;
mod cache;
pub mod dir;
mod durable;
mod error;
mod export;
pub mod handle;
pub mod ops;
#[cfg(test)]
mod testutil;

pub use access_memo::Stamp;
pub use attr::{Attr, FileKind, SetAttrs, SetTime, Time};
pub use cache::{OpenFile, OpenFileCache};
pub use dir::{DirBatch, DirEntry};
pub use durable::{MetadataSync, MetadataSyncCounters};
pub use error::FsError;
pub use export::{ExportFs, Node, NAME_MAX};
pub use handle::MacKey;
pub use ops::{access3, CreateHow, FsStat, PathConf, SpecialFile};
