//! NFSv4.1 client recovery across a restart (design section 4.7),
//! through the raw client (tests/nfs4/client.rs): a server restarted on
//! the same state directory holds a grace period for the clients its
//! previous run recorded, in which the old client's RECLAIM_COMPLETE is
//! accepted and nothing may change or remove what a client could
//! reclaim.

mod nfs4;

use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use dionfs_proto::nfs4::{
    ArgOp, Component4, LookupArgs4, Nfsstat4, Opnum4, ReclaimCompleteArgs4, RemoveArgs4,
};

use nfs4::client::{CompoundRes, Session};
use nfs4::statuses;
use nfs4::TestServer;

/// A server whose state directory is `state` and grace periods `grace`
/// long: a first start, or a restart after the previous one on `state`
/// stopped.
fn start(state: &Path, grace: Duration) -> TestServer {
    let state = state.to_owned();
    let server = TestServer::start_with(move |s| {
        s.state_dir = state;
        s.grace_period = grace;
    });
    std::fs::set_permissions(export(&server), std::fs::Permissions::from_mode(0o777)).unwrap();
    server
}

fn export(server: &TestServer) -> PathBuf {
    server.server.exports()[0].config.path.clone()
}

fn last(res: &CompoundRes) -> Nfsstat4 {
    statuses(res).last().unwrap().1
}

fn reclaim_complete() -> ArgOp {
    ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: false })
}

/// REMOVE of `name` in the export's root.
fn remove_in(export: &Path, name: &str) -> Vec<ArgOp> {
    let mut ops = vec![ArgOp::Putrootfh];
    for c in export.components() {
        if let Component::Normal(part) = c {
            ops.push(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(part.as_encoded_bytes().to_vec()),
            }));
        }
    }
    ops.push(ArgOp::Remove(RemoveArgs4 {
        target: Component4::from(name),
    }));
    ops
}

fn remove(c: &mut nfs4::client::Client, s: &mut Session, export: &Path, name: &str) -> Nfsstat4 {
    last(&c.in_session(s, 0, false, &remove_in(export, name)))
}

/// Waits (polling, at most 20 s) until the stopped server's runtime has
/// dropped its last reference to `server`, then drops it: its state
/// directory is free for the next start.
fn until_only(server: std::sync::Arc<dionfs_core::server::Server>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::sync::Arc::strong_count(&server) > 1 {
        assert!(Instant::now() < deadline, "the stopped server to go");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_restarted_server_lets_old_clients_reclaim_and_holds_the_rest_in_grace() {
    let state = tempfile::tempdir().unwrap();
    let first = {
        // A first start: no grace period, the client is recorded.
        let server = start(state.path(), Duration::from_secs(2));
        let mut c = server.client();
        let mut s = c.session(b"old client");
        let res = c.in_session(&mut s, 0, false, &[reclaim_complete()]);
        assert_eq!(
            statuses(&res),
            [
                (Opnum4::Sequence, Nfsstat4::Ok),
                (Opnum4::ReclaimComplete, Nfsstat4::Ok)
            ]
        );
        let export = export(&server);
        std::fs::write(export.join("f"), b"x").unwrap();
        assert_eq!(remove(&mut c, &mut s, &export, "f"), Nfsstat4::Ok);
        // The server stops here, its client still recorded.
        server.server.clone()
    };
    until_only(first);
    let record = std::fs::read_to_string(state.path().join("nfs4/clients")).unwrap();
    assert!(record.starts_with(&hex::encode(b"old client")), "{record}");

    let server = start(state.path(), Duration::from_secs(2));
    let export = export(&server);
    let mut c = server.client();
    let mut old = c.session(b"old client");
    let mut new = c.session(b"new client");
    std::fs::write(export.join("f"), b"x").unwrap();
    // In the grace period nothing a client could reclaim goes away.
    assert_eq!(remove(&mut c, &mut new, &export, "f"), Nfsstat4::Grace);
    assert!(export.join("f").exists());
    // The old client says it is done reclaiming, once.
    let res = c.in_session(&mut old, 0, false, &[reclaim_complete()]);
    assert_eq!(last(&res), Nfsstat4::Ok);
    let res = c.in_session(&mut old, 0, false, &[reclaim_complete()]);
    assert_eq!(last(&res), Nfsstat4::CompleteAlready);
    // Once the grace period is over, REMOVE goes through.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match remove(&mut c, &mut new, &export, "f") {
            Nfsstat4::Ok => break,
            Nfsstat4::Grace => {}
            other => panic!("REMOVE after grace: {other:?}"),
        }
        assert!(Instant::now() < deadline, "the grace period to end");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!export.join("f").exists());
}
