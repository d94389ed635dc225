//! NFSv4.1 READ and WRITE COMPOUNDs of the common shapes (SEQUENCE,
//! PUTFH, READ or WRITE, and a GETATTR after the WRITE as Linux sends)
//! on the connection's task, as v3's READ and WRITE: with the io_uring, a direct export's READs are read through the
//! ring (its `ring_reads` counter rises) and its aligned WRITEs written
//! through it (`ring_writes`); every read mode (buffered, dontcache,
//! direct), with integrity off and on, answers the file's bytes; a file
//! deleted behind the server's back is STALE and a squashed caller
//! without read permission ACCESS, on the task as on a blocking thread.

mod nfs4;

use std::os::unix::fs::PermissionsExt;

use dionfs_core::export::{ExportConfig, Integrity};
use dionfs_dataplane::Mode;
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, ChannelAttrs4, CompoundHead, GetattrArgs4, NfsFh4, Nfsstat4, PutfhArgs4,
    ReadArgs4, Res4, ResOp, StableHow4, StateId4, Utf8Str, WriteHead4,
};
use dionfs_xdr::{Decoder, Encode, Encoder};

use nfs4::client::{fore_attrs, sequence_op, Client, CompoundRes, Session};
use nfs4::TestServer;

const ANONYMOUS: StateId4 = StateId4 {
    seqid: 0,
    other: [0; 12],
};

/// A server with the io_uring serving one export `x` in `mode` (reads
/// and writes), with integrity as asked, holding file `f` of mode 0666
/// (the tests call as root, squashed to nobody) and `secret` of mode
/// 0600.
fn server(mode: Mode, integrity: bool) -> TestServer {
    TestServer::start_exports(
        |s| s.io_uring = true,
        |dir| {
            let path = dir.join("x");
            std::fs::create_dir(&path).unwrap();
            for (name, perm) in [("f", 0o666), ("secret", 0o600)] {
                std::fs::write(path.join(name), b"").unwrap();
                let perm = std::fs::Permissions::from_mode(perm);
                std::fs::set_permissions(path.join(name), perm).unwrap();
            }
            let mut x = ExportConfig::with_defaults(path);
            x.entries[0].options.secure = false;
            x.read_mode = mode;
            x.write_mode = mode;
            if integrity {
                x.integrity = Integrity::Crc32c;
            }
            vec![x]
        },
    )
}

/// The handle of `name` at the top of the export.
fn handle(server: &TestServer, name: &[u8]) -> NfsFh4 {
    let exports = server.server.exports();
    let x = &exports[0];
    let top = x.fs.resolve(x.fs.root_handle()).unwrap();
    let (node, _) = x.fs.lookup(&top, name).unwrap();
    NfsFh4::new(node.fh().to_vec()).unwrap()
}

fn session(server: &TestServer) -> (Client, Session) {
    let mut c = server.client();
    let attrs = ChannelAttrs4 {
        maxrequestsize: (1 << 20) + 4096,
        maxresponsesize: (1 << 20) + 4096,
        ..fore_attrs()
    };
    let s = c.session_with(b"on-task", attrs);
    (c, s)
}

/// SEQUENCE, PUTFH of `fh`, then `op` (a WRITE with `payload`).
fn call(c: &mut Client, s: &mut Session, fh: &NfsFh4, op: ArgOp, payload: &[u8]) -> CompoundRes {
    call_then(c, s, fh, op, payload, None)
}

/// [`call`], with the op `after` after `op` (and its payload) when given.
fn call_then(
    c: &mut Client,
    s: &mut Session,
    fh: &NfsFh4,
    op: ArgOp,
    payload: &[u8],
    after: Option<ArgOp>,
) -> CompoundRes {
    let seqid = s.next_seqid[0];
    let mut enc = Encoder::new();
    // An empty tag, as Linux sends: the fixed decode of the usual data
    // COMPOUNDs (`nfs4_data.rs` tags its own, for the general one).
    CompoundHead {
        tag: Utf8Str::from(""),
        minorversion: 1,
        numops: 3 + u32::from(after.is_some()),
    }
    .encode(&mut enc);
    sequence_op(s, 0, seqid, false).encode(&mut enc);
    ArgOp::Putfh(PutfhArgs4 { object: fh.clone() }).encode(&mut enc);
    op.encode(&mut enc);
    enc.opaque_fixed(payload);
    if let Some(after) = after {
        after.encode(&mut enc);
    }
    let xid = c.xid();
    let res = c.compound_raw(xid, &enc.into_vec());
    if matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
        s.next_seqid[0] = seqid.wrapping_add(1);
    }
    res
}

/// READ of `count` bytes at `offset`: its data and eof, or its status.
fn read(
    c: &mut Client,
    s: &mut Session,
    fh: &NfsFh4,
    offset: u64,
    count: u32,
) -> Result<(Vec<u8>, bool), Nfsstat4> {
    let op = ArgOp::Read(ReadArgs4 {
        stateid: ANONYMOUS,
        offset,
        count,
    });
    let res = call(c, s, fh, op, &[]);
    match res.results.last() {
        Some(ResOp::Read(Res4::Ok(ok))) => Ok((ok.data.clone(), ok.eof)),
        Some(ResOp::Read(Res4::Fail(status))) => Err(*status),
        other => panic!("no READ result: {other:?} ({:?})", res.statuses()),
    }
}

/// WRITE of `data` at `offset`, FILE_SYNC: how much it wrote.
fn write(c: &mut Client, s: &mut Session, fh: &NfsFh4, offset: u64, data: &[u8]) -> u32 {
    let head = WriteHead4 {
        stateid: ANONYMOUS,
        offset,
        stable: StableHow4::FileSync,
        data_len: data.len() as u32,
    };
    let res = call(c, s, fh, ArgOp::Write(head), data);
    match res.results.last() {
        Some(ResOp::Write(Res4::Ok(ok))) => ok.count,
        other => panic!("WRITE failed: {other:?} ({:?})", res.statuses()),
    }
}

fn counters(server: &TestServer) -> dionfs_dataplane::CounterSnapshot {
    server.server.exports()[0].data.snapshot()
}

/// Bytes that differ at every position (a misplaced block shows).
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The reads of every test: misaligned offsets and sizes, a block, a
/// large read, one across the end and one past it.
const READS: [(u64, u32); 8] = [
    (0, 1),
    (4093, 511),
    (4096, 4096),
    (12_345, 47_008),
    (65_536, 262_144),
    (700_000, 100_000),
    (1_048_576 - 3, 10),
    (2_000_000, 4096),
];

/// Writes 1 MiB (aligned, 64 KiB at a time) over v4, then reads it back
/// over v4 at `READS`, checking every byte and eof. The ring's read and
/// write counts, before and after.
fn write_then_read(server: &TestServer) -> (u64, u64) {
    let fh = handle(server, b"f");
    let (mut c, mut s) = session(server);
    let data = pattern(1 << 20, 42);
    let before = counters(server);
    for (i, chunk) in data.chunks(65_536).enumerate() {
        let n = write(&mut c, &mut s, &fh, (i * 65_536) as u64, chunk);
        assert_eq!(n as usize, chunk.len());
    }
    let mid = counters(server);
    for (offset, count) in READS {
        let (got, eof) = read(&mut c, &mut s, &fh, offset, count).unwrap();
        let start = (offset as usize).min(data.len());
        let end = (offset as usize + count as usize).min(data.len());
        assert_eq!(got, &data[start..end], "READ of {count} at {offset}");
        assert_eq!(eof, end == data.len(), "eof of READ of {count} at {offset}");
    }
    let after = counters(server);
    (
        after.ring_reads - mid.ring_reads,
        mid.ring_writes - before.ring_writes,
    )
}

#[test]
fn direct_reads_and_aligned_writes_go_through_the_ring() {
    for integrity in [false, true] {
        let server = server(Mode::Direct, integrity);
        let (ring_reads, ring_writes) = write_then_read(&server);
        // Every READ is read through the ring (random offsets start no
        // readahead; nothing else holds the range), every WRITE written
        // through it (64 KiB, aligned, FILE_SYNC).
        assert!(
            ring_reads >= READS.len() as u64 - 1,
            "integrity {integrity}: {ring_reads} ring reads"
        );
        // (With integrity, the first WRITE of a file new to the checksum
        // store may take the blocking path, as v3's.)
        let all = if integrity { 15..=16 } else { 16..=16 };
        assert!(
            all.contains(&ring_writes),
            "integrity {integrity}: {ring_writes} ring writes"
        );
    }
}

#[test]
fn cached_modes_read_right_without_the_ring() {
    for mode in [Mode::Buffered, Mode::DontCache] {
        for integrity in [false, true] {
            let server = server(mode, integrity);
            let (ring_reads, ring_writes) = write_then_read(&server);
            // As v3's: a cached mode reads on a blocking thread.
            assert_eq!((ring_reads, ring_writes), (0, 0), "{mode:?}");
        }
    }
}

#[test]
fn a_file_deleted_behind_the_server_is_stale_in_every_mode() {
    for mode in [Mode::Direct, Mode::Buffered, Mode::DontCache] {
        for integrity in [false, true] {
            let server = server(mode, integrity);
            let fh = handle(&server, b"f");
            let (mut c, mut s) = session(&server);
            write(&mut c, &mut s, &fh, 0, &pattern(8192, 1));
            // Read once, so that the open-file cache holds it.
            let (got, _) = read(&mut c, &mut s, &fh, 0, 8192).unwrap();
            assert_eq!(got, pattern(8192, 1));
            std::fs::remove_file(nfs4::path_of(&server, 0).join("f")).unwrap();
            let before = counters(&server).ring_reads;
            assert_eq!(
                read(&mut c, &mut s, &fh, 0, 4096),
                Err(Nfsstat4::Stale),
                "{mode:?}, integrity {integrity}"
            );
            assert_eq!(counters(&server).ring_reads, before);
        }
    }
}

#[test]
fn a_squashed_caller_without_read_permission_is_refused_in_every_mode() {
    for mode in [Mode::Direct, Mode::Buffered, Mode::DontCache] {
        for integrity in [false, true] {
            let server = server(mode, integrity);
            let secret = nfs4::path_of(&server, 0).join("secret");
            std::fs::write(&secret, pattern(8192, 2)).unwrap();
            let fh = handle(&server, b"secret");
            let (mut c, mut s) = session(&server);
            let before = counters(&server).ring_reads;
            // Twice: the second finds the file in the open-file cache.
            for _ in 0..2 {
                assert_eq!(
                    read(&mut c, &mut s, &fh, 0, 4096),
                    Err(Nfsstat4::Access),
                    "{mode:?}, integrity {integrity}"
                );
            }
            assert_eq!(counters(&server).ring_reads, before);
            // Readable again once its mode lets others read: from the
            // ring in direct mode.
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
            let (got, _) = read(&mut c, &mut s, &fh, 4096, 4096).unwrap();
            assert_eq!(got, pattern(8192, 2)[4096..]);
            let ring = counters(&server).ring_reads - before;
            assert_eq!(ring, u64::from(mode == Mode::Direct), "{mode:?}");
        }
    }
}

/// How many times `op` (an NFSv4 operation's name, `READ` say) was
/// counted in the server's call statistics.
fn op_count(server: &TestServer, op: &str) -> u64 {
    server
        .calls
        .histograms()
        .filter(|h| h.program == "nfs4" && h.procedure == op)
        .map(|h| h.count)
        .sum()
}

#[test]
fn a_read_or_write_given_back_to_a_blocking_thread_runs_and_is_counted_once() {
    let server = server(Mode::Direct, false);
    let f = nfs4::path_of(&server, 0).join("f");
    std::fs::write(&f, pattern(8192, 3)).unwrap();
    let secret = nfs4::path_of(&server, 0).join("secret");
    let (fh, secret_fh) = (handle(&server, b"f"), handle(&server, b"secret"));
    let (mut c, mut s) = session(&server);
    let (reads, writes, putfhs, sequences, compounds) = (
        op_count(&server, "READ"),
        op_count(&server, "WRITE"),
        op_count(&server, "PUTFH"),
        op_count(&server, "SEQUENCE"),
        op_count(&server, "COMPOUND"),
    );
    let ring = counters(&server).ring_reads;
    // Not yet in the open-file cache: the task gives the COMPOUND back,
    // a blocking thread opens the file and answers.
    let (got, eof) = read(&mut c, &mut s, &fh, 0, 4096).unwrap();
    assert_eq!((got, eof), (pattern(8192, 3)[..4096].to_vec(), false));
    assert_eq!(counters(&server).ring_reads, ring);
    // An aligned direct WRITE the caller may not make (squashed, the
    // file 0600): refused on the blocking thread, nothing written.
    let head = WriteHead4 {
        stateid: ANONYMOUS,
        offset: 0,
        stable: StableHow4::FileSync,
        data_len: 4096,
    };
    let res = call(&mut c, &mut s, &secret_fh, ArgOp::Write(head), &[7; 4096]);
    assert_eq!(res.status, Nfsstat4::Access, "{:?}", res.statuses());
    assert_eq!(std::fs::metadata(&secret).unwrap().len(), 0);
    // Now cached: from the ring, on the task.
    let (got, _) = read(&mut c, &mut s, &fh, 4096, 4096).unwrap();
    assert_eq!(got, pattern(8192, 3)[4096..]);
    assert_eq!(counters(&server).ring_reads, ring + 1);
    // Three COMPOUNDs, each op counted once, wherever it ran.
    assert_eq!(op_count(&server, "READ") - reads, 2);
    assert_eq!(op_count(&server, "WRITE") - writes, 1);
    assert_eq!(op_count(&server, "PUTFH") - putfhs, 3);
    assert_eq!(op_count(&server, "SEQUENCE") - sequences, 3);
    assert_eq!(op_count(&server, "COMPOUND") - compounds, 3);
}

#[test]
fn a_read_whose_handle_fails_its_check_on_the_task_answers_putfh_and_is_counted() {
    let server = server(Mode::Direct, false);
    let f = nfs4::path_of(&server, 0).join("f");
    std::fs::write(&f, pattern(8192, 5)).unwrap();
    let fh = handle(&server, b"f");
    let (mut c, mut s) = session(&server);
    // Cached by a first READ: the next ones start on the task.
    read(&mut c, &mut s, &fh, 0, 4096).unwrap();
    let (reads, putfhs, compounds) = (
        op_count(&server, "READ"),
        op_count(&server, "PUTFH"),
        op_count(&server, "COMPOUND"),
    );
    let ring = counters(&server).ring_reads;
    let mut forged = fh.as_bytes().to_vec();
    *forged.last_mut().unwrap() ^= 1;
    let forged = NfsFh4::new(forged).unwrap();
    let op = ArgOp::Read(ReadArgs4 {
        stateid: ANONYMOUS,
        offset: 0,
        count: 4096,
    });
    let res = call(&mut c, &mut s, &forged, op, &[]);
    // PUTFH fails (its MAC), the READ is not run.
    let statuses = res.statuses();
    assert_eq!(statuses.len(), 2, "{statuses:?}");
    assert_eq!(statuses[0], (53, Nfsstat4::Ok));
    assert_eq!(statuses[1].0, 22);
    assert_eq!(res.status, statuses[1].1);
    assert!(
        matches!(res.status, Nfsstat4::Badhandle | Nfsstat4::Stale),
        "{statuses:?}"
    );
    // The session goes on: the next READ, from the ring.
    let (got, _) = read(&mut c, &mut s, &fh, 4096, 4096).unwrap();
    assert_eq!(got, pattern(8192, 5)[4096..]);
    assert_eq!(counters(&server).ring_reads, ring + 1);
    assert_eq!(op_count(&server, "READ") - reads, 1);
    assert_eq!(op_count(&server, "PUTFH") - putfhs, 2);
    assert_eq!(op_count(&server, "COMPOUND") - compounds, 2);
}

/// The change and size a GETATTR answered.
type ChangeSize = Option<(u64, u64)>;

/// WRITE at `offset` of `data` (FILE_SYNC) and a GETATTR of change and
/// size after it, Linux's WRITE COMPOUND: the ops' statuses, and the
/// change and size GETATTR answered.
fn write_getattr(
    c: &mut Client,
    s: &mut Session,
    fh: &NfsFh4,
    offset: u64,
    data: &[u8],
) -> (Vec<(u32, Nfsstat4)>, ChangeSize) {
    let head = WriteHead4 {
        stateid: ANONYMOUS,
        offset,
        stable: StableHow4::FileSync,
        data_len: data.len() as u32,
    };
    let getattr = ArgOp::Getattr(GetattrArgs4 {
        attr_request: Bitmap4::from_bits(&[Attr4::Change.bit(), Attr4::Size.bit()]),
    });
    let res = call_then(c, s, fh, ArgOp::Write(head), data, Some(getattr));
    let attrs = res.results.iter().find_map(|r| match r {
        ResOp::Getattr(Res4::Ok(ok)) => {
            let mut d = Decoder::new(ok.obj_attributes.attr_vals.as_bytes());
            Some((d.u64().unwrap(), d.u64().unwrap()))
        }
        _ => None,
    });
    (res.statuses(), attrs)
}

#[test]
fn a_write_and_its_getattr_run_on_the_task_or_given_back_together() {
    let server = server(Mode::Direct, false);
    let f = nfs4::path_of(&server, 0).join("f");
    std::fs::write(&f, pattern(8192, 9)).unwrap();
    let (fh, secret_fh) = (handle(&server, b"f"), handle(&server, b"secret"));
    let (mut c, mut s) = session(&server);
    let counts = |server: &TestServer| {
        ["SEQUENCE", "PUTFH", "WRITE", "GETATTR", "COMPOUND"].map(|op| op_count(server, op))
    };
    let (before, ring) = (counts(&server), counters(&server).ring_writes);
    let all_ok = [
        (53, Nfsstat4::Ok),
        (22, Nfsstat4::Ok),
        (38, Nfsstat4::Ok),
        (9, Nfsstat4::Ok),
    ];
    let mut expect = pattern(8192, 9);
    // Aligned, direct: through the ring on the task, GETATTR after it
    // there; the second grows the file, and its change moves.
    let block = pattern(4096, 10);
    let (statuses, first) = write_getattr(&mut c, &mut s, &fh, 4096, &block);
    assert_eq!(statuses, all_ok);
    expect[4096..].copy_from_slice(&block);
    let (statuses, grown) = write_getattr(&mut c, &mut s, &fh, 8192, &block);
    assert_eq!(statuses, all_ok);
    expect.extend_from_slice(&block);
    let ((change1, size1), (change2, size2)) = (first.unwrap(), grown.unwrap());
    assert_eq!((size1, size2), (8192, 12_288));
    assert_ne!(change1, change2);
    assert_eq!(counters(&server).ring_writes, ring + 2);
    // Misaligned: a read-modify-write, given back to a blocking thread
    // with its GETATTR, which runs there.
    let (statuses, small) = write_getattr(&mut c, &mut s, &fh, 100, b"0123456789");
    assert_eq!(statuses, all_ok);
    expect[100..110].copy_from_slice(b"0123456789");
    assert_eq!(small.unwrap().1, 12_288);
    assert_ne!(small.unwrap().0, change2);
    assert_eq!(counters(&server).ring_writes, ring + 2);
    // Refused (squashed, `secret` 0600): the GETATTR after is not run.
    let (statuses, none) = write_getattr(&mut c, &mut s, &secret_fh, 0, &block);
    assert_eq!(statuses[2], (38, Nfsstat4::Access), "{statuses:?}");
    assert_eq!((statuses.len(), none), (3, None));
    assert_eq!(std::fs::read(&f).unwrap(), expect);
    // Four COMPOUNDs, each op counted once, wherever it ran.
    let after = counts(&server);
    let ran: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(ran, [4, 4, 4, 3, 4]);
}
