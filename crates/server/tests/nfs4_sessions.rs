//! NFSv4.1 COMPOUNDs and sessions against an in-process server, through a
//! raw client (tests/nfs4/client.rs): what a real client cannot be made
//! to send (retransmissions on purpose, misordered seqids, bad slots,
//! oversized requests, WRITE payloads the server does not take yet).

mod nfs4;

use dionfs_proto::nfs4::{
    ArgOp, Component4, DestroySessionArgs4, LookupArgs4, NfsFh4, Nfsstat4, Opnum4, PutfhArgs4,
    Res4, ResOp, StableHow4, StateId4, WriteHead4,
};
use dionfs_rpc::{record_mark, ReplyStatus};
use dionfs_xdr::Encode;

use nfs4::client::{decode_compound, fore_attrs, sequence_op, Client};
use nfs4::statuses;
use nfs4::{all_versions, TestServer};

#[test]
fn a_session_runs_putrootfh_and_getfh() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"round-trip");
    let res = c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh, ArgOp::Getfh]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(res.tag, b"seq");
    let [ResOp::Sequence(Res4::Ok(seq)), ResOp::Putrootfh(Nfsstat4::Ok), ResOp::Getfh(Res4::Ok(fh))] =
        &res.results[..]
    else {
        panic!("{res:?}");
    };
    assert_eq!(
        (seq.sessionid, seq.sequenceid, seq.slotid),
        (session.id, 1, 0)
    );
    assert!(!fh.object.as_bytes().is_empty());
    // The handle GETFH gave is taken back by PUTFH.
    let res = c.in_session(
        &mut session,
        0,
        false,
        &[
            ArgOp::Putfh(PutfhArgs4 {
                object: fh.object.clone(),
            }),
            ArgOp::Getfh,
        ],
    );
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    // A handle this server did not make is not.
    let res = c.in_session(
        &mut session,
        0,
        false,
        &[ArgOp::Putfh(PutfhArgs4 {
            object: NfsFh4::new(vec![9; 20]).unwrap(),
        })],
    );
    assert_eq!(statuses(&res)[1], (Opnum4::Putfh, Nfsstat4::Badhandle));
    // GETFH without a current filehandle.
    let res = c.in_session(&mut session, 0, false, &[ArgOp::Getfh]);
    assert_eq!(res.status, Nfsstat4::Nofilehandle);
    // An op not served ends the COMPOUND with NOTSUPP.
    let res = c.in_session(
        &mut session,
        0,
        false,
        &[ArgOp::Putrootfh, ArgOp::NotSupp(Opnum4::Openattr)],
    );
    assert_eq!(
        statuses(&res),
        [
            (Opnum4::Sequence, Nfsstat4::Ok),
            (Opnum4::Putrootfh, Nfsstat4::Ok),
            (Opnum4::Openattr, Nfsstat4::Notsupp)
        ]
    );
}

#[test]
fn a_retransmission_gets_the_same_bytes() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let session = c.session(b"replay");
    let ops = [ArgOp::Putrootfh, ArgOp::Getfh];
    let args = Client::sequenced_args(&session, 1, 1, true, &ops);
    let first = c.compound_raw(10, &args);
    assert_eq!(first.status, Nfsstat4::Ok, "{first:?}");
    // Same slot and seqid, a new xid: the cached reply, byte for byte,
    // whether on this connection or another.
    let again = c.compound_raw(11, &args);
    assert_eq!(again.raw, first.raw);
    let mut other = server.client();
    assert_eq!(other.compound_raw(12, &args).raw, first.raw);
    // A failed COMPOUND is replayed as well.
    let bad = [ArgOp::Putrootfh, ArgOp::Illegal(9999)];
    let args = Client::sequenced_args(&session, 2, 1, true, &bad);
    let first = c.compound_raw(13, &args);
    assert_eq!(first.status, Nfsstat4::OpIllegal);
    assert_eq!(c.compound_raw(14, &args).raw, first.raw);
    // A lone SEQUENCE is cached even when not asked to be.
    let args = Client::sequenced_args(&session, 3, 1, false, &[]);
    let first = c.compound_raw(15, &args);
    assert_eq!(first.status, Nfsstat4::Ok);
    assert_eq!(c.compound_raw(16, &args).raw, first.raw);
}

#[test]
fn misordered_seqids_and_bad_slots_are_refused() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"misordered");
    assert_eq!(
        c.in_session(&mut session, 0, false, &[]).status,
        Nfsstat4::Ok
    );
    for wrong in [3, 0, u32::MAX] {
        let args = Client::sequenced_args(&session, 0, wrong, false, &[ArgOp::Putrootfh]);
        let xid = c.xid();
        let res = c.compound_raw(xid, &args);
        assert_eq!(
            statuses(&res),
            [(Opnum4::Sequence, Nfsstat4::SeqMisordered)],
            "seqid {wrong}"
        );
    }
    // The slot is as it was: the next seqid still works.
    assert_eq!(
        c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh])
            .status,
        Nfsstat4::Ok
    );
    let slots = session.attrs.maxrequests;
    let args = Client::sequenced_args(&session, slots, 1, false, &[]);
    let xid = c.xid();
    assert_eq!(
        statuses(&c.compound_raw(xid, &args)),
        [(Opnum4::Sequence, Nfsstat4::Badslot)]
    );
    let mut gone = session.clone();
    gone.id.0[0] ^= 0xff;
    assert_eq!(
        c.in_session(&mut gone, 0, false, &[]).status,
        Nfsstat4::Badsession
    );
}

#[test]
fn too_many_ops_and_too_big_requests_are_refused_by_sequence() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let attrs = dionfs_proto::nfs4::ChannelAttrs4 {
        maxoperations: 4,
        maxrequestsize: 512,
        ..fore_attrs()
    };
    let mut session = c.session_with(b"bounds", attrs);
    assert_eq!(session.attrs.maxoperations, 4);
    let three = [ArgOp::Putrootfh, ArgOp::Getfh, ArgOp::Putrootfh];
    assert_eq!(
        c.in_session(&mut session, 0, false, &three).status,
        Nfsstat4::Ok
    );
    let four = [
        ArgOp::Putrootfh,
        ArgOp::Getfh,
        ArgOp::Putrootfh,
        ArgOp::Getfh,
    ];
    let res = c.in_session(&mut session, 0, false, &four);
    assert_eq!(statuses(&res), [(Opnum4::Sequence, Nfsstat4::TooManyOps)]);
    // pynfs SEQ6: a long name makes the request longer than 512 bytes.
    let lookup = ArgOp::Lookup(LookupArgs4 {
        objname: Component4::from(vec![b'x'; 500]),
    });
    let res = c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh, lookup.clone()]);
    assert_eq!(statuses(&res), [(Opnum4::Sequence, Nfsstat4::ReqTooBig)]);
    // The same in two fragments, the first short: found as the second
    // arrives, and the slot is put back.
    let seqid = session.next_seqid[0];
    let args = Client::sequenced_args(&session, 0, seqid, false, &[ArgOp::Putrootfh, lookup]);
    let xid = c.xid();
    let record = c.call_record(xid, 4, 1, &args);
    let msg = &record[4..];
    // The first fragment ends right after PUTROOTFH, before the LOOKUP
    // (opnum, length, 500 bytes).
    let split = msg.len() - 508;
    let mut fragments = record_mark(split as u32, false).to_vec();
    fragments.extend_from_slice(&msg[..split]);
    fragments.extend_from_slice(&record_mark((msg.len() - split) as u32, true));
    fragments.extend_from_slice(&msg[split..]);
    c.send(&fragments);
    let res = c.read_compound(xid);
    assert_eq!(statuses(&res), [(Opnum4::Sequence, Nfsstat4::ReqTooBig)]);
    assert_eq!(
        c.in_session(&mut session, 0, false, &[]).status,
        Nfsstat4::Ok
    );
}

#[test]
fn only_minor_versions_served_are_answered() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    for minor in [3, 50] {
        let res = c.compound(minor, &[ArgOp::Putrootfh]);
        assert_eq!(res.status, Nfsstat4::MinorVersMismatch, "minor {minor}");
        assert!(res.results.is_empty());
        assert_eq!(res.tag, b"test");
    }
    assert_eq!(c.compound(2, &[]).status, Nfsstat4::Ok);
    assert_eq!(c.compound(1, &[]).status, Nfsstat4::Ok);
    // Minor version 0 needs no session: PUTROOTFH runs.
    assert_eq!(c.compound(0, &[ArgOp::Putrootfh]).status, Nfsstat4::Ok);
    drop(server);
    let server = TestServer::start_with(|s| s.versions.v4_0 = false);
    let mut c = server.client();
    let res = c.compound(0, &[ArgOp::Putrootfh]);
    assert_eq!(res.status, Nfsstat4::MinorVersMismatch);
    assert!(res.results.is_empty());
    drop(server);
    let server = TestServer::start_with(|s| s.versions.v4_2 = false);
    let mut c = server.client();
    assert_eq!(c.compound(2, &[]).status, Nfsstat4::MinorVersMismatch);
    assert_eq!(c.compound(1, &[]).status, Nfsstat4::Ok);
}

#[test]
fn versions_not_served_get_prog_mismatch() {
    let server = TestServer::start(dionfs_core::export::NfsVersions {
        v3: true,
        v4_0: false,
        v4_1: false,
        v4_2: false,
    });
    let mut c = server.client();
    for (vers, proc_) in [(4, 0), (4, 1), (2, 0)] {
        let (status, _) = c.call(vers, proc_, &[]);
        assert_eq!(
            status,
            ReplyStatus::ProgMismatch { low: 3, high: 3 },
            "v{vers}"
        );
    }
    drop(server);
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    assert_eq!(
        c.call(2, 0, &[]).0,
        ReplyStatus::ProgMismatch { low: 3, high: 4 }
    );
    assert_eq!(c.call(4, 0, &[]), (ReplyStatus::Success, Vec::new()));
    assert_eq!(c.call(4, 2, &[]).0, ReplyStatus::ProcUnavail);
    // NFSv3 is served beside it: NULL.
    assert_eq!(c.call(3, 0, &[]), (ReplyStatus::Success, Vec::new()));
    drop(server);
    let server = TestServer::start_with(|s| s.versions.v3 = false);
    let mut c = server.client();
    assert_eq!(
        c.call(3, 0, &[]).0,
        ReplyStatus::ProgMismatch { low: 4, high: 4 }
    );
}

#[test]
fn ops_without_a_session_are_refused_as_the_rfc_says() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let res = c.compound(1, &[ArgOp::Putrootfh, ArgOp::Getfh]);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Putrootfh, Nfsstat4::OpNotInSession)]
    );
    let eid = nfs4::client::exchange_id_op(b"not-only");
    let res = c.compound(1, &[eid, ArgOp::Putrootfh]);
    assert_eq!(statuses(&res), [(Opnum4::ExchangeId, Nfsstat4::NotOnlyOp)]);
    // pynfs COMP5: an unknown opnum, alone, is OP_ILLEGAL.
    let res = c.compound(1, &[ArgOp::Illegal(76)]);
    assert_eq!(statuses(&res), [(Opnum4::Illegal, Nfsstat4::OpIllegal)]);
    // SEQUENCE anywhere but first.
    let mut session = c.session(b"sequence-pos");
    let again = sequence_op(&session, 0, 1, false);
    let res = c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh, again]);
    assert_eq!(statuses(&res)[2], (Opnum4::Sequence, Nfsstat4::SequencePos));
    // A count of ops far past anything: decided on the first op.
    let mut args = Client::compound_args("huge", 1, &[ArgOp::Putrootfh]);
    args[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Putrootfh, Nfsstat4::OpNotInSession)]
    );
    // An invalid UTF-8 tag (pynfs COMP3), and one longer than allowed.
    let mut args = Client::compound_args("ab", 1, &[]);
    args[4..6].copy_from_slice(b"\xc0\xaf");
    let xid = c.xid();
    assert_eq!(c.compound_raw(xid, &args).status, Nfsstat4::Inval);
    let mut args = 2000u32.to_be_bytes().to_vec();
    args.extend_from_slice(&[b'a'; 2000]);
    args.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(c.call(4, 1, &args).0, ReplyStatus::GarbageArgs);
    // The connection is still in step.
    assert_eq!(c.compound(1, &[]).status, Nfsstat4::Ok);
}

#[test]
fn malformed_ops_are_badxdr_and_end_the_compound() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"badxdr");
    // A PUTFH whose handle claims 129 bytes.
    let seqid = session.next_seqid[0];
    let mut args = Client::sequenced_args(&session, 0, seqid, false, &[ArgOp::Putrootfh]);
    args[12..16].copy_from_slice(&3u32.to_be_bytes());
    args.extend_from_slice(&Opnum4::Putfh.as_u32().to_be_bytes());
    args.extend_from_slice(&129u32.to_be_bytes());
    args.extend_from_slice(&[0; 132]);
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(
        statuses(&res),
        [
            (Opnum4::Sequence, Nfsstat4::Ok),
            (Opnum4::Putrootfh, Nfsstat4::Ok),
            (Opnum4::Putfh, Nfsstat4::Badxdr)
        ]
    );
    session.next_seqid[0] += 1;
    // A record that ends inside an op's arguments.
    let seqid = session.next_seqid[0];
    let mut args = Client::sequenced_args(&session, 0, seqid, false, &[ArgOp::Putrootfh]);
    args[12..16].copy_from_slice(&3u32.to_be_bytes());
    args.extend_from_slice(&Opnum4::Putfh.as_u32().to_be_bytes());
    args.extend_from_slice(&64u32.to_be_bytes());
    args.extend_from_slice(&[0; 10]);
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(statuses(&res)[2], (Opnum4::Putfh, Nfsstat4::Badxdr));
    session.next_seqid[0] += 1;
    assert_eq!(
        c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh])
            .status,
        Nfsstat4::Ok
    );
}

#[test]
fn a_write_payload_is_consumed_and_the_connection_stays_in_step() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"write");
    let payload = vec![0xabu8; 5001];
    let write = ArgOp::Write(WriteHead4 {
        stateid: StateId4::default(),
        offset: 0,
        stable: StableHow4::Unstable,
        data_len: payload.len() as u32,
    });
    let seqid = session.next_seqid[0];
    let mut args = Client::sequenced_args(&session, 0, seqid, false, &[ArgOp::Putrootfh, write]);
    args.extend_from_slice(&payload);
    args.extend_from_slice(&[0; 3]);
    args.extend_from_slice(&ArgOp::Getfh.to_xdr());
    args[12..16].copy_from_slice(&4u32.to_be_bytes());
    // The WRITE and the next COMPOUND in one send: the server must stop
    // reading the first exactly at its record's end.
    let (xid1, xid2) = (c.xid(), c.xid());
    let mut bytes = c.call_record(xid1, 4, 1, &args);
    let next = Client::sequenced_args(&session, 1, 1, false, &[ArgOp::Putrootfh, ArgOp::Getfh]);
    bytes.extend_from_slice(&c.call_record(xid2, 4, 1, &next));
    c.send(&bytes);
    let (h1, raw1) = c.read_reply();
    let (h2, raw2) = c.read_reply();
    let (write_res, next_res) = if h1.xid == xid1 {
        (decode_compound(raw1), decode_compound(raw2))
    } else {
        assert_eq!(h2.xid, xid1);
        (decode_compound(raw2), decode_compound(raw1))
    };
    assert_eq!(
        statuses(&write_res),
        [
            (Opnum4::Sequence, Nfsstat4::Ok),
            (Opnum4::Putrootfh, Nfsstat4::Ok),
            // The pseudo-root is a directory.
            (Opnum4::Write, Nfsstat4::Isdir)
        ]
    );
    assert_eq!(next_res.status, Nfsstat4::Ok, "{next_res:?}");
    session.next_seqid[0] += 1;
    session.next_seqid[1] += 1;
    assert_eq!(
        c.in_session(&mut session, 0, false, &[]).status,
        Nfsstat4::Ok
    );
}

#[test]
fn destroy_session_ends_it() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"destroy");
    let destroy = ArgOp::DestroySession(DestroySessionArgs4 {
        sessionid: session.id,
    });
    let res = c.compound(1, &[destroy]);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
    assert_eq!(
        c.in_session(&mut session, 0, false, &[]).status,
        Nfsstat4::Badsession
    );
}

#[test]
fn compounds_and_their_ops_are_counted() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"stats");
    for _ in 0..3 {
        let res = c.in_session(&mut session, 0, false, &[ArgOp::Putrootfh, ArgOp::Getfh]);
        assert_eq!(res.status, Nfsstat4::Ok);
    }
    // What `dionfs stats` prints, from what the metrics endpoint exports.
    let mut registry =
        dionfs_server::metrics::registry(server.server.clone(), None, server.calls.clone());
    let state = server.nfs4.as_ref().unwrap().state.clone();
    dionfs_server::metrics::register_nfs4(&mut registry, state);
    let text = dionfs_server::metrics::render(&registry).unwrap();
    // The state's gauges: one client, its session, no opens or locks.
    for gauge in [
        "dionfs_nfs4_clients 1\n",
        "dionfs_nfs4_clients_unconfirmed 0\n",
        "dionfs_nfs4_clients_courtesy 0\n",
        "dionfs_nfs4_sessions 1\n",
        "dionfs_nfs4_open_stateids 0\n",
        "dionfs_nfs4_lock_stateids 0\n",
        "dionfs_nfs4_delegations 0\n",
        "dionfs_nfs4_refused_total 0\n",
    ] {
        assert!(text.contains(gauge), "{gauge}: {text}");
    }
    let lines = dionfs_server::callstats::parse(&text);
    let count = |name: &str| {
        lines
            .iter()
            .find(|l| l.program == "nfs4" && l.procedure == name)
            .map_or(0, |l| l.count)
    };
    // EXCHANGE_ID and CREATE_SESSION came in COMPOUNDs of their own.
    assert_eq!(count("COMPOUND"), 5, "{text}");
    assert_eq!(count("SEQUENCE"), 3);
    assert_eq!((count("PUTROOTFH"), count("GETFH")), (3, 3));
    assert_eq!((count("EXCHANGE_ID"), count("CREATE_SESSION")), (1, 1));
    let table =
        dionfs_server::callstats::table(&lines, &dionfs_server::dispatch::counted_programs());
    assert!(table.contains("NFS v4 calls: 5"), "{table}");
    assert!(table.contains("NFS v4 operations: 11"), "{table}");
}

#[test]
fn any_fragmentation_reads_the_same_and_any_cut_is_answered() {
    let server = TestServer::start(all_versions());
    let mut c = server.client();
    let mut session = c.session(b"fragments");
    let ops = [ArgOp::Putrootfh, ArgOp::Getfh];
    let args_len = Client::sequenced_args(&session, 0, 1, false, &ops).len();
    // The same COMPOUND in two fragments, split at every byte of its
    // arguments: read alike.
    for split_at in 0..=args_len {
        let seqid = session.next_seqid[0];
        let args = Client::sequenced_args(&session, 0, seqid, false, &ops);
        let xid = c.xid();
        let record = c.call_record(xid, 4, 1, &args);
        let msg = &record[4..];
        let split = msg.len() - args_len + split_at;
        let mut bytes = record_mark(split as u32, false).to_vec();
        bytes.extend_from_slice(&msg[..split]);
        bytes.extend_from_slice(&record_mark((msg.len() - split) as u32, true));
        bytes.extend_from_slice(&msg[split..]);
        c.send(&bytes);
        let res = c.read_compound(xid);
        assert_eq!(res.status, Nfsstat4::Ok, "split at {split_at}: {res:?}");
        session.next_seqid[0] += 1;
    }
    // Cut short at every byte: answered (GARBAGE_ARGS before an op's
    // opnum, BADXDR inside its arguments), and the connection goes on.
    for cut in 0..args_len {
        let seqid = session.next_seqid[0];
        let args = Client::sequenced_args(&session, 0, seqid, false, &ops);
        let xid = c.xid();
        let record = c.call_record(xid, 4, 1, &args[..cut]);
        c.send(&record);
        let (header, raw) = c.read_reply();
        assert_eq!(header.xid, xid);
        if header.status == ReplyStatus::GarbageArgs {
            continue;
        }
        assert_eq!(header.status, ReplyStatus::Success, "cut at {cut}");
        let res = decode_compound(raw);
        assert_eq!(res.status, Nfsstat4::Badxdr, "cut at {cut}: {res:?}");
        if matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))) {
            session.next_seqid[0] += 1;
        }
    }
    let res = c.in_session(&mut session, 0, false, &ops);
    assert_eq!(res.status, Nfsstat4::Ok, "{res:?}");
}
