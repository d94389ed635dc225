//! MOUNT v3 (RFC 1813 Appendix I): hands out export root handles and keeps
//! the advisory list of who mounted what (DUMP).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_proto::mount3::{
    DirPath, ExportNode, Exports, MountBody, MountList, MountName, MountProc3, MountRes3,
    MountResOk, MountStat3, MOUNT_PROGRAM, MOUNT_V3,
};
use dionfs_proto::nfs3::NfsFh3;
use dionfs_proto::Void;
use dionfs_rpc::message::{AUTH_NONE, AUTH_SYS};
use dionfs_rpc::{CallHeader, ReplyStatus};
use dionfs_xdr::Decode;
use parking_lot::Mutex;
use tracing::{error, info, warn};

use crate::program::{self, Procedure, Program};
use crate::reply::{garbage_args, success};
use dionfs_core::export::{squash, Client};
use dionfs_core::exports::{self, Export};
use dionfs_core::server::Server;
use dionfs_fs::{FileKind, FsError};
use dionfs_logs::LogEvery;
use dionfs_logs::CLIENT_WARN_EVERY;
use dionfs_sys::cred::{with_creds, Creds};
use dionfs_transport::{ConnInfo, Reply};

/// Who has mounted which export, as clients told us (MNT adds, UMNT
/// removes). Advisory only, like rmtab: it grants nothing. Bounded: past
/// [`MOUNTS_PER_CLIENT`] entries of one client, or [`MOUNTS`] in all, the
/// oldest (of that client, or of all) is forgotten, since a client may
/// mount any number of subdirectories and never unmount them.
#[derive(Default)]
pub struct MountTable {
    inner: Mutex<Mounts>,
}

#[derive(Default)]
struct Mounts {
    /// Each entry with the number of the MNT that added it.
    entries: BTreeMap<(IpAddr, Vec<u8>), u64>,
    added: u64,
}

/// Entries one client address keeps in the mount list.
const MOUNTS_PER_CLIENT: usize = 256;
/// Entries the mount list keeps in all.
const MOUNTS: usize = 4096;

impl MountTable {
    fn add(&self, client: IpAddr, path: Vec<u8>) {
        let mut m = self.inner.lock();
        m.added += 1;
        let added = m.added;
        if let Some(n) = m.entries.get_mut(&(client, path.clone())) {
            *n = added;
            return;
        }
        let oldest = |entries: &BTreeMap<(IpAddr, Vec<u8>), u64>, of_client: bool| {
            entries
                .iter()
                .filter(|((c, _), _)| !of_client || *c == client)
                .min_by_key(|(_, n)| **n)
                .map(|(k, _)| k.clone())
        };
        let of_client = m.entries.keys().filter(|(c, _)| *c == client).count();
        let evict = if of_client >= MOUNTS_PER_CLIENT {
            oldest(&m.entries, true)
        } else if m.entries.len() >= MOUNTS {
            oldest(&m.entries, false)
        } else {
            None
        };
        if let Some(key) = evict {
            m.entries.remove(&key);
        }
        m.entries.insert((client, path), added);
    }

    fn remove(&self, client: IpAddr, path: &[u8]) {
        self.inner.lock().entries.remove(&(client, path.to_vec()));
    }

    fn remove_all(&self, client: IpAddr) {
        self.inner.lock().entries.retain(|(c, _), _| *c != client);
    }

    fn list(&self) -> Vec<(IpAddr, Vec<u8>)> {
        self.inner.lock().entries.keys().cloned().collect()
    }
}

/// The export `path` is in, and the rest of `path` below its root: the
/// export itself, or a directory below it (knfsd allows both; libnfs
/// mounts the directory of the file it is asked for). Trailing slashes
/// name the same directory ("/srv/x/" is "/srv/x").
fn export_of<'a>(
    exports: &'a exports::Exports,
    path: &'a [u8],
) -> Option<(&'a Arc<Export>, &'a [u8])> {
    let mut wanted = path;
    while wanted.len() > 1 && wanted.ends_with(b"/") {
        wanted = &wanted[..wanted.len() - 1];
    }
    exports.iter().find_map(|x| {
        let root = x.config.path.as_os_str().as_encoded_bytes();
        let rest = wanted.strip_prefix(root)?;
        (rest.is_empty() || rest.starts_with(b"/") || root == b"/").then_some((x, rest))
    })
}

/// The directory `rest` names below the export root `root`, as MNT's
/// lookups resolve it (no symlinks are followed): without empty and `.`
/// names, a `..` taking away the name before it (at the root it stays
/// there, as LOOKUP of `..` does). `/srv/x/./a//b/../c` is `/srv/x/a/c`:
/// one entry in the mount list, however the client spells it.
fn canonical(root: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut names: Vec<&[u8]> = Vec::new();
    for name in rest.split(|&b| b == b'/') {
        match name {
            b"" | b"." => {}
            b".." => {
                names.pop();
            }
            name => names.push(name),
        }
    }
    let mut path = root.to_vec();
    for name in names {
        if !path.ends_with(b"/") {
            path.push(b'/');
        }
        path.extend_from_slice(name);
    }
    path
}

/// What a MOUNT handler knows about its call.
pub struct MountCtx<'a> {
    pub server: &'a Server,
    /// Who has mounted what.
    pub mounts: &'a MountTable,
    /// The exports served when the call was received.
    pub exports: &'a exports::Exports,
    pub conn: &'a ConnInfo,
    pub call: &'a CallHeader,
}

/// How a MOUNT procedure runs: its context and its encoded arguments.
pub type Handler = for<'a, 'b> fn(&'a MountCtx<'b>, &'a [u8]) -> Reply;

/// MOUNT version 3 (RFC 1813 Appendix I). Nothing is cached: MNT and
/// UMNT answer the same when retransmitted (MNT hands out the same handle,
/// UMNT of a path no longer listed is no error), and the mount list is
/// advisory.
pub static PROGRAM: Program<Handler> = Program {
    label: "mount3",
    title: "MOUNT v3",
    number: MOUNT_PROGRAM,
    version: MOUNT_V3,
    procedures: &PROCEDURES,
};

static PROCEDURES: [Option<Procedure<Handler>>; 6] = [
    proc_(MountProc3::Null, "NULL", |ctx, _| {
        success(ctx.call.xid, &Void)
    }),
    proc_(MountProc3::Mnt, "MNT", mnt_call),
    proc_(MountProc3::Dump, "DUMP", dump),
    proc_(MountProc3::Umnt, "UMNT", umnt),
    proc_(MountProc3::Umntall, "UMNTALL", umntall),
    proc_(MountProc3::Export, "EXPORT", export_list),
];

const fn proc_(
    number: MountProc3,
    name: &'static str,
    handler: Handler,
) -> Option<Procedure<Handler>> {
    program::small(name, number.max_args_len(), handler)
}

/// Runs one MOUNT v3 call against `exports` (those served when it was
/// received).
pub fn call(
    server: &Server,
    mounts: &MountTable,
    exports: &exports::Exports,
    conn: &ConnInfo,
    call: &CallHeader,
    args: &[u8],
) -> Reply {
    let Some(procedure) = PROGRAM.procedure(call.proc_) else {
        return Reply::status(call.xid, ReplyStatus::ProcUnavail);
    };
    let ctx = MountCtx {
        server,
        mounts,
        exports,
        conn,
        call,
    };
    (procedure.handler)(&ctx, args)
}

fn mnt_call(ctx: &MountCtx, args: &[u8]) -> Reply {
    let Ok(path) = DirPath::from_xdr(args) else {
        return garbage_args(ctx.call.xid);
    };
    let res = mnt(ctx, path.0);
    success(ctx.call.xid, &res)
}

fn dump(ctx: &MountCtx, _args: &[u8]) -> Reply {
    let list = ctx
        .mounts
        .list()
        .into_iter()
        .map(|(host, dir)| MountBody {
            hostname: MountName(host.to_string().into_bytes()),
            directory: DirPath(dir),
        })
        .collect();
    success(ctx.call.xid, &MountList(list))
}

fn umnt(ctx: &MountCtx, args: &[u8]) -> Reply {
    let Ok(path) = DirPath::from_xdr(args) else {
        return garbage_args(ctx.call.xid);
    };
    // As MNT recorded it.
    let entry = match export_of(ctx.exports, &path.0) {
        Some((export, rest)) => canonical(export.config.path.as_os_str().as_encoded_bytes(), rest),
        None => path.0,
    };
    ctx.mounts.remove(ctx.conn.peer.ip(), &entry);
    success(ctx.call.xid, &Void)
}

fn umntall(ctx: &MountCtx, _args: &[u8]) -> Reply {
    ctx.mounts.remove_all(ctx.conn.peer.ip());
    success(ctx.call.xid, &Void)
}

fn export_list(ctx: &MountCtx, _args: &[u8]) -> Reply {
    let nodes = ctx
        .exports
        .iter()
        .map(|x| ExportNode {
            dir: DirPath(x.config.path.as_os_str().as_encoded_bytes().to_vec()),
            groups: x
                .config
                .all_clients()
                .map(|c| MountName(c.to_string().into_bytes()))
                .collect(),
        })
        .collect();
    success(ctx.call.xid, &Exports(nodes))
}

/// The key [`Server::refused_mount_warnings`] files MNT calls for paths
/// that are not exported under (an export whose id is this too would only
/// share their once-per-period warning).
const NOT_EXPORTED: u16 = u16::MAX;

fn mnt(ctx: &MountCtx, path: Vec<u8>) -> MountRes3 {
    let (server, exports, call, conn) = (ctx.server, ctx.exports, ctx.call, ctx.conn);
    let peer = conn.peer;
    let client = peer.ip();
    let found = export_of(exports, &path);
    // Refusals are logged once per client and export (for paths not
    // exported, once per client) every CLIENT_WARN_EVERY.
    let warn_now = |id| {
        server
            .refused_mount_warnings
            .should_warn(client, id, Instant::now())
    };
    let Some((export, rest)) = found else {
        if warn_now(NOT_EXPORTED) {
            warn!(
                client = %client,
                path = %String::from_utf8_lossy(&path),
                repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                "MNT refused: not exported"
            );
        }
        return MountRes3::Fail(MountStat3::NoEnt);
    };
    if !export.config.admits_client(Client::of(conn)) {
        if warn_now(export.config.id) {
            // Certificate entries match only mTLS connections, and a Linux
            // client sends MNT in plaintext whatever its xprtsec.
            let certificates = export.config.all_clients().any(|c| c.is_certificate());
            let hint = if certificates && conn.certificate().is_none() {
                ": its certificate entries (tls-san:, tls-sha256:) match only connections \
                 with a client certificate, and MNT came without one; for NFSv3 list the \
                 client's address too, or mount with NFSv4"
            } else {
                ""
            };
            warn!(
                client = %client,
                export = %export.config.path.display(),
                repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                "MNT refused: client not in the export's client list{hint}"
            );
        }
        return MountRes3::Fail(MountStat3::Acces);
    }
    // `secure`: rpc.mountd refuses MNT from an unreserved port with ACCES
    // ("illegal port"), after the export and the client matched.
    if !server.port_allowed(export, conn, "MNT") {
        return MountRes3::Fail(MountStat3::Acces);
    }
    // `xprtsec` is not MNT's to check, as rpc.mountd does not: a Linux
    // client sends MNT in plaintext even for `xprtsec=tls` (its MOUNT
    // client, `nfs_mount`, is created without transport security), so
    // refusing it would refuse every such NFSv3 mount. The NFS calls on
    // the handle are refused (ACCES) unless they come over a connection
    // the export allows; the log says so.
    let options = export.options_for(conn);
    if !options.xprtsec.admits(conn.security()) {
        info!(
            client = %client,
            export = %export.config.path.display(),
            connection = conn.security().name(),
            xprtsec = %options.xprtsec,
            "MNT answered; the export's NFS calls need a connection its xprtsec allows"
        );
    }
    let creds = squash(options, &call.cred);
    let handle = match subdirectory(export, &creds, rest) {
        Ok(fh) => fh,
        Err(status) => return MountRes3::Fail(status),
    };
    let Ok(fhandle) = NfsFh3::new(handle) else {
        return MountRes3::Fail(MountStat3::ServerFault);
    };
    let root = export.config.path.as_os_str().as_encoded_bytes();
    ctx.mounts.add(client, canonical(root, rest));
    MountRes3::Ok(MountResOk {
        fhandle,
        auth_flavors: vec![AUTH_SYS, AUTH_NONE],
    })
}

/// The handle of `rest` (`/a/b`, or empty for the export root), looked up
/// one name at a time as the caller, never following symlinks.
fn subdirectory(export: &Export, creds: &Creds, rest: &[u8]) -> Result<Vec<u8>, MountStat3> {
    let mut node = export.fs.resolve(export.fs.root_handle()).map_err(|e| {
        // The directory opened at start (or by the reload that added the
        // export) is gone, or replaced by another of the same name.
        static WARNED: LogEvery = LogEvery::new(Duration::from_secs(60));
        if WARNED.due() {
            error!(
                export = %export.config.path.display(),
                error = %e,
                "MNT failed: the export's root directory cannot be opened (removed or \
                 replaced since the server opened it?); a restart serves what is at the path now"
            );
        }
        MountStat3::ServerFault
    })?;
    for name in rest.split(|&b| b == b'/').filter(|n| !n.is_empty()) {
        let next = with_creds(creds, || export.fs.lookup(&node, name))
            .map_err(|_| MountStat3::ServerFault)?;
        node = match next {
            Ok((n, _)) => n,
            Err(FsError::NoEnt) => return Err(MountStat3::NoEnt),
            Err(FsError::Access | FsError::Perm) => return Err(MountStat3::Acces),
            Err(FsError::NotDir) => return Err(MountStat3::NotDir),
            Err(FsError::NameTooLong) => return Err(MountStat3::NameTooLong),
            Err(_) => return Err(MountStat3::Inval),
        };
    }
    if node.kind() != FileKind::Directory {
        return Err(MountStat3::NotDir);
    }
    Ok(node.fh().to_vec())
}
