//! Direct mode's page-cache writes (small or misaligned UNSTABLE ones)
//! read the partial first and last pages they need before writing, both at
//! once (`read_partial_pages`), on XFS and ext4 loop devices with
//! 4096-byte sectors: an uncached page with data on disk is read in and
//! counted; a cached page, a hole, an extending write and data written
//! since the last COMMIT (above `DataFile::cold_below`) are not; and the
//! file holds exactly the model's bytes afterwards.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use common::*;
use dionfs_dataplane::{DataFile, DataPlane, Mode, Stable};

test_each_fs!(run_fs: xfs, ext4);

/// One WRITE of `len` bytes of pattern `salt` at `offset` (blocking path),
/// kept in `model`: asserts it read `reads` edge pages first.
fn write_expecting(
    plane: &DataPlane,
    file: &DataFile,
    model: &mut Vec<u8>,
    (offset, len, salt): (u64, usize, u8),
    reads: u64,
    what: String,
) {
    let data = pattern_bytes(offset, len, salt);
    let before = plane.counters().snapshot().edge_page_reads;
    write_at(plane, file, offset, &data, Stable::Unstable).unwrap();
    let read = plane.counters().snapshot().edge_page_reads - before;
    assert_eq!(read, reads, "{what}");
    let end = offset as usize + len;
    if model.len() < end {
        model.resize(end, 0);
    }
    model[offset as usize..end].copy_from_slice(&data);
}

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 256) else {
        return;
    };
    let plane = plane(Mode::Direct, Mode::Direct);
    let file = open_data_file(&fs.path("f"));
    const SIZE: usize = 1 << 20;
    let mut model = pattern_bytes(0, SIZE, 1);
    // One aligned direct write: on disk, never in the page cache.
    write_at(&plane, &file, 0, &model, Stable::FileSync).unwrap();
    plane.commit(&file, 0, 0).unwrap();
    let what = |s: &str| format!("{kind}: {s}");
    let m = &mut model;

    // IOR-hard's record: both partial pages hold data and are not cached.
    write_expecting(
        &plane,
        &file,
        m,
        (5000, 47008, 2),
        2,
        what("uncached edges"),
    );
    // The same pages again: cached by the write before.
    write_expecting(&plane, &file, m, (5010, 46988, 3), 0, what("cached edges"));
    // Both ends inside one page: one read.
    write_expecting(&plane, &file, m, (200_800, 1000, 4), 1, what("one page"));
    // Extending the file: not looked for (the kernel reads the last page).
    let offset = SIZE as u64 - 100;
    write_expecting(&plane, &file, m, (offset, 8000, 5), 0, what("extending"));

    // A hole (the file made longer without data, then committed, which
    // drops the pages up to its end), written inside: nothing to read.
    let hole_start = m.len() as u64 + 65536;
    plane.truncate(&file, hole_start + 65536).unwrap();
    m.resize(hole_start as usize + 65536, 0);
    plane.commit(&file, 0, 0).unwrap();
    write_expecting(
        &plane,
        &file,
        m,
        (hole_start + 100, 9000, 6),
        0,
        what("hole"),
    );

    // Data written since the last COMMIT (an aligned direct write, so on
    // disk and not cached) is not looked for: the hint says it is new...
    let region = m.len() as u64;
    let data = pattern_bytes(region, 1 << 20, 7);
    write_at(&plane, &file, region, &data, Stable::FileSync).unwrap();
    m.extend_from_slice(&data);
    let over = region + 4096 * 10 + 300;
    write_expecting(
        &plane,
        &file,
        m,
        (over, 47008, 8),
        0,
        what("written since COMMIT"),
    );
    // ... and after a COMMIT it is cold like the rest.
    plane.commit(&file, 0, 0).unwrap();
    let over = region + 4096 * 100 + 300;
    write_expecting(&plane, &file, m, (over, 47008, 9), 2, what("after COMMIT"));

    plane.commit(&file, 0, 0).unwrap();
    assert_eq!(fs_size(&file), model.len() as u64, "{}", what("size"));
    assert!(
        read_all(&plane, &file) == model,
        "{}",
        what("bytes differ from the model")
    );
}
