//! Reloading the configuration without a restart (`SIGHUP`, `dionfs
//! reload`, `systemctl reload dionfs`): the file the server was started
//! with is read again and its exports applied, while every connection and
//! every call in flight goes on.
//!
//! - An export is the same one across a reload when its id (what its file
//!   handles carry) and its path are the same.
//! - Unchanged: the very same [`Export`] (file system, data plane with its
//!   buffer pools; the open files and their range locks are the
//!   server-wide cache's and never depend on an export).
//! - Options changed: a new `Export` around the same file system; a new
//!   data plane only if the I/O modes or the transfer size changed (the
//!   pools are sized by it), new metadata commits only if `sync`/`async`
//!   did. Calls in flight finish with the options they started with.
//! - Added: opened as at start. Its pool buffers take the io_uring's
//!   fixed slots that freed buffers gave back; with none free, its ring
//!   I/O pins the pages of each operation instead.
//! - Removed: gone from the list, so MNT refuses it and its handles are
//!   `NFS3ERR_STALE`, as knfsd's are after `exportfs -r`. Calls in flight
//!   finish; its data plane is freed once its last buffer is back
//!   ([`ReloadState::sweep`]), and its buffers' fixed slots with it.
//! - The `[tls]` table: applied by the server, which reads the files
//!   again (a rotated certificate), turns TLS on for a table added and off
//!   for one removed; its `handshake_timeout` waits for a restart.
//! - Kept as they were, with a warning: the `[server]` settings (a restart
//!   applies them), and what was fixed at start: an export's `integrity`
//!   (its open files carry their checksums or not), a `max_transfer` above
//!   the largest at start (every connection's record limit), integrity
//!   for an added export when no export had it at start (the checksum
//!   store is opened and recovered before serving) or on a filesystem
//!   served without it (the other way round too).
//! - A file that does not load, or an export that cannot be opened,
//!   changes nothing; the error reads as it would at start.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use dionfs_dataplane::{DataPlane, IoRing};
use dionfs_fs::{ExportFs, MacKey, MetadataSync, OpenFileCache};
use dionfs_integrity::Store;
use parking_lot::Mutex;

use crate::export::config::DEFAULT_HANDSHAKE_TIMEOUT;
use crate::export::{
    ClientEntry, ClientMatch, ClientOptions, Config, Durability, ExportConfig, Integrity,
    ServerSettings, TlsFiles,
};
use crate::exports::{data_config, open_export, Export, Exports};

/// The outcome of a reload, as the server records it beside its pid file
/// (`PID.reload` for `PID.pid`: one line, `pid generation
/// running|ok|failed text`) so that `dionfs reload` (and `systemctl
/// reload`, which runs it) can wait for it and report it. `running` is
/// written before the file is read: a `dionfs reload` that finds a reload
/// running waits for the next one, which reads the file after its edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The server's process id (a file left by an earlier server is not
    /// this one's).
    pub pid: u32,
    /// Counts this server's reloads from 1.
    pub generation: u64,
    pub phase: Phase,
    /// What changed, or why nothing did.
    pub text: String,
}

/// Where a reload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Running,
    Applied,
    Failed,
}

impl Outcome {
    /// Where the outcomes of the server writing `pid_file` go.
    pub fn file(pid_file: &Path) -> PathBuf {
        pid_file.with_extension("reload")
    }

    /// Replaces the recorded outcome with this one, atomically (owner-only).
    pub fn write(&self, pid_file: &Path) -> io::Result<()> {
        let file = Self::file(pid_file);
        let word = match self.phase {
            Phase::Running => "running",
            Phase::Applied => "ok",
            Phase::Failed => "failed",
        };
        // One line: the text's own line breaks would end it.
        let text = self.text.replace('\n', " ");
        let line = format!("{} {} {word} {text}\n", self.pid, self.generation);
        dionfs_sys::private::replace(
            &file,
            line.as_bytes(),
            dionfs_sys::private::Durability::Atomic,
        )
    }

    /// The outcome recorded beside `pid_file`, if any is.
    pub fn read(pid_file: &Path) -> Option<Outcome> {
        let line = std::fs::read_to_string(Self::file(pid_file)).ok()?;
        let mut words = line.trim_end().splitn(4, ' ');
        let pid = words.next()?.parse().ok()?;
        let generation = words.next()?.parse().ok()?;
        let phase = match words.next()? {
            "running" => Phase::Running,
            "ok" => Phase::Applied,
            "failed" => Phase::Failed,
            _ => return None,
        };
        Some(Outcome {
            pid,
            generation,
            phase,
            text: words.next().unwrap_or("").to_string(),
        })
    }
}

/// Where a reload reads the configuration: the file `dionfs serve
/// --config` was started with, and the command line's settings applied
/// over it again, as at start.
pub struct ConfigSource {
    pub file: PathBuf,
    pub overrides: Box<dyn Fn(&mut Config) + Send + Sync>,
}

impl ConfigSource {
    /// The configuration as the file says now; a bad file's error names
    /// its line (`file:line: reason`), as at start.
    pub fn load(&self) -> Result<Config, String> {
        let mut config = Config::from_file(&self.file).map_err(|e| e.to_string())?;
        (self.overrides)(&mut config);
        config.check_xprtsec()?;
        Ok(config)
    }
}

/// How a reload treats one export of the new configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Served now (at this index of the running exports) with these very
    /// options: kept as it is.
    Same(usize),
    /// Served now (at index `old`) with other options, named.
    Changed {
        old: usize,
        options: Vec<&'static str>,
    },
    /// Not served now.
    Added,
}

/// What a reload would do, worked out from the running exports' options
/// and the new configuration's alone.
#[derive(Debug)]
pub struct Plan {
    /// The new configuration's exports, in its order, each with its step.
    pub exports: Vec<(ExportConfig, Step)>,
    /// Indexes of the running exports the new configuration drops.
    pub removed: Vec<usize>,
    /// What the new configuration asks and the reload does not do, in
    /// words for the log.
    pub warnings: Vec<String>,
}

/// Matches the new configuration's exports to the running ones (same id
/// and path) and works out what changed. What cannot change without a
/// restart is set back to what runs, with a warning: an export's
/// `integrity`, and a `max_transfer` above `max_transfer_limit` (the
/// largest at start: the connections' record limit), which is lowered to
/// it.
pub fn plan(running: &[ExportConfig], new: Vec<ExportConfig>, max_transfer_limit: u32) -> Plan {
    let mut warnings = Vec::new();
    let mut exports = Vec::new();
    for mut x in new {
        if x.max_transfer > max_transfer_limit {
            warnings.push(format!(
                "export {}: max_transfer {} is above the server's record limit, set at start \
                 from the largest max_transfer then ({max_transfer_limit}); serving {} until \
                 a restart",
                x.path.display(),
                x.max_transfer,
                max_transfer_limit
            ));
            x.max_transfer = max_transfer_limit;
        }
        let old = running
            .iter()
            .position(|r| r.id == x.id && r.path == x.path);
        let step = match old {
            None => Step::Added,
            Some(i) => {
                if x.integrity != running[i].integrity {
                    warnings.push(format!(
                        "export {}: integrity cannot change without a restart (its open files \
                         carry their checksums or not); it stays {}",
                        x.path.display(),
                        integrity_name(running[i].integrity)
                    ));
                    x.integrity = running[i].integrity;
                }
                let options = changed_options(&running[i], &x);
                if options.is_empty() {
                    Step::Same(i)
                } else {
                    Step::Changed { old: i, options }
                }
            }
        };
        exports.push((x, step));
    }
    let kept = |i: usize| {
        exports
            .iter()
            .any(|(_, s)| matches!(s, Step::Same(j) | Step::Changed { old: j, .. } if *j == i))
    };
    let removed: Vec<usize> = (0..running.len()).filter(|&i| !kept(i)).collect();
    for (x, step) in &exports {
        if *step != Step::Added {
            continue;
        }
        if let Some(&i) = removed.iter().find(|&&i| running[i].id == x.id) {
            warnings.push(format!(
                "export id {} was {}'s and is now {}'s: handles that {}'s clients still hold \
                 name files through {}",
                x.id,
                running[i].path.display(),
                x.path.display(),
                running[i].path.display(),
                x.path.display()
            ));
        }
    }
    Plan {
        exports,
        removed,
        warnings,
    }
}

fn integrity_name(i: Integrity) -> &'static str {
    match i {
        Integrity::Off => "off",
        Integrity::Crc32c => "crc32c",
    }
}

/// The options of an export that differ between `a` and `b`, by their
/// config names (for the log).
pub fn changed_options(a: &ExportConfig, b: &ExportConfig) -> Vec<&'static str> {
    // Taken apart field by field, so that an option added to ExportConfig
    // cannot be forgotten here.
    let ExportConfig {
        id,
        path,
        entries,
        max_transfer,
        read_mode,
        write_mode,
        durability,
        allow_devices,
        integrity,
    } = a;
    let clients = |x: &[ClientEntry]| -> Vec<Vec<ClientMatch>> {
        x.iter().map(|e| e.clients.clone()).collect()
    };
    // Each option of the client entries, by its config name: entry by
    // entry, so that a change in any one is named; when entries were
    // added or removed (named as `clients`), the values given at all,
    // so that an entry added for other clients with other access names
    // `access` and nothing else.
    let option = |x: &[ClientEntry], pick: fn(&ClientOptions) -> u64| -> Vec<u64> {
        x.iter().map(|e| pick(&e.options)).collect()
    };
    let same = |pick: fn(&ClientOptions) -> u64| {
        let (mut a, mut b) = (option(entries, pick), option(&b.entries, pick));
        if a.len() != b.len() {
            for values in [&mut a, &mut b] {
                values.sort_unstable();
                values.dedup();
            }
        }
        a == b
    };
    [
        ("id", *id == b.id),
        ("path", *path == b.path),
        ("clients", clients(entries) == clients(&b.entries)),
        ("access", same(|o| o.access as u64)),
        ("squash", same(|o| o.squash as u64)),
        ("anonuid", same(|o| u64::from(o.anonuid))),
        ("anongid", same(|o| u64::from(o.anongid))),
        ("secure", same(|o| u64::from(o.secure))),
        ("xprtsec", same(|o| u64::from(o.xprtsec.bits()))),
        ("max_transfer", *max_transfer == b.max_transfer),
        ("read_mode", *read_mode == b.read_mode),
        ("write_mode", *write_mode == b.write_mode),
        ("durability", *durability == b.durability),
        ("allow_devices", *allow_devices == b.allow_devices),
        ("integrity", *integrity == b.integrity),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(name, _)| name)
    .collect()
}

/// The `[server]` settings that differ between `running` and `new`, by
/// their config names: none of them can change without a restart.
pub fn changed_settings(running: &ServerSettings, new: &ServerSettings) -> Vec<&'static str> {
    // Taken apart field by field, so that a setting added to
    // ServerSettings cannot be forgotten here.
    let ServerSettings {
        listen,
        nfs_port,
        mount_port,
        portmap_port,
        state_dir,
        max_in_flight,
        read_buffers,
        write_buffers,
        connection_in_flight,
        connection_buffers,
        small_buffers,
        max_connections,
        stall_timeout,
        reply_timeout,
        idle_timeout,
        idle_spin,
        large_read_depth_mib,
        open_files,
        metrics_listen,
        io_uring,
        pid_file,
        nlm,
        nlm_port,
        nsm_port,
        grace_period,
        versions,
        lease_time,
        delegations,
        nfs4_reply_cache_mib,
        nfs4_id_domain,
        log_level,
        tls,
    } = running;
    [
        ("listen", *listen == new.listen),
        ("nfs_port", *nfs_port == new.nfs_port),
        ("mount_port", *mount_port == new.mount_port),
        ("portmap_port", *portmap_port == new.portmap_port),
        ("state_dir", *state_dir == new.state_dir),
        ("max_in_flight", *max_in_flight == new.max_in_flight),
        ("read_buffers", *read_buffers == new.read_buffers),
        ("write_buffers", *write_buffers == new.write_buffers),
        (
            "connection_in_flight",
            *connection_in_flight == new.connection_in_flight,
        ),
        (
            "connection_buffers",
            *connection_buffers == new.connection_buffers,
        ),
        ("small_buffers", *small_buffers == new.small_buffers),
        ("max_connections", *max_connections == new.max_connections),
        ("stall_timeout", *stall_timeout == new.stall_timeout),
        ("reply_timeout", *reply_timeout == new.reply_timeout),
        ("idle_timeout", *idle_timeout == new.idle_timeout),
        ("idle_spin_us", *idle_spin == new.idle_spin),
        (
            "large_read_depth_mib",
            *large_read_depth_mib == new.large_read_depth_mib,
        ),
        ("open_files", *open_files == new.open_files),
        ("metrics_listen", *metrics_listen == new.metrics_listen),
        ("io_uring", *io_uring == new.io_uring),
        ("pid_file", *pid_file == new.pid_file),
        ("nlm", *nlm == new.nlm),
        ("nlm_port", *nlm_port == new.nlm_port),
        ("nsm_port", *nsm_port == new.nsm_port),
        ("grace_period", *grace_period == new.grace_period),
        ("versions", *versions == new.versions),
        ("lease_time", *lease_time == new.lease_time),
        ("delegations", *delegations == new.delegations),
        (
            "nfs4_reply_cache_mib",
            *nfs4_reply_cache_mib == new.nfs4_reply_cache_mib,
        ),
        ("nfs4_id_domain", *nfs4_id_domain == new.nfs4_id_domain),
        ("log_level", *log_level == new.log_level),
        // TLS itself (on, off, the certificate, key and client CA) is the
        // server's `reload`'s to apply.
        (
            "handshake_timeout",
            handshake_timeout(tls) == handshake_timeout(&new.tls),
        ),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(name, _)| name)
    .collect()
}

/// The handshake timeout a server with `tls` runs with.
fn handshake_timeout(tls: &Option<TlsFiles>) -> std::time::Duration {
    tls.as_ref()
        .map_or(DEFAULT_HANDSHAKE_TIMEOUT, |t| t.handshake_timeout)
}

/// What one reload did, for the log.
#[derive(Debug, Default)]
pub struct Report {
    pub added: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    /// The ids of the exports removed (what their handles carry).
    pub removed_ids: Vec<u16>,
    /// Exports whose options changed, and which.
    pub changed: Vec<(PathBuf, Vec<&'static str>)>,
    pub unchanged: usize,
    /// Exports of the file that are not served (see the warnings).
    pub refused: Vec<PathBuf>,
    /// What the file asks and the reload did not do, in words.
    pub warnings: Vec<String>,
}

impl Report {
    /// One line: what was added, removed and changed.
    pub fn summary(&self) -> String {
        let paths = |v: &[PathBuf]| {
            v.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.added.is_empty() {
            parts.push(format!("added {}", paths(&self.added)));
        }
        if !self.removed.is_empty() {
            parts.push(format!("removed {}", paths(&self.removed)));
        }
        if !self.changed.is_empty() {
            let changed: Vec<String> = self
                .changed
                .iter()
                .map(|(p, what)| format!("{} ({})", p.display(), what.join(", ")))
                .collect();
            parts.push(format!("changed {}", changed.join(", ")));
        }
        if !self.refused.is_empty() {
            parts.push(format!("refused {}", paths(&self.refused)));
        }
        parts.push(format!("{} unchanged", self.unchanged));
        parts.join("; ")
    }
}

/// What the server keeps from its start for reloads, and the data planes
/// reloads retired.
pub struct ReloadState {
    /// The `[server]` settings the server started with (and runs with:
    /// a reload does not change them).
    settings: ServerSettings,
    key: MacKey,
    cache: Arc<OpenFileCache>,
    /// The checksum store, if an export had integrity at start.
    integrity: Option<Arc<Store>>,
    /// Every filesystem served since start (`ExportFs::fs_id`), and whether
    /// with checksums: its files may still be open in the shared cache,
    /// with their checksums or without, so an export added on it must
    /// agree.
    filesystems: Mutex<HashMap<u64, bool>>,
    /// Data planes of exports a reload removed (or replaced), kept until
    /// no call holds them and their buffers are all back: swept for
    /// expired readahead meanwhile, and counted in the write verifier.
    retired: ArcSwap<Vec<Arc<DataPlane>>>,
    /// The write-verifier generations of retired planes since freed.
    freed_generations: AtomicU64,
    /// One reload (or sweep of retired planes) at a time.
    lock: Mutex<()>,
}

impl ReloadState {
    pub(crate) fn new(
        settings: &ServerSettings,
        key: MacKey,
        cache: Arc<OpenFileCache>,
        integrity: Option<Arc<Store>>,
        exports: &[Arc<Export>],
    ) -> ReloadState {
        let filesystems = exports
            .iter()
            .map(|x| (x.fs.fs_id(), x.fs.has_integrity()))
            .collect();
        ReloadState {
            settings: settings.clone(),
            key,
            cache,
            integrity,
            filesystems: Mutex::new(filesystems),
            retired: ArcSwap::default(),
            freed_generations: AtomicU64::new(0),
            lock: Mutex::new(()),
        }
    }

    /// The server-wide open-file cache.
    pub fn cache(&self) -> &Arc<OpenFileCache> {
        &self.cache
    }

    /// The key of every file handle the server issues: its exports'
    /// (inside each `ExportFs`) and NFSv4's pseudo directories'
    /// (`dionfs_fs::handle::encode_pseudo`).
    pub fn handle_key(&self) -> &MacKey {
        &self.key
    }

    /// The checksum store, if it was opened at start.
    pub fn checksum_store(&self) -> Option<&Arc<Store>> {
        self.integrity.as_ref()
    }

    /// The write-verifier generations of every plane a reload retired:
    /// with those of the planes serving now, the sum never goes back.
    pub(crate) fn retired_generations(&self) -> u64 {
        let live: u64 = self
            .retired
            .load()
            .iter()
            .map(|p| p.write_verifier_generation())
            .sum();
        live.wrapping_add(self.freed_generations.load(Ordering::Acquire))
    }

    /// Expires the readahead of retired planes (their prefetched chunks
    /// hold their buffers) and frees those that no call holds any more and
    /// whose buffers are all back. Called periodically.
    pub fn sweep(&self) {
        let Some(_one) = self.lock.try_lock() else {
            return; // a reload runs; next time
        };
        let retired = self.retired.load_full();
        if retired.is_empty() {
            return;
        }
        let mut kept = Vec::new();
        for plane in retired.iter() {
            plane.expire_readahead();
            // Only the list refers to the plane: no export does, so no
            // call can start on it (a moment's second reference just
            // keeps it until the next sweep).
            if Arc::strong_count(plane) == 1 && plane.is_idle() {
                // Counted here before it leaves the list: the verifier may
                // count it twice for a moment, never not at all.
                self.freed_generations
                    .fetch_add(plane.write_verifier_generation(), Ordering::AcqRel);
            } else {
                kept.push(plane.clone());
            }
        }
        if kept.len() != retired.len() {
            self.retired.store(Arc::new(kept));
        }
    }

    /// How many retired planes wait to be freed.
    #[cfg(test)]
    fn retired_planes(&self) -> usize {
        self.retired.load().len()
    }

    /// Applies `config` (re-read from the file the server started with)
    /// to the exports `running` (served with WRITEs of at most
    /// `max_args`): see the module documentation. The new exports are
    /// handed to `publish` once the planes they no longer use are
    /// retired. Blocking (opens file systems). `Err` when an added export
    /// cannot be opened: then nothing changed.
    pub(crate) fn apply(
        &self,
        config: Config,
        running: &Exports,
        max_args: u32,
        ring: Option<&Arc<IoRing>>,
        publish: impl FnOnce(Exports),
    ) -> Result<Report, String> {
        let state = self;
        let _one = state.lock.lock();
        let mut report = Report::default();
        let settings = changed_settings(&state.settings, &config.server);
        if !settings.is_empty() {
            report.warnings.push(format!(
                "[server] {} changed: not applied until a restart",
                settings.join(", ")
            ));
        }
        let running_configs: Vec<ExportConfig> = running.iter().map(|x| x.config.clone()).collect();
        let plan = plan(&running_configs, config.exports, max_args);
        report.warnings.extend(plan.warnings);
        let mut filesystems = state.filesystems.lock().clone();
        let mut next = Vec::new();
        for (x, step) in plan.exports {
            match step {
                Step::Same(i) => {
                    next.push(running[i].clone());
                    report.unchanged += 1;
                }
                Step::Changed { old, options } => {
                    let path = x.path.clone();
                    let export = state.changed(&running[old], x, ring)?;
                    next.push(Arc::new(export));
                    report.changed.push((path, options));
                }
                Step::Added => match state.added(&x, &mut filesystems, ring)? {
                    Ok(export) => {
                        report.added.push(x.path.clone());
                        next.push(Arc::new(export));
                    }
                    Err(why) => {
                        report
                            .warnings
                            .push(format!("export {} not added: {why}", x.path.display()));
                        report.refused.push(x.path.clone());
                    }
                },
            }
        }
        report.removed = plan
            .removed
            .iter()
            .map(|&i| running[i].config.path.clone())
            .collect();
        // An id still served (an export moved to another path keeps its
        // handles working there) is not gone.
        report.removed_ids = plan
            .removed
            .iter()
            .map(|&i| running[i].config.id)
            .filter(|id| !next.iter().any(|x| x.config.id == *id))
            .collect();
        // Planes no export uses any more are retired before the exports
        // change: the write verifier may count them twice for a moment,
        // never not at all.
        let mut retired: Vec<Arc<DataPlane>> = state.retired.load().to_vec();
        for x in running.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(&n.data, &x.data)) {
                retired.push(x.data.clone());
            }
        }
        state.retired.store(Arc::new(retired));
        publish(Exports::new(next));
        *state.filesystems.lock() = filesystems;
        Ok(report)
    }

    /// The export `old` with the options `x`: the same file system, the
    /// same data plane unless the I/O modes or the transfer size changed,
    /// the same metadata commits unless `sync`/`async` did. A new plane's
    /// buffers are registered with `ring`.
    fn changed(
        &self,
        old: &Export,
        x: ExportConfig,
        ring: Option<&Arc<IoRing>>,
    ) -> Result<Export, String> {
        let o = &old.config;
        let data = if (o.read_mode, o.write_mode, o.max_transfer)
            == (x.read_mode, x.write_mode, x.max_transfer)
        {
            old.data.clone()
        } else {
            let plane = old
                .data
                .successor(data_config(&self.settings, &x))
                .map_err(|e| format!("export {}: {e}", x.path.display()))?;
            if let Some(ring) = ring {
                plane.register_buffers(ring);
            }
            Arc::new(plane)
        };
        let metadata_sync = if o.durability == x.durability {
            old.metadata_sync.clone()
        } else {
            let sync = MetadataSync::new(&old.fs, x.durability == Durability::Sync)
                .map_err(|e| format!("export {}: {e}", x.path.display()))?;
            Arc::new(sync)
        };
        Ok(Export {
            config: x,
            fs: old.fs.clone(),
            data,
            metadata_sync,
        })
    }

    /// Opens the export `x` a reload adds, as at start. The outer `Err`
    /// fails the whole reload (the export cannot be opened, as it would
    /// fail a start); the inner one refuses this export alone (integrity
    /// that cannot be set up live), saying why. `filesystems` learns the
    /// export's filesystem; its buffers are registered with `ring`.
    fn added(
        &self,
        x: &ExportConfig,
        filesystems: &mut HashMap<u64, bool>,
        ring: Option<&Arc<IoRing>>,
    ) -> Result<Result<Export, String>, String> {
        let mut fs = ExportFs::open(&x.path, x.id, self.key.clone(), self.cache.clone())
            .map_err(|e| format!("cannot open export {}: {e}", x.path.display()))?;
        let wanted = x.integrity == Integrity::Crc32c;
        match filesystems.get(&fs.fs_id()) {
            Some(&had) if had != wanted => {
                return Ok(Err(format!(
                    "its filesystem has been served {} checksums since the server started, \
                     and exports on one filesystem share its open files: give it integrity = \
                     \"{}\", or restart",
                    if had { "with" } else { "without" },
                    integrity_name(if had {
                        Integrity::Crc32c
                    } else {
                        Integrity::Off
                    }),
                )));
            }
            _ => {}
        }
        if wanted {
            let Some(store) = &self.integrity else {
                return Ok(Err(
                    "integrity = \"crc32c\" needs the checksum store, which is opened (and \
                     recovered) at start only when an export has integrity: restart to add it"
                        .into(),
                ));
            };
            fs.set_integrity(store.clone());
        }
        let export = open_export(&self.settings, x, Arc::new(fs))?;
        if let Some(ring) = ring {
            export.data.register_buffers(ring);
        }
        filesystems.insert(export.fs.fs_id(), wanted);
        Ok(Ok(export))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{Access, ClientMatch, Squash};
    use crate::server::Server;
    use dionfs_dataplane::Mode;

    fn export(path: &str) -> ExportConfig {
        let mut x = ExportConfig::with_defaults(PathBuf::from(path));
        x.entries[0].options.secure = false;
        x
    }

    #[test]
    fn an_outcome_reads_back_as_written_on_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("dionfs.pid");
        assert_eq!(Outcome::read(&pid_file), None);
        let failed = Outcome {
            pid: 42,
            generation: 3,
            phase: Phase::Failed,
            text: "/etc/dionfs.toml:7: unknown option `rx`\nsecond line".to_string(),
        };
        failed.write(&pid_file).unwrap();
        assert_eq!(Outcome::file(&pid_file), dir.path().join("dionfs.reload"));
        let read = Outcome::read(&pid_file).unwrap();
        assert_eq!(
            read.text,
            "/etc/dionfs.toml:7: unknown option `rx` second line"
        );
        assert_eq!(
            (read.pid, read.generation, read.phase),
            (42, 3, Phase::Failed)
        );
        let running = Outcome {
            generation: 4,
            phase: Phase::Running,
            text: String::new(),
            ..failed
        };
        running.write(&pid_file).unwrap();
        assert_eq!(Outcome::read(&pid_file), Some(running));
        std::fs::write(Outcome::file(&pid_file), "42 x ok\n").unwrap();
        assert_eq!(Outcome::read(&pid_file), None);
    }

    #[test]
    fn unchanged_exports_are_kept_by_index() {
        let running = vec![export("/a"), export("/b")];
        // Reordered: matched by id and path, not position.
        let p = plan(&running, vec![export("/b"), export("/a")], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Same(1));
        assert_eq!(p.exports[1].1, Step::Same(0));
        assert!(p.removed.is_empty() && p.warnings.is_empty());
    }

    #[test]
    fn added_and_removed() {
        let running = vec![export("/a"), export("/b")];
        let p = plan(&running, vec![export("/a"), export("/c")], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Same(0));
        assert_eq!(p.exports[1].1, Step::Added);
        assert_eq!(p.removed, vec![1]);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn option_changes_are_named() {
        let running = vec![export("/a")];
        let mut a = export("/a");
        let o = &mut a.entries[0].options;
        o.access = Access::Ro;
        o.squash = Squash::AllSquash;
        o.secure = true;
        o.xprtsec = crate::export::Xprtsec::TLS;
        a.entries[0].clients = vec!["10.0.0.0/8".parse::<ClientMatch>().unwrap()];
        a.read_mode = Mode::Buffered;
        let p = plan(&running, vec![a.clone()], 1 << 20);
        assert_eq!(
            p.exports[0].1,
            Step::Changed {
                old: 0,
                options: vec![
                    "clients",
                    "access",
                    "squash",
                    "secure",
                    "xprtsec",
                    "read_mode"
                ]
            }
        );
        assert_eq!(p.exports[0].0, a, "the new options are the ones applied");
        assert!(p.removed.is_empty());
    }

    #[test]
    fn a_change_in_any_client_entry_is_named() {
        let mut two = export("/a");
        let mut second = two.entries[0].clone();
        second.clients = vec!["10.0.0.0/8".parse::<ClientMatch>().unwrap()];
        second.options.access = Access::Ro;
        two.entries.push(second);
        // An entry added.
        let p = plan(&[export("/a")], vec![two.clone()], 1 << 20);
        assert_eq!(
            p.exports[0].1,
            Step::Changed {
                old: 0,
                options: vec!["clients", "access"]
            }
        );
        // The second entry's squash and anonuid changed.
        let mut changed = two.clone();
        changed.entries[1].options.squash = Squash::NoRootSquash;
        changed.entries[1].options.anonuid = 1000;
        let p = plan(std::slice::from_ref(&two), vec![changed.clone()], 1 << 20);
        assert_eq!(
            p.exports[0].1,
            Step::Changed {
                old: 0,
                options: vec!["squash", "anonuid"]
            }
        );
        assert_eq!(p.exports[0].0, changed);
        let p = plan(std::slice::from_ref(&two), vec![two.clone()], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Same(0));
    }

    #[test]
    fn a_new_id_or_path_is_another_export() {
        let running = vec![export("/a")];
        let mut other_id = export("/a");
        other_id.id = running[0].id.wrapping_add(1);
        let p = plan(&running, vec![other_id], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Added);
        assert_eq!(p.removed, vec![0]);

        // The same id on another path: handles of the old one would
        // resolve through the new one, which is said.
        let mut moved = export("/b");
        moved.id = running[0].id;
        let p = plan(&running, vec![moved], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Added);
        assert_eq!(p.removed, vec![0]);
        assert_eq!(p.warnings.len(), 1);
        assert!(
            p.warnings[0].contains("/a's and is now /b's"),
            "{:?}",
            p.warnings
        );
    }

    #[test]
    fn integrity_stays_as_at_start() {
        let running = vec![export("/a")];
        let mut a = export("/a");
        a.integrity = Integrity::Crc32c;
        a.entries[0].options.access = Access::Ro;
        let p = plan(&running, vec![a], 1 << 20);
        assert_eq!(
            p.exports[0].1,
            Step::Changed {
                old: 0,
                options: vec!["access"]
            }
        );
        assert_eq!(p.exports[0].0.integrity, Integrity::Off);
        assert!(p.warnings[0].contains("integrity"), "{:?}", p.warnings);

        // Only integrity asked to change: nothing changes.
        let mut a = export("/a");
        a.integrity = Integrity::Crc32c;
        let p = plan(&running, vec![a], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Same(0));
        assert_eq!(p.warnings.len(), 1);
    }

    #[test]
    fn max_transfer_is_capped_at_the_start_limit() {
        let mut small = export("/a");
        small.max_transfer = 65536;
        let running = vec![small.clone()];
        let mut big = export("/a");
        big.max_transfer = 4 << 20;
        let mut added = export("/b");
        added.max_transfer = 2 << 20;
        let p = plan(&running, vec![big, added], 1 << 20);
        assert_eq!(p.exports[0].0.max_transfer, 1 << 20);
        assert_eq!(
            p.exports[0].1,
            Step::Changed {
                old: 0,
                options: vec!["max_transfer"]
            }
        );
        assert_eq!(p.exports[1].0.max_transfer, 1 << 20);
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);

        // The same file again: the capped export is unchanged now.
        let running = vec![p.exports[0].0.clone()];
        let mut big = export("/a");
        big.max_transfer = 4 << 20;
        let p = plan(&running, vec![big], 1 << 20);
        assert_eq!(p.exports[0].1, Step::Same(0));
    }

    #[test]
    fn every_changed_setting_is_named() {
        let running = ServerSettings::default();
        assert!(changed_settings(&running, &running.clone()).is_empty());
        let new = ServerSettings {
            nfs_port: 3049,
            read_buffers: Some(4),
            idle_timeout: std::time::Duration::from_secs(1),
            pid_file: Some(PathBuf::from("/run/x.pid")),
            ..running.clone()
        };
        assert_eq!(
            changed_settings(&running, &new),
            vec!["nfs_port", "read_buffers", "idle_timeout", "pid_file"]
        );
        // [tls] added is the server's to apply; a handshake timeout other
        // than the one running waits for a restart.
        let mut tls = TlsFiles {
            certificate: "c".into(),
            key: "k".into(),
            client_ca: None,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        };
        let with = |tls: &TlsFiles| ServerSettings {
            tls: Some(tls.clone()),
            ..running.clone()
        };
        assert!(changed_settings(&running, &with(&tls)).is_empty());
        tls.handshake_timeout = std::time::Duration::from_secs(3);
        assert_eq!(
            changed_settings(&running, &with(&tls)),
            vec!["handshake_timeout"]
        );
    }

    #[test]
    fn summary_names_paths_and_options() {
        let r = Report {
            added: vec![PathBuf::from("/b")],
            removed: vec![PathBuf::from("/c")],
            changed: vec![(PathBuf::from("/a"), vec!["access", "clients"])],
            unchanged: 2,
            ..Report::default()
        };
        assert_eq!(
            r.summary(),
            "added /b; removed /c; changed /a (access, clients); 2 unchanged"
        );
        assert_eq!(Report::default().summary(), "0 unchanged");
    }

    /// A server on directories of a temporary directory (ext4 or so: file
    /// handles work), without io_uring.
    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                dir: tempfile::tempdir().unwrap(),
            }
        }

        fn export(&self, name: &str) -> ExportConfig {
            let path = self.dir.path().join(name);
            std::fs::create_dir_all(&path).unwrap();
            export(std::fs::canonicalize(path).unwrap().to_str().unwrap())
        }

        fn config(&self, exports: Vec<ExportConfig>) -> Config {
            Config {
                server: ServerSettings {
                    state_dir: self.dir.path().join("state"),
                    io_uring: false,
                    max_in_flight: 4,
                    ..ServerSettings::default()
                },
                exports,
            }
        }
    }

    #[test]
    fn reload_keeps_what_did_not_change_and_swaps_the_rest() {
        let f = Fixture::new();
        let (a, b, c) = (f.export("a"), f.export("b"), f.export("c"));
        let server = Server::open(&f.config(vec![a.clone(), b.clone()])).unwrap();
        let verifier = server.write_verifier();
        let before = server.exports();

        // b becomes read-only, c is added.
        let mut b_ro = b.clone();
        b_ro.entries[0].options.access = Access::Ro;
        let report = server
            .reload(f.config(vec![a.clone(), b_ro.clone(), c.clone()]))
            .unwrap();
        assert_eq!(report.added, vec![c.path.clone()]);
        assert_eq!(report.changed, vec![(b.path.clone(), vec!["access"])]);
        assert_eq!((report.unchanged, report.removed.len()), (1, 0));
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let after = server.exports();
        assert_eq!(after.len(), 3);
        assert!(
            Arc::ptr_eq(&before[0], &after[0]),
            "a is the very same export"
        );
        let (old_b, new_b) = (&before[1], after.by_id(b.id).unwrap());
        let read_only = |x: &Export| x.config.entries[0].options.read_only();
        assert!(read_only(new_b) && !read_only(&before[1]));
        assert!(Arc::ptr_eq(&old_b.fs, &new_b.fs), "b keeps its file system");
        assert!(Arc::ptr_eq(&old_b.data, &new_b.data), "and its data plane");
        assert!(Arc::ptr_eq(&old_b.metadata_sync, &new_b.metadata_sync));
        assert!(after.by_id(c.id).is_some());
        // A snapshot taken before goes on as it was.
        assert_eq!(before.len(), 2);
        assert!(before.by_id(c.id).is_none());

        // a is removed, b reads buffered and is `async`.
        let mut b_buffered = b_ro.clone();
        b_buffered.read_mode = Mode::Buffered;
        b_buffered.durability = Durability::Async;
        let report = server
            .reload(f.config(vec![b_buffered, c.clone()]))
            .unwrap();
        assert_eq!(report.removed, vec![a.path.clone()]);
        assert_eq!(
            report.changed,
            vec![(b.path.clone(), vec!["read_mode", "durability"])]
        );
        let last = server.exports();
        assert!(last.by_id(a.id).is_none(), "a's handles are stale now");
        let newest_b = last.by_id(b.id).unwrap();
        assert!(Arc::ptr_eq(&newest_b.fs, &old_b.fs));
        assert!(
            !Arc::ptr_eq(&newest_b.data, &old_b.data),
            "a new data plane"
        );
        assert!(!Arc::ptr_eq(&newest_b.metadata_sync, &old_b.metadata_sync));
        assert!(Arc::ptr_eq(
            &last.by_id(c.id).unwrap().data,
            &after.by_id(c.id).unwrap().data
        ));
        assert_eq!(server.write_verifier(), verifier, "no write was lost");

        // a's plane and b's first one wait for the calls holding them.
        assert_eq!(server.reload_state().retired_planes(), 2);
        server.reload_state().sweep();
        assert_eq!(
            server.reload_state().retired_planes(),
            2,
            "snapshots still hold them"
        );
        drop((before, after));
        server.reload_state().sweep();
        assert_eq!(server.reload_state().retired_planes(), 0);
        assert_eq!(server.write_verifier(), verifier);
    }

    #[test]
    fn a_reload_that_fails_changes_nothing() {
        let f = Fixture::new();
        let a = f.export("a");
        let server = Server::open(&f.config(vec![a.clone()])).unwrap();
        let before = server.exports();
        let mut a_ro = a.clone();
        a_ro.entries[0].options.access = Access::Ro;
        let gone = f.export("gone");
        std::fs::remove_dir(&gone.path).unwrap();
        let e = server.reload(f.config(vec![a_ro, gone])).unwrap_err();
        assert!(
            e.contains("cannot open export") && e.contains("gone"),
            "{e}"
        );
        let after = server.exports();
        assert!(
            Arc::ptr_eq(&before, &after),
            "not even a's change is applied"
        );
        assert_eq!(server.reload_state().retired_planes(), 0);
    }

    #[test]
    fn server_settings_changes_are_named_and_exports_applied() {
        let f = Fixture::new();
        let a = f.export("a");
        let server = Server::open(&f.config(vec![a.clone()])).unwrap();
        let mut config = f.config(vec![a.clone(), f.export("b")]);
        config.server.nfs_port = 1;
        config.server.max_in_flight = 8;
        let report = server.reload(config).unwrap();
        assert_eq!(report.added.len(), 1);
        assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
        assert!(
            report.warnings[0].contains("nfs_port, max_in_flight")
                && report.warnings[0].contains("restart"),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn integrity_is_added_only_where_it_can_be_set_up() {
        // No integrity at start: no checksum store, and the filesystem is
        // served without checksums.
        let f = Fixture::new();
        let a = f.export("a");
        let server = Server::open(&f.config(vec![a.clone()])).unwrap();
        let mut b = f.export("b");
        b.integrity = Integrity::Crc32c;
        let report = server.reload(f.config(vec![a.clone(), b.clone()])).unwrap();
        assert_eq!(report.refused, vec![b.path.clone()]);
        assert!(report.added.is_empty());
        assert!(
            report.warnings[0].contains("served without checksums"),
            "{:?}",
            report.warnings
        );
        assert_eq!(server.exports().len(), 1);

        // Integrity at start: an export added on the same filesystem gets
        // the store; one without integrity there is refused.
        let f = Fixture::new();
        let mut a = f.export("a");
        a.integrity = Integrity::Crc32c;
        let server = Server::open(&f.config(vec![a.clone()])).unwrap();
        let mut b = f.export("b");
        b.integrity = Integrity::Crc32c;
        let c = f.export("c");
        let report = server
            .reload(f.config(vec![a.clone(), b.clone(), c.clone()]))
            .unwrap();
        assert_eq!(report.added, vec![b.path.clone()]);
        assert_eq!(report.refused, vec![c.path.clone()]);
        let exports = server.exports();
        assert!(exports.by_id(b.id).unwrap().fs.has_integrity());
        assert!(exports.by_id(c.id).is_none());
    }

    #[test]
    fn ring_slots_of_a_removed_export_go_to_an_added_one() {
        let f = Fixture::new();
        let (a, b) = (f.export("a"), f.export("b"));
        let mut config = f.config(vec![a.clone()]);
        config.server.io_uring = true;
        config.server.small_buffers = 1;
        let server = Server::open(&config).unwrap();
        use dionfs_sys::uring::RingBuf;
        let Some(ring) = server.io_ring.clone() else {
            println!("skipped: no io_uring here");
            return;
        };
        if ring.fixed_slots() == 0 {
            println!("skipped: no fixed buffer table");
            return;
        }
        // 2 read and 2 write buffers and a small one of each, one slot
        // each: all taken.
        let plane = server.exports()[0].data.clone();
        let mut held: Vec<_> = (0..2)
            .flat_map(|_| {
                [
                    plane.read_pool().get_blocking().unwrap(),
                    plane.write_pool().get_blocking().unwrap(),
                ]
            })
            .collect();
        held.push(plane.read_pool_for(1).get_blocking().unwrap());
        held.push(plane.write_pool_for(1).get_blocking().unwrap());
        assert!(held.iter().all(|b| RingBuf::fixed_index(b).is_some()));
        drop(held);

        config.exports = vec![b.clone()];
        server.reload(config).unwrap();
        let new_plane = server.exports()[0].data.clone();
        let early = new_plane.read_pool().get_blocking().unwrap();
        assert_eq!(RingBuf::fixed_index(&early), None, "none free yet");
        drop(plane);
        server.reload_state().sweep();
        assert_eq!(
            server.reload_state().retired_planes(),
            0,
            "a's plane is freed"
        );
        let _early = early;
        let late = new_plane.read_pool().get_blocking().unwrap();
        assert!(
            RingBuf::fixed_index(&late).is_some(),
            "a slot a's buffers gave back"
        );
    }
}
