//! Helpers for the data plane's tests, its unit tests and its integration
//! tests (`tests/`) alike: the one place a test sets up a plane or opens a
//! file the way the server does. Compiled for this crate's unit tests, and
//! with the `testing` feature (which the integration tests turn on) for
//! the others; never part of the server.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::{DataConfig, DataFile, DataPlane, Mode, LARGE_READ_DEPTH};

/// A data plane for a test: `read_mode` and `write_mode`, transfers of up
/// to `max_transfer` bytes, `buffers` read and as many write buffers, 8
/// small ones of each.
pub fn plane(read_mode: Mode, write_mode: Mode, max_transfer: usize, buffers: usize) -> DataPlane {
    DataPlane::new(DataConfig {
        read_mode,
        write_mode,
        max_transfer,
        read_buffers: buffers,
        write_buffers: buffers,
        small_buffers: 8,
        large_read_depth: LARGE_READ_DEPTH,
    })
    .expect("a data plane of the test's settings")
}

/// Opens (creating) `path` the way the filesystem backend does: a buffered
/// `O_RDWR` descriptor and, if the filesystem accepts it, an `O_DIRECT` one.
pub fn open_data_file(path: &Path) -> DataFile {
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open buffered");
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok();
    DataFile::new(buffered.into(), direct.map(Into::into)).expect("DataFile::new")
}

/// A range of a file held locked by a test, standing for an I/O of the
/// plane's in flight on it ([`hold_range`], [`hold_page_write`]).
pub struct Held<'f> {
    _range: crate::range_lock::RangeGuard<'f>,
    _page_write: Option<crate::file::PageWriting<'f>>,
}

/// Locks `range` of `file` exclusively, as an I/O of the plane's that may
/// hold the inode lock through a device I/O (a direct write, a read).
pub fn hold_range(file: &DataFile, range: std::ops::Range<u64>) -> Held<'_> {
    Held {
        _range: file
            .locks
            .lock(range, crate::range_lock::LockKind::Exclusive),
        _page_write: None,
    }
}

/// Locks `range` of `file` exclusively as a page-cache write that reads
/// nothing from the device (`DataFile::page_writing`) would.
pub fn hold_page_write(file: &DataFile, range: std::ops::Range<u64>) -> Held<'_> {
    let mut held = hold_range(file, range);
    held._page_write = Some(file.page_writing());
    held
}
