//! Hostile NFSv4.1 clients against an in-process server, through the raw
//! client (tests/nfs4/client.rs) and raw bytes: absurd op counts and
//! lengths are refused before anything is allocated for them, a WRITE
//! whose payload stops arriving costs only its connection, and a client
//! that makes owners, sessions, opens or locks without end meets its
//! bound (`nfs4/state/limits.rs`, answered `NFS4ERR_DELAY`) while the
//! process's memory stays put. In every case another client keeps
//! working.

mod nfs4;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use dionfs_core::locks::limits::{MAX_RANGES_PER_CLIENT, RANGE_SPLITS_PAST_BOUND};
use dionfs_proto::nfs4::{
    ArgOp, ChannelAttrs4, Component4, CreateHow4, LockArgs4, Locker4, LockuArgs4, LookupArgs4,
    NfsFh4, NfsLockType4, Nfsstat4, Opaque4, OpenArgs4, OpenClaim4, OpenFlag4, OpenToLockOwner4,
    Opnum4, Res4, ResOp, SetAttrs4, StableHow4, StateId4, StateOwner4, WriteHead4,
    OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE,
};
use dionfs_rpc::{encode_call, framed, AuthSys, Credential};
use dionfs_server::nfs4::state::limits::{
    OPERATIONS_PER_COMPOUND, OWNERS_PER_ADDRESS, SESSIONS_PER_CLIENT, SLOTS_PER_SESSION,
};

use nfs4::client::{fore_attrs, sequence_op, Client, Session};
use nfs4::{export_dir, ok, path_of, putfh, statuses, TestServer};

/// The process's resident set in KiB (`VmRSS`): the server runs in it.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// A COMPOUND call record of `args` (NFSv4, AUTH_SYS root), as
/// [`Client::call_record`] makes it, for a raw connection.
fn record(xid: u32, args: &[u8]) -> Vec<u8> {
    let cred = Credential::Sys(AuthSys {
        stamp: 1,
        machine_name: b"hostile".to_vec(),
        uid: 0,
        gid: 0,
        gids: Vec::new(),
    });
    let mut msg = encode_call(xid, dionfs_proto::nfs4::NFS4_PROGRAM, 4, 1, &cred);
    msg.extend_from_slice(args);
    framed(&msg)
}

/// Whether the server closes `stream` within `within` (reading and
/// dropping whatever it sends first).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => {}
        }
    }
    false
}

/// A session whose client has sent RECLAIM_COMPLETE, with `maxops`
/// operations per COMPOUND, and the root of export 0.
fn ready(server: &TestServer, c: &mut Client, owner: &[u8], maxops: u32) -> (Session, NfsFh4) {
    let attrs = ChannelAttrs4 {
        maxoperations: maxops,
        ..fore_attrs()
    };
    let mut s = c.session_with(owner, attrs);
    let done = ArgOp::ReclaimComplete(dionfs_proto::nfs4::ReclaimCompleteArgs4 { one_fs: false });
    ok(&c.in_session(&mut s, 0, false, &[done]));
    let mut ops = vec![ArgOp::Putrootfh];
    for part in path_of(server, 0).components() {
        if let std::path::Component::Normal(name) = part {
            ops.push(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(name.as_encoded_bytes().to_vec()),
            }));
        }
    }
    ops.push(ArgOp::Getfh);
    let res = c.in_session(&mut s, 0, false, &ops);
    ok(&res);
    let Some(ResOp::Getfh(Res4::Ok(root))) = res.results.last() else {
        panic!("{res:?}")
    };
    (s, root.object.clone())
}

fn open_op(owner: &[u8], access: u32, how: OpenFlag4, claim: OpenClaim4) -> ArgOp {
    ArgOp::Open(Box::new(OpenArgs4 {
        seqid: 0,
        share_access: access,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4::from(owner),
        },
        openhow: how,
        claim,
    }))
}

/// Creates `name` in `dir` (open for reading and writing by `owner`):
/// its handle and open stateid.
fn create(
    c: &mut Client,
    s: &mut Session,
    dir: &NfsFh4,
    owner: &[u8],
    name: &str,
) -> (NfsFh4, StateId4) {
    let how = OpenFlag4::Create(CreateHow4::Unchecked(SetAttrs4::default().to_fattr()));
    let claim = OpenClaim4::Null(Component4::from(name.as_bytes().to_vec()));
    let res = c.in_session(
        s,
        0,
        false,
        &[
            putfh(dir),
            open_op(owner, OPEN4_SHARE_ACCESS_BOTH, how, claim),
            ArgOp::Getfh,
        ],
    );
    ok(&res);
    let mut stateid = None;
    let mut fh = None;
    for r in &res.results {
        match r {
            ResOp::Open(Res4::Ok(o)) => stateid = Some(o.stateid),
            ResOp::Getfh(Res4::Ok(g)) => fh = Some(g.object.clone()),
            _ => {}
        }
    }
    (fh.unwrap(), stateid.unwrap())
}

/// A COMPOUND that claims `numops` ops but carries only `ops`.
fn claiming(session: &Session, seqid: u32, numops: u32, ops: &[ArgOp]) -> Vec<u8> {
    let mut args = Client::sequenced_args(session, 0, seqid, false, ops);
    // tag "seq": length word and 4 bytes, then minorversion, numops.
    args[12..16].copy_from_slice(&numops.to_be_bytes());
    args
}

#[test]
fn absurd_counts_and_lengths_are_refused_before_allocating() {
    let server = TestServer::start_with(|_| {});
    let mut bystander = server.client();
    let mut calm = bystander.session(b"bystander");
    let mut c = server.client();
    let attrs = ChannelAttrs4 {
        maxoperations: 1 << 20,
        ..fore_attrs()
    };
    let mut s = c.session_with(b"hostile", attrs);
    assert_eq!(s.attrs.maxoperations, OPERATIONS_PER_COMPOUND);
    let rss_before = rss_kib();

    // numops 2^32-1, and one over the negotiated ca_maxoperations, with
    // only a SEQUENCE behind them: SEQUENCE refuses both.
    for numops in [u32::MAX, OPERATIONS_PER_COMPOUND + 1] {
        let xid = c.xid();
        let res = c.compound_raw(xid, &claiming(&s, s.next_seqid[0], numops, &[]));
        assert_eq!(
            statuses(&res),
            [(Opnum4::Sequence, Nfsstat4::TooManyOps)],
            "numops {numops}"
        );
    }
    // Without a session: the first op is refused, nothing more is read.
    let mut args = Client::compound_args("x", 1, &[ArgOp::Putrootfh]);
    args[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Putrootfh, Nfsstat4::OpNotInSession)]
    );

    // A tag claiming 4 GiB - 1: GARBAGE_ARGS, the connection goes on.
    let mut args = Client::compound_args("", 1, &[]);
    args[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
    let (status, _) = c.call(4, 1, &args);
    assert_eq!(status, dionfs_rpc::ReplyStatus::GarbageArgs);

    // A WRITE claiming 4 GiB - 1 of data, the record ending after its
    // head: over the session's request size, refused by SEQUENCE before
    // a byte of payload is read or a buffer taken; the slot is unused.
    let write = ArgOp::Write(WriteHead4 {
        stateid: StateId4::default(),
        offset: 0,
        stable: StableHow4::Unstable,
        data_len: u32::MAX,
    });
    let args = Client::sequenced_args(&s, 0, s.next_seqid[0], false, &[ArgOp::Putrootfh, write]);
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(statuses(&res), [(Opnum4::Sequence, Nfsstat4::ReqTooBig)]);

    // A LOOKUP whose name claims 2^31 bytes: BADXDR, ending the COMPOUND.
    let mut args = Client::sequenced_args(&s, 0, s.next_seqid[0], false, &[ArgOp::Putrootfh]);
    args[12..16].copy_from_slice(&3u32.to_be_bytes());
    args.extend_from_slice(&Opnum4::Lookup.as_u32().to_be_bytes());
    args.extend_from_slice(&(1u32 << 31).to_be_bytes());
    args.extend_from_slice(b"abcd");
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(
        statuses(&res),
        [
            (Opnum4::Sequence, Nfsstat4::Ok),
            (Opnum4::Putrootfh, Nfsstat4::Ok),
            (Opnum4::Lookup, Nfsstat4::Badxdr)
        ]
    );
    s.next_seqid[0] += 1;
    // The connection and the session are in step.
    ok(&c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh]));

    // A record claiming 2 GiB: the connection is closed before it is
    // read; only that connection.
    let mut raw = TcpStream::connect(server.addr).unwrap();
    let mut huge = record(7, &Client::compound_args("", 1, &[]));
    huge[0..4].copy_from_slice(&(0x8000_0000u32 | 0x7fff_fff0).to_be_bytes());
    raw.write_all(&huge).unwrap();
    assert!(
        closed_within(&mut raw, Duration::from_secs(10)),
        "a 2 GiB record left its connection open"
    );

    ok(&c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh, ArgOp::Getfh]));
    ok(&bystander.in_session(&mut calm, 0, false, &[ArgOp::Putrootfh, ArgOp::Getfh]));
    let grown = rss_kib().saturating_sub(rss_before);
    assert!(grown < 32 << 10, "RSS grew by {grown} KiB");
}

#[test]
fn a_write_whose_payload_stops_costs_only_its_connection() {
    let server = TestServer::start_exports(
        |s| s.stall_timeout = Duration::from_millis(500),
        |dir| vec![export_dir(dir, "export", &|_| {})],
    );
    let mut c = server.client();
    let (mut s, root) = ready(&server, &mut c, b"stalling", 16);
    let (file, stateid) = create(&mut c, &mut s, &root, b"writer", "stalled");
    let len = 256 << 10;
    let exports = server.server.exports();
    let pool = exports[0].data.write_pool_for(len);
    let free = pool.available();

    // On a second connection of the same session: SEQUENCE on slot 1,
    // PUTFH, a WRITE of 256 KiB of which 1000 bytes arrive.
    let seqid = s.next_seqid[1];
    let write = ArgOp::Write(WriteHead4 {
        stateid,
        offset: 0,
        stable: StableHow4::FileSync,
        data_len: len as u32,
    });
    let mut args = Client::compound_args(
        "seq",
        1,
        &[sequence_op(&s, 1, seqid, false), putfh(&file), write],
    );
    args.resize(args.len() + len, 0x5a);
    let whole = record(99, &args);
    let sent = whole.len() - len + 1000;
    let mut raw = TcpStream::connect(server.addr).unwrap();
    raw.write_all(&whole[..sent]).unwrap();
    // The other connection of the session is served meanwhile, and the
    // stalled call holds no pool buffer (the start of its payload waits
    // in the socket, or is staged: the transport's `stage_payload`).
    ok(&c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh]));
    assert_eq!(
        pool.available(),
        free,
        "a stalled WRITE holds a pool buffer"
    );

    assert!(
        closed_within(&mut raw, Duration::from_secs(10)),
        "a WRITE whose payload stopped kept its connection"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.available() != free && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(pool.available(), free, "the pool buffer was not given back");
    // Slot 1 is as it was: the same seqid is a new request, on a new
    // connection, and the whole WRITE it carries lands.
    let mut again = server.client();
    let write = ArgOp::Write(WriteHead4 {
        stateid,
        offset: 0,
        stable: StableHow4::FileSync,
        data_len: len as u32,
    });
    let mut args = Client::sequenced_args(&s, 1, seqid, false, &[putfh(&file), write]);
    args.resize(args.len() + len, 0x5a);
    let xid = again.xid();
    let res = again.compound_raw(xid, &args);
    assert_eq!(res.status, Nfsstat4::Ok, "{:?}", statuses(&res));
    let path = path_of(&server, 0).join("stalled");
    assert_eq!(std::fs::read(path).unwrap(), vec![0x5a; len]);
    assert_eq!(pool.available(), free);
}

#[test]
fn exchange_ids_of_new_owners_stop_at_their_bound() {
    let server = TestServer::start_with(|_| {});
    let nfs4 = server.nfs4.clone().unwrap();
    let mut c = server.client();
    let rss_at = |n: usize, rss: &mut Vec<(usize, u64)>| rss.push((n, rss_kib()));
    let mut rss = Vec::new();
    let mut granted = 0;
    let mut refused = 0;
    for n in 0..10_000 {
        if n == OWNERS_PER_ADDRESS {
            rss_at(n, &mut rss);
        }
        let res = c.compound(
            1,
            &[nfs4::client::exchange_id_op(format!("o{n}").as_bytes())],
        );
        match res.results[..] {
            [ResOp::ExchangeId(Res4::Ok(_))] => granted += 1,
            [ResOp::ExchangeId(Res4::Fail(Nfsstat4::Delay))] => refused += 1,
            ref other => panic!("EXCHANGE_ID {n}: {other:?}"),
        }
    }
    rss_at(10_000, &mut rss);
    assert_eq!(granted, OWNERS_PER_ADDRESS);
    assert_eq!(refused, 10_000 - OWNERS_PER_ADDRESS);
    let counts = nfs4.state.counts();
    assert_eq!(counts.clients + counts.unconfirmed, OWNERS_PER_ADDRESS);
    assert!(counts.refused >= refused as u64);
    let grown = rss[1].1.saturating_sub(rss[0].1);
    assert!(grown < 8 << 10, "RSS grew by {grown} KiB past the bound");
    // A known owner is still served.
    let mut s = c.session(b"o1");
    ok(&c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh]));
}

#[test]
fn sessions_and_slots_per_client_are_bounded() {
    let server = TestServer::start_with(|_| {});
    let nfs4 = server.nfs4.clone().unwrap();
    let mut c = server.client();
    let greedy = ChannelAttrs4 {
        maxrequests: u32::MAX,
        maxoperations: u32::MAX,
        ..fore_attrs()
    };
    let eid = c.exchange_id(b"sessions");
    let mut sequence = eid.sequenceid;
    let mut sessions = Vec::new();
    for n in 0..100 {
        match c.create_session(eid.clientid, sequence, greedy.clone()) {
            Ok(cs) => {
                assert!(cs.fore_chan_attrs.maxrequests <= SLOTS_PER_SESSION);
                assert!(cs.fore_chan_attrs.maxoperations <= OPERATIONS_PER_COMPOUND);
                sessions.push(cs);
                sequence += 1;
            }
            Err(status) => {
                assert_eq!(status, Nfsstat4::Delay, "CREATE_SESSION {n}");
                assert_eq!(sessions.len(), SESSIONS_PER_CLIENT, "refused at {n}");
            }
        }
    }
    assert_eq!(sessions.len(), SESSIONS_PER_CLIENT);
    assert_eq!(nfs4.state.counts().sessions, SESSIONS_PER_CLIENT);
    // A slot past the granted ones is BADSLOT.
    let mut s = Session {
        id: sessions[0].sessionid,
        clientid: eid.clientid,
        attrs: sessions[0].fore_chan_attrs.clone(),
        next_seqid: vec![1; SLOTS_PER_SESSION as usize + 1],
    };
    let granted = s.attrs.maxrequests;
    let res = c.in_session(&mut s, granted, false, &[]);
    assert_eq!(statuses(&res), [(Opnum4::Sequence, Nfsstat4::Badslot)]);
    ok(&c.in_session(&mut s, granted - 1, false, &[]));
}

/// Calls `ops` repeatedly, each COMPOUND as many of them as fit, until
/// one is refused `DELAY`; then `past` more COMPOUNDs whose first op
/// must be refused too. How many were granted.
fn until_delay(
    c: &mut Client,
    s: &mut Session,
    fh: &NfsFh4,
    past: usize,
    mut op: impl FnMut(usize) -> ArgOp,
) -> usize {
    let per = s.attrs.maxoperations as usize - 2;
    let mut granted = 0;
    let mut n = 0;
    loop {
        let mut ops = vec![putfh(fh)];
        ops.extend((0..per).map(|i| op(n + i)));
        let res = c.in_session(s, 0, false, &ops);
        let all = statuses(&res);
        granted += all
            .iter()
            .skip(2)
            .filter(|(_, st)| *st == Nfsstat4::Ok)
            .count();
        n += per;
        match res.status {
            Nfsstat4::Ok => {}
            Nfsstat4::Delay => break,
            other => panic!("{other:?} after {granted}: {all:?}"),
        }
        assert!(granted < 1_000_000, "no bound met");
    }
    let rss_at_bound = rss_kib();
    for k in 0..past {
        let res = c.in_session(s, 0, false, &[putfh(fh), op(n + k)]);
        assert_eq!(
            statuses(&res)[2].1,
            Nfsstat4::Delay,
            "granted past the bound"
        );
    }
    let grown = rss_kib().saturating_sub(rss_at_bound);
    eprintln!("{granted} granted; {past} refused after, RSS +{grown} KiB meanwhile");
    assert!(grown < 4 << 10, "RSS grew by {grown} KiB past the bound");
    granted
}

#[test]
fn opens_and_locks_without_end_stop_at_their_bounds() {
    let server = TestServer::start_exports(|_| {}, |dir| vec![export_dir(dir, "export", &|_| {})]);
    let nfs4 = server.nfs4.clone().unwrap();
    let mut c = server.client();
    let (mut s, root) = ready(&server, &mut c, b"greedy", OPERATIONS_PER_COMPOUND);
    let (file, stateid) = create(&mut c, &mut s, &root, b"first", "f");

    // Locks of one lock-owner on ranges without end.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&file),
            ArgOp::Lock(Box::new(LockArgs4 {
                locktype: NfsLockType4::Write,
                reclaim: false,
                offset: 0,
                length: 1,
                locker: Locker4::OpenOwner(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: stateid,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid: 0,
                        owner: Opaque4::from(&b"locker"[..]),
                    },
                }),
            })),
        ],
    );
    assert_eq!(
        statuses(&res)[2],
        (Opnum4::Lock, Nfsstat4::Ok),
        "the first lock"
    );
    let rss_before = rss_kib();
    // Lock-owners without end, each with one lock: each is a description
    // of the file, bounded per client address.
    let owners = until_delay(&mut c, &mut s, &file, 200, |n| {
        ArgOp::Lock(Box::new(LockArgs4 {
            locktype: NfsLockType4::Read,
            reclaim: false,
            offset: u64::MAX / 2 + 2 * n as u64,
            length: 1,
            locker: Locker4::OpenOwner(OpenToLockOwner4 {
                open_seqid: 0,
                open_stateid: stateid,
                lock_seqid: 0,
                lock_owner: StateOwner4 {
                    clientid: 0,
                    owner: Opaque4::from(format!("lo{n}").into_bytes()),
                },
            }),
        }))
    });
    let limit = dionfs_core::locks::limits::MAX_DESCRIPTIONS_PER_CLIENT;
    assert_eq!(owners + 1, limit, "lock-owners granted");

    // Opens under open-owners without end, of the same file.
    let opens = until_delay(&mut c, &mut s, &file, 2000, |n| {
        open_op(
            format!("oo{n}").as_bytes(),
            OPEN4_SHARE_ACCESS_READ,
            OpenFlag4::NoCreate,
            OpenClaim4::Fh,
        )
    });
    let shares = dionfs_core::locks::limits::MAX_SHARES_PER_CLIENT;
    // One share is the file's first open.
    assert_eq!(opens + 1, shares, "opens granted");
    eprintln!("RSS +{} KiB in all", rss_kib().saturating_sub(rss_before));
    assert!(nfs4.state.counts().refused >= 2200);

    // Another client (of the same address, whose opens and locks are
    // spent) is served what takes no new state.
    let mut other = server.client();
    let mut o = other.session(b"other");
    ok(&other.in_session(&mut o, 0, false, &[putfh(&file), ArgOp::Getfh]));
}

/// A lock-owner locking one-byte ranges apart from each other, each kept
/// in the lock table and in the kernel as an OFD lock, meets the bound on
/// the ranges a client address holds (`MAX_RANGES_PER_CLIENT`, shared
/// with NLM): `NFS4ERR_DELAY`. Quickly: a LOCK looks only at the owner's
/// ranges it touches. A LOCKU splitting a lock in two may still go
/// `RANGE_SPLITS_PAST_BOUND` ranges past the bound, then is
/// `NFS4ERR_LOCK_RANGE`.
#[test]
fn locks_on_ranges_without_end_stop_at_a_bound() {
    let server = TestServer::start_exports(|_| {}, |dir| vec![export_dir(dir, "export", &|_| {})]);
    let mut c = server.client();
    let (mut s, root) = ready(&server, &mut c, b"ranges", OPERATIONS_PER_COMPOUND);
    let (file, stateid) = create(&mut c, &mut s, &root, b"first", "f");
    let lock = |offset: u64, length: u64, locker| {
        ArgOp::Lock(Box::new(LockArgs4 {
            locktype: NfsLockType4::Write,
            reclaim: false,
            offset,
            length,
            locker,
        }))
    };
    // First a long lock, past the one-byte ones, to split at the end.
    let splits = RANGE_SPLITS_PAST_BOUND as u64;
    let long = 1 << 40;
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&file),
            lock(
                long,
                3 * (splits + 1),
                Locker4::OpenOwner(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: stateid,
                    lock_seqid: 0,
                    lock_owner: StateOwner4 {
                        clientid: 0,
                        owner: Opaque4::from(&b"locker"[..]),
                    },
                }),
            ),
        ],
    );
    let Some(ResOp::Lock(dionfs_proto::nfs4::LockRes4::Ok(granted))) = res.results.last() else {
        panic!("{:?}", statuses(&res))
    };
    // Seqid 0: the lock stateid's current seqid (RFC 8881 section 8.2.2).
    let lock_stateid = StateId4 {
        seqid: 0,
        ..*granted
    };
    let started = Instant::now();
    let ranges = until_delay(&mut c, &mut s, &file, 10, |n| {
        // 10000 ranges took 9 s in a debug build, 60000 took 271 s.
        assert!(
            n < 20_000,
            "20000 ranges granted in {:?}",
            started.elapsed()
        );
        if n % 5_000 == 0 {
            eprintln!("{n} ranges after {:?}", started.elapsed());
        }
        lock(
            2 * (n as u64 + 1),
            1,
            Locker4::LockOwner(dionfs_proto::nfs4::ExistLockOwner4 {
                lock_stateid,
                lock_seqid: 0,
            }),
        )
    });
    assert_eq!(ranges + 1, MAX_RANGES_PER_CLIENT);
    eprintln!("bound met after {:?}", started.elapsed());

    // Unlocking one byte out of every three of the long lock splits it.
    let locku = |k: u64| {
        ArgOp::Locku(LockuArgs4 {
            locktype: NfsLockType4::Write,
            seqid: 0,
            lock_stateid,
            offset: long + 3 * k + 1,
            length: 1,
        })
    };
    let per = s.attrs.maxoperations as u64 - 2;
    let mut k = 0;
    while k < splits {
        let mut ops = vec![putfh(&file)];
        ops.extend((k..splits.min(k + per)).map(locku));
        ok(&c.in_session(&mut s, 0, false, &ops));
        k += per;
    }
    let res = c.in_session(&mut s, 0, false, &[putfh(&file), locku(splits)]);
    assert_eq!(statuses(&res)[2].1, Nfsstat4::LockRange);
}
