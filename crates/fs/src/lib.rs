//! The filesystem backend: authenticated NFS file handles, the metadata
//! operations of the NFS procedures through `*at()` calls that never leave
//! the export, and the open-file cache for the data plane.
//!
//! How the server uses it:
//! - One [`ExportFs`] per export, all sharing one [`OpenFileCache`] and the
//!   server's [`MacKey`].
//! - [`handle::export_id`] routes an incoming handle to its export;
//!   [`ExportFs::resolve`] verifies it and opens the file.
//! - Every call blocks: run it on tokio's blocking pool, the metadata
//!   operations inside `dionfs_sys::cred::with_creds(&caller, ..)`.
//! - READ/WRITE: [`ExportFs::open_file`] (cached), then
//!   [`ExportFs::check_io_access`] on `file.node()` under the caller's
//!   credentials, then the data plane on `file.data()`.
//! - [`FsError`] maps one-to-one to `nfsstat3`.

mod attr;
mod cache;
mod datafile;
mod dir;
mod error;
mod export;
pub mod handle;
mod ops;
#[cfg(test)]
mod testutil;

pub use attr::{Attr, FileKind, SetAttrs, SetTime, Time};
pub use cache::{OpenFile, OpenFileCache};
pub use datafile::DataFile;
pub use dir::{DirBatch, DirEntry};
pub use error::FsError;
pub use export::{ExportFs, Node, NAME_MAX};
pub use handle::MacKey;
pub use ops::{access3, CreateHow, FsStat, PathConf, SpecialFile};
