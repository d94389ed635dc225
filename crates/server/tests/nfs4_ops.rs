//! The NFSv4.1 filehandle, name, attribute and directory ops against an
//! in-process server with three exports, through the raw client
//! (tests/nfs4/client.rs): the pseudo-root and crossing into exports,
//! who sees what, attributes of pseudo and export files, READDIR paging,
//! SECINFO_NO_NAME, and the ops that change something with the export
//! options (read-only, root squash) applied.

mod nfs4;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use dionfs_core::export::{Access, ExportConfig};
use dionfs_fs::acl::{PosixAcl, Tag};
use dionfs_fs::handle::PathId;
use dionfs_proto::nfs4::{
    ArgOp, Attr4, Bitmap4, Component4, CreateArgs4, CreateType4, Fattr4, GetattrArgs4, LinkArgs4,
    Linktext4, NfsFh4, Nfsace4, Nfsacl4, Nfsstat4, Opnum4, Owner4, PutfhArgs4, ReaddirArgs4,
    RemoveArgs4, RenameArgs4, Res4, ResOp, SecinfoStyle4, SetAttrs4, SetattrArgs4, StateId4,
    Verifier4, VerifyArgs4, ACE4_APPEND_DATA, ACE4_DELETE_CHILD, ACE4_DIRECTORY_INHERIT_ACE,
    ACE4_EXECUTE, ACE4_FILE_INHERIT_ACE, ACE4_READ_DATA, ACE4_WRITE_DATA,
};
use dionfs_xdr::Decoder;

use nfs4::client::{CompoundRes, Session};
use nfs4::TestServer;
use nfs4::{export_dir, last, lookup, ok, path_of, putfh, statuses, walk};

/// `a` (read-write, root_squash, loopback), `b` (read-only, loopback)
/// and `hidden` (10.0.0.0/8 only), side by side in one directory.
fn three_exports() -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            let export = |name: &str, f: &dyn Fn(&mut ExportConfig)| export_dir(dir, name, f);
            vec![
                export("a", &|_| {}),
                export("b", &|x| x.entries[0].options.access = Access::Ro),
                export("hidden", &|x| {
                    x.entries[0].clients = vec!["10.0.0.0/8".parse().unwrap()]
                }),
            ]
        },
    )
}

fn getattr(attrs: &[Attr4]) -> ArgOp {
    ArgOp::Getattr(GetattrArgs4 {
        attr_request: bitmap(attrs),
    })
}

fn bitmap(attrs: &[Attr4]) -> Bitmap4 {
    Bitmap4::from_bits(&attrs.iter().map(|a| a.bit()).collect::<Vec<_>>())
}

/// The handles the COMPOUND's GETFHs returned.
fn handles(res: &CompoundRes) -> Vec<NfsFh4> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Getfh(Res4::Ok(ok)) => Some(ok.object.clone()),
            _ => None,
        })
        .collect()
}

/// The attributes the COMPOUND's GETATTRs returned.
fn fattrs(res: &CompoundRes) -> Vec<Fattr4> {
    res.results
        .iter()
        .filter_map(|r| match r {
            ResOp::Getattr(Res4::Ok(ok)) => Some(ok.obj_attributes.clone()),
            _ => None,
        })
        .collect()
}

/// type, fsid and fileid, mode and mounted_on_fileid, as [`TFFM`] asks.
#[derive(Debug, PartialEq, Eq)]
struct Basic {
    kind: u32,
    fsid: (u64, u64),
    fileid: u64,
    mode: u32,
    owner: String,
    mounted_on: u64,
}

const TFFM: [Attr4; 6] = [
    Attr4::Type,
    Attr4::Fsid,
    Attr4::Fileid,
    Attr4::Mode,
    Attr4::Owner,
    Attr4::MountedOnFileid,
];

fn basic(f: &Fattr4) -> Basic {
    assert_eq!(f.attrmask, bitmap(&TFFM), "every attribute asked for");
    let mut d = Decoder::new(f.attr_vals.as_bytes());
    let b = Basic {
        kind: d.u32().unwrap(),
        fsid: (d.u64().unwrap(), d.u64().unwrap()),
        fileid: d.u64().unwrap(),
        mode: d.u32().unwrap(),
        owner: String::from_utf8(d.opaque_var(1024).unwrap().to_vec()).unwrap(),
        mounted_on: d.u64().unwrap(),
    };
    assert_eq!(d.remaining(), 0);
    b
}

const NF4DIR: u32 = 2;

fn session(server: &TestServer) -> (nfs4::client::Client, Session) {
    let mut c = server.client();
    let s = c.session(b"ops");
    (c, s)
}

#[test]
fn the_pseudo_root_leads_to_the_exports_a_client_may_use() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let a = path_of(&server, 0);
    let parent = a.parent().unwrap().to_path_buf();

    // Down to `a`, the attributes of every directory on the way.
    let mut ops = vec![ArgOp::Putrootfh, getattr(&TFFM)];
    for op in walk(&a).into_iter().skip(1) {
        ops.push(op);
        ops.push(getattr(&TFFM));
    }
    ops.push(ArgOp::Getfh);
    ops.push(ArgOp::Lookupp);
    ops.push(ArgOp::Getfh);
    let res = c.in_session(&mut s, 0, false, &ops);
    ok(&res);
    let attrs: Vec<Basic> = fattrs(&res).iter().map(basic).collect();
    let (export, pseudo) = attrs.split_last().unwrap();
    let mut dir = PathBuf::from("/");
    for (i, p) in pseudo.iter().enumerate() {
        if i > 0 {
            dir = dir.join(a.components().nth(i).unwrap());
        }
        let fileid = PathId::of(dir.as_os_str().as_encoded_bytes()).fileid();
        assert_eq!(
            *p,
            Basic {
                kind: NF4DIR,
                fsid: (0, 0),
                fileid,
                mode: 0o555,
                owner: "0".into(),
                mounted_on: fileid,
            },
            "{}",
            dir.display()
        );
    }
    let id = server.server.exports()[0].config.id;
    let on = a.metadata().unwrap();
    assert_eq!(export.kind, NF4DIR);
    assert_eq!(export.fsid, (1 + u64::from(id), 0));
    assert_eq!(export.fileid, on.ino());
    assert_eq!(export.mode, 0o777);
    assert_eq!(
        export.mounted_on,
        PathId::of(a.as_os_str().as_encoded_bytes()).fileid()
    );

    // LOOKUPP from the export's root is the pseudo directory above it,
    // the one READDIR lists the exports in.
    let [a_fh, up] = &handles(&res)[..] else {
        panic!("{res:?}");
    };
    let mut to_parent = walk(&parent);
    to_parent.push(ArgOp::Getfh);
    let res = c.in_session(&mut s, 0, false, &to_parent);
    ok(&res);
    assert_eq!(&handles(&res), std::slice::from_ref(up));
    assert_ne!(a_fh, up);

    // `hidden` is not there for this client: neither by name nor listed.
    let res = c.in_session(&mut s, 0, false, &walk(&path_of(&server, 2)));
    assert_eq!(last(&res), (Opnum4::Lookup, Nfsstat4::Noent));
    let names = list(&mut c, &mut s, up, &[], 4096);
    assert_eq!(names, ["a", "b"]);

    // LOOKUPP climbs to the root, and no further.
    let mut ops = vec![putfh(up)];
    ops.extend(std::iter::repeat_n(
        ArgOp::Lookupp,
        parent.components().count() - 1,
    ));
    ops.push(ArgOp::Getfh);
    ops.push(ArgOp::Putrootfh);
    ops.push(ArgOp::Getfh);
    ops.push(ArgOp::Lookupp);
    let res = c.in_session(&mut s, 0, false, &ops);
    assert_eq!(last(&res), (Opnum4::Lookupp, Nfsstat4::Noent));
    let fhs = handles(&res);
    assert_eq!(fhs[0], fhs[1], "LOOKUPP reached the root");

    // Names: too long, empty, dots.
    for (name, status) in [
        (vec![b'x'; 256], Nfsstat4::Nametoolong),
        (vec![], Nfsstat4::Inval),
        (b"..".to_vec(), Nfsstat4::Badname),
    ] {
        let res = c.in_session(&mut s, 0, false, &[putfh(a_fh), lookup(&name)]);
        assert_eq!(last(&res), (Opnum4::Lookup, status));
    }
    // `.` is the directory itself (nfs-rs looks it up).
    let res = c.in_session(&mut s, 0, false, &[putfh(a_fh), lookup(b"."), ArgOp::Getfh]);
    ok(&res);
    assert_eq!(&handles(&res), std::slice::from_ref(a_fh));
    // A forged pseudo handle.
    let mut forged = up.as_bytes().to_vec();
    *forged.last_mut().unwrap() ^= 1;
    let res = c.in_session(&mut s, 0, false, &[putfh(&NfsFh4::new(forged).unwrap())]);
    assert_eq!(last(&res), (Opnum4::Putfh, Nfsstat4::Badhandle));
}

/// READDIR of `dir` with `maxcount`, cookie after cookie to the end: the
/// names, in order.
fn list(
    c: &mut nfs4::client::Client,
    s: &mut Session,
    dir: &NfsFh4,
    attrs: &[Attr4],
    maxcount: u32,
) -> Vec<String> {
    let mut names = Vec::new();
    let mut cookie = 0;
    for _ in 0..1000 {
        let res = c.in_session(
            s,
            0,
            false,
            &[
                putfh(dir),
                ArgOp::Readdir(ReaddirArgs4 {
                    cookie,
                    cookieverf: Verifier4::default(),
                    dircount: 0,
                    maxcount,
                    attr_request: bitmap(attrs),
                }),
            ],
        );
        let [_, _, ResOp::Readdir(Res4::Ok(ok))] = &res.results[..] else {
            panic!("{res:?}");
        };
        for e in &ok.reply.entries {
            assert_eq!(e.attrs.attrmask, bitmap(attrs));
            names.push(String::from_utf8(e.name.as_bytes().to_vec()).unwrap());
            cookie = e.cookie;
        }
        if ok.reply.eof {
            return names;
        }
        assert!(!ok.reply.entries.is_empty());
    }
    panic!("READDIR never ended");
}

fn export_root(c: &mut nfs4::client::Client, s: &mut Session, path: &Path) -> NfsFh4 {
    let mut ops = walk(path);
    ops.push(ArgOp::Getfh);
    let res = c.in_session(s, 0, false, &ops);
    ok(&res);
    handles(&res).remove(0)
}

#[test]
fn readdir_pages_through_a_directory_with_attributes() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let a = path_of(&server, 0);
    let mut want: Vec<String> = (0..40).map(|i| format!("file-{i:02}")).collect();
    for name in &want {
        std::fs::write(a.join(name), b"x").unwrap();
    }
    let root = export_root(&mut c, &mut s, &a);
    let attrs = [Attr4::Type, Attr4::Fileid, Attr4::Filehandle];
    let mut all = list(&mut c, &mut s, &root, &attrs, 4096);
    all.sort();
    assert_eq!(all, want);
    // Small replies: several rounds, nothing lost or repeated.
    let mut paged = list(&mut c, &mut s, &root, &attrs, 400);
    paged.sort();
    assert_eq!(paged, want);
    want.sort();

    let readdir = |cookie, maxcount| {
        ArgOp::Readdir(ReaddirArgs4 {
            cookie,
            cookieverf: Verifier4::default(),
            dircount: 0,
            maxcount,
            attr_request: bitmap(&attrs),
        })
    };
    let res = c.in_session(&mut s, 0, false, &[putfh(&root), readdir(0, 40)]);
    assert_eq!(last(&res), (Opnum4::Readdir, Nfsstat4::Toosmall));
    let res = c.in_session(&mut s, 0, false, &[putfh(&root), readdir(1, 4096)]);
    assert_eq!(last(&res), (Opnum4::Readdir, Nfsstat4::BadCookie));
}

#[test]
fn secinfo_no_name_consumes_the_filehandle() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            ArgOp::Putrootfh,
            ArgOp::SecinfoNoName(SecinfoStyle4::CurrentFh),
            ArgOp::Getfh,
        ],
    );
    let statuses = statuses(&res);
    assert_eq!(statuses[2], (Opnum4::SecinfoNoName, Nfsstat4::Ok));
    assert_eq!(statuses[3], (Opnum4::Getfh, Nfsstat4::Nofilehandle));
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            ArgOp::Putrootfh,
            ArgOp::SecinfoNoName(SecinfoStyle4::Parent),
        ],
    );
    assert_eq!(last(&res), (Opnum4::SecinfoNoName, Nfsstat4::Noent));
}

fn create(kind: CreateType4, name: &str, mode: Option<u32>) -> ArgOp {
    ArgOp::Create(Box::new(CreateArgs4 {
        objtype: kind,
        objname: Component4::from(name),
        createattrs: SetAttrs4 {
            mode,
            ..SetAttrs4::default()
        }
        .to_fattr(),
    }))
}

fn remove(name: &str) -> ArgOp {
    ArgOp::Remove(RemoveArgs4 {
        target: Component4::from(name),
    })
}

#[test]
fn changes_apply_the_export_options() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let a = path_of(&server, 0);
    let b = path_of(&server, 1);
    let root = export_root(&mut c, &mut s, &a);

    // A directory made as root on a root_squash export is the
    // anonymous user's.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            create(CreateType4::Dir, "d", Some(0o750)),
            ArgOp::Getfh,
        ],
    );
    ok(&res);
    let ResOp::Create(Res4::Ok(made)) = &res.results[2] else {
        panic!("{res:?}");
    };
    assert!(made.cinfo.after != made.cinfo.before);
    assert_eq!(made.attrset, bitmap(&[Attr4::Mode]));
    let d = handles(&res).remove(0);
    let meta = std::fs::metadata(a.join("d")).unwrap();
    assert!(meta.is_dir());
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    assert_eq!(meta.mode() & 0o7777, 0o750);

    // SETATTR of its mode, then VERIFY and NVERIFY of it.
    let mode = SetAttrs4 {
        mode: Some(0o700),
        ..SetAttrs4::default()
    }
    .to_fattr();
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&d),
            ArgOp::Setattr(SetattrArgs4 {
                stateid: StateId4::default(),
                obj_attributes: mode.clone(),
            }),
            ArgOp::Verify(VerifyArgs4 {
                obj_attributes: mode.clone(),
            }),
            ArgOp::Nverify(VerifyArgs4 {
                obj_attributes: mode,
            }),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Nverify, Nfsstat4::Same));
    let meta = std::fs::metadata(a.join("d")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o700);

    // Owners: a squashed root may not give a file away; a name the
    // server cannot map is BADOWNER.
    for (owner, status) in [("4242", Nfsstat4::Perm), ("who@where", Nfsstat4::Badowner)] {
        let res = c.in_session(
            &mut s,
            0,
            false,
            &[
                putfh(&d),
                ArgOp::Setattr(SetattrArgs4 {
                    stateid: StateId4::default(),
                    obj_attributes: SetAttrs4 {
                        owner: Some(owner.into()),
                        ..SetAttrs4::default()
                    }
                    .to_fattr(),
                }),
            ],
        );
        assert_eq!(last(&res), (Opnum4::Setattr, status), "{owner}");
    }
    assert_eq!(std::fs::metadata(a.join("d")).unwrap().uid(), 65534);

    // A symbolic link and its target; a regular file is OPEN's.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            create(CreateType4::Link(Linktext4::from("over/there")), "l", None),
            ArgOp::Readlink,
            putfh(&root),
            create(
                CreateType4::Other(dionfs_proto::nfs4::NfsFtype4::Reg),
                "r",
                None,
            ),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Create, Nfsstat4::Badtype));
    let ResOp::Readlink(Res4::Ok(target)) = &res.results[3] else {
        panic!("{res:?}");
    };
    assert_eq!(target.as_bytes(), b"over/there");
    assert_eq!(
        std::fs::read_link(a.join("l")).unwrap(),
        PathBuf::from("over/there")
    );

    // RENAME d to e, LINK a file, then REMOVE them all.
    std::fs::write(a.join("f"), b"data").unwrap();
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            ArgOp::Savefh,
            ArgOp::Rename(RenameArgs4 {
                oldname: Component4::from("d"),
                newname: Component4::from("e"),
            }),
            lookup(b"f"),
            ArgOp::Savefh,
            putfh(&root),
            ArgOp::Link(LinkArgs4 {
                newname: Component4::from("f2"),
            }),
        ],
    );
    ok(&res);
    assert!(a.join("e").is_dir() && !a.join("d").exists());
    assert_eq!(std::fs::metadata(a.join("f")).unwrap().nlink(), 2);
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&root),
            remove("e"),
            remove("l"),
            remove("f2"),
            remove("f"),
            remove("f"),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Remove, Nfsstat4::Noent));
    assert_eq!(statuses(&res).len(), 7, "SEQUENCE, PUTFH and five REMOVEs");
    assert_eq!(std::fs::read_dir(&a).unwrap().count(), 0);

    // A read-only export and the pseudo-filesystem refuse changes; a
    // RENAME between two exports is XDEV.
    let b_root = export_root(&mut c, &mut s, &b);
    std::fs::create_dir(b.join("sub")).unwrap();
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[putfh(&b_root), create(CreateType4::Dir, "x", None)],
    );
    assert_eq!(last(&res), (Opnum4::Create, Nfsstat4::Rofs));
    // Each PUTFH's export gives its own options, whatever export an
    // earlier op of the COMPOUND was admitted to; so does the read-only
    // one when RESTOREFH goes back to it after a PUTFH of the writable.
    let cases = [
        (vec![putfh(&root), putfh(&b_root)], Some(Nfsstat4::Rofs)),
        (vec![putfh(&b_root), putfh(&root)], None),
        (
            vec![
                putfh(&b_root),
                ArgOp::Savefh,
                putfh(&root),
                ArgOp::Restorefh,
            ],
            Some(Nfsstat4::Rofs),
        ),
    ];
    for (mut ops, refused) in cases {
        ops.push(create(CreateType4::Dir, "x", None));
        let res = c.in_session(&mut s, 0, false, &ops);
        match refused {
            Some(status) => assert_eq!(last(&res), (Opnum4::Create, status)),
            None => {
                ok(&res);
                assert!(a.join("x").is_dir());
                std::fs::remove_dir(a.join("x")).unwrap();
            }
        }
        assert!(!b.join("x").exists());
    }
    let res = c.in_session(&mut s, 0, false, &[putfh(&b_root), remove("sub")]);
    assert_eq!(last(&res), (Opnum4::Remove, Nfsstat4::Rofs));
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[ArgOp::Putrootfh, create(CreateType4::Dir, "x", None)],
    );
    assert_eq!(last(&res), (Opnum4::Create, Nfsstat4::Rofs));
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&b_root),
            ArgOp::Savefh,
            putfh(&root),
            ArgOp::Rename(RenameArgs4 {
                oldname: Component4::from("sub"),
                newname: Component4::from("sub"),
            }),
        ],
    );
    assert_eq!(last(&res), (Opnum4::Rename, Nfsstat4::Xdev));
    assert!(b.join("sub").is_dir());
}

#[test]
fn a_handle_of_an_export_the_client_may_not_use_is_access() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let hidden = NfsFh4::new(server.server.exports()[2].fs.root_handle().to_vec()).unwrap();
    let res = c.in_session(&mut s, 0, false, &[putfh(&hidden)]);
    assert_eq!(last(&res), (Opnum4::Putfh, Nfsstat4::Access));
    let shown = NfsFh4::new(server.server.exports()[0].fs.root_handle().to_vec()).unwrap();
    // Admitted to one export, a COMPOUND is not to the next.
    let res = c.in_session(&mut s, 0, false, &[putfh(&shown), putfh(&hidden)]);
    assert_eq!(last(&res), (Opnum4::Putfh, Nfsstat4::Access));
    assert_eq!(statuses(&res).len(), 3);
    let res = c.in_session(&mut s, 0, false, &[putfh(&shown), ArgOp::Getfh]);
    ok(&res);
    assert_eq!(handles(&res), [shown]);
}

/// `outer` and `outer/mid/inner`, both for loopback.
fn nested_exports() -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            let outer = dir.join("outer");
            let inner = outer.join("mid/inner");
            std::fs::create_dir_all(&inner).unwrap();
            [outer, inner]
                .into_iter()
                .map(|path| {
                    let mut x = ExportConfig::with_defaults(path);
                    x.entries[0].options.secure = false;
                    x
                })
                .collect()
        },
    )
}

#[test]
fn lookup_crosses_into_a_nested_export_and_lookupp_comes_back() {
    let server = nested_exports();
    let (mut c, mut s) = session(&server);
    let exports = server.server.exports();
    let (outer, inner) = (&exports[0], &exports[1]);
    let outer_root = NfsFh4::new(outer.fs.root_handle().to_vec()).unwrap();
    let inner_root = NfsFh4::new(inner.fs.root_handle().to_vec()).unwrap();
    let mid = outer.config.path.join("mid");

    // Down from the outer export's root: `mid` is its directory, `inner`
    // the inner export's root, with its own fsid; and back up.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            putfh(&outer_root),
            lookup(b"mid"),
            ArgOp::Getfh,
            lookup(b"inner"),
            ArgOp::Getfh,
            getattr(&TFFM),
            ArgOp::Lookupp,
            ArgOp::Getfh,
            ArgOp::Lookupp,
            ArgOp::Getfh,
        ],
    );
    ok(&res);
    let fhs = handles(&res);
    assert_eq!(fhs[1], inner_root, "crossed into the inner export");
    assert_eq!(fhs[2], fhs[0], "LOOKUPP from the inner root is `mid`");
    assert_eq!(fhs[3], outer_root);
    let attrs = basic(&fattrs(&res)[0]);
    assert_eq!(attrs.fsid, (1 + u64::from(inner.config.id), 0));
    assert_eq!(
        attrs.fileid,
        std::fs::metadata(&inner.config.path).unwrap().ino()
    );

    // READDIR of `mid` lists the inner root with the inner export's
    // attributes.
    let res = c.in_session(
        &mut s,
        0,
        false,
        &[
            ArgOp::Putfh(PutfhArgs4 {
                object: fhs[0].clone(),
            }),
            ArgOp::Readdir(ReaddirArgs4 {
                cookie: 0,
                cookieverf: Verifier4::default(),
                dircount: 0,
                maxcount: 4096,
                attr_request: bitmap(&TFFM),
            }),
        ],
    );
    let [_, _, ResOp::Readdir(Res4::Ok(list))] = &res.results[..] else {
        panic!("{res:?}");
    };
    let [entry] = &list.reply.entries[..] else {
        panic!("{list:?}");
    };
    assert_eq!(entry.name.as_bytes(), b"inner");
    let listed = basic(&entry.attrs);
    assert_eq!(listed.fsid, attrs.fsid);
    assert_eq!(listed.fileid, attrs.fileid);
    assert!(mid.is_dir());
}

/// The POSIX ACL `kind` of `path`, as the file system keeps it.
fn posix_acl(path: &Path, default: bool) -> Option<PosixAcl> {
    let name = if default {
        "system.posix_acl_default"
    } else {
        "system.posix_acl_access"
    };
    let mut buf = vec![0; 4096];
    let len = rustix::fs::getxattr(path, name, &mut buf[..]).ok()?;
    Some(PosixAcl::from_xattr(&buf[..len]).expect("an ACL the kernel wrote"))
}

#[test]
fn create_sets_the_acl_it_is_given_or_leaves_it_out_of_attrset() {
    let server = three_exports();
    let (mut c, mut s) = session(&server);
    let a = path_of(&server, 0);
    let root = export_root(&mut c, &mut s, &a);
    let ace = |acetype, flag, access_mask, who: &str| Nfsace4 {
        acetype,
        flag,
        access_mask,
        who: Owner4::from(who),
    };
    let rwx = ACE4_READ_DATA | ACE4_WRITE_DATA | ACE4_APPEND_DATA | ACE4_EXECUTE;
    let inherit = ACE4_FILE_INHERIT_ACE | ACE4_DIRECTORY_INHERIT_ACE;
    let with_acl = |name: &str, aces: Vec<Nfsace4>| {
        ArgOp::Create(Box::new(CreateArgs4 {
            objtype: CreateType4::Dir,
            objname: Component4::from(name),
            createattrs: SetAttrs4 {
                mode: Some(0o750),
                acl: Some(Nfsacl4(aces)),
                ..SetAttrs4::default()
            }
            .to_fattr(),
        }))
    };
    // A directory with a named user, inherited by what is made in it.
    let aces = vec![
        ace(0, inherit, rwx | ACE4_DELETE_CHILD, "OWNER@"),
        ace(0, inherit, ACE4_READ_DATA | ACE4_EXECUTE, "1001"),
        ace(0, inherit, 0, "GROUP@"),
        ace(0, inherit, 0, "EVERYONE@"),
    ];
    let res = c.in_session(&mut s, 0, false, &[putfh(&root), with_acl("d", aces)]);
    ok(&res);
    let ResOp::Create(Res4::Ok(made)) = &res.results[2] else {
        panic!("{res:?}");
    };
    assert_eq!(made.attrset, bitmap(&[Attr4::Acl, Attr4::Mode]));
    let want = PosixAcl::of(&[
        (Tag::UserObj, 7),
        (Tag::User(1001), 5),
        (Tag::GroupObj, 0),
        (Tag::Mask, 5),
        (Tag::Other, 0),
    ]);
    assert_eq!(posix_acl(&a.join("d"), false), Some(want.clone()));
    assert_eq!(posix_acl(&a.join("d"), true), Some(want));
    // One POSIX cannot say (an AUDIT ACE): made without it, as knfsd,
    // and `acl` left out of attrset.
    let audit = vec![ace(2, 0x10, ACE4_READ_DATA, "OWNER@")];
    let res = c.in_session(&mut s, 0, false, &[putfh(&root), with_acl("e", audit)]);
    ok(&res);
    let ResOp::Create(Res4::Ok(made)) = &res.results[2] else {
        panic!("{res:?}");
    };
    assert_eq!(made.attrset, bitmap(&[Attr4::Mode]));
    assert!(a.join("e").is_dir());
    assert_eq!(posix_acl(&a.join("e"), false), None);
}
