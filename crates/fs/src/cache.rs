//! The open-file cache: READ and WRITE reuse open descriptors instead of
//! opening the file by handle for every request (knfsd's `nfsd_file`).
//! The cache only keeps files; [`crate::export::ExportFs::open_file`]
//! opens them and registers them here.
//!
//! **One open file per inode, always.** The data plane's [`DataFile`]
//! carries the file's range locks: two `DataFile`s of one inode would let
//! two read-modify-writes of the same block run at once and lose each
//! other's bytes. So entries are keyed by the inode alone — the filesystem
//! (its superblock, [`crate::export::fs_identity`]) and the kernel file
//! handle (inode number *and* generation, so a reused inode number never
//! hits a stale entry) — never by export: nested exports of one filesystem
//! share the entry. And a file stays the same object for as long as
//! anything holds it: besides the bounded LRU of strong references, the
//! cache remembers every file still alive (a weak reference); a miss in
//! the LRU whose file is still in use by requests in flight gets that same
//! object back instead of opening a second one. Evicting an entry only
//! drops the cache's reference; the descriptors close when the last
//! request using the file finishes.
//!
//! REMOVE and RENAME evict a file that lost its last name, so the server
//! never keeps a deleted file's space allocated. Files deleted behind the
//! server's back (locally) are found by [`OpenFileCache::close_unlinked`],
//! which the server calls every second: before it, such a file stayed
//! open until 1,024 others had been opened after it, and so did its space
//! (a 4 GiB file removed locally, and the speculative preallocation of
//! the files written before it, filled a 21 GiB filesystem that had
//! 4 GiB of files left on it; scratch `dc.sh`).

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use dionfs_dataplane::DataFile;
use dionfs_logs::LogEvery;
use dionfs_sys::handle::KernelHandle;
use lru::LruCache;
use parking_lot::Mutex;

use crate::access_memo::AccessMemo;

/// A regular file opened for the data plane, shared by every export that
/// reaches it.
pub struct OpenFile {
    fs_id: u64,
    kernel: KernelHandle,
    data: DataFile,
    /// READ/WRITE grants of this file to recent callers.
    pub(crate) access: AccessMemo,
    /// In the cache's list of files waiting for
    /// [`OpenFileCache::sync_evicted`] (once at most).
    waiting: AtomicBool,
}

impl OpenFile {
    /// A file just opened, for [`OpenFileCache::insert`].
    pub(crate) fn new((fs_id, kernel): Key, data: DataFile) -> OpenFile {
        OpenFile {
            fs_id,
            kernel,
            data,
            access: AccessMemo::default(),
            waiting: AtomicBool::new(false),
        }
    }

    /// The kernel handle the file is cached under (with its filesystem).
    pub(crate) fn kernel(&self) -> &KernelHandle {
        &self.kernel
    }

    /// What the cache knows the file by.
    fn key(&self) -> Key {
        (self.fs_id, self.kernel.clone())
    }

    /// The data plane's open file.
    pub fn data(&self) -> &DataFile {
        &self.data
    }

    /// A descriptor of the file for metadata calls (`fstat`, access
    /// checks through `/proc/thread-self/fd`).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.data.buffered_fd()
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("kernel", &self.kernel)
            .field("label", &self.data.label())
            .finish()
    }
}

/// Logs, at most every 10 s, that written files closed unsynced.
fn warn_unsynced_close() {
    static WARNED: LogEvery = LogEvery::new(std::time::Duration::from_secs(10));
    if !WARNED.due() {
        return;
    }
    tracing::warn!(
        "written files left the open-file cache faster than they could be synced and closed \
         unsynced: the write verifier moved, so clients send their uncommitted writes again \
         (raise --open-files)"
    );
}

/// How many files let go of by the LRU may wait for
/// [`OpenFileCache::sync_evicted`] at least (else the LRU's capacity).
const MIN_WAITING: usize = 64;

/// (filesystem identity, kernel handle): one inode.
pub(crate) type Key = (u64, KernelHandle);

/// The server-wide cache of open files, shared by all exports.
pub struct OpenFileCache {
    state: Mutex<CacheState>,
    /// Times a written file closed with data a failed writeback may have
    /// lost without any COMMIT being told: its sync before closing failed,
    /// or it closed unsynced (too many waited). The server's write
    /// verifier counts it ([`OpenFileCache::lost_writes`]).
    lost_writes: AtomicU64,
}

struct CacheState {
    /// The files kept open while unused, least recently used first out.
    lru: LruCache<Key, Arc<OpenFile>>,
    /// Every file opened and not yet closed: the LRU's and those only
    /// requests in flight still hold. Dead entries are purged when the map
    /// has doubled since the last purge (amortised O(1)).
    live: HashMap<Key, Weak<OpenFile>>,
    purge_at: usize,
    /// Files the LRU let go of with UNSTABLE writes not yet synced
    /// ([`DataFile::has_unsynced_writes`]), or while requests held them
    /// (which may write them yet), kept open until
    /// [`OpenFileCache::sync_evicted`] has synced them: closed unsynced, a
    /// writeback error would not reach the COMMIT of whoever reopens them.
    /// At most the LRU's capacity (or [`MIN_WAITING`]); past it, files
    /// close unsynced and `lost_writes` counts it.
    evicted_unsynced: Vec<Arc<OpenFile>>,
}

impl CacheState {
    /// The live file for `key`, from the LRU or (still held by requests)
    /// from the live map; put back into the LRU. Returns what the LRU
    /// pushed out, which the caller must drop after releasing the lock.
    fn find(&mut self, key: &Key) -> (Option<Arc<OpenFile>>, Option<Arc<OpenFile>>) {
        if let Some(file) = self.lru.get(key) {
            return (Some(Arc::clone(file)), None);
        }
        match self.live.get(key).and_then(Weak::upgrade) {
            Some(file) => {
                let evicted = self.lru.push(key.clone(), Arc::clone(&file));
                (Some(file), evicted.map(|(_, f)| f))
            }
            None => (None, None),
        }
    }
}

impl std::fmt::Debug for OpenFileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFileCache")
            .field("len", &self.len())
            .finish()
    }
}

impl Default for OpenFileCache {
    fn default() -> OpenFileCache {
        OpenFileCache::new(OpenFileCache::DEFAULT_CAPACITY)
    }
}

impl OpenFileCache {
    /// Default number of cached files (each holds two descriptors:
    /// buffered and `O_DIRECT`).
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A cache keeping at most `capacity` unused files open (at least one).
    pub fn new(capacity: usize) -> OpenFileCache {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        OpenFileCache {
            state: Mutex::new(CacheState {
                lru: LruCache::new(capacity),
                live: HashMap::new(),
                purge_at: 2 * capacity.get(),
                evicted_unsynced: Vec::new(),
            }),
            lost_writes: AtomicU64::new(0),
        }
    }

    /// Number of files the LRU keeps open.
    pub fn len(&self) -> usize {
        self.state.lock().lru.len()
    }

    /// Whether the LRU keeps nothing open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of distinct files open (in the LRU or held by requests).
    pub fn live_files(&self) -> usize {
        self.state
            .lock()
            .live
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Every file open now (in the LRU or held by requests).
    pub fn open_files(&self) -> Vec<Arc<OpenFile>> {
        self.state
            .lock()
            .live
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Drops the LRU's references to every file (tests, shutdown).
    pub fn clear(&self) {
        let dropped: Vec<_> = {
            let mut state = self.state.lock();
            std::iter::from_fn(|| state.lru.pop_lru().map(|(_, f)| f)).collect()
        };
        // Closed (if nothing else holds them) outside the lock.
        drop(dropped);
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Arc<OpenFile>> {
        let (file, evicted) = self.state.lock().find(key);
        self.let_go(evicted);
        file
    }

    /// What the LRU pushed out: dropped outside the lock (the last
    /// reference closes the descriptors), or kept for
    /// [`OpenFileCache::sync_evicted`] if it has unsynced writes or a
    /// request still uses it (and may write it yet).
    fn let_go(&self, evicted: Option<Arc<OpenFile>>) {
        let Some(file) = evicted else {
            return;
        };
        let unsynced = file.data.has_unsynced_writes();
        if !unsynced && Arc::strong_count(&file) == 1 {
            return;
        }
        // Already waiting (let go of, found again, let go of again): the
        // list's reference is enough.
        if file.waiting.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut state = self.state.lock();
        if state.evicted_unsynced.len() < state.lru.cap().get().max(MIN_WAITING) {
            state.evicted_unsynced.push(file);
            return;
        }
        file.waiting.store(false, Ordering::Release);
        drop(state);
        // Closed unsynced now, or (held by a request, which may write it
        // yet) when the request lets go: counted before it can close, so
        // that the verifier has moved before any COMMIT of a reopen.
        self.lost_writes.fetch_add(1, Ordering::AcqRel);
        warn_unsynced_close();
        drop(file);
    }

    /// Syncs the files the LRU let go of with unsynced writes
    /// (`fdatasync`; a failure counts in [`OpenFileCache::lost_writes`]),
    /// and then lets them close; a file a request still uses waits for the
    /// next call, and one back in the LRU is left to it. Returns how many
    /// were synced. Blocking: call it off the async workers, a few times a
    /// second.
    pub fn sync_evicted(&self) -> usize {
        let mut ready = Vec::new();
        {
            let mut state = self.state.lock();
            let waiting = std::mem::take(&mut state.evicted_unsynced);
            for file in waiting {
                let cached = state
                    .lru
                    .peek(&file.key())
                    .is_some_and(|f| Arc::ptr_eq(f, &file));
                if cached {
                    // Dropped below, outside the lock (never the last one).
                    file.waiting.store(false, Ordering::Release);
                    ready.push((file, false));
                } else if Arc::strong_count(&file) > 1 {
                    state.evicted_unsynced.push(file);
                } else {
                    file.waiting.store(false, Ordering::Release);
                    ready.push((file, true));
                }
            }
        }
        let mut synced = 0;
        for (file, closing) in ready {
            // Synced by a COMMIT meanwhile: nothing to report here.
            if !closing || !file.data.has_unsynced_writes() {
                continue;
            }
            synced += 1;
            if let Err(e) = rustix::fs::fdatasync(file.data.buffered_fd()) {
                self.lost_writes.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(
                    file = %file.data.label(),
                    error = %e,
                    "a written file left the open-file cache and its data could not be synced: \
                     the write verifier moved, so clients send their uncommitted writes again"
                );
            }
        }
        synced
    }

    /// Whether files wait for [`OpenFileCache::sync_evicted`].
    pub fn files_waiting(&self) -> bool {
        !self.state.lock().evicted_unsynced.is_empty()
    }

    /// How many times written files closed with data a failed writeback may
    /// have lost: the server's write verifier moves with it.
    pub fn lost_writes(&self) -> u64 {
        self.lost_writes.load(Ordering::Acquire)
    }

    /// The file for `key` if it is open, without touching the LRU order
    /// (attribute replies use it for the data plane's size).
    pub(crate) fn get_live(&self, key: &Key) -> Option<Arc<OpenFile>> {
        let state = self.state.lock();
        state.live.get(key).and_then(Weak::upgrade)
    }

    /// Drops the LRU's references to the files whose last name is gone
    /// (`st_nlink == 0`: removed behind the server's back), so that their
    /// descriptors close (at once, or when the last request using one
    /// ends) and the filesystem frees their space. Returns how many. The
    /// `fstat`s run outside the cache's lock: call it off the async
    /// workers with a full cache.
    pub fn close_unlinked(&self) -> usize {
        let files: Vec<(Key, Arc<OpenFile>)> = self
            .state
            .lock()
            .lru
            .iter()
            .map(|(k, f)| (k.clone(), Arc::clone(f)))
            .collect();
        let gone: Vec<&Key> = files
            .iter()
            .filter(|(_, f)| matches!(rustix::fs::fstat(f.fd()), Ok(st) if st.st_nlink == 0))
            .map(|(k, _)| k)
            .collect();
        if gone.is_empty() {
            return 0;
        }
        let mut state = self.state.lock();
        let removed: Vec<_> = gone.iter().filter_map(|k| state.lru.pop(*k)).collect();
        drop(state);
        tracing::debug!(
            files = removed.len(),
            "closed files deleted behind the server's back"
        );
        let n = removed.len();
        // Closed (if nothing else holds them) outside the lock.
        drop(removed);
        drop(files);
        n
    }

    pub(crate) fn evict(&self, key: &Key) {
        let removed = self.state.lock().lru.pop(key);
        if removed.is_some() {
            tracing::debug!("evicted a removed file from the open-file cache");
        }
    }

    /// Inserts a file just opened, or returns the one a concurrent opener
    /// (or a request still holding it) got in first: there is never more
    /// than one live `OpenFile` per key.
    pub(crate) fn insert(&self, key: Key, file: Arc<OpenFile>) -> Arc<OpenFile> {
        let mut state = self.state.lock();
        if let (Some(existing), evicted) = state.find(&key) {
            drop(state);
            self.let_go(evicted);
            return existing;
        }
        state.live.insert(key.clone(), Arc::downgrade(&file));
        if state.live.len() >= state.purge_at {
            state.live.retain(|_, w| w.strong_count() > 0);
            state.purge_at = (2 * state.live.len()).max(2 * state.lru.cap().get());
        }
        let evicted = state.lru.push(key, Arc::clone(&file)).map(|(_, f)| f);
        drop(state);
        self.let_go(evicted);
        file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{ExportFs, Node};
    use crate::handle::MacKey;
    use crate::ops;
    use crate::ops::CreateHow;
    use crate::testutil::{export_with_cache, LoopFs};
    use crate::{FsError, SetAttrs};

    /// Descriptors of this process that point into `dir` (other tests
    /// open files concurrently, so only count the ones on our mount).
    fn fds_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    /// The directory `export` on `fs`, served as export 1 over an
    /// open-file cache of `capacity`; with the export's root.
    fn cached_export(
        fs: &LoopFs,
        capacity: usize,
    ) -> (std::path::PathBuf, Arc<OpenFileCache>, ExportFs, Node) {
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let cache = Arc::new(OpenFileCache::new(capacity));
        let exp = export_with_cache(&dir, 1, MacKey::from_bytes([1; 32]), Arc::clone(&cache));
        let root = exp.resolve(exp.root_handle()).expect("root");
        (dir, cache, exp, root)
    }

    /// New empty files `names` in `dir`.
    fn new_files<const N: usize>(exp: &ExportFs, dir: &Node, names: [&str; N]) -> [Node; N] {
        let how = CreateHow::Guarded(SetAttrs::default());
        names.map(|name| ops::create(exp, dir, name.as_bytes(), &how).expect(name).0)
    }

    #[test]
    fn cache_is_bounded_and_never_leaks_descriptors() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let (_, cache, exp, root) = cached_export(&fs, 16);
        let mut handles = Vec::new();
        for i in 0..100 {
            let how = CreateHow::Guarded(SetAttrs::default());
            let (node, _) =
                ops::create(&exp, &root, format!("f{i}").as_bytes(), &how).expect("create");
            handles.push(node.fh().to_vec());
        }
        let before = fds_under(fs.mount_point());
        for fh in &handles {
            let file = exp.open_file(fh).expect("open");
            // ext4 on 4096-byte sectors can do direct I/O.
            assert!(file.data().is_direct_capable());
        }
        assert_eq!(cache.len(), 16);
        assert_eq!(cache.live_files(), 16);
        // Two descriptors per cached file: buffered, O_DIRECT.
        let during = fds_under(fs.mount_point());
        assert_eq!(
            during,
            before + 16 * 2,
            "fds grew from {before} to {during}"
        );
        // Hits return the same open file.
        let a = exp.open_file(&handles[99]).expect("hit");
        let b = exp.open_file(&handles[99]).expect("hit");
        assert!(Arc::ptr_eq(&a, &b));
        cache.clear();
        assert!(cache.is_empty());
        // Still usable by the holders, closed when they let go.
        drop((a, b));
        assert_eq!(fds_under(fs.mount_point()), before);

        // Directories and missing files are refused.
        assert_eq!(exp.open_file(exp.root_handle()).err(), Some(FsError::IsDir));
    }

    #[test]
    fn remove_and_rename_over_evict() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let (_, cache, exp, root) = cached_export(&fs, 8);
        let [a, b, c] = new_files(&exp, &root, ["a", "b", "c"]);
        for node in [&a, &b, &c] {
            exp.open_file(node.fh()).expect("open");
        }
        assert_eq!(cache.len(), 3);

        // A second name keeps the file alive: no eviction.
        ops::link(&a, &root, b"a2").expect("link");
        ops::remove(&exp, &root, b"a").expect("rm a");
        assert_eq!(cache.len(), 3);
        ops::remove(&exp, &root, b"a2").expect("rm a2");
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&(exp.fs_id, a.kernel.clone())).is_none());

        // Renaming c over b evicts b, keeps c.
        ops::rename(&exp, &root, b"c", &root, b"b").expect("rename");
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&(exp.fs_id, b.kernel.clone())).is_none());
        assert!(cache.get(&(exp.fs_id, c.kernel.clone())).is_some());

        // The replaced file's handle is stale now (nothing holds it open).
        let b_fh = b.fh().to_vec();
        drop((a, b));
        assert_eq!(exp.open_file(&b_fh).err(), Some(FsError::Stale));
    }

    /// A file removed behind the server's back (a local `rm`) is closed
    /// by the sweep, and with it goes its space; one still linked, or
    /// linked under another name, stays; a holder keeps its file usable.
    #[test]
    fn files_deleted_locally_are_closed_by_the_sweep() {
        let Some(fs) = LoopFs::new("xfs", 256) else {
            return;
        };
        let (dir, cache, exp, root) = cached_export(&fs, 8);
        let how = CreateHow::Guarded(SetAttrs::default());
        let mut nodes = Vec::new();
        for name in ["big", "kept", "linked", "held"] {
            let (node, _) = ops::create(&exp, &root, name.as_bytes(), &how).expect("create");
            exp.open_file(node.fh()).expect("open");
            nodes.push(node);
        }
        std::fs::write(dir.join("big"), vec![7u8; 64 << 20]).expect("fill");
        std::fs::hard_link(dir.join("linked"), dir.join("linked2")).expect("link");
        let held = exp.open_file(nodes[3].fh()).expect("held");
        assert_eq!(cache.close_unlinked(), 0, "nothing removed yet");

        let free = || {
            rustix::fs::statvfs(&dir)
                .map(|s| s.f_bfree * s.f_frsize)
                .unwrap()
        };
        let before_rm = free();
        let fds = fds_under(fs.mount_point());
        for name in ["big", "linked", "held"] {
            std::fs::remove_file(dir.join(name)).expect("rm");
        }
        // Deleted but open: no space back.
        std::fs::File::open(&dir).unwrap().sync_all().unwrap();
        assert!(
            free() < before_rm + (32 << 20),
            "space came back while open"
        );

        assert_eq!(cache.close_unlinked(), 2, "big and held");
        assert_eq!(cache.len(), 2, "kept and linked stay");
        // big's two descriptors closed; held's stay while it is held.
        assert_eq!(fds_under(fs.mount_point()), fds - 2);
        // The holder still reads and writes through it.
        assert!(rustix::fs::fstat(held.data().buffered_fd()).is_ok());
        drop(held);
        assert_eq!(fds_under(fs.mount_point()), fds - 4);
        // A node holds its file (O_PATH) too; once all are gone, XFS frees
        // the unlinked inode's blocks in the background.
        drop(nodes);
        dionfs_testfs::wait_until(
            || free() >= before_rm + (60 << 20),
            std::time::Duration::from_secs(10),
            "the 64 MiB to come back",
        );
        assert!(free() >= before_rm + (60 << 20), "the 64 MiB came back");
        assert_eq!(cache.close_unlinked(), 0);
    }

    /// The defect behind lost IOR-hard records: with a cache of one, a
    /// file pushed out of the LRU while requests still hold it must come
    /// back as the very same object (same range locks), never a second one.
    #[test]
    fn one_open_file_per_inode_across_eviction() {
        let Some(fs) = LoopFs::new("xfs", 64) else {
            return;
        };
        let (_, cache, exp, root) = cached_export(&fs, 1);
        let how = CreateHow::Guarded(SetAttrs::default());
        let (a, _) = ops::create(&exp, &root, b"a", &how).expect("a");
        let (b, _) = ops::create(&exp, &root, b"b", &how).expect("b");

        let held = exp.open_file(a.fh()).expect("open a");
        let held_b = exp
            .open_file(b.fh())
            .expect("open b pushes a out of the LRU");
        assert_eq!(cache.len(), 1);
        let again = exp.open_file(a.fh()).expect("open a again");
        assert!(
            Arc::ptr_eq(&held, &again),
            "a second DataFile for one inode"
        );
        assert_eq!(cache.live_files(), 2);

        // A size change goes through the same object.
        ops::set_size(&exp, &a, 12345).expect("truncate");
        assert_eq!(held.data().size().expect("size"), 12345);

        // Once nobody holds it, it may really close and reopen: files the
        // LRU let go of while requests held them (which may have written
        // them since) wait for the server's sweep, which lets them close
        // (after syncing those with writes not yet synced).
        drop((held, again, held_b));
        assert_eq!(cache.live_files(), 2, "b waits for the sweep");
        assert_eq!(cache.sync_evicted(), 0, "nothing was written");
        assert_eq!(cache.live_files(), 1, "only the LRU's entry is left");
        exp.open_file(b.fh()).expect("b");
        assert_eq!(cache.live_files(), 1);
        for i in 0..100 {
            // Purging dead weak entries keeps the live map bounded.
            let (n, _) =
                ops::create(&exp, &root, format!("n{i}").as_bytes(), &how).expect("create");
            exp.open_file(n.fh()).expect("open");
        }
        assert!(cache.state.lock().live.len() <= 4);
    }

    #[test]
    fn a_file_let_go_of_twice_waits_once_and_closes() {
        let Some(fs) = LoopFs::new("xfs", 64) else {
            return;
        };
        let (_, cache, exp, root) = cached_export(&fs, 1);
        let [a, b, c] = new_files(&exp, &root, ["a", "b", "c"]);

        // A request holds a while the LRU lets go of it, finds it again
        // (through the live map) and lets go of it once more.
        let held = exp.open_file(a.fh()).expect("a");
        exp.open_file(b.fh()).expect("b pushes a out");
        exp.open_file(a.fh()).expect("a again, b out");
        exp.open_file(c.fh()).expect("c pushes a out again");
        assert_eq!(cache.state.lock().evicted_unsynced.len(), 1, "a waits once");
        // Still used: it waits on.
        assert_eq!(cache.sync_evicted(), 0);
        assert_eq!(cache.state.lock().evicted_unsynced.len(), 1);
        drop(held);
        // Let go of, unwritten: closed without a sync.
        assert_eq!(cache.sync_evicted(), 0);
        assert!(cache.state.lock().evicted_unsynced.is_empty());
        assert_eq!(cache.live_files(), 1, "only c is open");
        assert_eq!(cache.lost_writes(), 0);
    }

    /// Nested exports of one filesystem reach one inode through two
    /// handles (two export ids): both get the same open file.
    #[test]
    fn nested_exports_share_the_open_file() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let outer_dir = fs.mount_point().join("export");
        std::fs::create_dir_all(outer_dir.join("inner")).expect("mkdir");
        std::fs::write(outer_dir.join("inner/f"), b"x").expect("write");
        let cache = Arc::new(OpenFileCache::new(8));
        let key = MacKey::from_bytes([1; 32]);
        let outer = export_with_cache(&outer_dir, 1, key.clone(), Arc::clone(&cache));
        let inner = export_with_cache(&outer_dir.join("inner"), 2, key, Arc::clone(&cache));
        assert_eq!(outer.fs_id, inner.fs_id);
        let outer_root = outer.resolve(outer.root_handle()).expect("root");
        let (sub, _) = outer.lookup(&outer_root, b"inner").expect("inner");
        let (via_outer, _) = outer.lookup(&sub, b"f").expect("f");
        let inner_root = inner.resolve(inner.root_handle()).expect("root");
        let (via_inner, _) = inner.lookup(&inner_root, b"f").expect("f");
        assert_ne!(via_outer.fh(), via_inner.fh());
        let x = outer.open_file(via_outer.fh()).expect("open outer");
        let y = inner.open_file(via_inner.fh()).expect("open inner");
        assert!(Arc::ptr_eq(&x, &y));
        assert_eq!(cache.live_files(), 1);
    }
}
