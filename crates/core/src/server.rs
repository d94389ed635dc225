//! The server's shared state: the exports served, the write verifier, the
//! reply cache, the grace period, the io_uring and its credentials, and
//! what a reload needs. Every program's handlers take it; dispatch
//! (`dispatch.rs`) hands calls to them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use dionfs_dataplane::IoRing;
use dionfs_fs::{ExportFs, MacKey, OpenFileCache};
use dionfs_sys::cred::{with_creds, Creds};
use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::drc::DuplicateRequestCache;
use crate::export::Config;
use crate::exports::{open_export, Export, Exports};
use dionfs_logs::{ClientWarnings, CLIENT_WARN_EVERY};
use dionfs_transport::{ConnInfo, NetCounters};

/// Everything the NFS and MOUNT programs share.
pub struct Server {
    /// The exports served now; replaced whole by a reload.
    exports: ArcSwap<Exports>,
    pub drc: DuplicateRequestCache,
    /// Random per start; see [`Server::write_verifier`].
    verifier_base: u64,
    /// Largest WRITE payload accepted: the largest export's max_transfer
    /// at start. (The other procedures' arguments are bounded by
    /// [`NfsProc3::max_args_len`]; the record limit is set from this, so
    /// a reload cannot raise it.)
    pub max_args: u32,
    calls_failed: AtomicU64,
    /// Calls refused because their arguments were longer than the
    /// procedure's can be.
    oversized_args: AtomicU64,
    insecure_port_warnings: ClientWarnings,
    /// Clients refused for their address, MNT calls and NFS calls apart:
    /// one warning per client and export every [`CLIENT_WARN_EVERY`].
    pub refused_mount_warnings: ClientWarnings,
    pub refused_call_warnings: ClientWarnings,
    /// The connection layer's counters, shared by every listener.
    pub net: Arc<NetCounters>,
    /// Direct READs and aligned direct WRITEs go through this io_uring from
    /// the connection's own task (no blocking thread); `None` where
    /// io_uring is unavailable. Driven by `lib.rs`'s `drive_ring`.
    pub io_ring: Option<Arc<IoRing>>,
    /// The ring's registered credentials (personalities), one per caller
    /// identity WRITEs were made as; see [`Server::ring_personality`].
    personalities: Mutex<HashMap<Creds, u16>>,
    /// The grace period after a restart, one for every program.
    pub grace: Arc<crate::grace::Grace>,
    /// The NFSv4 delegations every program's conflicting calls recall.
    pub delegations: Arc<crate::delegations::Delegations>,
    /// What a reload needs to open exports as the start did.
    reload: crate::reload::ReloadState,
    /// Memory for the starts of WRITE payloads a client's closed receive
    /// window keeps from arriving whole before a buffer is taken
    /// ([`dionfs_transport::stage_payload`]).
    pub staging: dionfs_transport::StagingBudget,
    /// READ, WRITE and COMMIT failures left to log this minute.
    pub io_error_logs: crate::io_errors::IoErrorLogs,
    /// Held (`flock`) while the server runs: see [`lock_state_dir`].
    _state_lock: std::fs::File,
}

/// Takes the state directory for this server alone: an exclusive `flock`
/// on `STATE_DIR/lock`, which holds this process's id. Two servers on one
/// state directory (two instances started with the default one, say) each
/// rewrote the other's NSM state and record of the clients holding locks:
/// after a restart one of them sent no SM_NOTIFY to its own clients, which
/// then never reclaimed their locks, while the server held none for them.
fn lock_state_dir(dir: &std::path::Path) -> Result<std::fs::File, String> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("lock");
    let mut file = dionfs_sys::private::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        let holder = holder.trim();
        let holder = if holder.is_empty() { "?" } else { holder };
        return Err(format!(
            "state directory {} is in use by another dionfs server (pid {holder}): give each \
             server a state directory of its own (--state-dir, state_dir) ({e})",
            dir.display()
        ));
    }
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

/// Makes the state directory owner-only, as this version creates it
/// (`dionfs_sys::private`): versions before it ran with umask 0 and made
/// `nlm/`, `integrity/` and its subdirectories 0777 and `nlm/hosts`,
/// `nlm/state` 0666, so any local user could rewrite the record of lock
/// clients or replace checksum files. Logs what it changed.
fn tighten_state_dir(dir: &std::path::Path) -> Result<(), String> {
    let mut changed = dionfs_sys::private::tighten(dir).map_err(|e| {
        format!(
            "cannot make the state directory {} owner-only: {e}",
            dir.display()
        )
    })?;
    if changed.is_empty() {
        return Ok(());
    }
    changed.sort_by(|a, b| a.path.cmp(&b.path));
    let shown: Vec<String> = changed
        .iter()
        .take(16)
        .map(|t| {
            let name = t.path.strip_prefix(dir).unwrap_or(&t.path);
            let name = if name.as_os_str().is_empty() {
                ".".into()
            } else {
                name.display().to_string()
            };
            format!("{name} {:04o}->{:04o}", t.from, t.to)
        })
        .collect();
    warn!(
        state_dir = %dir.display(),
        entries = changed.len(),
        changed = %shown.join(", "),
        "the state directory was open to other local users (left so by an earlier \
         version); made it owner-only (directories 0700, files 0600)"
    );
    let foreign: Vec<&dionfs_sys::private::Tightened> = changed
        .iter()
        .filter(|t| t.foreign_owner.is_some())
        .collect();
    for t in foreign.iter().take(8) {
        warn!(
            file = %t.path.display(),
            owner = t.foreign_owner.unwrap_or_default(),
            "a file in the state directory was created by another user while it was open to \
             all: now the server's, but its contents may be forged; remove it if unsure \
             (nlm/: lock clients are not notified of this restart; integrity/: run \
             `dionfs scrub` to check the export)"
        );
    }
    if foreign.len() > 8 {
        warn!(
            more = foreign.len() - 8,
            "more files in the state directory were created by another user"
        );
    }
    Ok(())
}

/// [`Server::staging`]'s size: room for the first 64 KiB window of 2,048
/// connections' payloads (a stalled one holds its share until the stall
/// timeout drops it); spent, payloads are read into their pool buffers.
pub const STAGING_BUDGET: usize = 128 << 20;

impl Server {
    /// Opens every export of `config` (file systems, data planes) with the
    /// handle key from the state directory.
    pub fn open(config: &Config) -> Result<Server, String> {
        let dir = &config.server.state_dir;
        dionfs_sys::private::create_dir_all(dir)
            .map_err(|e| format!("cannot create state directory {}: {e}", dir.display()))?;
        let state_lock = lock_state_dir(dir)?;
        tighten_state_dir(dir)?;
        let key = MacKey::load_or_create(dir).map_err(|e| {
            format!(
                "cannot load the file-handle key from {}: {e}",
                dir.display()
            )
        })?;
        let cache = Arc::new(OpenFileCache::new(config.server.open_files));
        let mut filesystems = Vec::new();
        for x in &config.exports {
            let fs = ExportFs::open(&x.path, x.id, key.clone(), cache.clone())
                .map_err(|e| format!("cannot open export {}: {e}", x.path.display()))?;
            filesystems.push(fs);
        }
        let store = crate::integrity::open(config, &mut filesystems)?;
        let mut exports = Vec::new();
        for (x, fs) in config.exports.iter().zip(filesystems) {
            exports.push(Arc::new(open_export(&config.server, x, Arc::new(fs))?));
        }
        let max_args = config
            .exports
            .iter()
            .map(|x| x.max_transfer)
            .max()
            .unwrap_or(0);
        // Room for every READ and WRITE buffer of every export in the
        // kernel at once (the large and the small pools); beyond that a
        // call takes the blocking path.
        let buffers = config.server.read_buffers()
            + config.server.write_buffers()
            + 2 * config.server.small_buffers;
        let ring_depth = (config.exports.len() * buffers).min(4096) as u32;
        let io_ring = if !config.server.io_uring {
            info!("io_uring off (io_uring = false): every call runs on blocking threads");
            None
        } else {
            // A fixed (pre-pinned) slot for every pool buffer, within the
            // kernel's limit on registered buffers.
            let fixed = (config.exports.len() * buffers).min(16384) as u16;
            // A ring for each runtime worker (tokio makes one per CPU),
            // so that they do not wait for each other's submissions
            // (`dionfs_sys::uring`).
            let rings = std::thread::available_parallelism().map_or(1, |n| n.get());
            match IoRing::with_rings(rings, ring_depth, fixed) {
                Ok(ring) => {
                    let ring = Arc::new(ring);
                    for export in &exports {
                        export.data.register_buffers(&ring);
                    }
                    info!(
                        rings = ring.rings(),
                        depth = ring_depth,
                        fixed_buffers = ring.fixed_slots(),
                        "io_uring on"
                    );
                    Some(ring)
                }
                Err(e) => {
                    warn!(error = %e, "io_uring unavailable: direct READs and WRITEs run on blocking threads");
                    None
                }
            }
        };
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed)
            .map_err(|e| format!("no randomness for the write verifier: {e}"))?;
        let reload = crate::reload::ReloadState::new(&config.server, key, cache, store, &exports);
        Ok(Server {
            exports: ArcSwap::from_pointee(Exports::new(exports)),
            drc: DuplicateRequestCache::new(4096),
            verifier_base: u64::from_ne_bytes(seed),
            max_args,
            calls_failed: AtomicU64::new(0),
            oversized_args: AtomicU64::new(0),
            insecure_port_warnings: ClientWarnings::default(),
            refused_mount_warnings: ClientWarnings::default(),
            refused_call_warnings: ClientWarnings::default(),
            net: Arc::default(),
            io_ring,
            personalities: Mutex::default(),
            grace: Arc::new(crate::grace::Grace::new(config.server.grace_period)),
            delegations: Arc::new(crate::delegations::Delegations::new(
                config.server.delegations,
            )),
            reload,
            staging: dionfs_transport::StagingBudget::new(STAGING_BUDGET),
            io_error_logs: Default::default(),
            _state_lock: state_lock,
        })
    }

    /// The exports served now. A call takes them once, when it is
    /// received (one atomic load), and keeps them until it is answered.
    pub fn exports(&self) -> Arc<Exports> {
        self.exports.load_full()
    }

    /// What a reload needs, and the open-file cache and checksum store
    /// it keeps across reloads (for the server's periodic sweeps).
    pub fn reload_state(&self) -> &crate::reload::ReloadState {
        &self.reload
    }

    /// Applies `config` (re-read from the file the server started with):
    /// see [`crate::reload`]. Calls received from then on see the new
    /// exports; calls in flight finish with the exports they took.
    /// Blocking (opens file systems). `Err` when an added export cannot be
    /// opened: then nothing changed.
    pub fn reload(&self, config: Config) -> Result<crate::reload::Report, String> {
        let running = self.exports();
        self.reload.apply(
            config,
            &running,
            self.max_args,
            self.io_ring.as_ref(),
            |next| self.exports.store(Arc::new(next)),
        )
    }

    /// The WRITE/COMMIT verifier (RFC 1813 section 3.3.7): random per start,
    /// and moved on whenever a data plane lost a write (a short or failed
    /// write), so clients resend what they have not seen committed.
    pub fn write_verifier(&self) -> [u8; 8] {
        let generations: u64 = self
            .exports
            .load()
            .iter()
            .map(|x| x.data.write_verifier_generation())
            .sum();
        // Planes a reload retired count on, so that the verifier never
        // goes back to a value clients saw before a lost write.
        let generations = generations.wrapping_add(self.reload.retired_generations());
        // Written files the open-file cache closed with data a failed
        // writeback may have lost.
        let generations = generations.wrapping_add(self.reload.cache().lost_writes());
        self.verifier_base.wrapping_add(generations).to_be_bytes()
    }

    /// Counts a call that failed for the server's own reasons.
    pub fn note_server_fault(&self) {
        self.calls_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls answered SERVERFAULT because of the server itself.
    pub fn server_faults(&self) -> u64 {
        self.calls_failed.load(Ordering::Relaxed)
    }

    /// Counts an NFS or MOUNT call refused for arguments longer than its
    /// procedure's can be.
    pub fn note_oversized_args(&self) {
        self.oversized_args.fetch_add(1, Ordering::Relaxed);
    }

    /// NFS and MOUNT calls answered GARBAGE_ARGS because their arguments
    /// were longer than the procedure's can be.
    pub fn oversized_args(&self) -> u64 {
        self.oversized_args.load(Ordering::Relaxed)
    }

    /// The `secure` export option: whether the client of `conn` may use
    /// `export` from its source port, per the options of its client entry
    /// (see [`crate::export::port`]). A refusal is logged once per client and
    /// export every [`CLIENT_WARN_EVERY`], naming what to change; `what` says what
    /// was refused ("NFS call", "MNT").
    pub fn port_allowed(&self, export: &Export, conn: &ConnInfo, what: &str) -> bool {
        let peer = conn.peer;
        if export.options_for(conn).admits_port(peer.port()) {
            return true;
        }
        let now = Instant::now();
        if self
            .insecure_port_warnings
            .should_warn(peer.ip(), export.config.id, now)
        {
            warn!(
                client = %peer.ip(),
                port = peer.port(),
                export = %export.config.path.display(),
                repeat_after_s = CLIENT_WARN_EVERY.as_secs(),
                "{what} refused: the source port is not reserved (below 1024) and the export is \
                 `secure`; let the client use a reserved port (mount as root, without \
                 `noresvport`) or export with `secure = false` (--insecure)"
            );
        }
        false
    }
}

/// Personalities kept registered with the ring at most; past that they are
/// all dropped and registered again as needed (writes in flight keep their
/// own reference to their credentials).
const MAX_PERSONALITIES: usize = 1024;

impl Server {
    /// The ring personality for `creds`: the kernel credentials a thread
    /// switched to `creds` has (fsuid, fsgid, groups, and for a non-root
    /// user without root's capabilities; `sys::cred`), registered on first
    /// use. `None` if that fails (the write then runs on a blocking thread
    /// as those credentials).
    pub fn ring_personality(&self, ring: &IoRing, creds: &Creds) -> Option<u16> {
        let mut known = self.personalities.lock();
        if let Some(&id) = known.get(creds) {
            return Some(id);
        }
        if known.len() >= MAX_PERSONALITIES {
            for (_, id) in known.drain() {
                let _ = ring.unregister_personality(id);
            }
        }
        match with_creds(creds, || ring.register_personality()) {
            Ok(Ok(id)) => {
                known.insert(creds.clone(), id);
                Some(id)
            }
            Ok(Err(e)) | Err(e) => {
                debug!(error = %e, ?creds, "cannot register io_uring credentials");
                None
            }
        }
    }
}
