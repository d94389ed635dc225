//! The intent log: which regions of which files may hold blocks whose
//! stored checksums do not match the data on disk.
//!
//! A write of blocks records their region (64 MiB, [`REGION_BLOCKS`]) as
//! *dirty* in the log, durably (`fdatasync`), before the data write is
//! issued; later writes to a region already dirty need no log I/O. A
//! COMMIT that made a file's data and its checksums durable marks its idle
//! regions clean again (in memory), except those written in the last
//! [`KEEP_DIRTY`]: a client that COMMITs after every few WRITEs would
//! otherwise pay a log write and `fdatasync` (and lose the io_uring path,
//! which never waits for one) on the next WRITE of each region, again and
//! again; a region kept dirty only costs its recomputation if the server
//! crashes. When no region of any file is dirty
//! the log is emptied, and when it grows past [`CHECKPOINT_LEN`] it is
//! rewritten with just the dirty regions. At start-up, before serving,
//! the checksums of every region the log names are recomputed from the
//! data on disk ([`crate::Store::recover`]): whatever a crash left
//! half-written, data and checksums agree again.
//!
//! Concurrent writers that each dirty a region share one `fdatasync`
//! (group commit: the first to find no sync running writes everyone's
//! records; the others wait for it).
//!
//! Record (little endian): `len u32 | kind u8 (1 = dirty) | region u64 |
//! fs_id u64 | handle_type i32 | handle_len u16 | handle | crc32c u32` of
//! everything before it. A torn or damaged tail ends the log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dionfs_sys::private;
use parking_lot::{Condvar, Mutex};

use crate::key::FileKey;

/// Blocks per region: 16384 blocks of 4 KiB = 64 MiB. A sequential
/// writer logs one record per 64 MiB; recovery re-reads at most that much
/// per region named.
pub(crate) const REGION_BLOCKS: u64 = 16384;

/// A COMMIT leaves a region dirty if it was written this recently.
pub(crate) const KEEP_DIRTY: Duration = Duration::from_secs(5);

/// A log longer than this is rewritten with only the dirty regions.
const CHECKPOINT_LEN: u64 = 4 << 20;

const KIND_DIRTY: u8 = 1;
const RECORD_MIN: usize = 4 + 1 + 8 + 8 + 4 + 2 + 4;

type FileId = [u8; 16];

pub(crate) struct IntentLog {
    path: PathBuf,
    file: Mutex<File>,
    sync: Mutex<SyncState>,
    synced_cv: Condvar,
    dirty: Mutex<Dirty>,
    /// [`KEEP_DIRTY`], or less in tests.
    keep_dirty: Duration,
}

#[derive(Default)]
struct SyncState {
    /// Records not yet written.
    pending: Vec<u8>,
    /// Sequence number of the last record added to `pending`.
    next: u64,
    /// Records up to this one are durable.
    synced: u64,
    /// A writer is writing and syncing `pending` right now.
    syncing: bool,
    /// Attempts to write the log that failed (the filesystem of the state
    /// directory full, an I/O error). Their records went back to the front
    /// of `pending` for the next attempt; a writer waiting for its record
    /// when one failed fails too, with `last_errno`, rather than go ahead
    /// unlogged.
    failures: u64,
    last_errno: i32,
    /// The last attempt failed (so that the failing and the recovery are
    /// logged once each, not once per attempt).
    failing: bool,
    /// A failed write could not be cut off the log again (its torn tail
    /// would end the log at recovery and hide what follows): every later
    /// write on an integrity export fails (its checksums could not be kept
    /// consistent after a crash).
    broken: bool,
}

#[derive(Default)]
struct Dirty {
    /// Counts writes begun (a logical clock for COMMIT).
    seq: u64,
    files: HashMap<FileId, DirtyFile>,
}

struct DirtyFile {
    key: FileKey,
    regions: HashMap<u64, Region>,
}

struct Region {
    /// Writes of the region between [`IntentLog::begin`] and
    /// [`IntentLog::end`].
    in_flight: u32,
    /// `Dirty::seq` of the last write begun in it.
    last_seq: u64,
    /// Its record's sequence number in the log.
    logged: u64,
    /// When the last write of it began.
    last_write: Instant,
}

/// What a COMMIT may mark clean once it has synced the file: the regions
/// idle when it started, if no write begins in them before it is done.
#[derive(Debug)]
pub(crate) struct CleanTicket {
    seq: u64,
    regions: Vec<u64>,
}

fn encode(key: &FileKey, region: u64, out: &mut Vec<u8>) {
    let start = out.len();
    let len = RECORD_MIN + key.handle.len();
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.push(KIND_DIRTY);
    out.extend_from_slice(&region.to_le_bytes());
    out.extend_from_slice(&key.fs_id.to_le_bytes());
    out.extend_from_slice(&key.handle_type.to_le_bytes());
    out.extend_from_slice(&(key.handle.len() as u16).to_le_bytes());
    out.extend_from_slice(&key.handle);
    let crc = crate::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The (file, region) pairs of a log's valid records.
pub(crate) fn decode_all(mut bytes: &[u8]) -> Vec<(FileKey, u64)> {
    let mut out = Vec::new();
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    while bytes.len() >= RECORD_MIN {
        let len = u32_at(bytes, 0) as usize;
        if len < RECORD_MIN || len > bytes.len() {
            break;
        }
        let record = &bytes[..len];
        if crate::crc32c(&record[..len - 4]) != u32_at(record, len - 4) || record[4] != KIND_DIRTY {
            break;
        }
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&record[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let region = u64_at(5);
        let fs_id = u64_at(13);
        let handle_type = u32_at(record, 21) as i32;
        let handle_len = u16::from_le_bytes([record[25], record[26]]) as usize;
        if RECORD_MIN + handle_len != len {
            break;
        }
        let handle = record[27..27 + handle_len].to_vec();
        out.push((
            FileKey {
                fs_id,
                handle_type,
                handle,
            },
            region,
        ));
        bytes = &bytes[len..];
    }
    out
}

fn open_append(path: &Path) -> io::Result<File> {
    private::options()
        .create(true)
        .append(true)
        .read(true)
        .open(path)
}

impl IntentLog {
    /// Opens (or creates) the log at `path`; returns it and the regions its
    /// records name, which the caller must recover before any write.
    pub(crate) fn open(path: &Path) -> io::Result<(IntentLog, Vec<(FileKey, u64)>)> {
        let mut file = open_append(path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let records = decode_all(&bytes);
        Ok((
            IntentLog {
                path: path.to_path_buf(),
                file: Mutex::new(file),
                sync: Mutex::default(),
                synced_cv: Condvar::new(),
                dirty: Mutex::default(),
                keep_dirty: KEEP_DIRTY,
            },
            records,
        ))
    }

    /// Empties the log (after recovery made every region it named clean),
    /// durably.
    pub(crate) fn reset(&self) -> io::Result<()> {
        let file = self.file.lock();
        file.set_len(0)?;
        file.sync_all()
    }

    /// A write of the blocks in `regions` of `key` begins: their regions
    /// are dirty, durably, when this returns. Returns the write's sequence
    /// number. Every `begin` must be followed by one [`IntentLog::end`].
    pub(crate) fn begin(&self, id: FileId, key: &FileKey, regions: Range<u64>) -> io::Result<u64> {
        let mut wait_for = 0;
        let seq = {
            let mut dirty = self.dirty.lock();
            dirty.seq += 1;
            let seq = dirty.seq;
            let file = dirty.files.entry(id).or_insert_with(|| DirtyFile {
                key: key.clone(),
                regions: HashMap::new(),
            });
            for region in regions.clone() {
                let logged = match file.regions.get(&region) {
                    Some(r) => r.logged,
                    None => {
                        let mut sync = self.sync.lock();
                        encode(key, region, &mut sync.pending);
                        sync.next += 1;
                        sync.next
                    }
                };
                let now = Instant::now();
                let r = file.regions.entry(region).or_insert(Region {
                    in_flight: 0,
                    last_seq: seq,
                    logged,
                    last_write: now,
                });
                r.in_flight += 1;
                r.last_seq = seq;
                r.last_write = now;
                wait_for = wait_for.max(r.logged);
            }
            seq
        };
        if let Err(e) = self.wait_durable(wait_for) {
            self.end(id, regions);
            return Err(e);
        }
        Ok(seq)
    }

    /// [`IntentLog::begin`] for a caller that must not block: only when
    /// every region in `regions` is dirty already, durably, so nothing
    /// has to be written or waited for. Otherwise `None`, and nothing
    /// changed.
    pub(crate) fn try_begin(&self, id: FileId, regions: Range<u64>) -> Option<u64> {
        let mut dirty = self.dirty.lock();
        let synced = {
            let sync = self.sync.lock();
            if sync.broken {
                return None;
            }
            sync.synced
        };
        let file = dirty.files.get(&id)?;
        if !regions.clone().all(|region| {
            file.regions
                .get(&region)
                .is_some_and(|r| r.logged <= synced)
        }) {
            return None;
        }
        dirty.seq += 1;
        let seq = dirty.seq;
        let file = dirty.files.get_mut(&id)?;
        let now = Instant::now();
        for region in regions {
            if let Some(r) = file.regions.get_mut(&region) {
                r.in_flight += 1;
                r.last_seq = seq;
                r.last_write = now;
            }
        }
        Some(seq)
    }

    /// The write begun for `regions` is over (done or failed).
    pub(crate) fn end(&self, id: FileId, regions: Range<u64>) {
        let mut dirty = self.dirty.lock();
        if let Some(file) = dirty.files.get_mut(&id) {
            for region in regions {
                if let Some(r) = file.regions.get_mut(&region) {
                    r.in_flight = r.in_flight.saturating_sub(1);
                }
            }
        }
    }

    /// Group commit: returns once record `target` is durable.
    fn wait_durable(&self, target: u64) -> io::Result<()> {
        let mut sync = self.sync.lock();
        let failures = sync.failures;
        loop {
            if sync.broken {
                return Err(io::Error::other(
                    "the integrity intent log cannot be written",
                ));
            }
            if sync.synced >= target {
                return Ok(());
            }
            if sync.failures != failures {
                return Err(io::Error::from_raw_os_error(sync.last_errno));
            }
            if sync.syncing {
                self.synced_cv.wait(&mut sync);
                continue;
            }
            sync.syncing = true;
            let batch = std::mem::take(&mut sync.pending);
            let upto = sync.next;
            drop(sync);
            let appended = self.append(&batch);
            sync = self.sync.lock();
            sync.syncing = false;
            self.synced_cv.notify_all();
            match appended {
                Ok(()) => {
                    sync.synced = upto;
                    if std::mem::take(&mut sync.failing) {
                        tracing::info!(log = %self.path.display(),
                            "the integrity intent log can be written again");
                    }
                }
                Err((e, restored)) => {
                    // Ahead of the records added meanwhile: their order is
                    // their sequence numbers'.
                    let added = std::mem::replace(&mut sync.pending, batch);
                    sync.pending.extend_from_slice(&added);
                    sync.failures += 1;
                    sync.last_errno = e.raw_os_error().unwrap_or(libc::EIO);
                    if !restored {
                        tracing::error!(log = %self.path.display(), error = %e,
                            "cannot write the integrity intent log, nor cut the failed write off \
                             it again; writes to integrity exports fail from now on");
                        sync.broken = true;
                    } else if !std::mem::replace(&mut sync.failing, true) {
                        tracing::warn!(log = %self.path.display(), error = %e,
                            "cannot write the integrity intent log; WRITEs to integrity exports \
                             that start a region of a file fail until it can be written again \
                             (free space in the state directory's filesystem)");
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Appends `batch` to the log file and syncs it, as the server (the
    /// log is not charged to the caller whose write needs it, nor refused
    /// the blocks reserved for root). A failed write or sync is cut off the
    /// file again: `Err((error, false))` if that failed too.
    fn append(&self, batch: &[u8]) -> Result<(), (io::Error, bool)> {
        let mut file = self.file.lock();
        let mut restored = true;
        crate::as_server(|| {
            let len = file.metadata()?.len();
            let written = file.write_all(batch).and_then(|()| file.sync_data());
            if written.is_err() {
                restored = file.set_len(len).is_ok();
            }
            written
        })
        .map_err(|e| (e, restored))
    }

    /// Taken by COMMIT before it syncs the file's data; with `keep_recent`
    /// regions written in the last [`KEEP_DIRTY`] stay dirty (a COMMIT
    /// while serving), without it every idle region is cleaned (the last
    /// COMMIT before the server stops).
    pub(crate) fn clean_ticket(&self, id: FileId, keep_recent: bool) -> CleanTicket {
        let keep = if keep_recent {
            self.keep_dirty
        } else {
            Duration::ZERO
        };
        let dirty = self.dirty.lock();
        let regions = dirty
            .files
            .get(&id)
            .map(|f| {
                f.regions
                    .iter()
                    .filter(|(_, r)| r.in_flight == 0 && r.last_write.elapsed() >= keep)
                    .map(|(k, _)| *k)
                    .collect()
            })
            .unwrap_or_default();
        CleanTicket {
            seq: dirty.seq,
            regions,
        }
    }

    /// After COMMIT made the file's data and checksums durable: its regions
    /// idle since the ticket was taken (and not written in the
    /// [`KEEP_DIRTY`] before it) are clean. Empties or compacts the
    /// log when it can.
    pub(crate) fn clean(&self, id: FileId, ticket: CleanTicket) {
        let mut dirty = self.dirty.lock();
        if let Some(file) = dirty.files.get_mut(&id) {
            for region in ticket.regions {
                if file
                    .regions
                    .get(&region)
                    .is_some_and(|r| r.in_flight == 0 && r.last_seq <= ticket.seq)
                {
                    file.regions.remove(&region);
                }
            }
            if file.regions.is_empty() {
                dirty.files.remove(&id);
            }
        }
        if let Err(e) = crate::as_server(|| self.compact(&dirty)) {
            tracing::warn!(log = %self.path.display(), error = %e, "cannot compact the integrity intent log");
        }
    }

    /// The files with a dirty region no write has begun in for `idle`
    /// (none in flight): what [`crate::Store::settle`] would clean.
    pub(crate) fn idle_files(&self, idle: Duration) -> Vec<FileKey> {
        let dirty = self.dirty.lock();
        dirty
            .files
            .values()
            .filter(|f| {
                f.regions
                    .values()
                    .any(|r| r.in_flight == 0 && r.last_write.elapsed() >= idle)
            })
            .map(|f| f.key.clone())
            .collect()
    }

    /// A file lost its last name: nothing of it needs recovering.
    pub(crate) fn forget(&self, id: FileId) {
        let mut dirty = self.dirty.lock();
        dirty.files.remove(&id);
    }

    /// Empties the log if nothing is dirty, or rewrites it with only the
    /// dirty regions once it is long; only while no records are pending
    /// (the caller holds the dirty map, so none can be added meanwhile).
    fn compact(&self, dirty: &Dirty) -> io::Result<()> {
        let sync = self.sync.lock();
        if sync.syncing || !sync.pending.is_empty() {
            return Ok(());
        }
        let mut file = self.file.lock();
        if dirty.files.is_empty() {
            // Not synced: a log that comes back after a crash only makes
            // recovery recompute regions that were clean.
            return file.set_len(0);
        }
        if file.metadata()?.len() < CHECKPOINT_LEN {
            return Ok(());
        }
        let mut records = Vec::new();
        for f in dirty.files.values() {
            for region in f.regions.keys() {
                encode(&f.key, *region, &mut records);
            }
        }
        let tmp = self.path.with_extension("new");
        {
            let mut new = private::options()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            new.write_all(&records)?;
            new.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        *file = open_append(&self.path)?;
        Ok(())
    }

    /// Dirty regions, for tests.
    #[cfg(test)]
    pub(crate) fn dirty_regions(&self) -> usize {
        self.dirty
            .lock()
            .files
            .values()
            .map(|f| f.regions.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> FileKey {
        FileKey {
            fs_id: 7,
            handle_type: 1,
            handle: vec![n; 12],
        }
    }

    /// Takes every free block of the filesystem holding `path`.
    fn fill(path: &Path) {
        let f = File::create(path).unwrap();
        let (mut off, mut chunk) = (0u64, 1u64 << 30);
        while chunk >= 4096 {
            match rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), off, chunk) {
                Ok(()) => off += chunk,
                Err(rustix::io::Errno::NOSPC) => chunk /= 2,
                Err(e) => panic!("fallocate: {e}"),
            }
        }
    }

    #[test]
    fn a_full_filesystem_fails_the_writes_it_stops_logging_until_space_is_freed() {
        let Some(fs) = dionfs_testfs::LoopFs::new("ext4", 16) else {
            return;
        };
        let path = fs.path("log");
        let (log, _) = IntentLog::open(&path).unwrap();
        let id = [1; 16];
        for region in 0..3 {
            log.begin(id, &key(1), region..region + 1).unwrap();
            log.end(id, region..region + 1);
        }
        fill(&fs.path("fill"));
        // Records go into the log's last block until it is full; the
        // record that needs a new block fails with the filesystem's error.
        let mut region = 3;
        let e = loop {
            match log.begin(id, &key(1), region..region + 1) {
                Ok(_) => log.end(id, region..region + 1),
                Err(e) => break e,
            }
            region += 1;
            assert!(region < 10_000, "the log never ran out of space");
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        // Nothing torn was left behind: the log reads whole.
        let logged = decode_all(&std::fs::read(&path).unwrap()).len();
        assert_eq!(logged as u64, region);
        // Space freed, the log takes records again: the one that failed
        // first (it stayed pending), then new ones, all readable.
        std::fs::remove_file(fs.path("fill")).unwrap();
        for region in region..region + 3 {
            log.begin(id, &key(1), region..region + 1).unwrap();
            log.end(id, region..region + 1);
        }
        let (_, records) = IntentLog::open(&path).unwrap();
        let regions: Vec<u64> = records.iter().map(|(_, r)| *r).collect();
        assert_eq!(regions, (0..region + 3).collect::<Vec<_>>());
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_ends_the_log() {
        let mut bytes = Vec::new();
        encode(&key(1), 3, &mut bytes);
        encode(&key(2), 0, &mut bytes);
        let whole = decode_all(&bytes);
        assert_eq!(whole, vec![(key(1), 3), (key(2), 0)]);
        for cut in 0..bytes.len() {
            let got = decode_all(&bytes[..cut]);
            assert!(got.len() <= 1, "cut at {cut}");
        }
        let mut damaged = bytes.clone();
        damaged[10] ^= 1;
        assert!(decode_all(&damaged).is_empty());
        // Garbage never panics.
        let junk: Vec<u8> = (0..1000u32).map(|i| (i * 37 % 256) as u8).collect();
        let _ = decode_all(&junk);
    }

    #[test]
    fn regions_are_logged_once_and_cleaned_by_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("intent.log");
        let (mut log, old) = IntentLog::open(&path).unwrap();
        log.keep_dirty = Duration::ZERO;
        assert!(old.is_empty());
        let id = [1u8; 16];
        let seq = log.begin(id, &key(1), 0..2).unwrap();
        log.end(id, 0..2);
        let len1 = std::fs::metadata(&path).unwrap().len();
        log.begin(id, &key(1), 1..2).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            len1,
            "region 1 already dirty"
        );
        // A COMMIT while a write is in flight leaves its region dirty.
        let ticket = log.clean_ticket(id, true);
        assert!(ticket.seq > seq);
        log.clean(id, ticket);
        assert_eq!(log.dirty_regions(), 1);
        assert_eq!(decode_all(&std::fs::read(&path).unwrap()).len(), 2);
        log.end(id, 1..2);
        let ticket = log.clean_ticket(id, true);
        log.clean(id, ticket);
        assert_eq!(log.dirty_regions(), 0);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "emptied");
        // A reopened log names what was dirty.
        log.begin(id, &key(1), 5..6).unwrap();
        drop(log);
        let (_, old) = IntentLog::open(&path).unwrap();
        assert_eq!(old, vec![(key(1), 5)]);
    }

    #[test]
    fn idle_files_are_those_with_a_region_no_write_is_in_or_touched_lately() {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = IntentLog::open(&dir.path().join("intent.log")).unwrap();
        let (a, b) = ([3u8; 16], [4u8; 16]);
        log.begin(a, &key(3), 0..1).unwrap();
        log.end(a, 0..1);
        log.begin(b, &key(4), 0..1).unwrap(); // still being written
        assert_eq!(log.idle_files(Duration::ZERO), vec![key(3)]);
        assert!(log.idle_files(Duration::from_secs(3600)).is_empty());
        dionfs_testfs::wait_until(
            || log.idle_files(Duration::from_millis(40)) == vec![key(3)],
            Duration::from_secs(10),
            "the file written to 40 ms ago to be idle, not the one still written",
        );
        assert_eq!(log.idle_files(Duration::from_millis(40)), vec![key(3)]);
        log.end(b, 0..1);
        let mut both = log.idle_files(Duration::ZERO);
        both.sort_by_key(|k| k.handle.clone());
        assert_eq!(both, vec![key(3), key(4)]);
    }

    #[test]
    fn a_commit_keeps_recently_written_regions_dirty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("intent.log");
        let (mut log, _) = IntentLog::open(&path).unwrap();
        log.keep_dirty = Duration::from_millis(300);
        let id = [2u8; 16];
        log.begin(id, &key(2), 0..1).unwrap();
        log.end(id, 0..1);
        let ticket = log.clean_ticket(id, true);
        log.clean(id, ticket);
        assert_eq!(log.dirty_regions(), 1, "written just now: kept dirty");
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(log.try_begin(id, 0..1).is_some(), "no log write needed");
        log.end(id, 0..1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
        dionfs_testfs::wait_until(
            || {
                let ticket = log.clean_ticket(id, true);
                log.clean(id, ticket);
                log.dirty_regions() == 0
            },
            Duration::from_secs(10),
            "a commit to clean the region once idle for 300 ms",
        );
        assert_eq!(log.dirty_regions(), 0, "idle long enough: clean");
        assert!(log.try_begin(id, 0..1).is_none());
    }
}
