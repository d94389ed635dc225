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
use dionfs_dataplane::{DataPlane, Mode, Stable};

#[test]
fn xfs() {
    run_fs("xfs");
}

#[test]
fn ext4() {
    run_fs("ext4");
}

/// Edge pages read by one WRITE of `data` at `offset` (blocking path).
fn reads_for(
    plane: &DataPlane,
    file: &dionfs_dataplane::DataFile,
    offset: u64,
    data: &[u8],
) -> u64 {
    let before = plane.counters().snapshot().edge_page_reads;
    write_at(plane, file, offset, data, Stable::Unstable).unwrap();
    plane.counters().snapshot().edge_page_reads - before
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

    // IOR-hard's record: both partial pages hold data and are not cached.
    let (offset, len) = (5000u64, 47008usize);
    let data = pattern_bytes(offset, len, 2);
    assert_eq!(
        reads_for(&plane, &file, offset, &data),
        2,
        "{}",
        what("uncached edges")
    );
    model[offset as usize..offset as usize + len].copy_from_slice(&data);

    // The same pages again: cached by the write before.
    let data = pattern_bytes(offset + 10, len - 20, 3);
    assert_eq!(
        reads_for(&plane, &file, offset + 10, &data),
        0,
        "{}",
        what("cached edges")
    );
    model[offset as usize + 10..offset as usize + len - 10].copy_from_slice(&data);

    // Both ends inside one page: one read.
    let data = pattern_bytes(200_800, 1000, 4);
    assert_eq!(
        reads_for(&plane, &file, 200_800, &data),
        1,
        "{}",
        what("one page")
    );
    model[200_800..201_800].copy_from_slice(&data);

    // Extending the file: not looked for (the kernel reads the last page).
    let offset = SIZE as u64 - 100;
    let data = pattern_bytes(offset, 8000, 5);
    assert_eq!(
        reads_for(&plane, &file, offset, &data),
        0,
        "{}",
        what("extending")
    );
    model.truncate(offset as usize);
    model.extend_from_slice(&data);

    // A hole (the file made longer without data, then committed, which
    // drops the pages up to its end), written inside: nothing to read.
    let hole_start = model.len() as u64 + 65536;
    plane.truncate(&file, hole_start + 65536).unwrap();
    model.resize(hole_start as usize + 65536, 0);
    plane.commit(&file, 0, 0).unwrap();
    let data = pattern_bytes(hole_start + 100, 9000, 6);
    assert_eq!(
        reads_for(&plane, &file, hole_start + 100, &data),
        0,
        "{}",
        what("hole")
    );
    model[hole_start as usize + 100..hole_start as usize + 9100].copy_from_slice(&data);

    // Data written since the last COMMIT (an aligned direct write, so on
    // disk and not cached) is not looked for: the hint says it is new...
    let region = model.len() as u64;
    let data = pattern_bytes(region, 1 << 20, 7);
    write_at(&plane, &file, region, &data, Stable::FileSync).unwrap();
    model.extend_from_slice(&data);
    let over = region + 4096 * 10 + 300;
    let data = pattern_bytes(over, 47008, 8);
    assert_eq!(
        reads_for(&plane, &file, over, &data),
        0,
        "{}",
        what("written since COMMIT")
    );
    model[over as usize..over as usize + 47008].copy_from_slice(&data);
    // ... and after a COMMIT it is cold like the rest.
    plane.commit(&file, 0, 0).unwrap();
    let over = region + 4096 * 100 + 300;
    let data = pattern_bytes(over, 47008, 9);
    assert_eq!(
        reads_for(&plane, &file, over, &data),
        2,
        "{}",
        what("after COMMIT")
    );
    model[over as usize..over as usize + 47008].copy_from_slice(&data);

    plane.commit(&file, 0, 0).unwrap();
    assert_eq!(fs_size(&file), model.len() as u64, "{}", what("size"));
    assert!(
        read_all(&plane, &file) == model,
        "{}",
        what("bytes differ from the model")
    );
}
