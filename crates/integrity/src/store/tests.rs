//! Tests of the store and of its files' checksum states.

use super::header::{read_header, HEADER_LEN};
use super::sums::{AFTER_REBUILD_PASS, AFTER_REBUILD_WIPE, AFTER_RECOMPUTE_CHUNK, READ_CHUNK};
use super::*;
use crate::{block_crc, block_crcs, BLOCK};
use std::os::fd::AsFd;
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

/// Fills `data` with `len` bytes of a pattern through `sums`, as the
/// server writes.
fn filled(sums: &FileSums, data: &File, len: usize, salt: u8) -> Vec<u8> {
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8 ^ salt).collect();
    let t = sums.begin_write(data.as_fd(), 0..len as u64).unwrap();
    data.write_all_at(&bytes, 0).unwrap();
    t.finish(&crcs(&bytes)).unwrap();
    bytes
}

#[test]
fn a_punched_range_gets_zero_blocks_without_a_read_and_its_edges_recomputed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
    let data = tempfile::tempfile().unwrap();
    let sums = store.open_file(key(30), data.as_fd()).unwrap();
    // Pages of entries cached before the punch are updated too.
    let mut bytes = filled(&sums, &data, 3000 * BLOCK as usize + 100, 1);
    assert_eq!(sums.verify(0, &bytes).unwrap(), None);
    // Zeros over 10..2990 + 50 (blocks 11..2990 whole), as a punch does.
    let (start, end) = (10 * BLOCK + 50, 2990 * BLOCK);
    let t = sums
        .begin_write(data.as_fd(), 10 * BLOCK..2990 * BLOCK)
        .unwrap();
    bytes[start as usize..end as usize].fill(0);
    data.write_all_at(&bytes[start as usize..end as usize], start)
        .unwrap();
    t.zeroed(11..2990).unwrap();
    assert_eq!(sums.verify(0, &bytes).unwrap(), None);
    // Blocks named whole that are not are caught: the test can fail.
    let t = sums.begin_write(data.as_fd(), 0..2 * BLOCK).unwrap();
    t.zeroed(0..2).unwrap();
    assert_eq!(sums.verify(0, &bytes).unwrap().unwrap().block, 0);
    // Blocks past the end are left alone (the store has no entries there).
    let t = sums
        .begin_write(data.as_fd(), 2999 * BLOCK..4000 * BLOCK)
        .unwrap();
    t.zeroed(3001..4000).unwrap();
    let len = std::fs::metadata(dir.path().join("integrity").join(key(30).relative_path()))
        .unwrap()
        .len();
    assert!(len <= HEADER_LEN + 4 * 3001, "{len}");
}

#[test]
fn copied_checksums_come_from_the_source_and_edges_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("integrity"), 4, Order::Overlapped).unwrap();
    let other = Store::open(&dir.path().join("other"), 4, Order::Overlapped).unwrap();
    let src = tempfile::tempfile().unwrap();
    let dst = tempfile::tempfile().unwrap();
    let src_sums = store.open_file(key(31), src.as_fd()).unwrap();
    let dst_sums = store.open_file(key(32), dst.as_fd()).unwrap();
    let elsewhere = other.open_file(key(33), src.as_fd()).unwrap();
    assert!(dst_sums.can_copy_sums_from(&src_sums));
    assert!(dst_sums.can_copy_sums_from(&dst_sums));
    assert!(!dst_sums.can_copy_sums_from(&elsewhere));
    let from = filled(&src_sums, &src, 20 * BLOCK as usize, 2);
    let mut to = filled(&dst_sums, &dst, 10 * BLOCK as usize, 3);
    // Bytes 5 * 4096 + 7 .. 14 * 4096 + 7 of src to 1 * 4096 + 7 ..: dst
    // blocks 2..10 whole (src blocks 6..14), blocks 1 and 10 partial.
    let (s, d, n) = (5 * BLOCK + 7, BLOCK + 7, 9 * BLOCK);
    let t = dst_sums
        .begin_write(dst.as_fd(), BLOCK..d + n + BLOCK)
        .unwrap();
    let piece = &from[s as usize..(s + n) as usize];
    dst.write_all_at(piece, d).unwrap();
    to.resize((d + n) as usize, 0);
    to[d as usize..].copy_from_slice(piece);
    t.copy_sums(&src_sums, 6, 2..10).unwrap();
    assert_eq!(dst_sums.verify(0, &to).unwrap(), None);
    // Copied, not read: a source block rotted before the copy shows in
    // the copy.
    let mut rotted = from[6 * BLOCK as usize..7 * BLOCK as usize].to_vec();
    rotted[9] ^= 0xff;
    dst.write_all_at(&rotted, 3 * BLOCK).unwrap();
    let t = dst_sums
        .begin_write(dst.as_fd(), 3 * BLOCK..4 * BLOCK)
        .unwrap();
    t.copy_sums(&src_sums, 6, 3..4).unwrap();
    to[3 * BLOCK as usize..4 * BLOCK as usize].copy_from_slice(&rotted);
    assert_eq!(dst_sums.verify(0, &to).unwrap().unwrap().block, 3);
}
