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
//! Header (little endian): `magic "DIONCRC1" | block size u32 | flags u32
//! (1 = stale) | mtime seconds i64 | mtime nanoseconds u32 | 0 u32 | size
//! u64 | 0 u8 x20 | crc32c u32` of the 60 bytes before it.
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

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use dionfs_sys::io::{preadv2, RwFlags};
use dionfs_sys::private;
use parking_lot::{Condvar, Mutex};

use crate::cache::{Page, PageCache, PAGE_ENTRIES};
use crate::log::{CleanTicket, IntentLog, REGION_BLOCKS};
use crate::{
    block_ceil, block_crc, block_crcs, block_floor, zero_block_crc, Checksummer, Order, BLOCK,
};

const MAGIC: &[u8; 8] = b"DIONCRC1";
const HEADER_LEN: u64 = 64;
const FLAG_STALE: u32 = 1;
/// The extended attribute of a checksum file that names its file's key.
const KEY_XATTR: &str = "user.dionfs.key";
/// Bytes read at a time when checksumming a file's data.
const READ_CHUNK: usize = 1 << 20;

/// The identity of an inode: its filesystem and its kernel file handle.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    /// The filesystem (as the open-file cache keys it).
    pub fs_id: u64,
    /// `name_to_handle_at`'s handle type.
    pub handle_type: i32,
    /// `name_to_handle_at`'s handle bytes (inode number and generation).
    pub handle: Vec<u8>,
}

impl FileKey {
    /// 128 bits of a hash of the key: the store file's name.
    pub fn id(&self) -> [u8; 16] {
        let mut h = blake3::Hasher::new();
        h.update(&self.fs_id.to_le_bytes());
        h.update(&self.handle_type.to_le_bytes());
        h.update(&self.handle);
        let mut id = [0u8; 16];
        id.copy_from_slice(&h.finalize().as_bytes()[..16]);
        id
    }

    /// Names the file a checksum file belongs to in the checksum file
    /// itself ([`KEY_XATTR`]), so that [`Store::sweep`] can tell whether
    /// it still exists. Best effort: a filesystem without user xattrs
    /// only loses the sweep.
    fn write_xattr(&self, file: &File) {
        let mut v = Vec::with_capacity(12 + self.handle.len());
        v.extend_from_slice(&self.fs_id.to_le_bytes());
        v.extend_from_slice(&self.handle_type.to_le_bytes());
        v.extend_from_slice(&self.handle);
        if let Err(e) = rustix::fs::fsetxattr(file, KEY_XATTR, &v, rustix::fs::XattrFlags::empty())
        {
            tracing::debug!(file = ?self, error = %e, "cannot name the file in its checksum file");
        }
    }

    /// The key [`FileKey::write_xattr`] stored on `file`, if any.
    fn read_xattr(file: &File) -> Option<FileKey> {
        let mut v = vec![0u8; 12 + 256];
        let n = rustix::fs::fgetxattr(file, KEY_XATTR, &mut v).ok()?;
        let v = v.get(..n)?;
        if v.len() < 12 {
            return None;
        }
        let mut fs_id = [0u8; 8];
        fs_id.copy_from_slice(&v[..8]);
        let mut handle_type = [0u8; 4];
        handle_type.copy_from_slice(&v[8..12]);
        Some(FileKey {
            fs_id: u64::from_le_bytes(fs_id),
            handle_type: i32::from_le_bytes(handle_type),
            handle: v[12..].to_vec(),
        })
    }

    fn relative_path(&self) -> PathBuf {
        let hex: String = self.id().iter().map(|b| format!("{b:02x}")).collect();
        PathBuf::from("files")
            .join(&hex[..2])
            .join(format!("{hex}.crc"))
    }
}

/// What a file's data looked like after the server's last change of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Version {
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Size in bytes.
    pub size: u64,
}

impl Version {
    /// The version of the open file `fd` now.
    pub fn of(fd: BorrowedFd<'_>) -> io::Result<Version> {
        let st = rustix::fs::fstat(fd)?;
        Ok(Version {
            mtime_sec: st.st_mtime,
            mtime_nsec: st.st_mtime_nsec as u32,
            size: st.st_size as u64,
        })
    }
}

struct Header {
    stale: bool,
    version: Version,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut h = [0u8; HEADER_LEN as usize];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&(BLOCK as u32).to_le_bytes());
        let flags = if self.stale { FLAG_STALE } else { 0 };
        h[12..16].copy_from_slice(&flags.to_le_bytes());
        h[16..24].copy_from_slice(&self.version.mtime_sec.to_le_bytes());
        h[24..28].copy_from_slice(&self.version.mtime_nsec.to_le_bytes());
        h[32..40].copy_from_slice(&self.version.size.to_le_bytes());
        let crc = crate::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h
    }

    fn decode(h: &[u8]) -> Option<Header> {
        if h.len() < HEADER_LEN as usize || &h[..8] != MAGIC {
            return None;
        }
        let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(b)
        };
        if crate::crc32c(&h[..60]) != u32_at(60) || u32_at(8) as u64 != BLOCK {
            return None;
        }
        Some(Header {
            stale: u32_at(12) & FLAG_STALE != 0,
            version: Version {
                mtime_sec: u64_at(16) as i64,
                mtime_nsec: u32_at(24),
                size: u64_at(32),
            },
        })
    }
}

/// A block whose data does not match its checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// Block index (file offset / 4096).
    pub block: u64,
    /// The checksum stored for it.
    pub expected: u32,
    /// The checksum of the data read.
    pub found: u32,
}

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
        let records = std::mem::take(&mut *self.to_recover.lock());
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
                    self.remove(&key);
                    report.gone += 1;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(file = ?key, error = %e,
                        "integrity recovery: cannot open a file the intent log names; its checksums stay as they are");
                    report.failed += 1;
                    continue;
                }
            };
            match FileSums::open(self, key.clone(), data.as_fd(), Open::Recover).and_then(|sums| {
                let sums = sums.ok_or_else(|| io::Error::other("no checksum file"))?;
                sums.recover_regions(data.as_fd(), &regions)
            }) {
                Ok(blocks) => {
                    report.files += 1;
                    report.blocks += blocks;
                }
                Err(e) if is_file_deleted(&e) => {
                    self.remove(&key);
                    report.gone += 1;
                }
                Err(e) => {
                    tracing::warn!(file = ?key, error = %e, "integrity recovery of a file failed");
                    report.failed += 1;
                }
            }
        }
        self.log.reset()?;
        Ok(report)
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
                tracing::warn!(file = ?key, "a file's checksum state took over {CLOSE_WAIT:?} \
                    to close; opening it again without waiting (it may be taken for changed \
                    behind the server's back)");
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
        let mut report = SweepReport::default();
        let files = self.dir.join("files");
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
                let Some(key) = key.filter(|k| self.dir.join(k.relative_path()) == path) else {
                    report.unknown += 1;
                    continue;
                };
                match exists(&key) {
                    Ok(true) => {}
                    Ok(false) => {
                        report.orphans += 1;
                        if remove {
                            self.remove(&key);
                        }
                    }
                    Err(_) => report.unknown += 1,
                }
            }
        }
        Ok(report)
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
            Err(e) => tracing::warn!(file = ?key, error = %e, "cannot remove a file's checksums"),
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

#[cfg(test)]
thread_local! {
    /// Runs once, on the rebuilding thread, after a rebuild's pass over
    /// the data (a test's local write racing it).
    static AFTER_REBUILD_PASS: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Runs once, on the rebuilding thread, right after a rebuild wiped
    /// the entries (a test cutting it short there).
    static AFTER_REBUILD_WIPE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Runs once, on the recomputing thread, after a chunk's checksums
    /// are stored (a test deleting the file mid-pass).
    static AFTER_RECOMPUTE_CHUNK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// The checksum state of one open regular file. Owned by the data plane's
/// `DataFile` (one per inode), whose range locks order every call: see
/// each method for the lock it expects.
pub struct FileSums {
    store: Arc<Store>,
    key: FileKey,
    id: [u8; 16],
    file: File,
    /// The key of this file's pages in the page cache; replaced whenever
    /// cached pages may be out of date.
    generation: AtomicU64,
    /// Serialises page loads with page updates (see `cache.rs`).
    load: Mutex<()>,
    version: Mutex<VersionState>,
    /// In the store's `open_sums` (see [`Store::shared`]); states opened
    /// for recovery, or dropped before they were shared, are not.
    registered: bool,
    /// The last rebuild of the checksums failed (`VersionState` has when).
    rebuild_failing: AtomicBool,
    /// Whether a rebuild is wanted or running (`REBUILD_*`): see
    /// [`FileSums::want_rebuild`].
    rebuild: AtomicU8,
    /// See [`FileSums::pace_rebuilds`]: nanoseconds since the store was
    /// opened, 0 for none.
    rebuild_not_before: AtomicU64,
    /// See [`FileSums::rebuilds_ended`].
    rebuilds_ended: AtomicU64,
}

/// [`FileSums::rebuild`]'s states: none wanted, wanted and not yet
/// claimed, claimed (queued or running).
const REBUILD_IDLE: u8 = 0;
const REBUILD_WANTED: u8 = 1;
const REBUILD_CLAIMED: u8 = 2;

struct VersionState {
    /// The data's version after the server's last change.
    recorded: Version,
    /// The checksums cannot be trusted (changed behind the server's back,
    /// or never computed).
    stale: bool,
    /// Server changes of the data between begin and end.
    in_flight: u32,
    /// When rebuilding the stale checksums last failed (the store's
    /// filesystem full): until [`REBUILD_RETRY`] after it the file is
    /// [`FileSums::unverifiable`].
    rebuild_failed: Option<std::time::Instant>,
}

/// How long after a failed rebuild of a file's checksums its READs are
/// answered unchecked before a READ tries the rebuild again.
pub const REBUILD_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for FileSums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSums").field("key", &self.key).finish()
    }
}

/// How long [`Store::shared`] waits for a closing state of a file.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A write of whole blocks in progress (see [`FileSums::begin_write`]).
/// Dropping it without [`WriteTicket::finish`] leaves the stored
/// checksums as they were: use [`WriteTicket::recompute`] after a failed
/// write.
#[must_use]
pub struct WriteTicket<'a> {
    sums: &'a FileSums,
    data: BorrowedFd<'a>,
    blocks: Range<u64>,
    regions: Range<u64>,
}

/// What [`Store::sweep`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    /// Checksum files of files that no longer exist (removed if asked).
    pub orphans: u64,
    /// Checksum files whose file could not be checked (no name recorded,
    /// or no export on its filesystem).
    pub unknown: u64,
}

/// How [`FileSums::open`] opens a checksum file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Creating it if missing.
    Create,
    /// Only if it exists.
    Existing,
    /// For crash recovery (creating it if missing).
    Recover,
}

/// Taken by COMMIT before it syncs the data: see [`FileSums::commit`].
#[derive(Debug)]
pub struct CommitTicket(CleanTicket);

impl FileSums {
    fn open(
        store: &Arc<Store>,
        key: FileKey,
        data: BorrowedFd<'_>,
        how: Open,
    ) -> io::Result<Option<FileSums>> {
        let create = how != Open::Existing;
        let path = store.dir.join(key.relative_path());
        let mut options = private::options();
        options.read(true).write(true).truncate(false);
        if create {
            if let Some(parent) = path.parent() {
                private::create_dir_all(parent)?;
            }
            options.create(true);
        }
        let file = match options.open(&path) {
            Ok(f) => f,
            Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let now = Version::of(data)?;
        let (got, header) = read_header(&file)?;
        let (recorded, stale) = match header {
            // Recovery: the log explains a moved version.
            Some(h) if how == Open::Recover => (h.version, h.stale),
            Some(h) => {
                let stale = h.stale || h.version != now;
                if stale && !h.stale {
                    tracing::info!(file = ?key, "file changed behind the server's back since its \
                        checksums were recorded; they will be rebuilt from its data if a READ finds a mismatch");
                }
                (h.version, stale)
            }
            // New (or unreadable): an empty file has all its checksums;
            // any other has none yet.
            None => (now, now.size > 0),
        };
        // A pace set while the file was open before (see `pace_rebuilds`).
        let pace = store.paces.lock().get(&key.id()).copied().unwrap_or(0);
        let sums = FileSums {
            id: key.id(),
            key,
            store: store.clone(),
            file,
            generation: AtomicU64::new(store.new_generation()),
            load: Mutex::new(()),
            version: Mutex::new(VersionState {
                recorded,
                stale,
                in_flight: 0,
                rebuild_failed: None,
            }),
            registered: false,
            rebuild_failing: AtomicBool::new(false),
            rebuild: AtomicU8::new(REBUILD_IDLE),
            rebuild_not_before: AtomicU64::new(pace),
            rebuilds_ended: AtomicU64::new(0),
        };
        if got == 0 {
            // (Recovery writes it once done, and first looks at what the
            // crash left of it: `recover_regions`.)
            if how != Open::Recover {
                sums.write_header()?;
            }
            sums.key.write_xattr(&sums.file);
        }
        Ok(Some(sums))
    }

    /// The file's identity.
    pub fn key(&self) -> &FileKey {
        &self.key
    }

    /// Computes write checksums alongside the data write (the store's).
    pub fn checksummer(&self) -> &Checksummer {
        &self.store.checksummer
    }

    /// Whether the checksums are untrusted until rebuilt (see the module
    /// documentation).
    pub fn is_stale(&self) -> bool {
        self.version.lock().stale
    }

    fn write_header(&self) -> io::Result<()> {
        self.write_header_marked(false)
    }

    /// [`FileSums::write_header`], saying stale if `stale` even while the
    /// checksums are trusted in memory.
    fn write_header_marked(&self, stale: bool) -> io::Result<()> {
        let v = self.version.lock();
        let header = Header {
            stale: v.stale || stale,
            version: v.recorded,
        };
        drop(v);
        self.file.write_all_at(&header.encode(), 0)
    }

    /// Before the server writes the block-aligned byte range `range` of the
    /// file `data` (under its exclusive range lock): checks for changes
    /// behind the server's back and records the range's regions in the
    /// intent log, durably.
    pub fn begin_write<'a>(
        &'a self,
        data: BorrowedFd<'a>,
        range: Range<u64>,
    ) -> io::Result<WriteTicket<'a>> {
        let blocks = range.start / BLOCK..range.end.div_ceil(BLOCK);
        let last_block = blocks.end.max(blocks.start + 1) - 1;
        let regions = blocks.start / REGION_BLOCKS..last_block / REGION_BLOCKS + 1;
        self.version_begin(data)?;
        if let Err(e) = self.store.log.begin(self.id, &self.key, regions.clone()) {
            self.version_end(data);
            return Err(e);
        }
        Ok(WriteTicket {
            sums: self,
            data,
            blocks,
            regions,
        })
    }

    /// [`FileSums::begin_write`] for a caller that must not block (an
    /// async task writing through io_uring): `None` unless the intent log
    /// already holds every region of `range` durably, so that nothing has
    /// to be written or synced first. Costs one `statx` of the open file.
    pub fn try_begin_write<'a>(
        &'a self,
        data: BorrowedFd<'a>,
        range: Range<u64>,
    ) -> Option<io::Result<WriteTicket<'a>>> {
        let blocks = range.start / BLOCK..range.end.div_ceil(BLOCK);
        let last_block = blocks.end.max(blocks.start + 1) - 1;
        let regions = blocks.start / REGION_BLOCKS..last_block / REGION_BLOCKS + 1;
        self.store.log.try_begin(self.id, regions.clone())?;
        if let Err(e) = self.version_begin(data) {
            self.store.log.end(self.id, regions);
            return Some(Err(e));
        }
        Some(Ok(WriteTicket {
            sums: self,
            data,
            blocks,
            regions,
        }))
    }

    fn version_begin(&self, data: BorrowedFd<'_>) -> io::Result<()> {
        let mut v = self.version.lock();
        if v.in_flight == 0 && !v.stale {
            // Nothing of ours is changing the file: if its version moved,
            // someone else changed it.
            let now = Version::of(data)?;
            if now != v.recorded {
                tracing::info!(file = ?self.key, "file changed behind the server's back; \
                    its checksums will be rebuilt from its data if a READ finds a mismatch");
                v.stale = true;
            }
        }
        v.in_flight += 1;
        Ok(())
    }

    fn version_end(&self, data: BorrowedFd<'_>) {
        let mut v = self.version.lock();
        v.in_flight = v.in_flight.saturating_sub(1);
        if v.in_flight == 0 {
            if let Ok(now) = Version::of(data) {
                v.recorded = now;
            }
        }
    }

    /// The stored checksums of blocks `first..first + n`.
    fn stored(&self, first: u64, n: usize) -> io::Result<Vec<u32>> {
        let mut out = Vec::with_capacity(n);
        let generation = self.generation.load(Ordering::Acquire);
        let mut block = first;
        let end = first + n as u64;
        while block < end {
            let page_index = block / PAGE_ENTRIES;
            let page = self.page(generation, page_index)?;
            let page_end = ((page_index + 1) * PAGE_ENTRIES).min(end);
            for b in block..page_end {
                out.push(page.get((b % PAGE_ENTRIES) as usize));
            }
            block = page_end;
        }
        Ok(out)
    }

    fn page(&self, generation: u64, index: u64) -> io::Result<Arc<Page>> {
        if let Some(page) = self.store.cache.get(generation, index) {
            return Ok(page);
        }
        let _load = self.load.lock();
        if let Some(page) = self.store.cache.get(generation, index) {
            return Ok(page);
        }
        let mut bytes = vec![0u8; (PAGE_ENTRIES * 4) as usize];
        let got = read_full(
            &self.file,
            &mut bytes,
            HEADER_LEN + index * PAGE_ENTRIES * 4,
        )?;
        let page = Arc::new(Page::from_bytes(&bytes[..got]));
        self.store.cache.insert(generation, index, page.clone());
        Ok(page)
    }

    /// Stores the checksums `crcs` of blocks `first..`: to the checksum
    /// file, then to cached pages.
    fn store_crcs(&self, first: u64, crcs: &[u32]) -> io::Result<()> {
        let zero = zero_block_crc();
        let bytes: Vec<u8> = crcs.iter().flat_map(|c| (c ^ zero).to_le_bytes()).collect();
        self.file.write_all_at(&bytes, HEADER_LEN + first * 4)?;
        let generation = self.generation.load(Ordering::Acquire);
        let _load = self.load.lock();
        // One cache lookup per page the write touches, not per block.
        let end = first + crcs.len() as u64;
        let mut block = first;
        while block < end {
            let page_index = block / PAGE_ENTRIES;
            let page_end = ((page_index + 1) * PAGE_ENTRIES).min(end);
            if let Some(page) = self.store.cache.get(generation, page_index) {
                for b in block..page_end {
                    page.set(
                        (b % PAGE_ENTRIES) as usize,
                        crcs[(b - first) as usize] ^ zero,
                    );
                }
            }
            block = page_end;
        }
        Ok(())
    }

    /// Checks the consecutive blocks in `data`, the first being block
    /// `first_block` (the last may be short: the end of the file), against
    /// their stored checksums, under the READ's range lock. Returns the
    /// first mismatch.
    pub fn verify(&self, first_block: u64, data: &[u8]) -> io::Result<Option<Mismatch>> {
        let n = data.len().div_ceil(BLOCK as usize);
        let stored = self.stored(first_block, n)?;
        let zero = zero_block_crc();
        for (i, (chunk, entry)) in data.chunks(BLOCK as usize).zip(stored).enumerate() {
            let found = block_crc(chunk);
            if found != entry ^ zero {
                return Ok(Some(Mismatch {
                    block: first_block + i as u64,
                    expected: entry ^ zero,
                    found,
                }));
            }
        }
        Ok(None)
    }

    /// Runs `change`, a change the server itself makes to the file that
    /// moves its version (mtime, size) without touching its data, such as
    /// a SETATTR of the mtime, and takes the version after it as the
    /// server's own: so the checksums stay trusted, and a later mismatch
    /// is still reported as corruption rather than rebuilt away. If the
    /// file had already changed behind the server's back, its checksums
    /// become stale instead.
    pub fn server_change<T>(
        &self,
        data: BorrowedFd<'_>,
        change: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<T> {
        let mut v = self.version.lock();
        if !v.stale && v.in_flight == 0 && Version::of(data)? != v.recorded {
            v.stale = true;
        }
        let out = change()?;
        // With writes in flight, the last one to end records the version.
        if !v.stale && v.in_flight == 0 {
            v.recorded = Version::of(data)?;
        }
        Ok(out)
    }

    /// The stored checksums may no longer match the data (a write whose
    /// outcome nobody will see, such as one abandoned in flight): from
    /// now on a mismatch rebuilds them from the data instead of being
    /// reported, as for a file changed behind the server's back.
    pub fn distrust(&self) {
        if !std::mem::replace(&mut self.version.lock().stale, true) {
            tracing::info!(file = ?self.key, "a write's checksums were not stored; \
                the file's checksums will be rebuilt from its data if a READ finds a mismatch");
        }
    }

    /// The checksums are out of date and rebuilding them failed less than
    /// [`REBUILD_RETRY`] ago: READs are answered unchecked (a rebuild
    /// would have taken the data as it is).
    pub fn unverifiable(&self) -> bool {
        // Every READ asks: no lock unless a rebuild has failed.
        if !self.rebuild_failing.load(Ordering::Acquire) {
            return false;
        }
        let v = self.version.lock();
        v.stale
            && v.rebuild_failed
                .is_some_and(|at| at.elapsed() < REBUILD_RETRY)
    }

    /// After a mismatch: whether the file was changed behind the server's
    /// back (its checksums are stale, or its version moved while no server
    /// write was in flight), in which case its checksums must be rebuilt
    /// rather than the mismatch reported.
    pub fn changed_behind_back(&self, data: BorrowedFd<'_>) -> io::Result<bool> {
        let mut v = self.version.lock();
        if v.stale {
            return Ok(true);
        }
        if v.in_flight > 0 {
            return Ok(false);
        }
        if Version::of(data)? != v.recorded {
            v.stale = true;
            return Ok(true);
        }
        Ok(false)
    }

    /// A READ found a mismatch in a file changed behind the server's back
    /// ([`FileSums::changed_behind_back`]): asks for a rebuild of its
    /// checksums, unless one is wanted or claimed already. The rebuild is
    /// someone else's job ([`FileSums::claim_rebuild`]); until it is done
    /// the stale checksums answer nothing.
    pub fn want_rebuild(&self) {
        let _ = self.rebuild.compare_exchange(
            REBUILD_IDLE,
            REBUILD_WANTED,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Whether a rebuild is wanted and nobody has claimed it yet: one
    /// atomic load, for every READ to ask.
    pub fn rebuild_wanted(&self) -> bool {
        self.rebuild.load(Ordering::Acquire) == REBUILD_WANTED
    }

    /// Takes the wanted rebuild on: true for exactly one caller, who must
    /// call [`FileSums::rebuild_released`] when it is done with it.
    /// Not before the time [`FileSums::pace_rebuilds`] set: claimed
    /// first and given back if too early, so that a pace set by a rebuild
    /// that ran meanwhile is always seen.
    pub fn claim_rebuild(&self, now: std::time::Instant) -> bool {
        let claimed = self
            .rebuild
            .compare_exchange(
                REBUILD_WANTED,
                REBUILD_CLAIMED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok();
        if claimed && !self.rebuild_due(now) {
            self.rebuild.store(REBUILD_WANTED, Ordering::Release);
            return false;
        }
        claimed
    }

    /// Whether the file's pace lets a rebuild start at `now`: one atomic
    /// load (checked before a rebuild is claimed, by every READ of a file
    /// that wants one).
    pub fn rebuild_due(&self, now: std::time::Instant) -> bool {
        let not_before = self.rebuild_not_before.load(Ordering::Acquire);
        not_before == 0 || self.store.nanos(now) >= not_before
    }

    /// No rebuild is to be claimed before `not_before` (the caller's pace
    /// for a file rebuilt again and again).
    /// Kept by the store for as long as it lasts, should the file be
    /// closed and opened again meanwhile.
    pub fn pace_rebuilds(&self, not_before: std::time::Instant) {
        let at = self.store.nanos(not_before);
        self.rebuild_not_before.store(at, Ordering::Release);
        let now = self.store.nanos(std::time::Instant::now());
        let mut paces = self.store.paces.lock();
        paces.retain(|_, t| *t > now);
        paces.insert(self.id, at);
    }

    /// The claimed rebuild ran (`ran`: a mismatch found later asks for a
    /// new one), or was given up before it could run (still wanted).
    pub fn rebuild_released(&self, ran: bool) {
        let state = if ran { REBUILD_IDLE } else { REBUILD_WANTED };
        self.rebuild.store(state, Ordering::Release);
    }

    /// Recomputes every checksum of the file from its data, makes them
    /// durable and trusts them again. The caller holds the file's whole
    /// range, shared at least: no server write may run meanwhile, READs
    /// may (while the checksums are stale a READ's mismatch is no error,
    /// nor after a rebuild that ended since the READ read its data:
    /// [`FileSums::rebuilds_ended`]). Returns the number of blocks.
    pub fn rebuild(&self, data: BorrowedFd<'_>) -> io::Result<u64> {
        let rebuilt = self.try_rebuild(data);
        self.version.lock().rebuild_failed = rebuilt.is_err().then(std::time::Instant::now);
        self.rebuild_failing
            .store(rebuilt.is_err(), Ordering::Release);
        rebuilt
    }

    /// Every entry is set to that of a block of zeros first (the checksum
    /// file cut to its header and extended again, sparse), then only the
    /// blocks that hold data are read: a sparse file is rebuilt in time
    /// proportional to its data, not its size. (A READ of a 16 PiB file
    /// holding two bytes read its holes for days, holding the file's
    /// whole range.) Returns the number of data blocks read.
    fn try_rebuild(&self, data: BorrowedFd<'_>) -> io::Result<u64> {
        // The version the rebuild starts from is the one recorded: a local
        // write during it (past the blocks already recomputed) moves the
        // version on, so the next mismatch is taken for a change behind the
        // server's back again, not for corruption. (Recording the version
        // at the end took such a write's blocks for rotted.)
        let before = Version::of(data)?;
        let size = before.size;
        // Durably stale before the entries are wiped: a rebuild cut short
        // (the server stopped or crashed mid-pass; no call waits for one,
        // and a stop does not either) must leave checksums the next start
        // rebuilds, not trusts. The header may say trusted: a file whose
        // checksums were distrusted without its version moving.
        self.write_header_marked(true)?;
        self.file.sync_data()?;
        self.file.set_len(HEADER_LEN)?;
        self.file.set_len(HEADER_LEN + 4 * size.div_ceil(BLOCK))?;
        #[cfg(test)]
        AFTER_REBUILD_WIPE.with(|hook| hook.borrow_mut().take().map(|f| f()));
        let mut blocks = 0;
        for_each_data_extent(data, |extent| {
            blocks +=
                self.recompute_pass(data, extent.start / BLOCK..extent.end.div_ceil(BLOCK))?;
            Ok(())
        })?;
        #[cfg(test)]
        AFTER_REBUILD_PASS.with(|hook| hook.borrow_mut().take().map(|f| f()));
        // The entries durable before anything can write a header that
        // trusts them (this one, or a COMMIT's once `stale` is false): one
        // sync for both let a power cut keep the header and lose entries
        // written into the space the wipe freed.
        self.file.sync_data()?;
        self.generation
            .store(self.store.new_generation(), Ordering::Release);
        // Counted before the checksums are trusted: a READ that finds them
        // trusted then sees the count moved.
        self.rebuilds_ended.fetch_add(1, Ordering::AcqRel);
        {
            let mut v = self.version.lock();
            v.recorded = before;
            v.stale = false;
        }
        self.write_header()?;
        self.file.sync_data()?;
        Ok(blocks)
    }

    /// How many rebuilds of the checksums have ended: a READ takes it
    /// before it reads its data, and a mismatch found after one ended
    /// meanwhile is no corruption (see the data plane's `verify_read`):
    /// the rebuild recorded data newer than what the READ read.
    pub fn rebuilds_ended(&self) -> u64 {
        self.rebuilds_ended.load(Ordering::Acquire)
    }

    /// Recomputes the checksums of `blocks` (clamped to the file) from the
    /// data of `data`, reading through the page cache as the kernel sees
    /// the file, without keeping what it read there: `RWF_DONTCACHE`
    /// reads leave cached pages cached (a buffered export's readers, a
    /// local `tail -f`, keep theirs) and drop the ones they bring in. Where
    /// the kernel or filesystem has no `RWF_DONTCACHE`, each chunk is
    /// dropped after it is read, cached before or not. Returns the number
    /// of blocks.
    fn recompute(&self, data: BorrowedFd<'_>, blocks: Range<u64>) -> io::Result<u64> {
        self.recompute_checked(data, blocks, false)
    }

    /// [`FileSums::recompute`] for a pass over a whole file, or a region of
    /// one (a rebuild, a recovery): it stops, with an error
    /// [`is_file_deleted`] knows, once the file is deleted. A rebuild read
    /// a deleted 1 GiB file on to its end, holding its space and the
    /// device; and a client's REMOVE does not wait for a rebuild.
    fn recompute_pass(&self, data: BorrowedFd<'_>, blocks: Range<u64>) -> io::Result<u64> {
        self.recompute_checked(data, blocks, true)
    }

    fn recompute_checked(
        &self,
        data: BorrowedFd<'_>,
        blocks: Range<u64>,
        stop_if_deleted: bool,
    ) -> io::Result<u64> {
        let size = Version::of(data)?.size;
        let end = blocks.end.min(size.div_ceil(BLOCK));
        let mut buf = vec![0u8; READ_CHUNK];
        let mut crcs = Vec::new();
        let mut flags = RwFlags::DONTCACHE;
        let mut block = blocks.start;
        while block < end {
            if stop_if_deleted && rustix::fs::fstat(data)?.st_nlink == 0 {
                return Err(io::Error::new(io::ErrorKind::NotFound, FileDeleted));
            }
            let n = ((end - block) as usize).min(READ_CHUNK / BLOCK as usize);
            let want = &mut buf[..n * BLOCK as usize];
            let got = match pread_full_flags(data, want, block * BLOCK, flags) {
                Err(e)
                    if flags == RwFlags::DONTCACHE
                        && e.raw_os_error() == Some(libc::EOPNOTSUPP) =>
                {
                    flags = RwFlags::NONE;
                    pread_full(data, want, block * BLOCK)?
                }
                got => got?,
            };
            crcs.clear();
            block_crcs(&want[..got], &mut crcs);
            // Blocks past a short read (the file shrank meanwhile) are
            // zeros from the store's point of view.
            crcs.resize(n, zero_block_crc());
            self.store_crcs(block, &crcs)?;
            if flags == RwFlags::NONE {
                let _ = dionfs_sys::io::fadvise_dontneed(data, block * BLOCK, (n as u64) * BLOCK);
            }
            block += n as u64;
            #[cfg(test)]
            AFTER_RECOMPUTE_CHUNK.with(|hook| hook.borrow_mut().take().map(|f| f()));
        }
        Ok(end.saturating_sub(blocks.start))
    }

    /// Recovery of the regions `regions` (see [`Store::recover`]).
    fn recover_regions(&self, data: BorrowedFd<'_>, regions: &[u64]) -> io::Result<u64> {
        let headerless = read_header(&self.file)?.1.is_none();
        let mut blocks = 0;
        for region in regions {
            let start = region * REGION_BLOCKS;
            blocks += self.recompute_pass(data, start..start + REGION_BLOCKS)?;
        }
        let size = Version::of(data)?.size;
        self.clamp_to(size)?;
        {
            let mut v = self.version.lock();
            v.recorded = Version::of(data)?;
            // A checksum file that lost its header (created, then cut off
            // before a COMMIT synced it) holds nothing but what was just
            // recomputed: if the file has no data outside those regions
            // (it was written through the server since its checksums were
            // created, all of it logged), its checksums are complete. Data
            // elsewhere has none: untrusted, as before.
            if headerless && v.stale && data_only_in(data, regions)? {
                v.stale = false;
            }
        }
        self.write_header()?;
        self.file.sync_data()?;
        Ok(blocks)
    }

    /// Drops stored checksums past the block holding byte `size - 1`.
    fn clamp_to(&self, size: u64) -> io::Result<()> {
        let len = HEADER_LEN + 4 * size.div_ceil(BLOCK);
        if self.file.metadata()?.len() > len {
            self.file.set_len(len)?;
        }
        Ok(())
    }

    /// Before the server sets the file's size (its whole range locked
    /// exclusively): the blocks at the new end are logged as for a write.
    pub fn begin_truncate<'a>(
        &'a self,
        data: BorrowedFd<'a>,
        new_size: u64,
    ) -> io::Result<WriteTicket<'a>> {
        let start = crate::block_floor(new_size);
        self.begin_write(data, start..start + BLOCK)
    }

    /// After the server set the file's size to `new_size`: checksums past
    /// the end are dropped and the new last block's checksum recomputed.
    pub fn truncated(&self, ticket: WriteTicket<'_>, new_size: u64) -> io::Result<()> {
        self.clamp_to(new_size)?;
        if !new_size.is_multiple_of(BLOCK) {
            self.recompute(ticket.data, new_size / BLOCK..new_size / BLOCK + 1)?;
        }
        self.generation
            .store(self.store.new_generation(), Ordering::Release);
        drop(ticket);
        Ok(())
    }

    /// Taken before COMMIT syncs the file's data.
    pub fn commit_ticket(&self) -> CommitTicket {
        CommitTicket(self.store.log.clean_ticket(self.id, true))
    }

    /// [`FileSums::commit_ticket`] for the last COMMIT before the server
    /// stops: every idle region, however recently written, becomes clean,
    /// so the next start has nothing to recompute (recomputing would also
    /// adopt, unchecked, whatever the disk holds then).
    pub fn final_commit_ticket(&self) -> CommitTicket {
        CommitTicket(self.store.log.clean_ticket(self.id, false))
    }

    /// After COMMIT synced the file's data: makes its checksums durable
    /// and marks the regions no write touched since `ticket` clean.
    pub fn commit(&self, ticket: CommitTicket) -> io::Result<()> {
        self.write_header()?;
        self.file.sync_data()?;
        self.store.log.clean(self.id, ticket.0);
        Ok(())
    }

    /// Verifies every block of the file `data` (opened for reading, with
    /// `O_DIRECT` if possible, `buf` aligned for it): calls `bad` for each
    /// mismatch and `progress` with the bytes checked. Returns the number
    /// of blocks checked.
    pub fn verify_all(
        &self,
        data: BorrowedFd<'_>,
        buf: &mut [u8],
        bad: &mut dyn FnMut(Mismatch),
        progress: &mut dyn FnMut(u64),
    ) -> io::Result<u64> {
        let size = Version::of(data)?.size;
        let chunk = (buf.len() / BLOCK as usize).max(1) * BLOCK as usize;
        // Holes hold nothing that can rot: only data extents are read, so
        // a sparse file takes time in proportion to its data (its holes
        // count as checked for the progress).
        let mut checked = 0u64;
        for_each_data_extent(data, |extent| {
            let mut offset = block_floor(extent.start).max(checked);
            let end = block_ceil(extent.end).min(size);
            progress(offset.saturating_sub(checked));
            while offset < end {
                let want = (chunk as u64).min(block_ceil(end - offset)) as usize;
                let got = pread_full(data, &mut buf[..want], offset)?;
                let valid = got.min((size - offset) as usize);
                let first = offset / BLOCK;
                let stored = self.stored(first, valid.div_ceil(BLOCK as usize))?;
                let zero = zero_block_crc();
                for (i, (block, entry)) in
                    buf[..valid].chunks(BLOCK as usize).zip(stored).enumerate()
                {
                    let found = block_crc(block);
                    if found != entry ^ zero {
                        bad(Mismatch {
                            block: first + i as u64,
                            expected: entry ^ zero,
                            found,
                        });
                    }
                }
                progress(valid as u64);
                offset += valid as u64;
                if got < want {
                    break;
                }
            }
            checked = checked.max(offset);
            Ok(())
        })?;
        progress(size.saturating_sub(checked));
        Ok(size.div_ceil(BLOCK))
    }
}

impl Drop for FileSums {
    fn drop(&mut self) {
        // A shared state writes its header under the lock that a new state
        // of the file is opened under (see [`Store::shared`]), which waits
        // while this entry is there.
        let open = self.registered.then(|| self.store.open_sums.lock());
        // The version as of the server's last change, for the next open.
        if let Err(e) = self.write_header() {
            tracing::debug!(file = ?self.key, error = %e, "cannot write a checksum header");
        }
        if let Some(mut open) = open {
            if open
                .get(&self.id)
                .is_some_and(|state| std::ptr::eq(state.as_ptr(), self))
            {
                open.remove(&self.id);
            }
            drop(open);
            self.store.sums_closed.notify_all();
        }
    }
}

impl WriteTicket<'_> {
    /// The first block the write covers.
    pub fn first_block(&self) -> u64 {
        self.blocks.start
    }

    /// The write succeeded; `crcs` are the checksums of its blocks, from
    /// the first.
    pub fn finish(self, crcs: &[u32]) -> io::Result<()> {
        debug_assert_eq!(crcs.len() as u64, self.blocks.end - self.blocks.start);
        self.sums.store_crcs(self.blocks.start, crcs)
    }

    /// The write failed part-way (or not at all): its blocks' checksums
    /// are recomputed from whatever is on disk now.
    pub fn recompute(self) -> io::Result<()> {
        self.sums
            .recompute(self.data, self.blocks.clone())
            .map(|_| ())
    }
}

impl Drop for WriteTicket<'_> {
    fn drop(&mut self) {
        self.sums.store.log.end(self.sums.id, self.regions.clone());
        self.sums.version_end(self.data);
    }
}

/// Whether every byte of data `data` holds (`lseek(SEEK_DATA)`/
/// `SEEK_HOLE`: holes and unwritten extents excluded) lies in `regions`.
fn data_only_in(data: BorrowedFd<'_>, regions: &[u64]) -> io::Result<bool> {
    let region_len = REGION_BLOCKS * BLOCK;
    let mut covered = true;
    for_each_data_extent(data, |extent| {
        covered &= (extent.start / region_len..extent.end.div_ceil(region_len))
            .all(|r| regions.contains(&r));
        Ok(())
    })?;
    Ok(covered)
}

/// Calls `f` with each byte range of `data` that holds data, in order
/// (`lseek(SEEK_DATA/SEEK_HOLE)`: holes and unwritten extents, which read
/// as zeros, are skipped).
fn for_each_data_extent(
    data: BorrowedFd<'_>,
    mut f: impl FnMut(Range<u64>) -> io::Result<()>,
) -> io::Result<()> {
    use rustix::fs::{seek, SeekFrom};
    let mut at = 0;
    loop {
        let start = match seek(data, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let end = seek(data, SeekFrom::Hole(start))?;
        f(start..end)?;
        at = end;
    }
}

/// Why a rebuild or a recovery of a file's checksums stopped part-way:
/// the file was deleted meanwhile. [`is_file_deleted`] tells it apart.
#[derive(Debug)]
struct FileDeleted;

impl std::fmt::Display for FileDeleted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the file was deleted")
    }
}

impl std::error::Error for FileDeleted {}

/// Whether `e` says a rebuild stopped because its file was deleted (not a
/// failure to report: nothing is left to check).
pub fn is_file_deleted(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<FileDeleted>())
}

/// `pread` until `buf` is full or the end of the file; returns the bytes
/// read.
fn pread_full(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    pread_full_flags(fd, buf, offset, RwFlags::NONE)
}

/// [`pread_full`] with `preadv2` flags.
fn pread_full_flags(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
    flags: RwFlags,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match preadv2(fd, &mut buf[done..], offset + done as u64, flags)? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// A checksum file's header: the bytes there are of it (0: a new file)
/// and what they say, `None` if they are not a whole, valid header.
fn read_header(file: &File) -> io::Result<(usize, Option<Header>)> {
    let mut header = [0u8; HEADER_LEN as usize];
    let got = read_full(file, &mut header, 0)?;
    Ok((got, Header::decode(&header[..got])))
}

fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    pread_full(file.as_fd(), buf, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn key(n: u8) -> FileKey {
        FileKey {
            fs_id: 1,
            handle_type: 1,
            handle: vec![n; 8],
        }
    }

    /// A data file at `path`, created if missing, open for reading and
    /// writing.
    fn data_file(path: &Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    fn crcs(data: &[u8]) -> Vec<u32> {
        let mut out = Vec::new();
        block_crcs(data, &mut out);
        out
    }

    #[test]
    fn cached_pages_follow_writes_across_a_page_boundary_and_try_begin_never_waits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        let data = tempfile::tempfile().unwrap();
        let sums = store.open_file(key(2), data.as_fd()).unwrap();
        // Blocks 1000..1100 straddle pages 0 and 1 (1024 entries each).
        let range = 1000 * BLOCK..1100 * BLOCK;
        assert!(
            sums.try_begin_write(data.as_fd(), range.clone()).is_none(),
            "a region not yet in the intent log needs a durable log write first"
        );
        let old = vec![1u8; 100 * BLOCK as usize];
        let t = sums.begin_write(data.as_fd(), range.clone()).unwrap();
        data.write_all_at(&old, range.start).unwrap();
        t.finish(&crcs(&old)).unwrap();
        // Both pages now cached; the next write must update both.
        assert_eq!(sums.verify(1000, &old).unwrap(), None);
        let new: Vec<u8> = (0..old.len()).map(|i| (i % 241) as u8).collect();
        let t = sums
            .try_begin_write(data.as_fd(), range.clone())
            .expect("the region is dirty and durable: no waiting")
            .unwrap();
        data.write_all_at(&new, range.start).unwrap();
        t.finish(&crcs(&new)).unwrap();
        assert_eq!(sums.verify(1000, &new).unwrap(), None);
        assert_eq!(sums.verify(1000, &old).unwrap().unwrap().block, 1000);
        assert_eq!(
            sums.verify(1024, &old[24 * BLOCK as usize..])
                .unwrap()
                .unwrap()
                .block,
            1024
        );
        // A COMMIT right after the writes keeps the region dirty (see
        // `log::KEEP_DIRTY`): the next write still needs no log write.
        let ticket = sums.commit_ticket();
        sums.commit(ticket).unwrap();
        let t = sums.try_begin_write(data.as_fd(), range).unwrap().unwrap();
        drop(t);
    }

    /// Writes two blocks of `byte` at block `at` through `sums`, as the
    /// server does, moving the file's mtime and size.
    fn server_write(sums: &FileSums, data: &File, at: u64, byte: u8) {
        let bytes = vec![byte; 2 * BLOCK as usize];
        let range = at * BLOCK..at * BLOCK + bytes.len() as u64;
        let t = sums.begin_write(data.as_fd(), range.clone()).unwrap();
        data.write_all_at(&bytes, range.start).unwrap();
        t.finish(&crcs(&bytes)).unwrap();
    }

    #[test]
    fn a_wanted_rebuild_is_claimed_once_and_not_before_its_pace() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let data = data_file(&dir.path().join("f"));
        let sums = store.open_file(key(10), data.as_fd()).unwrap();
        let t0 = std::time::Instant::now();
        let s = std::time::Duration::from_secs(1);
        assert!(!sums.claim_rebuild(t0), "nothing wanted");
        sums.want_rebuild();
        assert!(sums.rebuild_wanted());
        assert!(sums.claim_rebuild(t0));
        assert!(!sums.claim_rebuild(t0), "claimed twice");
        sums.want_rebuild(); // while claimed: no new want
        sums.rebuild_released(true);
        assert!(!sums.rebuild_wanted());
        sums.pace_rebuilds(t0 + 10 * s);
        sums.want_rebuild();
        assert!(!sums.claim_rebuild(t0 + s), "before its pace");
        assert!(sums.rebuild_wanted(), "still wanted");
        assert!(sums.claim_rebuild(t0 + 10 * s));
        sums.rebuild_released(false); // given up: wanted again
        assert!(sums.claim_rebuild(t0 + 11 * s));
        sums.rebuild_released(true);
        // The pace outlives the file's state: closed and opened again (an
        // open-file cache too small for the files in use), it still holds.
        let later = std::time::Instant::now() + 3600 * s;
        sums.pace_rebuilds(later);
        drop(sums);
        let sums = store.open_file(key(10), data.as_fd()).unwrap();
        sums.want_rebuild();
        assert!(!sums.rebuild_due(later - s));
        assert!(
            !sums.claim_rebuild(later - s),
            "the pace was lost with the state"
        );
        assert!(sums.claim_rebuild(later));
    }

    #[test]
    fn a_rebuild_cut_short_leaves_the_checksums_stale_for_the_next_start() {
        // Rebuilds run beside the server's calls now, and a stop does not
        // wait for one: one cut short between the wipe of the entries and
        // the end of its pass must not leave a header that trusts them.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let data = data_file(&dir.path().join("f"));
        data.write_all_at(&[6u8; 4 * BLOCK as usize], 0).unwrap();
        let sums = store.open_file(key(9), data.as_fd()).unwrap();
        sums.rebuild(data.as_fd()).unwrap();
        assert!(!sums.is_stale());
        let on_disk = || {
            let f = File::open(store.dir().join(key(9).relative_path())).unwrap();
            read_header(&f).unwrap().1.unwrap()
        };
        assert!(!on_disk().stale);
        // Distrusted without its version moving (a write abandoned in
        // flight that wrote the same bytes): the header still trusts.
        sums.distrust();
        AFTER_REBUILD_WIPE.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(|| panic!("cut short")));
        });
        let cut = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = sums.rebuild(data.as_fd());
        }));
        assert!(cut.is_err());
        assert!(
            on_disk().stale,
            "a half-rebuilt file's header trusts its entries"
        );
    }

    #[test]
    fn a_rebuild_stops_once_its_file_is_deleted() {
        // A file deleted locally while its checksums are rebuilt: the
        // pass read it to its end (minutes for a large one), holding its
        // space and the device for nothing.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let path = dir.path().join("gone");
        let data = data_file(&path);
        let len = 4 * READ_CHUNK;
        data.write_all_at(&vec![5u8; len], 0).unwrap();
        let sums = store.open_file(key(10), data.as_fd()).unwrap();
        data.write_all_at(&[6u8; 100], len as u64).unwrap(); // a local append
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
        // Deleted once the pass has read its first chunk.
        AFTER_RECOMPUTE_CHUNK.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || std::fs::remove_file(&path).unwrap()));
        });
        let err = sums.rebuild(data.as_fd()).unwrap_err();
        assert!(is_file_deleted(&err), "{err}");
        assert!(sums.is_stale());
    }

    #[test]
    fn a_file_appended_to_during_its_rebuild_is_not_taken_for_rotted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let path = dir.path().join("log");
        let data = data_file(&path);
        data.write_all_at(&[3u8; 3 * BLOCK as usize], 0).unwrap();
        let sums = store.open_file(key(8), data.as_fd()).unwrap();
        data.write_all_at(&[4u8; 100], 3 * BLOCK).unwrap(); // a local append
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
        // Another local append lands once the pass has recomputed every
        // block, before the rebuild ends.
        let appended = path.clone();
        AFTER_REBUILD_PASS.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(move || {
                // Past the timestamp granularity, so that the append moves
                // the mtime.
                std::thread::sleep(std::time::Duration::from_millis(20));
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&appended)
                    .unwrap();
                f.write_all_at(&[5u8; 100], 0).unwrap();
            }));
        });
        sums.rebuild(data.as_fd()).unwrap();
        let mut all = vec![0u8; 3 * BLOCK as usize + 200];
        data.read_exact_at(&mut all, 0).unwrap();
        let m = sums
            .verify(0, &all)
            .unwrap()
            .expect("the last append's block was not recomputed");
        assert_eq!(m.block, 3);
        // A change behind the server's back (rebuilt at the next READ), not rot.
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
    }

    #[test]
    fn settling_cleans_a_closed_files_regions_after_its_data_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        let data = data_file(&dir.path().join("data"));
        let bytes = vec![5u8; 2 * BLOCK as usize];
        let sums = store.open_file(key(9), data.as_fd()).unwrap();
        let t = sums.begin_write(data.as_fd(), 0..2 * BLOCK).unwrap();
        data.write_all_at(&bytes, 0).unwrap();
        t.finish(&crcs(&bytes)).unwrap();
        drop(sums); // closed, never committed
        assert_eq!(
            store.idle_dirty_files(std::time::Duration::ZERO),
            vec![key(9)]
        );
        // A failed data sync leaves the region dirty.
        let failed = store.settle(key(9), data.as_fd(), false, || {
            Err(io::Error::from_raw_os_error(libc::EIO))
        });
        assert!(failed.is_err());
        assert_eq!(store.log.dirty_regions(), 1);
        // Written just now: a settle as a COMMIT keeps it dirty, the one
        // before stopping does not.
        assert!(store
            .settle(key(9), data.as_fd(), false, || Ok(()))
            .unwrap());
        assert_eq!(store.log.dirty_regions(), 1);
        let mut synced = false;
        assert!(store
            .settle(key(9), data.as_fd(), true, || {
                synced = true;
                Ok(())
            })
            .unwrap());
        assert!(synced);
        assert_eq!(store.log.dirty_regions(), 0);
        let sums = store.open_file(key(9), data.as_fd()).unwrap();
        assert!(!sums.is_stale());
        assert_eq!(sums.verify(0, &bytes).unwrap(), None);
        // A file whose checksum file was removed by hand is forgotten.
        let t = sums.begin_write(data.as_fd(), 0..BLOCK).unwrap();
        data.write_all_at(&bytes[..BLOCK as usize], 0).unwrap();
        t.finish(&crcs(&bytes[..BLOCK as usize])).unwrap();
        drop(sums);
        std::fs::remove_file(store.dir().join(key(9).relative_path())).unwrap();
        assert!(!store.settle(key(9), data.as_fd(), true, || Ok(())).unwrap());
        assert_eq!(store.log.dirty_regions(), 0);
    }

    #[test]
    fn a_file_opened_again_while_open_shares_its_checksum_state() {
        // The server's open-file cache may open a file again while an
        // earlier open of it is still in use (two callers missing the
        // cache at once; a file evicted and wanted again before its last
        // request ends): the second must not read a header the first has
        // not written yet and take the server's own writes for someone
        // else's.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        let data = tempfile::tempfile().unwrap();
        let first = store.open_file(key(4), data.as_fd()).unwrap();
        // Past the first second of the file's life, so that the mtime moves
        // whatever the filesystem's timestamp granularity.
        std::thread::sleep(std::time::Duration::from_millis(20));
        server_write(&first, &data, 0, 1);
        let second = store.open_file(key(4), data.as_fd()).unwrap();
        assert!(
            !second.is_stale(),
            "the server's own write taken for a change behind its back"
        );
        assert!(Arc::ptr_eq(&first, &second));
        drop(first);
        drop(second);
        let again = store.open_file(key(4), data.as_fd()).unwrap();
        assert!(!again.is_stale());
    }

    #[test]
    fn opens_racing_the_drop_of_the_last_open_never_find_the_file_changed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 64, Order::Overlapped).unwrap();
        let data = Arc::new(tempfile::tempfile().unwrap());
        let stale = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                let (store, data, stale) = (store.clone(), data.clone(), stale.clone());
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let sums = store.open_file(key(5), data.as_fd()).unwrap();
                        if sums.is_stale() {
                            stale.fetch_add(1, Ordering::Relaxed);
                        }
                        server_write(&sums, &data, (i % 8) * 2 + u64::from(t) * 16, t);
                        // The last holder's drop writes the header while
                        // the other threads open the file again.
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(stale.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn times_the_server_sets_keep_the_checksums_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        let data = tempfile::tempfile().unwrap();
        let sums = store.open_file(key(3), data.as_fd()).unwrap();
        let bytes = vec![5u8; 8192];
        let t = sums.begin_write(data.as_fd(), 0..8192).unwrap();
        data.write_all_at(&bytes, 0).unwrap();
        t.finish(&crcs(&bytes)).unwrap();
        let set_mtime = |secs| {
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            data.set_modified(when)
        };
        // The server sets the mtime: still trusted, a mismatch is reported.
        sums.server_change(data.as_fd(), || set_mtime(1_000_000))
            .unwrap();
        assert!(!sums.changed_behind_back(data.as_fd()).unwrap());
        // Someone else sets it: changed behind the server's back.
        set_mtime(2_000_000).unwrap();
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
        // And a server change after that does not make it trusted again.
        sums.server_change(data.as_fd(), || set_mtime(3_000_000))
            .unwrap();
        assert!(sums.is_stale());
    }

    #[test]
    fn sweep_finds_and_removes_checksums_of_files_that_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        let (a, b) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        drop(store.open_file(key(4), a.as_fd()).unwrap());
        drop(store.open_file(key(5), b.as_fd()).unwrap());
        let path = |n| dir.path().join("integrity").join(key(n).relative_path());
        assert!(path(4).exists() && path(5).exists());
        // An unrelated file in the store is never touched.
        std::fs::write(dir.path().join("integrity/files/zz.crc"), b"x").ok();
        let mut exists = |k: &FileKey| -> io::Result<bool> {
            match k.handle[0] {
                4 => Ok(true),
                5 => Ok(false),
                _ => Err(io::Error::other("cannot tell")),
            }
        };
        let found = store.sweep(&mut exists, false).unwrap();
        assert_eq!(found.orphans, 1);
        assert!(path(5).exists(), "only reported without remove");
        let swept = store.sweep(&mut exists, true).unwrap();
        assert_eq!(swept.orphans, 1);
        assert!(path(4).exists() && !path(5).exists());
        assert_eq!(store.sweep(&mut exists, true).unwrap().orphans, 0);
    }

    #[test]
    fn write_verify_mismatch_rebuild_truncate() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
        assert!(
            Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).is_err(),
            "locked"
        );
        let data = data_file(&dir.path().join("data"));
        let sums = store.open_file(key(1), data.as_fd()).unwrap();
        assert!(!sums.is_stale(), "an empty new file has all its checksums");
        let bytes: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 253) as u8).collect();
        let t = sums.begin_write(data.as_fd(), 0..4 * 4096).unwrap();
        data.write_all_at(&bytes, 0).unwrap();
        t.finish(&crcs(&bytes)).unwrap();
        assert_eq!(sums.verify(0, &bytes).unwrap(), None);
        assert_eq!(sums.verify(3, &bytes[3 * 4096..]).unwrap(), None);
        // Past the end: zeros verify against never-written entries.
        assert_eq!(sums.verify(100, &[0u8; 4096]).unwrap(), None);
        let mut bad = bytes.clone();
        bad[4096 + 7] ^= 0x40;
        let m = sums.verify(0, &bad).unwrap().unwrap();
        assert_eq!(m.block, 1);
        assert_eq!(m.expected, block_crc(&bytes[4096..8192]));
        assert!(!sums.changed_behind_back(data.as_fd()).unwrap());
        // A local write moves the version: stale, then rebuilt.
        std::thread::sleep(std::time::Duration::from_millis(20));
        data.write_all_at(b"local", 5).unwrap();
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
        assert_eq!(sums.rebuild(data.as_fd()).unwrap(), 4);
        assert!(!sums.is_stale());
        let mut now = bytes.clone();
        now[5..10].copy_from_slice(b"local");
        assert_eq!(sums.verify(0, &now).unwrap(), None);
        // Truncate into block 1, then extend: block 1 is zero-padded.
        let t = sums.begin_truncate(data.as_fd(), 5000).unwrap();
        data.set_len(5000).unwrap();
        sums.truncated(t, 5000).unwrap();
        data.set_len(20000).unwrap();
        let mut all = vec![0u8; 20000];
        data.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(sums.verify(0, &all).unwrap(), None);
        // The page cache is bounded and the verdicts survive eviction.
        for page in 0..10u64 {
            let _ = sums.verify(page * 1024, &[0u8; 4096]).unwrap();
        }
        assert_eq!(sums.verify(0, &all).unwrap(), None);
    }

    #[test]
    fn a_sparse_file_is_rebuilt_and_scrubbed_by_its_data_not_its_size() {
        // Two blocks of data 1 TiB apart: rebuilding and verifying read
        // those two blocks, not the TiB of hole between them (a READ of a
        // 16 PiB file that held two bytes rebuilt it for days).
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("integrity"), 4, Order::Sequential).unwrap();
        let data = data_file(&dir.path().join("sparse"));
        let sums = store.open_file(key(1), data.as_fd()).unwrap();
        let far = 1u64 << 40;
        data.write_all_at(&[7u8; 4096], 0).unwrap();
        data.write_all_at(&[9u8; 100], far).unwrap();
        // Stale entries where the holes are now must not survive.
        let t = sums.begin_write(data.as_fd(), 4096..8192).unwrap();
        t.finish(&[0x1234_5678]).unwrap();
        assert!(sums.changed_behind_back(data.as_fd()).unwrap());
        assert_eq!(sums.rebuild(data.as_fd()).unwrap(), 2, "data blocks read");
        assert_eq!(sums.verify(0, &[7u8; 4096]).unwrap(), None);
        assert_eq!(sums.verify(1, &[0u8; 4096]).unwrap(), None);
        let mut last = vec![0u8; 4096];
        last[..100].fill(9);
        assert_eq!(sums.verify(far / 4096, &last).unwrap(), None);
        let (mut bad, mut seen) = (Vec::new(), 0u64);
        let mut buf = vec![0u8; 1 << 20];
        let blocks = sums
            .verify_all(data.as_fd(), &mut buf, &mut |m| bad.push(m), &mut |n| {
                seen += n
            })
            .unwrap();
        assert!(bad.is_empty());
        assert_eq!(blocks, far / 4096 + 1);
        assert_eq!(seen, far + 100, "progress covers the holes");
        // Rot in the far block is still found.
        data.write_all_at(&[8u8], far + 5).unwrap();
        sums.verify_all(data.as_fd(), &mut buf, &mut |m| bad.push(m), &mut |_| {})
            .unwrap();
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].block, far / 4096);
    }

    #[test]
    fn recovery_trusts_a_file_whose_lost_header_the_log_accounts_for() {
        // A file created and written through the server, cut off before a
        // COMMIT synced its checksum file: the header is gone, but every
        // region that holds data is in the log, so once those are
        // recomputed its checksums are complete. Another file with data
        // outside the logged regions (written before checksums were kept)
        // stays untrusted.
        let dir = tempfile::tempdir().unwrap();
        let sdir = dir.path().join("integrity");
        let (new, old) = (
            data_file(&dir.path().join("new")),
            data_file(&dir.path().join("old")),
        );
        // `old` has data 100 MiB in, in region 1, before any checksums.
        old.write_all_at(&[3u8; 8192], 100 << 20).unwrap();
        {
            let store = Store::open(&sdir, 16, Order::Sequential).unwrap();
            for (n, data) in [(6, &new), (7, &old)] {
                let sums = store.open_file(key(n), data.as_fd()).unwrap();
                let t = sums.begin_write(data.as_fd(), 0..8192).unwrap();
                data.write_all_at(&[9u8; 8192], 0).unwrap();
                t.finish(&crcs(&[9u8; 8192])).unwrap();
                drop(sums);
            }
        }
        // The crash took the checksum files' contents (never synced).
        for n in [6, 7] {
            let path = sdir.join(key(n).relative_path());
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .unwrap()
                .set_len(0)
                .unwrap();
        }
        let store = Store::open(&sdir, 16, Order::Sequential).unwrap();
        let fds: Vec<OwnedFd> = [&new, &old]
            .iter()
            .map(|f| f.try_clone().unwrap().into())
            .collect();
        let mut fds = fds.into_iter();
        let report = store.recover(&mut |_| Ok(fds.next())).unwrap();
        assert_eq!(report.files, 2);
        let sums = store.open_file(key(6), new.as_fd()).unwrap();
        assert!(!sums.is_stale(), "every byte of it was recomputed");
        assert_eq!(sums.verify(0, &[9u8; 8192]).unwrap(), None);
        assert!(sums.verify(0, &[8u8; 8192]).unwrap().is_some());
        let sums = store.open_file(key(7), old.as_fd()).unwrap();
        assert!(
            sums.is_stale(),
            "data outside the logged region has no checksums"
        );
    }

    #[test]
    fn recovery_recomputes_logged_regions() {
        let dir = tempfile::tempdir().unwrap();
        let sdir = dir.path().join("integrity");
        let data = data_file(&dir.path().join("data"));
        {
            let store = Store::open(&sdir, 16, Order::Sequential).unwrap();
            let sums = store.open_file(key(2), data.as_fd()).unwrap();
            // A write whose checksums never reached the store (a crash).
            let t = sums.begin_write(data.as_fd(), 0..8192).unwrap();
            data.write_all_at(&[9u8; 8192], 0).unwrap();
            std::mem::forget(t);
            drop(sums);
        }
        let store = Store::open(&sdir, 16, Order::Sequential).unwrap();
        assert_eq!(store.pending_recovery(), 1);
        let fd: OwnedFd = data.try_clone().unwrap().into();
        let mut fd = Some(fd);
        let report = store.recover(&mut |_| Ok(fd.take())).unwrap();
        assert_eq!((report.files, report.blocks), (1, 2));
        assert_eq!(std::fs::metadata(sdir.join("intent.log")).unwrap().len(), 0);
        let sums = store.open_file(key(2), data.as_fd()).unwrap();
        assert!(!sums.is_stale());
        assert_eq!(sums.verify(0, &[9u8; 8192]).unwrap(), None);
        // A removed file's checksums are freed (once no request holds
        // its state any more: until then, opens share that state).
        drop(sums);
        store.remove(&key(2));
        assert!(store.open_existing(key(2), data.as_fd()).unwrap().is_none());
    }
}
