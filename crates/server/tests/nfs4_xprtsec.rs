//! An export's `xprtsec` over NFSv4.1, from a plain TCP connection (the
//! in-process server has no TLS here; tests/integration/test_tls.py runs
//! the same over TLS): an export that needs TLS answers WRONGSEC where
//! RFC 8881 section 2.6.3.1.1 puts it, SECINFO and SECINFO_NO_NAME still
//! answer, the pseudo-root and the other exports are as before, and a
//! WRITE into it writes nothing.

mod nfs4;

use dionfs_core::export::Xprtsec;
use dionfs_proto::nfs4::{
    ArgOp, Component4, GetattrArgs4, NfsFh4, Nfsstat4, Opnum4, SecinfoArgs4, SecinfoStyle4,
    StableHow4, StateId4, WriteHead4,
};

use nfs4::client::Client;
use nfs4::{export_dir, lookup, ok, path_of, putfh, statuses, walk, TestServer};

/// `open` (every transport, the default) and `secret` (`xprtsec =
/// ["tls"]`), side by side, `secret` holding a file `f`.
fn two_exports() -> TestServer {
    let server = TestServer::start_exports(
        |_| {},
        |dir| {
            vec![
                export_dir(dir, "open", &|_| {}),
                export_dir(dir, "secret", &|x| {
                    x.entries[0].options.xprtsec = Xprtsec::TLS
                }),
            ]
        },
    );
    std::fs::write(path_of(&server, 1).join("f"), b"unchanged").unwrap();
    server
}

fn getattr() -> ArgOp {
    ArgOp::Getattr(GetattrArgs4 {
        attr_request: Default::default(),
    })
}

fn root_of(server: &TestServer, index: usize) -> NfsFh4 {
    NfsFh4::new(server.server.exports()[index].fs.root_handle().to_vec()).unwrap()
}

#[test]
fn a_tls_export_answers_wrongsec_to_a_plain_connection() {
    use Nfsstat4::{Ok as OK, Wrongsec};
    let server = two_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"plain");
    let secret = root_of(&server, 1);
    let secret_path = path_of(&server, 1);
    let name = secret_path.file_name().unwrap().as_encoded_bytes().to_vec();
    let parent = secret_path.parent().unwrap();

    // The other export and the pseudo-root are as before.
    let mut ops = walk(&path_of(&server, 0));
    ops.push(getattr());
    ok(&c.in_session(&mut s, 0, false, &ops));
    let mut ops = walk(parent);
    ops.push(getattr());
    ok(&c.in_session(&mut s, 0, false, &ops));

    // PUTFH then an op that uses the handle: PUTFH answers WRONGSEC.
    let res = c.in_session(&mut s, 0, false, &[putfh(&secret), getattr()]);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Sequence, OK), (Opnum4::Putfh, Wrongsec)]
    );
    // PUTFH then SECINFO_NO_NAME: the client learns what to use.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&secret),
            ArgOp::SecinfoNoName(SecinfoStyle4::CurrentFh),
        ],
    );
    ok(&res);
    // PUTFH alone: put to no use (RFC 8881 section 2.6.3.1.1.6).
    ok(&c.in_session(&mut s, 0, false, &[putfh(&secret)]));
    // PUTFH then LOOKUP: LOOKUP answers it.
    let res = c.in_session(&mut s, 0, false, &[putfh(&secret), lookup(b"f")]);
    assert_eq!(
        statuses(&res),
        [
            (Opnum4::Sequence, OK),
            (Opnum4::Putfh, OK),
            (Opnum4::Lookup, Wrongsec)
        ]
    );
    // Crossing into it from the pseudo-filesystem: LOOKUP answers it,
    // SECINFO of the name answers.
    let mut ops = walk(parent);
    ops.push(lookup(&name));
    let res = c.in_session(&mut s, 0, false, &ops);
    assert_eq!(statuses(&res).last(), Some(&(Opnum4::Lookup, Wrongsec)));
    let mut ops = walk(parent);
    ops.push(ArgOp::Secinfo(SecinfoArgs4 {
        name: Component4::from(name.clone()),
    }));
    ok(&c.in_session(&mut s, 0, false, &ops));
}

#[test]
fn a_write_into_a_tls_export_over_plain_writes_nothing() {
    let server = two_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"writer");
    let exports = server.server.exports();
    let x = &exports[1];
    let root = x.fs.resolve(x.fs.root_handle()).unwrap();
    let (file, _) = x.fs.lookup(&root, b"f").unwrap();
    let file = NfsFh4::new(file.fh().to_vec()).unwrap();
    assert!(x.fs.cached_file(file.as_bytes()).unwrap().is_none());
    let len = 64 << 10;
    let write = ArgOp::Write(WriteHead4 {
        // The anonymous stateid.
        stateid: StateId4 {
            seqid: 0,
            other: [0; 12],
        },
        offset: 0,
        stable: StableHow4::FileSync,
        data_len: len as u32,
    });
    let seqid = s.next_seqid[0];
    let mut args = Client::sequenced_args(&s, 0, seqid, false, &[putfh(&file), write]);
    args.resize(args.len() + len, 0x5a);
    let xid = c.xid();
    let res = c.compound_raw(xid, &args);
    assert_eq!(
        statuses(&res).last(),
        Some(&(Opnum4::Putfh, Nfsstat4::Wrongsec))
    );
    assert_eq!(
        std::fs::read(path_of(&server, 1).join("f")).unwrap(),
        b"unchanged"
    );
    // Its payload was skipped as it was received, not placed: placing
    // would have opened the file to write (`nfs4::data::place`).
    assert!(
        x.fs.cached_file(file.as_bytes()).unwrap().is_none(),
        "the refused WRITE's file was opened for its payload"
    );
    // The connection goes on: the payload was skipped, not taken for a
    // call.
    s.next_seqid[0] = seqid.wrapping_add(1);
    ok(&c.in_session(&mut s, 0, false, &[putfh(&root_of(&server, 0)), getattr()]));
}
