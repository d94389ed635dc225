//! NFSv4.1 READ, WRITE and COMMIT against an in-process server through
//! the raw client (tests/nfs4/client.rs): data written and read back at
//! any offset and size, the stream in sync after every kind of WRITE
//! (payload placed, staged, skipped, refused), results after a READ's
//! data (the reply's trailer), stateids, the write verifier, the
//! session's request size, and the zero-copy check of the design (v4
//! WRITEs use the data plane's buffers, not staging memory).

mod nfs4;

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, PathBuf};

use dionfs_core::export::{Access, ExportConfig};
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, ChannelAttrs4, CommitArgs4, Component4, CompoundHead, GetattrArgs4,
    LookupArgs4, NfsFh4, Nfsstat4, Opnum4, PutfhArgs4, ReadArgs4, ReadResOk4, Res4, ResOp,
    StableHow4, StateId4, Utf8Str, Verifier4, WriteHead4, WriteResOk4,
};
use dionfs_rpc::{record_mark, ReplyStatus};
use dionfs_xdr::{Decoder, Encode, Encoder};

use nfs4::client::{fore_attrs, sequence_op, Client, CompoundRes, Session};
use nfs4::TestServer;

/// An op of a test COMPOUND: a WRITE carries its payload.
enum Op {
    A(ArgOp),
    W(WriteHead4, Vec<u8>),
}

/// `rw` (read-write) and `ro` (read-only), each with an empty file `f`.
fn two_exports() -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            ["rw", "ro"]
                .iter()
                .map(|name| {
                    let path = dir.join(name);
                    std::fs::create_dir(&path).unwrap();
                    std::fs::write(path.join("f"), b"").unwrap();
                    // Writable by the squashed client (the tests call as
                    // root, squashed to nobody).
                    let mode = std::fs::Permissions::from_mode(0o666);
                    std::fs::set_permissions(path.join("f"), mode).unwrap();
                    let mut x = ExportConfig::with_defaults(path);
                    x.entries[0].options.secure = false;
                    if *name == "ro" {
                        x.entries[0].options.access = Access::Ro;
                    }
                    x
                })
                .collect()
        },
    )
}

fn path_of(server: &TestServer, export: usize) -> PathBuf {
    server.server.exports()[export].config.path.join("f")
}

/// The handle of `name` at the top of export `export`.
fn handle(server: &TestServer, export: usize, name: &[u8]) -> NfsFh4 {
    let exports = server.server.exports();
    let x = &exports[export];
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
    let s = c.session_with(b"data", attrs);
    (c, s)
}

/// SEQUENCE on slot 0, then `ops`.
fn call(c: &mut Client, s: &mut Session, ops: &[Op]) -> CompoundRes {
    let seqid = s.next_seqid[0];
    let xid = c.xid();
    let res = c.compound_raw(xid, &args(s, seqid, ops));
    if matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
        s.next_seqid[0] = seqid.wrapping_add(1);
    }
    res
}

/// A COMPOUND's arguments: SEQUENCE on slot 0 with `seqid`, then `ops`.
fn args(s: &Session, seqid: u32, ops: &[Op]) -> Vec<u8> {
    let mut enc = Encoder::new();
    CompoundHead {
        tag: Utf8Str::from("data"),
        minorversion: 1,
        numops: ops.len() as u32 + 1,
    }
    .encode(&mut enc);
    sequence_op(s, 0, seqid, false).encode(&mut enc);
    for op in ops {
        match op {
            Op::A(a) => a.encode(&mut enc),
            Op::W(head, payload) => {
                ArgOp::Write(*head).encode(&mut enc);
                enc.opaque_fixed(payload);
            }
        }
    }
    enc.into_vec()
}

const ANONYMOUS: StateId4 = StateId4 {
    seqid: 0,
    other: [0; 12],
};
const BYPASS: StateId4 = StateId4 {
    seqid: u32::MAX,
    other: [0xff; 12],
};

fn putfh(fh: &NfsFh4) -> Op {
    Op::A(ArgOp::Putfh(PutfhArgs4 { object: fh.clone() }))
}

fn write(offset: u64, data: &[u8], stable: StableHow4) -> Op {
    write_with(ANONYMOUS, offset, data, stable)
}

fn write_with(stateid: StateId4, offset: u64, data: &[u8], stable: StableHow4) -> Op {
    Op::W(
        WriteHead4 {
            stateid,
            offset,
            stable,
            data_len: data.len() as u32,
        },
        data.to_vec(),
    )
}

fn read(offset: u64, count: u32) -> Op {
    read_with(ANONYMOUS, offset, count)
}

fn read_with(stateid: StateId4, offset: u64, count: u32) -> Op {
    Op::A(ArgOp::Read(ReadArgs4 {
        stateid,
        offset,
        count,
    }))
}

fn commit() -> Op {
    Op::A(ArgOp::Commit(CommitArgs4 {
        offset: 0,
        count: 0,
    }))
}

/// `[SEQUENCE, PUTFH, WRITE, GETATTR(size)]`, the COMPOUND Linux sends
/// for a WRITE, of `data` at `offset` of `fh`.
fn linux_write(
    c: &mut Client,
    s: &mut Session,
    fh: &NfsFh4,
    offset: u64,
    data: &[u8],
    stable: StableHow4,
) -> CompoundRes {
    call(
        c,
        s,
        &[putfh(fh), write(offset, data, stable), getattr_size()],
    )
}

fn getattr_size() -> Op {
    Op::A(ArgOp::Getattr(GetattrArgs4 {
        attr_request: Bitmap4::from_bits(&[Attr4::Size.bit()]),
    }))
}

fn statuses(res: &CompoundRes) -> Vec<(Opnum4, Nfsstat4)> {
    res.statuses()
        .into_iter()
        .map(|(op, s)| (Opnum4::from_u32(op).unwrap(), s))
        .collect()
}

fn ok(res: &CompoundRes) {
    assert_eq!(res.status, Nfsstat4::Ok, "{:?}", statuses(res));
}

fn writes(res: &CompoundRes) -> Vec<WriteResOk4> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Write(Res4::Ok(ok)) => Some(ok.clone()),
            _ => None,
        })
        .collect()
}

fn reads(res: &CompoundRes) -> Vec<ReadResOk4> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Read(Res4::Ok(ok)) => Some(ok.clone()),
            _ => None,
        })
        .collect()
}

fn sizes(res: &CompoundRes) -> Vec<u64> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Getattr(Res4::Ok(ok)) => Some(
                Decoder::new(ok.obj_attributes.attr_vals.as_bytes())
                    .u64()
                    .unwrap(),
            ),
            _ => None,
        })
        .collect()
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) ^ (i >> 9)) as u8)
        .collect()
}

#[test]
fn data_written_is_read_back_at_any_offset_and_size() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let mut expected = Vec::new();
    for (offset, len, stable) in [
        (0u64, 4096usize, StableHow4::Unstable),
        (4097, 10_001, StableHow4::FileSync),
        (0, 1 << 20, StableHow4::Unstable),
        (3, 0, StableHow4::DataSync),
        ((1 << 20) + 13, 3, StableHow4::Unstable),
    ] {
        let data = pattern(len, offset as u32);
        let res = call(&mut c, &mut s, &[putfh(&fh), write(offset, &data, stable)]);
        ok(&res);
        let w = &writes(&res)[0];
        assert_eq!(w.count as usize, len);
        let end = offset as usize + len;
        if expected.len() < end {
            expected.resize(end, 0);
        }
        expected[offset as usize..end].copy_from_slice(&data);

        // Read back through the same connection: the stream stayed in
        // sync, whatever the payload's padding.
        let res = call(&mut c, &mut s, &[putfh(&fh), read(offset, len as u32)]);
        ok(&res);
        let r = &reads(&res)[0];
        assert_eq!(r.data, data, "at {offset}, {len} bytes");
    }
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), expected);

    // Past the end of the file: nothing, and eof; across it: the rest.
    let size = expected.len() as u64;
    let res = call(&mut c, &mut s, &[putfh(&fh), read(size + 100, 4096)]);
    ok(&res);
    assert_eq!(
        reads(&res)[0],
        ReadResOk4 {
            eof: true,
            data: vec![]
        }
    );
    let res = call(&mut c, &mut s, &[putfh(&fh), read(size - 2, 4096)]);
    assert_eq!(
        reads(&res)[0],
        ReadResOk4 {
            eof: true,
            data: expected[expected.len() - 2..].to_vec()
        }
    );
    let res = call(&mut c, &mut s, &[putfh(&fh), read(0, 10)]);
    assert!(!reads(&res)[0].eof);
}

#[test]
fn results_after_a_read_follow_its_data() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let data = pattern(100_001, 5);
    ok(&call(
        &mut c,
        &mut s,
        &[putfh(&fh), write(0, &data, StableHow4::Unstable)],
    ));

    // The first READ's data is the reply's payload, GETATTR in its
    // trailer; a second READ's data is copied, after it.
    let res = call(
        &mut c,
        &mut s,
        &[
            putfh(&fh),
            read(1, 70_001),
            getattr_size(),
            read(7, 5),
            getattr_size(),
        ],
    );
    ok(&res);
    let r = reads(&res);
    assert_eq!(r[0].data, data[1..70_002]);
    assert_eq!(r[1].data, data[7..12]);
    assert_eq!(sizes(&res), [100_001, 100_001]);
    // And the next call on the connection is read from the right place.
    let res = call(&mut c, &mut s, &[putfh(&fh), getattr_size()]);
    assert_eq!(sizes(&res), [100_001]);
}

#[test]
fn two_writes_in_one_compound_both_land() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let a = pattern(70_000, 1);
    let b = pattern(5, 2);
    let res = call(
        &mut c,
        &mut s,
        &[
            putfh(&fh),
            write(0, &a, StableHow4::Unstable),
            write(70_000, &b, StableHow4::FileSync),
            getattr_size(),
        ],
    );
    ok(&res);
    assert_eq!(writes(&res).len(), 2);
    assert_eq!(sizes(&res), [70_005]);
    let mut all = a.clone();
    all.extend_from_slice(&b);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), all);
}

/// PUTFH leaves a handle's MAC unchecked only when a payload was placed
/// at receive for that very handle (its MAC checked then): a copy of it
/// with one byte changed, put while such a payload waits, is BADHANDLE.
#[test]
fn a_forged_handle_beside_a_placed_payload_is_badhandle() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let mut forged = fh.as_bytes().to_vec();
    *forged.last_mut().unwrap() ^= 1;
    let forged = NfsFh4::new(forged).unwrap();
    let (mut c, mut s) = session(&server);
    let data = pattern(4096, 3);
    let res = call(
        &mut c,
        &mut s,
        &[
            putfh(&forged),
            putfh(&fh),
            write(0, &data, StableHow4::Unstable),
        ],
    );
    assert_eq!(
        statuses(&res).last(),
        Some(&(Opnum4::Putfh, Nfsstat4::Badhandle)),
        "{:?}",
        statuses(&res)
    );
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), b"");
    // The handle itself, put twice: the WRITE lands.
    let res = call(
        &mut c,
        &mut s,
        &[
            putfh(&fh),
            putfh(&fh),
            write(0, &data, StableHow4::Unstable),
        ],
    );
    ok(&res);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), data);
    // Before a READ, PUTFH checks the handle by looking the file up.
    let res = call(&mut c, &mut s, &[putfh(&forged), read(0, 4096)]);
    assert_eq!(
        statuses(&res).last(),
        Some(&(Opnum4::Putfh, Nfsstat4::Badhandle)),
        "{:?}",
        statuses(&res)
    );
    let res = call(&mut c, &mut s, &[putfh(&fh), read(0, 4096)]);
    ok(&res);
    assert_eq!(reads(&res)[0].data, data);
}

/// A WRITE COMPOUND in one fragment is received in place up to its
/// payload, the ops after it decoded from the record's last bytes; in two
/// fragments, op by op. Both read it alike, whole or cut short at any
/// byte after the first payload (a second WRITE's payload among them).
#[test]
fn a_write_compound_reads_alike_in_place_and_op_by_op() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let ops = [
        putfh(&fh),
        write(0, &pattern(5000, 1), StableHow4::Unstable),
        getattr_size(),
        write(9000, &pattern(21, 2), StableHow4::Unstable),
        getattr_size(),
    ];
    let whole = args(&s, 0, &ops).len();
    // Where the first payload ends: what follows is the in-place tail,
    // two GETATTRs (opnum, bitmap) and a WRITE (opnum, head, payload).
    let tail = whole - 2 * 12 - (4 + 32 + 24);
    let send = |c: &mut Client, s: &mut Session, cut: usize, fragments: bool| {
        let seqid = s.next_seqid[0];
        let args = args(s, seqid, &ops);
        let xid = c.xid();
        let record = c.call_record(xid, 4, 1, &args[..cut]);
        let msg = &record[4..];
        let bytes = if fragments {
            // Split inside SEQUENCE: the first fragment is not the last.
            let split = msg.len() - cut + 20;
            let mut bytes = record_mark(split as u32, false).to_vec();
            bytes.extend_from_slice(&msg[..split]);
            bytes.extend_from_slice(&record_mark((msg.len() - split) as u32, true));
            bytes.extend_from_slice(&msg[split..]);
            bytes
        } else {
            record
        };
        c.send(&bytes);
        let (header, raw) = c.read_reply();
        assert_eq!(header.xid, xid);
        if header.status != ReplyStatus::Success {
            return (header.status, None);
        }
        let res = nfs4::client::decode_compound(raw);
        if matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
            s.next_seqid[0] = seqid.wrapping_add(1);
        }
        (header.status, Some((statuses(&res), sizes(&res))))
    };
    let (status, res) = send(&mut c, &mut s, whole, false);
    assert_eq!(status, ReplyStatus::Success);
    let (all, sizes) = res.unwrap();
    assert_eq!(all.len(), 6, "{all:?}");
    assert!(all.iter().all(|(_, st)| *st == Nfsstat4::Ok), "{all:?}");
    assert_eq!(sizes, [5000, 9021]);
    let mut outcomes = std::collections::BTreeSet::new();
    for cut in tail..=whole {
        let in_place = send(&mut c, &mut s, cut, false);
        let op_by_op = send(&mut c, &mut s, cut, true);
        assert_eq!(in_place, op_by_op, "cut at {cut} of {whole}");
        outcomes.insert(format!(
            "{:?}",
            in_place.1.map(|(st, _)| st.last().copied())
        ));
    }
    // GARBAGE_ARGS, BADXDR on GETATTR or WRITE, a cut payload, success.
    assert!(outcomes.len() >= 4, "{outcomes:?}");
    let file = std::fs::read(path_of(&server, 0)).unwrap();
    assert_eq!(&file[..5000], &pattern(5000, 1)[..]);
    assert_eq!(&file[9000..], &pattern(21, 2)[..]);
}

/// A WRITE whose file receive cannot know (found by LOOKUP in the same
/// COMPOUND) has its payload staged, and lands as any other.
#[test]
fn a_write_after_lookup_is_staged_and_lands() {
    let server = two_exports();
    let (mut c, mut s) = session(&server);
    let mut ops = vec![Op::A(ArgOp::Putrootfh)];
    for part in path_of(&server, 0).components() {
        if let Component::Normal(name) = part {
            ops.push(Op::A(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(name.as_encoded_bytes().to_vec()),
            })));
        }
    }
    let data = pattern(9_999, 3);
    ops.push(write(1, &data, StableHow4::FileSync));
    ops.push(getattr_size());
    let (staged_before, _) = server.server.staging.staged();
    let res = call(&mut c, &mut s, &ops);
    ok(&res);
    assert_eq!(sizes(&res), [10_000]);
    assert_eq!(server.server.staging.staged().0, staged_before + 1);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap()[1..], data[..]);
}

#[test]
fn commit_returns_the_writes_verifier() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let res = call(
        &mut c,
        &mut s,
        &[putfh(&fh), write(0, b"abc", StableHow4::Unstable), commit()],
    );
    ok(&res);
    let verf = writes(&res)[0].writeverf;
    let committed = |res: &CompoundRes| -> Vec<Verifier4> {
        res.results
            .iter()
            .filter_map(|r| match r {
                ResOp::Commit(Res4::Ok(ok)) => Some(ok.writeverf),
                _ => None,
            })
            .collect()
    };
    assert_eq!(committed(&res), [verf]);
    assert_eq!(verf.0, server.server.write_verifier());
    let res = call(&mut c, &mut s, &[putfh(&fh), commit(), commit()]);
    assert_eq!(committed(&res), [verf, verf]);
}

#[test]
fn stateids_are_checked() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    // Anonymous and bypass stateids may read and write (no share denies).
    for stateid in [ANONYMOUS, BYPASS] {
        let res = call(
            &mut c,
            &mut s,
            &[
                putfh(&fh),
                write_with(stateid, 0, b"xy", StableHow4::Unstable),
                read_with(stateid, 0, 2),
            ],
        );
        ok(&res);
        assert_eq!(reads(&res)[0].data, b"xy");
    }
    // A stateid the server never gave, and the current stateid when
    // there is none.
    let made_up = StateId4 {
        seqid: 1,
        other: [7; 12],
    };
    let current = StateId4 {
        seqid: 1,
        other: [0; 12],
    };
    for stateid in [made_up, current] {
        let res = call(
            &mut c,
            &mut s,
            &[
                putfh(&fh),
                write_with(stateid, 0, b"no", StableHow4::Unstable),
            ],
        );
        let (op, status) = *statuses(&res).last().unwrap();
        assert_eq!(op, Opnum4::Write);
        assert!(
            matches!(status, Nfsstat4::BadStateid | Nfsstat4::StaleStateid),
            "{status:?}"
        );
        let res = call(&mut c, &mut s, &[putfh(&fh), read_with(stateid, 0, 2)]);
        assert_ne!(res.status, Nfsstat4::Ok);
    }
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), b"xy");
}

#[test]
fn a_write_to_a_read_only_export_is_refused_and_its_payload_skipped() {
    let server = two_exports();
    let fh = handle(&server, 1, b"f");
    let (mut c, mut s) = session(&server);
    let data = pattern(100_003, 4);
    let res = linux_write(&mut c, &mut s, &fh, 0, &data, StableHow4::FileSync);
    assert_eq!(
        statuses(&res),
        [
            (Opnum4::Sequence, Nfsstat4::Ok),
            (Opnum4::Putfh, Nfsstat4::Ok),
            (Opnum4::Write, Nfsstat4::Rofs)
        ]
    );
    // The connection reads the next call from the right place.
    let res = call(&mut c, &mut s, &[putfh(&fh), getattr_size()]);
    assert_eq!(sizes(&res), [0]);
    assert!(std::fs::read(path_of(&server, 1)).unwrap().is_empty());
}

#[test]
fn a_write_larger_than_the_sessions_requests_is_req_too_big() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let mut c = server.client();
    let attrs = ChannelAttrs4 {
        maxrequestsize: 16 << 10,
        ..fore_attrs()
    };
    let mut s = c.session_with(b"small", attrs);
    let res = call(
        &mut c,
        &mut s,
        &[
            putfh(&fh),
            write(0, &pattern(20_000, 0), StableHow4::Unstable),
        ],
    );
    assert_eq!(
        statuses(&res),
        [(Opnum4::Sequence, Nfsstat4::ReqTooBig)],
        "{res:?}"
    );
    // The slot went back as it was, and the stream is in sync.
    let res = call(
        &mut c,
        &mut s,
        &[putfh(&fh), write(0, b"fits", StableHow4::Unstable)],
    );
    ok(&res);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), b"fits");
}

/// The design's zero-copy check: v4 WRITEs go through the data plane's
/// write path (its counters move) and never through staging memory.
#[test]
fn v4_writes_use_pool_buffers_not_staging() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let exports = server.server.exports();
    let plane = &exports[0].data;
    let written = |snap: dionfs_dataplane::CounterSnapshot| {
        snap.write.buffered.bytes + snap.write.dontcache.bytes + snap.write.direct.bytes
    };
    let before = written(plane.snapshot());
    let (staged, _) = server.server.staging.staged();
    let chunk = pattern(64 << 10, 9);
    for i in 0..32u64 {
        let res = linux_write(
            &mut c,
            &mut s,
            &fh,
            i * chunk.len() as u64,
            &chunk,
            StableHow4::Unstable,
        );
        ok(&res);
    }
    assert_eq!(written(plane.snapshot()) - before, 32 * chunk.len() as u64);
    assert_eq!(server.server.staging.staged().0, staged);
}

/// A COMPOUND short enough to be received as small (no share of the
/// connection's buffers) whose WRITE carries a little more than
/// `SMALL_IO` has its payload staged, not placed in a large buffer, and
/// it lands as any other.
#[test]
fn a_payload_just_over_small_io_in_a_small_compound_is_staged() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let data = pattern(dionfs_dataplane::SMALL_IO + 500, 6);
    let (staged, _) = server.server.staging.staged();
    let res = linux_write(&mut c, &mut s, &fh, 0, &data, StableHow4::Unstable);
    ok(&res);
    assert_eq!(server.server.staging.staged().0, staged + 1);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), data);
}

/// `[SEQUENCE, PUTFH, WRITE, GETATTR]` (what Linux sends) starts on the
/// connection's task when v3's test says the write may be made there: a
/// small UNSTABLE write whose partial pages are cached or holes is written
/// from the task, one extending the file too; a write whose partial page
/// holds data on disk and is not cached leaves the task for a blocking
/// thread.
#[test]
fn a_small_unstable_overwrite_is_written_on_the_task() {
    let server = two_exports();
    let fh = handle(&server, 0, b"f");
    let (mut c, mut s) = session(&server);
    let exports = server.server.exports();
    let plane = &exports[0].data;
    let first = pattern(8192, 1);
    let again = pattern(4096, 2);
    let before = plane.snapshot().task_writes;
    for (offset, data) in [(0, &first), (0, &again), (4096, &again)] {
        let res = linux_write(&mut c, &mut s, &fh, offset, data, StableHow4::Unstable);
        ok(&res);
        assert_eq!(sizes(&res), [8192]);
    }
    assert_eq!(plane.snapshot().task_writes - before, 3);
    let mut expected = again.clone();
    expected.extend_from_slice(&again);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), expected);
    // Its pages on disk and dropped from the cache: a write into the
    // middle of one would wait for the device read.
    let f = std::fs::File::open(path_of(&server, 0)).unwrap();
    f.sync_all().unwrap();
    dionfs_sys::io::fadvise_dontneed(&f, 0, 0).unwrap();
    let little = pattern(100, 3);
    let res = linux_write(&mut c, &mut s, &fh, 100, &little, StableHow4::Unstable);
    ok(&res);
    assert_eq!(plane.snapshot().task_writes - before, 3);
    expected[100..200].copy_from_slice(&little);
    assert_eq!(std::fs::read(path_of(&server, 0)).unwrap(), expected);
}

/// A READ or WRITE takes a file the open-file cache holds without
/// resolving its handle again, as NFSv3's do: one deleted behind the
/// server's back (not through REMOVE, which evicts it) is still STALE,
/// found by the statx of its attributes.
#[test]
fn a_cached_file_deleted_behind_our_back_is_stale() {
    let server = two_exports();
    let (mut c, mut s) = session(&server);
    let fh = handle(&server, 0, b"f");
    ok(&call(
        &mut c,
        &mut s,
        &[putfh(&fh), write(0, b"hello", StableHow4::Unstable)],
    ));
    let res = call(&mut c, &mut s, &[putfh(&fh), read(0, 5)]);
    ok(&res);
    assert_eq!(reads(&res)[0].data, b"hello");
    assert!(server.server.exports()[0]
        .fs
        .cached_file(fh.as_bytes())
        .unwrap()
        .is_some());

    std::fs::remove_file(path_of(&server, 0)).unwrap();
    let res = call(&mut c, &mut s, &[putfh(&fh), read(0, 5)]);
    assert_eq!(
        statuses(&res).last(),
        Some(&(Opnum4::Read, Nfsstat4::Stale))
    );
    let res = call(
        &mut c,
        &mut s,
        &[putfh(&fh), write(0, b"x", StableHow4::Unstable)],
    );
    assert_eq!(
        statuses(&res).last(),
        Some(&(Opnum4::Write, Nfsstat4::Stale))
    );
}
