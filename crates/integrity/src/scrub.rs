//! Scrubbing one file: every block read from the device (`O_DIRECT` where
//! the file allows it, so the page cache cannot hide what the disk holds)
//! and checked against its stored checksum. `dionfs scrub` walks an export
//! and calls [`scrub_file`] for each regular file.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use dionfs_sys::buf::AlignedBuf;

use crate::{FileKey, Mismatch, Store, BLOCK};

/// Bytes read at a time.
const CHUNK: usize = 1 << 20;

/// What scrubbing one file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileResult {
    /// Every block checked; these did not match.
    Verified {
        /// Blocks checked.
        blocks: u64,
        /// Blocks whose data does not match their checksum.
        bad: Vec<Mismatch>,
    },
    /// The file was changed behind the server's back: not verified;
    /// rebuilt if asked.
    Stale {
        /// Whether its checksums were rebuilt (`--repair-metadata`).
        rebuilt: bool,
    },
    /// The file has data but no checksums at all (never written through
    /// an integrity export, or the store is not the one its server keeps):
    /// not verified; computed from its data if asked.
    Unchecked {
        /// Whether its checksums were computed (`--repair-metadata`).
        rebuilt: bool,
    },
}

/// Scrubs the file at `path` whose identity is `key`. With `repair`, a
/// file changed behind the server's back, or never checksummed, gets its
/// checksums rebuilt from its data. `progress` gets the bytes checked.
pub fn scrub_file(
    store: &Arc<Store>,
    key: FileKey,
    path: &Path,
    repair: bool,
    progress: &mut dyn FnMut(u64),
) -> io::Result<FileResult> {
    let buffered = File::open(path)?;
    let Some(sums) = store.open_existing(key.clone(), buffered.as_fd())? else {
        // Never written through an integrity export and empty: nothing to
        // check; otherwise it has no checksums yet.
        let size = buffered.metadata()?.len();
        if size == 0 {
            return Ok(FileResult::Verified {
                blocks: 0,
                bad: Vec::new(),
            });
        }
        if repair {
            store
                .open_file(key, buffered.as_fd())?
                .rebuild(buffered.as_fd())?;
        }
        progress(size);
        return Ok(FileResult::Unchecked { rebuilt: repair });
    };
    if sums.is_stale() {
        let size = buffered.metadata()?.len();
        let rebuilt = if repair {
            sums.rebuild(buffered.as_fd())?;
            true
        } else {
            false
        };
        progress(size);
        return Ok(FileResult::Stale { rebuilt });
    }
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok();
    let data = direct.as_ref().unwrap_or(&buffered);
    let mut buf = AlignedBuf::new(CHUNK, BLOCK as usize)?;
    let mut bad = Vec::new();
    let blocks = match sums.verify_all(data.as_fd(), &mut buf, &mut |m| bad.push(m), progress) {
        Err(e) if direct.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
            // The file's direct-I/O alignment is larger than a block.
            bad.clear();
            sums.verify_all(buffered.as_fd(), &mut buf, &mut |m| bad.push(m), progress)?
        }
        other => other?,
    };
    Ok(FileResult::Verified { blocks, bad })
}
