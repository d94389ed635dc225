//! What the NFSv4 integration tests share: a raw COMPOUND client
//! ([`client`]) and an in-process server on a temporary export.

#![allow(dead_code)]

pub mod client;

use std::net::SocketAddr;
use std::sync::Arc;

use dionfs_core::export::{Config, ExportConfig, NfsVersions, ServerSettings};
use dionfs_core::server::Server;
use dionfs_server::callstats::CallStats;
use dionfs_server::dispatch::{counted_programs, Dispatcher};
use dionfs_server::nfs4::Nfs4;
use dionfs_transport::ConnLimits;

/// A server on a temporary export, listening on a loopback port, wired as
/// `dionfs serve` wires its NFS listener. Stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub server: Arc<Server>,
    pub calls: Arc<CallStats>,
    pub nfs4: Option<Arc<Nfs4>>,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

/// NFSv3, 4.1 and 4.2.
pub fn all_versions() -> NfsVersions {
    NfsVersions {
        v3: true,
        v4_0: true,
        v4_1: true,
        v4_2: true,
    }
}

impl TestServer {
    /// A server of `versions`.
    pub fn start(versions: NfsVersions) -> TestServer {
        Self::start_with(|s| s.versions = versions)
    }

    /// A server of every version, its settings changed by `settings`.
    pub fn start_with(settings: impl FnOnce(&mut ServerSettings)) -> TestServer {
        Self::start_exports(settings, |dir| {
            let export = dir.join("export");
            std::fs::create_dir(&export).unwrap();
            let mut export = ExportConfig::with_defaults(export);
            export.entries[0].options.secure = false;
            vec![export]
        })
    }

    /// A server of every version, its settings changed by `settings`,
    /// serving the exports `exports` makes in the temporary directory it
    /// is given.
    pub fn start_exports(
        settings: impl FnOnce(&mut ServerSettings),
        exports: impl FnOnce(&std::path::Path) -> Vec<ExportConfig>,
    ) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let exports = exports(&dir.path().canonicalize().unwrap());
        let mut server = ServerSettings {
            state_dir: dir.path().join("state"),
            io_uring: false,
            max_in_flight: 4,
            nlm: false,
            versions: all_versions(),
            ..ServerSettings::default()
        };
        settings(&mut server);
        let config = Config { server, exports };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = Arc::new(Server::open(&config).unwrap());
        if let Some(ring) = server.io_ring.clone() {
            // What `serve` does with it: its completions are reaped.
            runtime.spawn(async move { dionfs_sys::uring::drive(ring).await });
        }
        let calls = Arc::new(CallStats::new(counted_programs()));
        let limits = ConnLimits {
            max_record: server.max_args + 8192,
            stall_timeout: config.server.stall_timeout,
            ..ConnLimits::default()
        };
        let settings = &config.server;
        let nfs4 = settings.versions.v4().then(|| {
            let _entered = runtime.enter();
            let (locks, _released) = dionfs_server::locks::Locks::new();
            let nfs4 = Arc::new(
                Nfs4::new(
                    settings,
                    limits.max_record,
                    Arc::new(locks),
                    server.grace.clone(),
                    server.delegations.clone(),
                )
                .unwrap(),
            );
            nfs4.start_laundromat();
            nfs4
        });
        let dispatcher = Arc::new(Dispatcher::new(
            server.clone(),
            calls.clone(),
            settings.versions,
            nfs4.clone(),
        ));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(dionfs_transport::serve(
            listener,
            dispatcher,
            limits,
            std::future::pending::<()>(),
        ));
        TestServer {
            addr,
            server,
            calls,
            nfs4,
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    /// A new connection to it.
    pub fn client(&self) -> client::Client {
        client::Client::connect(self.addr)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A directory `name` under `dir` (mode 0777, so that squashed callers
/// can write in it) exported with the defaults, `insecure`, then `f`.
pub fn export_dir(
    dir: &std::path::Path,
    name: &str,
    f: &dyn Fn(&mut ExportConfig),
) -> ExportConfig {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::create_dir(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut x = ExportConfig::with_defaults(path);
    x.entries[0].options.secure = false;
    f(&mut x);
    x
}

/// The directory of the server's export number `index`.
pub fn path_of(server: &TestServer, index: usize) -> std::path::PathBuf {
    server.server.exports()[index].config.path.clone()
}

/// PUTFH of `fh`.
pub fn putfh(fh: &dionfs_proto::nfs4::NfsFh4) -> dionfs_proto::nfs4::ArgOp {
    dionfs_proto::nfs4::ArgOp::Putfh(dionfs_proto::nfs4::PutfhArgs4 { object: fh.clone() })
}

/// LOOKUP of `name`.
pub fn lookup(name: &[u8]) -> dionfs_proto::nfs4::ArgOp {
    dionfs_proto::nfs4::ArgOp::Lookup(dionfs_proto::nfs4::LookupArgs4 {
        objname: dionfs_proto::nfs4::Component4::from(name.to_vec()),
    })
}

/// PUTROOTFH and a LOOKUP per component of `path`.
pub fn walk(path: &std::path::Path) -> Vec<dionfs_proto::nfs4::ArgOp> {
    let mut ops = vec![dionfs_proto::nfs4::ArgOp::Putrootfh];
    for c in path.components() {
        if let std::path::Component::Normal(name) = c {
            ops.push(lookup(name.as_encoded_bytes()));
        }
    }
    ops
}

/// Each result's op and status, in order.
pub fn statuses(
    res: &client::CompoundRes,
) -> Vec<(dionfs_proto::nfs4::Opnum4, dionfs_proto::nfs4::Nfsstat4)> {
    res.statuses()
        .into_iter()
        .map(|(op, s)| (dionfs_proto::nfs4::Opnum4::from_u32(op).unwrap(), s))
        .collect()
}

/// The last result's op and status.
pub fn last(
    res: &client::CompoundRes,
) -> (dionfs_proto::nfs4::Opnum4, dionfs_proto::nfs4::Nfsstat4) {
    *statuses(res).last().unwrap()
}

/// Asserts that the COMPOUND succeeded, showing every op's status if not.
pub fn ok(res: &client::CompoundRes) {
    assert_eq!(
        res.status,
        dionfs_proto::nfs4::Nfsstat4::Ok,
        "{:?}",
        statuses(res)
    );
}
