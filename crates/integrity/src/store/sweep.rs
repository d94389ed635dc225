//! Finding the checksum files of files deleted behind the server's back
//! ([`Store::sweep`]), by the key each one names in an extended attribute.

use std::fs::File;
use std::io;

use super::Store;
use crate::FileKey;

/// What [`Store::sweep`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Checksum files of files that no longer exist (removed if asked).
    pub orphans: u64,
    /// Checksum files whose file could not be checked (no name recorded,
    /// or no export on its filesystem).
    pub unknown: u64,
}

/// [`Store::sweep`].
pub(super) fn sweep(
    store: &Store,
    exists: &mut dyn FnMut(&FileKey) -> io::Result<bool>,
    remove: bool,
) -> io::Result<SweepReport> {
    let mut report = SweepReport::default();
    let files = store.dir.join("files");
    let Ok(subdirs) = std::fs::read_dir(&files) else {
        return Ok(report);
    };
    for sub in subdirs {
        let sub = sub?.path();
        if !sub.is_dir() {
            continue;
        }
        for entry in std::fs::read_dir(sub)? {
            let path = entry?.path();
            if path.extension().is_none_or(|e| e != "crc") {
                continue;
            }
            let key = File::open(&path).ok().and_then(|f| FileKey::read_xattr(&f));
            // A key that does not hash to the file's name is not ours.
            let Some(key) = key.filter(|k| store.dir.join(k.relative_path()) == path) else {
                report.unknown += 1;
                continue;
            };
            match exists(&key) {
                Ok(true) => {}
                Ok(false) => {
                    report.orphans += 1;
                    if remove {
                        store.remove(&key);
                    }
                }
                Err(_) => report.unknown += 1,
            }
        }
    }
    Ok(report)
}
