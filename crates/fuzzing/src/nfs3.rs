//! NFSv3 (RFC 1813): every procedure's arguments as the server decodes
//! them, every result as a client decodes it, and the READDIR and
//! READDIRPLUS reply encoders fed the client's limits.

use dionfs_proto::nfs3::*;
use dionfs_proto::{ArgsLimit, Void};
use dionfs_xdr::{pad_len, Decode, Decoder, Encode, Encoder};

use crate::{
    assert_same_but_padding, check_args, check_error, check_prefix, check_result, check_value,
    select, Message,
};

/// The largest WRITE payload the fuzzed server accepts (its default
/// `max_transfer`, 1 MiB).
const MAX_WRITE_DATA: u32 = 1 << 20;

/// Arguments of one procedure, decoded as the server does (from the front
/// of the record's rest, trailing bytes tolerated) and checked against the
/// procedure's `max_args_len`.
fn args<T>(proc_: NfsProc3, bytes: &[u8])
where
    T: Encode + for<'a> Decode<'a> + PartialEq + std::fmt::Debug,
{
    let max = proc_
        .max_args_len()
        .whole()
        .expect("WRITE has its own check");
    check_args::<T>(bytes, max, proc_);
}

/// WRITE, as the server receives it: the head up to the payload's length
/// ([`WriteArgsHead::decode_with_max`]) from `write_head_len` bytes, within
/// the head's limit, then the payload. Also the full [`WriteArgs`] codec
/// clients use.
fn write_args(bytes: &[u8]) {
    let ArgsLimit::HeadThenPayload(max_head) = NfsProc3::Write.max_args_len() else {
        panic!("WRITE's limit is of its head");
    };
    let mut dec = Decoder::new(bytes);
    match WriteArgsHead::decode_with_max(&mut dec, MAX_WRITE_DATA) {
        Ok(head) => {
            let used = dec.position();
            assert_eq!(used, head.encoded_len(), "WRITE head length");
            assert_eq!(used, write_head_len(head.file.as_bytes().len()));
            assert!(
                used <= max_head,
                "WRITE head of {used} bytes, limit {max_head}"
            );
            assert!(head.data_len <= MAX_WRITE_DATA);
            let encoded = head.to_xdr();
            assert_same_but_padding(&encoded, &bytes[..used]);
            let again = WriteArgsHead::decode_with_max(&mut Decoder::new(&encoded), MAX_WRITE_DATA);
            assert_eq!(again.as_ref(), Ok(&head), "WRITE head round trip");
        }
        Err(e) => check_error(&e, bytes.len()),
    }
    if let Some((write, used)) = check_prefix::<WriteArgs>(bytes) {
        let data_len = write.data.len();
        assert_eq!(write.head.data_len as usize, data_len);
        assert_eq!(
            used,
            write.head.encoded_len() + data_len + pad_len(data_len)
        );
    }
}

/// Each procedure's arguments, in procedure order (the selector byte of a
/// seed is the procedure number).
pub(crate) const ARGS: &[Message] = &[
    Message {
        name: "NULL",
        check: |b| args::<Void>(NfsProc3::Null, b),
    },
    Message {
        name: "GETATTR",
        check: |b| args::<GetattrArgs>(NfsProc3::Getattr, b),
    },
    Message {
        name: "SETATTR",
        check: |b| args::<SetattrArgs>(NfsProc3::Setattr, b),
    },
    Message {
        name: "LOOKUP",
        check: |b| args::<LookupArgs>(NfsProc3::Lookup, b),
    },
    Message {
        name: "ACCESS",
        check: |b| args::<AccessArgs>(NfsProc3::Access, b),
    },
    Message {
        name: "READLINK",
        check: |b| args::<ReadlinkArgs>(NfsProc3::Readlink, b),
    },
    Message {
        name: "READ",
        check: |b| args::<ReadArgs>(NfsProc3::Read, b),
    },
    Message {
        name: "WRITE",
        check: write_args,
    },
    Message {
        name: "CREATE",
        check: |b| args::<CreateArgs>(NfsProc3::Create, b),
    },
    Message {
        name: "MKDIR",
        check: |b| args::<MkdirArgs>(NfsProc3::Mkdir, b),
    },
    Message {
        name: "SYMLINK",
        check: |b| args::<SymlinkArgs>(NfsProc3::Symlink, b),
    },
    Message {
        name: "MKNOD",
        check: |b| args::<MknodArgs>(NfsProc3::Mknod, b),
    },
    Message {
        name: "REMOVE",
        check: |b| args::<RemoveArgs>(NfsProc3::Remove, b),
    },
    Message {
        name: "RMDIR",
        check: |b| args::<RmdirArgs>(NfsProc3::Rmdir, b),
    },
    Message {
        name: "RENAME",
        check: |b| args::<RenameArgs>(NfsProc3::Rename, b),
    },
    Message {
        name: "LINK",
        check: |b| args::<LinkArgs>(NfsProc3::Link, b),
    },
    Message {
        name: "READDIR",
        check: |b| args::<ReaddirArgs>(NfsProc3::Readdir, b),
    },
    Message {
        name: "READDIRPLUS",
        check: |b| args::<ReaddirplusArgs>(NfsProc3::Readdirplus, b),
    },
    Message {
        name: "FSSTAT",
        check: |b| args::<FsstatArgs>(NfsProc3::Fsstat, b),
    },
    Message {
        name: "FSINFO",
        check: |b| args::<FsinfoArgs>(NfsProc3::Fsinfo, b),
    },
    Message {
        name: "PATHCONF",
        check: |b| args::<PathconfArgs>(NfsProc3::Pathconf, b),
    },
    Message {
        name: "COMMIT",
        check: |b| args::<CommitArgs>(NfsProc3::Commit, b),
    },
];

/// Target `nfs3_args`: `data[0]` picks the procedure (modulo 22), the rest
/// is its arguments.
pub fn nfs3_args(data: &[u8]) {
    select(ARGS, data);
}

/// READ's result: its encoder requires `count` to be the data's length (a
/// debug assertion), which the decoder does not check (RFC 1813 has both
/// and a client must cope with a server that sends them different), so a
/// result breaking that is only decoded, not re-encoded.
fn read_result(bytes: &[u8]) {
    let mut dec = Decoder::new(bytes);
    match ReadRes::decode(&mut dec) {
        Ok(NfsRes::Ok(ok)) if ok.count as usize != ok.data.len() => {
            let used = dec.position();
            assert_eq!(ReadRes::from_xdr(&bytes[..used]), Ok(NfsRes::Ok(ok)));
        }
        Ok(res) => check_value(&res, &bytes[..dec.position()]),
        Err(e) => check_error(&e, bytes.len()),
    }
}

/// Each procedure's result, in procedure order.
pub(crate) const RESULTS: &[Message] = &[
    Message {
        name: "NULL",
        check: check_result::<Void>,
    },
    Message {
        name: "GETATTR",
        check: check_result::<GetattrRes>,
    },
    Message {
        name: "SETATTR",
        check: check_result::<SetattrRes>,
    },
    Message {
        name: "LOOKUP",
        check: check_result::<LookupRes>,
    },
    Message {
        name: "ACCESS",
        check: check_result::<AccessRes>,
    },
    Message {
        name: "READLINK",
        check: check_result::<ReadlinkRes>,
    },
    Message {
        name: "READ",
        check: read_result,
    },
    Message {
        name: "WRITE",
        check: check_result::<WriteRes>,
    },
    Message {
        name: "CREATE",
        check: check_result::<CreateRes>,
    },
    Message {
        name: "MKDIR",
        check: check_result::<MkdirRes>,
    },
    Message {
        name: "SYMLINK",
        check: check_result::<SymlinkRes>,
    },
    Message {
        name: "MKNOD",
        check: check_result::<MknodRes>,
    },
    Message {
        name: "REMOVE",
        check: check_result::<RemoveRes>,
    },
    Message {
        name: "RMDIR",
        check: check_result::<RmdirRes>,
    },
    Message {
        name: "RENAME",
        check: check_result::<RenameRes>,
    },
    Message {
        name: "LINK",
        check: check_result::<LinkRes>,
    },
    Message {
        name: "READDIR",
        check: check_result::<ReaddirRes>,
    },
    Message {
        name: "READDIRPLUS",
        check: check_result::<ReaddirplusRes>,
    },
    Message {
        name: "FSSTAT",
        check: check_result::<FsstatRes>,
    },
    Message {
        name: "FSINFO",
        check: check_result::<FsinfoRes>,
    },
    Message {
        name: "PATHCONF",
        check: check_result::<PathconfRes>,
    },
    Message {
        name: "COMMIT",
        check: check_result::<CommitRes>,
    },
];

/// Target `nfs3_results`: `data[0]` picks the procedure (modulo 22), the
/// rest is its result. The server never decodes these (clients and tests
/// do); they are here because they share every building block with the
/// arguments and add the lists of READDIR and READDIRPLUS.
pub fn nfs3_results(data: &[u8]) {
    select(RESULTS, data);
}

/// Bytes of a `post_op_attr`: the boolean, and `fattr3` if present.
fn post_op_attr_len(present: bool) -> usize {
    4 + if present { Fattr3::ENCODED_LEN } else { 0 }
}

/// Bytes of a variable-length opaque of `len` bytes (RFC 4506 section 4.10).
fn opaque_len(len: usize) -> usize {
    4 + len + pad_len(len)
}

/// The attributes every fuzzed entry gets, if it has any.
fn attributes(fileid: u64) -> Fattr3 {
    Fattr3 {
        ftype: Ftype3::Reg,
        mode: 0o644,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        used: 0,
        rdev: SpecData3::default(),
        fsid: 1,
        fileid,
        atime: NfsTime3::default(),
        mtime: NfsTime3::default(),
        ctime: NfsTime3::default(),
    }
}

/// One directory entry as the input describes it.
struct Entry {
    fileid: u64,
    name: Vec<u8>,
    cookie: u64,
    attributes: PostOpAttr,
    handle: PostOpFh3,
}

impl Entry {
    /// Reads an entry from the input: fileid, name (at most the longest
    /// name the codec carries), cookie, and for READDIRPLUS a word whose
    /// bits say whether attributes and a handle follow (the handle's bytes
    /// come next).
    fn read(dec: &mut Decoder<'_>, plus: bool) -> Option<Self> {
        let fileid = dec.u64().ok()?;
        let name = dec.string(NFS3_MAX_NAME_LEN).ok()?.to_vec();
        let cookie = dec.u64().ok()?;
        let (attributes, handle) = if plus {
            let flags = dec.u32().ok()?;
            let attributes = PostOpAttr((flags & 1 != 0).then(|| attributes(fileid)));
            let handle = if flags & 2 != 0 {
                Some(NfsFh3::decode(dec).ok()?)
            } else {
                None
            };
            (attributes, PostOpFh3(handle))
        } else {
            (PostOpAttr(None), PostOpFh3(None))
        };
        Some(Self {
            fileid,
            name,
            cookie,
            attributes,
            handle,
        })
    }

    /// Bytes of directory information READDIRPLUS `dircount` counts:
    /// fileid, name, cookie (RFC 1813 section 3.3.17).
    fn dir_info_len(&self) -> usize {
        8 + opaque_len(self.name.len()) + 8
    }

    /// Bytes the entry adds to the reply, its list link included.
    fn reply_len(&self, plus: bool) -> usize {
        let mut len = 4 + self.dir_info_len();
        if plus {
            len += post_op_attr_len(self.attributes.0.is_some());
            len += 4 + self
                .handle
                .0
                .as_ref()
                .map_or(0, |fh| opaque_len(fh.as_bytes().len()));
        }
        len
    }
}

/// Target `nfs3_readdir_reply`: the READDIR / READDIRPLUS reply encoders,
/// which turn the client's `count` (`maxcount`) and `dircount` into a
/// reply. The input: a word of flags (bit 0 READDIRPLUS, bit 1 eof, bit 2
/// directory attributes), `count` (or `maxcount`), `dircount`, then
/// entries ([`Entry::read`]) until the input ends.
///
/// Checks: once an entry is refused every later one is; an entry is
/// refused only if it would break a limit; when any entry went in the
/// reply's resok is within `count` and (READDIRPLUS) the entries'
/// directory information within `dircount`, but for a first entry, which
/// is admitted whatever `dircount` says; the reply decodes to exactly the
/// entries accepted.
pub fn nfs3_readdir_reply(data: &[u8]) {
    let mut dec = Decoder::new(data);
    let (Ok(flags), Ok(count), Ok(dircount)) = (dec.u32(), dec.u32(), dec.u32()) else {
        return;
    };
    let plus = flags & 1 != 0;
    let eof = flags & 2 != 0;
    let dir_attributes = PostOpAttr((flags & 4 != 0).then(|| attributes(1)));
    let cookieverf = CookieVerf3(*b"verifier");
    let mut entries = Vec::new();
    while let Some(entry) = Entry::read(&mut dec, plus) {
        entries.push(entry);
    }

    let mut readdir = ReaddirEncoder::new(Encoder::new(), &dir_attributes, cookieverf, count);
    let mut readdirplus =
        ReaddirplusEncoder::new(Encoder::new(), &dir_attributes, cookieverf, dircount, count);
    let mut accepted = 0;
    let mut refused = None;
    for (i, e) in entries.iter().enumerate() {
        let took = if plus {
            readdirplus.push(e.fileid, &e.name, e.cookie, &e.attributes, &e.handle)
        } else {
            readdir.push(e.fileid, &e.name, e.cookie)
        };
        match (took, refused) {
            (true, None) => accepted += 1,
            (true, Some(first)) => panic!("entry {i} accepted after entry {first} was refused"),
            (false, None) => refused = Some(i),
            (false, Some(_)) => {}
        }
    }
    let reply = if plus {
        assert_eq!(readdirplus.len(), accepted);
        readdirplus.finish(eof).into_vec()
    } else {
        assert_eq!(readdir.len(), accepted);
        readdir.finish(eof).into_vec()
    };

    // The limits, counted independently of the encoders (RFC 1813
    // sections 3.3.16 and 3.3.17; the status word is not counted).
    let base = post_op_attr_len(dir_attributes.0.is_some()) + 8;
    let list_end = 8;
    let taken = &entries[..accepted];
    let entries_len: usize = taken.iter().map(|e| e.reply_len(plus)).sum();
    let dir_info: usize = taken.iter().map(Entry::dir_info_len).sum();
    let resok_len = reply.len() - 4;
    assert_eq!(resok_len, base + entries_len + list_end, "reply length");
    if accepted > 0 {
        assert!(
            resok_len <= count as usize,
            "resok of {resok_len} bytes, count {count}"
        );
        if plus && accepted > 1 {
            assert!(
                dir_info <= dircount as usize,
                "dir info {dir_info} > dircount {dircount}"
            );
        }
    }
    if let Some(r) = refused {
        let e = &entries[r];
        let over_count = base + entries_len + e.reply_len(plus) + list_end > count as usize;
        let over_dircount = plus && accepted > 0 && dir_info + e.dir_info_len() > dircount as usize;
        assert!(
            over_count || over_dircount,
            "entry {r} refused though it fits (count {count}, dircount {dircount})"
        );
    }

    // The reply decodes to what went in.
    let (decoded_entries, decoded_eof, decoded_dir_attributes, decoded_verf) = if plus {
        match ReaddirplusRes::from_xdr(&reply) {
            Ok(NfsRes::Ok(ok)) => {
                for (d, e) in ok.entries.iter().zip(taken) {
                    assert_eq!(d.name_attributes, e.attributes);
                    assert_eq!(d.name_handle, e.handle);
                }
                let ids = ok
                    .entries
                    .iter()
                    .map(|d| (d.fileid, d.name.0.clone(), d.cookie));
                (
                    ids.collect::<Vec<_>>(),
                    ok.eof,
                    ok.dir_attributes,
                    ok.cookieverf,
                )
            }
            other => panic!("READDIRPLUS reply does not decode: {other:?}"),
        }
    } else {
        match ReaddirRes::from_xdr(&reply) {
            Ok(NfsRes::Ok(ok)) => {
                let ids = ok
                    .entries
                    .iter()
                    .map(|d| (d.fileid, d.name.0.clone(), d.cookie));
                (
                    ids.collect::<Vec<_>>(),
                    ok.eof,
                    ok.dir_attributes,
                    ok.cookieverf,
                )
            }
            other => panic!("READDIR reply does not decode: {other:?}"),
        }
    };
    let expected: Vec<_> = taken
        .iter()
        .map(|e| (e.fileid, e.name.clone(), e.cookie))
        .collect();
    assert_eq!(decoded_entries, expected);
    assert_eq!(decoded_eof, eof);
    assert_eq!(decoded_dir_attributes, dir_attributes);
    assert_eq!(decoded_verf, cookieverf);
}
