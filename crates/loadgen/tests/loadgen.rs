//! dionfs-loadgen against an in-process server serving NFSv3 and
//! NFSv4.1 on one port (MOUNT too): what either version writes verifies
//! over the other, wrong bytes exit 3, and the JSON says what ran.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use dionfs_core::export::{Config, ExportConfig, NfsVersions, ServerSettings};
use dionfs_core::server::Server;
use dionfs_server::callstats::CallStats;
use dionfs_server::dispatch::{counted_programs, Dispatcher};
use dionfs_server::nfs4::Nfs4;
use dionfs_transport::{ConnLimits, TlsConfig};

/// A server of NFSv3, 4.1 and 4.2 on a temporary export; stops when
/// dropped.
struct TestServer {
    url: String,
    export: std::path::PathBuf,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl TestServer {
    fn start() -> TestServer {
        Self::start_with(None)
    }

    /// With `tls`, the server answers RPC-with-TLS probes.
    fn start_with(tls: Option<TlsConfig>) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let export = root.join("export");
        std::fs::create_dir(&export).unwrap();
        // root is squashed to nobody, who may write here
        std::fs::set_permissions(&export, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let mut x = ExportConfig::with_defaults(export.clone());
        x.entries[0].options.secure = false;
        let config = Config {
            server: ServerSettings {
                state_dir: root.join("state"),
                io_uring: false,
                nlm: false,
                versions: NfsVersions {
                    v3: true,
                    v4_0: false,
                    v4_1: true,
                    v4_2: true,
                },
                ..ServerSettings::default()
            },
            exports: vec![x],
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = Arc::new(Server::open(&config).unwrap());
        let calls = Arc::new(CallStats::new(counted_programs()));
        let limits = ConnLimits {
            max_record: server.max_args + 8192,
            tls,
            ..ConnLimits::default()
        };
        let settings = &config.server;
        let nfs4 = {
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
        };
        let dispatcher = Arc::new(Dispatcher::new(
            server.clone(),
            calls,
            settings.versions,
            Some(nfs4),
        ));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        runtime.spawn(dionfs_transport::serve(
            listener,
            dispatcher,
            limits,
            std::future::pending::<()>(),
        ));
        TestServer {
            url: format!(
                "nfs://127.0.0.1{}?nfsport={port}&mountport={port}",
                export.display()
            ),
            export,
            runtime: Some(runtime),
            _dir: dir,
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs the load generator with `args`: its exit code and JSON result.
fn loadgen(server: &TestServer, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dionfs-loadgen"))
        .args(["--url", &server.url, "--timeout", "60"])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let code = out.status.code().unwrap_or(-1);
    (code, stdout)
}

/// The number after `"key":` in a JSON line.
fn field(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap();
    rest[..end].parse().unwrap()
}

const IOR: [&str; 10] = [
    "--pattern",
    "strided",
    "--bs",
    "47008",
    "--conns",
    "3",
    "--qd",
    "2",
    "--records",
    "7",
];

#[test]
fn what_v41_writes_verifies_over_v3_and_the_reverse() {
    let server = TestServer::start();
    for (write, read) in [("4.1", "3"), ("3", "4.1")] {
        let (code, json) = loadgen(
            &server,
            &[
                &[
                    "--vers", write, "--file", "/ior", "--op", "write", "--create", "--commit",
                    "--seed", "9",
                ][..],
                &IOR,
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{json}");
        assert_eq!(field(&json, "bytes"), 47008 * 21, "{json}");
        assert!(
            json.contains(&format!("\"nfs_version\":\"{write}\"")),
            "{json}"
        );
        let (code, json) = loadgen(
            &server,
            &[
                &[
                    "--vers", read, "--file", "/ior", "--op", "read", "--shift", "1", "--verify",
                    "--seed", "9",
                ][..],
                &IOR,
            ]
            .concat(),
        );
        assert_eq!(code, 0, "{json}");
        assert_eq!(field(&json, "verified_bytes"), 47008 * 21, "{json}");
        assert_eq!(field(&json, "mismatch_bytes"), 0, "{json}");
    }
    assert_eq!(
        std::fs::metadata(server.export.join("ior")).unwrap().len(),
        47008 * 21
    );
}

#[test]
fn wrong_bytes_exit_3_over_either_version() {
    let server = TestServer::start();
    let seq = [
        "--file",
        "/seq",
        "--pattern",
        "seq",
        "--bs",
        "64k",
        "--file-size",
        "1M",
        "--qd",
        "4",
    ];
    let (code, json) = loadgen(
        &server,
        &[
            &seq[..],
            &[
                "--vers", "4.1", "--op", "write", "--create", "--commit", "--seed", "3",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{json}");
    for vers in ["3", "4.1"] {
        let (code, json) = loadgen(
            &server,
            &[
                &seq[..],
                &["--vers", vers, "--op", "read", "--verify", "--seed", "4"],
            ]
            .concat(),
        );
        assert_eq!(code, 3, "{json}");
        assert!(field(&json, "mismatch_bytes") > 1_000_000, "{json}");
    }
}

#[test]
fn random_reads_and_fixed_overwrites_over_v41() {
    let server = TestServer::start();
    let common = ["--vers", "4.1", "--file", "/f"];
    let (code, json) = loadgen(
        &server,
        &[
            &common[..],
            &[
                "--op",
                "write",
                "--pattern",
                "seq",
                "--bs",
                "1M",
                "--file-size",
                "4M",
                "--qd",
                "2",
                "--create",
                "--commit",
                "--seed",
                "5",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{json}");
    // 16 slots: one per request in flight
    let (code, json) = loadgen(
        &server,
        &[
            &common[..],
            &[
                "--op",
                "read",
                "--pattern",
                "rand",
                "--bs",
                "4k",
                "--file-size",
                "4M",
                "--qd",
                "16",
                "--ops",
                "400",
                "--verify",
                "--seed",
                "5",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(field(&json, "ops"), 400, "{json}");
    assert_eq!(field(&json, "verified_bytes"), 400 * 4096, "{json}");
    let (code, json) = loadgen(
        &server,
        &[
            &common[..],
            &[
                "--op",
                "write",
                "--pattern",
                "fixed",
                "--offset",
                "0",
                "--bs",
                "1k",
                "--qd",
                "1",
                "--ops",
                "50",
                "--verify",
                "--seed",
                "6",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{json}");
    assert_eq!(field(&json, "verified_bytes"), 1024, "{json}");
    assert!(Path::new(&server.export.join("f")).exists());
}

/// A CA and a certificate it signed for 127.0.0.1, as PEM files in `dir`:
/// (ca.pem, cert.pem, key.pem).
fn tls_files(dir: &Path, tag: &str) -> [std::path::PathBuf; 3] {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let files = [
        dir.join(format!("{tag}-ca.pem")),
        dir.join(format!("{tag}-cert.pem")),
        dir.join(format!("{tag}-key.pem")),
    ];
    for (file, text) in files
        .iter()
        .zip([ca.pem(), cert.pem(), key.serialize_pem()])
    {
        std::fs::write(file, text).unwrap();
    }
    files
}

#[test]
fn tls_connections_write_what_plain_ones_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, cert, key] = tls_files(dir.path(), "server");
    let [stranger_ca, _, _] = tls_files(dir.path(), "stranger");
    let tls = TlsConfig::from_pem_files(&cert, &key, None).unwrap();
    let server = TestServer::start_with(Some(tls));
    let ca = ca.to_str().unwrap();
    // Over TLS, both versions; read back over plain v3 (and the reverse),
    // every byte checked.
    for (vers, file) in [("3", "/tls3.dat"), ("4.1", "/tls41.dat")] {
        let (code, out) = loadgen(
            &server,
            &[
                &[
                    "--vers", vers, "--file", file, "--op", "write", "--create", "--commit",
                    "--seed", "5", "--tls-ca", ca,
                ][..],
                &IOR[..],
            ]
            .concat(),
        );
        assert_eq!(code, 0, "write over v{vers} in TLS: {out}");
        let (code, out) = loadgen(
            &server,
            &[
                &[
                    "--vers", "3", "--file", file, "--op", "read", "--verify", "--seed", "5",
                ][..],
                &IOR[..],
            ]
            .concat(),
        );
        assert_eq!(code, 0, "read back over plain v3: {out}");
        assert_eq!(field(&out, "mismatch_bytes"), 0, "{out}");
        assert_eq!(field(&out, "verified_bytes"), 3 * 7 * 47008, "{out}");
    }
    let (code, out) = loadgen(
        &server,
        &[
            &[
                "--vers",
                "4.1",
                "--file",
                "/tls3.dat",
                "--op",
                "read",
                "--verify",
                "--seed",
                "5",
                "--tls-ca",
                ca,
            ][..],
            &IOR[..],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "read over v4.1 in TLS: {out}");
    assert_eq!(field(&out, "verified_bytes"), 3 * 7 * 47008, "{out}");
    // The server's certificate is checked: a CA that did not sign it
    // fails the handshake.
    let (code, out) = loadgen(
        &server,
        &[
            &[
                "--vers",
                "3",
                "--file",
                "/tls3.dat",
                "--op",
                "read",
                "--tls-ca",
                stranger_ca.to_str().unwrap(),
            ][..],
            &IOR[..],
        ]
        .concat(),
    );
    assert_ne!(code, 0, "{out}");
}

#[test]
fn tls_asked_of_a_server_without_it_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let [ca, _, _] = tls_files(dir.path(), "server");
    let server = TestServer::start();
    let out = Command::new(env!("CARGO_BIN_EXE_dionfs-loadgen"))
        .args([
            "--url",
            &server.url,
            "--timeout",
            "60",
            "--vers",
            "3",
            "--file",
            "/x.dat",
        ])
        .args([
            "--op",
            "write",
            "--create",
            "--tls-ca",
            ca.to_str().unwrap(),
        ])
        .args(IOR)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("does not start TLS"), "{said}");
}
