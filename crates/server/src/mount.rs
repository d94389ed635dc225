//! MOUNT v3 (RFC 1813 Appendix I): hands out export root handles and keeps
//! the advisory list of who mounted what (DUMP).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Instant;

use dionfs_proto::mount3::{
    DirPath, ExportNode, Exports, MountBody, MountList, MountName, MountProc3, MountRes3,
    MountResOk, MountStat3,
};
use dionfs_proto::nfs3::NfsFh3;
use dionfs_proto::Void;
use dionfs_rpc::message::{AUTH_NONE, AUTH_SYS};
use dionfs_rpc::{CallHeader, ReplyStatus};
use dionfs_xdr::Decode;
use parking_lot::Mutex;
use tracing::warn;

use crate::export::squash;
use crate::log_budget::CLIENT_WARN_EVERY;
use crate::net::{ConnInfo, Reply};
use crate::reply::{garbage_args, success};
use crate::server::{self, Export, Server};
use dionfs_fs::{FileKind, FsError};
use dionfs_sys::cred::with_creds;

/// Who has mounted which export, as clients told us (MNT adds, UMNT
/// removes). Advisory only, like rmtab: it grants nothing.
#[derive(Default)]
pub struct MountTable {
    entries: Mutex<BTreeSet<(IpAddr, Vec<u8>)>>,
}

impl MountTable {
    fn add(&self, client: IpAddr, path: Vec<u8>) {
        self.entries.lock().insert((client, path));
    }

    fn remove(&self, client: IpAddr, path: &[u8]) {
        self.entries.lock().remove(&(client, path.to_vec()));
    }

    fn remove_all(&self, client: IpAddr) {
        self.entries.lock().retain(|(c, _)| *c != client);
    }

    fn list(&self) -> Vec<(IpAddr, Vec<u8>)> {
        self.entries.lock().iter().cloned().collect()
    }
}

/// Runs one MOUNT v3 call against `exports` (those served when it was
/// received).
pub fn call(
    server: &Server,
    exports: &server::Exports,
    conn: &ConnInfo,
    call: &CallHeader,
    args: &[u8],
) -> Reply {
    let xid = call.xid;
    let client = conn.peer.ip();
    let Some(proc_) = MountProc3::from_u32(call.proc_) else {
        return Reply::status(xid, ReplyStatus::ProcUnavail);
    };
    match proc_ {
        MountProc3::Null => success(xid, &Void),
        MountProc3::Mnt => {
            let Ok(path) = DirPath::from_xdr(args) else {
                return garbage_args(xid);
            };
            success(xid, &mnt(server, exports, call, conn, path.0))
        }
        MountProc3::Dump => {
            let list = server
                .mounts
                .list()
                .into_iter()
                .map(|(host, dir)| MountBody {
                    hostname: MountName(host.to_string().into_bytes()),
                    directory: DirPath(dir),
                })
                .collect();
            success(xid, &MountList(list))
        }
        MountProc3::Umnt => {
            let Ok(path) = DirPath::from_xdr(args) else {
                return garbage_args(xid);
            };
            server.mounts.remove(client, &path.0);
            success(xid, &Void)
        }
        MountProc3::Umntall => {
            server.mounts.remove_all(client);
            success(xid, &Void)
        }
        MountProc3::Export => {
            let nodes = exports
                .iter()
                .map(|x| ExportNode {
                    dir: DirPath(x.config.path.as_os_str().as_encoded_bytes().to_vec()),
                    groups: x
                        .config
                        .clients
                        .iter()
                        .map(|c| MountName(c.to_string().into_bytes()))
                        .collect(),
                })
                .collect();
            success(xid, &Exports(nodes))
        }
    }
}

/// The key [`Server::refused_mount_warnings`] files MNT calls for paths
/// that are not exported under (an export whose id is this too would only
/// share their once-per-period warning).
const NOT_EXPORTED: u16 = u16::MAX;

fn mnt(
    server: &Server,
    exports: &server::Exports,
    call: &CallHeader,
    conn: &ConnInfo,
    path: Vec<u8>,
) -> MountRes3 {
    let peer = conn.peer;
    let client = peer.ip();
    // Trailing slashes name the same directory ("/srv/x/" is "/srv/x").
    let mut wanted: &[u8] = &path;
    while wanted.len() > 1 && wanted.ends_with(b"/") {
        wanted = &wanted[..wanted.len() - 1];
    }
    // The export itself, or a directory below it (knfsd allows both; libnfs
    // mounts the directory of the file it is asked for).
    let found = exports.iter().find_map(|x| {
        let root = x.config.path.as_os_str().as_encoded_bytes();
        let rest = wanted.strip_prefix(root)?;
        (rest.is_empty() || rest.starts_with(b"/") || root == b"/").then_some((x, rest))
    });
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
    if !export.config.admits_client(client, conn.names()) {
        if warn_now(export.config.id) {
            warn!(
                client = %client,
                export = %export.config.path.display(),
                repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                "MNT refused: client not in the export's client list"
            );
        }
        return MountRes3::Fail(MountStat3::Acces);
    }
    // `secure`: rpc.mountd refuses MNT from an unreserved port with ACCES
    // ("illegal port"), after the export and the client matched.
    if !server.port_allowed(export, peer, "MNT") {
        return MountRes3::Fail(MountStat3::Acces);
    }
    let handle = match subdirectory(export, call, rest) {
        Ok(fh) => fh,
        Err(status) => return MountRes3::Fail(status),
    };
    let Ok(fhandle) = NfsFh3::new(handle) else {
        return MountRes3::Fail(MountStat3::ServerFault);
    };
    server.mounts.add(client, wanted.to_vec());
    MountRes3::Ok(MountResOk {
        fhandle,
        auth_flavors: vec![AUTH_SYS, AUTH_NONE],
    })
}

/// The handle of `rest` (`/a/b`, or empty for the export root), looked up
/// one name at a time as the caller, never following symlinks.
fn subdirectory(export: &Export, call: &CallHeader, rest: &[u8]) -> Result<Vec<u8>, MountStat3> {
    let mut node = export
        .fs
        .resolve(export.fs.root_handle())
        .map_err(|_| MountStat3::ServerFault)?;
    let creds = squash(&export.config, &call.cred);
    for name in rest.split(|&b| b == b'/').filter(|n| !n.is_empty()) {
        let next = with_creds(&creds, || export.fs.lookup(&node, name))
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
