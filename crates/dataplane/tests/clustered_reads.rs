//! Small direct-mode READs that cluster (`cluster.rs`) on XFS and ext4
//! loop devices with 4096-byte sectors: eight threads reading a shared
//! file back in IOR-hard's shape (47008-byte records, each thread every
//! eighth) get exactly the file's bytes, mostly through the page cache;
//! a WRITE made meanwhile (aligned direct, small buffered) is read back
//! at once; the page cache the cluster leaves behind stays bounded and is
//! dropped once the readers are gone; random small READs stay direct.
//!
//! Needs root (loop devices, mount); without it each test prints
//! "skipped: ..." and passes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use dionfs_dataplane::{DataFile, DataPlane, Mode, ReadAttempt, Stable, READAHEAD_MAX_AGE};
use dionfs_testfs::wait_until;

test_each_fs!(run_fs: xfs, ext4);

const RECORD: u64 = 47008;
const READERS: u64 = 8;
const PER_READER: u64 = 300;

fn run_fs(kind: &'static str) {
    let Some(fs) = LoopFs::new(kind, 512) else {
        return;
    };
    let plane = Arc::new(plane(Mode::Direct, Mode::Direct));
    let file = Arc::new(open_data_file(&fs.path("ior")));
    if !file.is_direct_capable() {
        println!("skipped: {kind} files do no direct I/O here");
        return;
    }
    let len = (RECORD * READERS * PER_READER) as usize;
    let mut model = pattern_bytes(0, len, 7);
    for (i, chunk) in model.chunks(1 << 20).enumerate() {
        write_at(&plane, &file, (i << 20) as u64, chunk, Stable::FileSync).unwrap();
    }
    let path = fs.path("ior");
    let cached = || resident_bytes(&path);
    assert!(cached() < 1 << 20, "{kind}: direct writes cached nothing");

    // Eight readers, reader c reading records c, c + 8, ... as IOR does;
    // kept within 10 records of each other (the pace NFS clients keep
    // each other at through the server; threads here could drift apart by
    // the whole file).
    let read_back = |model: &[u8]| {
        let pace = Arc::new(std::sync::Barrier::new(READERS as usize));
        let threads: Vec<_> = (0..READERS)
            .map(|c| {
                let (plane, file) = (plane.clone(), file.clone());
                let model = model.to_vec();
                let path = path.clone();
                let pace = pace.clone();
                std::thread::spawn(move || {
                    let mut most_cached = 0;
                    for i in 0..PER_READER {
                        if i % 10 == 0 {
                            pace.wait();
                        }
                        let at = (i * READERS + c) * RECORD;
                        let got = read_at(&plane, &file, at, RECORD as u32).unwrap();
                        let want = &model[at as usize..(at + RECORD) as usize];
                        assert!(got.data() == want, "{kind}: record {i} of reader {c}");
                        if i % 50 == 0 {
                            most_cached = most_cached.max(resident_bytes(&path));
                        }
                    }
                    most_cached
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .max()
            .unwrap()
    };
    // Not a cluster yet: a READ may try the ring on its task.
    assert!(!plane.read_leaves_task(&file), "{kind}: before the readers");
    assert!(
        !plane.has_clusters(),
        "{kind}: no cluster before the readers"
    );
    let before = plane.counters().snapshot();
    let most_cached = read_back(&model);
    let after = plane.counters().snapshot();
    assert!(plane.has_clusters(), "{kind}: a cluster after the readers");
    let reads = READERS * PER_READER;
    let clustered = after.clustered_reads - before.clustered_reads;
    assert!(
        clustered > reads / 2,
        "{kind}: {clustered} of {reads} READs through the page cache"
    );
    // Bounded: what the cluster keeps behind its front, plus the kernel's
    // readahead ahead of it and the folios at the edges.
    assert!(
        most_cached < 56 << 20,
        "{kind}: {most_cached} bytes cached while reading a {len}-byte file"
    );
    on_the_task(kind, &plane, &file, &model);

    // Writes while the file is a cluster are read back at once.
    let aligned = pattern_bytes(8192, 8192, 21);
    write_at(&plane, &file, 8192, &aligned, Stable::Unstable).unwrap();
    model[8192..16384].copy_from_slice(&aligned);
    let small = pattern_bytes(RECORD + 5, 1000, 22);
    write_at(&plane, &file, RECORD + 5, &small, Stable::Unstable).unwrap();
    model[RECORD as usize + 5..RECORD as usize + 1005].copy_from_slice(&small);
    let big = pattern_bytes(3 << 20, 1 << 20, 23);
    write_at(&plane, &file, 3 << 20, &big, Stable::Unstable).unwrap();
    model[3 << 20..4 << 20].copy_from_slice(&big);
    read_back(&model);
    assert_eq!(read_all(&plane, &file), model, "{kind}: whole file");

    // Readers gone: once its chunks are old enough, the sweep drops what
    // the cluster read.
    wait_until(
        || {
            plane.expire_readahead();
            cached() < 4 << 20
        },
        Duration::from_secs(10) + READAHEAD_MAX_AGE,
        &format!("{kind}: the sweep to drop the cluster's pages"),
    );
    assert!(cached() < 4 << 20, "{kind}: {} bytes left cached", cached());

    // Random small READs, several at once, stay direct.
    let before = plane.counters().snapshot();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (plane, file) = (plane.clone(), file.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(t + 1);
                for _ in 0..200 {
                    let at = rng.below(len as u64 / 4096) * 4096;
                    read_at(&plane, &file, at, 4096).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let after = plane.counters().snapshot();
    // A file closed while its small READs cluster (the open-file cache let
    // it go) drops the cluster's pages then: no sweep reaches it later.
    read_back(&model);
    assert!(
        cached() > 4 << 20,
        "{kind}: the cluster's pages before the close"
    );
    drop(file);
    assert!(
        cached() < 4 << 20,
        "{kind}: {} bytes left cached after the close",
        cached()
    );
    // The file is small next to REACH, so random READs land near each
    // other: they may cluster, but only after a streak; a file far larger
    // than REACH never does (unit tests in cluster.rs).
    assert!(after.read.direct.ops > before.read.direct.ops, "{kind}");
}

/// A cluster's READs try the ring path on the caller's task, as any
/// direct READ: one near the front whose pages are cached is read from
/// the page cache there; one whose pages are not goes to the blocking path
/// (or, if the kernel's readahead it started was quick, is read there
/// too); a reader far behind the front is read direct, on the ring.
fn on_the_task(kind: &str, plane: &DataPlane, file: &DataFile, model: &[u8]) {
    assert!(
        !plane.read_leaves_task(file),
        "{kind}: a cluster stays on the task"
    );
    let rt = runtime();
    let ring = ring(&rt);
    let attempt = |at: u64| {
        rt.block_on(async {
            let buf = plane.read_pool().get().await.unwrap();
            let seen = file.see_size().unwrap();
            plane
                .read_without_blocking(&ring, file, buf, at, RECORD as u32, seen)
                .await
        })
    };
    let want = |at: u64| &model[at as usize..(at + RECORD) as usize];
    // The last record of reader 0: just read, cached.
    let last = (PER_READER - 1) * READERS * RECORD;
    let before = plane.counters().snapshot();
    let ReadAttempt::Done(got) = attempt(last) else {
        panic!("{kind}: a cached record of a cluster left the task");
    };
    assert!(
        got.unwrap().data() == want(last),
        "{kind}: record at {last}"
    );
    let after = plane.counters().snapshot();
    assert_eq!(after.clustered_reads, before.clustered_reads + 1, "{kind}");
    assert_eq!(after.read.direct.ops, before.read.direct.ops, "{kind}");
    // Its pages dropped (a direct write of the same bytes), a record 2 MiB
    // below the front.
    let from = (last - (2 << 20)) / (1 << 20) * (1 << 20);
    let bytes = &model[from as usize..(from + (1 << 20)) as usize];
    write_at(plane, file, from, bytes, Stable::Unstable).unwrap();
    let at = from.div_ceil(RECORD) * RECORD;
    match attempt(at) {
        ReadAttempt::Done(got) => assert!(got.unwrap().data() == want(at), "{kind}: at {at}"),
        ReadAttempt::Blocking(buf) => {
            drop(buf);
            let got = read_at(plane, file, at, RECORD as u32).unwrap();
            assert!(got.data() == want(at), "{kind}: at {at}, blocking");
        }
    }
    // Record 0: far behind the front, read direct on the ring.
    let before = plane.counters().snapshot();
    let ReadAttempt::Done(got) = attempt(0) else {
        panic!("{kind}: a reader far behind the front left the task");
    };
    assert!(got.unwrap().data() == want(0), "{kind}: record 0");
    let after = plane.counters().snapshot();
    assert_eq!(after.read.direct.ops, before.read.direct.ops + 1, "{kind}");
    assert_eq!(after.clustered_reads, before.clustered_reads, "{kind}");
}

/// Bytes of `path` in the page cache (util-linux `fincore`).
fn resident_bytes(path: &std::path::Path) -> u64 {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .expect("fincore (util-linux)");
    assert!(out.status.success(), "fincore: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}
