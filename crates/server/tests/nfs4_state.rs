//! NFSv4.1 opens and locks against an in-process server, through the raw
//! client (tests/nfs4/client.rs): OPEN's create modes and claims, share
//! reservations between clients, CLOSE, OPEN_DOWNGRADE, TEST_STATEID and
//! FREE_STATEID, the current stateid, LOCK, LOCKT and LOCKU, SETATTR of
//! a size with a stateid, and the export options on OPEN.

mod nfs4;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path};

use dionfs_core::export::{Access, ExportConfig, Squash};
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, CloseArgs4, Component4, CreatVerfAttr, CreateHow4, ExistLockOwner4,
    Fattr4, FreeStateidArgs4, LockArgs4, LockRes4, Locker4, LocktArgs4, LockuArgs4, LookupArgs4,
    NfsFh4, NfsLockType4, Nfsstat4, Opaque4, OpenArgs4, OpenClaim4, OpenDelegation4,
    OpenDowngradeArgs4, OpenFlag4, OpenResOk4, OpenToLockOwner4, Opnum4, ReclaimCompleteArgs4,
    Res4, ResOp, SetAttrs4, SetattrArgs4, StateId4, StateOwner4, TestStateidArgs4, Verifier4,
    ACE4_READ_DATA, OPEN4_RESULT_LOCKTYPE_POSIX, OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_ACCESS_READ,
    OPEN4_SHARE_ACCESS_WRITE, OPEN4_SHARE_DENY_NONE, OPEN4_SHARE_DENY_WRITE,
};

use nfs4::client::{CompoundRes, Session};
use nfs4::TestServer;
use nfs4::{export_dir, last, ok, path_of, putfh, statuses};

/// `a` (read-write, root_squash), `b` (read-only) and `c` (read-write,
/// no_root_squash), side by side in one directory.
fn three_exports() -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            let export = |name: &str, f: &dyn Fn(&mut ExportConfig)| export_dir(dir, name, f);
            vec![
                export("a", &|_| {}),
                export("b", &|x| x.entries[0].options.access = Access::Ro),
                export("c", &|x| x.entries[0].options.squash = Squash::NoRootSquash),
            ]
        },
    )
}

/// The root of the export at `path`.
fn export_root(c: &mut nfs4::client::Client, s: &mut Session, path: &Path) -> NfsFh4 {
    let mut ops = vec![ArgOp::Putrootfh];
    for part in path.components() {
        if let Component::Normal(name) = part {
            ops.push(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(name.as_encoded_bytes().to_vec()),
            }));
        }
    }
    ops.push(ArgOp::Getfh);
    let res = c.in_session(s, 0, false, &ops);
    ok(&res);
    match res.results.last() {
        Some(ResOp::Getfh(Res4::Ok(ok))) => ok.object.clone(),
        other => panic!("{other:?}"),
    }
}

fn open_args(owner: &[u8], access: u32, deny: u32, openhow: OpenFlag4, claim: OpenClaim4) -> ArgOp {
    ArgOp::Open(Box::new(OpenArgs4 {
        seqid: 0,
        share_access: access,
        share_deny: deny,
        owner: StateOwner4 {
            clientid: 0,
            owner: Opaque4::from(owner),
        },
        openhow,
        claim,
    }))
}

fn by_name(name: &str) -> OpenClaim4 {
    OpenClaim4::Null(Component4::from(name.as_bytes().to_vec()))
}

fn unchecked(mode: Option<u32>) -> OpenFlag4 {
    OpenFlag4::Create(CreateHow4::Unchecked(
        SetAttrs4 {
            mode,
            ..SetAttrs4::default()
        }
        .to_fattr(),
    ))
}

/// UNCHECKED4 with a size of 0: a truncating open of an existing file.
fn truncating() -> OpenFlag4 {
    OpenFlag4::Create(CreateHow4::Unchecked(
        SetAttrs4 {
            size: Some(0),
            ..SetAttrs4::default()
        }
        .to_fattr(),
    ))
}

/// The OPEN result of `res` (the op after SEQUENCE and PUTFH).
fn opened(res: &CompoundRes) -> OpenResOk4 {
    res.results
        .iter()
        .find_map(|r| match r {
            ResOp::Open(Res4::Ok(ok)) => Some(ok.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{:?}", statuses(res)))
}

/// OPEN of `name` in `dir` as `owner`, its status and result.
fn open(
    c: &mut nfs4::client::Client,
    s: &mut Session,
    dir: &NfsFh4,
    owner: &[u8],
    (access, deny): (u32, u32),
    how: OpenFlag4,
    name: &str,
) -> CompoundRes {
    c.in_session(
        s,
        0,
        false,
        &[
            putfh(dir),
            open_args(owner, access, deny, how, by_name(name)),
            ArgOp::Getfh,
        ],
    )
}

fn file_fh(res: &CompoundRes) -> NfsFh4 {
    res.results
        .iter()
        .find_map(|r| match r {
            ResOp::Getfh(Res4::Ok(ok)) => Some(ok.object.clone()),
            _ => None,
        })
        .unwrap()
}

fn close(stateid: StateId4) -> ArgOp {
    ArgOp::Close(CloseArgs4 {
        seqid: 0,
        open_stateid: stateid,
    })
}

fn test_stateids(stateids: &[StateId4]) -> ArgOp {
    ArgOp::TestStateid(TestStateidArgs4 {
        stateids: stateids.to_vec(),
    })
}

fn tested(res: &CompoundRes) -> Vec<Nfsstat4> {
    match res.results.last() {
        Some(ResOp::TestStateid(Res4::Ok(ok))) => ok.status_codes.clone(),
        other => panic!("{other:?}"),
    }
}

/// The stateid that stands for the COMPOUND's current stateid.
const CURRENT: StateId4 = StateId4 {
    seqid: 1,
    other: [0; 12],
};

fn new_lock(
    open: StateId4,
    owner: &[u8],
    locktype: NfsLockType4,
    offset: u64,
    length: u64,
) -> ArgOp {
    ArgOp::Lock(Box::new(LockArgs4 {
        locktype,
        reclaim: false,
        offset,
        length,
        locker: Locker4::OpenOwner(OpenToLockOwner4 {
            open_seqid: 0,
            open_stateid: open,
            lock_seqid: 0,
            lock_owner: StateOwner4 {
                clientid: 0,
                owner: Opaque4::from(owner),
            },
        }),
    }))
}

fn locked(res: &CompoundRes) -> LockRes4<StateId4> {
    res.results
        .iter()
        .find_map(|r| match r {
            ResOp::Lock(res) => Some(res.clone()),
            _ => None,
        })
        .unwrap()
}

fn set_size(stateid: StateId4, size: u64) -> ArgOp {
    ArgOp::Setattr(SetattrArgs4 {
        stateid,
        obj_attributes: SetAttrs4 {
            size: Some(size),
            ..SetAttrs4::default()
        }
        .to_fattr(),
    })
}

#[test]
fn open_creates_in_each_mode() {
    let server = three_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"creates");
    let a = path_of(&server, 0);
    let root = export_root(&mut c, &mut s, &a);

    // UNCHECKED4 makes the file, with its mode; the squashed root owns
    // it. The result: the stateid, the directory's change, POSIX locks,
    // no delegation.
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o1",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        unchecked(Some(0o640)),
        "u",
    );
    ok(&res);
    let made = opened(&res);
    assert_eq!(made.stateid.seqid, 1);
    assert_ne!(made.cinfo.before, made.cinfo.after);
    assert_eq!(made.rflags, OPEN4_RESULT_LOCKTYPE_POSIX);
    assert_eq!(made.delegation, OpenDelegation4::None);
    assert_eq!(made.attrset, Bitmap4::from_bits(&[Attr4::Mode.bit()]));
    let meta = std::fs::metadata(a.join("u")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));

    // UNCHECKED4 with an ACL: set on the file made (a named user's read
    // is an ACL entry of its own on the server).
    let ace = |who: &str| dionfs_proto::nfs4::Nfsace4 {
        acetype: 0,
        flag: 0,
        access_mask: ACE4_READ_DATA,
        who: who.into(),
    };
    let with_acl = OpenFlag4::Create(CreateHow4::Unchecked(
        SetAttrs4 {
            acl: Some(dionfs_proto::nfs4::Nfsacl4(vec![
                ace("OWNER@"),
                ace("1001"),
            ])),
            ..SetAttrs4::default()
        }
        .to_fattr(),
    ));
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o1",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        with_acl,
        "acl",
    );
    ok(&res);
    assert_eq!(
        opened(&res).attrset,
        Bitmap4::from_bits(&[Attr4::Acl.bit()])
    );
    let mut buf = [0u8; 256];
    let len = rustix::fs::getxattr(a.join("acl"), "system.posix_acl_access", &mut buf[..])
        .expect("an access ACL");
    let acl = dionfs_fs::acl::PosixAcl::from_xattr(&buf[..len]).expect("valid");
    let user = acl.get(dionfs_fs::acl::Tag::User(1001)).map(|e| e.perm);
    assert_eq!(user, Some(dionfs_fs::acl::ACL_READ));

    // UNCHECKED4 again opens it (the same owner: the open upgraded).
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o1",
        (OPEN4_SHARE_ACCESS_READ, 0),
        unchecked(None),
        "u",
    );
    ok(&res);
    assert_eq!(opened(&res).stateid.other, made.stateid.other);
    assert_eq!(opened(&res).stateid.seqid, 2);

    // GUARDED4: EXIST when there.
    let guarded = OpenFlag4::Create(CreateHow4::Guarded(Fattr4::default()));
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o1",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        guarded.clone(),
        "u",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Exist));
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o1",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        guarded,
        "g",
    );
    ok(&res);

    // EXCLUSIVE4: the same verifier again is the same file; another is
    // EXIST. The times that keep the verifier are in attrset.
    let times = Bitmap4::from_bits(&[Attr4::TimeAccess.bit(), Attr4::TimeModify.bit()]);
    let excl = |v: u8| OpenFlag4::Create(CreateHow4::Exclusive(Verifier4([v; 8])));
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o2",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl(1),
        "x",
    );
    ok(&res);
    assert_eq!(opened(&res).attrset, times);
    let first = file_fh(&res);
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o2",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl(1),
        "x",
    );
    ok(&res);
    assert_eq!(file_fh(&res), first);
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o2",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl(2),
        "x",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Exist));

    // EXCLUSIVE4_1: its attributes are set; a retry succeeds, another
    // verifier is EXIST; times in its attributes are INVAL.
    let excl41 = |v: u8, attrs: SetAttrs4| {
        OpenFlag4::Create(CreateHow4::Exclusive41(CreatVerfAttr {
            verf: Verifier4([v; 8]),
            attrs: attrs.to_fattr(),
        }))
    };
    let mode = SetAttrs4 {
        mode: Some(0o604),
        ..SetAttrs4::default()
    };
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o3",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl41(5, mode.clone()),
        "y",
    );
    ok(&res);
    assert_eq!(
        opened(&res).attrset,
        Bitmap4::from_bits(&[
            Attr4::Mode.bit(),
            Attr4::TimeAccess.bit(),
            Attr4::TimeModify.bit()
        ])
    );
    assert_eq!(
        std::fs::metadata(a.join("y")).unwrap().mode() & 0o7777,
        0o604
    );
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o3",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl41(5, mode.clone()),
        "y",
    );
    ok(&res);
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o3",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl41(6, mode),
        "y",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Exist));
    let with_time = SetAttrs4 {
        time_modify_set: Some(dionfs_proto::nfs4::SetTime4::ServerTime),
        ..SetAttrs4::default()
    };
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o3",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        excl41(7, with_time),
        "z",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Inval));

    // Opening what is not a regular file, or nothing.
    std::fs::create_dir(a.join("dir")).unwrap();
    std::os::unix::fs::symlink("u", a.join("link")).unwrap();
    for (name, status) in [
        ("dir", Nfsstat4::Isdir),
        ("link", Nfsstat4::Symlink),
        ("none", Nfsstat4::Noent),
    ] {
        let res = open(
            &mut c,
            &mut s,
            &root,
            b"o4",
            (OPEN4_SHARE_ACCESS_READ, 0),
            OpenFlag4::NoCreate,
            name,
        );
        assert_eq!(last(&res), (Opnum4::Open, status), "{name}");
    }

    // CLAIM_FH opens the current file; CLAIM_PREVIOUS out of grace is
    // NO_GRACE; delegation claims are not supported.
    let x = first;
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&x),
            open_args(
                b"o5",
                OPEN4_SHARE_ACCESS_READ,
                0,
                OpenFlag4::NoCreate,
                OpenClaim4::Fh,
            ),
        ],
    );
    ok(&res);
    for (claim, status) in [
        (
            OpenClaim4::Previous(dionfs_proto::nfs4::OpenDelegationType4::None),
            Nfsstat4::NoGrace,
        ),
        (OpenClaim4::DelegPrevFh, Nfsstat4::Notsupp),
    ] {
        let res = c.in_session(
            &mut s,
            0,
            false,
            &[
                putfh(&x),
                open_args(
                    b"o5",
                    OPEN4_SHARE_ACCESS_READ,
                    0,
                    OpenFlag4::NoCreate,
                    claim,
                ),
            ],
        );
        assert_eq!(last(&res), (Opnum4::Open, status));
    }
}

#[test]
fn open_applies_the_export_options() {
    let server = three_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"options");
    let a = path_of(&server, 0);
    let b = path_of(&server, 1);
    let cpath = path_of(&server, 2);
    std::fs::write(b.join("f"), b"data").unwrap();
    std::fs::write(a.join("root-only"), b"data").unwrap();
    std::fs::set_permissions(a.join("root-only"), std::fs::Permissions::from_mode(0o644)).unwrap();

    // A read-only export: reading is fine, writing or creating is ROFS.
    let broot = export_root(&mut c, &mut s, &b);
    let res = open(
        &mut c,
        &mut s,
        &broot,
        b"o",
        (OPEN4_SHARE_ACCESS_READ, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let res = open(
        &mut c,
        &mut s,
        &broot,
        b"o",
        (OPEN4_SHARE_ACCESS_WRITE, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Rofs));
    let res = open(
        &mut c,
        &mut s,
        &broot,
        b"o",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        unchecked(None),
        "new",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Rofs));

    // The pseudo-filesystem: nothing to create, nothing but directories.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            ArgOp::Putrootfh,
            open_args(
                b"o",
                OPEN4_SHARE_ACCESS_BOTH,
                0,
                unchecked(None),
                by_name("new"),
            ),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Rofs));
    let parent = a.parent().unwrap().to_path_buf();
    let mut ops = vec![ArgOp::Putrootfh];
    for part in parent.components() {
        if let Component::Normal(name) = part {
            ops.push(ArgOp::Lookup(LookupArgs4 {
                objname: Component4::from(name.as_encoded_bytes().to_vec()),
            }));
        }
    }
    for (name, status) in [("a", Nfsstat4::Isdir), ("none", Nfsstat4::Noent)] {
        let mut ops = ops.clone();
        ops.push(open_args(
            b"o",
            OPEN4_SHARE_ACCESS_READ,
            0,
            OpenFlag4::NoCreate,
            by_name(name),
        ));
        let res = c.in_session(&mut s, 0, false, &ops);
        assert_eq!(last(&res), (Opnum4::Open, status), "{name}");
    }

    // Root squashed may read root's 0644 file, not write it.
    let aroot = export_root(&mut c, &mut s, &a);
    let res = open(
        &mut c,
        &mut s,
        &aroot,
        b"o",
        (OPEN4_SHARE_ACCESS_READ, 0),
        OpenFlag4::NoCreate,
        "root-only",
    );
    ok(&res);
    let res = open(
        &mut c,
        &mut s,
        &aroot,
        b"o",
        (OPEN4_SHARE_ACCESS_WRITE, 0),
        OpenFlag4::NoCreate,
        "root-only",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Access));

    // Without squashing, root creates as root.
    let croot = export_root(&mut c, &mut s, &cpath);
    let res = open(
        &mut c,
        &mut s,
        &croot,
        b"o",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        unchecked(None),
        "mine",
    );
    ok(&res);
    assert_eq!(std::fs::metadata(cpath.join("mine")).unwrap().uid(), 0);
}

#[test]
fn shares_deny_other_clients_and_close_downgrade_and_test_stateids() {
    let server = three_exports();
    let mut c1 = server.client();
    let mut s1 = c1.session_ready(b"one");
    let mut c2 = server.client();
    let mut s2 = c2.session_ready(b"two");
    let cpath = path_of(&server, 2);
    let root = export_root(&mut c1, &mut s1, &cpath);

    // Client one opens for both, denying writes.
    let res = open(
        &mut c1,
        &mut s1,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_BOTH, OPEN4_SHARE_DENY_WRITE),
        unchecked(None),
        "f",
    );
    ok(&res);
    let first = opened(&res).stateid;
    let f = file_fh(&res);

    // Client two may read, not write.
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_WRITE, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::ShareDenied));
    // Nor truncate it: the size is set only once the open is had.
    std::fs::write(cpath.join("f"), b"data").unwrap();
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_WRITE, 0),
        truncating(),
        "f",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::ShareDenied));
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 4);
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_READ, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let theirs = opened(&res).stateid;

    // Client one upgrades its open by opening for reading with no deny
    // (the union is kept), then downgrades to reading without deny.
    let res = open(
        &mut c1,
        &mut s1,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_NONE),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let upgraded = opened(&res).stateid;
    assert_eq!((upgraded.other, upgraded.seqid), (first.other, 2));
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[
            putfh(&f),
            ArgOp::OpenDowngrade(OpenDowngradeArgs4 {
                open_stateid: upgraded,
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: OPEN4_SHARE_DENY_NONE,
            }),
        ],
    );
    ok(&res);
    let ResOp::OpenDowngrade(Res4::Ok(downgraded)) = &res.results[2] else {
        panic!("{res:?}");
    };
    assert_eq!(downgraded.seqid, 3);
    // Now client two may open for writing.
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"o2",
        (OPEN4_SHARE_ACCESS_WRITE, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);

    // TEST_STATEID: one's open is good, an old seqid OLD, another
    // client's BAD; after CLOSE, BAD.
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[test_stateids(&[*downgraded, first, theirs])],
    );
    assert_eq!(
        tested(&res),
        [Nfsstat4::Ok, Nfsstat4::OldStateid, Nfsstat4::BadStateid]
    );
    let res = c1.in_session(&mut s1, 0, false, &[putfh(&f), close(*downgraded)]);
    ok(&res);
    let ResOp::Close(Res4::Ok(closed)) = &res.results[2] else {
        panic!("{res:?}");
    };
    assert_eq!(closed.seqid, u32::MAX);
    let res = c1.in_session(&mut s1, 0, false, &[test_stateids(&[*downgraded])]);
    assert_eq!(tested(&res), [Nfsstat4::BadStateid]);
    // An open stateid cannot be freed: CLOSE it.
    let res = c2.in_session(
        &mut s2,
        0,
        false,
        &[ArgOp::FreeStateid(FreeStateidArgs4 { stateid: theirs })],
    );
    assert_eq!(last(&res), (Opnum4::FreeStateid, Nfsstat4::LocksHeld));
}

#[test]
fn locks_with_the_current_stateid_conflict_and_free() {
    let server = three_exports();
    let mut c1 = server.client();
    let mut s1 = c1.session_ready(b"one");
    let mut c2 = server.client();
    let mut s2 = c2.session_ready(b"two");
    let cpath = path_of(&server, 2);
    let root = export_root(&mut c1, &mut s1, &cpath);

    // OPEN then LOCK through the current stateid, in one COMPOUND.
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[
            putfh(&root),
            open_args(
                b"o",
                OPEN4_SHARE_ACCESS_BOTH,
                0,
                unchecked(None),
                by_name("f"),
            ),
            ArgOp::Getfh,
            new_lock(CURRENT, b"l1", NfsLockType4::Write, 100, 50),
        ],
    );
    ok(&res);
    let open1 = opened(&res).stateid;
    let f = file_fh(&res);
    let LockRes4::Ok(lock1) = locked(&res) else {
        panic!("{res:?}");
    };
    assert_eq!(lock1.seqid, 1);

    // Client two's lock over the range is DENIED, with the holder.
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let open2 = opened(&res).stateid;
    let res = c2.in_session(
        &mut s2,
        0,
        false,
        &[
            putfh(&f),
            new_lock(open2, b"l2", NfsLockType4::ReadW, 120, 10),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Lock, Nfsstat4::Denied));
    // `dionfs clients` and the metrics count them: client one holds an
    // open and a lock, client two an open.
    let state = &server.nfs4.as_ref().unwrap().state;
    let held: Vec<_> = state
        .clients()
        .iter()
        .map(|c| (c.clientid, c.opens, c.locks, c.sessions, c.minor))
        .collect();
    assert!(held.contains(&(s1.clientid, 1, 1, 1, 1)), "{held:?}");
    assert!(held.contains(&(s2.clientid, 1, 0, 1, 1)), "{held:?}");
    assert_eq!((state.counts().opens, state.counts().locks), (2, 1));
    let LockRes4::Denied(denied) = locked(&res) else {
        panic!("{res:?}");
    };
    assert_eq!((denied.offset, denied.length), (100, 50));
    assert_eq!(denied.locktype, NfsLockType4::Write);
    assert_eq!(denied.owner.clientid, s1.clientid);
    assert_eq!(denied.owner.owner.as_bytes(), b"l1");
    // LOCKT says the same; past the range is free.
    let clientid2 = s2.clientid;
    let lockt = |offset| {
        ArgOp::Lockt(LocktArgs4 {
            locktype: NfsLockType4::Read,
            offset,
            length: 10,
            owner: StateOwner4 {
                clientid: clientid2,
                owner: Opaque4::from(&b"l2"[..]),
            },
        })
    };
    let res = c2.in_session(&mut s2, 0, false, &[putfh(&f), lockt(120)]);
    assert_eq!(last(&res), (Opnum4::Lockt, Nfsstat4::Denied));
    let res = c2.in_session(&mut s2, 0, false, &[putfh(&f), lockt(150)]);
    ok(&res);
    // A read-only open may not take a write lock.
    let res = open(
        &mut c2,
        &mut s2,
        &root,
        b"ro",
        (OPEN4_SHARE_ACCESS_READ, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    let ro = opened(&res).stateid;
    let res = c2.in_session(
        &mut s2,
        0,
        false,
        &[putfh(&f), new_lock(ro, b"l3", NfsLockType4::Write, 0, 1)],
    );
    assert_eq!(last(&res), (Opnum4::Lock, Nfsstat4::Openmode));

    // A lock stateid with locks cannot be freed; LOCKU (through the
    // current stateid the LOCK left), then it can.
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[ArgOp::FreeStateid(FreeStateidArgs4 { stateid: lock1 })],
    );
    assert_eq!(last(&res), (Opnum4::FreeStateid, Nfsstat4::LocksHeld));
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[
            putfh(&f),
            ArgOp::Lock(Box::new(LockArgs4 {
                locktype: NfsLockType4::Write,
                reclaim: false,
                offset: 0,
                length: 10,
                locker: Locker4::LockOwner(ExistLockOwner4 {
                    lock_stateid: lock1,
                    lock_seqid: 0,
                }),
            })),
            ArgOp::Locku(LockuArgs4 {
                locktype: NfsLockType4::Write,
                seqid: 0,
                lock_stateid: CURRENT,
                offset: 0,
                length: u64::MAX,
            }),
        ],
    );
    ok(&res);
    let ResOp::Locku(Res4::Ok(unlocked)) = res.results.last().unwrap() else {
        panic!("{res:?}");
    };
    assert_eq!((unlocked.other, unlocked.seqid), (lock1.other, 3));
    // Now client two gets its lock.
    let res = c2.in_session(
        &mut s2,
        0,
        false,
        &[
            putfh(&f),
            new_lock(open2, b"l2", NfsLockType4::Read, 120, 10),
        ],
    );
    ok(&res);
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[ArgOp::FreeStateid(FreeStateidArgs4 { stateid: *unlocked })],
    );
    ok(&res);
    let res = c1.in_session(&mut s1, 0, false, &[test_stateids(&[*unlocked, open1])]);
    assert_eq!(tested(&res), [Nfsstat4::BadStateid, Nfsstat4::Ok]);

    // Without a current stateid (PUTFH clears it), LOCK through it is
    // BAD_STATEID.
    let res = c1.in_session(
        &mut s1,
        0,
        false,
        &[
            putfh(&f),
            new_lock(CURRENT, b"l4", NfsLockType4::Read, 0, 1),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Lock, Nfsstat4::BadStateid));
}

#[test]
fn setattr_of_a_size_needs_an_open_for_writing() {
    let server = three_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"sizes");
    let cpath = path_of(&server, 2);
    let root = export_root(&mut c, &mut s, &cpath);
    std::fs::write(cpath.join("f"), b"0123456789").unwrap();

    let res = open(
        &mut c,
        &mut s,
        &root,
        b"w",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let rw = opened(&res).stateid;
    let f = file_fh(&res);
    let res = c.in_session(&mut s, 0, false, &[putfh(&f), set_size(rw, 4)]);
    ok(&res);
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 4);

    // The current stateid of the OPEN before it, in one COMPOUND.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            open_args(
                b"w",
                OPEN4_SHARE_ACCESS_BOTH,
                0,
                OpenFlag4::NoCreate,
                by_name("f"),
            ),
            set_size(CURRENT, 2),
        ],
    );
    ok(&res);
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 2);

    let res = open(
        &mut c,
        &mut s,
        &root,
        b"r",
        (OPEN4_SHARE_ACCESS_READ, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    let ro = opened(&res).stateid;
    let res = c.in_session(&mut s, 0, false, &[putfh(&f), set_size(ro, 0)]);
    assert_eq!(last(&res), (Opnum4::Setattr, Nfsstat4::Openmode));
    // A stateid of another file is BAD_STATEID.
    std::fs::write(cpath.join("g"), b"").unwrap();
    std::fs::write(cpath.join("h"), b"h").unwrap();
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"w",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        OpenFlag4::NoCreate,
        "g",
    );
    let g = file_fh(&res);
    // (Seqid 0: whatever the open's seqid now is.)
    let any_seqid = StateId4 { seqid: 0, ..rw };
    let res = c.in_session(&mut s, 0, false, &[putfh(&g), set_size(any_seqid, 0)]);
    assert_eq!(last(&res), (Opnum4::Setattr, Nfsstat4::BadStateid));
    // The anonymous stateid, while an open denies writing, is LOCKED.
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"d",
        (OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_DENY_WRITE),
        OpenFlag4::NoCreate,
        "h",
    );
    ok(&res);
    let h = file_fh(&res);
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[putfh(&h), set_size(StateId4::default(), 0)],
    );
    assert_eq!(last(&res), (Opnum4::Setattr, Nfsstat4::Locked));

    // UNCHECKED4 with a size of 0 truncates what is there, by name or
    // by handle (CLAIM_FH: a create there makes nothing); only an open
    // for writing may (INVAL).
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"t",
        (OPEN4_SHARE_ACCESS_READ, 0),
        truncating(),
        "f",
    );
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Inval));
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 2);
    let res = open(
        &mut c,
        &mut s,
        &root,
        b"t",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        truncating(),
        "f",
    );
    ok(&res);
    assert_eq!(
        opened(&res).attrset,
        Bitmap4::from_bits(&[Attr4::Size.bit()])
    );
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 0);
    std::fs::write(cpath.join("f"), b"again").unwrap();
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&f),
            open_args(
                b"t2",
                OPEN4_SHARE_ACCESS_WRITE,
                0,
                truncating(),
                OpenClaim4::Fh,
            ),
        ],
    );
    ok(&res);
    assert_eq!(std::fs::metadata(cpath.join("f")).unwrap().len(), 0);
    assert_eq!(std::fs::metadata(cpath.join("h")).unwrap().len(), 1);
}

/// A lock taken on the file outside NFSv4 (a process on the server;
/// NLM's locks are OFD locks in the same kernel table) denies a v4 LOCK,
/// shown as client 0, owner `local`; once it goes, the LOCK is granted.
#[test]
fn a_lock_outside_nfs4_denies_a_v4_lock() {
    use dionfs_sys::lock::{ofd_setlk, LockRange, LockType};

    let server = three_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"local");
    let cpath = path_of(&server, 2);
    let root = export_root(&mut c, &mut s, &cpath);
    std::fs::write(cpath.join("f"), b"0123456789").unwrap();
    let local = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(cpath.join("f"))
        .unwrap();
    let range = LockRange { start: 2, len: 3 };
    assert!(ofd_setlk(&local, LockType::Write, range).unwrap());

    let res = open(
        &mut c,
        &mut s,
        &root,
        b"o",
        (OPEN4_SHARE_ACCESS_BOTH, 0),
        OpenFlag4::NoCreate,
        "f",
    );
    ok(&res);
    let stateid = opened(&res).stateid;
    let f = file_fh(&res);
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[putfh(&f), new_lock(stateid, b"l", NfsLockType4::Read, 0, 4)],
    );
    let LockRes4::Denied(denied) = locked(&res) else {
        panic!("{res:?}");
    };
    assert_eq!((denied.offset, denied.length), (2, 3));
    assert_eq!(denied.locktype, NfsLockType4::Write);
    assert_eq!(denied.owner.clientid, 0);
    assert_eq!(denied.owner.owner.as_bytes(), b"local");

    assert!(ofd_setlk(&local, LockType::Unlock, range).unwrap());
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[putfh(&f), new_lock(stateid, b"l", NfsLockType4::Read, 0, 4)],
    );
    ok(&res);
}

/// A file removed while open is still closed (and its locks released):
/// CLOSE and LOCKU need the state, not the file (pynfs RNM21).
#[test]
fn a_file_removed_while_open_is_closed() {
    let server = three_exports();
    let mut c = server.client();
    let mut s = c.session_ready(b"removed");
    let cpath = path_of(&server, 2);
    let root = export_root(&mut c, &mut s, &cpath);
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            open_args(
                b"o",
                OPEN4_SHARE_ACCESS_BOTH,
                0,
                unchecked(None),
                by_name("f"),
            ),
            ArgOp::Getfh,
            new_lock(CURRENT, b"l", NfsLockType4::Write, 0, 1),
        ],
    );
    ok(&res);
    let stateid = opened(&res).stateid;
    let f = file_fh(&res);
    let LockRes4::Ok(lock) = locked(&res) else {
        panic!("{res:?}");
    };
    std::fs::remove_file(cpath.join("f")).unwrap();
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&f),
            ArgOp::Locku(LockuArgs4 {
                locktype: NfsLockType4::Write,
                seqid: 0,
                lock_stateid: lock,
                offset: 0,
                length: 1,
            }),
            close(stateid),
        ],
    );
    ok(&res);
}

#[test]
fn a_new_open_before_reclaim_complete_is_grace() {
    let server = three_exports();
    let mut c = server.client();
    // RFC 8881 section 18.51.3 (pynfs RECC3): a client opens nothing new
    // before it has said its reclaims are done.
    let mut s = c.session(b"early");
    let a = path_of(&server, 0);
    let root = export_root(&mut c, &mut s, &a);
    let args = (OPEN4_SHARE_ACCESS_BOTH, 0);
    let res = open(&mut c, &mut s, &root, b"o", args, unchecked(None), "f");
    assert_eq!(last(&res), (Opnum4::Open, Nfsstat4::Grace));
    assert!(!a.join("f").exists(), "the refused OPEN made the file");
    let done = ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: false });
    ok(&c.in_session(&mut s, 0, false, &[done]));
    let res = open(&mut c, &mut s, &root, b"o", args, unchecked(None), "f");
    ok(&res);
}
