//! dionfs server: exports, the connection loop ([`net`]) carrying ONC RPC
//! calls, and the programs served on it (NFS v3, NFS v4.1 and v4.2,
//! MOUNT v3, NLM v4 and NSM, portmap v2 and rpcbind).

pub mod admit;
pub mod callstats;
pub mod dispatch;
pub mod io;
pub mod locks;
pub mod metrics;
pub mod mount;
pub mod nfs;
pub mod nfs4;
pub mod nlm;
pub mod operator;
pub mod portmap;
pub mod program;
mod reply;
pub mod rpcbind;
pub mod systemd;
#[cfg(test)]
mod testing;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dionfs_dataplane::IoRing;
use dionfs_logs::LogEvery;
use dionfs_sys::private::Durability;
use tokio::net::{TcpListener, UdpSocket};
use tracing::{error, info, warn};

use crate::portmap::{PortmapService, PortmapTable};
use dionfs_core::export::config::DEFAULT_HANDSHAKE_TIMEOUT;
use dionfs_core::export::Config;
use dionfs_core::integrity;
use dionfs_core::reload::{self, ConfigSource};
use dionfs_core::server::Server;
use dionfs_transport::ConnLimits;

/// Runs the server until SIGINT or SIGTERM. `ports_file`, if given, gets the
/// bound ports as JSON once every listener is up (tests use port 0). On
/// SIGHUP the configuration is read again from `source` and its exports
/// applied (see [`reload`]); without a source (`dionfs serve DIR`) there is
/// nothing to reload.
pub fn run(
    config: Config,
    ports_file: Option<PathBuf>,
    source: Option<ConfigSource>,
) -> Result<(), String> {
    raise_fd_limit();
    mind_file_size_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("dionfs")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let result = runtime.block_on(serve(config, ports_file, source));
    // Calls in flight and the last COMMITs were awaited by `serve`; what
    // may still run on blocking threads is the lock service's calls to
    // clients (SM_NOTIFY, GRANTED retries), which a stop abandons.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// A finite file-size limit (`ulimit -f`, `LimitFSIZE=`) is kept, but a
/// WRITE past it must fail with `NFS3ERR_FBIG` rather than end the server
/// (`SIGXFSZ`), and the operator should know that clients will see it.
fn mind_file_size_limit() {
    if let Err(e) = dionfs_sys::io::ignore_file_size_signal() {
        warn!(error = %e, "cannot ignore SIGXFSZ: a WRITE past the file-size limit would end the server");
    }
    if let Some(limit) = dionfs_sys::io::file_size_limit() {
        warn!(
            limit_bytes = limit,
            "this process has a file-size limit (RLIMIT_FSIZE): WRITEs past it answer NFS3ERR_FBIG, \
             and checksum and state files cannot grow past it either; raise it (ulimit -f, LimitFSIZE=) \
             unless that is intended"
        );
    }
}

/// Each client connection and each cached open file holds descriptors; the
/// usual soft limit of 1024 would cap a server at a few hundred clients.
fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            warn!(error = %e, "cannot raise the open-file limit");
        }
    }
}

/// How often the registrations with the host's rpcbind are checked.
const REGISTRATION_CHECK: Duration = Duration::from_secs(10);

fn bind(ip: std::net::IpAddr, port: u16, what: &str) -> Result<TcpListener, String> {
    let listen = || {
        let s = socket(SocketAddr::new(ip, port), socket2::Type::STREAM)?;
        s.listen(1024)?;
        TcpListener::from_std(s.into())
    };
    listen().map_err(|e| {
        let (flag, holder) = port_holder(what, port);
        format!(
            "cannot listen for {what} on {ip}:{port}: {e}{}",
            taken_hint(&e, flag, holder)
        )
    })
}

/// For `what`'s `port` taken: the flag that moves dionfs elsewhere and
/// what probably holds the port.
fn port_holder(what: &str, port: u16) -> (&'static str, &'static str) {
    match (what, port) {
        ("NFS", 2049) => (
            "--nfs-port N (nfs_port)",
            "the kernel's NFS server (nfs-kernel-server, knfsd) or another dionfs",
        ),
        ("NFS", _) => ("--nfs-port N (nfs_port)", "another NFS server or dionfs"),
        ("MOUNT", 20048) => (
            "--mount-port N (mount_port)",
            "the kernel NFS server's rpc.mountd (nfs-kernel-server) or another dionfs",
        ),
        ("MOUNT", _) => ("--mount-port N (mount_port)", "another dionfs or mountd"),
        ("portmap", _) => (
            "--portmap-port N or --no-portmap (portmap_port)",
            "rpcbind or another dionfs",
        ),
        ("NLM", _) => (
            "--nlm-port N (nlm_port), or 0 for any free port",
            "another dionfs or the kernel's lockd",
        ),
        _ => ("its port flag", "another program"),
    }
}

/// For an address already in use: what probably holds it and the flag
/// that moves dionfs elsewhere (empty for other errors).
fn taken_hint(e: &std::io::Error, flag: &str, holder: &str) -> String {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        format!(
            " (probably held by {holder}: stop it, or move dionfs with {flag}; \
             `ss -ltnp` shows the holder)"
        )
    } else {
        String::new()
    }
}

/// A UDP socket on `ip`, `port`.
fn bind_udp(ip: std::net::IpAddr, port: u16) -> std::io::Result<UdpSocket> {
    UdpSocket::from_std(socket(SocketAddr::new(ip, port), socket2::Type::DGRAM)?.into())
}

/// A non-blocking socket bound to `addr`. On the IPv6 any-address (`listen
/// = "::"`) it takes IPv4 clients too, as knfsd listens, whatever
/// `net.ipv6.bindv6only` says; they are seen by their IPv4 addresses
/// ([`dionfs_transport::canonical`]).
fn socket(addr: SocketAddr, kind: socket2::Type) -> std::io::Result<socket2::Socket> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), kind, None)?;
    if addr.ip() == std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED) {
        s.set_only_v6(false)?;
    }
    if kind == socket2::Type::STREAM {
        // As std binds listeners: a restart finds its ports in TIME_WAIT.
        s.set_reuse_address(true)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    Ok(s)
}

async fn serve(
    config: Config,
    ports_file: Option<PathBuf>,
    source: Option<ConfigSource>,
) -> Result<(), String> {
    // Watched from the start: a SIGHUP while the exports open is applied
    // once they serve, rather than ending the process (its default).
    // Streams rather than one-off futures: a signal that comes during a
    // reload is kept for the loop below.
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot watch SIGINT: {e}"))?;
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let mut hangup =
        signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
    let server = Arc::new(Server::open(&config)?);
    let calls = Arc::new(callstats::CallStats::new(dispatch::counted_programs()));
    let settings = &config.server;
    let ip = settings.listen;
    let nfs = bind(ip, settings.nfs_port, "NFS")?;
    let mount = bind(ip, settings.mount_port, "MOUNT")?;
    let mut portmap_taken = false;
    let portmap = match settings.portmap_port {
        None => None,
        Some(port) => match bind(ip, port, "portmap") {
            Ok(l) => Some(l),
            Err(e) => {
                portmap_taken = true;
                if port != dionfs_proto::portmap::PORT {
                    warn!("{e}; running without a portmapper (clients need port= and mountport=)");
                }
                None
            }
        },
    };
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).unwrap_or(0);
    let (nfs_port, mount_port) = (port(&nfs), port(&mount));
    let portmap_port = portmap.as_ref().map(port);
    // The port mapper over UDP too (sm-notify and some mount helpers ask
    // over UDP), on the port the TCP one got.
    let portmap_udp = match portmap_port {
        Some(p) => match bind_udp(ip, p) {
            Ok(s) => Some(s),
            Err(e) => {
                warn!(error = %e, port = p, "cannot serve the port mapper over UDP; TCP only");
                None
            }
        },
        None => None,
    };
    // The lock tables, whichever programs lock; and the lock service: NLM
    // (and NSM) over TCP, NSM over UDP.
    let (shared_locks, released) = locks::Locks::new();
    let shared_locks = Arc::new(shared_locks);
    let locks = if settings.nlm {
        let tcp = bind(ip, settings.nlm_port, "NLM")?;
        let udp = bind_udp(ip, settings.nsm_port).map_err(|e| {
            format!(
                "cannot listen for NSM on {ip}:{} (UDP): {e}",
                settings.nsm_port
            )
        })?;
        let service = nlm::LockService::start(
            server.clone(),
            shared_locks.clone(),
            released,
            &settings.state_dir,
            calls.clone(),
        )?;
        Some((tcp, udp, service))
    } else {
        None
    };
    let (nlm_port, nsm_port) = match &locks {
        Some((tcp, udp, _)) => (
            Some(port(tcp)),
            Some(udp.local_addr().map(|a| a.port()).unwrap_or(0)),
        ),
        None => (None, None),
    };
    let mut programs = PortmapTable::programs(nfs_port, mount_port, settings.versions);
    if let (Some(nlm_port), Some(nsm_port)) = (nlm_port, nsm_port) {
        programs.extend(nlm::mappings(nlm_port, nsm_port));
    }
    // Port 111 taken: the host's rpcbind, most likely. Register with it.
    let registered = if portmap_taken && settings.portmap_port == Some(dionfs_proto::portmap::PORT)
    {
        match rpcbind::update(programs.clone(), ip, true).await {
            Ok(()) => {
                info!("port 111 is the host's rpcbind: NFS, MOUNT, NLM and NSM registered with it");
                true
            }
            Err(e) => {
                warn!(error = %e, "port 111 is taken and rpcbind cannot be registered with; \
                    running without a portmapper (clients need port= and mountport=)");
                false
            }
        }
    } else {
        false
    };

    // What rpcbind loses (a restart without its warm-start file, rpc.statd
    // unsetting NSM as it stops) is set again within REGISTRATION_CHECK.
    let keep_registered = registered.then(|| {
        let (programs, ip) = (programs.clone(), ip);
        let (quit, mut quitting) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            static UNREACHABLE: LogEvery = LogEvery::new(Duration::from_secs(600));
            let mut tick = tokio::time::interval(REGISTRATION_CHECK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                // Stopped only between checks: one under way finishes before
                // the server unregisters, and cannot set anything after it.
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut quitting => return,
                }
                match rpcbind::restore(programs.clone(), ip).await {
                    Ok(0) => {}
                    Ok(n) => info!(
                        registrations = n,
                        "the host's rpcbind had lost some of dionfs's registrations (it \
                         restarted, or a service such as rpc-statd unset them as it stopped); \
                         set them again"
                    ),
                    Err(e) if UNREACHABLE.due() => warn!(error = %e,
                        "cannot reach the host's rpcbind to check dionfs's registrations \
                         (repeats are not logged for 10 minutes)"),
                    Err(_) => {}
                }
            }
        });
        (quit, task)
    });

    let max_transfer = server.max_args;
    // Checked by the command already; read again here (the files may have
    // changed since).
    // Without [tls], one that is off: a reload that adds [tls] turns it on.
    let tls = match &settings.tls {
        Some(files) => files.load().map_err(|e| format!("TLS: {e}"))?,
        None => dionfs_transport::TlsConfig::off(),
    };
    // A reload reads the certificate and key again into the same
    // configuration (rotation without a restart), or turns it on or off.
    let tls_reload = tls.clone();
    let limits = ConnLimits {
        // The largest WRITE plus room for the RPC and NFS headers.
        max_record: max_transfer + 8192,
        max_in_flight: settings.connection_in_flight,
        buffer_share: settings.connection_buffers(),
        stall_timeout: settings.stall_timeout,
        reply_timeout: settings.reply_timeout,
        idle_timeout: settings.idle_timeout,
        idle_spin: settings.idle_spin,
        max_connections: settings.max_connections,
        tls: Some(tls),
        handshake_timeout: settings
            .tls
            .as_ref()
            .map_or(DEFAULT_HANDSHAKE_TIMEOUT, |t| t.handshake_timeout),
        // One count of connections (and one cap) for every listener.
        counters: server.net.clone(),
        ..ConnLimits::default()
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut tasks = tokio::task::JoinSet::new();
    // NFSv4's clients and sessions, when some minor version is served.
    let nfs4 = if settings.versions.v4() {
        let nfs4 = Arc::new(nfs4::Nfs4::new(
            settings,
            limits.max_record,
            shared_locks.clone(),
            server.grace.clone(),
            server.delegations.clone(),
        )?);
        nfs4.start_laundromat();
        if server.delegations.enabled() {
            match server.delegations.watch_local_opens(settings.lease_time) {
                Ok(()) => info!(
                    "NFSv4 delegations on: files delegated are watched for processes on the server"
                ),
                Err(e) => {
                    server.delegations.disable();
                    warn!(error = %e, "delegations = true, but processes on the server cannot be \
                        watched (fanotify needs CAP_SYS_ADMIN): no delegation will be granted");
                }
            }
        }
        Some(nfs4)
    } else {
        None
    };
    let nfs4_state = nfs4.as_ref().map(|n| n.state.clone());
    // A reload drops NFSv4 state on removed exports too.
    let nfs4_reload = nfs4.clone();
    let dispatcher = Arc::new(dispatch::Dispatcher::new(
        server.clone(),
        calls.clone(),
        settings.versions,
        nfs4,
    ));
    tasks.spawn(dionfs_transport::serve(
        nfs,
        dispatcher.clone(),
        limits.clone(),
        stopped(stop_rx.clone()),
    ));
    tasks.spawn(dionfs_transport::serve(
        mount,
        dispatcher,
        limits.clone(),
        stopped(stop_rx.clone()),
    ));
    let small = ConnLimits {
        max_record: 64 * 1024,
        ..limits.clone()
    };
    // One ration of replies larger than their call for every UDP socket.
    let larger_replies = Arc::new(dionfs_transport::udp::LargerReplies::new(
        limits.counters.clone(),
    ));
    if let Some(l) = portmap {
        let table = PortmapTable::dionfs(
            portmap_port.unwrap_or(0),
            portmap_udp.is_some(),
            programs.clone(),
        );
        let service = Arc::new(PortmapService::new(table, calls.clone()));
        if let Some(udp) = portmap_udp {
            tasks.spawn(dionfs_transport::udp::serve(
                udp,
                service.clone(),
                larger_replies.clone(),
                stopped(stop_rx.clone()),
            ));
        }
        tasks.spawn(dionfs_transport::serve(
            l,
            service,
            small.clone(),
            stopped(stop_rx.clone()),
        ));
    }
    let lock_service = locks.as_ref().map(|(_, _, service)| service.clone());
    if let Some((tcp, udp, service)) = locks {
        tasks.spawn(dionfs_transport::udp::serve(
            udp,
            service.clone(),
            larger_replies,
            stopped(stop_rx.clone()),
        ));
        tasks.spawn(dionfs_transport::serve(
            tcp,
            service,
            small,
            stopped(stop_rx.clone()),
        ));
    }
    tokio::spawn(expire_readahead(server.clone()));
    if let Some(store) = server.reload_state().checksum_store() {
        let served = server.clone();
        tokio::spawn(integrity::settle_idle(store.clone(), move || {
            served.exports()
        }));
    }
    if let Some(ring) = &server.io_ring {
        tokio::spawn(drive_ring(ring.clone()));
    }
    if let Some(addr) = settings.metrics_listen {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                let mut registry =
                    metrics::registry(server.clone(), lock_service.clone(), calls.clone());
                if let Some(state) = &nfs4_state {
                    metrics::register_nfs4(&mut registry, state.clone());
                }
                let endpoints = metrics::Endpoints {
                    registry,
                    server: server.clone(),
                    locks: lock_service.clone(),
                    nfs4: nfs4_state,
                };
                tokio::spawn(metrics::serve(l, endpoints));
            }
            // The default address taken: another dionfs has it, most
            // likely; serving without metrics beats not serving.
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && addr.to_string() == metrics::STATS_ADDRESS =>
            {
                warn!(%addr, "cannot listen for metrics: the address is taken (another dionfs \
                    serve?); serving without metrics, so `dionfs stats`, `exportfs -v` and \
                    `clients` do not reach this server: give it --metrics ADDR:PORT \
                    (metrics_listen) of its own");
            }
            Err(e) => {
                return Err(format!(
                    "cannot listen for metrics on {addr}: {e}{}",
                    taken_hint(&e, "--metrics ADDR:PORT (metrics_listen)", "another dionfs")
                ))
            }
        }
    }
    for x in server.exports().iter() {
        log_export(&x.config);
    }
    let versions = &settings.versions;
    let served: Vec<&str> = [
        (versions.v3, "3"),
        (versions.v4_0, "4.0"),
        (versions.v4_1, "4.1"),
        (versions.v4_2, "4.2"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    // A service that is off is named as off, not as a missing number.
    let port_or_off = |p: Option<u16>| p.map_or_else(|| "off".to_string(), |p| p.to_string());
    info!(%ip, nfs_port, mount_port, portmap_port = %port_or_off(portmap_port),
        nlm_port = %port_or_off(nlm_port), nsm_udp_port = %port_or_off(nsm_port),
        nfs_versions = %served.join(","), "dionfs serving NFS over TCP");
    info!(
        read_buffers = settings.read_buffers(),
        write_buffers = settings.write_buffers(),
        connection_buffers = limits.buffer_share,
        max_connections = limits.max_connections,
        stall_timeout_s = limits.stall_timeout.as_secs_f64(),
        reply_timeout_s = limits.reply_timeout.as_secs_f64(),
        idle_timeout_s = limits.idle_timeout.as_secs_f64(),
        idle_spin_us = limits.idle_spin.as_micros() as u64,
        "connection limits"
    );
    if let Some(path) = ports_file {
        let opt = |p: Option<u16>| p.map_or("null".to_string(), |p| p.to_string());
        let json = format!(
            "{{\"nfs\": {nfs_port}, \"mount\": {mount_port}, \"portmap\": {}, \"nlm\": {}, \"nsm\": {}}}\n",
            opt(portmap_port),
            opt(nlm_port),
            opt(nsm_port),
        );
        dionfs_sys::private::replace(&path, json.as_bytes(), Durability::Atomic)
            .map_err(|e| format!("cannot write ports file {}: {e}", path.display()))?;
    }
    let pid_file = settings.pid_file.clone();
    if let Some(path) = &pid_file {
        // An earlier server's reload outcome is not this one's (gone before
        // the pid file names this server: it may have had the same pid).
        let _ = std::fs::remove_file(reload::Outcome::file(path));
        write_pid_file(path)?;
    }
    let mut reloads = 0;

    let source = source.map(Arc::new);
    let ready = |server: &Server| {
        format!(
            "READY=1\nSTATUS=serving {} export(s) on {ip}, NFS port {nfs_port}",
            server.exports().len()
        )
    };
    if let Some(locks) = &lock_service {
        locks.notify_restart();
    }
    systemd::notify(&ready(&server));
    loop {
        tokio::select! {
            _ = interrupt.recv() => {
                info!("SIGINT: shutting down");
                break;
            }
            _ = term.recv() => {
                info!("SIGTERM: shutting down");
                break;
            }
            _ = hangup.recv() => {
                reloads += 1;
                let record = |phase, text: String| {
                    let Some(path) = &pid_file else {
                        return;
                    };
                    let outcome = reload::Outcome {
                        pid: std::process::id(),
                        generation: reloads,
                        phase,
                        text,
                    };
                    if let Err(e) = outcome.write(path) {
                        warn!(error = %e, file = %reload::Outcome::file(path).display(),
                            "cannot record the reload's outcome for `dionfs reload`");
                    }
                };
                record(reload::Phase::Running, String::new());
                systemd::notify(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
                let (ok, text) = reload(&server, source.as_ref(), &shared_locks, nfs4_reload.as_deref(), &tls_reload).await;
                systemd::notify(&ready(&server));
                let phase = if ok { reload::Phase::Applied } else { reload::Phase::Failed };
                record(phase, text);
            }
        }
    }
    systemd::notify("STOPPING=1");
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    if let Some((quit, task)) = keep_registered {
        let _ = quit.send(());
        let _ = task.await;
    }
    if registered {
        match rpcbind::update(programs, ip, false).await {
            Ok(()) => info!("unregistered from the host's rpcbind"),
            Err(e) => warn!(error = %e, "cannot unregister from the host's rpcbind"),
        }
    }
    let settling = server.clone();
    let last_commit = move || {
        if let Some(store) = settling.reload_state().checksum_store() {
            integrity::commit_before_stop(store, &settling.exports());
        }
    };
    if let Err(e) = tokio::task::spawn_blocking(last_commit).await {
        error!(error = %e, "integrity: the last COMMIT before stopping failed");
    }
    if let Some(path) = &pid_file {
        if reload::Outcome::read(path).is_some_and(|o| o.pid == std::process::id()) {
            let _ = std::fs::remove_file(reload::Outcome::file(path));
        }
        remove_pid_file(path);
    }
    info!("stopped");
    Ok(())
}

/// Logs an export's main options (at start, and as a reload adds or
/// changes it): one line per client entry.
fn log_export(x: &dionfs_core::export::ExportConfig) {
    for entry in &x.entries {
        let o = &entry.options;
        info!(
            export = %x.path.display(),
            read_mode = %x.read_mode,
            write_mode = %x.write_mode,
            access = %o.access,
            squash = %o.squash,
            secure = o.secure,
            clients = %entry.clients.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
            "exporting"
        );
    }
}

/// SIGHUP: reads the configuration again from `source` and applies its
/// exports (`Server::reload`), on a blocking thread (it opens file
/// systems). A file that does not load, or a reload that fails, leaves the
/// exports as they were, and says why as a start would. Returns whether it
/// was applied, and what changed or why nothing did, for `dionfs reload`.
async fn reload(
    server: &Arc<Server>,
    source: Option<&Arc<ConfigSource>>,
    locks: &locks::Locks,
    nfs4: Option<&nfs4::Nfs4>,
    tls: &dionfs_transport::TlsConfig,
) -> (bool, String) {
    let Some(source) = source else {
        let why = "the server was started without --config; there is nothing to reload \
                   (serving on as before)";
        warn!("SIGHUP: {why}");
        return (false, why.to_string());
    };
    info!(config = %source.file.display(), "SIGHUP: reloading the configuration");
    let (server, source, tls) = (server.clone(), source.clone(), tls.clone());
    let done = tokio::task::spawn_blocking(move || {
        let config = source.load()?;
        let tls_files = config.server.tls.clone();
        server.reload(config).map(|mut report| {
            // The certificate and key again (the same files, rotated, or
            // others): a connection's next handshake presents them; files
            // that cannot be used leave the running ones. A [tls] table
            // added turns TLS on, one removed turns it off: connections in
            // TLS keep it either way.
            let was_on = tls.is_on();
            match tls_files {
                Some(files) => match files.load() {
                    Ok(new) => tls.replace(&new),
                    Err(e) if was_on => report.warnings.push(format!(
                        "TLS: {e}; the certificate and key in use stay until a reload reads \
                         usable ones"
                    )),
                    Err(e) => report.warnings.push(format!(
                        "TLS: {e}; TLS stays off until a reload reads usable files"
                    )),
                },
                None => tls.turn_off(),
            }
            match (was_on, tls.is_on()) {
                (false, true) => info!(
                    "reload: RPC-with-TLS is on: clients that probe for it switch to TLS from \
                     now on"
                ),
                (true, false) => info!(
                    "reload: RPC-with-TLS is off: probes are refused from now on; connections \
                     in TLS keep it"
                ),
                _ => {}
            }
            (report, server)
        })
    })
    .await;
    match done {
        Ok(Ok((report, server))) => {
            for warning in &report.warnings {
                warn!("reload: {warning}");
            }
            let exports = server.exports();
            for x in exports.iter() {
                let path = &x.config.path;
                if report.added.contains(path) || report.changed.iter().any(|(p, _)| p == path) {
                    log_export(&x.config);
                }
            }
            info!(exports = exports.len(), "reloaded: {}", report.summary());
            // NFSv4's opens first: they release their locks and
            // reservations through the tables, then NLM's go.
            let opens = nfs4.map_or(0, |n| n.release_exports(&report.removed_ids));
            if opens > 0 {
                warn!(
                    opens,
                    "reload: released the NFSv4 opens and locks held on files of the removed \
                     exports (their clients can no longer reach the files to close them)"
                );
            }
            let released = locks.release_exports(&report.removed_ids);
            if released != (0, 0) {
                warn!(
                    locks = released.0,
                    share_reservations = released.1,
                    "reload: released the NLM locks held on files of the removed exports \
                     (their clients can no longer reach the files to unlock them)"
                );
            }
            let mut text = report.summary();
            for warning in &report.warnings {
                text.push_str("; ");
                text.push_str(warning);
            }
            (true, text)
        }
        Ok(Err(e)) => {
            error!("reload failed, the exports stay as they were: {e}");
            (false, e)
        }
        Err(e) => {
            error!(error = %e, "reload failed, the exports stay as they were");
            (false, e.to_string())
        }
    }
}

/// The monotonic clock in microseconds, which systemd wants beside
/// `RELOADING=1` (sd_notify(3)).
fn monotonic_usec() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (now.tv_sec as u64) * 1_000_000 + (now.tv_nsec as u64) / 1000
}

/// Writes this process's id to `path` (for `dionfs reload`), whole or not
/// at all, owner-only.
fn write_pid_file(path: &Path) -> Result<(), String> {
    let pid = format!("{}\n", std::process::id());
    dionfs_sys::private::replace(path, pid.as_bytes(), Durability::Atomic)
        .map_err(|e| format!("cannot write pid file {}: {e}", path.display()))
}

/// Removes the pid file at a clean stop, unless another server has
/// written its own there since.
fn remove_pid_file(path: &Path) {
    let ours =
        std::fs::read_to_string(path).is_ok_and(|s| s.trim() == std::process::id().to_string());
    if ours {
        if let Err(e) = std::fs::remove_file(path) {
            warn!(error = %e, file = %path.display(), "cannot remove the pid file");
        }
    }
}

/// Drives the io_uring of direct READs and WRITEs (see
/// `dionfs_sys::uring::drive`): runs until the process ends.
async fn drive_ring(ring: Arc<IoRing>) {
    let e = dionfs_sys::uring::drive(ring).await;
    // Calls already submitted would never finish: stop rather than hang
    // every client.
    error!(error = %e, "cannot watch the io_uring eventfd; exiting");
    std::process::exit(1);
}

/// Returns the buffers of prefetched data no READ came for (a sequential
/// reader that stopped or went away) to the pools, a few times per
/// [`dionfs_dataplane::READAHEAD_MAX_AGE`], so the pools never stay
/// drained by readahead; every [`UNLINKED_SWEEP`] closes the cached
/// files deleted behind the server's back, so their space comes back; and
/// at each tick, if any wait, syncs the written files the open-file cache
/// let go of before they close ([`dionfs_fs::OpenFileCache::sync_evicted`]).
/// Runs until the process ends.
async fn expire_readahead(server: Arc<Server>) {
    let mut tick = tokio::time::interval(dionfs_dataplane::READAHEAD_MAX_AGE / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sweep = tokio::time::Instant::now();
    let mut sweeping: Option<tokio::task::JoinHandle<usize>> = None;
    let mut syncing: Option<tokio::task::JoinHandle<usize>> = None;
    loop {
        tick.tick().await;
        for export in server.exports().iter() {
            export.data.expire_readahead();
        }
        server.reload_state().sweep();
        if last_sweep.elapsed() >= UNLINKED_SWEEP
            && sweeping.as_ref().is_none_or(|s| s.is_finished())
        {
            last_sweep = tokio::time::Instant::now();
            // One fstat per cached file (up to `open_files`): off the
            // workers.
            let cache = server.reload_state().cache().clone();
            sweeping = Some(tokio::task::spawn_blocking(move || cache.close_unlinked()));
        }
        // Syncs of written files the open-file cache let go of: on their
        // own thread, so that a slow one delays no other sweep.
        if syncing.as_ref().is_none_or(|s| s.is_finished())
            && server.reload_state().cache().files_waiting()
        {
            let cache = server.reload_state().cache().clone();
            syncing = Some(tokio::task::spawn_blocking(move || cache.sync_evicted()));
        }
    }
}

/// How often the open-file cache is searched for files deleted behind the
/// server's back ([`dionfs_fs::OpenFileCache::close_unlinked`]).
const UNLINKED_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    /// A taken port names what probably holds it and the flag that moves
    /// dionfs elsewhere; other errors get no such guess.
    #[tokio::test]
    async fn a_taken_port_names_its_probable_holder_and_the_flag() {
        assert!(port_holder("NFS", 2049).1.contains("nfs-kernel-server"));
        assert!(port_holder("portmap", 111).1.contains("rpcbind"));
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = held.local_addr().unwrap().port();
        let e = bind("127.0.0.1".parse().unwrap(), port, "MOUNT").unwrap_err();
        assert!(
            e.starts_with(&format!("cannot listen for MOUNT on 127.0.0.1:{port}: ")),
            "{e}"
        );
        assert!(
            e.contains("probably held by another dionfs or mountd"),
            "{e}"
        );
        assert!(e.contains("--mount-port N"), "{e}");
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(taken_hint(&other, "--nfs-port N", "knfsd"), "");
    }
}
