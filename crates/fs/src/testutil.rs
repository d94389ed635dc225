//! Test fixtures: exports over a real filesystem ([`LoopFs`], a loop device
//! with 4096-byte sectors from `dionfs-testfs`).

use std::path::Path;
use std::sync::Arc;

pub(crate) use dionfs_testfs::LoopFs;

use dionfs_sys::cred::Creds;

use crate::{ExportFs, MacKey, OpenFileCache};

/// An export of `dir` with its own cache.
pub(crate) fn export(dir: &Path, id: u16, key: MacKey) -> ExportFs {
    export_with_cache(dir, id, key, Arc::new(OpenFileCache::new(64)))
}

/// An export of `dir` using `cache`.
pub(crate) fn export_with_cache(
    dir: &Path,
    id: u16,
    key: MacKey,
    cache: Arc<OpenFileCache>,
) -> ExportFs {
    ExportFs::open(dir, id, key, cache).expect("open export")
}

/// The usual squashed identity (65534:65534, no groups).
pub(crate) fn nobody() -> Creds {
    Creds {
        uid: 65534,
        gid: 65534,
        groups: vec![],
    }
}
