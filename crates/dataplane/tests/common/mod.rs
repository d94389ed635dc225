//! Test helpers: real filesystems on loop devices ([`LoopFs`], from
//! `dionfs-testfs`) and small wrappers around the data plane.

#![allow(dead_code)]

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use dionfs_dataplane::{
    DataConfig, DataError, DataFile, DataPlane, Mode, ReadData, Stable, WriteDone,
};

pub use dionfs_testfs::LoopFs;

/// Opens (creating) `path` the way the filesystem backend does: a buffered
/// O_RDWR descriptor and, if the filesystem accepts it, an O_DIRECT one.
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

pub fn plane(read_mode: Mode, write_mode: Mode) -> DataPlane {
    let plane = DataPlane::new(DataConfig {
        read_mode,
        write_mode,
        max_transfer: 1 << 20,
        read_buffers: 16,
        write_buffers: 16,
        small_buffers: 8,
        large_read_depth: dionfs_dataplane::LARGE_READ_DEPTH,
    })
    .expect("plane");
    if SPLIT_MISALIGNED.with(|s| s.get()) {
        plane.with_whole_buffered_max(0)
    } else {
        plane
    }
}

thread_local! {
    /// Set by a test thread: the planes it makes split every misaligned
    /// direct-mode write into a direct interior and buffered edges, instead
    /// of writing small ones whole through the page cache.
    static SPLIT_MISALIGNED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with [`plane`] making planes that split every misaligned
/// direct-mode write (see `DataPlane::with_whole_buffered_max`).
pub fn with_split_misaligned<T>(f: impl FnOnce() -> T) -> T {
    SPLIT_MISALIGNED.with(|s| s.set(true));
    let out = f();
    SPLIT_MISALIGNED.with(|s| s.set(false));
    out
}

/// WRITE `data` at `offset` through the data plane (the same steps as the
/// server: take a buffer, fill the payload slot, write).
pub fn write_at(
    plane: &DataPlane,
    file: &DataFile,
    offset: u64,
    data: &[u8],
    stable: Stable,
) -> Result<WriteDone, DataError> {
    let buf = plane.write_pool().get_blocking()?;
    let mut wb = plane.write_buffer(file, buf, offset, data.len())?;
    wb.payload_mut().copy_from_slice(data);
    plane.write(file, wb, stable)
}

/// IOR-hard's write phase: `writers` threads, each writing `per_writer`
/// records of `record` bytes of [`pattern_bytes`], record `i` of writer `c`
/// at `(i * writers + c) * record`, UNSTABLE; returns when all are done.
pub fn write_interleaved(
    plane: &Arc<DataPlane>,
    file: &Arc<DataFile>,
    record: u64,
    writers: u64,
    per_writer: u64,
) {
    let threads: Vec<_> = (0..writers)
        .map(|c| {
            let (file, plane) = (file.clone(), plane.clone());
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    let off = (i * writers + c) * record;
                    let data = pattern_bytes(off, record as usize, 0);
                    write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// READ `count` bytes at `offset` through the data plane.
pub fn read_at(
    plane: &DataPlane,
    file: &DataFile,
    offset: u64,
    count: u32,
) -> Result<ReadData, DataError> {
    let buf = plane.read_pool().get_blocking()?;
    plane.read(file, buf, offset, count)
}

/// The whole file through the data plane, in `max_transfer` chunks.
pub fn read_all(plane: &DataPlane, file: &DataFile) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let r = read_at(plane, file, out.len() as u64, 1 << 20).expect("read");
        out.extend_from_slice(r.data());
        if r.eof() {
            return out;
        }
        assert!(!r.is_empty(), "empty read without eof at {}", out.len());
    }
}

/// The byte every test writes at file position `pos` (never zero, so a lost
/// write shows as a zero).
pub fn pattern(pos: u64, salt: u8) -> u8 {
    ((pos.wrapping_mul(31) ^ (pos >> 9)) % 251) as u8 + 1 + salt % 4
}

pub fn pattern_bytes(offset: u64, len: usize, salt: u8) -> Vec<u8> {
    (offset..offset + len as u64)
        .map(|p| pattern(p, salt))
        .collect()
}

/// The kernel's view of the file size.
pub fn fs_size(file: &DataFile) -> u64 {
    rustix::fs::fstat(file.buffered_fd())
        .expect("fstat")
        .st_size as u64
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
