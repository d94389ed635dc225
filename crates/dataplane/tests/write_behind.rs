//! Write-behind (`writebehind.rs`) on XFS and ext4 loop devices with
//! 4096-byte sectors: a stream of misaligned UNSTABLE WRITEs in direct
//! mode, which go through the page cache, has the writeback of everything
//! more than a lag behind its furthest write started before any COMMIT
//! (the kernel alone would leave it dirty for 30 s), leaves the last lag
//! alone, and starts again from the start after a truncate; the file holds
//! exactly the model's bytes after COMMIT.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::time::Duration;

use common::*;
use dionfs_dataplane::{DataFile, DataPlane, Mode, Stable, WRITE_BEHIND_LAG, WRITE_BEHIND_STEP};
use dionfs_sys::io::{page_cache_stat, PageCacheStat};
use dionfs_testfs::wait_until;

/// IOR-hard's record size: every record starts and ends inside a page.
const REC: usize = 47008;
/// Written per pass: well past a lag and several steps.
const TOTAL: u64 = 40 << 20;

test_each_fs!(run_fs: xfs, ext4);

/// Writes records of pattern `salt` from 0 to [`TOTAL`] into `file` and
/// `model`; returns the end of the last record.
fn write_pass(plane: &DataPlane, file: &DataFile, model: &mut Vec<u8>, salt: u8) -> u64 {
    let mut offset = 0u64;
    while offset < TOTAL {
        let data = pattern_bytes(offset, REC, salt);
        write_at(plane, file, offset, &data, Stable::Unstable).unwrap();
        let end = offset as usize + REC;
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
        offset += REC as u64;
    }
    offset
}

fn stat(file: &DataFile, range: std::ops::Range<u64>) -> PageCacheStat {
    page_cache_stat(file.buffered_fd(), range.start, range.end - range.start).unwrap()
}

/// Waits (up to 20 s) until no page of `range` is dirty or being written.
fn wait_written(file: &DataFile, range: std::ops::Range<u64>, what: &str) {
    wait_until(
        || {
            let st = stat(file, range.clone());
            st.dirty == 0 && st.writeback == 0
        },
        Duration::from_secs(20),
        &format!("{what}: {range:?} written back"),
    );
}

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 256) else {
        return;
    };
    let plane = plane(Mode::Direct, Mode::Direct);
    let file = open_data_file(&fs.path("f"));
    if page_cache_stat(file.buffered_fd(), 0, 0).is_err() {
        eprintln!("skipped: no cachestat(2) (Linux 6.5+) to see dirty pages with");
        return;
    }
    let mut model = Vec::new();
    let behind = || plane.counters().snapshot().write_behind_bytes;

    for (pass, salt) in [(1, 1u8), (2, 2)] {
        let what = format!("{kind}, pass {pass}");
        let before = behind();
        let end = write_pass(&plane, &file, &mut model, salt);
        // Handed over: up to a lag behind the end, give or take a step.
        let handed = behind() - before;
        let due = end - WRITE_BEHIND_LAG - WRITE_BEHIND_STEP;
        assert!(
            handed >= due,
            "{what}: {handed} bytes handed to write-behind, want at least {due}"
        );
        assert!(
            handed <= end - WRITE_BEHIND_LAG,
            "{what}: {handed} bytes handed over, more than up to the lag"
        );
        wait_written(&file, 0..due, &what);
        // The last lag, where other clients' records could still land, is
        // left to COMMIT.
        let tail = stat(&file, end - WRITE_BEHIND_LAG + 4096..end);
        assert!(tail.dirty > 0, "{what}: the last lag was written: {tail:?}");

        plane.commit(&file, 0, 0).unwrap();
        assert_eq!(fs_size(&file), model.len() as u64, "{what}: size");
        assert!(
            read_all(&plane, &file) == model,
            "{what}: bytes differ from the model"
        );
        // The second pass rewrites the file from the start, as a client's
        // O_TRUNC open would: write-behind must start from 0 again.
        plane.truncate(&file, 0).unwrap();
        model.clear();
    }
}
