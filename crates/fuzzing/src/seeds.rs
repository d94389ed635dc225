//! The seed corpus: for each target, valid encodings of typical messages
//! (made with our own encoders) and a few hand-made edge cases, each under
//! a name. `tests/corpus.rs` writes them to `fuzz/corpus/TARGET/seed-NAME`
//! (an ignored test, run by hand) and checks the committed files are
//! current.

use dionfs_proto::mount3::{
    DirPath, ExportNode, Exports, MountBody, MountList, MountName, MountRes3, MountResOk,
    MountStat3,
};
use dionfs_proto::nfs3::*;
use dionfs_proto::nfs4::*;
use dionfs_proto::nlm4::*;
use dionfs_proto::nsm::{Mon, MonId, MyId, Priv, SmName, SmRes, SmStatRes, StatChge};
use dionfs_proto::portmap::{DumpResult, Mapping, Rpcb, RpcbDump, IPPROTO_TCP, IPPROTO_UDP};
use dionfs_rpc::{
    encode_call, record_mark, AuthStat, AuthSys, CallHeader, Credential, OpaqueAuth, ReplyHeader,
    ReplyStatus,
};
use dionfs_xdr::{Encode, Encoder};

use crate::record::record_of_fragments;
use crate::{selector, Message};

/// One seed input of one target.
pub struct Seed {
    pub target: &'static str,
    /// Unique within the target; the file is `seed-NAME`.
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut seeds = Seeds(Vec::new());
    xdr(&mut seeds);
    record(&mut seeds);
    call_header(&mut seeds);
    reply_header(&mut seeds);
    nfs3_args(&mut seeds);
    nfs3_results(&mut seeds);
    nfs3_readdir_reply(&mut seeds);
    nfs4_compound(&mut seeds);
    nfs4_results(&mut seeds);
    nfs4_fattr(&mut seeds);
    nfs4_callback(&mut seeds);
    mount3(&mut seeds);
    nlm4(&mut seeds);
    nsm(&mut seeds);
    portmap(&mut seeds);
    seeds.0
}

struct Seeds(Vec<Seed>);

impl Seeds {
    fn add(&mut self, target: &'static str, name: &str, bytes: Vec<u8>) {
        self.0.push(Seed {
            target,
            name: name.to_owned(),
            bytes,
        });
    }

    /// A seed of a protocol target: the selector of message `message`,
    /// then `bytes`.
    fn message(
        &mut self,
        target: &'static str,
        table: &[Message],
        message: &str,
        name: &str,
        bytes: Vec<u8>,
    ) {
        let mut input = vec![selector(table, message)];
        input.extend_from_slice(&bytes);
        let name = format!("{}-{name}", message.to_lowercase().replace([' ', '_'], "-"));
        self.add(target, &name, input);
    }
}

/// Big-endian words.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn xdr(s: &mut Seeds) {
    // Operation bytes: the primitive in the low four bits, a size index
    // (see `xdr::SIZES`) in the high four.
    let mut typical = vec![0x00];
    typical.extend(words(&[7]));
    typical.push(0x01);
    typical.extend(words(&[u32::MAX]));
    typical.push(0x02);
    typical.extend(0x0102_0304_0506_0708u64.to_be_bytes());
    typical.push(0x04);
    typical.extend(words(&[1]));
    typical.push(0x55); // opaque_fixed(5)
    typical.extend(b"abcde\0\0\0");
    typical.push(0xb6); // opaque_var(max 255)
    let mut e = Encoder::new();
    e.opaque_var(b"name");
    typical.extend(e.as_slice());
    typical.push(0x09);
    typical.extend(words(&[1, 0, 42]));
    typical.push(0x0f); // finish: bytes are left
    s.add("xdr", "typical", typical);

    let mut nonzero_padding = vec![0x66]; // opaque_var(max 7)
    nonzero_padding.extend(words(&[5]));
    nonzero_padding.extend(b"abcdeXYZ");
    s.add("xdr", "nonzero-padding", nonzero_padding);

    let mut huge_length = vec![0xf6]; // opaque_var(no max)
    huge_length.extend(words(&[u32::MAX, 0]));
    s.add("xdr", "huge-length", huge_length);

    let mut bad_bool = vec![0x04];
    bad_bool.extend(words(&[2]));
    s.add("xdr", "bad-bool", bad_bool);

    let mut over_max = vec![0x37, 0, 0, 0, 4]; // string(max 3) of 4
    over_max.extend(b"abcd");
    s.add("xdr", "over-max", over_max);

    s.add("xdr", "truncated-hyper", vec![0x03, 0, 0, 0, 0, 1]);
    s.add("xdr", "finish-at-end", vec![0x00, 0, 0, 0, 1, 0x0f]);
}

fn record(s: &mut Seeds) {
    // Limit index 9 (64 KiB) unless said; delivery 0 (whole reads); a
    // script of steps: low three bits the method, high five a size index.
    // 0 next_record, 1 read_exact, 2 read_up_to, 3 read_u32,
    // 4 read_to_end, 5 read_to_end_bounded, 6 skip_rest.
    let seed = |limit: u8, delivery: u8, script: &[u8], stream: &[u8]| {
        let mut input = vec![
            limit,
            delivery,
            u8::try_from(script.len() - 1).expect("short"),
        ];
        input.extend_from_slice(script);
        input.extend_from_slice(stream);
        input
    };
    let call = encode_call(1, 100_003, 3, 1, &Credential::None);
    let mut stream = record_of_fragments(&call, call.len());
    stream.extend(record_of_fragments(b"second record in fragments", 5));
    stream.extend(record_of_fragments(b"", 1));
    s.add(
        "record",
        "pipelined",
        seed(9, 0, &[0, 3, 4, 0, 2 | (8 << 3), 6, 0, 4], &stream),
    );
    s.add(
        "record",
        "socket-pieces",
        seed(9, 0x83, &[0, 1 | (5 << 3), 5 | (12 << 3)], &stream),
    );

    let mut empty_fragments = Vec::new();
    for (fragment, last) in [
        (&b"ab"[..], false),
        (b"", false),
        (b"cd", false),
        (b"", true),
    ] {
        let len = u32::try_from(fragment.len()).expect("short");
        empty_fragments.extend(record_mark(len, last));
        empty_fragments.extend(fragment);
    }
    s.add(
        "record",
        "empty-fragments",
        seed(9, 1, &[0, 3, 2 | (4 << 3)], &empty_fragments),
    );

    let large: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let large = record_of_fragments(&large, 4100);
    s.add(
        "record",
        "large-read",
        seed(9, 0, &[0, 1 | (25 << 3), 4], &large),
    );
    s.add("record", "too-large", seed(5, 0, &[0, 4], &large));
    s.add(
        "record",
        "rest-too-large",
        seed(9, 0, &[0, 3, 5 | (14 << 3), 6, 0], &large),
    );

    let mut truncated = record_mark(100, true).to_vec();
    truncated.extend(b"only a little");
    s.add("record", "truncated", seed(9, 0, &[0, 4], &truncated));
    s.add(
        "record",
        "past-end",
        seed(9, 0, &[0, 1 | (13 << 3), 3], &stream),
    );
}

fn sys_cred() -> Credential {
    Credential::Sys(AuthSys {
        stamp: 0x5eed,
        machine_name: b"client.example".to_vec(),
        uid: 1000,
        gid: 1000,
        gids: vec![4, 24, 27, 100],
    })
}

fn call_header(s: &mut Seeds) {
    let mut none = encode_call(1, 100_003, 3, 1, &Credential::None);
    none.extend(words(&[0, 0]));
    s.add("call_header", "auth-none", none);
    let mut sys = encode_call(2, 100_003, 3, 6, &sys_cred());
    sys.extend(words(&[4, 0x0102_0304, 0, 0, 0, 4096]));
    s.add("call_header", "auth-sys", sys);

    let full_sys = Credential::Sys(AuthSys {
        stamp: u32::MAX,
        machine_name: vec![b'm'; 255],
        uid: 0,
        gid: 0,
        gids: (0..16).collect(),
    });
    let header = CallHeader {
        xid: 3,
        prog: 100_021,
        vers: 4,
        proc_: 2,
        cred: full_sys,
        verf: OpaqueAuth {
            flavor: 6,
            body: vec![0xaa; 13],
        },
    };
    s.add("call_header", "largest-auth-sys", header.to_xdr());

    // RPCSEC_GSS (flavor 6): a body we skip.
    let mut gss = words(&[4, 0, 2, 100_003, 3, 0, 6, 8]);
    gss.extend(b"gss-body");
    gss.extend(words(&[0, 0]));
    s.add("call_header", "unsupported-flavor", gss);

    let mut seventeen_gids = words(&[5, 0, 2, 100_003, 3, 0, 1]);
    let mut body = Encoder::new();
    body.u32(0);
    body.string(b"h");
    body.u32(0);
    body.u32(0);
    body.u32(17);
    for g in 0..17 {
        body.u32(g);
    }
    seventeen_gids.extend(words(&[u32::try_from(body.len()).expect("short")]));
    seventeen_gids.extend(body.as_slice());
    seventeen_gids.extend(words(&[0, 0]));
    s.add("call_header", "seventeen-gids", seventeen_gids);

    s.add(
        "call_header",
        "rpc-version-3",
        words(&[6, 0, 3, 100_003, 3, 0, 0, 0, 0, 0]),
    );
    s.add("call_header", "a-reply", words(&[7, 1, 0, 0, 0, 0]));
    s.add(
        "call_header",
        "auth-none-with-body",
        words(&[8, 0, 2, 100_003, 3, 0, 0, 4, 0, 0, 0]),
    );
    s.add(
        "call_header",
        "credential-too-long",
        words(&[9, 0, 2, 100_003, 3, 0, 1, 401]),
    );
    s.add(
        "call_header",
        "verifier-too-long",
        words(&[10, 0, 2, 100_003, 3, 0, 0, 0, 0, 401]),
    );
    s.add("call_header", "truncated", words(&[11, 0, 2, 100_003]));
}

fn reply_header(s: &mut Seeds) {
    let statuses = [
        ("success", ReplyStatus::Success),
        ("prog-unavail", ReplyStatus::ProgUnavail),
        (
            "prog-mismatch",
            ReplyStatus::ProgMismatch { low: 2, high: 4 },
        ),
        ("proc-unavail", ReplyStatus::ProcUnavail),
        ("garbage-args", ReplyStatus::GarbageArgs),
        ("system-err", ReplyStatus::SystemErr),
        ("rpc-mismatch", ReplyStatus::RpcMismatch { low: 2, high: 2 }),
        ("auth-error", ReplyStatus::AuthError(AuthStat::TooWeak)),
    ];
    for (name, status) in statuses {
        let mut bytes = ReplyHeader::new(1, status).to_xdr();
        bytes.extend(words(&[2049]));
        s.add("reply_header", name, bytes);
    }
    let with_verifier = ReplyHeader {
        xid: 2,
        verf: OpaqueAuth {
            flavor: 6,
            body: b"verifier!".to_vec(),
        },
        status: ReplyStatus::Success,
    };
    s.add("reply_header", "verifier", with_verifier.to_xdr());
    s.add("reply_header", "bad-auth-stat", words(&[3, 1, 1, 1, 8]));
}

/// A typical handle: export id, generation and a kernel handle.
fn fh() -> NfsFh3 {
    NfsFh3::new((0..28u8).collect::<Vec<_>>()).expect("28 bytes")
}

fn largest_fh() -> NfsFh3 {
    NfsFh3::new(vec![0xfe; NFS3_FHSIZE]).expect("64 bytes")
}

fn diropargs(name: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: fh(),
        name: Filename3::from(name),
    }
}

fn largest_diropargs() -> DirOpArgs3 {
    DirOpArgs3 {
        dir: largest_fh(),
        name: Filename3(vec![b'n'; NFS3_MAX_NAME_LEN as usize]),
    }
}

fn mode(mode: u32) -> Sattr3 {
    Sattr3 {
        mode: Some(mode),
        ..Sattr3::default()
    }
}

fn every_attribute() -> Sattr3 {
    let t = NfsTime3 {
        seconds: 1_700_000_000,
        nseconds: 999_999_999,
    };
    Sattr3 {
        mode: Some(0o4755),
        uid: Some(1000),
        gid: Some(100),
        size: Some(1 << 40),
        atime: SetTime::ServerTime,
        mtime: SetTime::ClientTime(t),
    }
}

fn nfs3_args(s: &mut Seeds) {
    let mut arg = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("nfs3_args", crate::nfs3::ARGS, message, name, bytes);
    };
    arg("NULL", "void", Vec::new());
    arg("GETATTR", "typical", GetattrArgs { object: fh() }.to_xdr());
    arg(
        "GETATTR",
        "empty-handle",
        GetattrArgs {
            object: NfsFh3::default(),
        }
        .to_xdr(),
    );
    arg(
        "SETATTR",
        "typical",
        SetattrArgs {
            object: fh(),
            new_attributes: mode(0o600),
            guard: SattrGuard3(None),
        }
        .to_xdr(),
    );
    arg(
        "SETATTR",
        "largest",
        SetattrArgs {
            object: largest_fh(),
            new_attributes: every_attribute(),
            guard: SattrGuard3(Some(NfsTime3 {
                seconds: 5,
                nseconds: 6,
            })),
        }
        .to_xdr(),
    );
    arg(
        "LOOKUP",
        "typical",
        LookupArgs {
            what: diropargs("file.txt"),
        }
        .to_xdr(),
    );
    arg(
        "LOOKUP",
        "largest",
        LookupArgs {
            what: largest_diropargs(),
        }
        .to_xdr(),
    );
    arg(
        "ACCESS",
        "typical",
        AccessArgs {
            object: fh(),
            access: ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY,
        }
        .to_xdr(),
    );
    arg(
        "READLINK",
        "typical",
        ReadlinkArgs { symlink: fh() }.to_xdr(),
    );
    arg(
        "READ",
        "typical",
        ReadArgs {
            file: fh(),
            offset: 1 << 20,
            count: 1 << 20,
        }
        .to_xdr(),
    );
    arg(
        "WRITE",
        "typical",
        WriteArgs::new(fh(), 4096, StableHow::Unstable, b"hello, world".to_vec()).to_xdr(),
    );
    let mut count_mismatch = WriteArgs::new(fh(), 0, StableHow::FileSync, vec![7; 5]);
    count_mismatch.head.count = 4;
    arg("WRITE", "count-not-data-length", count_mismatch.to_xdr());
    let payload_missing = WriteArgsHead {
        file: fh(),
        offset: 0,
        count: 1 << 20,
        stable: StableHow::DataSync,
        data_len: 1 << 20,
    };
    arg("WRITE", "payload-missing", payload_missing.to_xdr());
    arg(
        "CREATE",
        "unchecked",
        CreateArgs {
            target: diropargs("new"),
            how: CreateHow3::Unchecked(mode(0o644)),
        }
        .to_xdr(),
    );
    arg(
        "CREATE",
        "guarded-largest",
        CreateArgs {
            target: largest_diropargs(),
            how: CreateHow3::Guarded(every_attribute()),
        }
        .to_xdr(),
    );
    arg(
        "CREATE",
        "exclusive",
        CreateArgs {
            target: diropargs("lockfile"),
            how: CreateHow3::Exclusive(CreateVerf3(*b"12345678")),
        }
        .to_xdr(),
    );
    arg(
        "MKDIR",
        "typical",
        MkdirArgs {
            target: diropargs("dir"),
            attributes: mode(0o755),
        }
        .to_xdr(),
    );
    arg(
        "SYMLINK",
        "typical",
        SymlinkArgs {
            target: diropargs("link"),
            symlink: SymlinkData3 {
                symlink_attributes: Sattr3::default(),
                symlink_data: NfsPath3::from("../target/file"),
            },
        }
        .to_xdr(),
    );
    arg(
        "SYMLINK",
        "largest",
        SymlinkArgs {
            target: largest_diropargs(),
            symlink: SymlinkData3 {
                symlink_attributes: every_attribute(),
                symlink_data: NfsPath3(vec![b'/'; NFS3_MAX_PATH_LEN as usize]),
            },
        }
        .to_xdr(),
    );
    let device = DeviceData3 {
        dev_attributes: mode(0o660),
        spec: SpecData3 {
            specdata1: 8,
            specdata2: 1,
        },
    };
    for (name, what) in [
        ("chr", MknodData3::Chr(device.clone())),
        ("blk", MknodData3::Blk(device)),
        ("sock", MknodData3::Sock(mode(0o777))),
        ("fifo", MknodData3::Fifo(Sattr3::default())),
        ("reg", MknodData3::Other(Ftype3::Reg)),
    ] {
        let args = MknodArgs {
            target: diropargs("node"),
            what,
        };
        arg("MKNOD", name, args.to_xdr());
    }
    arg(
        "REMOVE",
        "typical",
        RemoveArgs {
            object: diropargs("old"),
        }
        .to_xdr(),
    );
    arg(
        "RMDIR",
        "typical",
        RmdirArgs {
            object: diropargs("dir"),
        }
        .to_xdr(),
    );
    arg(
        "RENAME",
        "typical",
        RenameArgs {
            from: diropargs("a"),
            to: diropargs("b"),
        }
        .to_xdr(),
    );
    arg(
        "LINK",
        "typical",
        LinkArgs {
            file: fh(),
            link: diropargs("hardlink"),
        }
        .to_xdr(),
    );
    arg(
        "READDIR",
        "typical",
        ReaddirArgs {
            dir: fh(),
            cookie: 0,
            cookieverf: CookieVerf3::default(),
            count: 8192,
        }
        .to_xdr(),
    );
    arg(
        "READDIRPLUS",
        "typical",
        ReaddirplusArgs {
            dir: fh(),
            cookie: 42,
            cookieverf: CookieVerf3(*b"cookieve"),
            dircount: 4096,
            maxcount: 32768,
        }
        .to_xdr(),
    );
    arg("FSSTAT", "typical", FsstatArgs { fsroot: fh() }.to_xdr());
    arg("FSINFO", "typical", FsinfoArgs { fsroot: fh() }.to_xdr());
    arg(
        "PATHCONF",
        "typical",
        PathconfArgs { object: fh() }.to_xdr(),
    );
    arg(
        "COMMIT",
        "typical",
        CommitArgs {
            file: fh(),
            offset: 0,
            count: 0,
        }
        .to_xdr(),
    );

    // Hand-made edge cases.
    let mut long_name = Encoder::new();
    fh().encode(&mut long_name);
    long_name.string(&[b'x'; NFS3_MAX_NAME_LEN as usize + 1]);
    arg("LOOKUP", "name-too-long", long_name.into_vec());
    let mut long_handle = Encoder::new();
    long_handle.opaque_var(&[1; NFS3_FHSIZE + 1]);
    arg("GETATTR", "handle-too-long", long_handle.into_vec());
    arg("GETATTR", "handle-length-max", words(&[u32::MAX, 0, 0]));
    let mut padding = Encoder::new();
    padding.opaque_var(&[1, 2, 3, 4, 5]);
    let mut padding = padding.into_vec();
    padding[9..].copy_from_slice(&[0xff; 3]);
    arg("GETATTR", "nonzero-padding", padding);
    let mut bad_bool = GetattrArgs { object: fh() }.to_xdr();
    bad_bool.extend(words(&[2, 0, 0, 0, 0, 0, 0, 0]));
    arg("SETATTR", "bad-bool", bad_bool);
    let mut bad_mode = diropargs("new").to_xdr();
    bad_mode.extend(words(&[3]));
    arg("CREATE", "bad-createmode", bad_mode);
    let mut bad_type = diropargs("node").to_xdr();
    bad_type.extend(words(&[0]));
    arg("MKNOD", "bad-ftype", bad_type);
    let mut trailing = ReadArgs {
        file: fh(),
        offset: 0,
        count: 4096,
    }
    .to_xdr();
    trailing.extend(words(&[0xdead_beef]));
    arg("READ", "trailing-bytes", trailing);
}

fn fattr(fileid: u64) -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 1000,
        size: 12,
        used: 4096,
        rdev: SpecData3::default(),
        fsid: 7,
        fileid,
        atime: NfsTime3::default(),
        mtime: NfsTime3::default(),
        ctime: NfsTime3::default(),
    }
}

fn post_op() -> PostOpAttr {
    PostOpAttr(Some(fattr(2)))
}

fn wcc() -> WccData {
    WccData {
        before: PreOpAttr(Some(WccAttr::default())),
        after: post_op(),
    }
}

fn nfs3_results(s: &mut Seeds) {
    let mut res = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("nfs3_results", crate::nfs3::RESULTS, message, name, bytes);
    };
    let verf = WriteVerf3(*b"writever");
    let new_obj = NewObjResOk {
        obj: PostOpFh3(Some(fh())),
        obj_attributes: post_op(),
        dir_wcc: wcc(),
    };
    let dir_wcc = DirWcc { dir_wcc: wcc() };
    res("NULL", "void", Vec::new());
    res(
        "GETATTR",
        "ok",
        GetattrRes::Ok(GetattrResOk {
            obj_attributes: fattr(2),
        })
        .to_xdr(),
    );
    res(
        "GETATTR",
        "stale",
        GetattrRes::fail(NfsStat3::Stale, dionfs_proto::Void).to_xdr(),
    );
    res(
        "SETATTR",
        "ok",
        SetattrRes::Ok(SetattrResOk { obj_wcc: wcc() }).to_xdr(),
    );
    let lookup = LookupResOk {
        object: fh(),
        obj_attributes: post_op(),
        dir_attributes: PostOpAttr(None),
    };
    res("LOOKUP", "ok", LookupRes::Ok(lookup).to_xdr());
    let noent = LookupResFail {
        dir_attributes: post_op(),
    };
    res(
        "LOOKUP",
        "noent",
        LookupRes::fail(NfsStat3::NoEnt, noent).to_xdr(),
    );
    let access = AccessResOk {
        obj_attributes: post_op(),
        access: ACCESS3_READ,
    };
    res("ACCESS", "ok", AccessRes::Ok(access).to_xdr());
    let readlink = ReadlinkResOk {
        symlink_attributes: post_op(),
        data: NfsPath3::from("/target"),
    };
    res("READLINK", "ok", ReadlinkRes::Ok(readlink).to_xdr());
    let read = ReadResOk {
        file_attributes: post_op(),
        count: 5,
        eof: true,
        data: b"hello".to_vec(),
    };
    res("READ", "ok", ReadRes::Ok(read).to_xdr());
    let mut count_mismatch = NfsStat3::Ok.to_xdr();
    count_mismatch.extend(words(&[0, 7, 0]));
    let mut data = Encoder::new();
    data.opaque_var(b"abc");
    count_mismatch.extend(data.as_slice());
    res("READ", "count-not-data-length", count_mismatch);
    let write = WriteResOk {
        file_wcc: wcc(),
        count: 4096,
        committed: StableHow::FileSync,
        verf,
    };
    res("WRITE", "ok", WriteRes::Ok(write).to_xdr());
    res("CREATE", "ok", CreateRes::Ok(new_obj.clone()).to_xdr());
    res(
        "CREATE",
        "exist",
        CreateRes::fail(NfsStat3::Exist, dir_wcc.clone()).to_xdr(),
    );
    res("MKDIR", "ok", MkdirRes::Ok(new_obj.clone()).to_xdr());
    res("SYMLINK", "ok", SymlinkRes::Ok(new_obj.clone()).to_xdr());
    res("MKNOD", "ok", MknodRes::Ok(new_obj).to_xdr());
    res("REMOVE", "ok", RemoveRes::Ok(dir_wcc.clone()).to_xdr());
    res(
        "RMDIR",
        "notempty",
        RmdirRes::fail(NfsStat3::NotEmpty, dir_wcc).to_xdr(),
    );
    let rename = RenameWcc {
        fromdir_wcc: wcc(),
        todir_wcc: WccData::default(),
    };
    res("RENAME", "ok", RenameRes::Ok(rename).to_xdr());
    let link = LinkWcc {
        file_attributes: post_op(),
        linkdir_wcc: wcc(),
    };
    res("LINK", "ok", LinkRes::Ok(link).to_xdr());
    let readdir = ReaddirResOk {
        dir_attributes: post_op(),
        cookieverf: CookieVerf3(*b"cookieve"),
        entries: vec![
            Entry3 {
                fileid: 2,
                name: Filename3::from("."),
                cookie: 1,
            },
            Entry3 {
                fileid: 1,
                name: Filename3::from(".."),
                cookie: 2,
            },
            Entry3 {
                fileid: 3,
                name: Filename3::from("file.txt"),
                cookie: 3,
            },
        ],
        eof: true,
    };
    res("READDIR", "ok", ReaddirRes::Ok(readdir).to_xdr());
    let readdirplus = ReaddirplusResOk {
        dir_attributes: post_op(),
        cookieverf: CookieVerf3::default(),
        entries: vec![
            EntryPlus3 {
                fileid: 3,
                name: Filename3::from("file.txt"),
                cookie: 3,
                name_attributes: PostOpAttr(Some(fattr(3))),
                name_handle: PostOpFh3(Some(fh())),
            },
            EntryPlus3 {
                fileid: 4,
                name: Filename3::from("other"),
                cookie: 4,
                name_attributes: PostOpAttr(None),
                name_handle: PostOpFh3(None),
            },
        ],
        eof: false,
    };
    res(
        "READDIRPLUS",
        "ok",
        ReaddirplusRes::Ok(readdirplus).to_xdr(),
    );
    let fsstat = FsstatResOk {
        obj_attributes: post_op(),
        tbytes: 1 << 40,
        fbytes: 1 << 39,
        abytes: 1 << 39,
        tfiles: 1 << 20,
        ffiles: 1 << 19,
        afiles: 1 << 19,
        invarsec: 0,
    };
    res("FSSTAT", "ok", FsstatRes::Ok(fsstat).to_xdr());
    let fsinfo = FsinfoResOk {
        obj_attributes: post_op(),
        rtmax: 1 << 20,
        rtpref: 1 << 20,
        rtmult: 4096,
        wtmax: 1 << 20,
        wtpref: 1 << 20,
        wtmult: 4096,
        dtpref: 1 << 16,
        maxfilesize: u64::MAX,
        time_delta: NfsTime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
    };
    res("FSINFO", "ok", FsinfoRes::Ok(fsinfo).to_xdr());
    let pathconf = PathconfResOk {
        obj_attributes: post_op(),
        linkmax: 1000,
        name_max: 255,
        no_trunc: true,
        chown_restricted: true,
        case_insensitive: false,
        case_preserving: true,
    };
    res("PATHCONF", "ok", PathconfRes::Ok(pathconf).to_xdr());
    let commit = CommitResOk {
        file_wcc: wcc(),
        verf,
    };
    res("COMMIT", "ok", CommitRes::Ok(commit).to_xdr());
}

fn nfs3_readdir_reply(s: &mut Seeds) {
    // flags (1 READDIRPLUS, 2 eof, 4 directory attributes), count,
    // dircount, then entries: fileid, name, cookie, and for READDIRPLUS
    // flags (1 attributes, 2 a handle) and the handle.
    let entry = |enc: &mut Encoder, fileid: u64, name: &[u8], plus_flags: Option<u32>| {
        enc.u64(fileid);
        enc.string(name);
        enc.u64(fileid + 100);
        if let Some(flags) = plus_flags {
            enc.u32(flags);
            if flags & 2 != 0 {
                fh().encode(enc);
            }
        }
    };
    let mut readdir = Encoder::new();
    readdir.u32(2 | 4);
    readdir.u32(8192);
    readdir.u32(0);
    for (i, name) in [".", "..", "a", "file.txt"].iter().enumerate() {
        entry(&mut readdir, i as u64, name.as_bytes(), None);
    }
    s.add("nfs3_readdir_reply", "readdir", readdir.into_vec());

    let mut small = Encoder::new();
    small.u32(0);
    small.u32(130);
    small.u32(0);
    for i in 0..4 {
        entry(&mut small, i, b"name", None);
    }
    s.add(
        "nfs3_readdir_reply",
        "readdir-count-fills",
        small.into_vec(),
    );

    let mut plus = Encoder::new();
    plus.u32(1 | 4);
    plus.u32(32768);
    plus.u32(100);
    for (i, flags) in [3, 1, 2, 0, 3].iter().enumerate() {
        entry(&mut plus, i as u64, b"entry-name", Some(*flags));
    }
    s.add(
        "nfs3_readdir_reply",
        "readdirplus-dircount-fills",
        plus.into_vec(),
    );

    let mut tiny = Encoder::new();
    tiny.u32(1);
    tiny.u32(50);
    tiny.u32(0);
    entry(&mut tiny, 9, b"too-big-for-maxcount", Some(3));
    s.add(
        "nfs3_readdir_reply",
        "readdirplus-too-small",
        tiny.into_vec(),
    );
}

/// A COMPOUND's arguments: the head, then the ops.
fn compound(minor: u32, ops: &[ArgOp]) -> Vec<u8> {
    let mut enc = Encoder::new();
    CompoundHead {
        tag: Utf8Str::from("seed"),
        minorversion: minor,
        numops: ops.len() as u32,
    }
    .encode(&mut enc);
    for op in ops {
        op.encode(&mut enc);
    }
    enc.into_vec()
}

fn sequence() -> ArgOp {
    ArgOp::Sequence(SequenceArgs4 {
        sessionid: SessionId4([7; 16]),
        sequenceid: 2,
        slotid: 0,
        highest_slotid: 9,
        cachethis: false,
    })
}

fn fh4() -> NfsFh4 {
    NfsFh4::new(vec![1; 36]).expect("short handle")
}

fn name4(name: &str) -> Component4 {
    Component4::from(name)
}

fn stateid4() -> StateId4 {
    StateId4 {
        seqid: 1,
        other: [3; 12],
    }
}

fn channel4() -> ChannelAttrs4 {
    ChannelAttrs4 {
        headerpadsize: 0,
        maxrequestsize: 1_049_620,
        maxresponsesize: 1_049_480,
        maxresponsesize_cached: 7584,
        maxoperations: 16,
        maxrequests: 64,
        rdma_ird: None,
    }
}

fn settable_all() -> SetAttrs4 {
    let ace = |acetype, flag, who: &str| Nfsace4 {
        acetype,
        flag,
        access_mask: ACE4_READ_DATA | ACE4_EXECUTE,
        who: Owner4::from(who),
    };
    SetAttrs4 {
        size: Some(4096),
        acl: Some(Nfsacl4(vec![
            ace(ACE4_ACCESS_DENIED_ACE_TYPE, 0, "OWNER@"),
            ace(ACE4_ACCESS_ALLOWED_ACE_TYPE, ACE4_IDENTIFIER_GROUP, "50"),
        ])),
        mode: Some(0o644),
        owner: Some(Owner4::from("1000")),
        owner_group: Some(Owner4::from("staff@example.org")),
        time_access_set: Some(SetTime4::ServerTime),
        time_modify_set: Some(SetTime4::ClientTime(NfsTime4 {
            seconds: 1_700_000_000,
            nseconds: 5,
        })),
        dacl: Some(Nfsacl41 {
            na41_flag: 0,
            na41_aces: Nfsacl4(vec![ace(
                ACE4_ACCESS_ALLOWED_ACE_TYPE,
                ACE4_FILE_INHERIT_ACE | ACE4_INHERIT_ONLY_ACE,
                "EVERYONE@",
            )]),
        }),
    }
}

/// A COMPOUND with a WRITE of 5 bytes (padded to 8) and a GETATTR after
/// its payload.
fn write_compound() -> Vec<u8> {
    let mut enc = Encoder::new();
    CompoundHead {
        tag: Utf8Str::default(),
        minorversion: 1,
        numops: 4,
    }
    .encode(&mut enc);
    sequence().encode(&mut enc);
    ArgOp::Putfh(PutfhArgs4 { object: fh4() }).encode(&mut enc);
    ArgOp::Write(WriteHead4 {
        stateid: stateid4(),
        offset: 4096,
        stable: StableHow4::Unstable,
        data_len: 5,
    })
    .encode(&mut enc);
    enc.opaque_fixed(b"hello");
    ArgOp::Getattr(GetattrArgs4 {
        attr_request: Bitmap4::from_bits(&[Attr4::Change.bit(), Attr4::Size.bit()]),
    })
    .encode(&mut enc);
    enc.into_vec()
}

fn nfs4_compound(s: &mut Seeds) {
    s.add("nfs4_compound", "write", write_compound());
    let mut add = |name: &str, minor: u32, ops: &[ArgOp]| {
        s.add("nfs4_compound", name, compound(minor, ops));
    };
    let getattr = ArgOp::Getattr(GetattrArgs4 {
        attr_request: Bitmap4(vec![0x0010_011a, 0x00b0_a23a]),
    });
    add(
        "exchange-id",
        1,
        &[ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4([9; 8]),
                ownerid: Opaque4::from("Linux NFSv4.2 client.example.org"),
            },
            flags: 0x0001_0000,
            state_protect: StateProtect4A::None,
            client_impl_id: Some(NfsImplId4 {
                domain: Utf8Str::from("kernel.org"),
                name: Utf8Str::from("Linux 6.8"),
                date: NfsTime4::default(),
            }),
        }))],
    );
    add(
        "exchange-id-mach-cred",
        1,
        &[ArgOp::ExchangeId(Box::new(ExchangeIdArgs4 {
            clientowner: ClientOwner4 {
                verifier: Verifier4([1; 8]),
                ownerid: Opaque4::from("pynfs"),
            },
            flags: 0,
            state_protect: StateProtect4A::MachCred(StateProtectOps4 {
                must_enforce: Bitmap4::from_bits(&[Opnum4::DestroySession.as_u32()]),
                must_allow: Bitmap4::default(),
            }),
            client_impl_id: None,
        }))],
    );
    add(
        "create-session",
        1,
        &[ArgOp::CreateSession(Box::new(CreateSessionArgs4 {
            clientid: 0x6563_0000_0000_0001,
            sequence: 1,
            flags: 3,
            fore_chan_attrs: channel4(),
            back_chan_attrs: channel4(),
            cb_program: 0x4000_0000,
            sec_parms: vec![
                CallbackSecParms4::AuthNone,
                CallbackSecParms4::AuthSys(AuthSysParms {
                    stamp: 1,
                    machinename: Utf8Str::from("client"),
                    uid: 0,
                    gid: 0,
                    gids: vec![0, 10],
                }),
            ],
        }))],
    );
    add(
        "mount",
        1,
        &[
            sequence(),
            ArgOp::Putrootfh,
            ArgOp::Lookup(LookupArgs4 {
                objname: name4("export"),
            }),
            ArgOp::Getfh,
            getattr.clone(),
        ],
    );
    add(
        "metadata",
        2,
        &[
            sequence(),
            ArgOp::Putfh(PutfhArgs4 { object: fh4() }),
            ArgOp::Savefh,
            ArgOp::Access(AccessArgs4 { access: 0x3f }),
            ArgOp::Setattr(SetattrArgs4 {
                stateid: stateid4(),
                obj_attributes: settable_all().to_fattr(),
            }),
            ArgOp::Create(Box::new(CreateArgs4 {
                objtype: CreateType4::Link(Linktext4::from("../t")),
                objname: name4("l"),
                createattrs: Fattr4::default(),
            })),
            ArgOp::Create(Box::new(CreateArgs4 {
                objtype: CreateType4::Dir,
                objname: name4("d"),
                createattrs: SetAttrs4 {
                    mode: Some(0o755),
                    ..SetAttrs4::default()
                }
                .to_fattr(),
            })),
            ArgOp::Restorefh,
            ArgOp::Rename(RenameArgs4 {
                oldname: name4("a"),
                newname: name4("b"),
            }),
            ArgOp::Link(LinkArgs4 {
                newname: name4("c"),
            }),
            ArgOp::Remove(RemoveArgs4 { target: name4("b") }),
            ArgOp::Lookupp,
            ArgOp::Readlink,
            ArgOp::Verify(VerifyArgs4 {
                obj_attributes: Fattr4::default(),
            }),
            ArgOp::Nverify(VerifyArgs4 {
                obj_attributes: Fattr4::default(),
            }),
            ArgOp::Putpubfh,
        ],
    );
    add(
        "readdir",
        1,
        &[
            sequence(),
            ArgOp::Putfh(PutfhArgs4 { object: fh4() }),
            ArgOp::Readdir(ReaddirArgs4 {
                cookie: 0,
                cookieverf: Verifier4::default(),
                dircount: 8192,
                maxcount: 32768,
                attr_request: Bitmap4::from_bits(&[1, 3, 4, 20, 33, 35]),
            }),
        ],
    );
    add(
        "secinfo",
        1,
        &[
            sequence(),
            ArgOp::Putrootfh,
            ArgOp::Secinfo(SecinfoArgs4 {
                name: name4("export"),
            }),
            ArgOp::Putrootfh,
            ArgOp::SecinfoNoName(SecinfoStyle4::CurrentFh),
        ],
    );
    add(
        "session-housekeeping",
        1,
        &[
            sequence(),
            ArgOp::BindConnToSession(BindConnToSessionArgs4 {
                sessid: SessionId4([7; 16]),
                dir: ChannelDirFromClient4::ForeOrBoth,
                use_conn_in_rdma_mode: false,
            }),
            ArgOp::BackchannelCtl(BackchannelCtlArgs4 {
                cb_program: 0x4000_0000,
                sec_parms: vec![CallbackSecParms4::AuthNone],
            }),
            ArgOp::ReclaimComplete(ReclaimCompleteArgs4 { one_fs: false }),
            ArgOp::TestStateid(TestStateidArgs4 {
                stateids: vec![stateid4(), StateId4::default()],
            }),
            ArgOp::FreeStateid(FreeStateidArgs4 {
                stateid: stateid4(),
            }),
            ArgOp::DestroySession(DestroySessionArgs4 {
                sessionid: SessionId4([7; 16]),
            }),
            ArgOp::DestroyClientid(DestroyClientidArgs4 { clientid: 1 }),
        ],
    );
    add(
        "largest-lookup",
        1,
        &[
            ArgOp::Putfh(PutfhArgs4 {
                object: NfsFh4::new(vec![0xee; NFS4_FHSIZE]).expect("largest handle"),
            }),
            ArgOp::Lookup(LookupArgs4 {
                objname: Component4(vec![b'x'; NFS4_MAX_COMPONENT_LEN as usize]),
            }),
        ],
    );
    add("illegal", 1, &[sequence(), ArgOp::Illegal(2)]);
    add(
        "not-supp-layoutget",
        1,
        &[sequence(), ArgOp::NotSupp(Opnum4::Layoutget)],
    );
    add(
        "not-supp-write-same",
        2,
        &[sequence(), ArgOp::NotSupp(Opnum4::WriteSame)],
    );
    let putfh = || ArgOp::Putfh(PutfhArgs4 { object: fh4() });
    add(
        "open-create",
        1,
        &[
            sequence(),
            putfh(),
            open4(
                OpenFlag4::Create(CreateHow4::Unchecked(settable_all().to_fattr())),
                OpenClaim4::Null(name4("new")),
            ),
            ArgOp::Getfh,
            ArgOp::Getattr(GetattrArgs4 {
                attr_request: Bitmap4::from_bits(&[Attr4::Change.bit(), Attr4::Size.bit()]),
            }),
        ],
    );
    add(
        "open-exclusive",
        1,
        &[
            sequence(),
            putfh(),
            open4(
                OpenFlag4::Create(CreateHow4::Exclusive41(CreatVerfAttr {
                    verf: Verifier4(*b"exclverf"),
                    attrs: SetAttrs4 {
                        mode: Some(0o600),
                        ..SetAttrs4::default()
                    }
                    .to_fattr(),
                })),
                OpenClaim4::Null(name4("x")),
            ),
            putfh(),
            open4(
                OpenFlag4::Create(CreateHow4::Exclusive(Verifier4(*b"oldexcl!"))),
                OpenClaim4::Null(name4("y")),
            ),
            putfh(),
            open4(
                OpenFlag4::Create(CreateHow4::Guarded(Fattr4::default())),
                OpenClaim4::Null(name4("z")),
            ),
        ],
    );
    add(
        "open-claims",
        1,
        &[
            sequence(),
            putfh(),
            open4(OpenFlag4::NoCreate, OpenClaim4::Fh),
            open4(
                OpenFlag4::NoCreate,
                OpenClaim4::Previous(OpenDelegationType4::Read),
            ),
            open4(
                OpenFlag4::NoCreate,
                OpenClaim4::DelegateCur(OpenClaimDelegateCur4 {
                    delegate_stateid: stateid4(),
                    file: name4("f"),
                }),
            ),
            open4(OpenFlag4::NoCreate, OpenClaim4::DelegatePrev(name4("g"))),
            open4(OpenFlag4::NoCreate, OpenClaim4::DelegCurFh(stateid4())),
            open4(OpenFlag4::NoCreate, OpenClaim4::DelegPrevFh),
        ],
    );
    add(
        "read",
        1,
        &[
            sequence(),
            putfh(),
            ArgOp::Read(ReadArgs4 {
                stateid: stateid4(),
                offset: 0,
                count: 1 << 20,
            }),
        ],
    );
    add(
        "locks",
        1,
        &[
            sequence(),
            putfh(),
            ArgOp::Lock(Box::new(LockArgs4 {
                locktype: NfsLockType4::WriteW,
                reclaim: false,
                offset: 0,
                length: u64::MAX,
                locker: Locker4::OpenOwner(OpenToLockOwner4 {
                    open_seqid: 0,
                    open_stateid: stateid4(),
                    lock_seqid: 0,
                    lock_owner: owner4("lock"),
                }),
            })),
            ArgOp::Lock(Box::new(LockArgs4 {
                locktype: NfsLockType4::Read,
                reclaim: true,
                offset: 10,
                length: 20,
                locker: Locker4::LockOwner(ExistLockOwner4 {
                    lock_stateid: stateid4(),
                    lock_seqid: 0,
                }),
            })),
            ArgOp::Lockt(LocktArgs4 {
                locktype: NfsLockType4::Write,
                offset: 0,
                length: 1,
                owner: owner4("other"),
            }),
            ArgOp::Locku(LockuArgs4 {
                locktype: NfsLockType4::Write,
                seqid: 0,
                lock_stateid: stateid4(),
                offset: 0,
                length: u64::MAX,
            }),
            ArgOp::OpenDowngrade(OpenDowngradeArgs4 {
                open_stateid: stateid4(),
                seqid: 0,
                share_access: OPEN4_SHARE_ACCESS_READ,
                share_deny: OPEN4_SHARE_DENY_NONE,
            }),
            ArgOp::Commit(CommitArgs4 {
                offset: 0,
                count: 0,
            }),
            ArgOp::Close(CloseArgs4 {
                seqid: 0,
                open_stateid: stateid4(),
            }),
            ArgOp::Delegreturn(DelegreturnArgs4 {
                deleg_stateid: stateid4(),
            }),
        ],
    );
    let range = AllocateArgs4 {
        stateid: stateid4(),
        offset: 0,
        length: 1 << 20,
    };
    add(
        "v42-data",
        2,
        &[
            sequence(),
            putfh(),
            ArgOp::Allocate(range.clone()),
            ArgOp::Deallocate(range),
            ArgOp::Seek(SeekArgs4 {
                stateid: stateid4(),
                offset: 0,
                what: DataContent4::Data,
            }),
            ArgOp::ReadPlus(ReadArgs4 {
                stateid: stateid4(),
                offset: 0,
                count: 65536,
            }),
            ArgOp::Savefh,
            putfh(),
            ArgOp::Copy(Box::new(CopyArgs4 {
                src_stateid: stateid4(),
                dst_stateid: stateid4(),
                src_offset: 0,
                dst_offset: 0,
                count: 0,
                consecutive: true,
                synchronous: true,
                source_server: Vec::new(),
            })),
            ArgOp::Clone(CloneArgs4 {
                src_stateid: stateid4(),
                dst_stateid: stateid4(),
                src_offset: 0,
                dst_offset: 4096,
                count: 4096,
            }),
        ],
    );
    add(
        "copy-from-elsewhere",
        2,
        &[
            sequence(),
            putfh(),
            ArgOp::Savefh,
            putfh(),
            ArgOp::Copy(Box::new(CopyArgs4 {
                src_stateid: stateid4(),
                dst_stateid: stateid4(),
                src_offset: 1,
                dst_offset: 2,
                count: 3,
                consecutive: false,
                synchronous: false,
                source_server: vec![
                    Netloc4::Name(Utf8Str::from("src.example.org")),
                    Netloc4::Url(Utf8Str::from("nfs://src/e")),
                    Netloc4::Netaddr(Netaddr4 {
                        netid: Utf8Str::from("tcp"),
                        addr: Utf8Str::from("192.0.2.1.8.1"),
                    }),
                ],
            })),
        ],
    );
    add(
        "xattrs",
        2,
        &[
            sequence(),
            putfh(),
            ArgOp::Setxattr(SetxattrArgs4 {
                option: SetxattrOption4::Create,
                key: name4("mime_type"),
                value: XattrValue4::from("text/plain"),
            }),
            ArgOp::Getxattr(GetxattrArgs4 {
                name: name4("mime_type"),
            }),
            ArgOp::Listxattrs(ListxattrsArgs4 {
                cookie: 0,
                maxcount: 4096,
            }),
            ArgOp::Removexattr(RemovexattrArgs4 {
                name: name4("mime_type"),
            }),
        ],
    );
    add(
        "largest-setxattr",
        2,
        &[ArgOp::Setxattr(SetxattrArgs4 {
            option: SetxattrOption4::Either,
            key: name4("big"),
            value: XattrValue4(vec![b'v'; XATTR_SIZE_MAX as usize]),
        })],
    );
    add("minor-0", 0, &[ArgOp::Putrootfh, getattr]);
    let clientid = 0x6563_0000_0000_0001;
    add(
        "minor-0-client",
        0,
        &[
            ArgOp::Setclientid(Box::new(SetclientidArgs4 {
                client: NfsClientId4 {
                    verifier: Verifier4(*b"v40boot1"),
                    id: Opaque4::from("Linux NFSv4.0 seed"),
                },
                callback: CbClient4 {
                    cb_program: 0x4000_0000,
                    cb_location: Netaddr4 {
                        netid: Utf8Str::from("tcp"),
                        addr: Utf8Str::from("127.0.0.1.3.232"),
                    },
                },
                callback_ident: 1,
            })),
            ArgOp::SetclientidConfirm(SetclientidConfirmArgs4 {
                clientid,
                setclientid_confirm: Verifier4(*b"confirm!"),
            }),
            ArgOp::Renew(RenewArgs4 { clientid }),
            ArgOp::OpenConfirm(OpenConfirmArgs4 {
                open_stateid: StateId4 {
                    seqid: 1,
                    other: [7; 12],
                },
                seqid: 2,
            }),
            ArgOp::ReleaseLockowner(ReleaseLockownerArgs4 {
                lock_owner: owner4("seed"),
            }),
        ],
    );
    add("no-ops", 1, &[]);
}

fn owner4(name: &str) -> StateOwner4 {
    StateOwner4 {
        clientid: 0x6563_0000_0000_0001,
        owner: Opaque4::from(name),
    }
}

fn open4(openhow: OpenFlag4, claim: OpenClaim4) -> ArgOp {
    ArgOp::Open(Box::new(OpenArgs4 {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: OPEN4_SHARE_DENY_NONE,
        owner: owner4("open"),
        openhow,
        claim,
    }))
}

fn cinfo4() -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: true,
        before: 1_700_000_000 << 30,
        after: (1_700_000_001 << 30) | 5,
    }
}

fn nfs4_results(s: &mut Seeds) {
    let mut res = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("nfs4_results", crate::nfs4::RESULTS, message, name, bytes);
    };
    let verf = Verifier4(*b"writever");
    let sequence = SequenceResOk4 {
        sessionid: SessionId4([7; 16]),
        sequenceid: 2,
        slotid: 0,
        highest_slotid: 63,
        target_highest_slotid: 63,
        status_flags: 0,
    };
    let mut compound = Encoder::new();
    CompoundResHead {
        status: Nfsstat4::Ok,
        tag: Utf8Str::from("seed"),
        numres: 4,
    }
    .encode(&mut compound);
    for result in [
        ResOp::Sequence(Res4::Ok(sequence.clone())),
        ResOp::Putfh(Nfsstat4::Ok),
        ResOp::Read(Res4::Ok(ReadResOk4 {
            eof: false,
            data: b"hello".to_vec(),
        })),
        ResOp::Getattr(Res4::Ok(GetattrResOk4 {
            obj_attributes: settable_all().to_fattr(),
        })),
    ] {
        result.encode(&mut compound);
    }
    res("COMPOUND", "read", compound.into_vec());
    let mut v40 = Encoder::new();
    CompoundResHead {
        status: Nfsstat4::ClidInuse,
        tag: Utf8Str::default(),
        numres: 2,
    }
    .encode(&mut v40);
    for result in [
        ResOp::Renew(Nfsstat4::Ok),
        ResOp::Setclientid(SetclientidRes4::ClidInuse(Netaddr4 {
            netid: Utf8Str::from("tcp6"),
            addr: Utf8Str::from("::1.3.232"),
        })),
    ] {
        result.encode(&mut v40);
    }
    res("COMPOUND", "minor-0-clid-inuse", v40.into_vec());
    let mut failed = Encoder::new();
    CompoundResHead {
        status: Nfsstat4::Denied,
        tag: Utf8Str::default(),
        numres: 3,
    }
    .encode(&mut failed);
    for result in [
        ResOp::Sequence(Res4::Ok(sequence.clone())),
        ResOp::Putfh(Nfsstat4::Ok),
        ResOp::Lock(LockRes4::Denied(Lock4Denied {
            offset: 0,
            length: u64::MAX,
            locktype: NfsLockType4::Write,
            owner: owner4("holder"),
        })),
    ] {
        result.encode(&mut failed);
    }
    res("COMPOUND", "lock-denied", failed.into_vec());
    res("status", "ok", Nfsstat4::Ok.to_xdr());
    res("status", "bad-stateid", Nfsstat4::BadStateid.to_xdr());
    res(
        "ACCESS",
        "ok",
        Res4::Ok(AccessResOk4 {
            supported: 0x3f,
            access: 0x1f,
        })
        .to_xdr(),
    );
    res(
        "BIND_CONN_TO_SESSION",
        "ok",
        Res4::Ok(BindConnToSessionResOk4 {
            sessid: SessionId4([7; 16]),
            dir: ChannelDirFromServer4::Both,
            use_conn_in_rdma_mode: false,
        })
        .to_xdr(),
    );
    res("CLOSE", "ok", Res4::Ok(stateid4()).to_xdr());
    res(
        "CLOSE",
        "old-stateid",
        Res4::<StateId4>::Fail(Nfsstat4::OldStateid).to_xdr(),
    );
    res(
        "COMMIT",
        "ok",
        Res4::Ok(CommitResOk4 { writeverf: verf }).to_xdr(),
    );
    let response = WriteResponse4 {
        callback_id: None,
        count: 4 << 20,
        committed: StableHow4::Unstable,
        writeverf: verf,
    };
    let sync = CopyRequirements4 {
        consecutive: true,
        synchronous: true,
    };
    res(
        "COPY",
        "ok",
        CopyRes4::Ok(CopyResOk4 {
            response: response.clone(),
            requirements: sync,
        })
        .to_xdr(),
    );
    res(
        "COPY",
        "async",
        CopyRes4::Ok(CopyResOk4 {
            response: WriteResponse4 {
                callback_id: Some(stateid4()),
                ..response
            },
            requirements: CopyRequirements4 {
                consecutive: true,
                synchronous: false,
            },
        })
        .to_xdr(),
    );
    res("COPY", "no-reqs", CopyRes4::OffloadNoReqs(sync).to_xdr());
    res(
        "CREATE",
        "ok",
        Res4::Ok(CreateResOk4 {
            cinfo: cinfo4(),
            attrset: Bitmap4::from_bits(&[Attr4::Mode.bit()]),
        })
        .to_xdr(),
    );
    res(
        "CREATE_SESSION",
        "ok",
        Res4::Ok(CreateSessionResOk4 {
            sessionid: SessionId4([7; 16]),
            sequence: 1,
            flags: 2,
            fore_chan_attrs: channel4(),
            back_chan_attrs: channel4(),
        })
        .to_xdr(),
    );
    res(
        "EXCHANGE_ID",
        "ok",
        Res4::Ok(ExchangeIdResOk4 {
            clientid: 0x6563_0000_0000_0001,
            sequenceid: 1,
            flags: EXCHGID4_FLAG_USE_NON_PNFS | EXCHGID4_FLAG_CONFIRMED_R,
            state_protect: StateProtect4R::None,
            server_owner: ServerOwner4 {
                minor_id: 0,
                major_id: Opaque4(vec![0x5a; 16]),
            },
            server_scope: Opaque4(vec![0x5a; 16]),
            server_impl_id: Some(NfsImplId4 {
                domain: Utf8Str::from("dionfs.org"),
                name: Utf8Str::from("dionfs"),
                date: NfsTime4::default(),
            }),
        })
        .to_xdr(),
    );
    res(
        "GETATTR",
        "ok",
        Res4::Ok(GetattrResOk4 {
            obj_attributes: settable_all().to_fattr(),
        })
        .to_xdr(),
    );
    res(
        "GETFH",
        "ok",
        Res4::Ok(GetfhResOk4 { object: fh4() }).to_xdr(),
    );
    res(
        "GETXATTR",
        "ok",
        Res4::Ok(XattrValue4::from("text/plain")).to_xdr(),
    );
    res(
        "GETXATTR",
        "noxattr",
        Res4::<XattrValue4>::Fail(Nfsstat4::Noxattr).to_xdr(),
    );
    res("LINK", "ok", Res4::Ok(cinfo4()).to_xdr());
    res(
        "LISTXATTRS",
        "ok",
        Res4::Ok(ListxattrsResOk4 {
            cookie: 2,
            names: vec![Component4::from("a"), Component4::from("mime_type")],
            eof: true,
        })
        .to_xdr(),
    );
    res("LOCK", "ok", LockRes4::Ok(stateid4()).to_xdr());
    res(
        "LOCK",
        "denied",
        LockRes4::<StateId4>::Denied(Lock4Denied {
            offset: 0,
            length: u64::MAX,
            locktype: NfsLockType4::Read,
            owner: owner4("nlm:client 1234"),
        })
        .to_xdr(),
    );
    res("LOCKT", "ok", LockRes4::Ok(dionfs_proto::Void).to_xdr());
    res(
        "LOCKT",
        "grace",
        LockRes4::<dionfs_proto::Void>::Fail(Nfsstat4::Grace).to_xdr(),
    );
    let open_ok = |delegation| {
        Res4::Ok(OpenResOk4 {
            stateid: stateid4(),
            cinfo: cinfo4(),
            rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
            attrset: Bitmap4::default(),
            delegation,
        })
        .to_xdr()
    };
    res("OPEN", "no-delegation", open_ok(OpenDelegation4::None));
    res(
        "OPEN",
        "none-ext",
        open_ok(OpenDelegation4::NoneExt(OpenNoneDelegation4::Why(
            WhyNoDelegation4::NotSuppFtype,
        ))),
    );
    let ace = Nfsace4 {
        acetype: 0,
        flag: 0,
        access_mask: 0x1,
        who: Utf8Str::from("EVERYONE@"),
    };
    res(
        "OPEN",
        "read-delegation",
        open_ok(OpenDelegation4::Read(OpenReadDelegation4 {
            stateid: stateid4(),
            recall: false,
            permissions: ace.clone(),
        })),
    );
    res(
        "OPEN",
        "write-delegation",
        open_ok(OpenDelegation4::Write(OpenWriteDelegation4 {
            stateid: stateid4(),
            recall: false,
            space_limit: NfsSpaceLimit4::Size(u64::MAX),
            permissions: ace,
        })),
    );
    res(
        "READ",
        "ok",
        Res4::Ok(ReadResOk4 {
            eof: true,
            data: b"hello".to_vec(),
        })
        .to_xdr(),
    );
    res(
        "READ_PLUS",
        "segments",
        Res4::Ok(ReadPlusResOk4 {
            eof: false,
            contents: vec![
                ReadPlusContent4::Hole(DataInfo4 {
                    offset: 0,
                    length: 4096,
                }),
                ReadPlusContent4::Data(Data4 {
                    offset: 4096,
                    data: b"hello".to_vec(),
                }),
            ],
        })
        .to_xdr(),
    );
    res(
        "READDIR",
        "ok",
        Res4::Ok(ReaddirResOk4 {
            cookieverf: Verifier4::default(),
            reply: DirList4 {
                entries: vec![Entry4 {
                    cookie: 3,
                    name: name4("a"),
                    attrs: settable_all().to_fattr(),
                }],
                eof: true,
            },
        })
        .to_xdr(),
    );
    res(
        "READLINK",
        "ok",
        Res4::Ok(Linktext4::from("../target")).to_xdr(),
    );
    res(
        "RENAME",
        "ok",
        Res4::Ok(RenameResOk4 {
            source_cinfo: cinfo4(),
            target_cinfo: cinfo4(),
        })
        .to_xdr(),
    );
    res(
        "SECINFO",
        "ok",
        Res4::Ok(SecinfoResOk4(vec![
            Secinfo4::Flavor(1),
            Secinfo4::Flavor(0),
        ]))
        .to_xdr(),
    );
    res(
        "SEEK",
        "ok",
        Res4::Ok(SeekResOk4 {
            eof: false,
            offset: 8192,
        })
        .to_xdr(),
    );
    res("SEQUENCE", "ok", Res4::Ok(sequence).to_xdr());
    res(
        "SETATTR",
        "ok",
        SetattrRes4 {
            status: Nfsstat4::Ok,
            attrsset: Bitmap4::from_bits(&[Attr4::Size.bit()]),
        }
        .to_xdr(),
    );
    res(
        "TEST_STATEID",
        "ok",
        Res4::Ok(TestStateidResOk4 {
            status_codes: vec![Nfsstat4::Ok, Nfsstat4::BadStateid],
        })
        .to_xdr(),
    );
    res(
        "WRITE",
        "ok",
        Res4::Ok(WriteResOk4 {
            count: 5,
            committed: StableHow4::FileSync,
            writeverf: verf,
        })
        .to_xdr(),
    );
}

fn nfs4_callback(s: &mut Seeds) {
    let sequence = CbResOp::Sequence(Res4::Ok(CbSequenceResOk4 {
        sessionid: SessionId4([7; 16]),
        sequenceid: 1,
        slotid: 0,
        highest_slotid: 0,
        target_highest_slotid: 0,
    }));
    let reply = |status, results: Vec<CbResOp>| {
        CbCompoundRes4 {
            status,
            tag: Utf8Str::default(),
            results,
        }
        .to_xdr()
    };
    s.add(
        "nfs4_callback",
        "sequence",
        reply(Nfsstat4::Ok, vec![sequence.clone()]),
    );
    s.add(
        "nfs4_callback",
        "recall",
        reply(
            Nfsstat4::Ok,
            vec![
                sequence.clone(),
                CbResOp::Status {
                    opnum: CbOpnum4::Recall,
                    status: Nfsstat4::Ok,
                },
            ],
        ),
    );
    s.add(
        "nfs4_callback",
        "getattr",
        reply(
            Nfsstat4::Ok,
            vec![
                sequence,
                CbResOp::Getattr(Res4::Ok(settable_all().to_fattr())),
            ],
        ),
    );
    s.add(
        "nfs4_callback",
        "bad-session",
        reply(
            Nfsstat4::Badsession,
            vec![CbResOp::Sequence(Res4::Fail(Nfsstat4::Badsession))],
        ),
    );
    s.add(
        "nfs4_callback",
        "illegal",
        reply(
            Nfsstat4::OpIllegal,
            vec![CbResOp::Illegal(Nfsstat4::OpIllegal)],
        ),
    );
}

fn nfs4_fattr(s: &mut Seeds) {
    let mut add = |name: &str, fattr: &Fattr4| {
        let mut bytes = fattr.attrmask.to_xdr();
        bytes.extend_from_slice(fattr.attr_vals.as_bytes());
        s.add("nfs4_fattr", name, bytes);
    };
    add("every-settable", &settable_all().to_fattr());
    add(
        "mode",
        &SetAttrs4 {
            mode: Some(0o600),
            ..SetAttrs4::default()
        }
        .to_fattr(),
    );
    add("none", &Fattr4::default());
    add(
        "acl",
        &Fattr4 {
            attrmask: Bitmap4::from_bits(&[Attr4::Acl.bit()]),
            attr_vals: AttrList4(words(&[0])),
        },
    );
}

fn mount3(s: &mut Seeds) {
    let mut msg = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("mount3", crate::mount3::MESSAGES, message, name, bytes);
    };
    for proc_ in ["NULL", "DUMP", "UMNTALL", "EXPORT"] {
        msg(proc_, "void", Vec::new());
    }
    msg("MNT", "typical", DirPath::from("/srv/export").to_xdr());
    msg("MNT", "largest", DirPath(vec![b'/'; 1024]).to_xdr());
    let mut too_long = Encoder::new();
    too_long.string(&[b'/'; 1025]);
    msg("MNT", "path-too-long", too_long.into_vec());
    msg("UMNT", "typical", DirPath::from("/srv/export").to_xdr());
    let ok = MountRes3::Ok(MountResOk {
        fhandle: fh(),
        auth_flavors: vec![1, 0],
    });
    msg("MNT result", "ok", ok.to_xdr());
    msg(
        "MNT result",
        "denied",
        MountRes3::Fail(MountStat3::Acces).to_xdr(),
    );
    let mut many_flavors = MountStat3::Ok.to_xdr();
    many_flavors.extend(fh().to_xdr());
    many_flavors.extend(words(&[257]));
    msg("MNT result", "too-many-flavors", many_flavors);
    let dump = MountList(vec![MountBody {
        hostname: MountName::from("client"),
        directory: DirPath::from("/srv/export"),
    }]);
    msg("DUMP result", "one", dump.to_xdr());
    let exports = Exports(vec![
        ExportNode {
            dir: DirPath::from("/srv/export"),
            groups: vec![MountName::from("192.168.1.0/24"), MountName::from("*.lan")],
        },
        ExportNode {
            dir: DirPath::from("/srv/open"),
            groups: Vec::new(),
        },
    ]);
    msg("EXPORT result", "two", exports.to_xdr());
}

fn lock(name: &str) -> Nlm4Lock {
    Nlm4Lock {
        caller_name: CallerName::from(name),
        fh: NetObj(fh().into_vec()),
        oh: NetObj::from("1234@client"),
        svid: 1234,
        l_offset: 0,
        l_len: 0,
    }
}

fn nlm4(s: &mut Seeds) {
    let mut msg = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("nlm4", crate::nlm4::MESSAGES, message, name, bytes);
    };
    let cookie = NetObj(vec![0, 0, 0, 1]);
    let test = Nlm4TestArgs {
        cookie: cookie.clone(),
        exclusive: true,
        alock: lock("client"),
    };
    let lock_args = Nlm4LockArgs {
        cookie: cookie.clone(),
        block: true,
        exclusive: true,
        alock: lock("client"),
        reclaim: false,
        state: 3,
    };
    let cancel = Nlm4CancArgs {
        cookie: cookie.clone(),
        block: true,
        exclusive: false,
        alock: lock("client"),
    };
    let unlock = Nlm4UnlockArgs {
        cookie: cookie.clone(),
        alock: lock("client"),
    };
    let res = Nlm4Res {
        cookie: cookie.clone(),
        stat: Nlm4Stat::Granted,
    };
    let denied = Nlm4TestRes {
        cookie: cookie.clone(),
        stat: Nlm4Stat::Denied,
        holder: Some(Nlm4Holder {
            exclusive: true,
            svid: 99,
            oh: NetObj::from("owner"),
            l_offset: 10,
            l_len: 20,
        }),
    };
    let share = Nlm4ShareArgs {
        cookie: cookie.clone(),
        share: Nlm4Share {
            caller_name: CallerName::from("client"),
            fh: NetObj(fh().into_vec()),
            oh: NetObj::from("owner"),
            mode: Fsh4Mode::DenyWrite,
            access: Fsh4Access::Read,
        },
        reclaim: false,
    };
    msg("NULL", "void", Vec::new());
    for proc_ in ["TEST", "GRANTED", "TEST_MSG", "GRANTED_MSG"] {
        msg(proc_, "typical", test.to_xdr());
    }
    for proc_ in ["LOCK", "LOCK_MSG", "NM_LOCK"] {
        msg(proc_, "typical", lock_args.to_xdr());
    }
    for proc_ in ["CANCEL", "CANCEL_MSG"] {
        msg(proc_, "typical", cancel.to_xdr());
    }
    for proc_ in ["UNLOCK", "UNLOCK_MSG"] {
        msg(proc_, "typical", unlock.to_xdr());
    }
    msg("TEST_RES", "denied", denied.to_xdr());
    msg(
        "TEST_RES",
        "granted",
        Nlm4TestRes {
            cookie: cookie.clone(),
            stat: Nlm4Stat::Granted,
            holder: None,
        }
        .to_xdr(),
    );
    for proc_ in ["LOCK_RES", "CANCEL_RES", "UNLOCK_RES", "GRANTED_RES"] {
        msg(proc_, "typical", res.to_xdr());
    }
    msg("SHARE", "typical", share.to_xdr());
    msg("UNSHARE", "typical", share.to_xdr());
    let notify = Nlm4Notify {
        name: NotifyName::from("client"),
        state: 5,
    };
    msg("FREE_ALL", "typical", notify.to_xdr());
    let share_res = Nlm4ShareRes {
        cookie,
        stat: Nlm4Stat::DeniedGracePeriod,
        sequence: 0,
    };
    msg("SHARE result", "typical", share_res.to_xdr());

    // The longest arguments: every string and netobj at its maximum.
    let largest = Nlm4LockArgs {
        cookie: NetObj(vec![1; MAXNETOBJ_SZ as usize]),
        block: false,
        exclusive: false,
        alock: Nlm4Lock {
            caller_name: CallerName(vec![b'c'; LM_MAXSTRLEN as usize]),
            fh: NetObj(vec![2; MAXNETOBJ_SZ as usize]),
            oh: NetObj(vec![3; MAXNETOBJ_SZ as usize]),
            svid: -1,
            l_offset: u64::MAX,
            l_len: u64::MAX,
        },
        reclaim: true,
        state: i32::MIN,
    };
    msg("LOCK", "largest", largest.to_xdr());
    let mut bad_stat = cookie_bytes();
    bad_stat.extend(words(&[10]));
    msg("LOCK_RES", "bad-stat", bad_stat);
}

fn cookie_bytes() -> Vec<u8> {
    NetObj(vec![0, 0, 0, 1]).to_xdr()
}

fn nsm(s: &mut Seeds) {
    let mut msg = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("nsm", crate::nsm::MESSAGES, message, name, bytes);
    };
    let my_id = MyId {
        my_name: SmName::from("localhost"),
        my_prog: 100_021,
        my_vers: 4,
        my_proc: 16,
    };
    let mon_id = MonId {
        mon_name: SmName::from("client"),
        my_id: my_id.clone(),
    };
    msg("NULL", "void", Vec::new());
    msg("SIMU_CRASH", "void", Vec::new());
    msg("STAT", "typical", SmName::from("client").to_xdr());
    let mon = Mon {
        mon_id: mon_id.clone(),
        priv_: Priv(*b"sixteen bytes!!!"),
    };
    msg("MON", "typical", mon.to_xdr());
    msg("UNMON", "typical", mon_id.to_xdr());
    msg("UNMON_ALL", "typical", my_id.to_xdr());
    let notify = StatChge {
        mon_name: SmName::from("client"),
        state: 7,
    };
    msg("NOTIFY", "typical", notify.to_xdr());
    let largest = StatChge {
        mon_name: SmName(vec![b'h'; 1024]),
        state: -1,
    };
    msg("NOTIFY", "largest", largest.to_xdr());
    let stat = SmStatRes {
        res_stat: SmRes::Succ,
        state: 3,
    };
    msg("STAT result", "typical", stat.to_xdr());
    msg("UNMON result", "typical", 3i32.to_xdr());
}

fn portmap(s: &mut Seeds) {
    let mut msg = |message: &str, name: &str, bytes: Vec<u8>| {
        s.message("portmap", crate::portmap::MESSAGES, message, name, bytes);
    };
    let nfs = Mapping {
        prog: 100_003,
        vers: 3,
        prot: IPPROTO_TCP,
        port: 2049,
    };
    let rpcb = Rpcb {
        prog: 100_005,
        vers: 3,
        netid: b"tcp".to_vec(),
        addr: b"0.0.0.0.78.80".to_vec(),
        owner: b"superuser".to_vec(),
    };
    for proc_ in ["NULL", "DUMP", "RPCBPROC_DUMP", "RPCBPROC_GETTIME"] {
        msg(proc_, "void", Vec::new());
    }
    for proc_ in ["SET", "UNSET", "GETPORT"] {
        msg(proc_, "typical", nfs.to_xdr());
    }
    for proc_ in [
        "RPCBPROC_SET",
        "RPCBPROC_UNSET",
        "RPCBPROC_GETADDR",
        "RPCBPROC_GETVERSADDR",
    ] {
        msg(proc_, "typical", rpcb.to_xdr());
    }
    let mut not_utf8 = Encoder::new();
    not_utf8.u32(100_003);
    not_utf8.u32(3);
    not_utf8.string(b"tcp\xff");
    not_utf8.string(b"");
    not_utf8.string(b"");
    msg("RPCBPROC_GETADDR", "netid-not-utf8", not_utf8.into_vec());
    msg("GETPORT result", "typical", 2049u32.to_xdr());
    msg("SET result", "typical", true.to_xdr());
    let dump = DumpResult {
        mappings: vec![
            nfs,
            Mapping {
                prot: IPPROTO_UDP,
                ..nfs
            },
        ],
    };
    msg("DUMP result", "typical", dump.to_xdr());
    let rpcb_dump = RpcbDump {
        entries: vec![rpcb.clone(), rpcb],
    };
    msg("RPCBPROC_DUMP result", "typical", rpcb_dump.to_xdr());
}
