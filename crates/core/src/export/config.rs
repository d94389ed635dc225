//! Configuration: the TOML file for several exports, and the same structure
//! built from `dionfs serve DIR` flags. Options read like /etc/exports.
//!
//! A bad file fails at start with the file, the line and the reason.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dionfs_dataplane::Mode;
use dionfs_logs::LogFilter;
use serde::Deserialize;
use toml::Spanned;

use super::clients::{Client, ClientMatch};
use super::port::is_reserved;

/// The default and the largest maximum transfer size (rtmax/wtmax).
pub const DEFAULT_MAX_TRANSFER: u32 = 1 << 20;
const MIN_TRANSFER: u32 = 4096;
const MAX_TRANSFER: u32 = 4 << 20;

/// Everything `dionfs serve` runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub server: ServerSettings,
    pub exports: Vec<ExportConfig>,
}

/// Process-wide settings: where to listen and where to keep state.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: IpAddr,
    /// NFS program port; 0 picks a free one.
    pub nfs_port: u16,
    /// MOUNT program port; 0 picks a free one.
    pub mount_port: u16,
    /// Portmapper port; `None` turns the portmapper off.
    pub portmap_port: Option<u16>,
    /// Holds the file-handle key (handles survive restarts with it).
    pub state_dir: PathBuf,
    /// READ/WRITE requests in flight across all connections, per export:
    /// the data plane's buffers, half for READs and half for WRITEs unless
    /// `read_buffers` / `write_buffers` say otherwise.
    pub max_in_flight: usize,
    /// Buffers of each export's read pool, if set (else half of
    /// `max_in_flight`).
    pub read_buffers: Option<usize>,
    /// Buffers of each export's write pool, if set (else the other half).
    pub write_buffers: Option<usize>,
    /// Calls in flight on one connection before it stops reading.
    pub connection_in_flight: usize,
    /// Buffers of each export's two small pools (READs, WRITEs of at most
    /// 64 KiB): small requests in flight at once, all connections.
    pub small_buffers: usize,
    /// READs and WRITEs of one connection holding a buffer at once, if set
    /// (else a quarter of the smaller pool, at least 2).
    pub connection_buffers: Option<usize>,
    /// Connections open at once (NFS, MOUNT and portmap together).
    pub max_connections: usize,
    /// A call whose bytes stop arriving for this long is dropped with its
    /// connection.
    pub stall_timeout: Duration,
    /// A connection whose client reads none of its replies for this long is
    /// closed.
    pub reply_timeout: Duration,
    /// A connection without calls for this long is closed.
    pub idle_timeout: Duration,
    /// How long a connection sending one call at a time that has answered
    /// it looks for its next one before sleeping, while the server is idle
    /// (0: never).
    pub idle_spin: Duration,
    /// While a small direct READ is at an export's device, its large
    /// direct reads start only while less than this many MiB of them are
    /// there (0: no limit).
    pub large_read_depth_mib: u64,
    /// Open files kept in the open-file cache.
    pub open_files: usize,
    /// Serve Prometheus metrics over HTTP on this address, if set.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Direct READs and aligned direct WRITEs through io_uring (where the
    /// kernel allows it); `false` runs every call on blocking threads.
    pub io_uring: bool,
    /// Serve NLM v4 and NSM (locking for clients mounted without
    /// `nolock`).
    pub nlm: bool,
    /// NLM's TCP port (NSM over TCP too); 0 picks a free one, as clients
    /// find it through the port mapper.
    pub nlm_port: u16,
    /// NSM's UDP port (SM_NOTIFY from rebooted clients); 0 picks one.
    pub nsm_port: u16,
    /// After a restart with clients that held locks, how long only
    /// reclaims are granted.
    pub grace_period: Duration,
    /// Where to write the server's process id while it runs (for
    /// `dionfs reload`), if set.
    pub pid_file: Option<PathBuf>,
    /// The NFS versions served.
    pub versions: NfsVersions,
    /// NFSv4.1 lease: how long a client keeps its state without a call.
    pub lease_time: Duration,
    /// Memory for the replies NFSv4.1 sessions keep for retransmissions
    /// (their slots' reply caches), all sessions together, in MiB.
    pub nfs4_reply_cache_mib: u64,
    /// NFSv4 owner strings are `name@` this domain, through the name
    /// service, if set; numeric ids (`"1000"`) if not.
    pub nfs4_id_domain: Option<String>,
    /// NFSv4.1 read and write delegations are granted (`delegations`).
    /// Off by default (docs/nfs4-complete-design.md, section C).
    pub delegations: bool,
    /// Which log lines are written (`log_level`), if set: under
    /// `--log-level` and `DIONFS_LOG`, which win over it.
    pub log_level: Option<LogFilter>,
    /// RPC-with-TLS (RFC 9289, the `[tls]` table): the server's
    /// certificate and key, if clients may switch their connections to
    /// TLS; `None` refuses their probes (they go on in plaintext).
    pub tls: Option<TlsFiles>,
}

/// The files of the `[tls]` table (`--tls-certificate` and its kin).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate, then the chain up to (not always
    /// including) its CA.
    pub certificate: PathBuf,
    /// PEM: the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM: the CAs a client certificate must be signed by, when a client
    /// presents one; without it, client certificates are not asked for.
    pub client_ca: Option<PathBuf>,
    /// A handshake not done in this long closes its connection.
    pub handshake_timeout: Duration,
}

/// How long a TLS handshake may take unless `[tls] handshake_timeout`
/// says otherwise: ample for a client across the world (a TLS 1.3
/// handshake is one round trip and a little computing), short enough that
/// stalled handshakes hold their connections briefly.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsFiles {
    /// Reads and checks the files: TLS 1.3 with ALPN `sunrpc`, the key the
    /// certificate's.
    pub fn load(&self) -> Result<dionfs_transport::TlsConfig, dionfs_transport::TlsSetupError> {
        dionfs_transport::TlsConfig::from_pem_files(
            &self.certificate,
            &self.key,
            self.client_ca.as_deref(),
        )
    }
}

/// Which NFS versions (and NFSv4 minor versions) are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfsVersions {
    /// NFSv3 (with MOUNT).
    pub v3: bool,
    /// NFSv4.0 (minor version 0: SETCLIENTID, owner seqids, no
    /// sessions).
    pub v4_0: bool,
    /// NFSv4.1.
    pub v4_1: bool,
    /// NFSv4.2.
    pub v4_2: bool,
}

impl NfsVersions {
    /// The versions a `versions` list names ("3", "4.0", "4.1", "4.2"), or why
    /// it names none or something else.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<NfsVersions, String> {
        let mut v = NfsVersions {
            v3: false,
            v4_0: false,
            v4_1: false,
            v4_2: false,
        };
        for name in names {
            match name {
                "3" => v.v3 = true,
                "4" | "4.0" => v.v4_0 = true,
                "4.1" => v.v4_1 = true,
                "4.2" => v.v4_2 = true,
                _ => {
                    return Err(format!(
                        "versions: `{name}` is not one of \"3\", \"4.0\", \"4.1\", \"4.2\""
                    ))
                }
            }
        }
        if !v.v3 && !v.v4() {
            return Err("versions: the list is empty; nothing would be served".into());
        }
        Ok(v)
    }

    /// Whether some minor version of NFSv4 is served.
    pub fn v4(&self) -> bool {
        self.v4_0 || self.v4_1 || self.v4_2
    }
}

impl Default for NfsVersions {
    /// NFSv3, 4.0, 4.1 and 4.2, as knfsd serves them: a Linux client's
    /// plain `mount server:/export` then gets 4.2, and one asking for
    /// `vers=3`, `vers=4.0` or `vers=4.1` gets what it asks for.
    fn default() -> Self {
        NfsVersions {
            v3: true,
            v4_0: true,
            v4_1: true,
            v4_2: true,
        }
    }
}

/// The default NFSv4.1 lease, as knfsd's.
pub const DEFAULT_LEASE_TIME: Duration = Duration::from_secs(90);
/// The shortest and longest `lease_time` accepted, in seconds.
pub const LEASE_TIME_SECS: std::ops::RangeInclusive<u64> = 10..=3600;

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            listen: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            nfs_port: 2049,
            mount_port: 20048,
            portmap_port: Some(111),
            state_dir: PathBuf::from("/var/lib/dionfs"),
            max_in_flight: 64,
            read_buffers: None,
            write_buffers: None,
            connection_in_flight: 64,
            small_buffers: 128,
            connection_buffers: None,
            max_connections: 4096,
            stall_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(30),
            // As knfsd, which closes idle connections after 6 minutes.
            idle_timeout: Duration::from_secs(360),
            idle_spin: dionfs_transport::DEFAULT_IDLE_SPIN,
            large_read_depth_mib: dionfs_dataplane::LARGE_READ_DEPTH >> 20,
            open_files: 1024,
            metrics_listen: None,
            io_uring: true,
            nlm: true,
            nlm_port: 0,
            nsm_port: 0,
            // As knfsd's lockd (nlm_grace_period follows the 90 s lease).
            grace_period: Duration::from_secs(90),
            pid_file: None,
            versions: NfsVersions::default(),
            lease_time: DEFAULT_LEASE_TIME,
            // As knfsd's slot memory (nfsd_drc_max_mem is 1/128 of RAM,
            // a few tens of MiB on a small server).
            nfs4_reply_cache_mib: 64,
            // As knfsd for AUTH_SYS (`nfs4_disable_idmapping`).
            nfs4_id_domain: None,
            delegations: false,
            log_level: None,
            tls: None,
        }
    }
}

impl ServerSettings {
    /// Buffers of each export's read pool.
    pub fn read_buffers(&self) -> usize {
        self.read_buffers
            .unwrap_or(self.max_in_flight.div_ceil(2))
            .max(1)
    }

    /// Buffers of each export's write pool.
    pub fn write_buffers(&self) -> usize {
        self.write_buffers.unwrap_or(self.max_in_flight / 2).max(1)
    }

    /// READs and WRITEs one connection may have holding a buffer at once:
    /// a fair share, so that one connection (busy, or not reading its
    /// replies) never holds a whole pool.
    pub fn connection_buffers(&self) -> usize {
        self.connection_buffers
            .unwrap_or_else(|| (self.read_buffers().min(self.write_buffers()) / 4).max(2))
    }
}

/// How client credentials are mapped (exports(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Squash {
    /// uid/gid 0 become the anonymous ids; everyone else is themselves.
    RootSquash,
    /// Everyone becomes the anonymous ids.
    AllSquash,
    /// Nobody is mapped (root is root).
    NoRootSquash,
}

/// Read-write or read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    Rw,
    Ro,
}

/// When changes are durable (exports(5) `sync` / `async`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Metadata changes (CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
    /// RENAME, LINK, SETATTR) are on stable storage before the reply, as
    /// RFC 1813 requires.
    Sync,
    /// Replies may come before the change is durable: a crash or power
    /// loss can lose changes clients were told had been made. Faster, and
    /// unsafe. (Unlike knfsd's `async`, WRITE and COMMIT keep their
    /// RFC 1813 guarantees.)
    Async,
}

/// Per-block checksums of an export's files (DESIGN.md, "Integrity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Integrity {
    /// None (the default).
    Off,
    /// A CRC32C of every 4 KiB block, computed on every WRITE and verified
    /// on every READ.
    Crc32c,
}

// In the config's own words (`squash = "root_squash"`), for log lines.
impl fmt::Display for Squash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Squash::RootSquash => "root_squash",
            Squash::AllSquash => "all_squash",
            Squash::NoRootSquash => "no_root_squash",
        })
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Rw => "rw",
            Access::Ro => "ro",
        })
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        })
    }
}

impl fmt::Display for Integrity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Integrity::Off => "off",
            Integrity::Crc32c => "crc32c",
        })
    }
}

/// The `xprtsec` export option (knfsd's, `exports(5)`): the transport
/// securities a client may use the export over, any one of them
/// (`["none", "tls", "mtls"]`, the default, is every connection). As
/// knfsd's `check_xprtsec_policy`, each connection is exactly one of
/// them: `["tls"]` refuses a client that presented a verified
/// certificate, `["none"]` refuses TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Xprtsec(u8);

impl Xprtsec {
    /// Plain TCP or UDP (`none`).
    pub const NONE: Xprtsec = Xprtsec(1);
    /// TLS without a client certificate (`tls`).
    pub const TLS: Xprtsec = Xprtsec(2);
    /// TLS with a client certificate that verified against `[tls]
    /// client_ca` (`mtls`).
    pub const MTLS: Xprtsec = Xprtsec(4);
    /// Every connection: the default.
    pub const ALL: Xprtsec = Xprtsec(7);

    const WORDS: [(&'static str, Xprtsec); 3] = [
        ("none", Xprtsec::NONE),
        ("tls", Xprtsec::TLS),
        ("mtls", Xprtsec::MTLS),
    ];

    /// The set of `words` (`none`, `tls`, `mtls`); an unknown word or
    /// none at all is an error saying so.
    pub fn parse<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Xprtsec, String> {
        let mut set = 0;
        for word in words {
            let Some((_, mode)) = Self::WORDS.iter().find(|(w, _)| *w == word) else {
                return Err(format!(
                    "xprtsec: `{word}` is not a transport security; say \"none\" (plain \
                     TCP/UDP), \"tls\" or \"mtls\" (TLS with a client certificate)"
                ));
            };
            set |= mode.0;
        }
        if set == 0 {
            return Err(
                "xprtsec: the list is empty; no client could use this export (leave the key \
                 out for every transport)"
                    .into(),
            );
        }
        Ok(Xprtsec(set))
    }

    /// The modes of both.
    pub fn union(self, other: Xprtsec) -> Xprtsec {
        Xprtsec(self.0 | other.0)
    }

    /// Whether it has every mode of `other`.
    pub fn contains(self, other: Xprtsec) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether a connection of `security` may use the export.
    pub fn admits(self, security: dionfs_transport::TransportSecurity) -> bool {
        use dionfs_transport::TransportSecurity as T;
        let mode = match security {
            T::Plain => Xprtsec::NONE,
            T::Tls => Xprtsec::TLS,
            T::Mtls => Xprtsec::MTLS,
        };
        self.contains(mode)
    }

    /// The bits, for comparing (a reload's changed options).
    pub fn bits(self) -> u8 {
        self.0
    }
}

// In the config's words: `tls:mtls` as exports(5) writes it.
impl fmt::Display for Xprtsec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<&str> = Self::WORDS
            .iter()
            .filter(|(_, m)| self.contains(*m))
            .map(|(w, _)| *w)
            .collect();
        f.write_str(&words.join(":"))
    }
}

/// What one client entry of an export gives the clients it matches:
/// the exports(5) options that are about who calls, not about the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    pub access: Access,
    pub squash: Squash,
    pub anonuid: u32,
    pub anongid: u32,
    /// `secure` (exports(5), the default): NFS calls and MNT only from a
    /// reserved source port (below 1024); `false` is `insecure`.
    pub secure: bool,
    /// The connections NFS calls may come over (`xprtsec`).
    pub xprtsec: Xprtsec,
}

impl ClientOptions {
    /// What `dionfs serve DIR` gives its clients: read-write,
    /// root_squash, anonymous ids 65534, secure.
    pub const DEFAULT: ClientOptions = ClientOptions {
        access: Access::Rw,
        squash: Squash::RootSquash,
        anonuid: 65534,
        anongid: 65534,
        secure: true,
        xprtsec: Xprtsec::ALL,
    };

    /// What a call gets from an export whose client list does not match
    /// it. Every caller refuses such a call first; this is only what a
    /// lookup without a match answers, and it allows nothing.
    pub const NOBODY: ClientOptions = ClientOptions {
        access: Access::Ro,
        squash: Squash::AllSquash,
        anonuid: 65534,
        anongid: 65534,
        secure: true,
        xprtsec: Xprtsec::ALL,
    };

    pub fn read_only(&self) -> bool {
        self.access == Access::Ro
    }

    /// Whether a client calling from source port `port` may use the
    /// export: any port if it is `insecure`, else only a reserved one (see
    /// [`super::port`]).
    pub fn admits_port(&self, port: u16) -> bool {
        !self.secure || is_reserved(port)
    }
}

/// One client entry of an export: the clients it matches and the options
/// they get. An export has one (its `clients` and options) or several
/// (`[[export.client]]`), as an /etc/exports line has one
/// `client(options)` per client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientEntry {
    pub clients: Vec<ClientMatch>,
    pub options: ClientOptions,
}

/// One exported directory and its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportConfig {
    /// Stable id carried in file handles; derived from the path unless set.
    pub id: u16,
    /// Canonical absolute path; also the path clients mount.
    pub path: PathBuf,
    /// Who may use it, and with which options: a caller gets the entry
    /// that matches it best ([`ExportConfig::options_for`]).
    pub entries: Vec<ClientEntry>,
    pub max_transfer: u32,
    pub read_mode: Mode,
    pub write_mode: Mode,
    pub durability: Durability,
    /// Whether MKNOD may create character and block devices.
    pub allow_devices: bool,
    /// Block checksums (`integrity = "crc32c"`).
    pub integrity: Integrity,
}

impl ExportConfig {
    /// An export of `path` with the defaults of `dionfs serve DIR`:
    /// read-write, root_squash, loopback clients only, direct I/O, sync.
    pub fn with_defaults(path: PathBuf) -> Self {
        ExportConfig {
            id: export_id_for(&path),
            path,
            entries: vec![ClientEntry {
                clients: ClientMatch::loopback(),
                options: ClientOptions::DEFAULT,
            }],
            max_transfer: DEFAULT_MAX_TRANSFER,
            read_mode: Mode::Direct,
            write_mode: Mode::Direct,
            durability: Durability::Sync,
            allow_devices: false,
            integrity: Integrity::Off,
        }
    }

    /// The options of the entry that matches `client` best, or `None` if
    /// none does. As rpc.mountd picks among the entries of one path
    /// (`lookup_export` in nfs-utils, by client type): a single host (a
    /// name or one address) first, then a network, then a wildcard, then
    /// everyone (`*`, a `/0` network); among entries of the same kind, the
    /// first in the config. Before them all, an entry naming the client's
    /// certificate.
    pub fn options_for(&self, client: Client<'_>) -> Option<&ClientOptions> {
        self.entries
            .iter()
            .filter_map(|e| {
                let best = e
                    .clients
                    .iter()
                    .filter(|c| c.matches_client(client))
                    .map(ClientMatch::precedence)
                    .min()?;
                Some((best, &e.options))
            })
            // `min_by_key` keeps the first of equal keys: config order.
            .min_by_key(|&(precedence, _)| precedence)
            .map(|(_, options)| options)
    }

    /// Whether a client at `addr`, known by its address alone, may use
    /// this export.
    pub fn admits(&self, addr: IpAddr) -> bool {
        self.options_for(Client::at(addr)).is_some()
    }

    /// Whether `client` may use this export (its names match host and
    /// wildcard entries, its certificate certificate entries).
    pub fn admits_client(&self, client: Client<'_>) -> bool {
        self.options_for(client).is_some()
    }

    /// Every client of every entry, in the config's order.
    pub fn all_clients(&self) -> impl Iterator<Item = &ClientMatch> {
        self.entries.iter().flat_map(|e| &e.clients)
    }

    /// Whether the client list names hosts or wildcards.
    pub fn needs_names(&self) -> bool {
        self.all_clients().any(ClientMatch::needs_name)
    }
}

/// The id of an export whose config gives none: a hash of its path, so it
/// stays the same across restarts and reorderings of the config file.
pub fn export_id_for(path: &Path) -> u16 {
    let h = blake3::hash(path.as_os_str().as_encoded_bytes());
    let b = h.as_bytes();
    u16::from_be_bytes([b[0], b[1]])
}

/// A configuration that cannot be used: where and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no single line.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        } else {
            write!(f, "{}: {}", self.file.display(), self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    server: Option<RawServer>,
    #[serde(default, rename = "export")]
    exports: Vec<Spanned<RawExport>>,
    tls: Option<RawTls>,
}

/// The `[tls]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    certificate: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
    /// Seconds (fractions allowed).
    handshake_timeout: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<Spanned<String>>,
    nfs_port: Option<u16>,
    mount_port: Option<u16>,
    /// 0 picks a free port; `false` turns the portmapper off.
    portmap_port: Option<Spanned<toml::Value>>,
    state_dir: Option<PathBuf>,
    max_in_flight: Option<Spanned<usize>>,
    read_buffers: Option<Spanned<usize>>,
    write_buffers: Option<Spanned<usize>>,
    connection_in_flight: Option<Spanned<usize>>,
    small_buffers: Option<Spanned<usize>>,
    connection_buffers: Option<Spanned<usize>>,
    max_connections: Option<Spanned<usize>>,
    /// Seconds (fractions allowed).
    stall_timeout: Option<Spanned<f64>>,
    reply_timeout: Option<Spanned<f64>>,
    idle_timeout: Option<Spanned<f64>>,
    /// Microseconds.
    idle_spin_us: Option<Spanned<u64>>,
    large_read_depth_mib: Option<Spanned<u64>>,
    open_files: Option<Spanned<usize>>,
    metrics_listen: Option<Spanned<String>>,
    io_uring: Option<bool>,
    nlm: Option<bool>,
    nlm_port: Option<u16>,
    nsm_port: Option<u16>,
    /// Seconds; 0 turns the grace period off.
    grace_period: Option<Spanned<f64>>,
    pid_file: Option<PathBuf>,
    /// "3", "4.0", "4.1", "4.2".
    versions: Option<Spanned<Vec<String>>>,
    /// Seconds.
    lease_time: Option<Spanned<u64>>,
    nfs4_reply_cache_mib: Option<Spanned<u64>>,
    nfs4_id_domain: Option<Spanned<String>>,
    delegations: Option<bool>,
    /// A level word (`info`, `warning`, `debug`...), then `MODULE=LEVEL`s.
    log_level: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExport {
    path: Spanned<String>,
    id: Option<u16>,
    clients: Option<Vec<Spanned<String>>>,
    access: Option<Access>,
    squash: Option<Squash>,
    anonuid: Option<u32>,
    anongid: Option<u32>,
    max_transfer: Option<Spanned<u32>>,
    read_mode: Option<Mode>,
    write_mode: Option<Mode>,
    durability: Option<Durability>,
    allow_devices: Option<bool>,
    secure: Option<bool>,
    xprtsec: Option<Spanned<Vec<String>>>,
    integrity: Option<Integrity>,
    /// exports(5) options ("rw,sync,no_root_squash"): exports(5)'s
    /// defaults first (read-only), then these, then the keys above.
    options: Option<Spanned<String>>,
    /// `[[export.client]]`: client entries, each with its own options.
    #[serde(default)]
    client: Vec<Spanned<RawClient>>,
}

/// One `[[export.client]]` entry. The keys about the data (and the
/// export's identity) are read only to be refused with a reason: they are
/// the path's, the same for every client.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClient {
    /// A client, or a list of them (as `clients`).
    #[serde(rename = "match")]
    matches: Option<Spanned<toml::Value>>,
    access: Option<Access>,
    squash: Option<Squash>,
    anonuid: Option<u32>,
    anongid: Option<u32>,
    secure: Option<bool>,
    xprtsec: Option<Spanned<Vec<String>>>,
    options: Option<Spanned<String>>,
    path: Option<Spanned<toml::Value>>,
    id: Option<Spanned<toml::Value>>,
    clients: Option<Spanned<toml::Value>>,
    max_transfer: Option<Spanned<toml::Value>>,
    read_mode: Option<Spanned<toml::Value>>,
    write_mode: Option<Spanned<toml::Value>>,
    durability: Option<Spanned<toml::Value>>,
    allow_devices: Option<Spanned<toml::Value>>,
    integrity: Option<Spanned<toml::Value>>,
}

/// Checks the anonymous ids of a set of client options.
fn check_anon_ids(o: &ClientOptions) -> Result<(), String> {
    if o.anonuid == u32::MAX || o.anongid == u32::MAX {
        // As knfsd refuses it: the calls mapped to it would fail.
        return Err(
            "anonuid/anongid 4294967295 (-1) is no user or group on Linux; \
                    give an id (default 65534)"
                .into(),
        );
    }
    Ok(())
}

/// The client entry `raw` of the export `x`, starting from the export's
/// own client options `own`; an error is where it is and why.
fn client_entry(
    x: &ExportConfig,
    own: ClientOptions,
    raw: Spanned<RawClient>,
) -> Result<ClientEntry, (Range<usize>, String)> {
    let span = raw.span();
    let c = raw.into_inner();
    if let Some(v) = &c.clients {
        return Err((
            v.span(),
            "clients: in [[export.client]], `match` names the clients".into(),
        ));
    }
    for (key, value) in [
        ("path", &c.path),
        ("id", &c.id),
        ("max_transfer", &c.max_transfer),
        ("read_mode", &c.read_mode),
        ("write_mode", &c.write_mode),
        ("durability", &c.durability),
        ("allow_devices", &c.allow_devices),
        ("integrity", &c.integrity),
    ] {
        if let Some(v) = value {
            return Err((
                v.span(),
                format!(
                    "{key} is the export's, the same for all its clients, not one client \
                     entry's; set it in the [[export]] of {}",
                    x.path.display()
                ),
            ));
        }
    }
    let Some(matches) = c.matches else {
        return Err((
            span,
            "[[export.client]] without `match`: say which clients it is for \
             (\"10.0.0.0/8\", [\"host1\", \"host2\"], \"*\" for everyone)"
                .into(),
        ));
    };
    let words: Vec<&str> = match matches.get_ref() {
        toml::Value::String(s) => vec![s.as_str()],
        toml::Value::Array(list) => list
            .iter()
            .map(toml::Value::as_str)
            .collect::<Option<_>>()
            .ok_or_else(|| {
                (
                    matches.span(),
                    "match: a client or a list of clients, as strings".to_string(),
                )
            })?,
        _ => {
            return Err((
                matches.span(),
                "match: a client or a list of clients, as strings".into(),
            ))
        }
    };
    if words.is_empty() {
        return Err((
            matches.span(),
            "match: the list is empty; this entry would match nobody".into(),
        ));
    }
    let mut clients = Vec::new();
    for w in words {
        // exports(5)'s `*` is every client, named or not.
        if w == "*" {
            clients.extend(everyone());
            continue;
        }
        clients.push(
            w.parse::<ClientMatch>()
                .map_err(|r| (matches.span(), format!("match: {r}")))?,
        );
    }
    let mut options = own;
    if let Some(text) = &c.options {
        // The export's data options may be said again, the same; a
        // different one would be one client's, which they cannot be.
        let mut path_level = x.clone();
        super::exports5::exports5_defaults(&mut options);
        super::exports5::apply_options(&mut path_level, &mut options, text.get_ref())
            .map_err(|r| (text.span(), format!("options: {r}")))?;
        if path_level.durability != x.durability {
            return Err((
                text.span(),
                format!(
                    "options: `{}` is the export's, the same for all its clients; \
                     set durability = \"{}\" in the [[export]] of {}",
                    path_level.durability,
                    path_level.durability,
                    x.path.display()
                ),
            ));
        }
        if path_level.id != x.id {
            return Err((
                text.span(),
                format!(
                    "options: fsid is the export's, the same for all its clients; \
                     set id = {} in the [[export]] of {}",
                    path_level.id,
                    x.path.display()
                ),
            ));
        }
    }
    options.access = c.access.unwrap_or(options.access);
    options.squash = c.squash.unwrap_or(options.squash);
    options.anonuid = c.anonuid.unwrap_or(options.anonuid);
    options.anongid = c.anongid.unwrap_or(options.anongid);
    options.secure = c.secure.unwrap_or(options.secure);
    if let Some(v) = &c.xprtsec {
        options.xprtsec =
            Xprtsec::parse(v.get_ref().iter().map(String::as_str)).map_err(|r| (v.span(), r))?;
    }
    check_anon_ids(&options).map_err(|r| (span, r))?;
    Ok(ClientEntry { clients, options })
}

/// Every client, IPv4 and IPv6, named or not: exports(5)'s `*`.
pub fn everyone() -> Vec<ClientMatch> {
    vec![
        ClientMatch::Net {
            net: IpAddr::from([0, 0, 0, 0]),
            prefix: 0,
        },
        ClientMatch::Net {
            net: IpAddr::from([0u16; 8]),
            prefix: 0,
        },
    ]
}

/// `metrics_listen`: ADDR:PORT, or "" or "off" for no metrics listener
/// (as without the key).
fn parse_metrics_listen(text: &str) -> Result<Option<std::net::SocketAddr>, String> {
    match text {
        "" | "off" => Ok(None),
        _ => text
            .parse()
            .map(Some)
            .map_err(|_| format!("metrics_listen: `{text}` is not ADDR:PORT, \"\" or \"off\"")),
    }
}

/// The `[server] metrics_listen` of the config `file`, read without the
/// rest: the operator tools find the server by it in a config that may
/// export nothing yet (the package's /etc/dionfs.toml, until edited).
pub fn metrics_listen_of(file: &Path) -> Result<Option<std::net::SocketAddr>, ConfigError> {
    let error = |line: usize, reason: String| ConfigError {
        file: file.to_path_buf(),
        line,
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| error(0, format!("cannot read: {e}")))?;
    let raw: RawFile = toml::from_str(&text).map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(&text, s.start));
        error(line, e.message().to_string())
    })?;
    match raw.server.and_then(|s| s.metrics_listen) {
        None => Ok(None),
        Some(m) => {
            parse_metrics_listen(m.get_ref()).map_err(|r| error(line_of(&text, m.span().start), r))
        }
    }
}

impl Config {
    /// Reads and checks a TOML config file.
    pub fn from_file(file: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_path_buf(),
            line: 0,
            reason: format!("cannot read: {e}"),
        })?;
        Config::from_toml(file, &text)
    }

    /// Parses and checks config text; `file` is only used in errors.
    pub fn from_toml(file: &Path, text: &str) -> Result<Config, ConfigError> {
        // The reason names the offending line's text, so "expected u16"
        // comes with the key it is about.
        let err = |span: Option<Range<usize>>, reason: String| {
            let line = span.map_or(0, |s| line_of(text, s.start));
            let reason = match text.lines().nth(line.wrapping_sub(1)).map(str::trim) {
                Some(l) if !l.is_empty() => format!("{reason} (in `{l}`)"),
                _ => reason,
            };
            ConfigError {
                file: file.to_path_buf(),
                line,
                reason,
            }
        };
        let raw: RawFile =
            toml::from_str(text).map_err(|e| err(e.span(), e.message().to_string()))?;

        let mut server = ServerSettings::default();
        if let Some(s) = raw.server {
            if let Some(l) = s.listen {
                server.listen = l.get_ref().parse().map_err(|_| {
                    err(
                        Some(l.span()),
                        format!("listen: `{}` is not an IP address", l.get_ref()),
                    )
                })?;
            }
            server.nfs_port = s.nfs_port.unwrap_or(server.nfs_port);
            server.mount_port = s.mount_port.unwrap_or(server.mount_port);
            if let Some(p) = s.portmap_port {
                server.portmap_port = match p.get_ref() {
                    toml::Value::Boolean(false) => None,
                    toml::Value::Integer(n) => Some(u16::try_from(*n).map_err(|_| {
                        err(Some(p.span()), format!("portmap_port: {n} is not a port"))
                    })?),
                    _ => {
                        return Err(err(
                            Some(p.span()),
                            "portmap_port: a port number, or false to turn it off".into(),
                        ))
                    }
                };
            }
            if let Some(d) = s.state_dir {
                server.state_dir = d;
            }
            if let Some(on) = s.io_uring {
                server.io_uring = on;
            }
            server.nlm = s.nlm.unwrap_or(server.nlm);
            server.nlm_port = s.nlm_port.unwrap_or(server.nlm_port);
            server.nsm_port = s.nsm_port.unwrap_or(server.nsm_port);
            if let Some(g) = s.grace_period {
                let secs = *g.get_ref();
                if !(0.0..=3600.0).contains(&secs) {
                    return Err(err(
                        Some(g.span()),
                        format!("grace_period: {secs} must be between 0 and 3600 seconds"),
                    ));
                }
                server.grace_period = Duration::from_secs_f64(secs);
            }
            if s.pid_file.is_some() {
                server.pid_file = s.pid_file;
            }
            if let Some(v) = s.versions {
                server.versions = NfsVersions::parse(v.get_ref().iter().map(String::as_str))
                    .map_err(|r| err(Some(v.span()), r))?;
            }
            if let Some(v) = s.lease_time {
                server.lease_time =
                    check_lease_time(*v.get_ref()).map_err(|r| err(Some(v.span()), r))?;
            }
            if let Some(on) = s.delegations {
                server.delegations = on;
            }
            if let Some(v) = s.nfs4_reply_cache_mib {
                server.nfs4_reply_cache_mib =
                    check_reply_cache(*v.get_ref()).map_err(|r| err(Some(v.span()), r))?;
            }
            if let Some(d) = s.nfs4_id_domain {
                let domain = check_id_domain(d.get_ref()).map_err(|r| err(Some(d.span()), r))?;
                server.nfs4_id_domain = Some(domain);
            }
            if let Some(l) = s.log_level {
                server.log_level = Some(
                    LogFilter::parse(l.get_ref())
                        .map_err(|r| err(Some(l.span()), format!("log_level: {r}")))?,
                );
            }
            for (value, name, target) in [
                (s.max_in_flight, "max_in_flight", &mut server.max_in_flight),
                (
                    s.connection_in_flight,
                    "connection_in_flight",
                    &mut server.connection_in_flight,
                ),
                (s.open_files, "open_files", &mut server.open_files),
                (s.small_buffers, "small_buffers", &mut server.small_buffers),
                (
                    s.max_connections,
                    "max_connections",
                    &mut server.max_connections,
                ),
            ] {
                if let Some(v) = value {
                    if *v.get_ref() == 0 {
                        return Err(err(Some(v.span()), format!("{name} must be at least 1")));
                    }
                    *target = *v.get_ref();
                }
            }
            for (value, name, target) in [
                (s.read_buffers, "read_buffers", &mut server.read_buffers),
                (s.write_buffers, "write_buffers", &mut server.write_buffers),
                (
                    s.connection_buffers,
                    "connection_buffers",
                    &mut server.connection_buffers,
                ),
            ] {
                if let Some(v) = value {
                    if *v.get_ref() == 0 {
                        return Err(err(Some(v.span()), format!("{name} must be at least 1")));
                    }
                    *target = Some(*v.get_ref());
                }
            }
            for (value, name, target) in [
                (s.stall_timeout, "stall_timeout", &mut server.stall_timeout),
                (s.reply_timeout, "reply_timeout", &mut server.reply_timeout),
                (s.idle_timeout, "idle_timeout", &mut server.idle_timeout),
            ] {
                if let Some(v) = value {
                    *target =
                        check_timeout(name, *v.get_ref()).map_err(|r| err(Some(v.span()), r))?;
                }
            }
            if let Some(v) = s.idle_spin_us {
                server.idle_spin =
                    check_idle_spin(*v.get_ref()).map_err(|r| err(Some(v.span()), r))?;
            }
            if let Some(v) = s.large_read_depth_mib {
                server.large_read_depth_mib =
                    check_large_read_depth(*v.get_ref()).map_err(|r| err(Some(v.span()), r))?;
            }
            if let Some(m) = s.metrics_listen {
                server.metrics_listen =
                    parse_metrics_listen(m.get_ref()).map_err(|r| err(Some(m.span()), r))?;
            }
        }

        if let Some(t) = raw.tls {
            let handshake_timeout = match t.handshake_timeout {
                Some(v) => check_timeout("handshake_timeout", *v.get_ref())
                    .map_err(|r| err(Some(v.span()), r))?,
                None => DEFAULT_HANDSHAKE_TIMEOUT,
            };
            server.tls = Some(TlsFiles {
                certificate: t.certificate,
                key: t.key,
                client_ca: t.client_ca,
                handshake_timeout,
            });
        }

        let mut exports = Vec::new();
        for e in raw.exports {
            let span = e.span();
            let e = e.into_inner();
            let path = canonical_export_dir(e.path.get_ref())
                .map_err(|reason| err(Some(e.path.span()), reason))?;
            let mut x = ExportConfig::with_defaults(path);
            // The options of the export's own clients, and the defaults of
            // its `[[export.client]]` entries.
            let mut own = ClientOptions::DEFAULT;
            if let Some(options) = &e.options {
                super::exports5::exports5_defaults(&mut own);
                let notes = super::exports5::apply_options(&mut x, &mut own, options.get_ref())
                    .map_err(|r| err(Some(options.span()), format!("options: {r}")))?;
                for note in notes {
                    tracing::info!(export = %x.path.display(), "options: {note}");
                }
            }
            if let Some(id) = e.id {
                x.id = id;
            }
            own.access = e.access.unwrap_or(own.access);
            own.squash = e.squash.unwrap_or(own.squash);
            own.anonuid = e.anonuid.unwrap_or(own.anonuid);
            own.anongid = e.anongid.unwrap_or(own.anongid);
            own.secure = e.secure.unwrap_or(own.secure);
            if let Some(v) = &e.xprtsec {
                own.xprtsec = Xprtsec::parse(v.get_ref().iter().map(String::as_str))
                    .map_err(|r| err(Some(v.span()), r))?;
            }
            check_anon_ids(&own).map_err(|r| err(Some(span.clone()), r))?;
            if let Some(m) = e.max_transfer {
                x.max_transfer =
                    check_max_transfer(*m.get_ref()).map_err(|r| err(Some(m.span()), r))?;
            }
            x.read_mode = e.read_mode.unwrap_or(x.read_mode);
            x.write_mode = e.write_mode.unwrap_or(x.write_mode);
            x.durability = e.durability.unwrap_or(x.durability);
            x.allow_devices = e.allow_devices.unwrap_or(false);
            x.integrity = e.integrity.unwrap_or(x.integrity);
            if e.client.is_empty() {
                let mut clients = ClientMatch::loopback();
                if let Some(list) = e.clients {
                    if list.is_empty() {
                        return Err(err(
                            Some(span),
                            "clients: the list is empty; nobody could mount this export".into(),
                        ));
                    }
                    clients = list
                        .iter()
                        .map(|c| {
                            c.get_ref()
                                .parse()
                                .map_err(|r| err(Some(c.span()), format!("clients: {r}")))
                        })
                        .collect::<Result<_, _>>()?;
                }
                x.entries = vec![ClientEntry {
                    clients,
                    options: own,
                }];
            } else {
                if let Some(list) = e.clients {
                    return Err(err(
                        list.first().map(Spanned::span).or(Some(span)),
                        "clients: this export has [[export.client]] entries; name the \
                         clients in their `match` instead"
                            .into(),
                    ));
                }
                x.entries = e
                    .client
                    .into_iter()
                    .map(|c| client_entry(&x, own, c).map_err(|(s, r)| err(Some(s), r)))
                    .collect::<Result<_, _>>()?;
            }
            exports.push((span, x));
        }
        if exports.is_empty() {
            return Err(err(None, "no [[export]] sections: nothing to serve".into()));
        }
        let mut paths = HashSet::new();
        let mut ids = HashSet::new();
        for (span, x) in &exports {
            if !paths.insert(x.path.clone()) {
                return Err(err(
                    Some(span.clone()),
                    format!("{} is exported twice", x.path.display()),
                ));
            }
            if !ids.insert(x.id) {
                return Err(err(
                    Some(span.clone()),
                    format!("export id {} of {} is used by another export; give one of them an explicit `id`", x.id, x.path.display()),
                ));
            }
        }
        Ok(Config {
            server,
            exports: exports.into_iter().map(|(_, x)| x).collect(),
        })
    }
}

impl Config {
    /// Checks each export's `xprtsec` and certificate entries against the
    /// `[tls]` the server runs with (the file's, or the `--tls-*` flags'):
    /// an export that only TLS clients may use needs `[tls]`, and one
    /// whose only TLS is `mtls` needs `[tls] client_ca` (without it no
    /// client presents a certificate, so none could use it); so does a
    /// client entry naming a certificate (`tls-san:`, `tls-sha256:`), and
    /// its `xprtsec` must allow `mtls`, the only connection it can match.
    /// Run once the flags are applied, at start and by every reload.
    pub fn check_xprtsec(&self) -> Result<(), String> {
        let tls = self.server.tls.as_ref();
        for x in &self.exports {
            for entry in &x.entries {
                let modes = entry.options.xprtsec;
                if let Some(named) = entry.clients.iter().find(|c| c.is_certificate()) {
                    if tls.is_none_or(|t| t.client_ca.is_none()) {
                        return Err(format!(
                            "export {}: client `{named}` names a client certificate, and \
                             certificates are asked for only with client_ca in the [tls] \
                             table (--tls-client-ca)",
                            x.path.display()
                        ));
                    }
                    if !modes.contains(Xprtsec::MTLS) {
                        return Err(format!(
                            "export {}: client `{named}` matches only connections with a \
                             client certificate (mtls), which its xprtsec (\"{}\") refuses; \
                             add \"mtls\"",
                            x.path.display(),
                            modes.to_string().replace(':', "\", \"")
                        ));
                    }
                }
                if !modes.contains(Xprtsec::NONE) && tls.is_none() {
                    return Err(format!(
                        "export {}: xprtsec = [\"{}\"] needs RPC-with-TLS: add a [tls] table \
                         (certificate, key; or --tls-certificate and --tls-key), or allow \
                         \"none\"",
                        x.path.display(),
                        modes.to_string().replace(':', "\", \"")
                    ));
                }
                if modes.contains(Xprtsec::MTLS)
                    && !modes.contains(Xprtsec::TLS)
                    && tls.is_none_or(|t| t.client_ca.is_none())
                {
                    return Err(format!(
                        "export {}: xprtsec \"mtls\" needs client certificates verified: set \
                         client_ca in the [tls] table (--tls-client-ca)",
                        x.path.display()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Checks a max transfer size: a multiple of 4 KiB within 4 KiB..=4 MiB.
pub fn check_max_transfer(v: u32) -> Result<u32, String> {
    if !(MIN_TRANSFER..=MAX_TRANSFER).contains(&v) || !v.is_multiple_of(4096) {
        return Err(format!(
            "max_transfer: {v} must be a multiple of 4096 between {MIN_TRANSFER} and {MAX_TRANSFER}"
        ));
    }
    Ok(v)
}

/// Checks a timeout in seconds: positive and at most a day (a longer one is
/// a typo, and would never fire in practice).
pub fn check_timeout(name: &str, secs: f64) -> Result<Duration, String> {
    if !(0.001..=86_400.0).contains(&secs) {
        return Err(format!(
            "{name}: {secs} must be a number of seconds between 0.001 and 86400"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Longest `idle_spin_us`: past this a spin costs more CPU than the
/// wake-up it saves, and other connections' calls that arrive during a
/// spin may wait for its end (`net/spin.rs`).
pub const MAX_IDLE_SPIN_US: u64 = 1_000;

/// Checks `idle_spin_us`: 0 (off) up to [`MAX_IDLE_SPIN_US`].
pub fn check_idle_spin(us: u64) -> Result<Duration, String> {
    if us > MAX_IDLE_SPIN_US {
        return Err(format!(
            "idle_spin_us: {us} must be between 0 (off) and {MAX_IDLE_SPIN_US} microseconds"
        ));
    }
    Ok(Duration::from_micros(us))
}

/// Largest `large_read_depth_mib` other than 0 (no limit): far more than a
/// device holds at once.
pub const MAX_LARGE_READ_DEPTH_MIB: u64 = 1024;

/// Checks `large_read_depth_mib`: 0 (no limit) up to
/// [`MAX_LARGE_READ_DEPTH_MIB`].
pub fn check_large_read_depth(mib: u64) -> Result<u64, String> {
    if mib > MAX_LARGE_READ_DEPTH_MIB {
        return Err(format!(
            "large_read_depth_mib: {mib} must be between 0 (no limit) and {MAX_LARGE_READ_DEPTH_MIB}"
        ));
    }
    Ok(mib)
}

/// Checks `lease_time` in seconds: within [`LEASE_TIME_SECS`] (knfsd's
/// bounds are the same order: a lease under 10 s is renewed more often
/// than a busy client can, one over an hour keeps a dead client's state
/// for that long).
pub fn check_lease_time(secs: u64) -> Result<Duration, String> {
    if !LEASE_TIME_SECS.contains(&secs) {
        return Err(format!(
            "lease_time: {secs} must be between {} and {} seconds",
            LEASE_TIME_SECS.start(),
            LEASE_TIME_SECS.end()
        ));
    }
    Ok(Duration::from_secs(secs))
}

/// Largest `nfs4_reply_cache_mib`.
pub const MAX_REPLY_CACHE_MIB: u64 = 64 * 1024;

/// Checks `nfs4_reply_cache_mib`: at least 1 MiB (every session needs a
/// slot), at most [`MAX_REPLY_CACHE_MIB`].
pub fn check_reply_cache(mib: u64) -> Result<u64, String> {
    if !(1..=MAX_REPLY_CACHE_MIB).contains(&mib) {
        return Err(format!(
            "nfs4_reply_cache_mib: {mib} must be between 1 and {MAX_REPLY_CACHE_MIB}"
        ));
    }
    Ok(mib)
}

/// Checks `nfs4_id_domain`: the text after the `@` of an owner string, so
/// neither empty nor holding an `@` or white space.
pub fn check_id_domain(domain: &str) -> Result<String, String> {
    if domain.is_empty() {
        return Err("nfs4_id_domain: empty; leave it out for numeric owners".into());
    }
    if domain.contains('@') || domain.chars().any(char::is_whitespace) {
        return Err(format!(
            "nfs4_id_domain: `{domain}` must be a domain name (\"example.org\") \
             without `@` or white space"
        ));
    }
    Ok(domain.to_owned())
}

/// Resolves an export path: absolute, existing, a directory; symlinks in it
/// are resolved once here so clients mount the real path.
pub fn canonical_export_dir(path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(format!("path `{path}` must be absolute"));
    }
    let c = std::fs::canonicalize(p).map_err(|e| format!("path `{path}`: {e}"))?;
    if !c.is_dir() {
        return Err(format!("path `{path}` is not a directory"));
    }
    Ok(c)
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(Path::new("test.toml"), text)
    }

    #[test]
    fn tls_table_names_its_files() {
        let c = parse(
            "[tls]\ncertificate = \"/etc/c.pem\"\nkey = \"/etc/k.pem\"\n\
             [[export]]\npath = \"/tmp\"\n",
        )
        .unwrap();
        assert_eq!(
            c.server.tls,
            Some(TlsFiles {
                certificate: "/etc/c.pem".into(),
                key: "/etc/k.pem".into(),
                client_ca: None,
                handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            })
        );
        let c = parse(
            "[tls]\ncertificate = \"c\"\nkey = \"k\"\nhandshake_timeout = 0.5\n\
             [[export]]\npath = \"/tmp\"\n",
        )
        .unwrap();
        assert_eq!(
            c.server.tls.unwrap().handshake_timeout,
            Duration::from_millis(500)
        );
        let e =
            parse("[tls]\ncertificate = \"c\"\nkey = \"k\"\nhandshake_timeout = 0\n").unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.reason.contains("handshake_timeout"), "{e}");
        let c = parse(
            "[tls]\ncertificate = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n\
             [[export]]\npath = \"/tmp\"\n",
        )
        .unwrap();
        assert_eq!(c.server.tls.unwrap().client_ca, Some("ca".into()));
        assert_eq!(
            parse("[[export]]\npath = \"/tmp\"\n").unwrap().server.tls,
            None
        );
        // Both files, and nothing else.
        let e = parse("[tls]\ncertificate = \"c\"\n[[export]]\npath = \"/tmp\"\n").unwrap_err();
        assert!(e.reason.contains("key"), "{e}");
        let e = parse("[tls]\ncertificate = \"c\"\nkey = \"k\"\nkeys = 1\n").unwrap_err();
        assert!(e.reason.contains("unknown field"), "{e}");
    }

    #[test]
    fn metrics_listen_off_or_empty_is_no_listener() {
        // Read alone, from configs that export nothing yet.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        let read = |value: &str| {
            std::fs::write(&file, format!("[server]\n\nmetrics_listen = {value}\n")).unwrap();
            metrics_listen_of(&file)
        };
        assert_eq!(read("\"\"").unwrap(), None);
        assert_eq!(read("\"off\"").unwrap(), None);
        assert_eq!(
            read("\"127.0.0.1:9100\"").unwrap(),
            Some("127.0.0.1:9100".parse().unwrap())
        );
        assert_eq!(read("\"on\"").unwrap_err().line, 3);
        // The same words in a whole config.
        let text = format!(
            "[server]\nmetrics_listen = \"off\"\n[[export]]\npath = \"{}\"\n",
            dir.path().display()
        );
        assert_eq!(parse(&text).unwrap().server.metrics_listen, None);
    }

    #[test]
    fn full_file_parses() {
        let c = parse(
            r#"
[server]
listen = "127.0.0.1"
nfs_port = 0
portmap_port = false

[[export]]
path = "/tmp"
clients = ["127.0.0.1", "10.0.0.0/8"]
access = "ro"
squash = "all_squash"
anonuid = 1000
anongid = 1000
max_transfer = 65536
read_mode = "buffered"
write_mode = "dontcache"
integrity = "crc32c"
secure = false
durability = "async"
"#,
        )
        .unwrap();
        assert_eq!(c.server.nfs_port, 0);
        assert_eq!(c.server.portmap_port, None);
        let x = &c.exports[0];
        assert_eq!(x.path, std::fs::canonicalize("/tmp").unwrap());
        let o = &x.entries[0].options;
        assert!(o.read_only());
        assert_eq!(o.squash, Squash::AllSquash);
        assert_eq!((o.anonuid, o.anongid, x.max_transfer), (1000, 1000, 65536));
        assert_eq!(x.read_mode, Mode::Buffered);
        assert_eq!(x.integrity, Integrity::Crc32c);
        assert_eq!(x.write_mode, Mode::DontCache);
        assert_eq!(x.durability, Durability::Async);
        assert!(x.admits("10.9.9.9".parse().unwrap()));
        assert!(!x.admits("192.168.1.1".parse().unwrap()));
        assert!(!o.secure);
        assert!(o.admits_port(40000));
    }

    #[test]
    fn settings_are_shown_in_the_words_the_config_reads() {
        let c = parse(
            "[[export]]\npath = \"/tmp\"\nsquash = \"no_root_squash\"\naccess = \"ro\"\n\
             durability = \"async\"\nintegrity = \"crc32c\"\nread_mode = \"dontcache\"\n",
        )
        .unwrap();
        let x = &c.exports[0];
        let o = &x.entries[0].options;
        let shown = format!(
            "{} {} {} {} {}",
            o.squash, o.access, x.durability, x.integrity, x.read_mode
        );
        assert_eq!(shown, "no_root_squash ro async crc32c dontcache");
    }

    #[test]
    fn log_level_takes_level_words_and_refuses_others_with_the_line() {
        let with = |level: &str| {
            parse(&format!(
                "[server]\nlog_level = \"{level}\"\n\n[[export]]\npath = \"/tmp\"\n"
            ))
        };
        let c = with("warning,dionfs_transport=verbose").unwrap();
        let level = c.server.log_level.unwrap();
        assert_eq!(level.directives(), "warn,dionfs_transport=debug");
        let e = with("loud").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(
            e.reason.contains("log_level: `loud` is not a log level"),
            "{e}"
        );
        let none = parse("[[export]]\npath = \"/tmp\"\n").unwrap();
        assert_eq!(none.server.log_level, None);
    }

    #[test]
    fn fairness_settings_parse_and_default() {
        let c = parse(
            r#"
[server]
max_in_flight = 64
write_buffers = 8
connection_buffers = 3
max_connections = 10
io_uring = false
pid_file = "/run/dionfs-test.pid"
stall_timeout = 0.5
reply_timeout = 7
idle_timeout = 60
idle_spin_us = 0
large_read_depth_mib = 0

[[export]]
path = "/tmp"
"#,
        )
        .unwrap();
        let s = &c.server;
        assert_eq!((s.read_buffers(), s.write_buffers()), (32, 8));
        assert_eq!(s.connection_buffers(), 3);
        assert_eq!(s.max_connections, 10);
        assert!(!s.io_uring);
        assert!(ServerSettings::default().io_uring);
        assert_eq!(s.pid_file, Some(PathBuf::from("/run/dionfs-test.pid")));
        assert_eq!(ServerSettings::default().pid_file, None);
        assert_eq!(s.stall_timeout, Duration::from_millis(500));
        assert_eq!(s.reply_timeout, Duration::from_secs(7));
        assert_eq!(s.idle_timeout, Duration::from_secs(60));
        assert_eq!(s.idle_spin, Duration::ZERO);
        assert_eq!(s.large_read_depth_mib, 0);
        assert_eq!(s.nfs4_id_domain, None, "numeric owners by default");

        let d = ServerSettings::default();
        assert_eq!((d.read_buffers(), d.write_buffers()), (32, 32));
        assert_eq!(d.connection_buffers(), 8);
        let small = ServerSettings {
            max_in_flight: 3,
            ..ServerSettings::default()
        };
        assert_eq!((small.read_buffers(), small.write_buffers()), (2, 1));
        assert_eq!(small.connection_buffers(), 2);
        assert_eq!(d.stall_timeout, Duration::from_secs(5));

        let e = parse("[server]\nstall_timeout = 0\n[[export]]\npath = \"/tmp\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.reason.contains("stall_timeout"), "{e}");
        let e = parse("[server]\nidle_spin_us = 2000\n[[export]]\npath = \"/tmp\"\n").unwrap_err();
        assert!(e.reason.contains("idle_spin_us"), "{e}");
        assert_eq!(d.idle_spin, Duration::from_micros(100));
        assert_eq!(d.large_read_depth_mib, 4);
        let e = parse("[server]\nlarge_read_depth_mib = 2048\n[[export]]\npath = \"/tmp\"\n")
            .unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        assert!(e.reason.contains("large_read_depth_mib"), "{e}");
        let e = parse("[server]\nmax_connections = 0\n[[export]]\npath = \"/tmp\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn nfs4_settings_parse_default_and_refuse_what_is_not_served() {
        let d = ServerSettings::default();
        assert_eq!(d.versions, NfsVersions::default());
        assert!(d.versions.v3 && d.versions.v4_1 && d.versions.v4_2);
        assert_eq!(d.lease_time, Duration::from_secs(90));
        assert_eq!(d.nfs4_reply_cache_mib, 64);
        let c = parse(
            r#"
[server]
versions = ["3", "4.1"]
lease_time = 15
nfs4_reply_cache_mib = 8

[[export]]
path = "/tmp"
"#,
        )
        .unwrap();
        let s = &c.server;
        assert_eq!(
            s.versions,
            NfsVersions {
                v3: true,
                v4_0: false,
                v4_1: true,
                v4_2: false
            }
        );
        assert_eq!(s.lease_time, Duration::from_secs(15));
        assert_eq!(s.nfs4_reply_cache_mib, 8);
        let only41 = parse("[server]\nversions = [\"4.1\"]\n[[export]]\npath = \"/tmp\"\n");
        let v = only41.unwrap().server.versions;
        assert!(!v.v3 && v.v4_1 && !v.v4_2 && v.v4());
        for (text, word) in [
            ("versions = []", "empty"),
            ("versions = [\"2\"]", "`2`"),
            ("lease_time = 9", "lease_time"),
            ("lease_time = 3601", "lease_time"),
            ("nfs4_reply_cache_mib = 0", "nfs4_reply_cache_mib"),
        ] {
            let e = parse(&format!("[server]\n{text}\n[[export]]\npath = \"/tmp\"\n")).unwrap_err();
            assert_eq!(e.line, 2, "{e}");
            assert!(e.reason.contains(word), "{text}: {e}");
        }
    }

    #[test]
    fn nfs4_id_domain_parses_and_bad_ones_are_refused() {
        let c = parse("[server]\nnfs4_id_domain = \"example.org\"\n[[export]]\npath = \"/tmp\"\n")
            .unwrap();
        assert_eq!(c.server.nfs4_id_domain.as_deref(), Some("example.org"));
        for bad in ["", "a@example.org", "example org", "example.org\\n", "\\t"] {
            let text =
                format!("[server]\nnfs4_id_domain = \"{bad}\"\n[[export]]\npath = \"/tmp\"\n");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, 2, "{bad:?}: {e}");
            assert!(e.reason.contains("nfs4_id_domain"), "{bad:?}: {e}");
        }
        let e = parse("[server]\nnfs4_id_domain = 7\n[[export]]\npath = \"/tmp\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn errors_name_the_line_and_reason() {
        let e = parse("[[export]]\npath = \"/tmp\"\nclients = [\"10.0.0.0/40\"]\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("prefix"), "{e}");
        assert!(e.to_string().starts_with("test.toml:3: "), "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\nsquash = \"some_squash\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");

        let e = parse("[[export]]\npath = \"/nonexistent/dir\"\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\nrw = true\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("rw"), "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\ndurability = \"asap\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("sync"), "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\nmax_transfer = 1000\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\nsecure = \"no\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("secure"), "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\n[[export]]\npath = \"/tmp/\"\n").unwrap_err();
        assert!(e.reason.contains("twice"), "{e}");

        let e = parse("[server]\nlisten = \"0.0.0.0\"\n").unwrap_err();
        assert!(e.reason.contains("no [[export]]"), "{e}");

        let e = parse("[[export]]\npath = \"relative\"\n").unwrap_err();
        assert!(e.reason.contains("absolute"), "{e}");

        let e = parse("[[export]]\npath = \"/tmp\"\nanonuid = 4294967295\n").unwrap_err();
        assert!(e.reason.contains("no user"), "{e}");
        let e =
            parse("[[export]]\npath = \"/tmp\"\noptions = \"anongid=4294967295\"\n").unwrap_err();
        assert!(e.reason.contains("no user"), "{e}");
    }

    #[test]
    fn client_entries_give_each_its_options() {
        let c = parse(
            r#"
[[export]]
path = "/tmp"
anonuid = 1000
read_mode = "buffered"

[[export.client]]
match = "10.1.2.3"
access = "rw"
squash = "no_root_squash"
secure = false

[[export.client]]
match = ["10.0.0.0/8", "fd00::/8"]
options = "rw,all_squash"

[[export.client]]
match = "*"
"#,
        )
        .unwrap();
        let x = &c.exports[0];
        assert_eq!(x.entries.len(), 3);
        assert_eq!(x.read_mode, Mode::Buffered);
        let of = |a: &str| *x.options_for(Client::at(a.parse().unwrap())).unwrap();
        let host = of("10.1.2.3");
        assert_eq!(
            (host.access, host.squash, host.secure, host.anonuid),
            (Access::Rw, Squash::NoRootSquash, false, 1000)
        );
        // `options` starts from exports(5)'s defaults, over the export's.
        let net = of("fd12::1");
        assert_eq!(
            (net.access, net.squash, net.secure, net.anonuid),
            (Access::Rw, Squash::AllSquash, true, 1000)
        );
        // Without `options` or keys, the export's own: `dionfs serve`'s
        // defaults here, with its anonuid.
        let anyone = of("192.168.1.1");
        assert_eq!(
            anyone,
            ClientOptions {
                anonuid: 1000,
                ..ClientOptions::DEFAULT
            }
        );
        assert!(x.admits("8.8.8.8".parse().unwrap()), "`*` is everyone");
        // Today's form is one entry.
        let one =
            parse("[[export]]\npath = \"/tmp\"\nclients = [\"10.0.0.0/8\"]\naccess = \"ro\"\n")
                .unwrap();
        assert_eq!(one.exports[0].entries.len(), 1);
        assert!(one.exports[0].entries[0].options.read_only());
    }

    #[test]
    fn the_most_specific_matching_entry_wins_as_in_mountd() {
        let c = parse(
            r#"
[[export]]
path = "/tmp"

[[export.client]]
match = "*"
access = "ro"
anonuid = 1

[[export.client]]
match = "*.example.com"
anonuid = 2

[[export.client]]
match = "10.0.0.0/8"
anonuid = 3

[[export.client]]
match = "10.0.0.0/16"
anonuid = 4

[[export.client]]
match = ["192.168.0.0/16", "10.0.0.7"]
anonuid = 5

[[export.client]]
match = "build1.example.com"
anonuid = 6
"#,
        )
        .unwrap();
        let x = &c.exports[0];
        let anonuid = |ip: &str, names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            x.options_for(Client {
                ip: ip.parse().unwrap(),
                names: &names,
                certificate: None,
            })
            .map(|o| o.anonuid)
        };
        // A single host over the network it lies in, though listed later
        // and in an entry that also names a network.
        assert_eq!(anonuid("10.0.0.7", &[]), Some(5));
        // A network over a wildcard and everyone; of two networks, the
        // first listed (as mountd: by kind, then in order).
        assert_eq!(anonuid("10.0.9.9", &["x.example.com"]), Some(3));
        // A host name over a wildcard.
        assert_eq!(anonuid("172.16.0.1", &["build1.example.com"]), Some(6));
        // A wildcard over everyone.
        assert_eq!(anonuid("172.16.0.1", &["build2.example.com"]), Some(2));
        // Everyone, last.
        assert_eq!(anonuid("172.16.0.1", &[]), Some(1));
        assert_eq!(anonuid("::ffff:10.0.0.7", &[]), Some(5));

        // Nobody else, when no entry is for everyone.
        let c = parse(
            "[[export]]\npath = \"/tmp\"\n[[export.client]]\nmatch = \"10.0.0.1\"\n\
             [[export.client]]\nmatch = \"10.0.0.2\"\naccess = \"ro\"\n",
        )
        .unwrap();
        let x = &c.exports[0];
        assert!(x
            .options_for(Client::at("10.0.0.3".parse().unwrap()))
            .is_none());
        assert!(!x.admits("10.0.0.3".parse().unwrap()));
        assert!(x
            .options_for(Client::at("10.0.0.2".parse().unwrap()))
            .unwrap()
            .read_only());
    }

    #[test]
    fn xprtsec_parses_per_export_and_per_client_entry() {
        let tls = "[tls]\ncertificate = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n";
        let c = parse(&format!(
            "{tls}[[export]]\npath = \"/tmp\"\nxprtsec = [\"tls\", \"mtls\"]\n\
             [[export.client]]\nmatch = \"10.0.0.0/8\"\n\
             [[export.client]]\nmatch = \"10.0.0.1\"\nxprtsec = [\"mtls\"]\n\
             [[export.client]]\nmatch = \"*\"\nxprtsec = [\"none\"]\n"
        ))
        .unwrap();
        c.check_xprtsec().unwrap();
        let x = &c.exports[0];
        let of = |a: &str| {
            x.options_for(Client::at(a.parse().unwrap()))
                .unwrap()
                .xprtsec
        };
        // The export's own value is its entries' default.
        assert_eq!(of("10.2.3.4"), Xprtsec::parse(["tls", "mtls"]).unwrap());
        assert_eq!(of("10.0.0.1"), Xprtsec::MTLS);
        assert_eq!(of("192.168.1.1"), Xprtsec::NONE);
        // Left out: every transport, as knfsd's default.
        let c = parse("[[export]]\npath = \"/tmp\"\n").unwrap();
        assert_eq!(c.exports[0].entries[0].options.xprtsec, Xprtsec::ALL);
        c.check_xprtsec().unwrap();
        // exports(5)'s words, and back.
        let c = parse("[[export]]\npath = \"/tmp\"\noptions = \"rw,xprtsec=tls:mtls\"\n").unwrap();
        let o = c.exports[0].entries[0].options;
        assert_eq!(o.xprtsec, Xprtsec::TLS.union(Xprtsec::MTLS));
        assert!(
            super::super::exports5::options_of(&c.exports[0], &o).contains(",xprtsec=tls:mtls,")
        );
    }

    #[test]
    fn xprtsec_admits_each_connection_as_knfsd_does() {
        use dionfs_transport::TransportSecurity as T;
        let all = [T::Plain, T::Tls, T::Mtls];
        let admitted = |words: &[&str]| -> Vec<T> {
            let modes = Xprtsec::parse(words.iter().copied()).unwrap();
            all.into_iter().filter(|&t| modes.admits(t)).collect()
        };
        assert_eq!(admitted(&["none", "tls", "mtls"]), all);
        assert_eq!(admitted(&["none"]), [T::Plain]);
        // knfsd's check_xprtsec_policy: `tls` is TLS without a verified
        // client certificate, not "at least TLS".
        assert_eq!(admitted(&["tls"]), [T::Tls]);
        assert_eq!(admitted(&["mtls"]), [T::Mtls]);
        assert_eq!(admitted(&["tls", "mtls"]), [T::Tls, T::Mtls]);
    }

    #[test]
    fn xprtsec_errors_say_what_is_wrong() {
        let e = parse("[[export]]\npath = \"/tmp\"\nxprtsec = [\"ssl\"]\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(
            e.reason.contains("`ssl` is not a transport security"),
            "{e}"
        );
        let e = parse("[[export]]\npath = \"/tmp\"\nxprtsec = []\n").unwrap_err();
        assert!(e.reason.contains("the list is empty"), "{e}");
        let e = parse("[[export]]\npath = \"/tmp\"\nxprtsec = \"tls\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        let e = parse(
            "[[export]]\npath = \"/tmp\"\n[[export.client]]\nmatch = \"*\"\nxprtsec = [\"TLS\"]\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        let e =
            parse("[[export]]\npath = \"/tmp\"\noptions = \"xprtsec=tls:none:x\"\n").unwrap_err();
        assert!(e.reason.contains("`x` is not a transport security"), "{e}");
        // TLS required without [tls]; mtls alone without client_ca.
        let tls_only = "[[export]]\npath = \"/tmp\"\nxprtsec = [\"tls\"]\n";
        let e = parse(tls_only).unwrap().check_xprtsec().unwrap_err();
        assert!(
            e.contains("/tmp") && e.contains("needs RPC-with-TLS"),
            "{e}"
        );
        let with_tls = |rest: &str| {
            parse(&format!("[tls]\ncertificate = \"c\"\nkey = \"k\"\n{rest}")).unwrap()
        };
        with_tls(tls_only).check_xprtsec().unwrap();
        let mtls = "[[export]]\npath = \"/tmp\"\n[[export.client]]\nmatch = \"*\"\nxprtsec = [\"none\", \"mtls\"]\n";
        let e = with_tls(mtls).check_xprtsec().unwrap_err();
        assert!(e.contains("client_ca"), "{e}");
        let mut c = with_tls(mtls);
        if let Some(t) = &mut c.server.tls {
            t.client_ca = Some("ca".into());
        }
        c.check_xprtsec().unwrap();
        // `tls` next to it: TLS clients without a certificate can use it.
        with_tls("[[export]]\npath = \"/tmp\"\nxprtsec = [\"tls\", \"mtls\"]\n")
            .check_xprtsec()
            .unwrap();
    }

    /// Certificate entries in `clients` and `match`: the entry naming the
    /// client's certificate wins over its address's; a malformed one is
    /// an error with its line; without client_ca, or with an xprtsec that
    /// refuses mtls, the start (or reload) fails saying so.
    #[test]
    fn certificate_entries_match_and_are_checked() {
        let tls = "[tls]\ncertificate = \"c\"\nkey = \"k\"\nclient_ca = \"ca\"\n";
        let c = parse(&format!(
            "{tls}[[export]]\npath = \"/tmp\"\n\
             [[export.client]]\nmatch = \"10.0.0.0/8\"\nanonuid = 1\n\
             [[export.client]]\nmatch = [\"tls-san:admin.example\", \"10.0.0.1\"]\nanonuid = 2\n"
        ))
        .unwrap();
        c.check_xprtsec().unwrap();
        let x = &c.exports[0];
        let admin = dionfs_transport::ClientCertificate {
            sha256: [7; 32],
            dns_names: vec!["admin.example".into()],
            uris: Vec::new(),
        };
        let anonuid = |ip: &str, certificate| {
            x.options_for(Client {
                ip: ip.parse().unwrap(),
                names: &[],
                certificate,
            })
            .map(|o| o.anonuid)
        };
        assert_eq!(anonuid("10.0.0.9", None), Some(1));
        assert_eq!(anonuid("10.0.0.9", Some(&admin)), Some(2));
        assert_eq!(anonuid("192.168.1.1", Some(&admin)), Some(2));
        assert_eq!(anonuid("192.168.1.1", None), None);

        let e =
            parse("[[export]]\npath = \"/tmp\"\nclients = [\"10.0.0.1\",\n  \"tls-sha256:12\"]\n")
                .unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        assert!(e.reason.contains("64 hex digits"), "{e}");
        // No client_ca: no certificates are asked for.
        let named = "[[export]]\npath = \"/tmp\"\nclients = [\"tls-san:client1.example\"]\n";
        let e = parse(named).unwrap().check_xprtsec().unwrap_err();
        assert!(
            e.contains("/tmp") && e.contains("tls-san:client1.example") && e.contains("client_ca"),
            "{e}"
        );
        let e = parse(&format!("[tls]\ncertificate = \"c\"\nkey = \"k\"\n{named}"))
            .unwrap()
            .check_xprtsec()
            .unwrap_err();
        assert!(e.contains("client_ca"), "{e}");
        parse(&format!("{tls}{named}"))
            .unwrap()
            .check_xprtsec()
            .unwrap();
        // An entry that could never match.
        let e = parse(&format!("{tls}{named}xprtsec = [\"none\", \"tls\"]\n"))
            .unwrap()
            .check_xprtsec()
            .unwrap_err();
        assert!(e.contains("add \"mtls\""), "{e}");
    }

    #[test]
    fn client_entries_refuse_what_is_not_one_clients() {
        let entry = |body: &str| {
            parse(&format!(
                "[[export]]\npath = \"/tmp\"\n\n[[export.client]]\nmatch = \"10.0.0.1\"\n{body}\n"
            ))
        };
        for key in [
            "read_mode = \"buffered\"",
            "write_mode = \"buffered\"",
            "integrity = \"crc32c\"",
            "durability = \"async\"",
            "max_transfer = 65536",
            "allow_devices = true",
            "id = 7",
        ] {
            let e = entry(key).unwrap_err();
            let name = key.split(' ').next().unwrap();
            assert_eq!(e.line, 6, "{key}: {e}");
            assert!(
                e.reason.contains(&format!(
                    "{name} is the export's, the same for all its clients"
                )),
                "{key}: {e}"
            );
        }
        let e = entry("options = \"rw,async\"").unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(e.reason.contains("durability = \"async\""), "{e}");
        let e = entry("options = \"rw,fsid=9\"").unwrap_err();
        assert!(e.reason.contains("fsid is the export's"), "{e}");
        // The export's own, said again, is accepted.
        assert!(entry("options = \"rw,sync\"").is_ok());
        let e = entry("options = \"rw,crossmnt\"").unwrap_err();
        assert!(e.reason.contains("crossmnt"), "{e}");
        let e = entry("clients = [\"10.0.0.2\"]").unwrap_err();
        assert!(e.reason.contains("`match`"), "{e}");
        let e = entry("anonuid = 4294967295").unwrap_err();
        assert!(e.reason.contains("no user"), "{e}");
        let e = entry("frobnicate = 1").unwrap_err();
        assert!(e.reason.contains("frobnicate"), "{e}");

        let e =
            parse("[[export]]\npath = \"/tmp\"\n[[export.client]]\naccess = \"ro\"\n").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("without `match`"), "{e}");
        for (value, word) in [
            ("[]", "empty"),
            ("7", "strings"),
            ("[\"10.0.0.0/40\"]", "prefix"),
            ("\"@group\"", "netgroups"),
        ] {
            let text = format!("[[export]]\npath = \"/tmp\"\n[[export.client]]\nmatch = {value}\n");
            let e = parse(&text).unwrap_err();
            assert_eq!(e.line, 4, "{value}: {e}");
            assert!(e.reason.contains(word), "{value}: {e}");
        }
        // Clients are named in one place: the entries, or `clients`.
        let e = parse(
            "[[export]]\npath = \"/tmp\"\nclients = [\"10.0.0.1\"]\n\
             [[export.client]]\nmatch = \"10.0.0.2\"\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(e.reason.contains("[[export.client]]"), "{e}");
    }

    #[test]
    fn defaults_are_rw_root_squash_loopback_direct_sync() {
        let x = ExportConfig::with_defaults(PathBuf::from("/srv/x"));
        let o = &x.entries[0].options;
        assert!(!o.read_only());
        assert_eq!(o.squash, Squash::RootSquash);
        assert!(x.admits("127.0.0.1".parse().unwrap()));
        assert!(!x.admits("10.0.0.1".parse().unwrap()));
        assert_eq!((x.read_mode, x.write_mode), (Mode::Direct, Mode::Direct));
        assert_eq!(x.integrity, Integrity::Off);
        assert_eq!(x.max_transfer, DEFAULT_MAX_TRANSFER);
        // `secure`, as in exports(5): reserved source ports only.
        assert!(o.secure);
        assert!(o.admits_port(1023));
        assert!(!o.admits_port(1024));
        assert_eq!(x.durability, Durability::Sync);
        let x = parse("[[export]]\npath = \"/tmp\"\n")
            .unwrap()
            .exports
            .remove(0);
        assert_eq!(
            x.durability,
            Durability::Sync,
            "sync unless the file says async"
        );
    }
}
