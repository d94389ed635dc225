//! The data plane on real filesystems (XFS, ext4, btrfs) on loop devices
//! with 4096-byte sectors, in every mode: misaligned reads and writes at
//! every boundary checked byte for byte against an in-memory model, holes,
//! and concurrent misaligned and extending writes (IOR-hard records,
//! adjacent sub-block records, racing appends and truncates).
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use common::*;
use dionfs_dataplane::{DataFile, DataPlane, Mode, Stable};

/// (read mode, write mode) pairs: each mode alone, and both mixes of
/// buffered and direct on one file (the IOR-hard hazard of the NFSD
/// O_DIRECT thread is buffered writes with direct reads).
const MODE_PAIRS: [(Mode, Mode); 5] = [
    (Mode::Direct, Mode::Direct),
    (Mode::Buffered, Mode::Buffered),
    (Mode::DontCache, Mode::DontCache),
    (Mode::Direct, Mode::Buffered),
    (Mode::Buffered, Mode::Direct),
];

test_each_fs!(run_fs: xfs, ext4, btrfs);

/// XFS on 512-byte sectors reports a write alignment of one filesystem
/// block (4096, copy-on-write capable) but a read alignment of one sector
/// (512): reads and writes expand differently on the same file.
#[test]
fn xfs_512_byte_sectors() {
    let Some(fs) = LoopFs::with_sector_size("xfs", 512, 512) else {
        return;
    };
    let probe = open_data_file(&fs.path("probe"));
    println!("xfs/512: statx dio {:?}", probe.dio_align());
    drop(probe);
    let (r, w) = (Mode::Direct, Mode::Direct);
    boundary_cases(&fs, r, w, "d512");
    random_ops(&fs, r, w, "d512");
    ior_hard(&fs, r, w, "d512");
    interleaved_records(&fs, r, w, "adj-d512", 1536, 4, 128);
    extend_and_truncate(&fs, r, w, "d512");
    reflinked_file(&fs);
}

/// A file sharing its extents with another (FICLONE): XFS reports the
/// block size as its write alignment and the sector size as its read
/// alignment. Misaligned I/O on the clone must work and must not change the
/// original.
fn reflinked_file(fs: &LoopFs) {
    let original = pattern_bytes(0, 256 << 10, 1);
    std::fs::write(fs.path("cow-src"), &original).unwrap();
    let src = std::fs::File::open(fs.path("cow-src")).unwrap();
    let dst = std::fs::File::create(fs.path("cow-dst")).unwrap();
    if let Err(e) = rustix::fs::ioctl_ficlone(&dst, &src) {
        println!("skipped reflink case: FICLONE: {e}");
        return;
    }
    drop(dst);
    let file = open_data_file(&fs.path("cow-dst"));
    let dio = file.dio_align();
    println!("xfs/512 reflinked file: statx dio {dio:?}");
    assert!(dio.read_align() <= dio.write_align());
    let plane = plane(Mode::Direct, Mode::Direct);
    random_ops_on(&plane, &file, original.clone(), "cow");
    assert_eq!(plane.snapshot().direct_einval, 0);
    assert_eq!(std::fs::read(fs.path("cow-src")).unwrap(), original);
}

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 512) else {
        return;
    };
    let probe = open_data_file(&fs.path("probe"));
    println!(
        "{kind}: statx dio {:?}, direct capable: {}",
        probe.dio_align(),
        probe.is_direct_capable()
    );
    drop(probe);
    for (read_mode, write_mode) in MODE_PAIRS {
        let name = format!("{read_mode:?}-{write_mode:?}");
        println!("{kind} {name}: boundaries");
        boundary_cases(&fs, read_mode, write_mode, &name);
        println!("{kind} {name}: random ops");
        random_ops(&fs, read_mode, write_mode, &name);
        println!("{kind} {name}: holes");
        holes_stay_holes(&fs, read_mode, write_mode, &name);
    }
    // Direct-Direct twice: small misaligned writes whole through the page
    // cache (the default), then split into direct interiors and buffered
    // edges, as larger ones are.
    for (read_mode, write_mode, split) in [
        (Mode::Direct, Mode::Direct, false),
        (Mode::Direct, Mode::Direct, true),
        (Mode::Direct, Mode::Buffered, false),
    ] {
        if split {
            with_split_misaligned(|| direct_matrix(&fs, kind, read_mode, write_mode, "split"));
        } else {
            direct_matrix(&fs, kind, read_mode, write_mode, "");
        }
    }
    if probe_direct(&fs) {
        println!("{kind}: misaligned direct writes read nothing back");
        misaligned_writes_read_nothing(&fs);
        println!("{kind}: 16 adjacent misaligned writers");
        interleaved_records(&fs, Mode::Direct, Mode::Direct, "adj16-small", 1234, 16, 40);
        interleaved_records(&fs, Mode::Direct, Mode::Direct, "adj16-ior", 47008, 16, 6);
        println!("{kind}: stable direct writes use RWF_DSYNC/RWF_SYNC");
        stable_writes_use_fua(&fs);
    }
}

fn direct_matrix(fs: &LoopFs, kind: &str, read_mode: Mode, write_mode: Mode, tag: &str) {
    let name = format!("{read_mode:?}-{write_mode:?}{tag}");
    println!("{kind} {name}: IOR-hard records");
    ior_hard(fs, read_mode, write_mode, &name);
    println!("{kind} {name}: adjacent 1536-byte records");
    interleaved_records(
        fs,
        read_mode,
        write_mode,
        &format!("adj-{name}"),
        1536,
        4,
        128,
    );
    println!("{kind} {name}: racing extending writes");
    for record in [1000, 3333] {
        let file_name = format!("ext-{record}-{name}");
        interleaved_records(fs, read_mode, write_mode, &file_name, record, 4, 48);
    }
    println!("{kind} {name}: extending writes racing truncate");
    extend_and_truncate(fs, read_mode, write_mode, &name);
    println!("{kind} {name}: i_size never past the data");
    size_never_rounded_up(fs, read_mode, write_mode, &name);
}

/// Whether files on `fs` do direct I/O.
fn probe_direct(fs: &LoopFs) -> bool {
    open_data_file(&fs.path("probe")).is_direct_capable()
}

/// Sectors (512 bytes) the loop device has read so far.
fn sectors_read(fs: &LoopFs) -> u64 {
    let path = fs.device_stat_path().expect("loop device");
    let stat = std::fs::read_to_string(&path).expect("device stat");
    stat.split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .expect("sectors read")
}

/// Misaligned direct writes whose edge blocks are past EOF or already
/// cached read nothing from the device: appended 47008-byte records (every
/// head block is the previous record's tail block) and small overwrites
/// inside one such record. The old read-modify-write read every head
/// block back (at least 8 sectors per record).
fn misaligned_writes_read_nothing(fs: &LoopFs) {
    const RECORD: u64 = 47008;
    const RECORDS: u64 = 200;
    let file = open_data_file(&fs.path("no-reads"));
    // The split into a direct interior and buffered edges (see
    // `small_misaligned_writes_go_whole_through_the_page_cache`).
    let plane = plane(Mode::Direct, Mode::Direct).with_whole_buffered_max(0);
    // Warm the filesystem's metadata (allocation btrees) first.
    write_at(
        &plane,
        &file,
        0,
        &pattern_bytes(0, 1 << 20, 0),
        Stable::Unstable,
    )
    .unwrap();
    plane.truncate(&file, 0).unwrap();
    let mut model = Vec::new();
    let before = sectors_read(fs);
    for k in 0..RECORDS {
        write_model(&plane, &file, &mut model, k * RECORD, RECORD as usize, 1);
    }
    // The last record's head block is cached (two edges were written
    // into it): small overwrites there need no read either.
    for k in 0..20u64 {
        let off = (RECORDS - 1) * RECORD + 10 + k * 30;
        write_model(&plane, &file, &mut model, off, 50, 2);
    }
    let read = sectors_read(fs) - before;
    println!("  {read} sectors read during {RECORDS} misaligned appends");
    // Metadata may need a block or two; the data path needs none.
    assert!(read <= 16, "{read} sectors read during misaligned writes");
    let c = plane.snapshot();
    assert!(c.buffered_edges >= RECORDS, "{c:?}");
    assert_eq!(c.write.direct.ops, RECORDS + 21);
    verify(&plane, &file, &model, unit(&file), "no-reads");
}

/// DATA_SYNC and FILE_SYNC aligned direct writes carry RWF_DSYNC/RWF_SYNC
/// (counted as FUA writes); misaligned ones are synced once after their
/// edges (not counted); unstable ones are neither.
fn stable_writes_use_fua(fs: &LoopFs) {
    let file = open_data_file(&fs.path("fua"));
    let plane = plane(Mode::Direct, Mode::Direct);
    let a = unit(&file);
    let mut model = Vec::new();
    let mut write = |off: u64, len: usize, stable: Stable| {
        let data = pattern_bytes(off, len, 5);
        let done = write_at(&plane, &file, off, &data, stable).unwrap();
        assert_eq!(done.committed, stable);
        apply_write(&mut model, off, &data);
        plane.snapshot().fua_writes
    };
    assert_eq!(write(0, 4 * a as usize, Stable::Unstable), 0);
    assert_eq!(write(0, 2 * a as usize, Stable::DataSync), 1);
    assert_eq!(write(4 * a, a as usize, Stable::FileSync), 2);
    assert_eq!(write(a + 7, 100, Stable::DataSync), 2);
    assert_eq!(write(8 * a + 1, 3 * a as usize, Stable::FileSync), 2);
    verify(&plane, &file, &model, a, "fua");
}

/// Asserts two byte strings are equal, reporting the first difference
/// instead of dumping megabytes.
#[track_caller]
fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: first difference at {i}: got {} want {} (lengths {} / {})",
            got[i],
            want[i],
            got.len(),
            want.len()
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
}

/// Checks the whole file, its size (kernel and data plane) and a set of
/// reads around block boundaries and EOF against `model`.
#[track_caller]
fn verify(plane: &DataPlane, file: &DataFile, model: &[u8], a: u64, what: &str) {
    let len = model.len() as u64;
    assert_eq!(fs_size(file), len, "{what}: kernel file size");
    assert_eq!(file.size().unwrap(), len, "{what}: data-plane file size");
    assert_bytes(&read_all(plane, file), model, what);
    let reads = [
        (0, 1),
        (a - 1, 2),
        (a, a as u32),
        (a + 1, 3 * a as u32),
        (len.saturating_sub(1), 10),
        (len.saturating_sub(5000), 10_000),
        (len, 10),
        (len + a + 5, 10),
        (0, len as u32 + 100),
        (a / 2, 0),
    ];
    for (off, count) in reads {
        let count = count.min(1 << 20);
        let r = read_at(plane, file, off, count).unwrap();
        let end = (off + count as u64).min(len).max(off);
        let want = if off < len {
            &model[off as usize..end as usize]
        } else {
            &[][..]
        };
        assert_bytes(r.data(), want, &format!("{what}: read {count} at {off}"));
        assert_eq!(r.eof(), end >= len, "{what}: eof of read {count} at {off}");
    }
}

fn apply_write(model: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if model.len() < end {
        model.resize(end, 0);
    }
    model[off as usize..end].copy_from_slice(data);
}

fn write_model(
    plane: &DataPlane,
    file: &DataFile,
    model: &mut Vec<u8>,
    off: u64,
    len: usize,
    salt: u8,
) {
    let data = pattern_bytes(off, len, salt);
    let done = write_at(plane, file, off, &data, Stable::Unstable)
        .unwrap_or_else(|e| panic!("write {len} at {off}: {e}"));
    assert_eq!(done.count, len);
    if len > 0 {
        apply_write(model, off, &data);
    }
}

/// The largest alignment unit the file's direct I/O works in (at least a
/// page, so buffered files get the same boundary cases).
fn unit(file: &DataFile) -> u64 {
    let dio = file.dio_align();
    u64::from(dio.write_align().max(dio.read_align())).max(4096)
}

fn check_counters(plane: &DataPlane, file: &DataFile, read_mode: Mode, write_mode: Mode) {
    let c = plane.snapshot();
    assert_eq!(c.direct_einval, 0, "EINVAL from direct I/O");
    assert_eq!(c.short_writes, 0);
    assert_eq!(c.errors, 0);
    if file.is_direct_capable() {
        assert_eq!(c.no_direct_fallbacks, 0);
        if write_mode == Mode::Direct {
            assert!(
                c.buffered_edges + c.buffered_misaligned > 0,
                "misaligned writes went through the page cache (edges or whole)"
            );
            assert!(c.write.direct.ops > 0);
        }
        if read_mode == Mode::Direct {
            assert!(c.expanded_reads > 0, "misaligned reads were expanded");
            assert!(c.read.direct.ops > 0);
        }
    } else if read_mode == Mode::Direct || write_mode == Mode::Direct {
        assert!(
            c.no_direct_fallbacks > 0,
            "a non-DIO file is served buffered"
        );
        assert_eq!(c.read.direct.ops + c.write.direct.ops, 0);
    }
    if read_mode == Mode::DontCache || write_mode == Mode::DontCache {
        let dontcache = c.read.dontcache.ops + c.write.dontcache.ops;
        assert!(
            dontcache > 0 || c.dontcache_fallbacks > 0,
            "dontcache used or its fallback counted"
        );
    }
}

/// Where to write, given the current file length and the alignment unit.
type PlaceWrite = fn(u64, u64) -> (u64, usize);

fn boundary_cases(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    let file = open_data_file(&fs.path(&format!("bounds-{name}")));
    let plane = plane(read_mode, write_mode);
    let a = unit(&file);
    let au = a as usize;
    let mut model = Vec::new();
    let fixed: [(u64, usize); 12] = [
        (100, 200),            // inside one block, extending an empty file
        (a - 100, 200),        // crossing one boundary
        (a + 17, 5 * au + 33), // many blocks, both ends misaligned
        (2 * a, 2 * au),       // aligned
        (8 * a, au + 5),       // aligned start, misaligned end
        (10 * a + 5, au - 5),  // misaligned start, aligned end
        (12 * a, au),          // exactly one block
        (a - 1, 1),            // last byte of a block
        (a, 1),                // first byte of a block
        (3 * a + 1, 0),        // empty write
        (0, 1),                // first byte of the file
        (5 * a - 3, 7),        // tiny write across a boundary
    ];
    for (i, (off, len)) in fixed.into_iter().enumerate() {
        write_model(&plane, &file, &mut model, off, len, i as u8);
        verify(
            &plane,
            &file,
            &model,
            a,
            &format!("{name}: write {len} at {off}"),
        );
    }
    let eof_cases: [(&str, PlaceWrite); 7] = [
        ("at EOF", |len, _| (len, 123)),
        ("straddling EOF", |len, a| (len - 10, 2 * a as usize)),
        ("past EOF (hole)", |len, a| (len + 3 * a + 7, 100)),
        ("inside the hole", |len, a| (len - 2 * a - 300, 50)),
        ("aligned past EOF", |len, a| ((len / a + 2) * a, a as usize)),
        ("ending exactly at EOF", |len, _| (len - 77, 77)),
        ("large misaligned", |len, a| {
            (len / 2 + 3, 100 * a as usize + 11)
        }),
    ];
    for (i, (what, case)) in eof_cases.into_iter().enumerate() {
        let (off, len) = case(model.len() as u64, a);
        write_model(&plane, &file, &mut model, off, len, i as u8 + 1);
        verify(
            &plane,
            &file,
            &model,
            a,
            &format!("{name}: {what}: {len} at {off}"),
        );
    }
    // Truncate down to a misaligned size, then write past it.
    let new_len = model.len() as u64 - a - 1000;
    plane.truncate(&file, new_len).unwrap();
    model.truncate(new_len as usize);
    verify(
        &plane,
        &file,
        &model,
        a,
        &format!("{name}: truncate to {new_len}"),
    );
    let off = new_len + 10;
    write_model(&plane, &file, &mut model, off, 30, 3);
    verify(
        &plane,
        &file,
        &model,
        a,
        &format!("{name}: write after truncate"),
    );
    // Truncate up, then a misaligned write inside the extension.
    let new_len = model.len() as u64 + 2 * a + 3;
    plane.truncate(&file, new_len).unwrap();
    model.resize(new_len as usize, 0);
    let off = new_len - a - 5;
    write_model(&plane, &file, &mut model, off, 9, 2);
    verify(
        &plane,
        &file,
        &model,
        a,
        &format!("{name}: write after truncate up"),
    );
    check_counters(&plane, &file, read_mode, write_mode);
}

/// Random writes, reads and truncates against the model.
fn random_ops(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    let file = open_data_file(&fs.path(&format!("random-{name}")));
    let plane = plane(read_mode, write_mode);
    random_ops_on(&plane, &file, Vec::new(), name);
}

/// 150 random operations on `file`, whose current contents are `model`.
fn random_ops_on(plane: &DataPlane, file: &DataFile, mut model: Vec<u8>, name: &str) {
    let a = unit(file);
    let mut rng = Rng::new(a ^ name.len() as u64);
    for step in 0..150 {
        let len = model.len() as u64;
        match rng.below(10) {
            0..=5 => {
                let off = rng.below(len + 3 * a + 1);
                let size = match rng.below(4) {
                    0 => rng.below(64) as usize + 1,
                    1 => rng.below(3 * a) as usize + 1,
                    2 => 47008,
                    _ => rng.below(300_000) as usize + 1,
                };
                write_model(plane, file, &mut model, off, size, step as u8);
            }
            6..=8 => {
                let off = rng.below(len + a + 1);
                let count = rng.below(3 * a + 1) as u32;
                let r = read_at(plane, file, off, count).unwrap();
                let end = (off + count as u64).min(len).max(off);
                let want = if off < len {
                    &model[off as usize..end as usize]
                } else {
                    &[][..]
                };
                assert_bytes(r.data(), want, &format!("{name} step {step}: read"));
                assert_eq!(r.eof(), end >= len);
            }
            _ => {
                let new_len = rng.below(len + 2 * a + 1);
                plane.truncate(file, new_len).unwrap();
                model.resize(new_len as usize, 0);
            }
        }
        if step % 30 == 29 {
            verify(plane, file, &model, a, &format!("{name} step {step}"));
        }
    }
    verify(plane, file, &model, a, &format!("{name} random end"));
    plane.commit(file, 0, 0).unwrap();
    assert_eq!(plane.snapshot().direct_einval, 0);
}

/// A small write far past EOF allocates only the blocks it touches.
fn holes_stay_holes(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    let file = open_data_file(&fs.path(&format!("holes-{name}")));
    let plane = plane(read_mode, write_mode);
    let off = (1 << 20) + 5;
    let data = pattern_bytes(off, 100, 0);
    write_at(&plane, &file, off, &data, Stable::FileSync).unwrap();
    let first_data = rustix::fs::seek(file.buffered_fd(), rustix::fs::SeekFrom::Data(0)).unwrap();
    assert!(
        first_data >= 1 << 20,
        "{name}: data found at {first_data}, below the write at {off}"
    );
    let r = read_at(&plane, &file, 0, 1 << 20).unwrap();
    assert_eq!(r.len(), 1 << 20);
    assert!(r.data().iter().all(|&b| b == 0));
    assert_eq!(fs_size(&file), off + 100);
}

/// Writers interleave fixed-size records into one file: record `i` of
/// writer `c` at `(i * writers + c) * record`. Then every byte and the
/// exact size are checked.
fn interleaved_records(
    fs: &LoopFs,
    read_mode: Mode,
    write_mode: Mode,
    name: &str,
    record: usize,
    writers: u64,
    per_writer: u64,
) {
    let file = Arc::new(open_data_file(&fs.path(name)));
    let plane = Arc::new(plane(read_mode, write_mode));
    write_interleaved(&plane, &file, record as u64, writers, per_writer);
    let total = writers * per_writer * record as u64;
    assert_eq!(fs_size(&file), total, "{name}: exact size");
    assert_bytes(
        &read_all(&plane, &file),
        &pattern_bytes(0, total as usize, 0),
        name,
    );
    assert_eq!(plane.snapshot().direct_einval, 0);
}

/// IOR-hard: 4 writers × 47008-byte records interleaved into one shared
/// file, while a reader checks that any record it reads is all or nothing
/// (never a mix of old and new blocks).
fn ior_hard(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    const RECORD: usize = 47008;
    const WRITERS: u64 = 4;
    const PER_WRITER: u64 = 12;
    let file = Arc::new(open_data_file(&fs.path(&format!("ior-{name}"))));
    let plane = Arc::new(plane(read_mode, write_mode));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (file, plane, done) = (file.clone(), plane.clone(), done.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(47008);
            let mut checked = 0u64;
            while !done.load(Ordering::Relaxed) || checked < 20 {
                let k = rng.below(WRITERS * PER_WRITER);
                let off = k * RECORD as u64;
                let r = read_at(&plane, &file, off, RECORD as u32).unwrap();
                let data = r.data();
                let whole = data == pattern_bytes(off, RECORD, 0).as_slice();
                let none = data.iter().all(|&b| b == 0);
                assert!(
                    whole || none,
                    "record {k} read half-written ({} bytes)",
                    data.len()
                );
                checked += 1;
            }
            checked
        })
    };
    write_interleaved(&plane, &file, RECORD as u64, WRITERS, PER_WRITER);
    done.store(true, Ordering::Relaxed);
    let checked = reader.join().unwrap();
    let total = WRITERS * PER_WRITER * RECORD as u64;
    assert_eq!(fs_size(&file), total, "{name}: exact size");
    assert_bytes(
        &read_all(&plane, &file),
        &pattern_bytes(0, total as usize, 0),
        name,
    );
    println!(
        "  {checked} concurrent record reads, {:?}",
        plane.snapshot()
    );
}

/// Phase 1: one thread overwrites the region below `LOW` with misaligned
/// writes (must survive exactly), one appends records above it, one
/// truncates (down and up, never below `LOW`). Phase 2: after the
/// truncates, two threads append interleaved records: the final size must
/// be exactly their end and every byte they wrote must be there.
fn extend_and_truncate(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    const LOW: u64 = 256 << 10;
    let file = Arc::new(open_data_file(&fs.path(&format!("trunc-{name}"))));
    let plane = Arc::new(plane(read_mode, write_mode));
    let mut base = Vec::new();
    write_model(&plane, &file, &mut base, 0, LOW as usize, 0);

    let overwriter = {
        let (file, plane) = (file.clone(), plane.clone());
        thread::spawn(move || {
            let mut model = base;
            let mut rng = Rng::new(1);
            for step in 0..120u32 {
                let len = rng.below(10_000) as usize + 1;
                let off = rng.below(LOW - len as u64);
                write_model(&plane, &file, &mut model, off, len, 1 + (step % 3) as u8);
            }
            model
        })
    };
    let appender = {
        let (file, plane) = (file.clone(), plane.clone());
        thread::spawn(move || {
            for k in 0..150u64 {
                let off = LOW + k * 1111;
                let data = pattern_bytes(off, 1111, 2);
                write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
            }
        })
    };
    let truncater = {
        let (file, plane) = (file.clone(), plane.clone());
        thread::spawn(move || {
            let mut rng = Rng::new(2);
            for i in 0..40 {
                let new_size = if i % 3 == 2 {
                    LOW + rng.below(2 << 20)
                } else {
                    LOW + rng.below(150 * 1111)
                };
                plane.truncate(&file, new_size).unwrap();
                thread::yield_now();
            }
        })
    };
    appender.join().unwrap();
    truncater.join().unwrap();
    let low_model = overwriter.join().unwrap();

    let phase2_start = file.size().unwrap();
    assert_eq!(fs_size(&file), phase2_start, "{name}: size after phase 1");
    const RECORD: u64 = 1500;
    let phase2: Vec<_> = (0..2u64)
        .map(|c| {
            let (file, plane) = (file.clone(), plane.clone());
            thread::spawn(move || {
                for i in 0..40u64 {
                    let off = phase2_start + (i * 2 + c) * RECORD;
                    let data = pattern_bytes(off, RECORD as usize, 3);
                    write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
                }
            })
        })
        .collect();
    for t in phase2 {
        t.join().unwrap();
    }
    let end = phase2_start + 80 * RECORD;
    assert_eq!(
        fs_size(&file),
        end,
        "{name}: exact size after racing appends"
    );
    assert_eq!(file.size().unwrap(), end);
    let all = read_all(&plane, &file);
    assert_eq!(all.len() as u64, end);
    assert_bytes(
        &all[..LOW as usize],
        &low_model,
        &format!("{name}: overwritten region"),
    );
    for (i, &b) in all[LOW as usize..phase2_start as usize].iter().enumerate() {
        let pos = LOW + i as u64;
        assert!(
            b == 0 || b == pattern(pos, 2),
            "{name}: byte at {pos} is {b}: neither zero nor appended data"
        );
    }
    assert_bytes(
        &all[phase2_start as usize..],
        &pattern_bytes(phase2_start, (80 * RECORD) as usize, 3),
        &format!("{name}: phase-2 appends"),
    );
    assert_eq!(plane.snapshot().direct_einval, 0);
}

/// While misaligned records are appended, another thread watches the
/// kernel's `i_size` (fstat): it must never exceed the end of the last
/// write issued. A block-rounded direct write followed by a trim would show
/// a size past the data for a moment, and a crash at that moment would keep
/// it (zeros past the real end of the file).
fn size_never_rounded_up(fs: &LoopFs, read_mode: Mode, write_mode: Mode, name: &str) {
    use std::sync::atomic::AtomicU64;
    const RECORD: u64 = 1000;
    const RECORDS: u64 = 1500;
    let file = Arc::new(open_data_file(&fs.path(&format!("eof-{name}"))));
    let plane = Arc::new(plane(read_mode, write_mode));
    let issued_end = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let observer = {
        let (file, issued_end, done) = (file.clone(), issued_end.clone(), done.clone());
        thread::spawn(move || {
            let mut checks = 0u64;
            while checks == 0 || !done.load(Ordering::Acquire) {
                let size = fs_size(&file);
                // Loaded after the size: covers every write that could
                // have produced it.
                let end = issued_end.load(Ordering::Acquire);
                assert!(
                    size <= end,
                    "i_size {size} is past the end {end} of every write issued"
                );
                checks += 1;
            }
            checks
        })
    };
    for k in 0..RECORDS {
        let off = k * RECORD;
        issued_end.store(off + RECORD, Ordering::Release);
        let data = pattern_bytes(off, RECORD as usize, 4);
        write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
    }
    done.store(true, Ordering::Release);
    let checks = observer.join().unwrap();
    assert!(checks > 0);
    assert_eq!(fs_size(&file), RECORD * RECORDS, "{name}: final size");
    let all = read_all(&plane, &file);
    assert_bytes(
        &all,
        &pattern_bytes(0, (RECORD * RECORDS) as usize, 4),
        &format!("{name}: appended records"),
    );
    if write_mode == Mode::Direct && file.is_direct_capable() {
        let c = plane.snapshot();
        assert!(
            c.buffered_edges + c.buffered_misaligned > 0,
            "{name}: tails past EOF go buffered"
        );
        assert!(
            c.write.direct.ops == RECORDS,
            "{name}: counted as direct writes"
        );
    }
}

#[test]
fn xfs_committed_misaligned_writes_survive_a_power_cut() {
    power_cut("xfs");
}

#[test]
fn ext4_committed_misaligned_writes_survive_a_power_cut() {
    power_cut("ext4");
}

/// Eight writers write IOR-hard records (47008 bytes, misaligned: edges
/// buffered, interiors direct) and a few misaligned overwrites, then
/// COMMIT; more records are appended without COMMIT; then the filesystem
/// is shut down without flushing its log and mounted again. Everything
/// committed must be there byte for byte; past it, the file must be a
/// prefix of what was written in which whole blocks may be zero (data that
/// did not reach the disk) but whose last block holds written data (no
/// zeros past the real end).
fn power_cut(kind: &'static str) {
    const RECORD: u64 = 47008;
    const WRITERS: u64 = 8;
    const PER_WRITER: u64 = 16;
    let Some(mut fs) = LoopFs::new(kind, 512) else {
        return;
    };
    let name = "powercut";
    let committed_end = WRITERS * PER_WRITER * RECORD;
    // The block checks below start at the committed end.
    assert_eq!(committed_end % 4096, 0);
    for cycle in 0..3 {
        let mut want = pattern_bytes(0, committed_end as usize, 0);
        let file = Arc::new(open_data_file(&fs.path(name)));
        if !file.is_direct_capable() {
            println!("skipped: {kind} files do not do direct I/O here");
            return;
        }
        let plane = Arc::new(plane(Mode::Direct, Mode::Direct));
        plane.truncate(&file, 0).unwrap();
        write_interleaved(&plane, &file, RECORD, WRITERS, PER_WRITER);
        // Misaligned overwrites of committed-to-be data, some inside one
        // block, some across several.
        let mut rng = Rng::new(cycle + 1);
        for _ in 0..20 {
            let len = rng.below(20_000) + 1;
            let off = rng.below(committed_end - len);
            let data = pattern_bytes(off, len as usize, 1 + cycle as u8);
            write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
            apply_write(&mut want, off, &data);
        }
        plane.commit(&file, 0, 0).unwrap();
        // Uncommitted appends, then the power cut. An fsync of another
        // file forces the filesystem's log now and then, so some of the
        // appends' size changes reach the disk without their edge blocks.
        let extra = 6 + cycle * 5;
        let forcer = std::fs::File::create(fs.path("log-forcer")).unwrap();
        for k in 0..extra {
            let off = committed_end + k * RECORD;
            let data = pattern_bytes(off, RECORD as usize, 0);
            write_at(&plane, &file, off, &data, Stable::Unstable).unwrap();
            if k % 3 == cycle % 3 {
                std::io::Write::write_all(&mut &forcer, b"x").unwrap();
                forcer.sync_all().unwrap();
            }
        }
        drop(forcer);
        fs.shutdown().unwrap();
        drop(file);
        drop(plane);
        fs.remount().unwrap();

        let got = std::fs::read(fs.path(name)).unwrap();
        let size = got.len() as u64;
        println!(
            "{kind} cycle {cycle}: {committed_end} committed, {} written, {size} after the power cut",
            committed_end + extra * RECORD
        );
        assert!(
            size >= committed_end,
            "{kind}: committed data lost: size {size}"
        );
        assert_bytes(
            &got[..committed_end as usize],
            &want,
            &format!("{kind} cycle {cycle}: committed data"),
        );
        let appended = pattern_bytes(committed_end, (extra * RECORD) as usize, 0);
        assert!(size <= committed_end + extra * RECORD);
        let block = 4096usize;
        let tail = &got[committed_end as usize..];
        for start in (0..tail.len()).step_by(block) {
            let got_block = &tail[start..(start + block).min(tail.len())];
            let want_block = &appended[start..start + got_block.len()];
            if got_block != want_block {
                // Uncommitted data may be lost, also in part of a block: a
                // block holding the buffered tail of one record and the
                // head of the next can reach the disk with only the first
                // (written back early, under memory pressure, before the
                // second was written). What may never appear is a byte
                // nobody wrote.
                let at = committed_end + start as u64;
                assert!(
                    got_block
                        .iter()
                        .zip(want_block)
                        .all(|(&g, &w)| g == w || g == 0)
                        && at + (block as u64) < size,
                    "{kind} cycle {cycle}: block at {at} of {size}: bytes nobody wrote, or \
                     a lost last block"
                );
            }
        }
        if size > committed_end {
            let last = ((size - 1) / block as u64 * block as u64).max(committed_end);
            let from = (last - committed_end) as usize;
            assert_eq!(
                &tail[from..],
                &appended[from..tail.len()],
                "{kind} cycle {cycle}: the file ends in bytes nobody wrote (size {size})"
            );
        }
        std::fs::remove_file(fs.path(name)).unwrap();
    }
}
