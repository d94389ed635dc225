//! NFS version 3 (RFC 1813): one function per procedure, grouped by kind in
//! `attrs` (attributes and file systems), `dirs` (names and directories) and
//! `data` (READ, WRITE, COMMIT). The procedure table is [`PROGRAM`]:
//! each procedure's name, argument bound, reply-cache policy, buffers and
//! handler, in one place.
//!
//! Handlers run on a blocking thread as root; the file-system work a client
//! asks for runs under its squashed credentials through [`Ctx::as_user`], so
//! the kernel checks permissions and new files get the right owner.

pub mod attrs;
pub mod convert;
pub mod data;
pub mod dirs;
pub mod status;

use std::sync::Arc;

use dionfs_dataplane::PooledBuf;
use dionfs_fs::{handle, FsError, Node};
use dionfs_proto::nfs3::{NfsFh3, NfsProc3, NfsStat3, NFS3_FHSIZE, NFS_PROGRAM, NFS_V3};
use dionfs_proto::Void;
use dionfs_rpc::{CallHeader, ReplyStatus};
use dionfs_sys::cred::Creds;
use dionfs_xdr::{Decode, Decoder, Encode};

use crate::admit::Refusal;
use crate::program::{Io, Procedure, Program, ReplyCache};
use crate::reply::{garbage_args, success};
use dionfs_core::delegations::{Access, Busy};
use dionfs_core::drc::{hash_args, DrcKey, Lookup};
use dionfs_core::export::{squash, ClientOptions};
use dionfs_core::exports::{Export, Exports};
use dionfs_core::server::Server;
use dionfs_transport::{ConnInfo, Reply};

/// What a handler knows about its call: the server, the exports taken when
/// the call was received, the client, and who the client is after squashing
/// (per export, so worked out per handle).
pub struct Ctx<'a> {
    pub server: &'a Server,
    pub exports: &'a Exports,
    pub conn: &'a ConnInfo,
    pub call: &'a CallHeader,
}

impl<'a> Ctx<'a> {
    /// The export a handle belongs to, if this client may use it. A client
    /// outside the export's client list gets ACCES and a log line; one
    /// calling a `secure` export from an unreserved port gets PERM; one on
    /// a connection its `xprtsec` does not allow gets ACCES.
    pub fn export(&self, fh: &NfsFh3) -> Result<&'a Export, NfsStat3> {
        let id = handle::export_id(fh.as_bytes()).ok_or(NfsStat3::BadHandle)?;
        // An export that is gone (a reload removed it) makes its handles
        // stale, as knfsd's do after `exportfs -r`.
        let export = self.exports.by_id(id).ok_or(NfsStat3::Stale)?;
        crate::admit::admit(self.server, self.conn, export).map_err(|r| match r {
            Refusal::NotAdmitted => NfsStat3::Acces,
            Refusal::InsecurePort => NfsStat3::Perm,
            // knfsd's nfserr_wrongsec, mapped by nfsd3_map_status: not an
            // RPC auth error.
            Refusal::TransportSecurity => NfsStat3::Acces,
        })?;
        Ok(export)
    }

    /// The export and the file a handle names.
    pub fn resolve(&self, fh: &NfsFh3) -> Result<(&'a Export, Node), NfsStat3> {
        let export = self.export(fh)?;
        let node = export.fs.resolve(fh.as_bytes()).map_err(status::from_fs)?;
        Ok((export, node))
    }

    /// Before a call that does `access` to file `fh`: `JUKEBOX` while an
    /// NFSv4 client's delegation of it is recalled (the client tries
    /// again, as knfsd's v3 answers a broken lease); the file held busy,
    /// so that no delegation of it is granted, while the call runs.
    pub fn delegation(&self, fh: &[u8], access: Access) -> Result<Busy, NfsStat3> {
        self.server
            .delegations
            .enter(fh, None, access)
            .map_err(|_| NfsStat3::Jukebox)
    }

    /// [`Ctx::delegation`] for a call that holds nothing busy (a READ):
    /// `JUKEBOX` while a write delegation of `fh` is recalled.
    pub fn delegation_read(&self, fh: &[u8]) -> Result<(), NfsStat3> {
        self.server
            .delegations
            .check(fh, None, Access::Read)
            .map_err(|_| NfsStat3::Jukebox)
    }

    /// [`Ctx::delegation`] for the file `name` in directory `dir` of
    /// `export`, which REMOVE and RENAME change: [`crate::io::enter_named`].
    pub fn delegation_named(
        &self,
        export: &Export,
        dir: &Node,
        name: &[u8],
    ) -> Result<Option<Busy>, NfsStat3> {
        crate::io::enter_named(self.server, export, dir, name, None).map_err(|_| NfsStat3::Jukebox)
    }

    /// The options `export` gives this call's client (its client entry).
    pub fn options(&self, export: &'a Export) -> &'a ClientOptions {
        export.options_for(self.conn)
    }

    /// The identity this call's file-system work runs as on `export`.
    pub fn creds(&self, export: &Export) -> Creds {
        squash(export.options_for(self.conn), &self.call.cred)
    }

    /// Runs `f` with this client's squashed credentials on `export`.
    pub fn as_user<T>(
        &self,
        export: &Export,
        f: impl FnOnce() -> Result<T, FsError>,
    ) -> Result<T, NfsStat3> {
        self.run_as_user(export, f)?.map_err(status::from_fs)
    }

    /// Runs `f` with this client's squashed credentials on `export` and
    /// returns what it returns, for work whose errors are not `FsError`
    /// (the data plane's); the error is a failed credential switch.
    pub fn run_as_user<T>(&self, export: &Export, f: impl FnOnce() -> T) -> Result<T, NfsStat3> {
        crate::io::run_as(self.server, &self.creds(export), f).map_err(status::from_fs)
    }

    /// NFS3ERR_ROFS for a change to an export read-only for this client.
    pub fn writable(&self, export: &Export) -> Result<(), NfsStat3> {
        if export.options_for(self.conn).read_only() {
            Err(NfsStat3::Rofs)
        } else {
            Ok(())
        }
    }
}

/// How an NFSv3 procedure other than WRITE runs (on a blocking thread, or
/// for a READ first as a task): its context, its encoded arguments, and
/// the buffer a READ was given while it was received.
pub type Handler = for<'a, 'b> fn(&'a Ctx<'b>, &'a [u8], Option<PooledBuf>) -> Reply;

/// NFS version 3 (RFC 1813 section 3.3), as knfsd's `nfsd_procedures3`.
///
/// The reply cache keeps what knfsd keeps for the procedures that change
/// names or attributes (`RC_REPLSTAT`, `RC_REPLBUFF`), so that a
/// retransmitted REMOVE that succeeded is not answered NOENT. WRITE is not
/// cached, where knfsd caches it (`RC_REPLBUFF`): a WRITE run twice writes
/// the same bytes at the same offset and answers the same, a cache entry
/// would have to hash up to a megabyte of payload per WRITE to tell a
/// retransmission from a new WRITE with a reused xid (knfsd hashes only
/// the first 256 bytes, and so can answer a new WRITE with an old reply),
/// and the client's COMMIT verifier already catches a WRITE lost to a
/// restart.
pub static PROGRAM: Program<Handler> = Program {
    label: "nfs3",
    title: "NFS v3",
    number: NFS_PROGRAM,
    version: NFS_V3,
    procedures: &PROCEDURES,
};

/// Procedures by number; `proc_` builds each from its [`NfsProc3`] so the
/// argument bound cannot differ from the codec's.
static PROCEDURES: [Option<Procedure<Handler>>; 22] = [
    proc_(
        NfsProc3::Null,
        "NULL",
        ReplyCache::No,
        Io::None,
        |ctx, _, _| success(ctx.call.xid, &Void),
    ),
    proc_(
        NfsProc3::Getattr,
        "GETATTR",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::getattr),
    ),
    proc_(
        NfsProc3::Setattr,
        "SETATTR",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::setattr),
    ),
    proc_(
        NfsProc3::Lookup,
        "LOOKUP",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::lookup),
    ),
    proc_(
        NfsProc3::Access,
        "ACCESS",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::access),
    ),
    proc_(
        NfsProc3::Readlink,
        "READLINK",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::readlink),
    ),
    proc_(
        NfsProc3::Read,
        "READ",
        ReplyCache::No,
        Io::Read { count: read_count },
        |ctx, args, buf| run_to_reply(ctx, args, |ctx, a| data::read(ctx, a, buf)),
    ),
    // Received by `data::receive_write` and run by `data::write`: never
    // dispatched here.
    proc_(
        NfsProc3::Write,
        "WRITE",
        ReplyCache::No,
        Io::Write,
        |ctx, _, _| Reply::status(ctx.call.xid, ReplyStatus::SystemErr),
    ),
    proc_(
        NfsProc3::Create,
        "CREATE",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::create),
    ),
    proc_(
        NfsProc3::Mkdir,
        "MKDIR",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::mkdir),
    ),
    proc_(
        NfsProc3::Symlink,
        "SYMLINK",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::symlink),
    ),
    proc_(
        NfsProc3::Mknod,
        "MKNOD",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::mknod),
    ),
    proc_(
        NfsProc3::Remove,
        "REMOVE",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::remove),
    ),
    proc_(
        NfsProc3::Rmdir,
        "RMDIR",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::rmdir),
    ),
    proc_(
        NfsProc3::Rename,
        "RENAME",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::rename),
    ),
    proc_(
        NfsProc3::Link,
        "LINK",
        ReplyCache::Yes,
        Io::None,
        |ctx, args, _| run(ctx, args, dirs::link),
    ),
    proc_(
        NfsProc3::Readdir,
        "READDIR",
        ReplyCache::No,
        Io::LargeReply {
            count: readdir_count,
        },
        |ctx, args, _| run_to_reply(ctx, args, dirs::readdir),
    ),
    proc_(
        NfsProc3::Readdirplus,
        "READDIRPLUS",
        ReplyCache::No,
        Io::LargeReply {
            count: readdirplus_count,
        },
        |ctx, args, _| run_to_reply(ctx, args, dirs::readdirplus),
    ),
    proc_(
        NfsProc3::Fsstat,
        "FSSTAT",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::fsstat),
    ),
    proc_(
        NfsProc3::Fsinfo,
        "FSINFO",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::fsinfo),
    ),
    proc_(
        NfsProc3::Pathconf,
        "PATHCONF",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, attrs::pathconf),
    ),
    proc_(
        NfsProc3::Commit,
        "COMMIT",
        ReplyCache::No,
        Io::None,
        |ctx, args, _| run(ctx, args, data::commit),
    ),
];

const fn proc_(
    number: NfsProc3,
    name: &'static str,
    cache: ReplyCache,
    io: Io,
    handler: Handler,
) -> Option<Procedure<Handler>> {
    Some(Procedure {
        name,
        args: number.max_args_len(),
        cache,
        io,
        handler,
    })
}

/// A READ's count, read from its encoded arguments without decoding (and
/// copying) the file handle: asked twice per READ before it runs.
fn read_count(args: &[u8]) -> Option<u32> {
    let mut dec = Decoder::new(args);
    dec.opaque_var(NFS3_FHSIZE as u32).ok()?;
    dec.u64().ok()?;
    dec.u32().ok()
}

/// A READDIR's or READDIRPLUS's arguments up to the counts: the directory,
/// the cookie and its verifier, skipped.
fn past_cookie(args: &[u8]) -> Option<Decoder<'_>> {
    let mut dec = Decoder::new(args);
    dec.opaque_var(NFS3_FHSIZE as u32).ok()?;
    dec.u64().ok()?; // cookie
    dec.u64().ok()?; // cookie verifier
    Some(dec)
}

/// A READDIR's `count`.
fn readdir_count(args: &[u8]) -> Option<u32> {
    past_cookie(args)?.u32().ok()
}

/// A READDIRPLUS's `maxcount` (after `dircount`).
fn readdirplus_count(args: &[u8]) -> Option<u32> {
    let mut dec = past_cookie(args)?;
    dec.u32().ok()?; // dircount
    dec.u32().ok()
}

/// Runs one NFSv3 call other than WRITE (blocking). `None` means "send
/// nothing": a retransmission of a call that is still running. A READ comes
/// with the buffer taken for it while it was received.
pub fn call(
    server: &Server,
    exports: &Exports,
    conn: &ConnInfo,
    call: &CallHeader,
    args: &[u8],
    read_buf: Option<PooledBuf>,
) -> Option<Reply> {
    let Some(procedure) = PROGRAM.procedure(call.proc_) else {
        return Some(Reply::status(call.xid, ReplyStatus::ProcUnavail));
    };
    let ctx = Ctx {
        server,
        exports,
        conn,
        call,
    };
    if procedure.cache == ReplyCache::No {
        return Some((procedure.handler)(&ctx, args, read_buf));
    }
    let key = DrcKey {
        xid: call.xid,
        client: conn.peer,
        prog: call.prog,
        vers: call.vers,
        proc_: call.proc_,
        args_hash: hash_args(args),
    };
    match server.drc.begin(key) {
        Lookup::InProgress => None,
        Lookup::Replay(bytes) => Some(Reply::new(bytes.to_vec())),
        Lookup::New => {
            let reply = (procedure.handler)(&ctx, args, None);
            server.drc.complete(key, Arc::new(reply.header.clone()));
            Some(reply)
        }
    }
}

/// Decodes `args` (trailing bytes are tolerated, as knfsd does) and runs
/// the handler, which builds its own reply (READ's data, READDIR's
/// entries); GARBAGE_ARGS when the arguments do not decode.
fn run_to_reply<'a, A: Decode<'a>>(
    ctx: &Ctx,
    args: &'a [u8],
    f: impl FnOnce(&Ctx, A) -> Reply,
) -> Reply {
    match A::decode(&mut Decoder::new(args)) {
        Ok(a) => f(ctx, a),
        Err(_) => garbage_args(ctx.call.xid),
    }
}

/// [`run_to_reply`] for a handler whose result is encoded after the reply
/// header.
fn run<'a, A: Decode<'a>, R: Encode>(
    ctx: &Ctx,
    args: &'a [u8],
    f: impl FnOnce(&Ctx, A) -> R,
) -> Reply {
    run_to_reply(ctx, args, |ctx, a| success(ctx.call.xid, &f(ctx, a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_procedure_order_with_the_codecs_bounds() {
        assert_eq!(PROCEDURES.len(), NfsProc3::ALL.len());
        for &p in NfsProc3::ALL {
            let entry = PROGRAM.procedure(p as u32).unwrap();
            assert_eq!(entry.name, format!("{p:?}").to_uppercase(), "{p:?}");
            assert_eq!(entry.args, p.max_args_len(), "{p:?}");
        }
        assert!(PROGRAM.procedure(22).is_none());
    }

    #[test]
    fn counts_are_read_without_decoding_the_arguments() {
        use dionfs_proto::nfs3::{CookieVerf3, ReadArgs, ReaddirArgs, ReaddirplusArgs};
        use dionfs_xdr::Encode;
        let fh = NfsFh3::new(vec![7; 40]).unwrap();
        let read = ReadArgs {
            file: fh.clone(),
            offset: 9,
            count: 4096,
        };
        assert_eq!(read_count(&read.to_xdr()), Some(4096));
        let readdir = ReaddirArgs {
            dir: fh.clone(),
            cookie: 1,
            cookieverf: CookieVerf3::default(),
            count: 8192,
        };
        assert_eq!(readdir_count(&readdir.to_xdr()), Some(8192));
        let plus = ReaddirplusArgs {
            dir: fh,
            cookie: 1,
            cookieverf: CookieVerf3::default(),
            dircount: 512,
            maxcount: 32768,
        };
        assert_eq!(readdirplus_count(&plus.to_xdr()), Some(32768));
        assert_eq!(read_count(&[0, 0, 0, 200]), None);
    }
}
