//! Integrity (CRC32C per 4 KiB block) through the data plane, timed, on a
//! directory of a real filesystem (a benchmark tool, not a test): the cost
//! of checksums on 1 MiB direct writes and reads, and computing a write's
//! checksums *overlapped* with the data write against *before* it (seed
//! 003).
//!
//! For each of `off`, `sequential` (checksums first, then the write) and
//! `overlapped` (the write while a worker checksums): `THREADS` threads each
//! write their own part of one file in 1 MiB UNSTABLE direct WRITEs, then
//! one COMMIT; then the file is read back in 1 MiB direct READs (verified
//! when integrity is on). Printed: MiB/s, and the process's CPU seconds
//! (user + system) per GiB. Each configuration runs `REPS` times,
//! interleaved, and the medians are printed.
//!
//! Usage (as root, e.g. on XFS on a 4096-byte-sector loop device):
//! `cargo run --release -p dionfs-dataplane --example integritybench -- DIR [MiB] [threads] [reps]`

use std::fs::OpenOptions;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_dataplane::{DataConfig, DataFile, DataPlane, Mode, Stable};
use dionfs_integrity::{FileKey, Order, Store};

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args
        .next()
        .expect("usage: integritybench DIR [MiB] [threads] [reps] | --model");
    if first == "--model" {
        model();
        return;
    }
    let dir = std::path::PathBuf::from(first);
    let mib: u64 = args.next().map_or(1024, |s| s.parse().expect("MiB"));
    let threads: u64 = args.next().map_or(1, |s| s.parse().expect("threads"));
    let reps: usize = args.next().map_or(3, |s| s.parse().expect("reps"));
    let configs: [(&str, Option<Order>); 3] = [
        ("off", None),
        ("sequential", Some(Order::Sequential)),
        ("overlapped", Some(Order::Overlapped)),
    ];
    let mut results: Vec<Vec<[f64; 4]>> = vec![Vec::new(); configs.len()];
    for rep in 0..reps {
        for (i, (name, order)) in configs.iter().enumerate() {
            let r = run(&dir, *order, mib, threads);
            println!(
                "rep {rep} {name:>10}: write {:7.1} MiB/s {:5.2} CPU s/GiB   read {:7.1} MiB/s {:5.2} CPU s/GiB",
                r[0], r[1], r[2], r[3]
            );
            results[i].push(r);
        }
    }
    println!("\nmedians of {reps} ({mib} MiB, {threads} writer thread(s), 1 MiB direct I/O):");
    println!("| integrity | write MiB/s | write CPU s/GiB | read MiB/s | read CPU s/GiB |");
    println!("|---|---|---|---|---|");
    for ((name, _), rs) in configs.iter().zip(&results) {
        let m = |k: usize| {
            let mut v: Vec<f64> = rs.iter().map(|r| r[k]).collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        println!(
            "| {name} | {:.1} | {:.2} | {:.1} | {:.2} |",
            m(0),
            m(1),
            m(2),
            m(3)
        );
    }
}

/// The overlap alone, without a device's noise: 1 MiB "writes" that take
/// a fixed time (a sleep standing for the device), checksummed before or
/// alongside, 500 times each; the time per write.
fn model() {
    let data: Vec<u8> = (0..1 << 20).map(|i| (i * 7 % 251) as u8).collect();
    let crc_alone = {
        let t0 = Instant::now();
        let mut out = Vec::new();
        for _ in 0..200 {
            out.clear();
            dionfs_integrity::block_crcs(&data, &mut out);
        }
        t0.elapsed() / 200
    };
    println!(
        "CRC32C of 1 MiB: {:.0} us ({:.1} GB/s)",
        crc_alone.as_secs_f64() * 1e6,
        (1 << 20) as f64 / crc_alone.as_secs_f64() / 1e9
    );
    println!("| device time per 1 MiB write | no checksum | sequential | overlapped |");
    println!("|---|---|---|---|");
    for device_us in [100u64, 500, 2000] {
        let device = Duration::from_micros(device_us);
        let per = |order: Option<Order>| {
            let c = dionfs_integrity::Checksummer::new(2, order.unwrap_or(Order::Sequential));
            let t0 = Instant::now();
            for _ in 0..500 {
                match order {
                    None => std::thread::sleep(device),
                    Some(_) => {
                        let _ = c.write_with_crcs(&data, || std::thread::sleep(device));
                    }
                }
            }
            t0.elapsed().as_secs_f64() * 1e6 / 500.0
        };
        println!(
            "| {device_us} us | {:.0} us | {:.0} us | {:.0} us |",
            per(None),
            per(Some(Order::Sequential)),
            per(Some(Order::Overlapped))
        );
    }
}

/// User + system CPU time of this process (/proc/self/stat, clock ticks).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
    // Fields after the command name (which ends with ')'): utime is the
    // 12th, stime the 13th.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = rustix::param::clock_ticks_per_second();
    Duration::from_secs_f64((f[11] + f[12]) as f64 / ticks as f64)
}

/// [write MiB/s, write CPU s/GiB, read MiB/s, read CPU s/GiB]
fn run(dir: &Path, order: Option<Order>, mib: u64, threads: u64) -> [f64; 4] {
    let path = dir.join("integritybench.data");
    let state = dir.join("integritybench.state");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&state);
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("open");
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .expect("open O_DIRECT");
    let store = order.map(|o| Store::open(&state, Store::DEFAULT_CACHE_PAGES, o).expect("store"));
    let sums = store.as_ref().map(|s| {
        let key = FileKey {
            fs_id: 1,
            handle_type: 1,
            handle: b"integritybench".to_vec(),
        };
        s.open_file(key, buffered.as_fd()).expect("sums")
    });
    let mut file = DataFile::new(buffered.into(), Some(direct.into())).expect("DataFile");
    if let Some(sums) = sums {
        file = file.with_integrity(sums);
    }
    let file = Arc::new(file);
    let plane = Arc::new(
        DataPlane::new(DataConfig {
            read_mode: Mode::Direct,
            write_mode: Mode::Direct,
            max_transfer: 1 << 20,
            read_buffers: 16,
            write_buffers: 16,
            small_buffers: 8,
            large_read_depth: dionfs_dataplane::LARGE_READ_DEPTH,
        })
        .expect("plane"),
    );
    let per_thread = mib / threads;
    let bytes = (per_thread * threads) << 20;
    let gib = bytes as f64 / (1u64 << 30) as f64;

    let cpu0 = cpu();
    let t0 = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (file, plane) = (file.clone(), plane.clone());
            std::thread::spawn(move || {
                let data: Vec<u8> = (0..1 << 20)
                    .map(|i| (i * 7 % 251) as u8 + t as u8)
                    .collect();
                for i in 0..per_thread {
                    let off = (t * per_thread + i) << 20;
                    let buf = plane.write_pool().get_blocking().expect("buffer");
                    let mut wb = plane.write_buffer(&file, buf, off, 1 << 20).expect("wb");
                    wb.payload_mut().copy_from_slice(&data);
                    plane.write(&file, wb, Stable::Unstable).expect("write");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("writer");
    }
    plane.commit(&file, 0, 0).expect("commit");
    let write_time = t0.elapsed();
    let write_cpu = cpu() - cpu0;

    let cpu0 = cpu();
    let t0 = Instant::now();
    let readers: Vec<_> = (0..threads)
        .map(|t| {
            let (file, plane) = (file.clone(), plane.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let off = (t * per_thread + i) << 20;
                    let buf = plane.read_pool().get_blocking().expect("buffer");
                    let r = plane.read(&file, buf, off, 1 << 20).expect("read");
                    assert_eq!(r.len(), 1 << 20);
                }
            })
        })
        .collect();
    for r in readers {
        r.join().expect("reader");
    }
    let read_time = t0.elapsed();
    let read_cpu = cpu() - cpu0;
    drop(file);
    drop(store);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&state);
    let mibs = bytes as f64 / (1 << 20) as f64;
    [
        mibs / write_time.as_secs_f64(),
        write_cpu.as_secs_f64() / gib,
        mibs / read_time.as_secs_f64(),
        read_cpu.as_secs_f64() / gib,
    ]
}
