//! Asking the page cache about a file without waiting for it: whether a
//! write of part of a page makes the kernel read the page from the device,
//! and reads that do not queue on the inode's lock. For the page-cache
//! writes of direct mode (`write.rs`) and the checksum hooks, which read
//! the rest of a write's partial blocks (`checksums.rs`).

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

use dionfs_sys::io::{cached_pages, preadv2, RwFlags};

use crate::file::DataFile;

/// Whether a write of part of the page at `start` makes the kernel read it
/// from the device: it is not in the page cache (`cachestat(2)`, a pure
/// lookup) and holds data on disk ([`holds_no_data`]). An error: the
/// kernel has no `cachestat`.
pub(crate) fn needs_device_read(file: &DataFile, start: u64, page: u64) -> io::Result<bool> {
    Ok(cached_pages(file.buffered_fd(), start, page)? == 0
        && !holds_no_data(file, start..start + page))
}

/// Whether `file` holds no data on disk or in the page cache in `range`
/// (a hole, or past its end): `lseek(SEEK_DATA)` from its start finds the
/// next data at or after its end, or none. A write of part of such a page
/// has the rest zeroed by the kernel, not read. Errors say no.
fn holds_no_data(file: &DataFile, range: Range<u64>) -> bool {
    match rustix::fs::seek(file.buffered_fd(), rustix::fs::SeekFrom::Data(range.start)) {
        Ok(next) => next >= range.end,
        Err(rustix::io::Errno::NXIO) => true,
        Err(_) => false,
    }
}

/// Reads `dst` at `offset` of `file` from the page cache without queueing
/// on the inode's lock: `preadv2(RWF_NOWAIT)`, yielding the CPU between
/// tries while it says `EAGAIN` (a writer holds the lock, or the page is
/// still being read in), for at most `wait`. Returns the bytes read:
/// fewer than asked at the end of the file or where the rest is not
/// cached (the kernel stops there without waiting); 0 when the time is up, when
/// `give_up()`, asked at the first `EAGAIN`, says so, or on any other
/// error (a filesystem that refuses the flag). The caller reads what is
/// missing with a blocking read. The bytes are the same either way.
///
/// Why: on XFS a buffered write holds the inode's lock (IOLOCK)
/// exclusively while it copies, and a buffered read holds it shared for
/// as long as it waits for its page, a device read included. A blocking
/// read that finds a writer sleeps until woken, and writers that find
/// readers holding the lock or queued for it sleep too instead of
/// spinning for it, so the writes of the file end up sleeping and waking
/// one another: `perf record` of IOR-hard's 47008-byte records, a quarter
/// (with checksums, which read the neighbours' bytes of each partial
/// block) to a third (rewriting an uncached file, which reads in the
/// partial pages) of the server's samples in context switches. Not
/// queueing leaves the writers to take turns on the lock as they do when
/// nothing reads.
pub(crate) fn read_without_queueing(
    file: &DataFile,
    dst: &mut [u8],
    offset: u64,
    wait: Duration,
    give_up: impl FnOnce() -> bool,
) -> usize {
    let began = Instant::now();
    let mut give_up = Some(give_up);
    loop {
        match preadv2(file.buffered_fd(), dst, offset, RwFlags::NOWAIT) {
            Ok(n) => return n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if give_up.take().is_some_and(|f| f()) || began.elapsed() >= wait {
                    return 0;
                }
                std::thread::yield_now();
            }
            Err(_) => return 0,
        }
    }
}
