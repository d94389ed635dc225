//! Crash recovery ([`Store::recover`]): the checksums of every region the
//! intent log named at open recomputed from the data on disk.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use super::data::is_file_deleted;
use super::sums::{FileSums, Open};
use super::Store;
use crate::FileKey;

/// What [`Store::recover`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Files whose checksums were recomputed.
    pub files: usize,
    /// Blocks recomputed from the data on disk.
    pub blocks: u64,
    /// Files named by the log that no longer exist (their checksums freed).
    pub gone: usize,
    /// Files that could not be recovered (no export reaches them, or an
    /// error), marked stale when possible.
    pub failed: usize,
}

/// [`Store::recover`].
pub(super) fn recover(
    store: &Arc<Store>,
    open: &mut dyn FnMut(&FileKey) -> io::Result<Option<OwnedFd>>,
) -> io::Result<RecoveryReport> {
    let records = std::mem::take(&mut *store.to_recover.lock());
    let mut by_file: Vec<(FileKey, Vec<u64>)> = Vec::new();
    for (key, region) in records {
        match by_file.iter_mut().find(|(k, _)| *k == key) {
            Some((_, regions)) => {
                if !regions.contains(&region) {
                    regions.push(region)
                }
            }
            None => by_file.push((key, vec![region])),
        }
    }
    let mut report = RecoveryReport::default();
    for (key, regions) in by_file {
        let data = match open(&key) {
            Ok(Some(fd)) => fd,
            Ok(None) => {
                store.remove(&key);
                report.gone += 1;
                continue;
            }
            Err(e) => {
                tracing::warn!(file = %key, error = %e,
                    "integrity recovery: cannot open a file the intent log names; its checksums stay as they are");
                report.failed += 1;
                continue;
            }
        };
        match FileSums::open(store, key.clone(), data.as_fd(), Open::Recover).and_then(|sums| {
            let sums = sums.ok_or_else(|| io::Error::other("no checksum file"))?;
            sums.recover_regions(data.as_fd(), &regions)
        }) {
            Ok(blocks) => {
                report.files += 1;
                report.blocks += blocks;
            }
            Err(e) if is_file_deleted(&e) => {
                store.remove(&key);
                report.gone += 1;
            }
            Err(e) => {
                tracing::warn!(file = %crate::key::path_of(data.as_fd()), error = %e,
                    "integrity recovery of a file failed");
                report.failed += 1;
            }
        }
    }
    store.log.reset()?;
    Ok(report)
}
