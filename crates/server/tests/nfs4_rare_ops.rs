//! The NFSv4.1 ops no client in the other tests sends, against an
//! in-process server through the raw client (tests/nfs4/client.rs):
//! PUTPUBFH, RESTOREFH, SECINFO, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL,
//! DESTROY_CLIENTID and DELEGRETURN, and a retransmitted REMOVE (an op
//! that must not run twice) answered from the reply cache or refused.
//! tests/integration/test_nfs4_ops.py sends the same to the dionfs
//! binary.

mod nfs4;

use std::path::Path;

use dionfs_proto::nfs4::{
    ArgOp, BackchannelCtlArgs4, BindConnToSessionArgs4, CallbackSecParms4, ChannelDirFromClient4,
    ChannelDirFromServer4, Component4, DelegreturnArgs4, DestroyClientidArgs4, DestroySessionArgs4,
    NfsFh4, Nfsstat4, Opnum4, RemoveArgs4, Res4, ResOp, Secinfo4, SecinfoArgs4, SessionId4,
    StateId4,
};

use nfs4::client::{Client, CompoundRes, Session};
use nfs4::TestServer;
use nfs4::{export_dir, last, ok, path_of, putfh, statuses, walk};

/// One read-write export.
fn one_export() -> TestServer {
    TestServer::start_exports(|_| {}, |dir| vec![export_dir(dir, "a", &|_| {})])
}

/// The handles the GETFHs of `res` returned, in order.
fn handles(res: &CompoundRes) -> Vec<NfsFh4> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Getfh(Res4::Ok(fh)) => Some(fh.object.clone()),
            _ => None,
        })
        .collect()
}

fn fh_of(c: &mut Client, s: &mut Session, path: &Path) -> NfsFh4 {
    let mut ops = walk(path);
    ops.push(ArgOp::Getfh);
    let res = c.in_session(s, 0, false, &ops);
    ok(&res);
    handles(&res).pop().unwrap()
}

#[test]
fn putpubfh_is_the_root_and_restorefh_brings_back_the_saved_handle() {
    let server = one_export();
    let export = path_of(&server, 0);
    let mut c = server.client();
    let mut s = c.session_ready(b"fh-ops");
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            ArgOp::Putrootfh,
            ArgOp::Getfh,
            ArgOp::Putpubfh,
            ArgOp::Getfh,
        ],
    );
    ok(&res);
    let [root, public] = &handles(&res)[..] else {
        panic!("{res:?}");
    };
    assert_eq!(public, root, "the public filehandle is the root's");

    let inside = fh_of(&mut c, &mut s, &export);
    assert_ne!(&inside, root);
    let mut ops = vec![ArgOp::Putrootfh, ArgOp::Savefh];
    ops.extend(walk(&export).into_iter().skip(1));
    ops.extend([ArgOp::Getfh, ArgOp::Restorefh, ArgOp::Getfh]);
    let res = c.in_session(&mut s, 0, false, &ops);
    ok(&res);
    assert_eq!(handles(&res), [inside, root.clone()]);

    // Nothing saved: NOFILEHANDLE (RFC 8881 section 15.1.16.4: it
    // supersedes NFSv4.0's NFS4ERR_RESTOREFH), as for SAVEFH with no
    // current filehandle.
    let res = c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh, ArgOp::Restorefh]);
    assert_eq!(last(&res), (Opnum4::Restorefh, Nfsstat4::Nofilehandle));
    let res = c.in_session(&mut s, 0, false, &[ArgOp::Savefh]);
    assert_eq!(last(&res), (Opnum4::Savefh, Nfsstat4::Nofilehandle));
}

#[test]
fn secinfo_names_auth_sys_and_consumes_the_filehandle() {
    let server = one_export();
    let export = path_of(&server, 0);
    std::fs::create_dir(export.join("dir")).unwrap();
    let mut c = server.client();
    let mut s = c.session_ready(b"secinfo");
    let dir = fh_of(&mut c, &mut s, &export);
    let secinfo = |name: &str| {
        ArgOp::Secinfo(SecinfoArgs4 {
            name: Component4::from(name.as_bytes().to_vec()),
        })
    };
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[putfh(&dir), secinfo("dir"), ArgOp::Getfh],
    );
    let Some(ResOp::Secinfo(Res4::Ok(flavors))) = res.results.get(2) else {
        panic!("{res:?}");
    };
    assert!(
        flavors.0.iter().any(|f| matches!(f, Secinfo4::Flavor(1))),
        "AUTH_SYS: {flavors:?}"
    );
    // RFC 8881 section 2.6.3.1.1.8: no current filehandle after it.
    assert_eq!(last(&res), (Opnum4::Getfh, Nfsstat4::Nofilehandle));
    let res = c.in_session(&mut s, 0, false, &[putfh(&dir), secinfo("nothing")]);
    assert_eq!(last(&res), (Opnum4::Secinfo, Nfsstat4::Noent));
    // Of a file's name in the pseudo-root, and with no filehandle at all.
    let res = c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh, secinfo("nothing")]);
    assert_eq!(last(&res), (Opnum4::Secinfo, Nfsstat4::Noent));
    let res = c.in_session(&mut s, 0, false, &[secinfo("dir")]);
    assert_eq!(last(&res), (Opnum4::Secinfo, Nfsstat4::Nofilehandle));
}

fn bind(sessid: SessionId4) -> ArgOp {
    ArgOp::BindConnToSession(BindConnToSessionArgs4 {
        sessid,
        dir: ChannelDirFromClient4::Fore,
        use_conn_in_rdma_mode: false,
    })
}

#[test]
fn a_second_connection_binds_to_the_session_and_backchannel_ctl_is_taken() {
    let server = one_export();
    let mut c = server.client();
    let mut s = c.session_ready(b"binder");
    let mut other = server.client();
    let res = other.compound(1, &[bind(s.id)]);
    let [ResOp::BindConnToSession(Res4::Ok(bound))] = &res.results[..] else {
        panic!("{res:?}");
    };
    assert_eq!(bound.sessid, s.id);
    assert_eq!(bound.dir, ChannelDirFromServer4::Fore);
    // The session's slots serve it on the new connection.
    let res = other.in_session(&mut s, 0, false, &[ArgOp::Putrootfh]);
    ok(&res);
    // A session that does not exist, and BIND_CONN_TO_SESSION after a
    // SEQUENCE (it must be alone).
    let res = other.compound(1, &[bind(SessionId4([9; 16]))]);
    assert_eq!(
        last(&res),
        (Opnum4::BindConnToSession, Nfsstat4::Badsession)
    );
    let again = bind(s.id);
    let res = c.in_session(&mut s, 0, false, &[again]);
    assert_eq!(last(&res), (Opnum4::BindConnToSession, Nfsstat4::NotOnlyOp));

    let ctl = ArgOp::BackchannelCtl(BackchannelCtlArgs4 {
        cb_program: 0x4000_0001,
        sec_parms: vec![CallbackSecParms4::AuthNone],
    });
    let res = c.in_session(&mut s, 0, false, &[ctl]);
    assert_eq!(last(&res), (Opnum4::BackchannelCtl, Nfsstat4::Ok));
}

#[test]
fn destroy_clientid_waits_for_its_sessions() {
    let server = one_export();
    let mut c = server.client();
    let mut s = c.session_ready(b"destroyed");
    let destroy = ArgOp::DestroyClientid(DestroyClientidArgs4 {
        clientid: s.clientid,
    });
    let res = c.in_session(&mut s, 0, false, std::slice::from_ref(&destroy));
    assert_eq!(
        last(&res),
        (Opnum4::DestroyClientid, Nfsstat4::ClientidBusy)
    );
    let end = ArgOp::DestroySession(DestroySessionArgs4 { sessionid: s.id });
    let res = c.in_session(&mut s, 0, false, &[end]);
    ok(&res);
    let res = c.compound(1, std::slice::from_ref(&destroy));
    assert_eq!(last(&res), (Opnum4::DestroyClientid, Nfsstat4::Ok));
    // Gone: again is STALE_CLIENTID, and its session is no more.
    let res = c.compound(1, &[destroy]);
    assert_eq!(
        last(&res),
        (Opnum4::DestroyClientid, Nfsstat4::StaleClientid)
    );
    let res = c.in_session(&mut s, 0, false, &[ArgOp::Putrootfh]);
    assert_eq!(statuses(&res)[0], (Opnum4::Sequence, Nfsstat4::Badsession));
}

#[test]
fn delegreturn_of_a_delegation_never_given_is_refused() {
    let server = one_export();
    let export = path_of(&server, 0);
    std::fs::write(export.join("f"), b"x").unwrap();
    let mut c = server.client();
    let mut s = c.session_ready(b"deleg");
    let fh = fh_of(&mut c, &mut s, &export.join("f"));
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&fh),
            ArgOp::Delegreturn(DelegreturnArgs4 {
                deleg_stateid: StateId4 {
                    seqid: 1,
                    other: [3; 12],
                },
            }),
        ],
    );
    // Another boot's stateid (this one's boot verifier is random).
    assert_eq!(last(&res), (Opnum4::Delegreturn, Nfsstat4::StaleStateid));
}

#[test]
fn a_retransmitted_remove_is_not_run_again() {
    let server = one_export();
    let export = path_of(&server, 0);
    for name in ["a", "b", "c"] {
        std::fs::write(export.join(name), b"").unwrap();
    }
    let mut c = server.client();
    let mut s = c.session_ready(b"retransmit");
    let dir = fh_of(&mut c, &mut s, &export);
    let remove = |name: &str| {
        ArgOp::Remove(RemoveArgs4 {
            target: Component4::from(name.as_bytes().to_vec()),
        })
    };
    // Cached: the first reply again, not NOENT, even once "a" is back.
    let seqid = s.next_seqid[1];
    let args = Client::sequenced_args(&s, 1, seqid, true, &[putfh(&dir), remove("a")]);
    let first = c.compound_raw(100, &args);
    ok(&first);
    std::fs::write(export.join("a"), b"again").unwrap();
    let again = c.compound_raw(101, &args);
    assert_eq!(again.raw, first.raw);
    assert!(export.join("a").exists(), "the REMOVE ran twice");
    // Not cached: RETRY_UNCACHED_REP from SEQUENCE, nothing run.
    let args = Client::sequenced_args(&s, 1, seqid + 1, false, &[putfh(&dir), remove("b")]);
    ok(&c.compound_raw(102, &args));
    std::fs::write(export.join("b"), b"again").unwrap();
    let res = c.compound_raw(103, &args);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Sequence, Nfsstat4::RetryUncachedRep)]
    );
    assert!(export.join("b").exists(), "the REMOVE ran twice");
    // A seqid past the next one: SEQ_MISORDERED, nothing run.
    let args = Client::sequenced_args(&s, 1, seqid + 3, false, &[putfh(&dir), remove("c")]);
    let res = c.compound_raw(104, &args);
    assert_eq!(
        statuses(&res),
        [(Opnum4::Sequence, Nfsstat4::SeqMisordered)]
    );
    assert!(export.join("c").exists());
}
