//! The bounded in-memory cache of checksum pages, shared by every file of
//! a [`crate::Store`]: a page is 1024 stored entries (4 KiB, the checksums
//! of 4 MiB of data), keyed by (file generation, page index). A file gets
//! a new generation whenever its pages may no longer match the store file
//! (opened, truncated, rebuilt), so stale pages are never found again and
//! simply age out; nothing has to walk the cache.
//!
//! The cache is a clean copy of the store files: writes go to the store
//! file first ([`crate::FileSums`]), then update a cached page if there is
//! one. Loading a page on a miss and updating a page after a write are
//! serialised per file (`FileSums::load`), so a page read from the store
//! before a write's entries reached it can never be inserted after that
//! write updated the cache.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

/// Entries per page.
pub(crate) const PAGE_ENTRIES: u64 = 1024;

/// One page of stored entries (`crc ^ ZERO_BLOCK_CRC`).
pub(crate) struct Page(Box<[AtomicU32]>);

impl Page {
    pub(crate) fn from_bytes(bytes: &[u8]) -> Page {
        let entries = (0..PAGE_ENTRIES as usize)
            .map(|i| {
                let e = bytes
                    .get(i * 4..i * 4 + 4)
                    .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                AtomicU32::new(e)
            })
            .collect();
        Page(entries)
    }

    pub(crate) fn get(&self, i: usize) -> u32 {
        self.0[i].load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, i: usize, v: u32) {
        self.0[i].store(v, Ordering::Release)
    }
}

type Key = (u64, u64);

/// Least recently used pages out first.
pub(crate) struct PageCache {
    state: Mutex<LruCache<Key, Arc<Page>>>,
}

impl PageCache {
    pub(crate) fn new(capacity: usize) -> PageCache {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        PageCache {
            state: Mutex::new(LruCache::new(capacity)),
        }
    }

    pub(crate) fn get(&self, generation: u64, page: u64) -> Option<Arc<Page>> {
        self.state.lock().get(&(generation, page)).cloned()
    }

    pub(crate) fn insert(&self, generation: u64, page: u64, value: Arc<Page>) {
        let pushed_out = self.state.lock().push((generation, page), value);
        // A page pushed out is freed outside the lock.
        drop(pushed_out);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_lru() {
        let cache = PageCache::new(2);
        let page = || Arc::new(Page::from_bytes(&[]));
        cache.insert(1, 0, page());
        cache.insert(1, 1, page());
        assert!(cache.get(1, 0).is_some());
        cache.insert(2, 0, page());
        assert_eq!(cache.len(), 2);
        assert!(cache.get(1, 1).is_none(), "least recently used went first");
        assert!(cache.get(1, 0).is_some());
        let p = Page::from_bytes(&[1, 0, 0, 0, 2, 0, 0, 0, 3]);
        assert_eq!((p.get(0), p.get(1), p.get(2)), (1, 2, 0));
    }
}
