//! Test helpers: real filesystems on loop devices ([`LoopFs`], from
//! `dionfs-testfs`, one test per filesystem with [`test_each_fs`]) and
//! small wrappers around the data plane (`dionfs_dataplane::testing`).

// Each test file uses some of these.
#![allow(dead_code, unused_macros, unused_imports)]

use std::sync::Arc;

use dionfs_dataplane::{DataError, DataFile, DataPlane, Mode, ReadData, Stable, WriteDone};

pub use dionfs_dataplane::testing::open_data_file;
pub use dionfs_testfs::LoopFs;

/// One `#[test]` per filesystem kind listed, named after it, each running
/// `$run(kind)` (which makes its [`LoopFs`]): `test_each_fs!(run_fs: xfs,
/// ext4);`.
macro_rules! test_each_fs {
    ($run:ident: $($kind:ident),+ $(,)?) => {
        $(
            #[test]
            fn $kind() {
                $run(stringify!($kind));
            }
        )+
    };
}
pub(crate) use test_each_fs;

/// A runtime of two workers, as the server's on this machine.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A ring driven on `rt`, as the server drives its own.
pub fn ring(rt: &tokio::runtime::Runtime) -> Arc<dionfs_dataplane::IoRing> {
    let ring = Arc::new(dionfs_dataplane::IoRing::new(64).expect("io_uring"));
    rt.spawn(dionfs_sys::uring::drive(ring.clone()));
    ring
}

/// A plane of 1 MiB transfers and 16 buffers each way.
pub fn plane(read_mode: Mode, write_mode: Mode) -> DataPlane {
    let plane = dionfs_dataplane::testing::plane(read_mode, write_mode, 1 << 20, 16);
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
