//! The checksum state of one open regular file ([`FileSums`]): what the
//! data plane calls before and after a write, after a read, around
//! truncate and COMMIT; and the rebuild of checksums a file changed
//! behind the server's back needs.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use dionfs_sys::io::RwFlags;
use dionfs_sys::private;
use parking_lot::Mutex;

use super::data::{
    data_only_in, for_each_data_extent, pread_full, pread_full_flags, read_full, FileDeleted,
};
use super::header::{read_header, Header, HEADER_LEN};
use super::Store;
use crate::cache::{Page, PAGE_ENTRIES};
use crate::key::path_of;
use crate::log::{CleanTicket, REGION_BLOCKS};
use crate::{
    block_ceil, block_crc, block_crcs, block_floor, zero_block_crc, Checksummer, FileKey, Version,
    BLOCK,
};

/// Bytes read at a time when checksumming a file's data.
pub(super) const READ_CHUNK: usize = 1 << 20;

#[cfg(test)]
thread_local! {
    /// Runs once, on the rebuilding thread, after a rebuild's pass over
    /// the data (a test's local write racing it).
    pub(super) static AFTER_REBUILD_PASS: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Runs once, on the rebuilding thread, right after a rebuild wiped
    /// the entries (a test cutting it short there).
    pub(super) static AFTER_REBUILD_WIPE: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
    /// Runs once, on the recomputing thread, after a chunk's checksums
    /// are stored (a test deleting the file mid-pass).
    pub(super) static AFTER_RECOMPUTE_CHUNK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
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
    pub(super) registered: bool,
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

/// How [`FileSums::open`] opens a checksum file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Open {
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

impl FileSums {
    pub(super) fn open(
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
                    tracing::info!(file = %path_of(data), checksums = %key.relative_path().display(),
                        "file changed behind the server's back since its \
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
                tracing::info!(file = %path_of(data), "file changed behind the server's back; \
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

    /// Stores the zero-block value for `blocks`. More than a page of
    /// entries is punched out of the checksum file (a hole there reads as
    /// that value) and the cached pages are dropped (a new generation),
    /// so a DEALLOCATE of a large range writes no entries at all; less,
    /// or where the store's filesystem cannot punch, they are written.
    fn store_zeros(&self, blocks: Range<u64>) -> io::Result<()> {
        let count = blocks.end.saturating_sub(blocks.start);
        if count > PAGE_ENTRIES {
            let flags =
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
            match rustix::fs::fallocate(&self.file, flags, HEADER_LEN + 4 * blocks.start, 4 * count)
            {
                Ok(()) => {
                    // Pages loaded before the punch are never looked up
                    // again; a write to other blocks that updated one of
                    // them wrote its entries to the file first.
                    self.generation
                        .store(self.store.new_generation(), Ordering::Release);
                    return Ok(());
                }
                Err(rustix::io::Errno::OPNOTSUPP) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let zero = zero_block_crc();
        let mut block = blocks.start;
        while block < blocks.end {
            let n = (blocks.end - block).min(PAGE_ENTRIES);
            self.store_crcs(block, &vec![zero; n as usize])?;
            block += n;
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

    /// Whether [`WriteTicket::copy_sums`] may copy the stored checksums
    /// of `src` into this file: both in one store, and those of `src`
    /// trusted (not changed behind the server's back, not waiting for a
    /// rebuild that failed). Otherwise a copy's blocks are recomputed.
    pub fn can_copy_sums_from(&self, src: &FileSums) -> bool {
        self.shares_store(src) && !src.is_stale() && !src.unverifiable()
    }

    fn shares_store(&self, other: &FileSums) -> bool {
        Arc::ptr_eq(&self.store, &other.store)
    }

    /// The stored checksums may no longer match the data (a write whose
    /// outcome nobody will see, such as one abandoned in flight): from
    /// now on a mismatch rebuilds them from the data instead of being
    /// reported, as for a file changed behind the server's back.
    pub fn distrust(&self) {
        if !std::mem::replace(&mut self.version.lock().stale, true) {
            tracing::info!(file = %self.key, "a write's checksums were not stored; \
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
    pub(super) fn recover_regions(&self, data: BorrowedFd<'_>, regions: &[u64]) -> io::Result<u64> {
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
            tracing::debug!(file = %self.key, error = %e, "cannot write a checksum header");
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

    /// The write punched a hole (`fallocate(PUNCH_HOLE)`): the blocks
    /// `zeroed` (those of the ticket's it covered whole) read as zeros now
    /// and get the zero-block value without a read; the ticket's other
    /// blocks (the partial edges) are recomputed from disk. Blocks past
    /// the end of the file are left alone (they have no entries).
    pub fn zeroed(self, zeroed: Range<u64>) -> io::Result<()> {
        let size = Version::of(self.data)?.size;
        let zeroed = clamp(&zeroed, &self.blocks, size);
        self.sums.store_zeros(zeroed.clone())?;
        self.recompute_around(&zeroed)
    }

    /// The write copied data from `src` (a file of the same store, whose
    /// checksums are trusted: [`FileSums::can_copy_sums_from`]): the blocks
    /// `whole` of the ticket's, each a whole block of data copied from
    /// block `src_first + (block - whole.start)` of `src`, get that
    /// block's stored checksum without a read (a corrupt source block
    /// stays detectable in the copy); the ticket's other blocks are
    /// recomputed from disk.
    pub fn copy_sums(self, src: &FileSums, src_first: u64, whole: Range<u64>) -> io::Result<()> {
        debug_assert!(self.sums.shares_store(src));
        let size = Version::of(self.data)?.size;
        let asked = whole.start;
        let whole = clamp(&whole, &self.blocks, size);
        let zero = zero_block_crc();
        let mut block = whole.start;
        while block < whole.end {
            let n = (whole.end - block).min(PAGE_ENTRIES);
            let from = src_first + (block - asked);
            let crcs: Vec<u32> = src
                .stored(from, n as usize)?
                .into_iter()
                .map(|entry| entry ^ zero)
                .collect();
            self.sums.store_crcs(block, &crcs)?;
            block += n;
        }
        self.recompute_around(&whole)
    }

    /// Recomputes the ticket's blocks before and after `done`.
    fn recompute_around(self, done: &Range<u64>) -> io::Result<()> {
        let (head, tail) = if done.is_empty() {
            (self.blocks.clone(), self.blocks.end..self.blocks.end)
        } else {
            (self.blocks.start..done.start, done.end..self.blocks.end)
        };
        for edge in [head, tail] {
            if !edge.is_empty() {
                self.sums.recompute(self.data, edge)?;
            }
        }
        Ok(())
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

/// `blocks` within the ticket's `ticket` and below the end of a file of
/// `size` bytes.
fn clamp(blocks: &Range<u64>, ticket: &Range<u64>, size: u64) -> Range<u64> {
    let start = blocks.start.max(ticket.start);
    let end = blocks.end.min(ticket.end).min(size.div_ceil(BLOCK));
    start..end.max(start)
}
