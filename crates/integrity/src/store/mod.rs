//! The checksum store and the checksum state of one open file.
//!
//! # On disk (under `<state_dir>/integrity/`)
//! - `files/<ab>/<32 hex>.crc`: one sparse file per inode, named by a hash
//!   of its [`FileKey`] (filesystem id + kernel file handle, which holds
//!   the inode number and generation): a 64-byte header, then one
//!   little-endian `u32` per 4 KiB block at `64 + 4 * block`, holding
//!   `crc32c(block) ^ crc32c(zero block)` (so a never-written entry means
//!   "zeros", see the crate documentation). 4 bytes per 4096: 0.1% of the
//!   data, plus the header's block for each file.
//! - `intent.log`: see `log.rs`.
//! - `lock`: `flock`ed by the one process (server or scrub) using the store.
//!
//! The header of a checksum file is `header.rs`'s.
//!
//! # Changes behind the server's back
//! The header records the file's [`Version`] (mtime and size) as of the
//! server's last change. A file whose version moved while the server was
//! not writing it (checked when it is opened, and whenever a server write
//! starts with no other in flight) was changed by someone else: its
//! checksums are *stale*, and a mismatch in a stale file rebuilds the
//! file's checksums from its data instead of being reported. `ctime` is not
//! used: it also moves on chmod, rename and link, which leave the data
//! alone.
//!
//! # Layout
//! - this file: [`Store`], the store of a server (or of `dionfs scrub`):
//!   opening it, one checksum state per open file ([`Store::shared`]),
//!   settling and removing files' checksums;
//! - `sums.rs`: [`FileSums`], the checksum state of one open file (writes,
//!   verification, rebuilds, truncate, COMMIT), and its tickets;
//! - `recovery.rs`: crash recovery ([`Store::recover`]);
//! - `sweep.rs`: finding the checksums of deleted files ([`Store::sweep`]);
//! - `header.rs`: the header of a checksum file;
//! - `data.rs`: reading a data file (whole reads, its data extents).

mod data;
mod header;
mod recovery;
mod sums;
mod sweep;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use dionfs_sys::private;
use parking_lot::{Condvar, Mutex};

pub use data::is_file_deleted;
pub use recovery::RecoveryReport;
pub use sums::{CommitTicket, FileSums, Mismatch, WriteTicket};
pub use sweep::SweepReport;

use crate::cache::PageCache;
use crate::log::IntentLog;
use crate::{Checksummer, FileKey, Order};
use sums::Open;

/// How long [`Store::shared`] waits for a closing state of a file.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The checksum store of a server (or of `dionfs scrub`): see the module
/// documentation.
pub struct Store {
    dir: PathBuf,
    _lock: File,
    cache: PageCache,
    log: IntentLog,
    checksummer: Checksummer,
    next_generation: AtomicU64,
    /// Regions named by the log at open, until [`Store::recover`].
    to_recover: Mutex<Vec<(FileKey, u64)>>,
    /// The checksum state of every file open now, so that opening a file
    /// again while it is open shares that state (see [`Store::shared`]).
    /// An entry that no longer upgrades is a state being dropped: its
    /// header is not written yet.
    open_sums: Mutex<HashMap<[u8; 16], Weak<FileSums>>>,
    /// Notified when a dropped state has written its header and left
    /// `open_sums`.
    sums_closed: Condvar,
    /// The origin of the times in `paces` and `FileSums::rebuild_not_before`.
    born: std::time::Instant,
    /// The rebuild paces of files ([`FileSums::pace_rebuilds`]) not yet
    /// passed, so that a file closed and opened again (an open-file cache
    /// too small for the files in use) keeps its pace.
    paces: Mutex<HashMap<[u8; 16], u64>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("dir", &self.dir).finish()
    }
}

impl Store {
    /// Default size of the checksum page cache: 4096 pages of 4 KiB (16
    /// MiB of memory for the checksums of 16 GiB of data).
    pub const DEFAULT_CACHE_PAGES: usize = 4096;

    /// Whether `dir` holds a store ([`Store::open`] made it): `dionfs
    /// scrub` refuses a directory that does not, rather than create an
    /// empty store there and find nothing to check.
    pub fn exists(dir: &Path) -> bool {
        dir.join("files").is_dir()
    }

    /// Opens (creating) the store in `dir`, locked against any other
    /// process; the regions its intent log names wait for
    /// [`Store::recover`].
    pub fn open(dir: &Path, cache_pages: usize, order: Order) -> io::Result<Arc<Store>> {
        private::create_dir_all(&dir.join("files"))?;
        let lock = private::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |e| {
                io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{} is in use by another dionfs process (serve or scrub): {e}",
                        dir.display()
                    ),
                )
            },
        )?;
        let (log, to_recover) = IntentLog::open(&dir.join("intent.log"))?;
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(4);
        Ok(Arc::new(Store {
            dir: dir.to_path_buf(),
            _lock: lock,
            cache: PageCache::new(cache_pages),
            log,
            checksummer: Checksummer::new(threads, order),
            next_generation: AtomicU64::new(1),
            to_recover: Mutex::new(to_recover),
            open_sums: Mutex::default(),
            sums_closed: Condvar::new(),
            born: std::time::Instant::now(),
            paces: Mutex::default(),
        }))
    }

    /// Where the store lives.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Computes write checksums alongside the data write.
    pub fn checksummer(&self) -> &Checksummer {
        &self.checksummer
    }

    /// The regions the intent log named at open that are not recovered yet.
    pub fn pending_recovery(&self) -> usize {
        self.to_recover.lock().len()
    }

    /// Crash recovery: recomputes from the data on disk the checksums of
    /// every region the intent log named at open, clamps each such file's
    /// checksums to its size, makes them durable and empties the log. Call
    /// it before serving. `open` opens a file by key (read-only), `None`
    /// if it no longer exists, an error if it cannot be reached.
    pub fn recover(
        self: &Arc<Self>,
        open: &mut dyn FnMut(&FileKey) -> io::Result<Option<OwnedFd>>,
    ) -> io::Result<RecoveryReport> {
        recovery::recover(self, open)
    }

    /// The checksum state of the open file `data` (identified by `key`),
    /// creating its checksum file if it has none.
    pub fn open_file(
        self: &Arc<Self>,
        key: FileKey,
        data: BorrowedFd<'_>,
    ) -> io::Result<Arc<FileSums>> {
        self.shared(key, data, Open::Create)?
            .ok_or_else(|| io::Error::other("no checksum file"))
    }

    /// [`Store::open_file`] without creating: `None` if the file has no
    /// checksums (scrub).
    pub fn open_existing(
        self: &Arc<Self>,
        key: FileKey,
        data: BorrowedFd<'_>,
    ) -> io::Result<Option<Arc<FileSums>>> {
        self.shared(key, data, Open::Existing)
    }

    /// One checksum state per file: the one open now if there is one, else
    /// a new one read from the file's header. A state being dropped is
    /// waited for first: its drop writes the header (the data's version
    /// after the server's last change), and a new state that read the
    /// header before that would take the server's own writes since the
    /// last header for a change behind its back, and distrust its
    /// checksums. (The server's open-file cache opens a file again while
    /// the last request holding its earlier open may still be dropping it:
    /// with a cache of one file and three files in use, two of three
    /// IOR-style files were found changed behind the server's back,
    /// scratch `stress.sh`.)
    fn shared(
        self: &Arc<Self>,
        key: FileKey,
        data: BorrowedFd<'_>,
        how: Open,
    ) -> io::Result<Option<Arc<FileSums>>> {
        let id = key.id();
        let mut open = self.open_sums.lock();
        while let Some(state) = open.get(&id) {
            if let Some(sums) = state.upgrade() {
                return Ok(Some(sums));
            }
            // A drop writes a header and leaves: far less than this, unless
            // the state directory's disk hangs (or a drop never ended).
            if self.sums_closed.wait_for(&mut open, CLOSE_WAIT).timed_out()
                && open.get(&id).is_some_and(|s| s.strong_count() == 0)
            {
                tracing::warn!(file = %key, "a file's checksum state took over {} s \
                    to close; opening it again without waiting (it may be taken for changed \
                    behind the server's back)", CLOSE_WAIT.as_secs());
                open.remove(&id);
            }
        }
        // Under the lock: no other state of this file can start meanwhile
        // (an open reads a header and makes a file, nothing that waits).
        let Some(mut sums) = crate::as_server(|| FileSums::open(self, key, data, how))? else {
            return Ok(None);
        };
        sums.registered = true;
        let sums = Arc::new(sums);
        open.insert(id, Arc::downgrade(&sums));
        Ok(Some(sums))
    }

    /// Finds the checksum files whose file no longer exists (deleted
    /// behind the server's back; a REMOVE through NFS frees them at once):
    /// `exists` says whether a key's file does (an error: cannot tell, for
    /// instance no export on its filesystem). Removes them if `remove`.
    /// Run it offline (the store locked, no server using it).
    pub fn sweep(
        &self,
        exists: &mut dyn FnMut(&FileKey) -> io::Result<bool>,
        remove: bool,
    ) -> io::Result<SweepReport> {
        sweep::sweep(self, exists, remove)
    }

    /// The files that have a region of the intent log no write has touched
    /// for `idle`: the files a client wrote and never sent a COMMIT for
    /// (it crashed, or closes files without committing), which
    /// [`Store::settle`] makes durable. Left dirty, each region would be
    /// recomputed at the next start, from whatever the disk holds then
    /// (rot there adopted unseen), and the log would keep growing.
    pub fn idle_dirty_files(&self, idle: std::time::Duration) -> Vec<FileKey> {
        self.log.idle_files(idle)
    }

    /// What a COMMIT does for the checksums, for a file no client commits:
    /// syncs its data (`sync_data`, an `fdatasync` of `data`, any
    /// descriptor of it) and then its checksums, and marks clean its
    /// regions no write touched meanwhile (`all`: however recently written,
    /// as before the server stops; else those idle for the last 5 s, as a
    /// COMMIT does). Returns whether there was anything to settle: a file
    /// whose checksum file is gone (removed by hand) is forgotten instead.
    pub fn settle(
        self: &Arc<Self>,
        key: FileKey,
        data: BorrowedFd<'_>,
        all: bool,
        sync_data: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<bool> {
        let Some(sums) = self.open_existing(key.clone(), data)? else {
            self.forget_dirty(&key);
            return Ok(false);
        };
        let ticket = if all {
            sums.final_commit_ticket()
        } else {
            sums.commit_ticket()
        };
        sync_data()?;
        sums.commit(ticket)?;
        Ok(true)
    }

    /// The file of `key` is gone (deleted behind the server's back):
    /// nothing of it needs recovering.
    pub fn forget_dirty(&self, key: &FileKey) {
        self.log.forget(key.id());
    }

    /// Frees the checksums of a file that lost its last name.
    pub fn remove(&self, key: &FileKey) {
        self.log.forget(key.id());
        let path = self.dir.join(key.relative_path());
        match crate::as_server(|| std::fs::remove_file(&path)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(file = %key, error = %e, "cannot remove a file's checksums"),
        }
    }

    fn new_generation(&self) -> u64 {
        self.next_generation.fetch_add(1, Ordering::Relaxed)
    }

    /// `t` in nanoseconds since the store was opened (at least 1).
    fn nanos(&self, t: std::time::Instant) -> u64 {
        let n = t.saturating_duration_since(self.born).as_nanos();
        u64::try_from(n).unwrap_or(u64::MAX).max(1)
    }
}
