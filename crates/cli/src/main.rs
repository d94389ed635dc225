//! `dionfs`: serve directories over NFSv3, reload a running server's
//! configuration, read the server's counters, scrub integrity exports.

mod distfiles;
mod logs;
mod reload;
mod scrub;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};
use dionfs_core::export::config::{
    canonical_export_dir, check_idle_spin, check_large_read_depth, check_max_transfer,
    check_timeout,
};
use dionfs_core::export::{
    Access, ClientMatch, Config, Durability, ExportConfig, Integrity, ServerSettings, Squash,
};
use dionfs_core::reload::{ConfigSource, Phase};
use dionfs_dataplane::Mode;

#[derive(Parser)]
#[command(
    name = "dionfs",
    version,
    about = "A userspace NFSv3 server that serves files at device speed without the page cache"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Which log lines to write: off, error, warn, info, debug or trace
    /// (also warning, verbose, quiet...), then any MODULE=LEVEL
    /// (info,dionfs_transport=debug). Overrides DIONFS_LOG and the
    /// config's log_level; default info.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<dionfs_logs::LogFilter>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DIR (or the exports of --config) over NFSv3/TCP.
    Serve(Box<ServeArgs>),
    /// Make a running `dionfs serve --config FILE` read FILE again and
    /// apply its exports, without dropping connections (sends it SIGHUP,
    /// as `systemctl reload dionfs` does). Default: the pid in
    /// /run/dionfs.pid if that exists, else the only running `dionfs
    /// serve`.
    Reload {
        /// The server's process id.
        #[arg(long, conflicts_with = "pid_file")]
        pid: Option<i32>,
        /// The file the server wrote its pid to (its --pid-file / pid_file).
        #[arg(long, value_name = "FILE")]
        pid_file: Option<PathBuf>,
    },
    /// Per-procedure call counts and service-time percentiles of a running
    /// server (like `nfsstat -s`); --raw: every counter, Prometheus text.
    Stats {
        /// The server's metrics address (its `--metrics` / `metrics_listen`).
        #[arg(long, default_value = dionfs_server::metrics::STATS_ADDRESS)]
        metrics: String,
        /// Print every counter as the server exports it (Prometheus text).
        #[arg(long)]
        raw: bool,
    },
    /// The exports of a config in /etc/exports words (like `exportfs -v`),
    /// or, with --convert, a dionfs config from an /etc/exports file.
    Exportfs {
        /// The config whose exports to list.
        #[arg(long, default_value = "/etc/dionfs.toml")]
        config: PathBuf,
        /// Accepted for `exportfs -v` habits; the listing is always verbose.
        #[arg(short, long)]
        verbose: bool,
        /// Print a dionfs config (TOML) for this /etc/exports file instead.
        #[arg(long, value_name = "EXPORTS_FILE")]
        convert: Option<PathBuf>,
    },
    /// Verify every block of integrity exports against its CRC32C, offline
    /// (the server using the state directory must be stopped). Exit status
    /// 1 if a block is bad, 2 on an error (a state directory with no
    /// checksum store included), 3 if a file with data has no checksums
    /// (unless --allow-unchecked), else 0.
    Scrub(ScrubArgs),
}

#[derive(Args)]
struct ScrubArgs {
    /// An export directory to scrub (repeatable). With --config, limits the
    /// scrub to these of its integrity exports; default: all of them.
    #[arg(long = "export", value_name = "PATH")]
    exports: Vec<PathBuf>,
    /// The server's TOML config (its exports and state_dir).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The server's state directory (default: the config's, else
    /// /var/lib/dionfs).
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

#[derive(Args)]
struct ServeArgs {
    /// Directory to export; clients mount it by its absolute path.
    #[arg(required_unless_present = "config", conflicts_with = "config")]
    dir: Option<PathBuf>,
    /// A TOML file with [server] settings and [[export]] sections.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Clients allowed to mount (address, CIDR, host name or wildcard such
    /// as *.example.com; repeatable). Default: loopback only.
    #[arg(long = "allow", value_name = "ADDR|CIDR|NAME")]
    allow: Vec<ClientMatch>,
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    listen: IpAddr,
    /// NFS port (0: any free port).
    #[arg(long, default_value_t = 2049)]
    nfs_port: u16,
    /// MOUNT port (0: any free port).
    #[arg(long, default_value_t = 20048)]
    mount_port: u16,
    /// Portmapper port (0: any free port). If it is taken, dionfs runs without one.
    #[arg(long, default_value_t = 111)]
    portmap_port: u16,
    /// Run without a portmapper (clients then need port= and mountport=).
    #[arg(long)]
    no_portmap: bool,
    /// Where the file-handle key is kept (handles survive restarts with it).
    #[arg(long, default_value = "/var/lib/dionfs")]
    state_dir: PathBuf,
    /// After binding, write the ports in use as JSON to this file.
    #[arg(long)]
    ports_file: Option<PathBuf>,
    #[command(flatten)]
    settings: SettingsFlags,
    /// Export read-only.
    #[arg(long)]
    ro: bool,
    /// Map every user to the anonymous ids.
    #[arg(long, conflicts_with = "no_root_squash")]
    all_squash: bool,
    /// Let root be root.
    #[arg(long)]
    no_root_squash: bool,
    /// The anonymous user (not 4294967295: no user on Linux).
    #[arg(long, default_value_t = 65534, value_parser = clap::value_parser!(u32).range(..4_294_967_295))]
    anonuid: u32,
    /// The anonymous group (not 4294967295).
    #[arg(long, default_value_t = 65534, value_parser = clap::value_parser!(u32).range(..4_294_967_295))]
    anongid: u32,
    /// How READs touch the file: buffered, dontcache or direct.
    #[arg(long, default_value = "direct", value_parser = parse_mode)]
    read_mode: Mode,
    /// How WRITEs touch the file: buffered, dontcache or direct.
    #[arg(long, default_value = "direct", value_parser = parse_mode)]
    write_mode: Mode,
    /// Reply to CREATE, REMOVE, RENAME, SETATTR... before the change is on
    /// disk (exports(5) `async`). Faster; UNSAFE: a crash or power loss can
    /// lose changes clients were told had been made.
    #[arg(long = "async")]
    async_: bool,
    /// Largest READ/WRITE (rtmax/wtmax) in bytes.
    #[arg(long, default_value_t = 1 << 20, value_parser = parse_max_transfer)]
    max_transfer: u32,
    /// Let MKNOD create character and block devices.
    #[arg(long)]
    allow_devices: bool,
    /// Files kept open while unused (the open-file cache; at least 1).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    open_files: u32,
    /// Keep a CRC32C of every 4 KiB block of every file (under --state-dir),
    /// verified on every READ: `crc32c` or `off`.
    #[arg(long, default_value = "off", value_parser = parse_integrity)]
    integrity: Integrity,
    /// Serve NFS calls and MNT from any source port (exports(5) `insecure`).
    /// Default `secure`: only from ports below 1024, which only root binds.
    /// With --config, use `secure = false` in the export instead.
    #[arg(long, conflicts_with = "config")]
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

fn parse_max_transfer(s: &str) -> Result<u32, String> {
    let v: u32 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    check_max_transfer(v)
}

/// `dionfs serve` flags that, with --config, override the file's `[server]`
/// settings (at start, and again at each reload).
#[derive(Args, Clone)]
struct SettingsFlags {
    /// Serve Prometheus metrics over HTTP on ADDR:PORT (read by `dionfs stats`).
    #[arg(long)]
    metrics: Option<std::net::SocketAddr>,
    /// Write the server's process id to FILE while it runs (for `dionfs
    /// reload`; with --config, overrides its `pid_file`).
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// Run every call on blocking threads, without io_uring (default: direct
    /// READs and aligned direct WRITEs go through io_uring where the kernel
    /// allows it; with --config, overrides its `io_uring`).
    #[arg(long)]
    no_io_uring: bool,
    /// Serve no NLM/NSM lock service (clients must then mount with
    /// `nolock`; with --config, overrides its `nlm`).
    #[arg(long)]
    no_nlm: bool,
    /// NLM's TCP port (default 0: any free port, found by clients through
    /// the port mapper; with --config, overrides `nlm_port`).
    #[arg(long, value_name = "N")]
    nlm_port: Option<u16>,
    /// NSM's UDP port for reboot notifications (default 0: any free port;
    /// with --config, overrides `nsm_port`).
    #[arg(long, value_name = "N")]
    nsm_port: Option<u16>,
    /// After a restart with clients that held locks, grant only their
    /// reclaims for SECS seconds (default 90, 0 for none; with --config,
    /// overrides `grace_period`).
    #[arg(long, value_name = "SECS", value_parser = parse_grace)]
    grace_period: Option<std::time::Duration>,
    /// Drop a connection whose call stops arriving half-way for SECS seconds
    /// (default 5; with --config, overrides its `stall_timeout`).
    #[arg(long, value_name = "SECS", value_parser = parse_stall_timeout)]
    stall_timeout: Option<std::time::Duration>,
    /// Close a connection whose client reads none of its replies for SECS
    /// seconds (default 30; with --config, overrides `reply_timeout`).
    #[arg(long, value_name = "SECS", value_parser = parse_reply_timeout)]
    reply_timeout: Option<std::time::Duration>,
    /// Close a connection without calls for SECS seconds (default 360; with
    /// --config, overrides `idle_timeout`).
    #[arg(long, value_name = "SECS", value_parser = parse_idle_timeout)]
    idle_timeout: Option<std::time::Duration>,
    /// While no call is in flight, a connection sending one call at a time
    /// looks for its next one for up to N microseconds before sleeping
    /// (default 100, 0 never, at most 1000; with --config, overrides
    /// `idle_spin_us`).
    #[arg(long, value_name = "N", value_parser = parse_idle_spin)]
    idle_spin_us: Option<std::time::Duration>,
    /// While a small direct READ is at an export's device, large direct
    /// reads start only while less than N MiB of them are there: less
    /// favours random READs beside sequential readers, more the sequential
    /// readers (default 4, 0 no limit; with --config, overrides
    /// `large_read_depth_mib`).
    #[arg(long, value_name = "N", value_parser = parse_large_read_depth)]
    large_read_depth_mib: Option<u64>,
    /// Connections open at once; a new one past it closes the connection
    /// quiet longest (5 s at least), else is closed at once (default 4096;
    /// with --config, overrides `max_connections`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
}

impl SettingsFlags {
    /// The settings given as flags, over those of `settings`.
    fn apply(&self, settings: &mut ServerSettings) {
        if self.metrics.is_some() {
            settings.metrics_listen = self.metrics;
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
            ..ServerSettings::default()
        };
        self.settings.apply(&mut server);
        let dir = self.dir.expect("clap requires DIR without --config");
        let path = canonical_export_dir(&dir.to_string_lossy()).or_else(|_| {
            let abs = std::path::absolute(&dir).map_err(|e| e.to_string())?;
            canonical_export_dir(&abs.to_string_lossy())
        })?;
        let mut export = ExportConfig::with_defaults(path);
        if !self.allow.is_empty() {
            export.clients = self.allow;
        }
        export.access = if self.ro { Access::Ro } else { Access::Rw };
        export.squash = if self.all_squash {
            Squash::AllSquash
        } else if self.no_root_squash {
            Squash::NoRootSquash
        } else {
            Squash::RootSquash
        };
        export.anonuid = self.anonuid;
        export.anongid = self.anongid;
        export.read_mode = self.read_mode;
        export.write_mode = self.write_mode;
        if self.async_ {
            export.durability = Durability::Async;
        }
        export.max_transfer = self.max_transfer;
        export.allow_devices = self.allow_devices;
        export.secure = !self.insecure;
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
            let (config, source) = match args.into_config() {
                Ok(c) => c,
                Err(e) => {
                    logs::fatal(format_args!("dionfs: {e}"));
                    return ExitCode::from(2);
                }
            };
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
            config,
            verbose: _,
            convert,
        } => exportfs(&config, convert.as_deref()),
        Command::Stats { metrics, raw } => match dionfs_server::metrics::fetch(&metrics) {
            Ok(text) if raw => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Ok(text) => {
                use dionfs_server::callstats;
                let programs = dionfs_server::dispatch::counted_programs();
                print!("{}", callstats::table(&callstats::parse(&text), &programs));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dionfs stats: cannot read {metrics}: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `dionfs exportfs`: see [`Command::Exportfs`].
fn exportfs(config: &std::path::Path, convert: Option<&std::path::Path>) -> ExitCode {
    use dionfs_core::export::exports5;
    if let Some(file) = convert {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("dionfs exportfs: cannot read {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        return match exports5::convert(&text) {
            Ok(toml) => {
                print!("{toml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("dionfs exportfs: {}: {e}", file.display());
                ExitCode::FAILURE
            }
        };
    }
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
