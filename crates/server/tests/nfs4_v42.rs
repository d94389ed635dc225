//! NFSv4.2's data and extended-attribute ops (RFC 7862, RFC 8276)
//! against an in-process server, through the raw client
//! (tests/nfs4/client.rs): SEEK, READ_PLUS (in each I/O mode), ALLOCATE, DEALLOCATE, COPY and CLONE on
//! exports with and without `integrity = "crc32c"` (each followed by the
//! check `dionfs scrub` makes, which must find every checksum right), the
//! xattr ops with their create/replace flags and paging, the export
//! options (read-only, root squash), ACCESS's xattr bits, and a minor
//! version 1 COMPOUND refusing the 4.2 ops.
//!
//! File data is written through the export's data plane, as a WRITE
//! would write it, so that an integrity export has its checksums.

mod nfs4;

use std::collections::BTreeSet;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dionfs_core::export::{Access, ExportConfig, Integrity, Squash};
use dionfs_core::exports::Export;
use dionfs_dataplane::{Mode, Stable};
use dionfs_integrity::scrub::{scrub_file, FileResult};
use dionfs_integrity::FileKey;
use dionfs_proto::nfs4::{
    AccessArgs4, AllocateArgs4, ArgOp, Attr4, Bitmap4, CloneArgs4, Component4, CopyArgs4, CopyRes4,
    DataContent4, GetattrArgs4, GetxattrArgs4, ListxattrsArgs4, Netloc4, NfsFh4, Nfsstat4, Opnum4,
    ReadArgs4, ReadPlusContent4, RemovexattrArgs4, Res4, ResOp, SeekArgs4, SeekResOk4,
    SetxattrArgs4, SetxattrOption4, StableHow4, StateId4, Utf8Str, XattrValue4, ACCESS4_MODIFY,
    ACCESS4_READ, ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE,
};

use nfs4::client::{sequence_op, Client, CompoundRes, Session};
use nfs4::TestServer;
use nfs4::{export_dir, lookup, putfh};

/// The anonymous stateid: no OPEN is needed (none is served yet).
const ANON: StateId4 = StateId4 {
    seqid: 0,
    other: [0; 12],
};

/// The current-stateid value, meaning a stateid the COMPOUND has none of.
const CURRENT: StateId4 = StateId4 {
    seqid: 1,
    other: [0; 12],
};

/// `rw` (read-write, no_root_squash, integrity as asked), `ro`
/// (read-only) and `squashed` (root_squash), side by side.
fn server(integrity: bool) -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            let export = |name: &str, f: &dyn Fn(&mut ExportConfig)| {
                export_dir(dir, name, &|x| {
                    x.entries[0].options.squash = Squash::NoRootSquash;
                    if integrity {
                        x.integrity = Integrity::Crc32c;
                    }
                    f(x);
                })
            };
            vec![
                export("rw", &|_| {}),
                export("ro", &|x| x.entries[0].options.access = Access::Ro),
                export("squashed", &|x| {
                    x.entries[0].options.squash = Squash::RootSquash
                }),
            ]
        },
    )
}

fn export(server: &TestServer, index: usize) -> Arc<Export> {
    server.server.exports()[index].clone()
}

/// A client of minor version 2 in a session.
struct V42 {
    client: Client,
    session: Session,
}

impl V42 {
    fn new(server: &TestServer) -> V42 {
        let mut client = server.client();
        let session = client.session(b"v42");
        V42 { client, session }
    }

    /// SEQUENCE and `ops` in a COMPOUND of minor version `minor`.
    fn compound_of(&mut self, minor: u32, ops: &[ArgOp]) -> CompoundRes {
        let seqid = self.session.next_seqid[0];
        let mut all = vec![sequence_op(&self.session, 0, seqid, false)];
        all.extend_from_slice(ops);
        let xid = self.client.xid();
        let res = self
            .client
            .compound_raw(xid, &Client::compound_args("v42", minor, &all));
        assert!(
            matches!(res.results.first(), Some(ResOp::Sequence(Res4::Ok(_)))),
            "{:?}",
            res.statuses()
        );
        self.session.next_seqid[0] = seqid.wrapping_add(1);
        res
    }

    fn compound(&mut self, ops: &[ArgOp]) -> CompoundRes {
        self.compound_of(2, ops)
    }

    /// `ops` on the file `fh`, their last result.
    fn on(&mut self, fh: &NfsFh4, ops: &[ArgOp]) -> ResOp {
        let mut all = vec![putfh(fh)];
        all.extend_from_slice(ops);
        let res = self.compound(&all);
        res.results.last().unwrap().clone()
    }

    /// The handle of `name` in the root of export `path` (of the root
    /// itself for `None`).
    fn handle(&mut self, export: &Path, name: Option<&str>) -> NfsFh4 {
        let mut ops = vec![ArgOp::Putrootfh];
        for c in export.components() {
            if let std::path::Component::Normal(n) = c {
                ops.push(lookup(n.as_encoded_bytes()));
            }
        }
        ops.extend(name.map(|name| lookup(name.as_bytes())));
        ops.push(ArgOp::Getfh);
        let res = self.compound(&ops);
        match res.results.last() {
            Some(ResOp::Getfh(Res4::Ok(ok))) => ok.object.clone(),
            other => panic!("no handle for {name:?}: {other:?} {:?}", res.statuses()),
        }
    }
}

fn status(r: &ResOp) -> Nfsstat4 {
    nfs4::client::result_status(r)
}

/// Writes `data` at `offset` of the file `fh` of `export` as a WRITE
/// does, through the data plane (checksums and all), durably.
fn write(export: &Export, fh: &NfsFh4, offset: u64, data: &[u8]) {
    let file = export.fs.open_file(fh.as_bytes()).unwrap();
    for (i, piece) in data.chunks(64 << 10).enumerate() {
        let at = offset + (i as u64) * (64 << 10);
        let buf = export.data.write_pool().get_blocking().unwrap();
        let mut wb = export
            .data
            .write_buffer(file.data(), buf, at, piece.len())
            .unwrap();
        wb.payload_mut().copy_from_slice(piece);
        wb.arrived(piece.len());
        export
            .data
            .write(file.data(), wb, Stable::FileSync)
            .unwrap();
    }
}

/// `len` bytes of a pattern that differs from block to block.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i / 7) as u8 ^ seed ^ (i >> 12) as u8)
        .collect()
}

/// A new empty file `name` in export `export`, and its handle.
fn new_file(c: &mut V42, export: &Export, name: &str) -> (PathBuf, NfsFh4) {
    let path = export.config.path.join(name);
    std::fs::File::create(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fh = c.handle(&export.config.path, Some(name));
    (path, fh)
}

/// What `dionfs scrub` checks: on an integrity export, every block of
/// the file at `path` matches its stored checksum.
fn scrub_clean(server: &TestServer, export: &Export, path: &Path) {
    let state = server.server.reload_state();
    let Some(store) = state.checksum_store() else {
        assert_eq!(export.config.integrity, Integrity::Off);
        return;
    };
    let file = std::fs::File::open(path).unwrap();
    let (kernel, _) =
        dionfs_sys::handle::name_to_handle_at(file.as_fd(), c"", rustix::fs::AtFlags::EMPTY_PATH)
            .unwrap();
    let key = FileKey {
        fs_id: export.fs.fs_id(),
        handle_type: kernel.handle_type,
        handle: kernel.bytes,
    };
    match scrub_file(store, key, path, false, &mut |_| {}).unwrap() {
        FileResult::Verified { blocks, bad } => {
            assert!(bad.is_empty(), "{}: bad blocks {bad:?}", path.display());
            let size = std::fs::metadata(path).unwrap().len();
            assert_eq!(blocks, size.div_ceil(4096), "{}", path.display());
        }
        other => panic!("{}: not verified: {other:?}", path.display()),
    }
}

fn seek(offset: u64, what: DataContent4) -> ArgOp {
    ArgOp::Seek(SeekArgs4 {
        stateid: ANON,
        offset,
        what,
    })
}

fn seek_result(r: ResOp) -> Result<SeekResOk4, Nfsstat4> {
    match r {
        ResOp::Seek(Res4::Ok(ok)) => Ok(ok),
        other => Err(status(&other)),
    }
}

fn allocate(offset: u64, length: u64) -> ArgOp {
    ArgOp::Allocate(AllocateArgs4 {
        stateid: ANON,
        offset,
        length,
    })
}

fn deallocate(offset: u64, length: u64) -> ArgOp {
    ArgOp::Deallocate(AllocateArgs4 {
        stateid: ANON,
        offset,
        length,
    })
}

const MIB: u64 = 1 << 20;
const CHUNK: usize = 64 << 10;

fn seek_allocate_deallocate(integrity: bool) {
    let server = server(integrity);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (path, fh) = new_file(&mut c, &rw, "sparse");
    // Data at 0 and at 1 MiB, a hole between.
    let head = pattern(CHUNK, 1);
    let tail = pattern(CHUNK, 2);
    write(&rw, &fh, 0, &head);
    write(&rw, &fh, MIB, &tail);
    let size = MIB + CHUNK as u64;
    scrub_clean(&server, &rw, &path);

    let at = |c: &mut V42, offset, what| seek_result(c.on(&fh, &[seek(offset, what)]));
    let found = |offset, eof| Ok(SeekResOk4 { eof, offset });
    assert_eq!(at(&mut c, 0, DataContent4::Data), found(0, false));
    assert_eq!(
        at(&mut c, 0, DataContent4::Hole),
        found(CHUNK as u64, false)
    );
    assert_eq!(
        at(&mut c, CHUNK as u64, DataContent4::Data),
        found(MIB, false)
    );
    assert_eq!(at(&mut c, MIB, DataContent4::Hole), found(size, true));
    assert_eq!(at(&mut c, size, DataContent4::Data), Err(Nfsstat4::Nxio));
    // The current stateid, when the COMPOUND has none.
    let res = c.on(
        &fh,
        &[ArgOp::Seek(SeekArgs4 {
            stateid: CURRENT,
            offset: 0,
            what: DataContent4::Data,
        })],
    );
    assert_eq!(status(&res), Nfsstat4::BadStateid);

    // ALLOCATE past the end extends the file with zeros, durably (the
    // export is `sync`).
    let fsyncs = rw.metadata_sync.counters().file_fsyncs;
    assert_eq!(
        status(&c.on(&fh, &[allocate(size, 3 * 4096)])),
        Nfsstat4::Ok
    );
    assert_eq!(rw.metadata_sync.counters().file_fsyncs, fsyncs + 1);
    let grown = size + 3 * 4096;
    assert_eq!(std::fs::metadata(&path).unwrap().len(), grown);
    assert_eq!(status(&c.on(&fh, &[allocate(0, 0)])), Nfsstat4::Inval);
    scrub_clean(&server, &rw, &path);

    // DEALLOCATE of a range with partial edge blocks reads zeros there;
    // the size stays.
    let (from, len) = (1000u64, 3 * 4096u64);
    assert_eq!(status(&c.on(&fh, &[deallocate(from, len)])), Nfsstat4::Ok);
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len() as u64, grown);
    let (from, to) = (from as usize, (from + len) as usize);
    assert_eq!(&data[..from], &head[..from]);
    assert!(data[from..to].iter().all(|&b| b == 0));
    assert_eq!(&data[to..CHUNK], &head[to..]);
    assert_eq!(&data[MIB as usize..size as usize], &tail[..]);
    assert!(data[size as usize..].iter().all(|&b| b == 0));
    scrub_clean(&server, &rw, &path);
}

#[test]
fn seek_allocate_and_deallocate_without_integrity() {
    seek_allocate_deallocate(false);
}

#[test]
fn seek_allocate_and_deallocate_keep_checksums_exact() {
    seek_allocate_deallocate(true);
}

fn copy(src_offset: u64, dst_offset: u64, count: u64) -> ArgOp {
    ArgOp::Copy(Box::new(CopyArgs4 {
        src_stateid: ANON,
        dst_stateid: ANON,
        src_offset,
        dst_offset,
        count,
        consecutive: false,
        synchronous: false,
        source_server: Vec::new(),
    }))
}

fn clone(src_offset: u64, dst_offset: u64, count: u64) -> ArgOp {
    ArgOp::Clone(CloneArgs4 {
        src_stateid: ANON,
        dst_stateid: ANON,
        src_offset,
        dst_offset,
        count,
    })
}

/// `op` (COPY or CLONE) from `src` to `dst`: saved is the source,
/// current the destination.
fn between(c: &mut V42, src: &NfsFh4, dst: &NfsFh4, op: ArgOp) -> ResOp {
    c.on(src, &[ArgOp::Savefh, putfh(dst), op])
}

fn copy_within_and_across_files(integrity: bool) {
    let server = server(integrity);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (src_path, src) = new_file(&mut c, &rw, "src");
    let (dst_path, dst) = new_file(&mut c, &rw, "dst");
    // Three blocks and a part of one.
    let data = pattern(3 * 4096 + 1000, 3);
    write(&rw, &src, 0, &data);

    // The whole file (count 0: to the end), asked asynchronously,
    // answered synchronously.
    match between(&mut c, &src, &dst, copy(0, 0, 0)) {
        ResOp::Copy(CopyRes4::Ok(ok)) => {
            assert_eq!(ok.response.count, data.len() as u64);
            assert_eq!(ok.response.committed, StableHow4::Unstable);
            assert_eq!(ok.response.callback_id, None);
            assert_eq!(ok.response.writeverf.0, server.server.write_verifier());
            assert!(ok.requirements.synchronous);
        }
        other => panic!("COPY: {other:?}"),
    }
    assert_eq!(std::fs::read(&dst_path).unwrap(), data);
    scrub_clean(&server, &rw, &dst_path);

    // Within one file, block-congruent and not: the ranges do not
    // overlap.
    let res = between(&mut c, &src, &src, copy(0, 8 * 4096, 4096));
    assert_eq!(status(&res), Nfsstat4::Ok);
    let res = between(&mut c, &src, &src, copy(100, 5 * 4096 + 7, 5000));
    assert_eq!(status(&res), Nfsstat4::Ok);
    let now = std::fs::read(&src_path).unwrap();
    assert_eq!(&now[..data.len()], &data[..]);
    assert_eq!(&now[8 * 4096..9 * 4096], &data[..4096]);
    assert_eq!(&now[5 * 4096 + 7..5 * 4096 + 7 + 5000], &data[100..5100]);
    scrub_clean(&server, &rw, &src_path);
    // Overlapping ranges of one file.
    let res = between(&mut c, &src, &src, copy(0, 100, 4096));
    assert_eq!(status(&res), Nfsstat4::Inval);
    // Across files, at an offset past the destination's end.
    let res = between(&mut c, &src, &dst, copy(4096, 20 * 4096, 8192));
    assert_eq!(status(&res), Nfsstat4::Ok);
    let now = std::fs::read(&dst_path).unwrap();
    assert_eq!(&now[20 * 4096..22 * 4096], &data[4096..3 * 4096]);
    scrub_clean(&server, &rw, &dst_path);

    // Another server's file: no inter-server copy.
    let mut remote = copy(0, 0, 10);
    if let ArgOp::Copy(args) = &mut remote {
        args.source_server = vec![Netloc4::Name(Utf8Str::from("elsewhere"))];
    }
    assert_eq!(
        status(&between(&mut c, &src, &dst, remote)),
        Nfsstat4::Notsupp
    );
    // No saved filehandle.
    let res = c.on(&dst, &[copy(0, 0, 10)]);
    assert_eq!(status(&res), Nfsstat4::Nofilehandle);
}

#[test]
fn copy_within_and_across_files_without_integrity() {
    copy_within_and_across_files(false);
}

#[test]
fn copy_within_and_across_files_keeps_checksums_exact() {
    copy_within_and_across_files(true);
}

fn clone_aligned_and_unaligned(integrity: bool) {
    let server = server(integrity);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (_, src) = new_file(&mut c, &rw, "src");
    let (dst_path, dst) = new_file(&mut c, &rw, "dst");
    let data = pattern(4 * 4096, 4);
    write(&rw, &src, 0, &data);
    // Unaligned offsets, whatever the file system.
    let res = between(&mut c, &src, &dst, clone(100, 0, 4096));
    assert_eq!(status(&res), Nfsstat4::Inval);
    let res = between(&mut c, &src, &dst, clone(0, 0, 0));
    match status(&res) {
        Nfsstat4::Ok => {
            assert_eq!(std::fs::read(&dst_path).unwrap(), data);
            scrub_clean(&server, &rw, &dst_path);
        }
        Nfsstat4::Notsupp => eprintln!(
            "skipped: the file system of {} cannot clone (no reflink); \
             CLONE answered NOTSUPP",
            rw.config.path.display()
        ),
        other => panic!("CLONE: {other:?}"),
    }
}

#[test]
fn clone_without_integrity() {
    clone_aligned_and_unaligned(false);
}

#[test]
fn clone_with_integrity() {
    clone_aligned_and_unaligned(true);
}

fn setxattr(option: SetxattrOption4, key: &str, value: &str) -> ArgOp {
    ArgOp::Setxattr(SetxattrArgs4 {
        option,
        key: Component4::from(key),
        value: XattrValue4::from(value),
    })
}

fn getxattr(key: &str) -> ArgOp {
    ArgOp::Getxattr(GetxattrArgs4 {
        name: Component4::from(key),
    })
}

fn removexattr(key: &str) -> ArgOp {
    ArgOp::Removexattr(RemovexattrArgs4 {
        name: Component4::from(key),
    })
}

fn listxattrs(cookie: u64, maxcount: u32) -> ArgOp {
    ArgOp::Listxattrs(ListxattrsArgs4 { cookie, maxcount })
}

fn names(r: ResOp) -> (Vec<String>, u64, bool) {
    match r {
        ResOp::Listxattrs(Res4::Ok(ok)) => (
            ok.names
                .iter()
                .map(|n| String::from_utf8(n.as_bytes().to_vec()).unwrap())
                .collect(),
            ok.cookie,
            ok.eof,
        ),
        other => panic!("LISTXATTRS: {other:?}"),
    }
}

#[test]
fn xattrs_are_set_read_listed_and_removed() {
    let server = server(true);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (path, fh) = new_file(&mut c, &rw, "file");
    use SetxattrOption4::{Create, Either, Replace};
    let fsyncs = rw.metadata_sync.counters().file_fsyncs;
    assert_eq!(
        status(&c.on(&fh, &[setxattr(Create, "a", "1")])),
        Nfsstat4::Ok
    );
    // A change of metadata, durable on a `sync` export.
    assert_eq!(rw.metadata_sync.counters().file_fsyncs, fsyncs + 1);
    assert_eq!(
        status(&c.on(&fh, &[setxattr(Create, "a", "2")])),
        Nfsstat4::Exist
    );
    assert_eq!(
        status(&c.on(&fh, &[setxattr(Replace, "b", "2")])),
        Nfsstat4::Noxattr
    );
    assert_eq!(
        status(&c.on(&fh, &[setxattr(Either, "b", "2")])),
        Nfsstat4::Ok
    );
    assert_eq!(
        status(&c.on(&fh, &[setxattr(Replace, "b", "3")])),
        Nfsstat4::Ok
    );
    // On disk with the `user.` prefix.
    let mut value = [0u8; 8];
    let n = rustix::fs::getxattr(&path, "user.b", &mut value[..]).unwrap();
    assert_eq!(&value[..n], b"3");
    match c.on(&fh, &[getxattr("a")]) {
        ResOp::Getxattr(Res4::Ok(v)) => assert_eq!(v, XattrValue4::from("1")),
        other => panic!("GETXATTR: {other:?}"),
    }
    assert_eq!(status(&c.on(&fh, &[getxattr("zz")])), Nfsstat4::Noxattr);
    assert_eq!(status(&c.on(&fh, &[getxattr("")])), Nfsstat4::Inval);

    // Only the user namespace is served.
    rustix::fs::setxattr(
        &path,
        "trusted.hidden",
        b"x",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    assert_eq!(
        status(&c.on(&fh, &[getxattr("trusted.hidden")])),
        Nfsstat4::Noxattr
    );

    // Listed whole, and a name a page (cookie, array count, eof, one
    // name of 4 + 4 bytes).
    let (all, cookie, eof) = names(c.on(&fh, &[listxattrs(0, 4096)]));
    assert_eq!(
        all.iter().cloned().collect::<BTreeSet<_>>(),
        ["a", "b"].map(String::from).into()
    );
    assert_eq!((cookie, eof), (2, true));
    let (first, cookie, eof) = names(c.on(&fh, &[listxattrs(0, 16 + 8)]));
    assert_eq!((first.len(), cookie, eof), (1, 1, false));
    let (second, cookie, eof) = names(c.on(&fh, &[listxattrs(cookie, 16 + 8)]));
    assert_eq!((second.len(), cookie, eof), (1, 2, true));
    assert_eq!([first, second].concat(), all);
    assert_eq!(status(&c.on(&fh, &[listxattrs(0, 16)])), Nfsstat4::Toosmall);
    assert_eq!(
        status(&c.on(&fh, &[listxattrs(3, 4096)])),
        Nfsstat4::BadCookie
    );

    assert_eq!(status(&c.on(&fh, &[removexattr("a")])), Nfsstat4::Ok);
    assert_eq!(status(&c.on(&fh, &[removexattr("a")])), Nfsstat4::Noxattr);
    assert_eq!(status(&c.on(&fh, &[getxattr("a")])), Nfsstat4::Noxattr);
    let (left, _, _) = names(c.on(&fh, &[listxattrs(0, 4096)]));
    assert_eq!(left, ["b"]);

    // The export keeps user xattrs: the attribute says so.
    match c.on(
        &fh,
        &[ArgOp::Getattr(GetattrArgs4 {
            attr_request: Bitmap4::from_bits(&[Attr4::XattrSupport.bit()]),
        })],
    ) {
        ResOp::Getattr(Res4::Ok(ok)) => {
            assert_eq!(ok.obj_attributes.attr_vals.as_bytes(), [0, 0, 0, 1])
        }
        other => panic!("GETATTR: {other:?}"),
    }
    // Extended attributes are no data: the checksums are untouched.
    scrub_clean(&server, &rw, &path);
}

fn access(bits: u32) -> ArgOp {
    ArgOp::Access(AccessArgs4 { access: bits })
}

fn granted(r: ResOp) -> (u32, u32) {
    match r {
        ResOp::Access(Res4::Ok(ok)) => (ok.supported, ok.access),
        other => panic!("ACCESS: {other:?}"),
    }
}

#[test]
fn the_export_options_apply() {
    let server = server(false);
    let (rw, ro, squashed) = (export(&server, 0), export(&server, 1), export(&server, 2));
    let mut c = V42::new(&server);
    let xa = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;

    // Read-only: nothing changes, reading is allowed.
    let (_, fh) = new_file(&mut c, &ro, "file");
    let set = setxattr(SetxattrOption4::Either, "a", "1");
    assert_eq!(
        status(&c.on(&fh, std::slice::from_ref(&set))),
        Nfsstat4::Rofs
    );
    assert_eq!(status(&c.on(&fh, &[removexattr("a")])), Nfsstat4::Rofs);
    assert_eq!(status(&c.on(&fh, &[allocate(0, 4096)])), Nfsstat4::Rofs);
    assert_eq!(status(&c.on(&fh, &[deallocate(0, 4096)])), Nfsstat4::Rofs);
    assert_eq!(status(&c.on(&fh, &[getxattr("a")])), Nfsstat4::Noxattr);
    assert_eq!(
        granted(c.on(&fh, &[access(xa)])),
        (xa, ACCESS4_XAREAD | ACCESS4_XALIST)
    );

    // Root squashed to nobody, on a root's file of mode 0644.
    let (_, fh) = new_file(&mut c, &squashed, "file");
    assert_eq!(
        status(&c.on(&fh, std::slice::from_ref(&set))),
        Nfsstat4::Access
    );
    assert_eq!(status(&c.on(&fh, &[allocate(0, 4096)])), Nfsstat4::Access);
    assert_eq!(
        granted(c.on(&fh, &[access(xa)])),
        (xa, ACCESS4_XAREAD | ACCESS4_XALIST)
    );

    // Read-write, as root.
    let (_, fh) = new_file(&mut c, &rw, "file");
    assert_eq!(granted(c.on(&fh, &[access(xa)])), (xa, xa));
    assert_eq!(status(&c.on(&fh, &[set])), Nfsstat4::Ok);
    // A directory has no data.
    let root = c.handle(&rw.config.path, None);
    assert_eq!(status(&c.on(&root, &[allocate(0, 4096)])), Nfsstat4::Isdir);
    assert_eq!(
        status(&c.on(&root, &[seek(0, DataContent4::Data)])),
        Nfsstat4::Isdir
    );

    // Minor version 1 has no xattr bits.
    let res = c.compound_of(1, &[putfh(&fh), access(xa | ACCESS4_READ | ACCESS4_MODIFY)]);
    let (supported, _) = granted(res.results.last().unwrap().clone());
    assert_eq!(supported, ACCESS4_READ | ACCESS4_MODIFY);
}

#[test]
fn minor_version_1_refuses_the_42_ops() {
    let server = server(false);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (_, fh) = new_file(&mut c, &rw, "file");
    for op in [
        seek(0, DataContent4::Data),
        allocate(0, 1),
        deallocate(0, 1),
        copy(0, 0, 1),
        clone(0, 0, 0),
        getxattr("a"),
        setxattr(SetxattrOption4::Either, "a", "1"),
        listxattrs(0, 4096),
        removexattr("a"),
    ] {
        let res = c.compound_of(1, &[putfh(&fh), op.clone()]);
        let last = res.results.last().unwrap();
        assert_eq!(
            (last.opnum(), status(last)),
            (Opnum4::Illegal, Nfsstat4::OpIllegal),
            "{op:?}"
        );
        assert_eq!(res.status, Nfsstat4::OpIllegal);
    }
}

/// Exports `buffered`, `dontcache` and `direct` (their read and write
/// modes), with integrity as asked.
fn mode_server(integrity: bool) -> TestServer {
    TestServer::start_exports(
        |_| {},
        |dir| {
            [
                ("buffered", Mode::Buffered),
                ("dontcache", Mode::DontCache),
                ("direct", Mode::Direct),
            ]
            .into_iter()
            .map(|(name, mode)| {
                export_dir(dir, name, &|x| {
                    x.entries[0].options.squash = Squash::NoRootSquash;
                    x.read_mode = mode;
                    x.write_mode = mode;
                    if integrity {
                        x.integrity = Integrity::Crc32c;
                    }
                })
            })
            .collect()
        },
    )
}

fn read_plus_with(stateid: StateId4, offset: u64, count: u32) -> ArgOp {
    ArgOp::ReadPlus(ReadArgs4 {
        stateid,
        offset,
        count,
    })
}

fn read_plus(offset: u64, count: u32) -> ArgOp {
    read_plus_with(ANON, offset, count)
}

/// What a READ_PLUS result says, checked: its segments lie in order, one
/// after the other from `offset`, none empty, no two data segments
/// adjacent. Returns the bytes (holes as zeros), `eof`, and the kinds of
/// the segments (`'d'` or `'h'`).
fn read_plus_bytes(offset: u64, r: ResOp) -> Result<(Vec<u8>, bool, String), Nfsstat4> {
    let ok = match r {
        ResOp::ReadPlus(Res4::Ok(ok)) => ok,
        other => return Err(status(&other)),
    };
    let mut bytes = Vec::new();
    let mut kinds = String::new();
    for segment in &ok.contents {
        let at = offset + bytes.len() as u64;
        match segment {
            ReadPlusContent4::Data(d) => {
                assert_eq!(d.offset, at, "{kinds}");
                assert!(!d.data.is_empty() && !kinds.ends_with('d'), "{kinds}");
                bytes.extend_from_slice(&d.data);
                kinds.push('d');
            }
            ReadPlusContent4::Hole(h) => {
                assert_eq!(h.offset, at, "{kinds}");
                assert!(h.length > 0 && h.length <= 1 << 30, "{kinds}");
                bytes.resize(bytes.len() + h.length as usize, 0);
                kinds.push('h');
            }
        }
    }
    Ok((bytes, ok.eof, kinds))
}

/// What the file at `path` holds in `count` bytes from `offset`, and
/// whether that reaches its end.
fn expected(path: &Path, offset: u64, count: u32) -> (Vec<u8>, bool) {
    let data = std::fs::read(path).unwrap();
    let from = (offset as usize).min(data.len());
    let to = (offset as usize + count as usize).min(data.len());
    (data[from..to].to_vec(), to == data.len())
}

const KIB: u64 = 1024;

/// READ_PLUS of `count` bytes at `offset` of the file `fh` (at `path`):
/// byte for byte what the file holds there, `eof` right. Returns the
/// kinds of its segments.
fn read_plus_checked(c: &mut V42, fh: &NfsFh4, path: &Path, offset: u64, count: u32) -> String {
    let got = read_plus_bytes(offset, c.on(fh, &[read_plus(offset, count)]))
        .unwrap_or_else(|s| panic!("{path:?} {offset}+{count}: {s:?}"));
    // A READ may return fewer bytes than asked (the session's reply
    // size, max_transfer): all of them up to 512 KiB.
    let len = got.0.len() as u32;
    assert!(len <= count, "{path:?} {offset}+{count}: {len} bytes");
    let (bytes, eof) = expected(path, offset, len);
    let want = expected(path, offset, count.min(512 << 10)).0.len() as u32;
    assert!(len >= want, "{path:?} {offset}+{count}: {len} bytes");
    assert!(
        got.0 == bytes,
        "{path:?} {offset}+{count}: bytes differ ({})",
        got.2
    );
    assert_eq!(got.1, eof, "{path:?} {offset}+{count}: eof");
    got.2
}

/// READ_PLUS on a sparse file in each mode: byte for byte the file's
/// content, holes sent as holes where the file has them.
fn read_plus_in_each_mode(integrity: bool) {
    let server = mode_server(integrity);
    for index in 0..3 {
        let x = export(&server, index);
        let mut c = V42::new(&server);
        // 1 MiB and 5000 bytes: holes at [0, 64K), [256K, 320K) and
        // from 960K to the end, data elsewhere.
        let (path, fh) = new_file(&mut c, &x, "sparse");
        let size = MIB + 5000;
        write(&x, &fh, 0, &pattern(size as usize, index as u8 + 1));
        for (from, len) in [
            (0, 64 * KIB),
            (256 * KIB, 64 * KIB),
            (960 * KIB, size - 960 * KIB),
        ] {
            assert_eq!(status(&c.on(&fh, &[deallocate(from, len)])), Nfsstat4::Ok);
        }
        let check = |c: &mut V42, offset, count| read_plus_checked(c, &fh, &path, offset, count);
        // Hole at the start, exactly; then data.
        assert_eq!(check(&mut c, 0, 64 << 10), "h");
        assert_eq!(check(&mut c, 0, 128 << 10), "hd");
        // A hole in the middle, unaligned edges.
        assert_eq!(check(&mut c, 200 * KIB + 3, 200 << 10), "dhd");
        // The hole at the end, the count past it (the last block, part
        // of which is past the end, was zeroed, not freed: data).
        assert_eq!(check(&mut c, 900 * KIB, 1 << 20), "dhd");
        assert_eq!(check(&mut c, 900 * KIB, 124 << 10), "dh");
        assert_eq!(check(&mut c, 0, 2 << 20), "hdhdh");
        assert_eq!(check(&mut c, 64 * KIB, 2 << 20), "dhdhd");
        // Unaligned offsets and counts anywhere.
        for (offset, count) in [
            (1, 1),
            (4095, 2),
            (65535, 3),
            (65537, 4097),
            (300 * KIB - 1, 40_001),
            (size - 1, 10),
            (size - 4097, 4096),
            (size, 1),
            (size + 100_000, 4096),
            (12_345, 0),
        ] {
            check(&mut c, offset, count);
        }
        // A READ of 0 bytes at an unaligned offset (with integrity, its
        // blocks are not read around it).
        let res = c.on(
            &fh,
            &[ArgOp::Read(ReadArgs4 {
                stateid: ANON,
                offset: 12_345,
                count: 0,
            })],
        );
        assert_eq!(status(&res), Nfsstat4::Ok);
        // A READ of the same range reads the same bytes.
        let res = c.on(
            &fh,
            &[ArgOp::Read(ReadArgs4 {
                stateid: ANON,
                offset: 0,
                count: 1 << 20,
            })],
        );
        match res {
            ResOp::Read(Res4::Ok(ok)) => {
                let len = ok.data.len() as u32;
                assert!(len >= 512 << 10 && ok.data == expected(&path, 0, len).0);
            }
            other => panic!("READ: {other:?}"),
        }
        // Two in one COMPOUND: the second's data is copied into the
        // results, the first's sent from its buffer.
        // The second takes a buffer only if one is free then (the first
        // holds the one taken at receive): under load it may get DELAY,
        // which a client retries.
        let mut tries = 0;
        let res = loop {
            let res = c.compound(&[
                putfh(&fh),
                read_plus(200 * KIB, 200 << 10),
                read_plus(0, 128 << 10),
            ]);
            match read_plus_bytes(0, res.results[3].clone()) {
                Err(Nfsstat4::Delay) if tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                _ => break res,
            }
        };
        let (first, _) = expected(&path, 200 * KIB, 200 << 10);
        let (second, _) = expected(&path, 0, 128 << 10);
        assert!(
            read_plus_bytes(200 * KIB, res.results[2].clone())
                .unwrap()
                .0
                == first
        );
        assert!(read_plus_bytes(0, res.results[3].clone()).unwrap().0 == second);

        scrub_clean(&server, &x, &path);

        // A file that is all hole.
        let (path, fh) = new_file(&mut c, &x, "empty");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(3 * MIB)
            .unwrap();
        let check = |c: &mut V42, offset, count| read_plus_checked(c, &fh, &path, offset, count);
        assert_eq!(check(&mut c, 0, 1 << 20), "h");
        assert_eq!(check(&mut c, 3 * MIB - 10, 1 << 20), "h");
        assert_eq!(check(&mut c, 4097, 3), "h");

        // Blocks never written, before data written at 1 MiB.
        let (path, fh) = new_file(&mut c, &x, "gap");
        write(&x, &fh, MIB, &pattern(CHUNK, 5));
        let check = |c: &mut V42, offset, count| read_plus_checked(c, &fh, &path, offset, count);
        assert_eq!(check(&mut c, 0, 512 << 10), "h");
        assert_eq!(check(&mut c, MIB - 4096, 8192), "hd");
        scrub_clean(&server, &x, &path);
    }
}

#[test]
fn read_plus_sends_holes_as_holes() {
    read_plus_in_each_mode(false);
}

#[test]
fn read_plus_with_integrity_verifies_and_finds_no_corruption() {
    read_plus_in_each_mode(true);
}

/// A file of alternating 4 KiB data and holes: the segments of a reply
/// are bounded, the rest is sent as data, zeros and all.
#[test]
fn read_plus_bounds_its_segments() {
    let server = mode_server(true);
    let x = export(&server, 2);
    let mut c = V42::new(&server);
    let (path, fh) = new_file(&mut c, &x, "striped");
    let size = 512 * KIB;
    write(&x, &fh, 0, &pattern(size as usize, 9));
    for block in (0..size / 4096).step_by(2) {
        assert_eq!(
            status(&c.on(&fh, &[deallocate(block * 4096, 4096)])),
            Nfsstat4::Ok
        );
    }
    let (bytes, eof, kinds) = read_plus_bytes(0, c.on(&fh, &[read_plus(0, 1 << 20)])).unwrap();
    assert_eq!((bytes, eof), expected(&path, 0, 1 << 20));
    assert_eq!(kinds.len(), 16, "{kinds}");
    assert_eq!(&kinds[..15], "hdhdhdhdhdhdhdh", "{kinds}");
    scrub_clean(&server, &x, &path);
}

#[test]
fn read_plus_refuses_what_read_refuses() {
    let server = server(false);
    let rw = export(&server, 0);
    let mut c = V42::new(&server);
    let (_, fh) = new_file(&mut c, &rw, "file");
    write(&rw, &fh, 0, b"some data");
    // A stateid the server never gave, and the current stateid when the
    // COMPOUND has none.
    let made_up = StateId4 {
        seqid: 1,
        other: [7; 12],
    };
    for stateid in [made_up, CURRENT] {
        let read = ArgOp::Read(ReadArgs4 {
            stateid,
            offset: 0,
            count: 10,
        });
        let refused = status(&c.on(&fh, &[read]));
        assert!(refused == Nfsstat4::BadStateid || refused == Nfsstat4::StaleStateid);
        let res = c.on(&fh, &[read_plus_with(stateid, 0, 10)]);
        assert_eq!(status(&res), refused, "{stateid:?}");
    }
    // A directory has no data.
    let root = c.handle(&rw.config.path, None);
    assert_eq!(status(&c.on(&root, &[read_plus(0, 10)])), Nfsstat4::Isdir);
    // Minor version 1 has no READ_PLUS.
    let res = c.compound_of(1, &[putfh(&fh), read_plus(0, 10)]);
    assert_eq!(res.status, Nfsstat4::OpIllegal);
    // A file without holes: one data segment, as READ's.
    let res = c.on(&fh, &[read_plus(0, 100)]);
    assert_eq!(
        read_plus_bytes(0, res),
        Ok((b"some data".to_vec(), true, "d".to_string()))
    );
    // Past the end: no segments, eof.
    let res = c.on(&fh, &[read_plus(100, 10)]);
    assert_eq!(
        read_plus_bytes(100, res),
        Ok((Vec::new(), true, String::new()))
    );
}

/// `dionfs clients` shows the minor version of a client's EXCHANGE_ID.
#[test]
fn a_client_of_minor_version_2_is_listed_as_such() {
    let server = server(false);
    let mut c = server.client();
    let res = c.compound(2, &[nfs4::client::exchange_id_op(b"minor two")]);
    let [ResOp::ExchangeId(Res4::Ok(eid))] = &res.results[..] else {
        panic!("{res:?}");
    };
    let mut one = server.client();
    let eid1 = one.exchange_id(b"minor one");
    let state = &server.nfs4.as_ref().unwrap().state;
    let minors: Vec<_> = state
        .clients()
        .iter()
        .map(|c| (c.clientid, c.minor))
        .collect();
    assert!(minors.contains(&(eid.clientid, 2)), "{minors:?}");
    assert!(minors.contains(&(eid1.clientid, 1)), "{minors:?}");
}
