//! `dionfs scrub`: verifies every block of integrity exports against its
//! stored CRC32C, offline (it locks the checksum store, so it refuses to
//! run beside a server using the same state directory). First it does
//! what a server start does, crash recovery from the intent log; then it
//! walks each export (not crossing mounts, each inode once), reads every
//! block from the device and prints a summary; last it lists the checksum
//! files of files deleted behind the server's back (`--repair-metadata`
//! removes them). Exit status 1 when a bad block was found, 2 on an error,
//! 3 when a file with data has no checksums (unless `--allow-unchecked`).
//!
//! A state directory without a checksum store is refused, not given an
//! empty one: a scrub pointed at a mistyped `--state-dir` would otherwise
//! find no checksum for any file, verify nothing and report a clean
//! export, night after night.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dionfs_fs::{ExportFs, MacKey, OpenFileCache};
use dionfs_integrity::scrub::{scrub_file, FileResult};
use dionfs_integrity::{FileKey, Order, Store, BLOCK};
use rustix::fs::AtFlags;

/// What to scrub.
pub struct ScrubPlan {
    pub exports: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub repair_metadata: bool,
    pub allow_unchecked: bool,
}

#[derive(Default)]
struct Summary {
    files: u64,
    blocks: u64,
    bad: Vec<(PathBuf, u64, u32, u32)>,
    stale: Vec<PathBuf>,
    /// Files with data and no checksums at all.
    unchecked: Vec<PathBuf>,
    rebuilt: u64,
    /// Per export (as given): files with data, and those of them with no
    /// checksums.
    exports: Vec<(PathBuf, u64, u64)>,
    /// Checksum files of files that no longer exist.
    orphans: u64,
    /// Files deleted while the scrub ran (a log rotated meanwhile): not
    /// an error, nothing left to check.
    deleted: u64,
    errors: Vec<(PathBuf, String)>,
}

/// Runs the scrub; returns the process exit status.
pub fn run(plan: ScrubPlan) -> Result<u8, String> {
    // Rebuilt checksum files past a file-size limit fail with EFBIG (an
    // error in the summary) instead of ending the scrub.
    if let Err(e) = dionfs_sys::io::ignore_file_size_signal() {
        eprintln!("dionfs scrub: cannot ignore SIGXFSZ: {e}");
    }
    let dir = plan.state_dir.join("integrity");
    if !Store::exists(&dir) {
        return Err(no_store(&plan.state_dir, &dir));
    }
    let key = MacKey::load_or_create(&plan.state_dir).map_err(|e| {
        format!(
            "cannot load the file-handle key from {}: {e}",
            plan.state_dir.display()
        )
    })?;
    let cache = Arc::new(OpenFileCache::new(1));
    let mut filesystems = Vec::new();
    for (i, path) in plan.exports.iter().enumerate() {
        let fs = ExportFs::open(path, i as u16, key.clone(), cache.clone())
            .map_err(|e| format!("cannot open export {}: {e}", path.display()))?;
        filesystems.push(fs);
    }
    let store = Store::open(&dir, Store::DEFAULT_CACHE_PAGES, Order::Overlapped).map_err(|e| {
        format!(
            "cannot open the checksum store {}: {e} (stop the server using it first)",
            dir.display()
        )
    })?;
    let pending = store.pending_recovery();
    let report = store
        .recover(&mut |k| dionfs_core::integrity::open_for_recovery(&filesystems, k))
        .map_err(|e| format!("integrity recovery failed: {e}"))?;
    if pending > 0 {
        eprintln!(
            "recovered the checksums of {} blocks in {} files being written when the server stopped",
            report.blocks, report.files
        );
    }

    let mut files = Vec::new();
    for (i, (path, fs)) in plan.exports.iter().zip(&filesystems).enumerate() {
        collect(path, i, fs.fs_id(), &mut files);
    }
    let total: u64 = files.iter().map(|f| f.size).sum();
    let mut progress = Progress::new(total, files.len() as u64);
    let mut summary = Summary {
        exports: plan.exports.iter().map(|p| (p.clone(), 0, 0)).collect(),
        ..Summary::default()
    };
    let mut seen = HashSet::new();
    for Found {
        path,
        export,
        fs_id,
        size,
    } in files
    {
        let key = match file_key(&path, fs_id) {
            Ok(k) => k,
            Err(e) if deleted_meanwhile(&e, &path) => {
                summary.deleted += 1;
                continue;
            }
            Err(e) => {
                summary.errors.push((path, e.to_string()));
                continue;
            }
        };
        if !seen.insert(key.id()) {
            continue; // another name of an inode already scrubbed
        }
        summary.files += 1;
        if size > 0 {
            summary.exports[export].1 += 1;
        }
        progress.file_done();
        match scrub_file(&store, key, &path, plan.repair_metadata, &mut |n| {
            progress.add(n)
        }) {
            Ok(FileResult::Verified { blocks, bad }) => {
                summary.blocks += blocks;
                for m in bad {
                    progress.clear();
                    eprintln!(
                        "BAD {}: block {} (offset {}): expected crc32c {:08x}, found {:08x}",
                        path.display(),
                        m.block,
                        m.block * BLOCK,
                        m.expected,
                        m.found
                    );
                    summary
                        .bad
                        .push((path.clone(), m.block * BLOCK, m.expected, m.found));
                }
            }
            Ok(FileResult::Stale { rebuilt: true }) => summary.rebuilt += 1,
            Ok(FileResult::Stale { rebuilt: false }) => summary.stale.push(path),
            Ok(FileResult::Unchecked { rebuilt }) => {
                summary.exports[export].2 += 1;
                if rebuilt {
                    summary.rebuilt += 1;
                } else {
                    summary.unchecked.push(path);
                }
            }
            Err(e) if deleted_meanwhile(&e, &path) => summary.deleted += 1,
            Err(e) => summary.errors.push((path, e.to_string())),
        }
    }
    progress.finish();
    // Checksum files of files deleted behind the server's back.
    match store.sweep(
        &mut |k| dionfs_core::integrity::open_for_recovery(&filesystems, k).map(|fd| fd.is_some()),
        plan.repair_metadata,
    ) {
        Ok(report) => summary.orphans = report.orphans,
        Err(e) => summary.errors.push((
            dir.join("files"),
            format!("cannot list the checksum files: {e}"),
        )),
    }
    print_summary(&summary, &plan);
    Ok(if !summary.bad.is_empty() {
        1
    } else if !summary.errors.is_empty() {
        2
    } else if !summary.unchecked.is_empty() && !plan.allow_unchecked {
        3
    } else {
        0
    })
}

/// Why a state directory without a checksum store is refused, and where
/// the right one is.
fn no_store(state_dir: &Path, dir: &Path) -> String {
    format!(
        "no checksum store in {} (looked for {}): {} is not the state directory of a \
         server with integrity exports, and a scrub there would verify nothing. The server's \
         state directory is `state_dir` in its config (default /var/lib/dionfs, or its \
         --state-dir); `dionfs scrub --config /etc/dionfs.toml` reads it from the config",
        dir.display(),
        dir.join("files").display(),
        state_dir.display()
    )
}

/// A regular file to scrub.
struct Found {
    path: PathBuf,
    /// Index of the export (as given) it was found under.
    export: usize,
    fs_id: u64,
    size: u64,
}

/// Every regular file under `root` on the same filesystem.
fn collect(root: &Path, export: usize, fs_id: u64, out: &mut Vec<Found>) {
    let Ok(root_meta) = std::fs::symlink_metadata(root) else {
        return;
    };
    let dev = root_meta.dev();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        names.sort();
        for path in names {
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.dev() != dev {
                continue; // another filesystem mounted inside the export
            }
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() {
                out.push(Found {
                    path,
                    export,
                    fs_id,
                    size: meta.len(),
                });
            }
        }
    }
}

fn file_key(path: &Path, fs_id: u64) -> std::io::Result<FileKey> {
    let file = std::fs::File::open(path)?;
    let (kernel, _) =
        dionfs_sys::handle::name_to_handle_at(file.as_fd(), c"", AtFlags::EMPTY_PATH)?;
    Ok(FileKey {
        fs_id,
        handle_type: kernel.handle_type,
        handle: kernel.bytes,
    })
}

fn print_summary(s: &Summary, plan: &ScrubPlan) {
    let repair = plan.repair_metadata;
    println!("scrub summary");
    println!("  files:      {}", s.files);
    println!("  blocks:     {} verified", s.blocks);
    println!("  bad blocks: {}", s.bad.len());
    for (path, offset, expected, found) in &s.bad {
        println!(
            "    {} offset {} (block {}): expected {:08x}, found {:08x}",
            path.display(),
            offset,
            offset / BLOCK,
            expected,
            found
        );
    }
    if repair {
        println!(
            "  checksums rebuilt (changed behind the server's back or never computed): {}",
            s.rebuilt
        );
    } else {
        println!(
            "  never checksummed: {}{}",
            s.unchecked.len(),
            if s.unchecked.is_empty() {
                ""
            } else if plan.allow_unchecked {
                " (allowed by --allow-unchecked)"
            } else {
                " (exit status 3; `--repair-metadata` computes their checksums, \
                 `--allow-unchecked` accepts them)"
            }
        );
        for path in s.unchecked.iter().take(20) {
            println!("    {}", path.display());
        }
        if s.unchecked.len() > 20 {
            println!("    ... and {} more", s.unchecked.len() - 20);
        }
        for (export, with_data, unchecked) in &s.exports {
            if *with_data > 0 && unchecked == with_data {
                println!(
                    "  none of the {with_data} files with data under {} has checksums in {}: \
                     is {} the state directory of the server that exports it (its `state_dir`)? \
                     Files written only locally have none until `--repair-metadata` computes them",
                    export.display(),
                    plan.state_dir.join("integrity").display(),
                    plan.state_dir.display()
                );
            }
        }
    }
    if !s.stale.is_empty() {
        println!(
            "  not verified, changed behind the server's back ({}; \
             `--repair-metadata` rebuilds their checksums):",
            s.stale.len()
        );
        for path in s.stale.iter().take(20) {
            println!("    {}", path.display());
        }
        if s.stale.len() > 20 {
            println!("    ... and {} more", s.stale.len() - 20);
        }
    }
    if s.orphans > 0 {
        if repair {
            println!(
                "  checksum files of files deleted behind the server's back: {} (removed)",
                s.orphans
            );
        } else {
            println!(
                "  checksum files of files deleted behind the server's back: {} \
                 (`--repair-metadata` removes them)",
                s.orphans
            );
        }
    }
    if s.deleted > 0 {
        println!("  deleted while the scrub ran: {}", s.deleted);
    }
    if !s.errors.is_empty() {
        println!("  errors: {}", s.errors.len());
        for (path, e) in &s.errors {
            println!("    {}: {e}", path.display());
        }
    }
}

/// Whether scrubbing `path` failed with `e` because the file was deleted
/// after the walk found it (or during its rebuild).
fn deleted_meanwhile(e: &std::io::Error, path: &Path) -> bool {
    dionfs_integrity::is_file_deleted(e)
        || e.kind() == std::io::ErrorKind::NotFound && std::fs::symlink_metadata(path).is_err()
}

/// A progress bar on a terminal (stderr), plain lines every 10% (or 10 s)
/// otherwise.
struct Progress {
    total: u64,
    done: u64,
    files_total: u64,
    files: u64,
    tty: bool,
    started: Instant,
    last_draw: Instant,
    last_step: u64,
}

impl Progress {
    fn new(total: u64, files_total: u64) -> Progress {
        let now = Instant::now();
        Progress {
            total,
            done: 0,
            files_total,
            files: 0,
            tty: std::io::stderr().is_terminal(),
            started: now,
            last_draw: now,
            last_step: 0,
        }
    }

    fn file_done(&mut self) {
        self.files += 1;
    }

    fn add(&mut self, bytes: u64) {
        self.done += bytes;
        let pct = (self.done * 100).checked_div(self.total).unwrap_or(100);
        let now = Instant::now();
        if self.tty {
            if now.duration_since(self.last_draw) >= Duration::from_millis(100) {
                self.draw(pct);
                self.last_draw = now;
            }
        } else if pct / 10 > self.last_step / 10
            || now.duration_since(self.last_draw) >= Duration::from_secs(10)
        {
            self.last_step = pct;
            self.last_draw = now;
            eprintln!(
                "scrub: {pct}% ({} of {} MiB, file {} of {})",
                self.done >> 20,
                self.total >> 20,
                self.files,
                self.files_total
            );
        }
    }

    fn draw(&self, pct: u64) {
        let width = 30;
        let filled = (pct as usize * width / 100).min(width);
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        eprint!(
            "\r[{}{}] {pct:3}% {}/{} MiB {:.0} MiB/s file {}/{} ",
            "#".repeat(filled),
            " ".repeat(width - filled),
            self.done >> 20,
            self.total >> 20,
            (self.done >> 20) as f64 / secs,
            self.files,
            self.files_total
        );
        let _ = std::io::stderr().flush();
    }

    fn clear(&self) {
        if self.tty {
            eprint!("\r{}\r", " ".repeat(79));
        }
    }

    fn finish(&mut self) {
        if self.tty {
            self.draw(100);
            eprintln!();
        } else {
            eprintln!(
                "scrub: done, {} MiB in {:.1} s",
                self.done >> 20,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_deleted_while_the_scrub_ran_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rotated.log");
        std::fs::write(&path, b"x").unwrap();
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        // Still there: a NotFound from elsewhere (the checksum store, say)
        // is an error.
        assert!(!deleted_meanwhile(&missing, &path));
        std::fs::remove_file(&path).unwrap();
        assert!(deleted_meanwhile(&missing, &path));
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(!deleted_meanwhile(&other, &path));
    }
}
