//! NFS version 3 (RFC 1813): one function per procedure, grouped by kind in
//! `attrs` (attributes and file systems), `dirs` (names and directories) and
//! `data` (READ, WRITE, COMMIT). The dispatch table is [`call`].
//!
//! Handlers run on a blocking thread as root; the file-system work a client
//! asks for runs under its squashed credentials through [`Ctx::as_user`], so
//! the kernel checks permissions and new files get the right owner.

pub mod attrs;
pub mod convert;
pub mod data;
pub mod dirs;
pub mod io_error_log;
pub mod status;

use std::sync::Arc;

use dionfs_dataplane::PooledBuf;
use dionfs_fs::{handle, FsError, Node};
use dionfs_proto::nfs3::{NfsFh3, NfsProc3, NfsStat3};
use dionfs_proto::Void;
use dionfs_rpc::{CallHeader, ReplyStatus};
use dionfs_sys::cred::{with_creds, Creds};
use dionfs_xdr::{Decode, Decoder, Encode};
use tracing::{error, warn};

use crate::drc::{hash_args, DrcKey, Lookup};
use crate::export::squash;
use crate::log_budget::CLIENT_WARN_EVERY;
use crate::net::{ConnInfo, Reply};
use crate::reply::{garbage_args, success};
use crate::server::{Export, Exports, Server};

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
    /// calling a `secure` export from an unreserved port gets PERM.
    pub fn export(&self, fh: &NfsFh3) -> Result<&'a Export, NfsStat3> {
        let id = handle::export_id(fh.as_bytes()).ok_or(NfsStat3::BadHandle)?;
        // An export that is gone (a reload removed it) makes its handles
        // stale, as knfsd's do after `exportfs -r`.
        let export = self.exports.by_id(id).ok_or(NfsStat3::Stale)?;
        if !export
            .config
            .admits_client(self.conn.peer.ip(), self.conn.names())
        {
            let client = self.conn.peer.ip();
            if self.server.refused_call_warnings.should_warn(
                client,
                export.config.id,
                std::time::Instant::now(),
            ) {
                warn!(
                    client = %client,
                    export = %export.config.path.display(),
                    repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                    "NFS call refused: client not in the export's client list"
                );
            }
            return Err(NfsStat3::Acces);
        }
        // `secure`: knfsd checks the source port in fh_verify once the
        // export is known, and answers PERM (nfsd_setuser_and_check_port).
        if !self.server.port_allowed(export, self.conn.peer, "NFS call") {
            return Err(NfsStat3::Perm);
        }
        Ok(export)
    }

    /// The export and the file a handle names.
    pub fn resolve(&self, fh: &NfsFh3) -> Result<(&'a Export, Node), NfsStat3> {
        let export = self.export(fh)?;
        let node = export.fs.resolve(fh.as_bytes()).map_err(status::from_fs)?;
        Ok((export, node))
    }

    /// The identity this call's file-system work runs as on `export`.
    pub fn creds(&self, export: &Export) -> Creds {
        squash(&export.config, &self.call.cred)
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
        with_creds(&self.creds(export), f).map_err(|e| {
            error!(error = %e, "cannot switch to the client's credentials");
            self.server.note_server_fault();
            NfsStat3::ServerFault
        })
    }

    /// NFS3ERR_ROFS for a change to a read-only export.
    pub fn writable(&self, export: &Export) -> Result<(), NfsStat3> {
        if export.config.read_only() {
            Err(NfsStat3::Rofs)
        } else {
            Ok(())
        }
    }
}

/// Procedures that change state and must not run twice when a client
/// retransmits (knfsd caches the same set, RC_REPLBUFF/RC_REPLSTAT).
fn is_non_idempotent(p: NfsProc3) -> bool {
    matches!(
        p,
        NfsProc3::Setattr
            | NfsProc3::Create
            | NfsProc3::Mkdir
            | NfsProc3::Symlink
            | NfsProc3::Mknod
            | NfsProc3::Remove
            | NfsProc3::Rmdir
            | NfsProc3::Rename
            | NfsProc3::Link
    )
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
    let Some(proc_) = NfsProc3::from_u32(call.proc_) else {
        return Some(Reply::status(call.xid, ReplyStatus::ProcUnavail));
    };
    let ctx = Ctx {
        server,
        exports,
        conn,
        call,
    };
    if !is_non_idempotent(proc_) {
        return Some(dispatch(&ctx, proc_, args, read_buf));
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
            let reply = dispatch(&ctx, proc_, args, None);
            server.drc.complete(key, Arc::new(reply.header.clone()));
            Some(reply)
        }
    }
}

/// The dispatch table.
fn dispatch(ctx: &Ctx, proc_: NfsProc3, args: &[u8], read_buf: Option<PooledBuf>) -> Reply {
    let xid = ctx.call.xid;
    match proc_ {
        NfsProc3::Null => success(xid, &Void),
        NfsProc3::Getattr => run(xid, args, |a| attrs::getattr(ctx, a)),
        NfsProc3::Setattr => run(xid, args, |a| attrs::setattr(ctx, a)),
        NfsProc3::Lookup => run(xid, args, |a| dirs::lookup(ctx, a)),
        NfsProc3::Access => run(xid, args, |a| attrs::access(ctx, a)),
        NfsProc3::Readlink => run(xid, args, |a| attrs::readlink(ctx, a)),
        NfsProc3::Read => {
            decode(args).map_or_else(|| garbage_args(xid), |a| data::read(ctx, a, read_buf))
        }
        // WRITE is received by `data::receive_write` and never reaches here.
        NfsProc3::Write => Reply::status(xid, ReplyStatus::SystemErr),
        NfsProc3::Create => run(xid, args, |a| dirs::create(ctx, a)),
        NfsProc3::Mkdir => run(xid, args, |a| dirs::mkdir(ctx, a)),
        NfsProc3::Symlink => run(xid, args, |a| dirs::symlink(ctx, a)),
        NfsProc3::Mknod => run(xid, args, |a| dirs::mknod(ctx, a)),
        NfsProc3::Remove => run(xid, args, |a| dirs::remove(ctx, a)),
        NfsProc3::Rmdir => run(xid, args, |a| dirs::rmdir(ctx, a)),
        NfsProc3::Rename => run(xid, args, |a| dirs::rename(ctx, a)),
        NfsProc3::Link => run(xid, args, |a| dirs::link(ctx, a)),
        NfsProc3::Readdir => {
            decode(args).map_or_else(|| garbage_args(xid), |a| dirs::readdir(ctx, a))
        }
        NfsProc3::Readdirplus => {
            decode(args).map_or_else(|| garbage_args(xid), |a| dirs::readdirplus(ctx, a))
        }
        NfsProc3::Fsstat => run(xid, args, |a| attrs::fsstat(ctx, a)),
        NfsProc3::Fsinfo => run(xid, args, |a| attrs::fsinfo(ctx, a)),
        NfsProc3::Pathconf => run(xid, args, |a| attrs::pathconf(ctx, a)),
        NfsProc3::Commit => run(xid, args, |a| data::commit(ctx, a)),
    }
}

/// Decodes arguments (trailing bytes are tolerated, as knfsd does).
fn decode<'a, A: Decode<'a>>(args: &'a [u8]) -> Option<A> {
    A::decode(&mut Decoder::new(args)).ok()
}

/// Decodes `args`, runs the handler, encodes its result; GARBAGE_ARGS when
/// the arguments do not decode.
fn run<'a, A: Decode<'a>, R: Encode>(xid: u32, args: &'a [u8], f: impl FnOnce(A) -> R) -> Reply {
    match decode(args) {
        Some(a) => success(xid, &f(a)),
        None => garbage_args(xid),
    }
}
