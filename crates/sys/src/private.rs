//! Files and directories dionfs keeps for itself: the state directory
//! (file-handle key, NSM state and lock clients, the checksum store) and
//! the pid, ports and reload files. They are owner-only (directories
//! 0700, files 0600) whatever the process umask.
//!
//! The server runs with umask 0 (`dionfs_fs::ExportFs::open`: an NFS
//! client sends the exact mode of a new file, and knfsd applies it without
//! a umask), so a file created with std's default mode 0666, or a
//! directory with 0777, would be writable by every local user: anyone
//! could rewrite the record of lock clients or replace checksum files.
//! Everything here names its mode, and [`tighten`] repairs a state
//! directory an earlier version left open.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode of a directory of our own.
pub const DIR_MODE: u32 = 0o700;
/// Mode of a file of our own.
pub const FILE_MODE: u32 = 0o600;

/// Creates `path` and any missing parents, each with [`DIR_MODE`]. An
/// existing directory is left as it is (see [`tighten`]).
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)
}

/// Open options that create a file with [`FILE_MODE`]; the caller adds
/// read, write, create, truncate or append as it needs.
pub fn options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.mode(FILE_MODE);
    options
}

/// Whether [`replace`] makes the new contents durable before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Data and rename synced (the file must survive a power cut).
    Synced,
    /// Whole or not at all, but not synced (files that only describe
    /// the running process: pid, ports, reload outcome).
    Atomic,
}

/// Replaces the file at `path` with `data`, atomically (a reader sees the
/// old contents or the new, never part): written to a temporary file
/// beside it (named after this process, so that two writers of one
/// directory do not share one) and renamed over it.
pub fn replace(path: &Path, data: &[u8], durability: Durability) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let result = (|| {
        let mut file = options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        file.write_all(data)?;
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    if durability == Durability::Synced {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// One entry [`tighten`] changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tightened {
    /// The entry, under the directory tightened.
    pub path: PathBuf,
    /// Its permission bits before.
    pub from: u32,
    /// Its permission bits now.
    pub to: u32,
    /// Its owner before, when it was not this process's user (now it is):
    /// someone else created it, so its contents may not be ours.
    pub foreign_owner: Option<u32>,
}

/// Makes `dir` and everything below it owner-only: the group and other
/// permission bits of every directory and file are cleared, and an entry
/// another user owns is given to this process's user (and reported, since
/// another user wrote it). Symbolic links are not followed, and other
/// filesystems mounted below are not entered. Returns what it changed.
pub fn tighten(dir: &Path) -> io::Result<Vec<Tightened>> {
    let root = std::fs::symlink_metadata(dir)?;
    if !root.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", dir.display()),
        ));
    }
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let mut changed = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), root.clone())];
    while let Some((path, meta)) = pending.pop() {
        if meta.dev() != root.dev() {
            continue;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                let entry = entry?;
                let child = entry.path();
                match std::fs::symlink_metadata(&child) {
                    Ok(m) => pending.push((child, m)),
                    // Removed meanwhile (a temporary file of a writer).
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        } else if !meta.is_file() {
            continue; // symlinks, sockets, devices: nothing of ours
        }
        let mode = meta.mode() & 0o7777;
        let foreign_owner = (meta.uid() != uid).then_some(meta.uid());
        if foreign_owner.is_some() {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
        // chown clears set-id bits; clear them anyway: nothing of ours has
        // them.
        let to = mode & 0o700;
        if to != mode || foreign_owner.is_some() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(to))?;
            changed.push(Tightened {
                path,
                from: mode,
                to,
                foreign_owner,
            });
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    /// With umask 0, as the server runs, what this module creates is
    /// still owner-only.
    #[test]
    fn created_owner_only_whatever_the_umask() {
        let old = rustix::process::umask(rustix::fs::Mode::empty());
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b/c");
        create_dir_all(&nested).unwrap();
        let file = nested.join("f");
        replace(&file, b"one\n", Durability::Synced).unwrap();
        replace(&file, b"two\n", Durability::Atomic).unwrap();
        let other = nested.join("g");
        options().write(true).create(true).open(&other).unwrap();
        rustix::process::umask(old);
        for d in ["a", "a/b", "a/b/c"] {
            assert_eq!(mode(&dir.path().join(d)), 0o700, "{d}");
        }
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&other), 0o600);
        assert_eq!(std::fs::read(&file).unwrap(), b"two\n");
        // No temporary file left beside it.
        let names: Vec<_> = std::fs::read_dir(&nested)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn tighten_clears_group_and_other_bits_and_reports_them() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("nlm")).unwrap();
        std::fs::create_dir_all(root.join("integrity/files/ab")).unwrap();
        std::fs::write(root.join("nlm/hosts"), b"").unwrap();
        std::fs::write(root.join("integrity/files/ab/x.crc"), b"").unwrap();
        std::fs::write(root.join("fh.key"), b"").unwrap();
        let set = |p: &str, m: u32| {
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(m)).unwrap()
        };
        set("", 0o755);
        set("nlm", 0o777);
        set("nlm/hosts", 0o666);
        set("integrity", 0o1777);
        set("integrity/files", 0o777);
        set("integrity/files/ab", 0o777);
        set("integrity/files/ab/x.crc", 0o600);
        set("fh.key", 0o600);
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();

        let mut changed = tighten(root).unwrap();
        changed.sort_by(|a, b| a.path.cmp(&b.path));
        let got: Vec<_> = changed
            .iter()
            .map(|t| {
                (
                    t.path.strip_prefix(root).unwrap().display().to_string(),
                    t.from,
                    t.to,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (String::new(), 0o755, 0o700),
                ("integrity".into(), 0o1777, 0o700),
                ("integrity/files".into(), 0o777, 0o700),
                ("integrity/files/ab".into(), 0o777, 0o700),
                ("nlm".into(), 0o777, 0o700),
                ("nlm/hosts".into(), 0o666, 0o600),
            ]
        );
        assert!(changed.iter().all(|t| t.foreign_owner.is_none()));
        // The symlink's target is untouched.
        assert_ne!(mode(Path::new("/etc/passwd")) & 0o044, 0);
        // A second pass has nothing left to do.
        assert!(tighten(root).unwrap().is_empty());
    }

    /// An entry another user created in a directory that was open to
    /// everyone is taken back and reported. Needs root (chown).
    #[test]
    fn tighten_takes_back_what_another_user_planted() {
        if !dionfs_testfs::runs_as_root("chown", &[]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let planted = dir.path().join("hosts");
        std::fs::write(&planted, b"forged\n").unwrap();
        std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
        let changed = tighten(dir.path()).unwrap();
        let t = changed.iter().find(|t| t.path == planted).unwrap();
        assert_eq!(t.foreign_owner, Some(65534));
        assert_eq!((t.from, t.to), (0o644, 0o600));
        let meta = std::fs::metadata(&planted).unwrap();
        assert_eq!(meta.uid(), 0);
        assert_eq!(mode(&planted), 0o600);
    }
}
