//! Direct READs and aligned direct WRITEs through io_uring
//! (`DataPlane::read_without_blocking`, `write_without_blocking`) on XFS
//! and ext4 loop devices with 4096-byte sectors: the bytes, sizes and eof
//! of misaligned reads at every boundary and past the end match the
//! blocking path and an in-memory model, while misaligned writers run;
//! aligned ring writes (overwriting, extending, stable) leave exactly the
//! model's bytes and size; calls that must not go to the ring come back
//! for the blocking path untouched, and a READ of a file with readahead
//! chunks that no chunk has any of is not one of them.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use dionfs_dataplane::{
    DataFile, DataPlane, IoRing, Mode, ReadAttempt, ReadData, SizeSeen, Stable, WriteAttempt,
    SMALL_IO,
};

test_each_fs!(run_fs: xfs, ext4);

async fn ring_read(
    plane: &DataPlane,
    ring: &Arc<IoRing>,
    file: &DataFile,
    offset: u64,
    count: u32,
) -> ReadData {
    ring_read_seen(plane, ring, file, offset, count, file.see_size().unwrap()).await
}

/// [`ring_read`] with the size the caller saw.
async fn ring_read_seen(
    plane: &DataPlane,
    ring: &Arc<IoRing>,
    file: &DataFile,
    offset: u64,
    count: u32,
    seen: SizeSeen,
) -> ReadData {
    let buf = plane.read_pool().get().await.unwrap();
    match plane
        .read_without_blocking(ring, file, buf, offset, count, seen)
        .await
    {
        ReadAttempt::Done(r) => r.unwrap_or_else(|e| panic!("ring read {count} at {offset}: {e}")),
        ReadAttempt::Blocking(_) => panic!("read {count} at {offset} was not served from the ring"),
    }
}

/// A READ given a size its caller saw before a truncate or an extending
/// write of ours does not use it: eof and data are the file's now. (Were
/// the stale size used, the READ after the truncate would not say eof and
/// the one after the write would stop at the old end.) The file is left
/// as it was.
fn sizes_seen_before_a_change(
    kind: &str,
    rt: &tokio::runtime::Runtime,
    ring: &Arc<IoRing>,
    plane: &DataPlane,
    file: &DataFile,
    model: &[u8],
) {
    let len = model.len() as u64;
    let read_seen =
        |offset: u64, seen| rt.block_on(ring_read_seen(plane, ring, file, offset, 8192, seen));
    let at = len - 6000;
    let seen = file.see_size().unwrap();
    file.truncate(len - 5000).unwrap();
    let got = read_seen(at, seen);
    assert_eq!(
        got.data(),
        &model[at as usize..(len - 5000) as usize],
        "{kind}: after a truncate"
    );
    assert!(got.eof(), "{kind}: eof after a truncate");

    let seen = file.see_size().unwrap();
    let tail = &model[(len - 5000) as usize..];
    write_at(plane, file, len - 5000, tail, Stable::FileSync).unwrap();
    let got = read_seen(at, seen);
    assert_eq!(
        got.data(),
        &model[at as usize..],
        "{kind}: after an extending write"
    );
    assert!(got.eof(), "{kind}: eof after an extending write");

    // Nothing changed since: the size seen is used as it is.
    let got = read_seen(at, file.see_size().unwrap());
    assert_eq!(got.data(), &model[at as usize..], "{kind}: unchanged");
}

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 256) else {
        return;
    };
    let rt = runtime();
    let ring = ring(&rt);
    let plane = Arc::new(plane(Mode::Direct, Mode::Direct));
    let file = Arc::new(open_data_file(&fs.path("f")));
    if !file.is_direct_capable() {
        println!("skipped: {kind} files do no direct I/O here");
        return;
    }
    // A file that does not end on a block boundary.
    let len = (3 << 20) + 1234;
    let model = pattern_bytes(0, len, 3);
    for (i, chunk) in model.chunks(1 << 20).enumerate() {
        write_at(&plane, &file, (i << 20) as u64, chunk, Stable::FileSync).unwrap();
    }
    let a = 4096u64;
    let len = len as u64;
    let cases = [
        (0, 1),
        (a - 1, 2),
        (a, a as u32),
        (a + 1, 3 * a as u32),
        (12345, 47008),
        (len - 1, 10),
        (len - 5000, 10_000),
        (len, 10),
        (len + a + 5, 10),
        (0, 1 << 20),
        (a / 2, 0),
    ];
    let before = plane.counters().snapshot().ring_reads;
    for (off, count) in cases {
        let got = rt.block_on(ring_read(&plane, &ring, &file, off, count));
        let blocking = read_at(&plane, &file, off, count).unwrap();
        let end = (off + count as u64).min(len).max(off);
        let want = if off < len {
            &model[off as usize..end as usize]
        } else {
            &[][..]
        };
        assert_eq!(got.data(), want, "{kind}: ring read {count} at {off}");
        assert_eq!(
            got.eof(),
            end >= len,
            "{kind}: eof of read {count} at {off}"
        );
        assert_eq!(
            got.data(),
            blocking.data(),
            "{kind}: ring vs blocking at {off}"
        );
        assert_eq!(
            got.eof(),
            blocking.eof(),
            "{kind}: ring vs blocking eof at {off}"
        );
    }
    assert_eq!(
        plane.counters().snapshot().ring_reads - before,
        cases.len() as u64,
        "{kind}: every case read through the ring"
    );
    reads_beside_chunks(kind, &rt, &ring, &plane, &file, &model);
    sizes_seen_before_a_change(kind, &rt, &ring, &plane, &file, &model);

    // Readers on the ring while misaligned writers rewrite records of the
    // file: every record read is either wholly old or wholly new (the
    // range lock), and the file ends as the writers left it.
    let record = 47008usize;
    let records = len as usize / record;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (plane, file) = (plane.clone(), file.clone());
            std::thread::spawn(move || {
                for i in (w..records).step_by(2) {
                    let off = (i * record) as u64;
                    let data = pattern_bytes(off, record, 9);
                    write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (plane, file, ring, stop) =
                (plane.clone(), file.clone(), ring.clone(), stop.clone());
            rt.spawn(async move {
                let mut n = 0u64;
                let mut fell_back = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 50 {
                    let i = ((n * 7 + r) as usize) % records;
                    let off = (i * record) as u64;
                    let buf = plane.read_pool().get().await.unwrap();
                    let got = match plane
                        .read_without_blocking(
                            &ring,
                            &file,
                            buf,
                            off,
                            record as u32,
                            file.see_size().unwrap(),
                        )
                        .await
                    {
                        ReadAttempt::Done(got) => got.unwrap(),
                        ReadAttempt::Blocking(buf) => {
                            fell_back += 1;
                            let (plane, file) = (plane.clone(), file.clone());
                            tokio::task::spawn_blocking(move || {
                                plane.read(&file, buf, off, record as u32).unwrap()
                            })
                            .await
                            .unwrap()
                        }
                    };
                    let old = pattern_bytes(off, record, 3);
                    let new = pattern_bytes(off, record, 9);
                    assert!(
                        got.data() == &old[..] || got.data() == &new[..],
                        "record {i} read half written"
                    );
                    n += 1;
                }
                (n, fell_back)
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (n, fell_back) = rt.block_on(r).unwrap();
        println!("{kind}: reader: {n} records, {fell_back} on the blocking path");
    }
    let mut want = model.clone();
    for i in 0..records {
        let off = i * record;
        want[off..off + record].copy_from_slice(&pattern_bytes(off as u64, record, 9));
    }
    assert_eq!(
        read_all(&plane, &file),
        want,
        "{kind}: file after the writers"
    );

    ring_writes(kind, &rt, &ring, &plane, &fs);
    for order in [
        dionfs_integrity::Order::Arrival,
        dionfs_integrity::Order::Overlapped,
    ] {
        ring_writes_with_checksums(kind, order, &rt, &ring, &plane, &fs);
    }

    // Not for the ring: a cached read mode.
    let buffered = plane_with(Mode::Buffered);
    let buf = buffered.read_pool().get_blocking().unwrap();
    match rt.block_on(buffered.read_without_blocking(
        &ring,
        &file,
        buf,
        0,
        4096,
        file.see_size().unwrap(),
    )) {
        ReadAttempt::Blocking(_) => {}
        ReadAttempt::Done(_) => panic!("{kind}: a buffered read went to the ring"),
    }
}

/// A file with readahead chunks (a stream of 1 MiB READs prefetched its
/// third MiB): a READ that no chunk has any of is still read through the
/// ring, on the task, not handed to a blocking thread (and, the one
/// client having moved, the stream's chunk is dropped).
fn reads_beside_chunks(
    kind: &str,
    rt: &tokio::runtime::Runtime,
    ring: &Arc<IoRing>,
    plane: &DataPlane,
    file: &DataFile,
    model: &[u8],
) {
    for i in 0..2u64 {
        let mut data = read_at(plane, file, i << 20, 1 << 20).unwrap();
        for p in data.take_prefetch() {
            p.run(file);
        }
    }
    let before = plane.counters().snapshot();
    assert_eq!(before.readahead_bytes, 1 << 20, "{kind}: {before:?}");
    let got = rt.block_on(ring_read(plane, ring, file, 4096, 4096));
    assert_eq!(
        got.data(),
        &model[4096..8192],
        "{kind}: READ beside the chunk"
    );
    let after = plane.counters().snapshot();
    assert_eq!(after.ring_reads, before.ring_reads + 1, "{kind}: {after:?}");
    assert_eq!(
        after.readahead_discards,
        before.readahead_discards + 1,
        "{kind}: {after:?}"
    );
}

fn plane_with(read_mode: Mode) -> DataPlane {
    plane(read_mode, Mode::Direct)
}

/// Aligned WRITEs through the ring, as the server's own identity (a
/// personality registered on this thread), against a model: overwrites,
/// extending writes past EOF (the size becomes exactly their end) and
/// stable ones; a misaligned or empty WRITE is handed back, and so is a
/// small UNSTABLE one (it goes whole through the page cache, on a blocking
/// thread).
fn ring_writes(
    kind: &str,
    rt: &tokio::runtime::Runtime,
    ring: &Arc<IoRing>,
    plane: &Arc<DataPlane>,
    fs: &LoopFs,
) {
    let file = open_data_file(&fs.path("w"));
    let personality = ring.register_personality().unwrap();
    let mut model = Vec::new();
    let before = plane.counters().snapshot().ring_writes;
    let mut rng = Rng::new(5);
    let writes = 40;
    let mut blocking = 0;
    for i in 0..writes {
        let len = 4096 * (1 + rng.below(64) as usize);
        let off = 4096 * rng.below(if i % 4 == 0 { 2048 } else { 512 });
        let data = pattern_bytes(off, len, i as u8 + 1);
        let stable = [Stable::Unstable, Stable::DataSync, Stable::FileSync][i % 3];
        let mut wb = plane
            .write_buffer(&file, plane.write_pool().get_blocking().unwrap(), off, len)
            .unwrap();
        wb.payload_mut().copy_from_slice(&data);
        match rt.block_on(plane.write_without_blocking(ring, &file, wb, stable, personality)) {
            WriteAttempt::Done(done) => {
                let done =
                    done.unwrap_or_else(|e| panic!("{kind}: ring write {len} at {off}: {e}"));
                assert_eq!((done.count, done.committed), (len, stable));
            }
            WriteAttempt::Blocking(wb) if stable == Stable::Unstable && len <= SMALL_IO => {
                blocking += 1;
                let done = plane.write(&file, wb, stable).unwrap();
                assert_eq!(done.count, len);
            }
            WriteAttempt::Blocking(_) => {
                panic!("{kind}: aligned write {len} at {off} not on the ring")
            }
        }
        let end = off as usize + len;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[off as usize..end].copy_from_slice(&data);
        assert_eq!(
            file.size().unwrap(),
            model.len() as u64,
            "{kind}: size after write {i}"
        );
        assert_eq!(
            fs_size(&file),
            model.len() as u64,
            "{kind}: kernel size after write {i}"
        );
    }
    assert_eq!(
        plane.counters().snapshot().ring_writes - before,
        (writes - blocking) as u64
    );
    assert!(blocking > 0 && blocking < writes, "{blocking} of {writes}");
    assert_eq!(
        read_all(plane, &file),
        model,
        "{kind}: file after ring writes"
    );
    for (off, len) in [(100, 4096), (4096, 100), (0, 0)] {
        let wb = plane
            .write_buffer(&file, plane.write_pool().get_blocking().unwrap(), off, len)
            .unwrap();
        match rt.block_on(plane.write_without_blocking(
            ring,
            &file,
            wb,
            Stable::Unstable,
            personality,
        )) {
            WriteAttempt::Blocking(wb) => assert_eq!((wb.offset(), wb.len()), (off, len)),
            WriteAttempt::Done(_) => panic!("{kind}: write {len} at {off} went to the ring"),
        }
    }
    ring.unregister_personality(personality).unwrap();
}

/// Aligned WRITEs through the ring to a file with checksums
/// (`integrity = "crc32c"`): a region not yet in the intent log goes to the
/// blocking path (logging it durably blocks); then ring writes store the
/// checksums they computed while the kernel wrote, so every block reads
/// back verified, and a block rotted on disk afterwards is caught, which it
/// would not be if the ring path had merely distrusted the file's
/// checksums. A COMMIT right after them keeps the regions dirty, so the
/// next write still goes through the ring. With `Order::Arrival` the
/// payloads arrive in pieces and are checksummed as they do.
fn ring_writes_with_checksums(
    kind: &str,
    order: dionfs_integrity::Order,
    rt: &tokio::runtime::Runtime,
    ring: &Arc<IoRing>,
    plane: &Arc<DataPlane>,
    fs: &LoopFs,
) {
    use dionfs_dataplane::DataError;
    use dionfs_integrity::{FileKey, Store};
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileExt;

    let kind = &format!("{kind} {order:?}");
    // The plane's counters count every run of this function.
    let errors_before = plane.counters().snapshot().integrity_errors;
    let store = Store::open(&fs.path(&format!("integrity-{order:?}")), 16, order).unwrap();
    let path = fs.path(&format!("sums-{order:?}"));
    let file = open_data_file(&path);
    let key = FileKey {
        fs_id: 9,
        handle_type: 1,
        handle: vec![9; 8],
    };
    let sums = store.open_file(key, file.buffered_fd()).unwrap();
    let file = file.with_integrity(sums);
    let personality = ring.register_personality().unwrap();
    let ring_write = |off: u64, data: &[u8]| {
        let mut wb = plane
            .write_buffer(
                &file,
                plane.write_pool().get_blocking().unwrap(),
                off,
                data.len(),
            )
            .unwrap();
        let mut received = 0;
        for piece in data.chunks(100_000) {
            wb.payload_mut()[received..received + piece.len()].copy_from_slice(piece);
            received += piece.len();
            wb.arrived(received);
        }
        match rt.block_on(plane.write_without_blocking(
            ring,
            &file,
            wb,
            Stable::Unstable,
            personality,
        )) {
            WriteAttempt::Done(done) => {
                done.unwrap_or_else(|e| panic!("{kind}: ring write at {off}: {e}"));
                true
            }
            WriteAttempt::Blocking(wb) => {
                plane.write(&file, wb, Stable::Unstable).unwrap();
                false
            }
        }
    };
    let mut model = pattern_bytes(0, 4 << 20, 21);
    for (i, chunk) in model.chunks(1 << 20).enumerate() {
        assert!(
            !ring_write((i << 20) as u64, chunk) || i > 0,
            "{kind}: the first write of a region must log it durably first, on the blocking path"
        );
    }
    let before = plane.counters().snapshot().ring_writes;
    let mut rng = Rng::new(11);
    for i in 0..30u8 {
        // Longer than SMALL_IO: an UNSTABLE write of at most that goes
        // through the page cache instead.
        let off = 4096 * rng.below(980);
        let len = SMALL_IO + 4096 * (1 + rng.below(16) as usize);
        let data = pattern_bytes(off, len, 40 + i);
        assert!(ring_write(off, &data), "{kind}: write {i} not on the ring");
        model[off as usize..off as usize + len].copy_from_slice(&data);
    }
    assert_eq!(plane.counters().snapshot().ring_writes - before, 30);
    assert_eq!(
        read_all(plane, &file),
        model,
        "{kind}: file after ring writes"
    );
    assert_eq!(
        plane.counters().snapshot().integrity_errors,
        errors_before,
        "{kind}"
    );

    // Rot one block under the server (restoring mtime: the checksums stay
    // trusted): the ring-stored checksum catches it.
    let rot_at = 4096 * 700 + 17;
    let raw = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mtime = raw.metadata().unwrap().modified().unwrap();
    raw.write_all_at(&[model[rot_at] ^ 0x33], rot_at as u64)
        .unwrap();
    raw.set_modified(mtime).unwrap();
    raw.sync_all().unwrap();
    dionfs_sys::io::fadvise_dontneed(raw.as_fd(), 0, 0).unwrap();
    match read_at(plane, &file, 4096 * 700, 4096) {
        Err(DataError::Corrupt { offset, .. }) => assert_eq!(offset, 4096 * 700),
        other => panic!("{kind}: rotted block read as {:?}", other.map(|r| r.len())),
    }

    // A COMMIT right after the writes keeps their regions dirty: the next
    // write still needs no log write.
    plane.commit(&file, 0, 0).unwrap();
    assert!(
        ring_write(0, &model[..2 * SMALL_IO]),
        "{kind}: write after COMMIT not on the ring"
    );
    ring.unregister_personality(personality).unwrap();
}
