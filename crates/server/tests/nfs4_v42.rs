//! NFSv4.2's data and extended-attribute ops (RFC 7862, RFC 8276)
//! against an in-process server, through the raw client
//! (tests/nfs4/client.rs): SEEK, ALLOCATE, DEALLOCATE, COPY and CLONE on
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
use dionfs_dataplane::Stable;
use dionfs_integrity::scrub::{scrub_file, FileResult};
use dionfs_integrity::FileKey;
use dionfs_proto::nfs4::{
    AccessArgs4, AllocateArgs4, ArgOp, Attr4, Bitmap4, CloneArgs4, Component4, CopyArgs4, CopyRes4,
    DataContent4, GetattrArgs4, GetxattrArgs4, ListxattrsArgs4, LookupArgs4, Netloc4, NfsFh4,
    Nfsstat4, Opnum4, RemovexattrArgs4, Res4, ResOp, SeekArgs4, SeekResOk4, SetxattrArgs4,
    SetxattrOption4, StableHow4, StateId4, Utf8Str, XattrValue4, ACCESS4_MODIFY, ACCESS4_READ,
    ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE,
};

use nfs4::client::{sequence_op, Client, CompoundRes, Session};
use nfs4::TestServer;
use nfs4::{export_dir, putfh};

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

fn lookup(name: &[u8]) -> ArgOp {
    ArgOp::Lookup(LookupArgs4 {
        objname: Component4::from(name.to_vec()),
    })
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
    ArgOp::Copy(CopyArgs4 {
        src_stateid: ANON,
        dst_stateid: ANON,
        src_offset,
        dst_offset,
        count,
        consecutive: false,
        synchronous: false,
        source_server: Vec::new(),
    })
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
