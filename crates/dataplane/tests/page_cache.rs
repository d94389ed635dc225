//! The reason the data plane exists: direct mode keeps file data out of the
//! page cache, buffered mode does not. One 512 MiB file per mode on XFS
//! (4096-byte-sector loop device), written and read back through the data
//! plane in 1 MiB requests, then its page-cache residency measured with
//! mincore.
//!
//! Needs root; without it the test prints "skipped: ..." and passes.

mod common;

use common::*;
use dionfs_dataplane::{DataFile, DataPlane, Mode, Stable};
use dionfs_sys::io::resident_pages;

const FILE_SIZE: u64 = 512 << 20;
const CHUNK: usize = 1 << 20;

/// Fills `buf` with a cheap position-dependent pattern: each 8-byte word
/// holds its own file offset.
fn fill_words(buf: &mut [u8], offset: u64) {
    for (i, word) in buf.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&(offset + 8 * i as u64).to_le_bytes());
    }
}

/// Writes the file in 1 MiB requests, reads it back in 1 MiB requests
/// (spot-checking one word per request), and returns (resident, total)
/// pages.
fn write_and_read(plane: &DataPlane, file: &DataFile) -> (usize, usize) {
    let mut offset = 0;
    while offset < FILE_SIZE {
        let buf = plane.write_pool().get_blocking().unwrap();
        let mut wb = plane.write_buffer(file, buf, offset, CHUNK).unwrap();
        fill_words(wb.payload_mut(), offset);
        plane.write(file, wb, Stable::Unstable).unwrap();
        offset += CHUNK as u64;
    }
    plane.commit(file, 0, 0).unwrap();
    read_back(plane, file);
    assert_eq!(fs_size(file), FILE_SIZE);
    resident_pages(file.buffered_fd(), FILE_SIZE).unwrap()
}

/// Reads the file in 1 MiB requests, checking one word of each.
fn read_back(plane: &DataPlane, file: &DataFile) {
    let mut offset = 0;
    while offset < FILE_SIZE {
        let r = read_at(plane, file, offset, CHUNK as u32).unwrap();
        assert_eq!(r.len(), CHUNK);
        let probe = 8 * ((offset / CHUNK as u64) % (CHUNK as u64 / 8)) as usize;
        let word = u64::from_le_bytes(r.data()[probe..probe + 8].try_into().unwrap());
        assert_eq!(
            word,
            offset + probe as u64,
            "data at {}",
            offset + probe as u64
        );
        offset += CHUNK as u64;
    }
}

#[test]
fn direct_mode_bypasses_the_page_cache() {
    let Some(fs) = LoopFs::new("xfs", 2048) else {
        return;
    };
    for mode in [Mode::Direct, Mode::DontCache, Mode::Buffered] {
        let file = open_data_file(&fs.path(&format!("big-{mode:?}")));
        let plane = plane(mode, mode);
        let started = std::time::Instant::now();
        let (resident, total) = write_and_read(&plane, &file);
        let c = plane.snapshot();
        println!(
            "{mode:?}: {resident} of {total} pages resident after writing and reading \
             512 MiB ({:.1}s); dontcache fallbacks {}",
            started.elapsed().as_secs_f64(),
            c.dontcache_fallbacks
        );
        match mode {
            Mode::Direct => {
                assert!(
                    file.is_direct_capable(),
                    "XFS on a loop device does direct I/O"
                );
                assert_eq!(c.write.direct.bytes, FILE_SIZE);
                assert_eq!(c.read.direct.bytes, FILE_SIZE);
                assert!(
                    resident * 100 < total,
                    "direct: {resident}/{total} resident"
                );
            }
            Mode::DontCache if c.dontcache_fallbacks == 0 => {
                // Dropped behind the I/O; writeback may still hold a few.
                assert!(
                    resident * 10 < total,
                    "dontcache: {resident}/{total} resident"
                );
            }
            Mode::DontCache => println!("dontcache refused by XFS here; served buffered"),
            Mode::Buffered => {
                // Other processes on a shared machine may drop caches
                // (benchmarks do): if that happened, read once more.
                let resident = if resident * 2 > total {
                    resident
                } else {
                    read_back(&plane, &file);
                    resident_pages(file.buffered_fd(), FILE_SIZE).unwrap().0
                };
                assert!(
                    resident * 2 > total,
                    "buffered: {resident}/{total} resident"
                );
            }
        }
        // Free the space (and the cached pages) before the next mode.
        drop(file);
        std::fs::remove_file(fs.path(&format!("big-{mode:?}"))).unwrap();
    }
}

/// Small misaligned direct-mode writes go whole through the page cache
/// (larger ones only their partial edge blocks); COMMIT drops those pages
/// again once they are on disk. IOR-hard shape: 8 writers, 47008-byte
/// records interleaved into one file.
#[test]
fn misaligned_direct_writes_leave_no_pages_after_commit() {
    const RECORD: u64 = 47008;
    const WRITERS: u64 = 8;
    const PER_WRITER: u64 = 180;
    let Some(fs) = LoopFs::new("xfs", 512) else {
        return;
    };
    let file = std::sync::Arc::new(open_data_file(&fs.path("ior")));
    assert!(file.is_direct_capable());
    let plane = std::sync::Arc::new(plane(Mode::Direct, Mode::Direct));
    write_interleaved(&plane, &file, RECORD, WRITERS, PER_WRITER);
    let size = WRITERS * PER_WRITER * RECORD;
    assert_eq!(fs_size(&file), size);
    let (before, total) = resident_pages(file.buffered_fd(), size).unwrap();
    plane.commit(&file, 0, 0).unwrap();
    let (after, _) = resident_pages(file.buffered_fd(), size).unwrap();
    println!("misaligned direct: {before} of {total} pages cached before COMMIT, {after} after");
    // Every record has two partial edge blocks, which were cached.
    assert!(
        before as u64 >= WRITERS * PER_WRITER / 2,
        "edge pages go through the page cache: {before}/{total}"
    );
    assert!(after * 100 < total, "after COMMIT: {after}/{total} cached");
    // 47008-byte records are written whole through the page cache.
    assert!(plane.snapshot().buffered_misaligned >= WRITERS * PER_WRITER);
}

/// Small UNSTABLE direct-mode writes go through the page cache even when
/// aligned (IOR's 48 KiB records); COMMIT drops their pages. Stable ones
/// and large ones stay direct and leave nothing cached.
#[test]
fn small_unstable_direct_writes_leave_no_pages_after_commit() {
    const RECORD: u64 = 48 << 10;
    const RECORDS: u64 = 400;
    let Some(fs) = LoopFs::new("xfs", 512) else {
        return;
    };
    let plane = plane(Mode::Direct, Mode::Direct);
    let write = |file: &DataFile, offset: u64, len: usize, stable: Stable| {
        let buf = plane.write_pool().get_blocking().unwrap();
        let mut wb = plane.write_buffer(file, buf, offset, len).unwrap();
        fill_words(wb.payload_mut(), offset);
        plane.write(file, wb, stable).unwrap();
    };
    let size = RECORDS * RECORD;
    let file = open_data_file(&fs.path("aligned"));
    assert!(file.is_direct_capable());
    for k in 0..RECORDS {
        write(&file, k * RECORD, RECORD as usize, Stable::Unstable);
    }
    let (before, total) = resident_pages(file.buffered_fd(), size).unwrap();
    assert_eq!(plane.snapshot().write.direct.bytes, size);
    assert_eq!(plane.snapshot().buffered_misaligned, 0, "all aligned");
    plane.commit(&file, 0, 0).unwrap();
    let (after, _) = resident_pages(file.buffered_fd(), size).unwrap();
    println!(
        "small aligned unstable: {before} of {total} pages cached before COMMIT, {after} after"
    );
    assert!(
        before * 2 > total,
        "went through the page cache: {before}/{total}"
    );
    assert!(after * 100 < total, "after COMMIT: {after}/{total} cached");
    let r = read_at(&plane, &file, 7 * RECORD, 4096).unwrap();
    assert_eq!(&r.data()[..8], &(7 * RECORD).to_le_bytes());

    // Stable, or large: direct, nothing cached at any point.
    let other = open_data_file(&fs.path("direct"));
    for k in 0..RECORDS / 4 {
        write(&other, k * RECORD, RECORD as usize, Stable::DataSync);
    }
    write(&other, size, 1 << 20, Stable::Unstable);
    let (cached, total) = resident_pages(other.buffered_fd(), size + (1 << 20)).unwrap();
    assert!(
        cached * 100 < total,
        "stable or large writes: {cached}/{total} cached"
    );
}
