//! Direct-mode WRITE shapes through the data plane, timed, on a directory
//! of a real filesystem (a benchmark tool, not a test):
//!
//! - `ior`: IOR-hard: 8 threads write 47008-byte records into one shared
//!   file, record `i` of thread `c` at `(i * 8 + c) * 47008`, UNSTABLE,
//!   then one COMMIT; and the same with aligned 49152-byte records.
//! - `small`: 1 KiB UNSTABLE overwrites at offset 0 of a 10 MiB file, one
//!   at a time: latency per call.
//! - `sync`: 1 MiB DATA_SYNC writes, aligned and misaligned by 100 bytes,
//!   one at a time: latency per call.
//!
//! Also printed: the file's pages left in the page cache after COMMIT
//! (mincore), the growth of `Cached` in /proc/meminfo, the sectors the
//! filesystem's block device read (from /sys/dev/block), and the data-plane
//! counters.
//!
//! Usage (as root, on e.g. XFS on a 4096-byte-sector loop device):
//! `cargo run --release -p dionfs-dataplane --example writebench -- DIR [ior|small|sync]...`

use std::fs::OpenOptions;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_dataplane::{DataConfig, DataFile, DataPlane, Mode, Stable};
use dionfs_sys::io::resident_pages;

const THREADS: u64 = 8;
const IOR_BYTES: u64 = 512 << 20;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: writebench DIR [ior|small|sync]..."),
    );
    let mut which: Vec<String> = args.collect();
    if which.is_empty() {
        which = vec!["ior".into(), "small".into(), "sync".into()];
    }
    for what in &which {
        match what.as_str() {
            "ior" => {
                ior(&dir, 47008);
                ior(&dir, 49152);
            }
            "small" => small_overwrites(&dir),
            "sync" => {
                sync_writes(&dir, 0);
                sync_writes(&dir, 100);
            }
            other => panic!("unknown benchmark {other}"),
        }
    }
}

fn plane() -> DataPlane {
    DataPlane::new(DataConfig {
        read_mode: Mode::Direct,
        write_mode: Mode::Direct,
        max_transfer: 1 << 20,
        read_buffers: 16,
        write_buffers: 32,
        small_buffers: 8,
        large_read_depth: dionfs_dataplane::LARGE_READ_DEPTH,
    })
    .expect("plane")
}

/// A fresh file opened as the filesystem backend opens it.
fn open_fresh(path: &Path) -> DataFile {
    let _ = std::fs::remove_file(path);
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("open");
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open O_DIRECT");
    let file = DataFile::new(buffered.into(), Some(direct.into())).expect("DataFile");
    assert!(
        file.is_direct_capable(),
        "{}: no direct I/O",
        path.display()
    );
    file
}

fn write(plane: &DataPlane, file: &DataFile, offset: u64, data: &[u8], stable: Stable) {
    let buf = plane.write_pool().get_blocking().expect("buffer");
    let mut wb = plane
        .write_buffer(file, buf, offset, data.len())
        .expect("write buffer");
    wb.payload_mut().copy_from_slice(data);
    plane.write(file, wb, stable).expect("write");
}

/// `Cached:` of /proc/meminfo in KiB.
fn cached_kib() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    info.lines()
        .find_map(|l| l.strip_prefix("Cached:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("Cached: in /proc/meminfo")
}

/// Sectors read so far by the block device holding `dir` (field 3 of
/// /sys/dev/block/MAJ:MIN/stat), if it can be found.
fn device_sectors_read(dir: &Path) -> Option<u64> {
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    stat.split_whitespace().nth(2)?.parse().ok()
}

fn mib_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / elapsed.as_secs_f64()
}

fn ior(dir: &Path, record: usize) {
    let path = dir.join(format!("ior-{record}"));
    let file = Arc::new(open_fresh(&path));
    let plane = Arc::new(plane());
    let per_thread = IOR_BYTES / record as u64 / THREADS;
    let total = per_thread * THREADS * record as u64;
    let cached_before = cached_kib();
    let read_before = device_sectors_read(dir);
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|c| {
            let (file, plane) = (file.clone(), plane.clone());
            std::thread::spawn(move || {
                let data: Vec<u8> = (0..record).map(|i| (i % 251) as u8 + 1).collect();
                for i in 0..per_thread {
                    let off = (i * THREADS + c) * record as u64;
                    write(&plane, &file, off, &data, Stable::Unstable);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer");
    }
    let written = started.elapsed();
    let cached_peak = cached_kib();
    plane.commit(&file, 0, 0).expect("commit");
    let elapsed = started.elapsed();
    let (resident, pages) = resident_pages(file.buffered_fd(), total).expect("mincore");
    let cached_after = cached_kib();
    let read_after = device_sectors_read(dir);
    println!(
        "ior record {record}: {total} bytes, 8 threads: {:.0} MiB/s incl. commit \
         ({:.0} MiB/s before commit; {:.2}s); after commit {resident}/{pages} pages cached, \
         Cached +{} KiB before commit, +{} KiB after; device read {} sectors",
        mib_per_s(total, elapsed),
        mib_per_s(total, written),
        elapsed.as_secs_f64(),
        cached_peak as i64 - cached_before as i64,
        cached_after as i64 - cached_before as i64,
        match (read_before, read_after) {
            (Some(b), Some(a)) => (a - b).to_string(),
            _ => "?".into(),
        },
    );
    println!("  counters: {:?}", plane.snapshot());
    drop(file);
    let _ = std::fs::remove_file(&path);
}

/// Latency summary of `samples` (sorted in place): mean, p50, p99 in µs.
fn summary(samples: &mut [Duration]) -> String {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().map(|&d| us(d)).sum::<f64>() / samples.len() as f64;
    let at = |q: f64| us(samples[((samples.len() - 1) as f64 * q) as usize]);
    format!(
        "mean {mean:.1} µs, p50 {:.1} µs, p99 {:.1} µs ({} calls)",
        at(0.5),
        at(0.99),
        samples.len()
    )
}

fn small_overwrites(dir: &Path) {
    let path = dir.join("small");
    let file = open_fresh(&path);
    let plane = plane();
    let chunk = vec![7u8; 1 << 20];
    for i in 0..10u64 {
        write(&plane, &file, i << 20, &chunk, Stable::Unstable);
    }
    plane.commit(&file, 0, 0).expect("commit");
    let data = vec![9u8; 1024];
    let read_before = device_sectors_read(dir);
    let mut samples = Vec::new();
    for _ in 0..5000 {
        let t = Instant::now();
        write(&plane, &file, 0, &data, Stable::Unstable);
        samples.push(t.elapsed());
    }
    let read_after = device_sectors_read(dir);
    println!(
        "1 KiB UNSTABLE overwrites at offset 0 of 10 MiB: {}; device read {} sectors",
        summary(&mut samples),
        match (read_before, read_after) {
            (Some(b), Some(a)) => (a - b).to_string(),
            _ => "?".into(),
        },
    );
    println!("  counters: {:?}", plane.snapshot());
    drop(file);
    let _ = std::fs::remove_file(&path);
}

fn sync_writes(dir: &Path, misalign: u64) {
    let path = dir.join("sync");
    let file = open_fresh(&path);
    let plane = plane();
    let data = vec![5u8; 1 << 20];
    // Overwrites of allocated blocks (the common FUA case: no metadata to
    // log), then appends.
    for i in 0..64u64 {
        write(&plane, &file, i << 20, &data, Stable::Unstable);
    }
    plane.commit(&file, 0, 0).expect("commit");
    for (what, base) in [("overwrite", 0u64), ("append", 64 << 20)] {
        let read_before = device_sectors_read(dir);
        let mut samples = Vec::new();
        let started = Instant::now();
        for i in 0..64u64 {
            let t = Instant::now();
            write(
                &plane,
                &file,
                base + (i << 20) + misalign,
                &data,
                Stable::DataSync,
            );
            samples.push(t.elapsed());
        }
        let elapsed = started.elapsed();
        let read_after = device_sectors_read(dir);
        println!(
            "1 MiB DATA_SYNC {what}s at offset mod 1 MiB = {misalign}: {:.0} MiB/s, {}; \
             device read {} sectors",
            mib_per_s(64 << 20, elapsed),
            summary(&mut samples),
            match (read_before, read_after) {
                (Some(b), Some(a)) => (a - b).to_string(),
                _ => "?".into(),
            },
        );
    }
    println!("  counters: {:?}", plane.snapshot());
    drop(file);
    let _ = std::fs::remove_file(&path);
}
