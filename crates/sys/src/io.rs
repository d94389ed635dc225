//! File I/O system calls the data plane needs beyond `std`: positioned
//! reads and writes with per-call `RWF_*` flags, the direct-I/O alignment a
//! file reports through `statx`, page-cache residency (`mincore`) and
//! `fadvise`.
//!
//! Everything `rustix` wraps safely is used through `rustix`; only the
//! residency probes (`mmap` + `mincore`, `cachestat`), `faccessat2` and
//! ignoring `SIGXFSZ` need `unsafe`.

use std::io;
use std::num::NonZeroU64;
use std::ops::BitOr;
use std::os::fd::{AsFd, AsRawFd};

use rustix::fs::{AtFlags, StatxFlags};
use rustix::io::ReadWriteFlags;

/// `RWF_DSYNC`: this write is durable as if the file were opened `O_DSYNC`.
const RWF_DSYNC: u32 = 0x2;
/// `RWF_SYNC`: this write is durable as if the file were opened `O_SYNC`.
const RWF_SYNC: u32 = 0x4;
/// `RWF_NOWAIT`: fail with `EAGAIN` instead of waiting (for a page to be
/// read, a lock, dirty-page throttling, an allocation transaction).
const RWF_NOWAIT: u32 = 0x8;
/// `RWF_DONTCACHE` (Linux 6.14+): buffered I/O whose pages are dropped from
/// the page cache once the I/O (and writeback) is done. Filesystems that do
/// not support it fail the call with `EOPNOTSUPP`; so do older kernels, which
/// reject every unknown `RWF_*` bit that way.
const RWF_DONTCACHE: u32 = 0x80;

/// `STATX_DIOALIGN` (Linux 6.1+): ask for `stx_dio_mem_align` and
/// `stx_dio_offset_align`.
const STATX_DIOALIGN: u32 = 0x2000;
/// `STATX_DIO_READ_ALIGN` (Linux 6.14+): ask for
/// `stx_dio_read_offset_align`.
const STATX_DIO_READ_ALIGN: u32 = 0x20000;

/// Per-call flags for [`preadv2`] and [`pwritev2`] (`RWF_*` in
/// preadv2(2)). Combine with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RwFlags(u32);

impl RwFlags {
    /// No flags: plain `pread`/`pwrite` semantics.
    pub const NONE: Self = Self(0);
    /// `RWF_DSYNC`: the written data (and the metadata needed to read it
    /// back) is durable when the call returns.
    pub const DSYNC: Self = Self(RWF_DSYNC);
    /// `RWF_SYNC`: data and all metadata durable when the call returns.
    pub const SYNC: Self = Self(RWF_SYNC);
    /// `RWF_DONTCACHE`: drop the pages from the page cache after the I/O.
    pub const DONTCACHE: Self = Self(RWF_DONTCACHE);
    /// `RWF_NOWAIT`: `EAGAIN` rather than block. Buffered writes take it
    /// where the filesystem supports non-blocking buffered writes (XFS,
    /// btrfs and ext4 on current kernels; `EOPNOTSUPP` or `EINVAL`
    /// elsewhere); may write part of the buffer.
    pub const NOWAIT: Self = Self(RWF_NOWAIT);

    /// The raw `RWF_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag in `other` is set in `self`.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    fn to_rustix(self) -> ReadWriteFlags {
        ReadWriteFlags::from_bits_retain(self.0)
    }
}

impl BitOr for RwFlags {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// `preadv2(fd, [buf], offset, flags)`: reads up to `buf.len()` bytes at
/// `offset`. Returns the number of bytes read; fewer than asked means end of
/// file was reached (for regular files). Retries on `EINTR`.
pub fn preadv2<Fd: AsFd>(fd: Fd, buf: &mut [u8], offset: u64, flags: RwFlags) -> io::Result<usize> {
    loop {
        let mut iov = [io::IoSliceMut::new(&mut *buf)];
        match rustix::io::preadv2(&fd, &mut iov, offset, flags.to_rustix()) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// `pwritev2(fd, [buf], offset, flags)`: writes `buf` at `offset`. Returns
/// the number of bytes written, which the caller must compare with
/// `buf.len()` (a short write is possible, e.g. on `ENOSPC` mid-way).
/// Retries on `EINTR`.
pub fn pwritev2<Fd: AsFd>(fd: Fd, buf: &[u8], offset: u64, flags: RwFlags) -> io::Result<usize> {
    loop {
        let iov = [io::IoSlice::new(buf)];
        match rustix::io::pwritev2(&fd, &iov, offset, flags.to_rustix()) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// [`pwritev2`] until all of `buf` is written. A write the filesystem can
/// take only part of (it ran out of space or quota part-way: the first
/// bytes went into blocks the file already had) returns a short count; the
/// rest is written again, which fails with the reason (`ENOSPC`, `EDQUOT`,
/// `EFBIG`), or succeeds if space was freed meanwhile. A rest is written
/// only if it starts at a multiple of `align` (a direct write's rest must
/// be aligned; 1 for a buffered one). `partly` is called once if the
/// kernel took only part of it (for the caller's count of such writes).
/// Returns the bytes written: `buf.len()`, or fewer only if a write wrote
/// nothing or left a rest not so aligned.
pub fn pwrite_all<Fd: AsFd>(
    fd: Fd,
    buf: &[u8],
    offset: u64,
    flags: RwFlags,
    align: usize,
    mut partly: impl FnMut(),
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        let n = pwritev2(&fd, &buf[done..], offset + done as u64, flags)?;
        if done == 0 && n > 0 && n < buf.len() {
            partly();
        }
        done += n;
        if n == 0 || !done.is_multiple_of(align.max(1)) {
            break;
        }
    }
    Ok(done)
}

/// Makes a write past the process's file-size limit (`RLIMIT_FSIZE`,
/// `ulimit -f`, systemd's `LimitFSIZE=`) fail with `EFBIG` instead of
/// killing the process: the kernel sends `SIGXFSZ` with that error, and its
/// default action ends the process (with a core dump). A server whose
/// limit is finite would otherwise die at the first client WRITE past it.
pub fn ignore_file_size_signal() -> io::Result<()> {
    // SAFETY: setting SIGXFSZ's disposition to SIG_IGN installs no handler
    // (no code runs on delivery), touches no memory of ours, and is
    // process-wide and idempotent, so racing threads cannot be harmed.
    let previous = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    if previous == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The process's file-size limit in bytes (`RLIMIT_FSIZE`, soft), if it
/// has one.
pub fn file_size_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Fsize).current
}

/// Direct-I/O alignment restrictions of one file, as `statx` reports them.
///
/// A value of 0 means "not reported"; see [`DioAlign::supports_direct`] and
/// [`DioAlign::read_align`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DioAlign {
    /// `stx_dio_mem_align`: required alignment of user buffers, in bytes.
    pub mem_align: u32,
    /// `stx_dio_offset_align`: required alignment of file offsets and
    /// lengths, in bytes (for writes, and for reads unless
    /// `read_offset_align` says otherwise).
    pub offset_align: u32,
    /// `stx_dio_read_offset_align` (Linux 6.14+): required alignment of file
    /// offsets and lengths for reads; 0 means "same as `offset_align`". It can
    /// be smaller than `offset_align`, e.g. on XFS files that need
    /// copy-on-write.
    pub read_offset_align: u32,
}

impl std::fmt::Display for DioAlign {
    /// For log lines: `memory 4, write 4096, read 512` (alignments in
    /// bytes, 0 where the kernel reported none), or `none` where it
    /// reported no direct I/O at all.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if *self == DioAlign::default() {
            return f.write_str("none");
        }
        write!(
            f,
            "memory {}, write {}, read {}",
            self.mem_align,
            self.write_align(),
            self.read_align()
        )
    }
}

impl DioAlign {
    /// Whether the file supports direct I/O at all. statx(2): "If direct
    /// I/O is not supported on the file, [the fields] will be 0".
    pub fn supports_direct(&self) -> bool {
        self.mem_align != 0 && self.offset_align != 0
    }

    /// File offset/length alignment for direct reads.
    pub fn read_align(&self) -> u32 {
        if self.read_offset_align != 0 {
            self.read_offset_align
        } else {
            self.offset_align
        }
    }

    /// File offset/length alignment for direct writes.
    pub fn write_align(&self) -> u32 {
        self.offset_align
    }
}

/// The direct-I/O alignment of the open file `fd`, from
/// `statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN | STATX_DIO_READ_ALIGN)`.
///
/// Fields the kernel did not fill in (checked against `stx_mask`) are 0:
/// kernels before 6.1 or filesystems without direct I/O give all zeros,
/// kernels before 6.14 give `read_offset_align == 0`.
pub fn statx_dio<Fd: AsFd>(fd: Fd) -> io::Result<DioAlign> {
    let mask = StatxFlags::from_bits_retain(STATX_DIOALIGN | STATX_DIO_READ_ALIGN);
    let stx = rustix::fs::statx(&fd, c"", AtFlags::EMPTY_PATH, mask)?;
    let mut align = DioAlign::default();
    if stx.stx_mask & STATX_DIOALIGN != 0 {
        align.mem_align = stx.stx_dio_mem_align;
        align.offset_align = stx.stx_dio_offset_align;
    }
    if stx.stx_mask & STATX_DIO_READ_ALIGN != 0 {
        align.read_offset_align = stx.stx_dio_read_offset_align;
    }
    Ok(align)
}

/// The system page size in bytes.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// How many of the pages of the first `len` bytes of `fd` are in the page
/// cache: `(resident, total)`. For tests and benchmarks that check direct
/// I/O really bypassed the page cache (like fincore(1)).
///
/// `fd` must be open for reading (it is mapped `PROT_READ`, `MAP_SHARED`);
/// the mapping is never touched, only queried with mincore(2), so the query
/// itself brings nothing into the cache. Linux reports page-cache residency
/// of a file mapping only to callers that could write the file (owner or
/// capable), see mincore(2).
pub fn resident_pages<Fd: AsFd>(fd: Fd, len: u64) -> io::Result<(usize, usize)> {
    if len == 0 {
        return Ok((0, 0));
    }
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let total = len.div_ceil(page_size());
    let mapping = Mapping::new(fd, len)?;
    let mut vec = vec![0u8; total];
    // SAFETY: `mapping.ptr` is the page-aligned start of a live mapping of
    // `mapping.len` bytes (kept alive by `mapping` until after this call),
    // and `vec` has one byte for each of its `ceil(len / page_size)` pages,
    // which is what mincore(2) writes.
    let rc = unsafe { libc::mincore(mapping.ptr, mapping.len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let resident = vec.iter().filter(|&&v| v & 1 != 0).count();
    Ok((resident, total))
}

/// `cachestat(2)` (Linux 6.5+): how many pages of `[offset, offset +
/// len)` of `fd` are in the page cache. A pure lookup: unlike a
/// `preadv2(RWF_NOWAIT)` probe, which starts readahead around a page it
/// does not find (allocating, zeroing or reading the pages after it), it
/// brings nothing into the cache. `ENOSYS` before 6.5.
pub fn cached_pages<Fd: AsFd>(fd: Fd, offset: u64, len: u64) -> io::Result<u64> {
    Ok(page_cache_stat(fd, offset, len)?.cached)
}

/// What `cachestat(2)` reports of a range of a file: its pages in the
/// page cache, and of those the dirty ones and the ones being written
/// back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageCacheStat {
    pub cached: u64,
    pub dirty: u64,
    pub writeback: u64,
}

/// `cachestat(2)` of `[offset, offset + len)` of `fd` (`len == 0`: to the
/// end of the file); see [`cached_pages`].
pub fn page_cache_stat<Fd: AsFd>(fd: Fd, offset: u64, len: u64) -> io::Result<PageCacheStat> {
    /// `struct cachestat_range` (include/uapi/linux/mman.h).
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    /// `struct cachestat`.
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// The same number on every architecture (the unified table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: the descriptor is borrowed, so open for the call; `range` and
    // `stat` are live, properly laid out (`repr(C)`, the kernel's structs
    // field for field) and outlive the call, which only reads `range` and
    // writes `stat`; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_fd().as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if rc == 0 {
        Ok(PageCacheStat {
            cached: stat.nr_cache,
            dirty: stat.nr_dirty,
            writeback: stat.nr_writeback,
        })
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `sync_file_range(fd, offset, len, SYNC_FILE_RANGE_WRITE)`: start
/// writeback of the dirty pages of the range that are not being written
/// yet, and return without waiting for it. It neither waits for nor
/// consumes a writeback error of the open file (only the `WAIT_*` flags
/// do), so the next `fsync`/`fdatasync` of any descriptor of the file
/// still reports one. `len == 0`: to the end of the file.
pub fn start_writeback<Fd: AsFd>(fd: Fd, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    // SAFETY: the descriptor is borrowed, so open for the call, which
    // takes only integers and touches no memory of ours.
    let rc = unsafe {
        libc::sync_file_range(
            fd.as_fd().as_raw_fd(),
            offset,
            len,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A read-only shared file mapping, unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    fn new<Fd: AsFd>(fd: Fd, len: usize) -> io::Result<Self> {
        // SAFETY: a null hint lets the kernel choose a fresh address range,
        // so no existing memory is replaced; the mapping is never
        // dereferenced (only passed to mincore and munmap), so a file that
        // shrinks underneath it cannot cause a SIGBUS in Rust code.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        Ok(Self { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe exactly the mapping created in
        // `Mapping::new`, unmapped only here; no references into it exist.
        let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
    }
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED)`: ask the kernel to
/// drop clean cached pages of the range (`len == 0`: to end of file). Dirty
/// pages are not dropped; write them back first (e.g. `fdatasync`).
pub fn fadvise_dontneed<Fd: AsFd>(fd: Fd, offset: u64, len: u64) -> io::Result<()> {
    rustix::fs::fadvise(
        fd,
        offset,
        NonZeroU64::new(len),
        rustix::fs::Advice::DontNeed,
    )?;
    Ok(())
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_WILLNEED)`: start reading
/// the range into the page cache and return without waiting for it
/// (exactly the range: no readahead window around it).
pub fn fadvise_willneed<Fd: AsFd>(fd: Fd, offset: u64, len: u64) -> io::Result<()> {
    rustix::fs::fadvise(
        fd,
        offset,
        NonZeroU64::new(len),
        rustix::fs::Advice::WillNeed,
    )?;
    Ok(())
}

/// `faccessat2(fd, "", mode, AT_EACCESS | AT_EMPTY_PATH)`: whether the
/// thread's fs credentials (fsuid, fsgid, groups; `AT_EACCESS`) may access
/// the file `fd` refers to (an `O_PATH` descriptor will do), checked by the
/// kernel like any access, with no path walk (`AT_EMPTY_PATH`, Linux 5.8+).
/// `rustix` refuses `AT_EMPTY_PATH` here.
pub fn access_fd<Fd: AsFd>(fd: Fd, mode: rustix::fs::Access) -> io::Result<()> {
    // SAFETY: the descriptor is borrowed, so open for the call; the path is
    // a NUL-terminated empty string that outlives the call; the other
    // arguments are plain integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_faccessat2,
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            mode.bits() as libc::c_int,
            libc::AT_EACCESS | libc::AT_EMPTY_PATH,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `cached_pages` counts the pages a write left in the cache, and
    /// looking at a hole neither finds nor caches anything there.
    #[test]
    fn cachestat_counts_cached_pages_and_caches_nothing() {
        let file = tempfile::tempfile().unwrap();
        pwritev2(&file, &[7u8; 8192], 0, RwFlags::NONE).unwrap();
        match cached_pages(&file, 0, 8192) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                eprintln!("skipped: no cachestat(2) before Linux 6.5");
                return;
            }
            r => assert_eq!(r.unwrap(), 2),
        }
        file.set_len(1 << 20).unwrap();
        for _ in 0..2 {
            assert_eq!(cached_pages(&file, 512 << 10, 64 << 10).unwrap(), 0);
        }
    }

    #[test]
    fn pwrite_then_pread_roundtrip() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(
            pwritev2(&file, b"hello world", 5, RwFlags::NONE).unwrap(),
            11
        );
        let mut buf = [0u8; 32];
        let n = preadv2(&file, &mut buf, 0, RwFlags::NONE).unwrap();
        assert_eq!(n, 16);
        assert_eq!(&buf[..16], b"\0\0\0\0\0hello world");
        // Reading at end of file returns 0.
        assert_eq!(preadv2(&file, &mut buf, 16, RwFlags::NONE).unwrap(), 0);
    }

    #[test]
    fn sync_flags_accepted() {
        let file = tempfile::tempfile().unwrap();
        assert_eq!(pwritev2(&file, b"abc", 0, RwFlags::DSYNC).unwrap(), 3);
        assert_eq!(pwritev2(&file, b"def", 3, RwFlags::SYNC).unwrap(), 3);
    }

    #[test]
    fn dontcache_works_or_says_eopnotsupp() {
        let file = tempfile::tempfile().unwrap();
        match pwritev2(&file, b"abc", 0, RwFlags::DONTCACHE) {
            Ok(n) => assert_eq!(n, 3),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP)),
        }
    }

    #[test]
    fn flags_combine() {
        let f = RwFlags::DSYNC | RwFlags::DONTCACHE;
        assert!(f.contains(RwFlags::DSYNC));
        assert!(f.contains(RwFlags::DONTCACHE));
        assert!(!f.contains(RwFlags::SYNC));
        assert_eq!(f.bits(), 0x82);
    }

    #[test]
    fn statx_dio_is_consistent() {
        let file = tempfile::tempfile().unwrap();
        let align = statx_dio(&file).unwrap();
        // Whatever the filesystem under the temp dir supports, the values
        // are either all zero or powers of two.
        if align.supports_direct() {
            assert!(align.mem_align.is_power_of_two());
            assert!(align.offset_align.is_power_of_two());
            assert!(align.read_align().is_power_of_two());
        } else {
            assert_eq!(align.read_align(), align.offset_align);
        }
    }

    #[test]
    fn read_align_defaults_to_offset_align() {
        let a = DioAlign {
            mem_align: 4,
            offset_align: 4096,
            read_offset_align: 0,
        };
        assert_eq!(a.read_align(), 4096);
        assert_eq!(a.write_align(), 4096);
        let b = DioAlign {
            read_offset_align: 512,
            ..a
        };
        assert_eq!(b.read_align(), 512);
        assert!(!DioAlign::default().supports_direct());
    }

    #[test]
    fn resident_pages_sees_written_pages() {
        let mut file = tempfile::tempfile().unwrap();
        let page = page_size();
        file.write_all(&vec![1u8; 8 * page]).unwrap();
        let (resident, total) = resident_pages(&file, 8 * page as u64).unwrap();
        assert_eq!(total, 8);
        // Just-written buffered data is in the page cache (tmpfs or disk).
        assert_eq!(resident, 8);
        assert_eq!(resident_pages(&file, 0).unwrap(), (0, 0));
        // A length that is not a page multiple rounds up.
        assert_eq!(resident_pages(&file, page as u64 + 1).unwrap().1, 2);
    }

    #[test]
    fn fadvise_dontneed_accepts_ranges() {
        let file = tempfile::tempfile().unwrap();
        fadvise_dontneed(&file, 0, 0).unwrap();
        fadvise_dontneed(&file, 4096, 4096).unwrap();
        fadvise_willneed(&file, 0, 4096).unwrap();
    }

    #[test]
    fn writeback_starts_and_cachestat_sees_it() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 64 << 10]).unwrap();
        start_writeback(&file, 0, 0).unwrap();
        start_writeback(&file, 4096, 8192).unwrap();
        assert!(start_writeback(&file, u64::MAX, 1).is_err());
        file.sync_data().unwrap();
        match page_cache_stat(&file, 0, 0) {
            Ok(st) => {
                assert_eq!(st.dirty, 0, "{st:?}");
                assert_eq!(st.cached, cached_pages(&file, 0, 0).unwrap());
            }
            // Kernels before 6.5.
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOSYS)),
        }
    }
}
