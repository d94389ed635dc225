//! NFSv4.2's data-plane calls (SEEK, ALLOCATE, DEALLOCATE, COPY, CLONE) on
//! real filesystems (XFS, ext4, btrfs on loop devices with 4096-byte
//! sectors), in every mode, with and without checksums: after each call
//! the file reads back as an in-memory model says, and with checksums
//! every block of it (holes included) matches its stored checksum.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use common::*;
use dionfs_dataplane::{
    DataError, DataFile, DataPlane, IoRing, Mode, ReadAttempt, Seek, Stable, COPY_MAX,
};
use dionfs_integrity::{FileKey, Order, Store, BLOCK};

test_each_fs!(run_fs: xfs, ext4, btrfs);

const MODES: [Mode; 3] = [Mode::Buffered, Mode::DontCache, Mode::Direct];

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 4096) else {
        return;
    };
    let store = Store::open(&fs.path("integrity"), 64, Order::Overlapped).unwrap();
    let clones = kind != "ext4";
    for mode in MODES {
        for sums in [false, true] {
            let t = Case {
                kind,
                mode,
                fs: &fs,
                store: sums.then_some(&store),
                plane: plane(mode, mode),
                tag: format!("{kind} {mode:?} sums={sums}"),
            };
            println!("{}", t.tag);
            t.random_ops(clones);
            t.partial_block_deallocate();
            t.allocate_past_the_end();
            t.copies(clones);
            t.errors();
        }
    }
    if !clones {
        ext4_refuses_clone(&fs);
    }
    println!("{kind}: racing calls");
    racing_calls(&fs, &store, clones);
}

/// WRITEs, READs, DEALLOCATEs, ALLOCATEs, COPYs (two files both ways, and
/// within one) and CLONEs racing on two files with checksums: no READ
/// finds a mismatch, and afterwards every block of both files matches its
/// stored checksum (the range locks keep each call's blocks to itself).
fn racing_calls(fs: &LoopFs, store: &Arc<Store>, clones: bool) {
    let plane = Arc::new(plane(Mode::Direct, Mode::Direct));
    let files: Vec<Arc<DataFile>> = (0..2u8)
        .map(|n| {
            let path = fs.path(&format!("race-{n}"));
            let file = open_data_file(&path);
            let key = FileKey {
                fs_id: 2,
                handle_type: 1,
                handle: vec![n; 8],
            };
            let sums = store.open_file(key, file.buffered_fd()).unwrap();
            let file = file.with_integrity(sums);
            write_at(
                &plane,
                &file,
                0,
                &pattern_bytes(0, 1 << 20, n),
                Stable::Unstable,
            )
            .unwrap();
            Arc::new(file)
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let (plane, files) = (plane.clone(), files.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(t + 100);
                for i in 0..80u64 {
                    assert!(std::time::Instant::now() < deadline, "thread {t} too slow");
                    let a = &files[rng.below(2) as usize];
                    let b = &files[rng.below(2) as usize];
                    let off = rng.below(1 << 20);
                    let len = 1 + rng.below(100_000);
                    match t {
                        0 => {
                            let data = pattern_bytes(off, len as usize, i as u8);
                            write_at(&plane, a, off, &data, Stable::Unstable).unwrap();
                        }
                        1 => {
                            read_at(&plane, a, off, len as u32).unwrap();
                        }
                        2 => plane.deallocate(a, off, len).unwrap(),
                        3 => plane.allocate(a, off, len).unwrap(),
                        4 => {
                            let dst = rng.below(1 << 20);
                            match plane.copy(a, off, b, dst, len) {
                                Ok(_) | Err(DataError::InvalidRange(_)) => {}
                                Err(e) => panic!("copy: {e}"),
                            }
                        }
                        _ if clones => {
                            let (s, d) = (off - off % BLOCK, rng.below(256) * BLOCK);
                            match plane.clone_range(a, s, b, d, BLOCK * (1 + len % 8)) {
                                Ok(()) | Err(DataError::InvalidRange(_)) => {}
                                Err(e) => panic!("clone: {e}"),
                            }
                        }
                        _ => {
                            plane.seek(a, off.min(1 << 19), Seek::Data).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(plane.snapshot().integrity_errors, 0);
    for file in &files {
        let sums = file.integrity().unwrap();
        assert!(!sums.is_stale());
        let mut disk = vec![0u8; fs_size(file) as usize];
        let got = rustix::io::pread(file.buffered_fd(), &mut disk, 0).unwrap();
        assert_eq!(got, disk.len());
        assert_eq!(sums.verify(0, &disk).unwrap(), None);
        assert_eq!(read_all(&plane, file), disk);
    }
}

/// A direct READ across the end of a file on XFS whose last block went to
/// disk through the copy-on-write fork (a block a CLONE shared, written
/// again buffered) after the buffered write that extended the file had
/// left speculative delayed-allocation blocks past the end: XFS fails an
/// `O_DIRECT` read that reaches those blocks with `EIO` (and logs "Direct
/// I/O collision with buffered writes!"), which `racing_calls` met now
/// and then. The READ stops at the block holding the end, blocking and
/// through io_uring, and answers the bytes with eof.
#[test]
fn direct_read_across_an_end_written_through_cow() {
    let Some(fs) = LoopFs::new("xfs", 256) else {
        return;
    };
    const END: u64 = 0x108000;
    let plane = plane(Mode::Direct, Mode::Direct);
    let pwrite = |file: &DataFile, offset: u64, data: &[u8]| {
        let n = rustix::io::pwrite(file.buffered_fd(), data, offset).unwrap();
        assert_eq!(n, data.len());
    };
    let source = open_data_file(&fs.path("cow-end-source"));
    pwrite(&source, 0, &pattern_bytes(0, 8 * BLOCK as usize, 2));
    rustix::fs::fdatasync(source.buffered_fd()).unwrap();
    let path = fs.path("cow-end");
    let file = open_data_file(&path);
    let mut model = pattern_bytes(0, END as usize, 1);
    pwrite(&file, 0, &model);
    // On disk, without the blocks the writeback allocated past the end.
    rustix::fs::fdatasync(file.buffered_fd()).unwrap();
    let beyond = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
    rustix::fs::fallocate(file.buffered_fd(), beyond, END, 16 << 20).unwrap();
    // Extending, buffered: delayed allocation, with speculative blocks past
    // the new end.
    let tail = pattern_bytes(END, 3000, 3);
    pwrite(&file, END, &tail);
    put(&mut model, END, &tail);
    // The 8 blocks before it shared with the source; one written again,
    // buffered: XFS reserves copy-on-write blocks around it (its cowextsize
    // hint, 32 blocks), over the dirty block past them too, so writeback
    // writes both through the copy-on-write fork and leaves the
    // speculative blocks past the end as they were.
    plane
        .clone_range(&source, 0, &file, END - 8 * BLOCK, 8 * BLOCK)
        .unwrap();
    put(
        &mut model,
        END - 8 * BLOCK,
        &pattern_bytes(0, 8 * BLOCK as usize, 2),
    );
    pwrite(&file, END - BLOCK, &[0xee; 100]);
    put(&mut model, END - BLOCK, &[0xee; 100]);

    // The kernel's own answer to a direct read past the end's block (its
    // flush writes the two dirty blocks back).
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut raw = vec![0u8; (2 << 20) + 4096];
    let at = raw.as_ptr().align_offset(4096);
    match direct.read_at(&mut raw[at..at + (1 << 20)], END - 8 * BLOCK) {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => println!("a direct read past the end's block gave {other:?}, not EIO"),
    }

    let want = &model[(END - 8 * BLOCK) as usize..];
    let read = read_at(&plane, &file, END - 8 * BLOCK, 1 << 20).unwrap();
    assert_eq!(read.data(), want);
    assert!(read.eof());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let ring = Arc::new(IoRing::new(8).unwrap());
    rt.spawn(dionfs_sys::uring::drive(ring.clone()));
    let buf = plane.read_pool().get_blocking().unwrap();
    let attempt = rt.block_on(plane.read_without_blocking(
        &ring,
        &file,
        buf,
        END - 8 * BLOCK,
        1 << 20,
        file.see_size().unwrap(),
    ));
    let ReadAttempt::Done(read) = attempt else {
        panic!("not read through the ring");
    };
    let read = read.unwrap();
    assert_eq!(read.data(), want);
    assert!(read.eof());
}

/// One filesystem, mode and integrity setting.
struct Case<'a> {
    kind: &'a str,
    mode: Mode,
    fs: &'a LoopFs,
    store: Option<&'a Arc<Store>>,
    plane: DataPlane,
    tag: String,
}

/// A file and what it should hold.
struct Modelled {
    file: DataFile,
    path: std::path::PathBuf,
    model: Vec<u8>,
}

impl Case<'_> {
    /// A new file `name` holding `data`, written through the plane.
    fn file(&self, name: &str, data: Vec<u8>) -> Modelled {
        let path = self
            .fs
            .path(&format!("{name}-{}", self.tag.replace(' ', "_")));
        let _ = std::fs::remove_file(&path);
        let file = open_data_file(&path);
        let file = match self.store {
            Some(store) => {
                let ino = rustix::fs::fstat(file.buffered_fd()).unwrap().st_ino;
                let key = FileKey {
                    fs_id: 1,
                    handle_type: 1,
                    handle: ino.to_le_bytes().to_vec(),
                };
                let sums = store.open_file(key, file.buffered_fd()).unwrap();
                file.with_integrity(sums)
            }
            None => file,
        };
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            write_at(
                &self.plane,
                &file,
                (i << 20) as u64,
                chunk,
                Stable::Unstable,
            )
            .unwrap();
        }
        Modelled {
            file,
            path,
            model: data,
        }
    }

    /// The file reads back as its model, through the plane and from
    /// disk; with checksums, every block matches its stored checksum.
    fn check(&self, m: &Modelled, what: &str) {
        let got = read_all(&self.plane, &m.file);
        assert_eq!(got.len(), m.model.len(), "{}: {what}: size", self.tag);
        if let Some(at) = got.iter().zip(&m.model).position(|(a, b)| a != b) {
            panic!(
                "{}: {what}: byte {at} is {}, model {}",
                self.tag, got[at], m.model[at]
            );
        }
        assert_eq!(
            fs_size(&m.file),
            m.model.len() as u64,
            "{}: {what}",
            self.tag
        );
        if let Some(sums) = m.file.integrity() {
            assert!(
                !sums.is_stale(),
                "{}: {what}: checksums distrusted",
                self.tag
            );
            let disk = std::fs::read(&m.path).unwrap();
            assert_eq!(disk, m.model, "{}: {what}: on disk", self.tag);
            let bad = sums.verify(0, &disk).unwrap();
            assert_eq!(bad, None, "{}: {what}: stored checksums", self.tag);
        }
        assert_eq!(self.plane.snapshot().integrity_errors, 0, "{}", self.tag);
    }

    /// Random SEEKs, ALLOCATEs, DEALLOCATEs, COPYs within the file and
    /// (where the filesystem can) CLONEs, checked after each.
    fn random_ops(&self, clones: bool) {
        let mut m = self.file("random", pattern_bytes(0, 300_000, 1));
        let other = self.file("random-src", pattern_bytes(0, 200_000, 2));
        let mut rng = Rng::new(42);
        for i in 0..60 {
            let size = m.model.len() as u64;
            match rng.below(5) {
                0 => {
                    let off = rng.below(size + 20_000);
                    let len = 1 + rng.below(70_000);
                    self.plane.deallocate(&m.file, off, len).unwrap();
                    let end = ((off + len) as usize).min(m.model.len());
                    if (off as usize) < end {
                        m.model[off as usize..end].fill(0);
                    }
                    self.check(&m, &format!("op {i}: deallocate {off}+{len}"));
                }
                1 => {
                    let off = rng.below(size + 50_000);
                    let len = 1 + rng.below(60_000);
                    self.plane.allocate(&m.file, off, len).unwrap();
                    let end = (off + len) as usize;
                    if end > m.model.len() {
                        m.model.resize(end, 0);
                    }
                    self.check(&m, &format!("op {i}: allocate {off}+{len}"));
                }
                2 => {
                    // Within the file: block-congruent or not, never
                    // overlapping.
                    let len = 1 + rng.below(size / 3);
                    let src = rng.below(size - len);
                    let mut dst = rng.below(size + 10_000);
                    if rng.below(2) == 0 {
                        dst = dst - dst % BLOCK + src % BLOCK;
                    }
                    if src < dst + len && dst < src + len {
                        continue;
                    }
                    let n = self.plane.copy(&m.file, src, &m.file, dst, len).unwrap();
                    assert_eq!(n, len, "{}: op {i}", self.tag);
                    copy_model(&mut m.model, src, dst, n);
                    self.check(&m, &format!("op {i}: copy {src}->{dst}+{len}"));
                }
                3 => {
                    let len = 1 + rng.below(150_000);
                    let src = rng.below(other.model.len() as u64 - len / 2);
                    let dst = rng.below(size + 10_000);
                    let n = self
                        .plane
                        .copy(&other.file, src, &m.file, dst, len)
                        .unwrap();
                    let want = len.min(other.model.len() as u64 - src);
                    assert_eq!(n, want, "{}: op {i}: short only at the end", self.tag);
                    let data = other.model[src as usize..(src + n) as usize].to_vec();
                    put(&mut m.model, dst, &data);
                    self.check(&m, &format!("op {i}: copy in {src}->{dst}+{len}"));
                }
                _ => {
                    for what in [Seek::Data, Seek::Hole] {
                        let off = rng.below(size);
                        let at = self.plane.seek(&m.file, off, what).unwrap();
                        check_seek(&m.model, off, what, at, &self.tag);
                    }
                    if clones {
                        let blocks = other.model.len() as u64 / BLOCK;
                        let src = BLOCK * rng.below(blocks - 2);
                        let len = BLOCK * (1 + rng.below(blocks - src / BLOCK - 1));
                        let dst = BLOCK * rng.below(size / BLOCK + 2);
                        self.plane
                            .clone_range(&other.file, src, &m.file, dst, len)
                            .unwrap_or_else(|e| panic!("{}: op {i}: clone: {e}", self.tag));
                        let data = other.model[src as usize..(src + len) as usize].to_vec();
                        put(&mut m.model, dst, &data);
                        self.check(&m, &format!("op {i}: clone {src}->{dst}+{len}"));
                    }
                }
            }
        }
        self.plane.commit(&m.file, 0, 0).unwrap();
        self.check(&m, "after COMMIT");
        self.check(&other, "the source");
    }

    /// DEALLOCATE inside one block, across two, of a whole block, up to
    /// and past the end: partial blocks read zeros where punched and
    /// keep the rest; the size stays.
    fn partial_block_deallocate(&self) {
        let mut m = self.file("punch", pattern_bytes(0, 10 * BLOCK as usize + 777, 3));
        let size = m.model.len() as u64;
        for (off, len) in [
            (100, 50),
            (BLOCK - 10, 20),
            (2 * BLOCK, BLOCK),
            (3 * BLOCK + 1, 3 * BLOCK),
            (9 * BLOCK + 5, 10_000),
            (size + 100, 5000),
        ] {
            self.plane.deallocate(&m.file, off, len).unwrap();
            let end = (off + len).min(size);
            if off < end {
                m.model[off as usize..end as usize].fill(0);
            }
            self.check(&m, &format!("deallocate {off}+{len}"));
        }
        // SEEK finds the hole freed whole (filesystems may keep partial
        // blocks as data).
        let at = self.plane.seek(&m.file, 2 * BLOCK, Seek::Hole).unwrap();
        check_seek(&m.model, 2 * BLOCK, Seek::Hole, at, &self.tag);
        let data = self.plane.seek(&m.file, 2 * BLOCK, Seek::Data).unwrap();
        check_seek(&m.model, 2 * BLOCK, Seek::Data, data, &self.tag);
        assert!(
            data.is_some_and(|d| d >= 3 * BLOCK),
            "{}: {data:?}",
            self.tag
        );
    }

    /// ALLOCATE past the end extends the file with zeros; inside it
    /// changes nothing a client reads; the checksums stay trusted.
    fn allocate_past_the_end(&self) {
        let mut m = self.file("alloc", pattern_bytes(0, 5000, 4));
        self.plane.allocate(&m.file, 100, 200).unwrap();
        self.check(&m, "allocate inside");
        self.plane.allocate(&m.file, 20_000, 3 * BLOCK).unwrap();
        m.model.resize(20_000 + 3 * BLOCK as usize, 0);
        self.check(&m, "allocate past the end");
        // The allocated blocks are no holes to SEEK, or holes (unwritten
        // extents): either way they read as zeros.
        let hole = self.plane.seek(&m.file, 5000, Seek::Hole).unwrap();
        check_seek(&m.model, 5000, Seek::Hole, hole, &self.tag);
        write_at(&self.plane, &m.file, 21_000, b"after", Stable::Unstable).unwrap();
        put(&mut m.model, 21_000, b"after");
        self.check(&m, "write into allocated blocks");
    }

    /// COPY between two files and within one, at block-congruent and other
    /// offsets, short at the source's end, capped at COPY_MAX; the
    /// destination is left for COMMIT.
    fn copies(&self, clones: bool) {
        let src = self.file("copy-src", pattern_bytes(0, 5 << 20, 5));
        let mut dst = self.file("copy-dst", pattern_bytes(0, 100_000, 6));
        self.plane.commit(&dst.file, 0, 0).unwrap();
        assert!(!dst.file.has_unsynced_writes());
        for (s, d, len) in [
            (0, 0, 3 * BLOCK),
            (BLOCK + 10, 5 * BLOCK + 10, 5 * BLOCK),
            (100, 7777, 40_000),
            (3, 200_000, 9000),
            (0, 1 << 20, 6 << 20),
            (src.model.len() as u64 - 1000, 50, 5000),
        ] {
            let n = self.plane.copy(&src.file, s, &dst.file, d, len).unwrap();
            let want = len.min(COPY_MAX).min(src.model.len() as u64 - s);
            assert_eq!(n, want, "{}: copy {s}->{d}+{len}", self.tag);
            let data = src.model[s as usize..(s + n) as usize].to_vec();
            put(&mut dst.model, d, &data);
            self.check(&dst, &format!("copy {s}->{d}+{len}"));
        }
        assert!(dst.file.has_unsynced_writes(), "{}", self.tag);
        self.plane.commit(&dst.file, 0, 0).unwrap();
        assert!(!dst.file.has_unsynced_writes());
        // Past the source's end: nothing.
        assert_eq!(
            self.plane
                .copy(&src.file, src.model.len() as u64, &dst.file, 0, 10)
                .unwrap(),
            0
        );
        // Within one file, congruent and not.
        for (s, d, len) in [
            (0, 3 * BLOCK, 2 * BLOCK),
            (10, 20_000, 5000),
            (50_000, 7, 300),
        ] {
            let n = self.plane.copy(&dst.file, s, &dst.file, d, len).unwrap();
            assert_eq!(n, len);
            copy_model(&mut dst.model, s, d, n);
            self.check(&dst, &format!("copy within {s}->{d}+{len}"));
        }
        // A rotted source block is still caught in the copy when its
        // checksum was copied (same store, congruent offsets).
        if self.store.is_some() && self.kind != "btrfs" {
            self.copied_rot_is_caught(&src, &mut dst);
        }
        if clones {
            let mut c = self.file("clone-dst", Vec::new());
            self.plane.clone_range(&src.file, 0, &c.file, 0, 0).unwrap();
            c.model = src.model.clone();
            self.check(&c, "clone of the whole file (length 0)");
            self.plane
                .clone_range(&src.file, BLOCK, &c.file, 8 * BLOCK, 4 * BLOCK)
                .unwrap();
            copy_model_from(&mut c.model, &src.model, BLOCK, 8 * BLOCK, 4 * BLOCK);
            self.check(&c, "clone of 4 blocks");
            // Within one file.
            self.plane
                .clone_range(&c.file, 0, &c.file, 100 * BLOCK, 2 * BLOCK)
                .unwrap();
            copy_model(&mut c.model, 0, 100 * BLOCK, 2 * BLOCK);
            self.check(&c, "clone within the file");
        }
    }

    fn copied_rot_is_caught(&self, src: &Modelled, dst: &mut Modelled) {
        // A plane of its own, whose error count may move.
        let plane = plane(self.mode, self.mode);
        let rotted = 7 * BLOCK;
        self.plane.commit(&src.file, 0, 0).unwrap();
        rot(&src.path, rotted + 5);
        dionfs_sys::io::fadvise_dontneed(src.file.buffered_fd(), 0, 0).unwrap();
        let n = plane
            .copy(&src.file, rotted, &dst.file, 2 * BLOCK, BLOCK)
            .unwrap();
        assert_eq!(n, BLOCK);
        let before = plane.snapshot().integrity_errors;
        let err = read_at(&plane, &dst.file, 2 * BLOCK, 10).unwrap_err();
        assert!(
            matches!(err, DataError::Corrupt { offset, .. } if offset == 2 * BLOCK),
            "{}: {err:?}",
            self.tag
        );
        assert_eq!(plane.snapshot().integrity_errors, before + 1);
        // Put the good bytes back, in both.
        rot(&src.path, rotted + 5);
        dionfs_sys::io::fadvise_dontneed(src.file.buffered_fd(), 0, 0).unwrap();
        let n = plane
            .copy(&src.file, rotted, &dst.file, 2 * BLOCK, BLOCK)
            .unwrap();
        assert_eq!(n, BLOCK);
        let data = src.model[rotted as usize..(rotted + BLOCK) as usize].to_vec();
        put(&mut dst.model, 2 * BLOCK, &data);
        // The counter moved once, on purpose.
        let got = read_all(&plane, &dst.file);
        assert_eq!(got, dst.model, "{}", self.tag);
    }

    /// Bounds and refusals are typed errors.
    fn errors(&self) {
        let f = self.file("errors", pattern_bytes(0, 3 * BLOCK as usize, 7));
        let e = self.plane.seek(&f.file, 3 * BLOCK, Seek::Data).unwrap_err();
        assert!(matches!(e, DataError::PastEnd { .. }), "{e:?}");
        assert_eq!(e.errno(), libc::ENXIO);
        let e = self.plane.seek(&f.file, u64::MAX, Seek::Hole).unwrap_err();
        assert!(matches!(e, DataError::PastEnd { .. }), "{e:?}");
        let e = self.plane.allocate(&f.file, u64::MAX - 5, 10).unwrap_err();
        assert!(matches!(e, DataError::FileTooBig), "{e:?}");
        let e = self.plane.allocate(&f.file, 0, 0).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        let e = self.plane.deallocate(&f.file, 0, 0).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);
        self.plane.deallocate(&f.file, u64::MAX - 5, 10).unwrap();
        let e = self.plane.copy(&f.file, 0, &f.file, 100, 200).unwrap_err();
        assert!(matches!(e, DataError::InvalidRange(_)), "{e:?}");
        let e = self
            .plane
            .copy(&f.file, 0, &f.file, u64::MAX - 5, 200)
            .unwrap_err();
        assert!(matches!(e, DataError::FileTooBig), "{e:?}");
        let e = self
            .plane
            .clone_range(&f.file, 1, &f.file, 2 * BLOCK, BLOCK)
            .unwrap_err();
        assert!(matches!(e, DataError::InvalidRange(_)), "{e:?}");
        let e = self
            .plane
            .clone_range(&f.file, 0, &f.file, 4 * BLOCK, 100)
            .unwrap_err();
        assert!(matches!(e, DataError::InvalidRange(_)), "{e:?}");
        let e = self
            .plane
            .clone_range(&f.file, 0, &f.file, 4 * BLOCK, 5 * BLOCK)
            .unwrap_err();
        assert!(matches!(e, DataError::InvalidRange(_)), "{e:?}");
        let e = self
            .plane
            .clone_range(&f.file, 0, &f.file, BLOCK, 2 * BLOCK)
            .unwrap_err();
        assert!(matches!(e, DataError::InvalidRange(_)), "overlap: {e:?}");
        self.check(&f, "after refusals");
    }
}

/// ext4 cannot share extents: CLONE fails with `EOPNOTSUPP`, for the
/// protocol to answer `NFS4ERR_NOTSUPP`, and changes nothing.
fn ext4_refuses_clone(fs: &LoopFs) {
    let plane = plane(Mode::Direct, Mode::Direct);
    let src = open_data_file(&fs.path("ext4-clone-src"));
    let dst = open_data_file(&fs.path("ext4-clone-dst"));
    write_at(
        &plane,
        &src,
        0,
        &pattern_bytes(0, 8192, 1),
        Stable::FileSync,
    )
    .unwrap();
    let e = plane.clone_range(&src, 0, &dst, 0, 8192).unwrap_err();
    assert!(matches!(e, DataError::Io(_)), "{e:?}");
    assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e:?}");
    assert_eq!(fs_size(&dst), 0);
}

/// What SEEK found at `at` from `off` agrees with the model: SEEK_DATA
/// skipped only zeros (a hole) and found a byte inside the file;
/// SEEK_HOLE found zeros or the end, having skipped nothing past it.
fn check_seek(model: &[u8], off: u64, what: Seek, at: Option<u64>, tag: &str) {
    let size = model.len() as u64;
    match (what, at) {
        (Seek::Data, None) => assert!(
            model[off as usize..].iter().all(|&b| b == 0),
            "{tag}: SEEK_DATA from {off} found no data"
        ),
        (Seek::Data, Some(at)) => {
            assert!(off <= at && at < size, "{tag}: SEEK_DATA {off} -> {at}");
            assert!(
                model[off as usize..at as usize].iter().all(|&b| b == 0),
                "{tag}: SEEK_DATA from {off} skipped data before {at}"
            );
        }
        (Seek::Hole, None) => panic!("{tag}: SEEK_HOLE from {off} found no hole"),
        (Seek::Hole, Some(at)) => {
            assert!(off <= at && at <= size, "{tag}: SEEK_HOLE {off} -> {at}");
            if at < size {
                assert_eq!(model[at as usize], 0, "{tag}: SEEK_HOLE {off} -> {at}");
            }
        }
    }
}

/// `data` written into `model` at `at`, extending it with zeros.
fn put(model: &mut Vec<u8>, at: u64, data: &[u8]) {
    let end = at as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[at as usize..end].copy_from_slice(data);
}

fn copy_model(model: &mut Vec<u8>, src: u64, dst: u64, n: u64) {
    let data = model[src as usize..(src + n) as usize].to_vec();
    put(model, dst, &data);
}

fn copy_model_from(model: &mut Vec<u8>, from: &[u8], src: u64, dst: u64, n: u64) {
    put(model, dst, &from[src as usize..(src + n) as usize]);
}

/// Bit rot: a byte flips on disk while the file's mtime and size do not.
fn rot(path: &Path, offset: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let before = f.metadata().unwrap().modified().unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], offset).unwrap();
    f.set_modified(before).unwrap();
    f.sync_all().unwrap();
}
