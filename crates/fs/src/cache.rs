//! The open-file cache: READ and WRITE reuse open descriptors instead of
//! opening the file by handle for every request (knfsd's `nfsd_file`).
//!
//! Bounded and least-recently-used. Entries are keyed by export id and
//! kernel handle (inode number *and* generation, so a reused inode number
//! never hits a stale entry). Each holds an `Arc<OpenFile>`: evicting an
//! entry only drops the cache's reference, and the descriptors close when
//! the last request using the file finishes.
//!
//! REMOVE and RENAME evict a file that lost its last name, so the server
//! never keeps a deleted file's space allocated. Files deleted behind the
//! server's back (locally) stay open until they age out of the LRU.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use dionfs_dataplane::DataFile;
use dionfs_sys::handle::KernelHandle;
use parking_lot::Mutex;
use rustix::fs::OFlags;
use rustix::io::Errno;

use crate::attr::FileKind;
use crate::export::{ExportFs, Node};
use crate::FsError;

/// A regular file opened for the data plane.
pub struct OpenFile {
    node: Node,
    data: DataFile,
}

impl OpenFile {
    /// The file (for [`ExportFs::check_io_access`], GETATTR for wcc data).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The data plane's open file.
    pub fn data(&self) -> &DataFile {
        &self.data
    }
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("node", &self.node)
            .finish()
    }
}

type Key = (u16, KernelHandle);

/// The server-wide cache of open files, shared by all exports.
pub struct OpenFileCache {
    lru: Mutex<Lru<Key, Arc<OpenFile>>>,
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
    /// Default number of cached files (each holds up to three descriptors:
    /// `O_PATH`, buffered, `O_DIRECT`).
    pub const DEFAULT_CAPACITY: usize = 1024;

    /// A cache holding at most `capacity` files (at least one).
    pub fn new(capacity: usize) -> OpenFileCache {
        OpenFileCache {
            lru: Mutex::new(Lru::new(capacity.max(1))),
        }
    }

    /// Number of cached files.
    pub fn len(&self) -> usize {
        self.lru.lock().len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every entry of one export (when it is unexported).
    pub fn evict_export(&self, export_id: u16) {
        self.lru.lock().retain(|key| key.0 != export_id);
    }

    pub(crate) fn get(&self, export_id: u16, kernel: &KernelHandle) -> Option<Arc<OpenFile>> {
        self.lru.lock().get(&(export_id, kernel.clone()))
    }

    pub(crate) fn evict(&self, export_id: u16, kernel: &KernelHandle) {
        let removed = self.lru.lock().remove(&(export_id, kernel.clone()));
        if removed.is_some() {
            tracing::debug!(export_id, "evicted a removed file from the open-file cache");
        }
    }

    /// Inserts, or returns the entry a concurrent opener inserted first.
    fn insert(&self, export_id: u16, file: Arc<OpenFile>) -> Arc<OpenFile> {
        let key = (export_id, file.node.kernel.clone());
        let mut lru = self.lru.lock();
        if let Some(existing) = lru.get(&key) {
            return existing;
        }
        // The evicted entry (if any) is dropped after the lock is released.
        let _evicted = lru.insert(key, Arc::clone(&file));
        drop(lru);
        file
    }
}

impl ExportFs {
    /// The open file for `fh` if the cache holds one, without opening
    /// anything: attribute replies use it for the data plane's exact size.
    pub fn cached_file(&self, fh: &[u8]) -> Option<Arc<OpenFile>> {
        let kernel = crate::handle::decode(&self.key, self.export_id, fh).ok()?;
        self.cache.get(self.export_id, &kernel)
    }

    /// The open file for READ/WRITE/COMMIT on the regular file `fh`, from
    /// the cache or opened now (by handle, as root: `O_RDWR`, or `O_RDONLY`
    /// where writing is refused, e.g. on a read-only filesystem; plus an
    /// `O_DIRECT` descriptor beside it where the filesystem allows one).
    ///
    /// This does not check the caller's permission: call
    /// [`ExportFs::check_io_access`] with `file.node()` under the caller's
    /// credentials.
    pub fn open_file(&self, fh: &[u8]) -> Result<Arc<OpenFile>, FsError> {
        let kernel = crate::handle::decode(&self.key, self.export_id, fh)?;
        if let Some(file) = self.cache.get(self.export_id, &kernel) {
            // Deleted behind our back (not through REMOVE/RENAME, which
            // evict): stale, and no longer worth keeping open.
            let links = rustix::fs::statx(
                file.node().fd(),
                c"",
                rustix::fs::AtFlags::EMPTY_PATH,
                rustix::fs::StatxFlags::NLINK,
            )?;
            if links.stx_nlink == 0 {
                self.cache.evict(self.export_id, &kernel);
                return Err(FsError::Stale);
            }
            return Ok(file);
        }
        let node = self.resolve(fh)?;
        match node.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        let (buffered, access) = match self.open_kernel_handle(&kernel, OFlags::RDWR) {
            Ok(fd) => (fd, OFlags::RDWR),
            Err(FsError::Rofs | FsError::Access | FsError::Perm) => (
                self.open_kernel_handle(&kernel, OFlags::RDONLY)?,
                OFlags::RDONLY,
            ),
            Err(e) => return Err(e),
        };
        let direct = match self.open_kernel_handle(&kernel, access | OFlags::DIRECT) {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(error = %e, "no O_DIRECT descriptor for this file");
                None
            }
        };
        let label = format!(
            "export {} inode {}",
            self.export_id,
            crate::attr::Attr::of_fd(&buffered)?.fileid
        );
        let data = DataFile::new(buffered, direct).map_err(|e| {
            tracing::warn!(error = %e, "cannot set up the data plane for a file");
            match Errno::from_io_error(&e) {
                Some(errno) => FsError::from(errno),
                None => FsError::ServerFault,
            }
        })?;
        let file = Arc::new(OpenFile {
            node,
            data: data.with_label(label),
        });
        Ok(self.cache.insert(self.export_id, file))
    }
}

/// A least-recently-used map: a hash map for lookups plus an ordered map
/// from "last used" ticks to keys for finding the oldest entry.
struct Lru<K, V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<K, (V, u64)>,
    by_age: BTreeMap<u64, K>,
}

impl<K: Clone + Eq + Hash, V: Clone> Lru<K, V> {
    fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            capacity,
            tick: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let tick = self.next_tick();
        let (value, age) = self.entries.get_mut(key)?;
        self.by_age.remove(age);
        *age = tick;
        self.by_age.insert(tick, key.clone());
        Some(value.clone())
    }

    /// Inserts or replaces; returns what was pushed out to stay within
    /// the capacity (or the replaced value).
    fn insert(&mut self, key: K, value: V) -> Option<V> {
        let tick = self.next_tick();
        if let Some((old, age)) = self.entries.insert(key.clone(), (value, tick)) {
            self.by_age.remove(&age);
            self.by_age.insert(tick, key);
            return Some(old);
        }
        self.by_age.insert(tick, key);
        if self.entries.len() > self.capacity {
            let (_, oldest) = self.by_age.pop_first()?;
            return self.entries.remove(&oldest).map(|(v, _)| v);
        }
        None
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let (value, age) = self.entries.remove(key)?;
        self.by_age.remove(&age);
        Some(value)
    }

    fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let entries = &mut self.entries;
        self.by_age.retain(|_, key| {
            let kept = keep(key);
            if !kept {
                entries.remove(key);
            }
            kept
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::MacKey;
    use crate::ops::CreateHow;
    use crate::testutil::{export_with_cache, LoopFs};
    use crate::SetAttrs;

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut lru = Lru::new(2);
        assert_eq!(lru.insert(1, "a"), None);
        assert_eq!(lru.insert(2, "b"), None);
        assert_eq!(lru.get(&1), Some("a"));
        assert_eq!(lru.insert(3, "c"), Some("b"));
        assert_eq!(lru.get(&2), None);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.insert(1, "A"), Some("a"));
        assert_eq!(lru.remove(&1), Some("A"));
        assert_eq!(lru.len(), 1);
        lru.retain(|k| *k != 3);
        assert_eq!(lru.len(), 0);
        assert!(lru.by_age.is_empty());
    }

    /// Descriptors of this process that point into `dir` (other tests
    /// open files concurrently, so only count the ones on our mount).
    fn fds_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    #[test]
    fn cache_is_bounded_and_never_leaks_descriptors() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let cache = Arc::new(OpenFileCache::new(16));
        let exp = export_with_cache(&dir, 1, MacKey::from_bytes([1; 32]), Arc::clone(&cache));
        let root = exp.resolve(exp.root_handle()).expect("root");
        let mut handles = Vec::new();
        for i in 0..100 {
            let how = CreateHow::Guarded(SetAttrs::default());
            let (node, _) = exp
                .create(&root, format!("f{i}").as_bytes(), &how)
                .expect("create");
            handles.push(node.fh().to_vec());
        }
        let before = fds_under(fs.mount_point());
        for fh in &handles {
            let file = exp.open_file(fh).expect("open");
            assert_eq!(file.node().fh(), fh.as_slice());
            // ext4 on 4096-byte sectors can do direct I/O.
            assert!(file.data().is_direct_capable());
        }
        assert_eq!(cache.len(), 16);
        // Three descriptors per cached file: O_PATH, buffered, O_DIRECT.
        let during = fds_under(fs.mount_point());
        assert_eq!(
            during,
            before + 16 * 3,
            "fds grew from {before} to {during}"
        );
        // Hits return the same open file.
        let a = exp.open_file(&handles[99]).expect("hit");
        let b = exp.open_file(&handles[99]).expect("hit");
        assert!(Arc::ptr_eq(&a, &b));
        cache.evict_export(1);
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
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let cache = Arc::new(OpenFileCache::new(8));
        let exp = export_with_cache(&dir, 1, MacKey::from_bytes([1; 32]), Arc::clone(&cache));
        let root = exp.resolve(exp.root_handle()).expect("root");
        let how = CreateHow::Guarded(SetAttrs::default());
        let (a, _) = exp.create(&root, b"a", &how).expect("a");
        let (b, _) = exp.create(&root, b"b", &how).expect("b");
        let (c, _) = exp.create(&root, b"c", &how).expect("c");
        for node in [&a, &b, &c] {
            exp.open_file(node.fh()).expect("open");
        }
        assert_eq!(cache.len(), 3);

        // A second name keeps the file alive: no eviction.
        exp.link(&a, &root, b"a2").expect("link");
        exp.remove(&root, b"a").expect("rm a");
        assert_eq!(cache.len(), 3);
        exp.remove(&root, b"a2").expect("rm a2");
        assert_eq!(cache.len(), 2);
        assert!(cache.get(1, &a.kernel).is_none());

        // Renaming c over b evicts b, keeps c.
        exp.rename(&root, b"c", &root, b"b").expect("rename");
        assert_eq!(cache.len(), 1);
        assert!(cache.get(1, &b.kernel).is_none());
        assert!(cache.get(1, &c.kernel).is_some());

        // The replaced file's handle is stale now (nothing holds it open).
        let b_fh = b.fh().to_vec();
        drop((a, b));
        assert_eq!(exp.open_file(&b_fh).err(), Some(FsError::Stale));
    }
}
