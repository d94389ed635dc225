//! Small UNSTABLE writes made on the caller's own thread
//! (`DataPlane::write_on_task`) on XFS and ext4 loop devices with
//! 4096-byte sectors: an overwrite of cached pages is written there, in
//! buffered mode and as direct mode's small buffered writes, and leaves
//! exactly the model's bytes, as do a misaligned write into a hole, one
//! beside another page-cache write of ours and extending ones; every write
//! that could wait long (a partial page with data on disk and not in the
//! page cache, a gap after an uncached last page, other I/O of ours that
//! may hold the inode lock through a device I/O) or is not for that path
//! (stable, large, empty, dontcache) comes back untouched, and the
//! blocking path then writes it right.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::os::fd::AsFd;

use common::*;
use dionfs_dataplane::testing::{hold_page_write, hold_range};
use dionfs_dataplane::{DataFile, DataPlane, Mode, Stable, WriteAttempt};

test_each_fs!(run_fs: xfs, ext4);

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 256) else {
        return;
    };
    for mode in [Mode::Buffered, Mode::Direct] {
        let plane = plane(mode, mode);
        let name = format!("f-{mode:?}");
        let file = open_data_file(&fs.path(&name));
        let mut model = pattern_bytes(0, 64 << 10, 1);
        // Through the page cache in either mode (small UNSTABLE writes):
        // the file's pages are cached afterwards.
        for (i, chunk) in model.chunks(16 << 10).enumerate() {
            write_at(&plane, &file, (i << 14) as u64, chunk, Stable::Unstable).unwrap();
        }
        let what = format!("{kind} {mode:?}");

        // Overwrites of cached pages, misaligned and aligned: written here.
        let before = plane.counters().snapshot();
        for (offset, len, salt) in [(100u64, 1000usize, 2u8), (4090, 20, 3), (8192, 4096, 4)] {
            let data = pattern_bytes(offset, len, salt);
            let done = match on_task(&plane, &file, offset, &data, Stable::Unstable) {
                WriteAttempt::Done(r) => r.unwrap(),
                WriteAttempt::Blocking(_) => {
                    panic!("{what}: overwrite {len} at {offset} handed off")
                }
            };
            assert_eq!(done.count, len, "{what}");
            model[offset as usize..offset as usize + len].copy_from_slice(&data);
        }
        let after = plane.counters().snapshot();
        assert_eq!(after.task_writes - before.task_writes, 3, "{what}");
        assert_eq!(
            after.task_write_handoffs, before.task_write_handoffs,
            "{what}"
        );
        assert_eq!(
            read_all(&plane, &file),
            model,
            "{what}: after the task writes"
        );
        if mode == Mode::Direct {
            assert_eq!(
                after.buffered_misaligned - before.buffered_misaligned,
                2,
                "{what}: misaligned small writes counted as direct mode counts them"
            );
        }

        // Beside another page-cache write of ours (IOR-hard's neighbours):
        // taken. Beside an I/O that may hold the inode lock through a
        // device I/O: handed back before anything (not even counted as a
        // hand-off), then written by the blocking path once it is done.
        let (offset, len) = (200u64, 300usize);
        let other = hold_page_write(&file, 32768..36864);
        let data = pattern_bytes(offset, len, 5);
        match on_task(&plane, &file, offset, &data, Stable::Unstable) {
            WriteAttempt::Done(r) => assert_eq!(r.unwrap().count, len, "{what}"),
            WriteAttempt::Blocking(_) => {
                panic!("{what}: write beside a page-cache write handed off")
            }
        }
        drop(other);
        model[offset as usize..offset as usize + len].copy_from_slice(&data);
        let other = hold_range(&file, 32768..36864);
        let data = pattern_bytes(offset, len, 6);
        let before = plane.counters().snapshot();
        let buf = match on_task(&plane, &file, offset, &data, Stable::Unstable) {
            WriteAttempt::Blocking(buf) => buf,
            WriteAttempt::Done(r) => panic!("{what}: write beside a direct I/O made: {r:?}"),
        };
        let after = plane.counters().snapshot();
        assert_eq!(
            after.task_write_handoffs, before.task_write_handoffs,
            "{what}"
        );
        drop(other);
        assert_eq!(
            plane.write(&file, buf, Stable::Unstable).unwrap().count,
            len
        );
        model[offset as usize..offset as usize + len].copy_from_slice(&data);
        assert_eq!(read_all(&plane, &file), model, "{what}: beside other I/O");

        // Extending writes: the size moves to exactly their end. Across
        // the end of the file, and past it after a gap that the kernel
        // zeroes within the cached last page: taken.
        for (offset, len, salt) in [(model.len() as u64 - 10, 100usize, 7u8), (70_000, 1000, 8)] {
            let data = pattern_bytes(offset, len, salt);
            match on_task(&plane, &file, offset, &data, Stable::Unstable) {
                WriteAttempt::Done(r) => assert_eq!(r.unwrap().count, len, "{what}"),
                WriteAttempt::Blocking(_) => {
                    panic!("{what}: extending write of {len} at {offset} handed off")
                }
            }
            model.resize(offset as usize + len, 0);
            model[offset as usize..].copy_from_slice(&data);
            assert_eq!(fs_size(&file), model.len() as u64, "{what}: extended");
            assert_eq!(read_all(&plane, &file), model, "{what}: extended");
        }

        // Handed back, untouched, and then written by the blocking path.
        let size = model.len() as u64;
        let uncached = |file: &DataFile| {
            rustix::fs::fsync(file.buffered_fd()).unwrap();
            dionfs_sys::io::fadvise_dontneed(file.buffered_fd().as_fd(), 0, 0).unwrap();
        };
        assert_ne!(size % 4096, 0, "{what}: the file ends inside a page");
        // (case, offset, len, stable, before it, whether tried on the task)
        let cases: [Case; 5] = [
            // The kernel would read the last page, on disk and not
            // cached, to zero its tail.
            (
                "gap after an uncached last page",
                size + 5000,
                100,
                Stable::Unstable,
                Some(uncached),
                true,
            ),
            // The partial page would have to be read from the device.
            (
                "partial page not cached",
                20_000,
                100,
                Stable::Unstable,
                Some(uncached),
                true,
            ),
            // Not tried at all.
            ("stable", 300, 100, Stable::FileSync, None, false),
            ("large", 0, (64 << 10) + 1, Stable::Unstable, None, false),
            ("empty", 5, 0, Stable::Unstable, None, false),
        ];
        for (case, offset, len, stable, prep, counted) in cases {
            if let Some(prep) = prep {
                prep(&file);
            }
            let data = pattern_bytes(offset, len, 9);
            let before = plane.counters().snapshot();
            let buf = match on_task(&plane, &file, offset, &data, stable) {
                WriteAttempt::Blocking(buf) => buf,
                WriteAttempt::Done(r) => panic!("{what}: {case} write made on the task: {r:?}"),
            };
            let after = plane.counters().snapshot();
            if prep.is_some() {
                // Asking whether the partial page is cached read nothing
                // into the cache (a `preadv2(RWF_NOWAIT)` probe would have
                // started readahead there).
                let (resident, _) =
                    dionfs_sys::io::resident_pages(file.buffered_fd(), model.len() as u64).unwrap();
                assert_eq!(resident, 0, "{what}: {case}: the probe cached pages");
            }
            assert_eq!(after.task_writes, before.task_writes, "{what}: {case}");
            assert_eq!(
                after.task_write_handoffs - before.task_write_handoffs,
                counted as u64,
                "{what}: {case}"
            );
            assert_eq!(
                buf.payload(),
                &data[..],
                "{what}: {case}: buffer handed back changed"
            );
            assert_eq!(
                plane.write(&file, buf, stable).unwrap().count,
                len,
                "{what}: {case}"
            );
            let end = offset as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[offset as usize..end].copy_from_slice(&data);
            assert_eq!(
                read_all(&plane, &file),
                model,
                "{what}: after the {case} write"
            );
            assert_eq!(fs_size(&file), model.len() as u64, "{what}: {case}");
        }

        // A whole page needs no read: taken even with nothing cached.
        uncached(&file);
        let data = pattern_bytes(4096, 4096, 11);
        match on_task(&plane, &file, 4096, &data, Stable::Unstable) {
            WriteAttempt::Done(r) => assert_eq!(r.unwrap().count, 4096, "{what}"),
            WriteAttempt::Blocking(_) => panic!("{what}: whole-page overwrite handed off"),
        }
        model[4096..8192].copy_from_slice(&data);
        assert_eq!(read_all(&plane, &file), model, "{what}: whole-page write");

        // Partial pages of a hole (no data on disk, none cached) are
        // zeroed by the kernel, not read: taken too. IOR-hard's records
        // meet these where a neighbour has yet to write its part of a page.
        let holey = open_data_file(&fs.path(&format!("holes-{mode:?}")));
        rustix::fs::ftruncate(holey.buffered_fd(), 1 << 20).unwrap();
        let (offset, len) = (300_000u64, 47_008usize);
        let data = pattern_bytes(offset, len, 12);
        match on_task(&plane, &holey, offset, &data, Stable::Unstable) {
            WriteAttempt::Done(r) => assert_eq!(r.unwrap().count, len, "{what}"),
            WriteAttempt::Blocking(_) => panic!("{what}: write into a hole handed off"),
        }
        let mut want = vec![0u8; 1 << 20];
        want[offset as usize..offset as usize + len].copy_from_slice(&data);
        assert_eq!(read_all(&plane, &holey), want, "{what}: write into a hole");
    }

    // Modes and files not for this path.
    let dontcache = plane(Mode::DontCache, Mode::DontCache);
    let file = open_data_file(&fs.path("dc"));
    write_at(&dontcache, &file, 0, &[1; 8192], Stable::Unstable).unwrap();
    assert!(matches!(
        on_task(&dontcache, &file, 10, &[2; 10], Stable::Unstable),
        WriteAttempt::Blocking(_)
    ));
}

/// A write that must come back from the task path.
type Case = (
    &'static str,
    u64,
    usize,
    Stable,
    Option<fn(&DataFile)>,
    bool,
);

/// `data` at `offset` through [`DataPlane::write_on_task`].
fn on_task(
    plane: &DataPlane,
    file: &DataFile,
    offset: u64,
    data: &[u8],
    stable: Stable,
) -> WriteAttempt {
    let pool = plane.write_pool();
    let mut wb = plane
        .write_buffer(file, pool.get_blocking().unwrap(), offset, data.len())
        .unwrap();
    wb.payload_mut().copy_from_slice(data);
    plane.write_on_task(file, wb, stable)
}
