//! Setting up the checksum store for the exports with `integrity =
//! "crc32c"` (DESIGN.md, "Integrity"; the store itself is the
//! `dionfs-integrity` crate): open it under the state directory, recover
//! from the intent log before anything is served, attach it to the
//! exports' file systems; settle what no client commits.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use dionfs_fs::{ExportFs, FsError};
use dionfs_integrity::{Checksummer, FileKey, Store};
use dionfs_logs::LogEvery;
use dionfs_sys::handle::KernelHandle;
use tracing::{debug, info, warn};

use crate::export::{Config, Integrity};
use crate::exports::Exports;

/// Opens the store if an export keeps checksums, recovers it, and attaches
/// it to those exports. Exports on one filesystem share its open files, so
/// they must agree on integrity.
pub fn open(config: &Config, filesystems: &mut [ExportFs]) -> Result<Option<Arc<Store>>, String> {
    let wanted: Vec<bool> = config
        .exports
        .iter()
        .map(|x| x.integrity == Integrity::Crc32c)
        .collect();
    for (i, a) in filesystems.iter().enumerate() {
        for (j, b) in filesystems.iter().enumerate().skip(i + 1) {
            if a.fs_id() == b.fs_id() && wanted[i] != wanted[j] {
                return Err(format!(
                    "exports {} and {} are on one filesystem but only one has integrity = \"crc32c\": \
                     give both the same integrity",
                    config.exports[i].path.display(),
                    config.exports[j].path.display()
                ));
            }
        }
    }
    if !wanted.contains(&true) {
        return Ok(None);
    }
    let dir = config.server.state_dir.join("integrity");
    let store = Store::open(
        &dir,
        Store::DEFAULT_CACHE_PAGES,
        Checksummer::order_from_env(),
    )
    .map_err(|e| format!("cannot open the checksum store {}: {e}", dir.display()))?;
    let pending = store.pending_recovery();
    let report = store
        .recover(&mut |key| open_for_recovery(filesystems, key))
        .map_err(|e| format!("integrity recovery in {} failed: {e}", dir.display()))?;
    if pending > 0 {
        info!(
            regions = pending,
            files = report.files,
            blocks = report.blocks,
            gone = report.gone,
            failed = report.failed,
            "integrity: recomputed the checksums of the blocks being written when the server stopped"
        );
    }
    if report.failed > 0 {
        warn!(
            failed = report.failed,
            "integrity: some files named by the intent log could not be recovered"
        );
    }
    info!(store = %dir.display(), order = %store.checksummer().order(), "integrity: CRC32C per 4 KiB block");
    for (fs, on) in filesystems.iter_mut().zip(wanted) {
        if on {
            fs.set_integrity(store.clone());
        }
    }
    Ok(Some(store))
}

/// Opens the file `key` names through an export on its filesystem.
pub fn open_for_recovery(
    filesystems: &[ExportFs],
    key: &FileKey,
) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    let Some(fs) = filesystems.iter().find(|fs| fs.fs_id() == key.fs_id) else {
        return Err(std::io::Error::other("no export on the file's filesystem"));
    };
    open_key(fs, key)
}

/// Opens the file `key` names through `fs`, an export on its filesystem:
/// `None` if the file is gone (deleted behind the server's back).
fn open_key(fs: &ExportFs, key: &FileKey) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    let kernel = KernelHandle {
        handle_type: key.handle_type,
        bytes: key.handle.clone(),
    };
    match fs.open_inode(&kernel) {
        Ok(fd) => Ok(Some(fd)),
        Err(FsError::Stale) => Ok(None),
        Err(e) => Err(std::io::Error::other(format!("{e:?}"))),
    }
}

/// Before the server stops (every connection closed): each open file with
/// checksums gets a last COMMIT that leaves its intent-log regions clean,
/// so the next start has nothing to recompute. Regions a call still in
/// flight is writing stay dirty and are recomputed then.
pub fn commit_before_stop(store: &Arc<Store>, exports: &Exports) {
    // The open files are the server-wide cache's, and any data plane
    // commits any of them: one of an integrity export if one is served,
    // else another, for the files integrity exports a reload removed left
    // open.
    let Some(export) = exports
        .iter()
        .find(|x| x.config.integrity == Integrity::Crc32c)
        .or_else(|| exports.first())
    else {
        return;
    };
    let (mut files, mut failed) = (0, 0);
    for file in export.fs.open_file_cache().open_files() {
        if file.data().integrity().is_none() {
            continue;
        }
        files += 1;
        if let Err(e) = export.data.commit_before_stop(file.data()) {
            failed += 1;
            warn!(file = %file.data().label(), error = %e,
                "cannot commit a file before stopping; its checksums are recomputed at the next start");
        }
    }
    if files > 0 {
        info!(
            files,
            failed, "integrity: open files committed before stopping"
        );
    }
    // And those written without COMMIT and closed since.
    let closed = settle(store, exports, None);
    if closed > 0 {
        info!(
            files = closed,
            "integrity: files written without COMMIT made durable before stopping"
        );
    }
}

/// A region of the intent log no write has touched for this long is made
/// durable with its checksums by the server itself ([`settle`]).
pub const SETTLE_AFTER: Duration = Duration::from_secs(10);

/// Makes durable, with their checksums, the files that have regions in the
/// intent log no write touched for `idle` (`None`: every region no write
/// is in, as the server stops), as a COMMIT of each would; returns how
/// many files were settled. A client that wrote and never committed (it
/// crashed, or closed its files without COMMIT) left those regions dirty
/// until the next start, which recomputed each from whatever the disk held
/// then: rot meanwhile adopted unseen, and a start held up by every
/// region of every file so left (a clean stop committed only the files
/// still open). Runs on a blocking thread, as root.
pub fn settle(store: &Arc<Store>, exports: &Exports, idle: Option<Duration>) -> usize {
    let files = store.idle_dirty_files(idle.unwrap_or(Duration::ZERO));
    if files.is_empty() {
        return 0;
    }
    let mut settled = 0;
    for key in files {
        // (No export on its filesystem any more, after a reload: the next
        // start recovers it.)
        let Some(export) = exports.iter().find(|x| x.fs.fs_id() == key.fs_id) else {
            continue;
        };
        let result = open_key(&export.fs, &key).and_then(|fd| match fd {
            Some(fd) => {
                let sync = || export.data.sync_closed_file(fd.as_fd());
                store.settle(key.clone(), fd.as_fd(), idle.is_none(), sync)
            }
            None => {
                store.forget_dirty(&key);
                Ok(false)
            }
        });
        match result {
            Ok(true) => settled += 1,
            Ok(false) => {}
            Err(e) => {
                static WARNED: LogEvery = LogEvery::new(Duration::from_secs(60));
                if WARNED.due() {
                    warn!(export = %export.config.path.display(), file = %key, error = %e,
                        "integrity: cannot make a file written without \
                        COMMIT durable with its checksums (a failed data sync moves the write \
                        verifier, so that clients send their uncommitted data again); tried again \
                        in a few seconds, repeats within a minute are not logged");
                }
            }
        }
    }
    debug!(
        settled,
        "integrity: files written without COMMIT made durable with their checksums"
    );
    settled
}

/// Every [`SETTLE_AFTER`] / 2, [`settle`] what has been idle for
/// [`SETTLE_AFTER`], one round at a time, off the runtime's workers,
/// through the exports `served` gives then (a reload changes them).
pub async fn settle_idle(
    store: Arc<Store>,
    served: impl Fn() -> Arc<Exports> + Send + Sync + 'static,
) {
    let mut tick = tokio::time::interval(SETTLE_AFTER / 2);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let served = Arc::new(served);
    loop {
        tick.tick().await;
        let (store, served) = (store.clone(), served.clone());
        let _ = tokio::task::spawn_blocking(move || settle(&store, &served(), Some(SETTLE_AFTER)))
            .await;
    }
}
