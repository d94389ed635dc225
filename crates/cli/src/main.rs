//! `dionfs`: serve directories over NFS, reload a running server's
//! configuration, ask it what it exports, to whom and how fast, scrub
//! integrity exports.

mod distfiles;
mod logs;
mod reload;
mod scrub;
mod tools;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use dionfs_core::export::config::{
    canonical_export_dir, check_idle_spin, check_large_read_depth, check_max_transfer,
    check_timeout, DEFAULT_HANDSHAKE_TIMEOUT,
};
use dionfs_core::export::{
    Access, ClientMatch, ClientOptions, Config, Durability, ExportConfig, Integrity, NfsVersions,
    ServerSettings, Squash, TlsFiles, Xprtsec, STATS_ADDRESS,
};
use dionfs_core::reload::{ConfigSource, Phase};
use dionfs_dataplane::Mode;

#[derive(Parser)]
#[command(
    name = "dionfs",
    version,
    about = "A userspace NFS server that serves files at device speed without the page cache",
    after_help = "Exit status: 0 on success, 1 when the command fails at run time, 2 for a usage \
                  or configuration error (scrub: see `dionfs scrub --help`)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Which log lines to write: off, error, warn, info, debug or trace
    /// (also warning, verbose, quiet...), then any MODULE=LEVEL
    /// (info,dionfs_transport=debug). Overrides DIONFS_LOG and the
    /// config's log_level. [default: info]
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<dionfs_logs::LogFilter>,
}

/// Where the tools find the running server: its metrics listener.
#[derive(Args)]
struct ServerAddress {
    /// The server's metrics address (its --metrics / metrics_listen).
    /// [default: the metrics_listen of /etc/dionfs.toml if it sets one,
    /// else 127.0.0.1:9049, where `dionfs serve DIR` serves them]
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DIR, or the exports of --config, over NFS.
    Serve(Box<ServeArgs>),
    /// Make a running server read its --config again, keeping connections.
    ///
    /// Sends `dionfs serve --config FILE` SIGHUP, as `systemctl reload
    /// dionfs` does; it reads FILE again and applies its exports without
    /// dropping connections. Which server: --pid, --pid-file [default: the
    /// pid in /run/dionfs.pid if that exists, else the only running `dionfs
    /// serve`]
    Reload {
        /// The server's process id.
        #[arg(long, conflicts_with = "pid_file")]
        pid: Option<i32>,
        /// The file the server wrote its pid to (its --pid-file / pid_file).
        #[arg(long, value_name = "FILE")]
        pid_file: Option<PathBuf>,
    },
    /// Call counts and service times of the running server (like `nfsstat -s`).
    ///
    /// Per-procedure call counts and service-time percentiles since the
    /// server started; with INTERVAL, those of the last INTERVAL seconds,
    /// every INTERVAL seconds until interrupted (or --count reports);
    /// --raw: every counter, Prometheus text.
    Stats {
        /// Report every SECS seconds the calls since the report before.
        #[arg(value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
        interval: Option<u64>,
        /// With an interval, stop after N reports.
        #[arg(long, value_name = "N", requires = "interval",
              value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
        #[command(flatten)]
        address: ServerAddress,
        /// Read the server's address from this config's metrics_listen.
        #[arg(long, value_name = "FILE", conflicts_with = "metrics")]
        config: Option<PathBuf>,
        /// Print every counter as the server exports it (Prometheus text).
        #[arg(long, conflicts_with = "interval")]
        raw: bool,
    },
    /// What the running server exports now, with every option it applies.
    ///
    /// Asks the running server (like `exportfs -v`) and prints its exports
    /// as config sections, options in the config's words, defaults
    /// included. With --config FILE: the exports of FILE instead, in
    /// /etc/exports words, no server needed. With --convert: a dionfs
    /// config from an /etc/exports file.
    Exportfs {
        #[command(flatten)]
        address: ServerAddress,
        /// List the exports of this config file, not the running server's.
        #[arg(long, value_name = "FILE", conflicts_with = "metrics")]
        config: Option<PathBuf>,
        /// Accepted for `exportfs -v` habits; the listing is always verbose.
        #[arg(short, long)]
        verbose: bool,
        /// Print a dionfs config (TOML) for this /etc/exports file instead.
        #[arg(long, value_name = "EXPORTS_FILE", conflicts_with_all = ["config", "metrics"])]
        convert: Option<PathBuf>,
    },
    /// The clients of the running server: NLM hosts and NFSv4 clients.
    ///
    /// One line each (like `showmount -a`): the address, the protocol
    /// (nlm: a host holding locks, by the name its lock manager gives;
    /// nfs4: a client record, its clientid, sessions and owner).
    Clients {
        #[command(flatten)]
        address: ServerAddress,
        /// Read the server's address from this config's metrics_listen.
        #[arg(long, value_name = "FILE", conflicts_with = "metrics")]
        config: Option<PathBuf>,
        /// Print a JSON array of objects instead.
        #[arg(long)]
        json: bool,
    },
    /// Verify integrity exports' blocks against their CRC32C, offline.
    ///
    /// The server using the state directory must be stopped. Exit status
    /// 1 if a block is bad, 2 on an error (a state directory with no
    /// checksum store included), 3 if a file with data has no checksums
    /// (unless --allow-unchecked), else 0.
    Scrub(ScrubArgs),
}

#[derive(Args)]
struct ScrubArgs {
    /// An export directory to scrub (repeatable). With --config, limits the
    /// scrub to these of its integrity exports. [default: all of them]
    #[arg(long = "export", value_name = "PATH")]
    exports: Vec<PathBuf>,
    /// The server's TOML config (its exports and state_dir).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The server's state directory. [default: the config's, else
    /// /var/lib/dionfs]
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Rebuild the checksums of files changed behind the server's back (or
    /// never checksummed) from their data, instead of only listing them.
    #[arg(long)]
    repair_metadata: bool,
    /// Exit 0 even if files with data have no checksums at all (files
    /// written only locally, never through an integrity export). Without
    /// it they make the exit status 3: a scrub pointed at the wrong state
    /// directory finds no checksum for anything.
    #[arg(long)]
    allow_unchecked: bool,
}

impl ScrubArgs {
    fn into_plan(self) -> Result<scrub::ScrubPlan, String> {
        let canonical =
            |p: &PathBuf| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
        let wanted: Vec<PathBuf> = self
            .exports
            .iter()
            .map(canonical)
            .collect::<Result<_, _>>()?;
        let (exports, state_dir) = match &self.config {
            Some(file) => {
                let c = Config::from_file(file).map_err(|e| e.to_string())?;
                let exports: Vec<PathBuf> = c
                    .exports
                    .iter()
                    .filter(|x| x.integrity == Integrity::Crc32c)
                    .map(|x| x.path.clone())
                    .filter(|p| wanted.is_empty() || wanted.contains(p))
                    .collect();
                (exports, self.state_dir.unwrap_or(c.server.state_dir))
            }
            None => (
                wanted,
                self.state_dir
                    .unwrap_or_else(|| PathBuf::from("/var/lib/dionfs")),
            ),
        };
        if exports.is_empty() {
            return Err(
                "nothing to scrub: give --export PATH, or --config with integrity exports".into(),
            );
        }
        Ok(scrub::ScrubPlan {
            exports,
            state_dir,
            repair_metadata: self.repair_metadata,
            allow_unchecked: self.allow_unchecked,
        })
    }
}

/// `dionfs serve --help` groups its options under these.
const SERVER: &str = "Server options";
const EXPORT: &str = "Export options (without --config)";

#[derive(Args)]
struct ServeArgs {
    /// Directory to export; clients mount it by its absolute path.
    #[arg(required_unless_present = "config", conflicts_with = "config")]
    dir: Option<PathBuf>,
    /// A TOML file with [server] settings and [[export]] sections.
    #[arg(help_heading = SERVER, long)]
    config: Option<PathBuf>,
    /// Clients allowed to mount (address, CIDR, host name or wildcard such
    /// as *.example.com; repeatable). [default: loopback only]
    #[arg(help_heading = EXPORT, long = "allow", value_name = "ADDR|CIDR|NAME")]
    allow: Vec<ClientMatch>,
    /// Address to listen on.
    #[arg(help_heading = SERVER, long, default_value = "0.0.0.0")]
    listen: IpAddr,
    /// NFS port (0: any free port).
    #[arg(help_heading = SERVER, long, default_value_t = 2049)]
    nfs_port: u16,
    /// MOUNT port (0: any free port).
    #[arg(help_heading = SERVER, long, default_value_t = 20048)]
    mount_port: u16,
    /// Portmapper port (0: any free port). If it is taken, dionfs runs without one.
    #[arg(help_heading = SERVER, long, default_value_t = 111)]
    portmap_port: u16,
    /// Run without a portmapper (clients then need port= and mountport=).
    #[arg(help_heading = SERVER, long)]
    no_portmap: bool,
    /// Where the file-handle key is kept (handles survive restarts with it).
    #[arg(help_heading = SERVER, long, default_value = "/var/lib/dionfs")]
    state_dir: PathBuf,
    /// After binding, write the ports in use as JSON to this file.
    #[arg(help_heading = SERVER, long)]
    ports_file: Option<PathBuf>,
    #[command(flatten)]
    settings: SettingsFlags,
    /// Export read-only.
    #[arg(help_heading = EXPORT, long)]
    ro: bool,
    /// Map every user to the anonymous ids.
    #[arg(help_heading = EXPORT, long, conflicts_with = "no_root_squash")]
    all_squash: bool,
    /// Let root be root.
    #[arg(help_heading = EXPORT, long)]
    no_root_squash: bool,
    /// The anonymous user (not 4294967295: no user on Linux).
    #[arg(help_heading = EXPORT, long, default_value_t = 65534, value_parser = clap::value_parser!(u32).range(..4_294_967_295))]
    anonuid: u32,
    /// The anonymous group (not 4294967295).
    #[arg(help_heading = EXPORT, long, default_value_t = 65534, value_parser = clap::value_parser!(u32).range(..4_294_967_295))]
    anongid: u32,
    /// How READs touch the file: buffered, dontcache or direct.
    #[arg(help_heading = EXPORT, long, default_value = "direct", value_parser = parse_mode)]
    read_mode: Mode,
    /// How WRITEs touch the file: buffered, dontcache or direct.
    #[arg(help_heading = EXPORT, long, default_value = "direct", value_parser = parse_mode)]
    write_mode: Mode,
    /// Reply to CREATE, REMOVE, RENAME, SETATTR... before the change is on
    /// disk (exports(5) `async`). Faster; UNSAFE: a crash or power loss can
    /// lose changes clients were told had been made.
    #[arg(help_heading = EXPORT, long = "async")]
    async_: bool,
    /// Largest READ/WRITE (rtmax/wtmax) in bytes.
    #[arg(help_heading = EXPORT, long, default_value_t = 1 << 20, value_parser = parse_max_transfer)]
    max_transfer: u32,
    /// Let MKNOD create character and block devices.
    #[arg(help_heading = EXPORT, long)]
    allow_devices: bool,
    /// Files kept open while unused (the open-file cache; at least 1).
    #[arg(help_heading = SERVER, long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    open_files: u32,
    /// Keep a CRC32C of every 4 KiB block of every file (under --state-dir),
    /// verified on every READ: `crc32c` or `off`.
    #[arg(help_heading = EXPORT, long, default_value = "off", value_parser = parse_integrity)]
    integrity: Integrity,
    /// The connections NFS calls may come over, comma-separated: none
    /// (plain TCP/UDP), tls (TLS without a client certificate), mtls (TLS
    /// with one that verified against --tls-client-ca), as exports(5)'s
    /// xprtsec (whose `tls:mtls` is taken too). With --config, use
    /// `xprtsec` in the export instead. [default: none,tls,mtls]
    #[arg(help_heading = EXPORT, long, value_name = "LIST", value_parser = parse_xprtsec, conflicts_with = "config")]
    xprtsec: Option<Xprtsec>,
    /// Serve NFS calls and MNT from any source port (exports(5) `insecure`).
    /// With --config, use `secure = false` in the export instead.
    /// [default: secure, only from ports below 1024, which only root binds]
    #[arg(help_heading = EXPORT, long, conflicts_with = "config")]
    insecure: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    match s {
        "buffered" => Ok(Mode::Buffered),
        "dontcache" => Ok(Mode::DontCache),
        "direct" => Ok(Mode::Direct),
        _ => Err(format!("`{s}`: use buffered, dontcache or direct")),
    }
}

fn parse_integrity(s: &str) -> Result<Integrity, String> {
    match s {
        "off" => Ok(Integrity::Off),
        "crc32c" => Ok(Integrity::Crc32c),
        _ => Err(format!("`{s}`: use crc32c or off")),
    }
}

fn parse_secs(name: &str, s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    check_timeout(name, v)
}

fn parse_stall_timeout(s: &str) -> Result<std::time::Duration, String> {
    parse_secs("--stall-timeout", s)
}

fn parse_reply_timeout(s: &str) -> Result<std::time::Duration, String> {
    parse_secs("--reply-timeout", s)
}

fn parse_idle_timeout(s: &str) -> Result<std::time::Duration, String> {
    parse_secs("--idle-timeout", s)
}

fn parse_handshake_timeout(s: &str) -> Result<std::time::Duration, String> {
    parse_secs("--tls-handshake-timeout", s)
}

fn parse_large_read_depth(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of MiB"))?;
    check_large_read_depth(v)
        .map_err(|e| e.replace("large_read_depth_mib", "--large-read-depth-mib"))
}

fn parse_idle_spin(s: &str) -> Result<std::time::Duration, String> {
    let v: u64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of microseconds"))?;
    check_idle_spin(v).map_err(|e| e.replace("idle_spin_us", "--idle-spin-us"))
}

fn parse_grace(s: &str) -> Result<std::time::Duration, String> {
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(0.0..=3600.0).contains(&v) {
        return Err(format!("--grace-period: {v} must be between 0 and 3600"));
    }
    Ok(std::time::Duration::from_secs_f64(v))
}

fn parse_xprtsec(s: &str) -> Result<Xprtsec, String> {
    Xprtsec::parse(s.split([',', ':']).map(str::trim))
        .map_err(|e| e.replace("xprtsec:", "--xprtsec:"))
}

fn parse_versions(s: &str) -> Result<NfsVersions, String> {
    NfsVersions::parse(s.split(',').map(str::trim))
        .map_err(|e| e.replace("versions:", "--nfs-versions:"))
}

fn parse_max_transfer(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    check_max_transfer(v)
}

/// `dionfs serve` flags that, with --config, override the file's `[server]`
/// settings (at start, and again at each reload).
#[derive(Args, Clone)]
struct SettingsFlags {
    /// Serve Prometheus metrics, and what `dionfs stats`, `exportfs` and
    /// `clients` ask, over HTTP on ADDR:PORT. With --config, overrides
    /// its `metrics_listen`. [default: 127.0.0.1:9049 for `serve DIR`;
    /// the config's metrics_listen with --config]
    #[arg(help_heading = SERVER, long, value_name = "ADDR:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Serve no metrics (`dionfs stats`, `exportfs -v` and `clients` then
    /// cannot ask this server anything).
    #[arg(help_heading = SERVER, long, conflicts_with = "metrics")]
    no_metrics: bool,
    /// Write the server's process id to FILE while it runs (for `dionfs
    /// reload`; with --config, overrides its `pid_file`).
    #[arg(help_heading = SERVER, long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Run every call on blocking threads, without io_uring (otherwise
    /// direct READs and aligned direct WRITEs go through io_uring where the
    /// kernel allows it). With --config, overrides its `io_uring`.
    #[arg(help_heading = SERVER, long)]
    no_io_uring: bool,
    /// Serve no NLM/NSM lock service (clients must then mount with
    /// `nolock`). With --config, overrides its `nlm`.
    #[arg(help_heading = SERVER, long)]
    no_nlm: bool,
    /// NLM's TCP port (0: any free port, found by clients through the port
    /// mapper). With --config, overrides `nlm_port`. [default: 0]
    #[arg(help_heading = SERVER, long, value_name = "N")]
    nlm_port: Option<u16>,
    /// NSM's UDP port for reboot notifications (0: any free port). With
    /// --config, overrides `nsm_port`. [default: 0]
    #[arg(help_heading = SERVER, long, value_name = "N")]
    nsm_port: Option<u16>,
    /// After a restart with clients that held locks, grant only their
    /// reclaims for SECS seconds (0: none). With --config, overrides
    /// `grace_period`. [default: 90]
    #[arg(help_heading = SERVER, long, value_name = "SECS", value_parser = parse_grace)]
    grace_period: Option<std::time::Duration>,
    /// The NFS versions served, comma-separated from "3", "4.0", "4.1", "4.2"
    /// (NFSv4 needs no port mapper, MOUNT or NLM: one TCP port). With
    /// --config, overrides `versions`. [default: 3,4.0,4.1,4.2]
    #[arg(help_heading = SERVER, long, value_name = "LIST", value_parser = parse_versions)]
    nfs_versions: Option<NfsVersions>,
    /// Drop a connection whose call stops arriving half-way for SECS
    /// seconds. With --config, overrides its `stall_timeout`. [default: 5]
    #[arg(help_heading = SERVER, long, value_name = "SECS", value_parser = parse_stall_timeout)]
    stall_timeout: Option<std::time::Duration>,
    /// Close a connection whose client reads none of its replies for SECS
    /// seconds. With --config, overrides `reply_timeout`. [default: 30]
    #[arg(help_heading = SERVER, long, value_name = "SECS", value_parser = parse_reply_timeout)]
    reply_timeout: Option<std::time::Duration>,
    /// Close a connection without calls for SECS seconds. With --config,
    /// overrides `idle_timeout`. [default: 360]
    #[arg(help_heading = SERVER, long, value_name = "SECS", value_parser = parse_idle_timeout)]
    idle_timeout: Option<std::time::Duration>,
    /// While no call is in flight, a connection sending one call at a time
    /// looks for its next one for up to N microseconds before sleeping (0
    /// never, at most 1000). With --config, overrides `idle_spin_us`.
    /// [default: 100]
    #[arg(help_heading = SERVER, long, value_name = "N", value_parser = parse_idle_spin)]
    idle_spin_us: Option<std::time::Duration>,
    /// While a small direct READ is at an export's device, large direct
    /// reads start only while less than N MiB of them are there: less
    /// favours random READs beside sequential readers, more the sequential
    /// readers (0: no limit). With --config, overrides
    /// `large_read_depth_mib`. [default: 4]
    #[arg(help_heading = SERVER, long, value_name = "N", value_parser = parse_large_read_depth)]
    large_read_depth_mib: Option<u64>,
    /// Connections open at once; a new one past it closes the connection
    /// quiet longest (5 s at least), else is closed at once. With --config,
    /// overrides `max_connections`. [default: 4096]
    #[arg(help_heading = SERVER, long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Let clients switch their connections to TLS (RFC 9289, RPC-with-TLS)
    /// with this certificate (PEM, the chain after it); needs --tls-key.
    /// With --config, overrides the `[tls]` table's `certificate`.
    #[arg(help_heading = SERVER, long, value_name = "FILE", requires = "tls_key")]
    tls_certificate: Option<PathBuf>,
    /// The private key of --tls-certificate (PEM). With --config,
    /// overrides `[tls]` `key`.
    #[arg(help_heading = SERVER, long, value_name = "FILE", requires = "tls_certificate")]
    tls_key: Option<PathBuf>,
    /// Ask TLS clients for a certificate, and accept one only if a CA of
    /// this file (PEM) signed it. With --config, overrides `[tls]`
    /// `client_ca`.
    #[arg(help_heading = SERVER, long, value_name = "FILE")]
    tls_client_ca: Option<PathBuf>,
    /// Close a connection whose TLS handshake is not done in SECS seconds.
    /// With --config, overrides `[tls]` `handshake_timeout`. [default: 10]
    #[arg(help_heading = SERVER, long, value_name = "SECS", value_parser = parse_handshake_timeout)]
    tls_handshake_timeout: Option<std::time::Duration>,
}

impl SettingsFlags {
    /// The settings given as flags, over those of `settings`.
    fn apply(&self, settings: &mut ServerSettings) {
        if self.metrics.is_some() {
            settings.metrics_listen = self.metrics;
        }
        if self.no_metrics {
            settings.metrics_listen = None;
        }
        if self.pid_file.is_some() {
            settings.pid_file = self.pid_file.clone();
        }
        if let Some(t) = self.stall_timeout {
            settings.stall_timeout = t;
        }
        if let Some(t) = self.reply_timeout {
            settings.reply_timeout = t;
        }
        if let Some(t) = self.idle_timeout {
            settings.idle_timeout = t;
        }
        if let Some(t) = self.idle_spin_us {
            settings.idle_spin = t;
        }
        if let Some(n) = self.large_read_depth_mib {
            settings.large_read_depth_mib = n;
        }
        if let Some(n) = self.max_connections {
            settings.max_connections = n as usize;
        }
        if let (Some(certificate), Some(key)) = (&self.tls_certificate, &self.tls_key) {
            let (client_ca, handshake_timeout) = match settings.tls.take() {
                Some(t) => (t.client_ca, t.handshake_timeout),
                None => (None, DEFAULT_HANDSHAKE_TIMEOUT),
            };
            settings.tls = Some(TlsFiles {
                certificate: certificate.clone(),
                key: key.clone(),
                client_ca,
                handshake_timeout,
            });
        }
        if let (Some(ca), Some(tls)) = (&self.tls_client_ca, &mut settings.tls) {
            tls.client_ca = Some(ca.clone());
        }
        if let (Some(t), Some(tls)) = (self.tls_handshake_timeout, &mut settings.tls) {
            tls.handshake_timeout = t;
        }
        if self.no_io_uring {
            settings.io_uring = false;
        }
        if self.no_nlm {
            settings.nlm = false;
        }
        if let Some(p) = self.nlm_port {
            settings.nlm_port = p;
        }
        if let Some(p) = self.nsm_port {
            settings.nsm_port = p;
        }
        if let Some(g) = self.grace_period {
            settings.grace_period = g;
        }
        if let Some(v) = self.nfs_versions {
            settings.versions = v;
        }
    }
}

impl ServeArgs {
    /// The configuration to start with, and with --config where a reload
    /// reads it again (with the same flags over it).
    fn into_config(self) -> Result<(Config, Option<ConfigSource>), String> {
        if let Some(file) = &self.config {
            let flags = self.settings.clone();
            let source = ConfigSource {
                file: file.clone(),
                overrides: Box::new(move |c: &mut Config| flags.apply(&mut c.server)),
            };
            let c = source.load()?;
            return Ok((c, Some(source)));
        }
        let mut server = ServerSettings {
            listen: self.listen,
            nfs_port: self.nfs_port,
            mount_port: self.mount_port,
            portmap_port: (!self.no_portmap).then_some(self.portmap_port),
            state_dir: self.state_dir.clone(),
            open_files: self.open_files as usize,
            // Where `dionfs stats`, `exportfs -v` and `clients` look
            // first; --metrics moves it, --no-metrics turns it off.
            metrics_listen: STATS_ADDRESS.parse().ok(),
            ..ServerSettings::default()
        };
        self.settings.apply(&mut server);
        let dir = self.dir.expect("clap requires DIR without --config");
        let path = canonical_export_dir(&dir.to_string_lossy()).or_else(|_| {
            let abs = std::path::absolute(&dir).map_err(|e| e.to_string())?;
            canonical_export_dir(&abs.to_string_lossy())
        })?;
        let mut export = ExportConfig::with_defaults(path);
        // One client entry: the flags give one set of options.
        let entry = &mut export.entries[0];
        if !self.allow.is_empty() {
            entry.clients = self.allow;
        }
        entry.options = ClientOptions {
            access: if self.ro { Access::Ro } else { Access::Rw },
            squash: if self.all_squash {
                Squash::AllSquash
            } else if self.no_root_squash {
                Squash::NoRootSquash
            } else {
                Squash::RootSquash
            },
            anonuid: self.anonuid,
            anongid: self.anongid,
            secure: !self.insecure,
            // Every transport unless told, as knfsd's default.
            xprtsec: self.xprtsec.unwrap_or(Xprtsec::ALL),
        };
        export.read_mode = self.read_mode;
        export.write_mode = self.write_mode;
        if self.async_ {
            export.durability = Durability::Async;
        }
        export.max_transfer = self.max_transfer;
        export.allow_devices = self.allow_devices;
        export.integrity = self.integrity;
        let config = Config {
            server,
            exports: vec![export],
        };
        Ok((config, None))
    }
}

fn main() -> ExitCode {
    // For packaging, outside the definitions it reads so that neither
    // help nor the completions list it: see distfiles.
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == distfiles::COMMAND) {
        return distfiles::main(Cli::command(), &args[2..]);
    }
    let cli = Cli::parse();
    // A word that is no log level would silence the logs it was meant to
    // set: refused as a usage error, before anything runs.
    let chosen = match logs::chosen_filter(cli.log_level) {
        Ok(chosen) => chosen,
        Err(e) => {
            logs::fatal(format_args!("dionfs: {e}"));
            return ExitCode::from(2);
        }
    };
    let logs = logs::init(chosen.as_ref());
    match cli.command {
        Command::Serve(args) => {
            let ports_file = args.ports_file.clone();
            let args_tls_client_ca = args.settings.tls_client_ca.clone();
            let args_tls_handshake_timeout = args.settings.tls_handshake_timeout;
            let (config, source) = match args.into_config() {
                Ok(c) => c,
                Err(e) => {
                    logs::fatal(format_args!("dionfs: {e}"));
                    return ExitCode::from(2);
                }
            };
            // TLS files that cannot be used are a configuration error.
            if let Some(tls) = &config.server.tls {
                if let Err(e) = tls.load() {
                    logs::fatal(format_args!("dionfs: TLS: {e}"));
                    return ExitCode::from(2);
                }
            }
            if let Err(e) = config.check_xprtsec() {
                logs::fatal(format_args!("dionfs: {e}"));
                return ExitCode::from(2);
            }
            let tls_flag = match (&args_tls_client_ca, args_tls_handshake_timeout) {
                (Some(_), _) => Some("--tls-client-ca"),
                (None, Some(_)) => Some("--tls-handshake-timeout"),
                (None, None) => None,
            };
            if let (Some(flag), None) = (tls_flag, &config.server.tls) {
                logs::fatal(format_args!(
                    "dionfs: {flag} needs a server certificate (--tls-certificate, or the \
                     config's [tls] table)"
                ));
                return ExitCode::from(2);
            }
            // The file's log_level, under the flag and DIONFS_LOG.
            if let (None, Some(level)) = (&chosen, &config.server.log_level) {
                logs.set_filter(level);
            }
            match dionfs_server::run(config, ports_file, source) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    logs::fatal(format_args!("dionfs: {e}"));
                    ExitCode::FAILURE
                }
            }
        }
        Command::Reload { pid, pid_file } => {
            let target = match (pid, pid_file) {
                (Some(pid), _) => reload::Target::Pid(pid),
                (None, Some(file)) => reload::Target::PidFile(file),
                (None, None) => reload::Target::Default,
            };
            match reload::run(target) {
                Ok(reload::Done { pid, outcome: None }) => {
                    println!(
                        "dionfs reload: asked dionfs serve (pid {pid}) to reload its \
                         configuration; its log says what changed"
                    );
                    ExitCode::SUCCESS
                }
                Ok(reload::Done {
                    pid,
                    outcome: Some(o),
                }) if o.phase == Phase::Applied => {
                    println!(
                        "dionfs reload: dionfs serve (pid {pid}) reloaded: {}",
                        o.text
                    );
                    ExitCode::SUCCESS
                }
                Ok(reload::Done {
                    pid,
                    outcome: Some(o),
                }) => {
                    eprintln!(
                        "dionfs reload: dionfs serve (pid {pid}) did not reload, its exports \
                         stay as they were: {}",
                        o.text
                    );
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("dionfs reload: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Scrub(args) => match args.into_plan().and_then(scrub::run) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("dionfs scrub: {e}");
                ExitCode::from(2)
            }
        },
        Command::Exportfs {
            address,
            config,
            verbose: _,
            convert,
        } => match (config, convert) {
            (_, Some(file)) => exportfs_convert(&file),
            (Some(config), None) => exportfs_file(&config),
            (None, None) => match tools::server_address(address.metrics.as_deref(), None) {
                Ok(addr) => tools::exportfs(&addr),
                Err(e) => usage_error("exportfs", &e),
            },
        },
        Command::Stats {
            interval,
            count,
            address,
            config,
            raw,
        } => match tools::server_address(address.metrics.as_deref(), config.as_deref()) {
            Ok(addr) => tools::stats(tools::StatsArgs {
                addr,
                raw,
                interval,
                count,
            }),
            Err(e) => usage_error("stats", &e),
        },
        Command::Clients {
            address,
            config,
            json,
        } => match tools::server_address(address.metrics.as_deref(), config.as_deref()) {
            Ok(addr) => tools::clients(&addr, json),
            Err(e) => usage_error("clients", &e),
        },
    }
}

/// A configuration the command cannot use: exit status 2, as for a
/// usage error.
fn usage_error(command: &str, e: &str) -> ExitCode {
    eprintln!("dionfs {command}: {e}");
    ExitCode::from(2)
}

/// `dionfs exportfs --convert FILE`: see [`Command::Exportfs`].
fn exportfs_convert(file: &std::path::Path) -> ExitCode {
    use dionfs_core::export::exports5;
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("dionfs exportfs: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    match exports5::convert(&text) {
        Ok(toml) => {
            print!("{toml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dionfs exportfs: {}: {e}", file.display());
            ExitCode::FAILURE
        }
    }
}

/// `dionfs exportfs --config FILE`: see [`Command::Exportfs`].
fn exportfs_file(config: &std::path::Path) -> ExitCode {
    use dionfs_core::export::exports5;
    match Config::from_file(config) {
        Ok(c) => {
            print!("{}", exports5::listing(&c.exports));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("dionfs exportfs: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_versions;

    #[test]
    fn nfs_versions_are_a_comma_separated_list() {
        let v = parse_versions("3, 4.1,4.2").unwrap();
        assert!(v.v3 && !v.v4_0 && v.v4_1 && v.v4_2);
        let v = parse_versions("4.1").unwrap();
        assert!(!v.v3 && v.v4_1 && !v.v4_2);
        let v = parse_versions("3,4.0").unwrap();
        assert!(v.v3 && v.v4_0 && !v.v4_1);
        assert!(parse_versions("4").unwrap().v4_0);
        let e = parse_versions("3,4.3").unwrap_err();
        assert!(e.starts_with("--nfs-versions:"), "{e}");
        assert!(parse_versions("5").is_err());
    }
}
