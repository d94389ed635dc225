//! Metadata durability: a change that CREATE, MKDIR, SYMLINK, MKNOD,
//! REMOVE, RMDIR, RENAME, LINK or SETATTR made is on stable storage before
//! the server replies.
//!
//! RFC 1813 (section 1.1, "stable storage", and the descriptions of each of
//! those procedures) lets a server acknowledge a change only once it would
//! survive a crash. knfsd does it with `commit_metadata()` (fs/nfsd/vfs.c) on
//! the objects a procedure changed: the new object and its directory, the
//! directory of a removed name, both directories of a rename, the file and
//! the directory of a link, the object of a SETATTR; and skips it on exports
//! marked `async`. [`MetadataSync`] does the same from userspace with
//! `fsync(2)`:
//!
//! - Directories and regular files are fsynced through a descriptor of
//!   their own (for a regular file, never the open-file cache's: a failed
//!   writeback is reported once to each open file, and the cache's
//!   belongs to COMMIT): an `O_PATH` descriptor (what a [`Node`] holds) cannot be
//!   fsynced, so a read-only one is opened through `/proc/thread-self/fd`,
//!   as root (a squashed caller may have no read permission on what it just
//!   made, say a file of mode 000; the fsync grants it nothing).
//! - Symlinks, FIFOs, sockets and device nodes cannot be opened for fsync
//!   (opening a device would reach its driver). Their creation (and a LINK
//!   or REMOVE of them) is one journal transaction together with the
//!   directory entry on XFS and ext4 (`xfs_create`/`xfs_symlink`/`xfs_link`,
//!   one jbd2 handle in `ext4_mknod`/`ext4_symlink`/`ext4_link`), and btrfs
//!   logs the inodes of new entries when the directory is fsynced, so the
//!   directory's fsync covers them. An attribute change of such an object
//!   made after its creation (SETATTR, or attributes CREATE-time could not
//!   apply, see [`set_after_creation`]) is a later transaction that nothing
//!   but a filesystem-wide `syncfs(2)` reaches; they are rare.
//! - fsync of a regular file also writes its dirty data (buffered and
//!   dontcache modes); knfsd's `commit_metadata` would not. There is no
//!   metadata-only fsync in userspace (`fdatasync` may skip mode, owner and
//!   times).
//!
//! Every commit is its own fsync, also when many requests change one
//! directory at once: the journal batches concurrent log forces itself (XFS
//! puts every force waiting on the same log buffer into one write, jbd2
//! commits one transaction for all of them). Sharing fsyncs in userspace
//! (group commit: a commit rides on the next fsync of its directory to
//! start after its change) cut the directory fsyncs 3-5x in the metadata
//! benchmark, but not the time: create, rename and remove together ran at
//! the same rate with and without it on XFS and ext4, so it was dropped.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use dionfs_sys::cred;
use rustix::fs::{fsync, openat, readlinkat, syncfs, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::attr::{FileKind, SetAttrs};
use crate::export::{proc_fd_path, ExportFs, Node};
use crate::FsError;

/// One export's metadata commits: `sync` (knfsd's default; every commit is
/// an fsync) or `async` (commits do nothing: replies may come before the
/// change is durable, so a crash can lose acknowledged changes).
pub struct MetadataSync {
    sync: bool,
    /// A plain (not `O_PATH`) descriptor on the export's filesystem, for
    /// `syncfs`.
    filesystem: OwnedFd,
    counters: Counters,
}

/// What [`MetadataSync`] did, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetadataSyncCounters {
    /// fsyncs of directories.
    pub dir_fsyncs: u64,
    /// fsyncs of regular files.
    pub file_fsyncs: u64,
    /// Filesystem-wide `syncfs` calls (attribute changes of symlinks and
    /// special files).
    pub filesystem_syncs: u64,
}

#[derive(Default)]
struct Counters {
    dir_fsyncs: AtomicU64,
    file_fsyncs: AtomicU64,
    filesystem_syncs: AtomicU64,
}

impl MetadataSync {
    /// Commits for the export `fs`; `sync == false` is the `async` export
    /// option.
    pub fn new(fs: &ExportFs, sync: bool) -> std::io::Result<MetadataSync> {
        Ok(MetadataSync {
            sync,
            filesystem: fs.mount_fd.try_clone()?,
            counters: Counters::default(),
        })
    }

    /// Whether commits are made (`sync`) or skipped (`async`).
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// CREATE, MKDIR, SYMLINK, MKNOD: the new `object` and its entry in
    /// `dir`. `attrs` are the attributes the client asked to set.
    pub fn created(&self, dir: &Node, object: &Node, attrs: &SetAttrs) -> Result<(), FsError> {
        if !self.sync {
            return Ok(());
        }
        match object.kind {
            // The object first: on XFS its log force also covers the
            // directory (same transaction), and the directory's fsync then
            // finds nothing left to do.
            FileKind::Directory | FileKind::Regular => {
                self.object(object)?;
                self.dir(dir)
            }
            _ if set_after_creation(attrs) => self.filesystem(),
            _ => self.dir(dir),
        }
    }

    /// REMOVE and RMDIR: the directory the name was removed from.
    pub fn removed(&self, dir: &Node) -> Result<(), FsError> {
        if !self.sync {
            return Ok(());
        }
        self.dir(dir)
    }

    /// RENAME: both directories (once if they are the same). A directory
    /// that moved (its `..`) and a file replaced by the rename change in
    /// the same transaction as the directories.
    pub fn renamed(&self, from_dir: &Node, to_dir: &Node) -> Result<(), FsError> {
        if !self.sync {
            return Ok(());
        }
        self.dir(from_dir)?;
        if to_dir.kernel != from_dir.kernel {
            self.dir(to_dir)?;
        }
        Ok(())
    }

    /// LINK: the file (its link count) and the directory of the new name.
    pub fn linked(&self, file: &Node, dir: &Node) -> Result<(), FsError> {
        if !self.sync {
            return Ok(());
        }
        if file.kind == FileKind::Regular {
            self.object(file)?;
        }
        // A symlink's or special file's link count changes in the
        // transaction that adds the entry.
        self.dir(dir)
    }

    /// SETATTR: the object whose attributes changed.
    pub fn attrs_changed(&self, object: &Node) -> Result<(), FsError> {
        if !self.sync {
            return Ok(());
        }
        self.object(object)
    }

    /// What has been done so far.
    pub fn counters(&self) -> MetadataSyncCounters {
        let c = &self.counters;
        MetadataSyncCounters {
            dir_fsyncs: c.dir_fsyncs.load(Ordering::Relaxed),
            file_fsyncs: c.file_fsyncs.load(Ordering::Relaxed),
            filesystem_syncs: c.filesystem_syncs.load(Ordering::Relaxed),
        }
    }

    /// Makes `node`'s own metadata durable, whatever its type.
    fn object(&self, node: &Node) -> Result<(), FsError> {
        match node.kind {
            FileKind::Directory => self.dir(node),
            FileKind::Regular => {
                Counters::bump(&self.counters.file_fsyncs);
                // Never through the open-file cache's descriptor: the
                // kernel reports a failed writeback once to each open file,
                // and reported here (a SETATTR's NFS3ERR_IO) it would no
                // longer fail the COMMIT of the data it lost.
                fsync_node(node)
            }
            _ => self.filesystem(),
        }
    }

    /// fsync of a directory.
    fn dir(&self, dir: &Node) -> Result<(), FsError> {
        Counters::bump(&self.counters.dir_fsyncs);
        fsync_node(dir)
    }

    /// The whole filesystem, for what cannot be fsynced by itself.
    fn filesystem(&self) -> Result<(), FsError> {
        Counters::bump(&self.counters.filesystem_syncs);
        syncfs(&self.filesystem).map_err(|e| commit_failed(e, "syncfs of the export's filesystem"))
    }
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether CREATE-time could not apply all of `attrs`, so the new object
/// changes again after its creation: mirrors `ExportFs::finish_new`, which
/// sets owner, group, size and times after creating, and a mode whose
/// set-uid/set-gid/sticky bits creation may have dropped (the permission
/// bits are applied exactly at creation: the server's umask is 0).
fn set_after_creation(attrs: &SetAttrs) -> bool {
    attrs.uid.is_some()
        || attrs.gid.is_some()
        || attrs.size.is_some()
        || attrs.atime.is_some()
        || attrs.mtime.is_some()
        || attrs.mode.is_some_and(|m| m & 0o7000 != 0)
}

/// fsync of a directory or regular file through a descriptor of its own.
fn fsync_node(node: &Node) -> Result<(), FsError> {
    let flags = match node.kind {
        FileKind::Directory => OFlags::RDONLY | OFlags::DIRECTORY,
        // NONBLOCK: never wait for a lease or a mandatory lock holder.
        _ => OFlags::RDONLY | OFlags::NONBLOCK,
    };
    let path = proc_fd_path(node.fd());
    let opened = cred::as_root(|| {
        openat(
            CWD,
            path.as_c_str(),
            flags | OFlags::CLOEXEC | OFlags::NOCTTY,
            Mode::empty(),
        )
    })
    .map_err(|e| {
        tracing::error!(error = %e, "cannot switch to root credentials");
        FsError::Io
    })?;
    let what = || format!("fsync of {}", describe(node));
    let fd = opened.map_err(|e| commit_failed(e, &what()))?;
    fsync(&fd).map_err(|e| commit_failed(e, &what()))
}

/// A failed commit: logged, and an `NFS3ERR_IO` for the client (the change
/// was made but may not survive a crash).
fn commit_failed(errno: Errno, what: &str) -> FsError {
    tracing::error!(error = %errno, "{what} failed: metadata change not durable, answering NFS3ERR_IO");
    FsError::Io
}

/// The kernel's path of `node`, for log lines: `directory /srv/a/d`.
fn describe(node: &Node) -> String {
    let kind = match node.kind {
        FileKind::Regular => "file",
        FileKind::Directory => "directory",
        FileKind::BlockDevice => "block device",
        FileKind::CharDevice => "character device",
        FileKind::Symlink => "symlink",
        FileKind::Socket => "socket",
        FileKind::Fifo => "fifo",
    };
    match readlinkat(CWD, proc_fd_path(node.fd()).as_c_str(), Vec::new()) {
        Ok(path) => format!("{kind} {}", path.to_string_lossy()),
        Err(_) => format!("{kind} (no path; fd {})", node.fd().as_raw_fd()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::MacKey;
    use crate::ops;
    use crate::ops::{CreateHow, SpecialFile};
    use crate::testutil::{export, nobody, LoopFs};
    use dionfs_sys::cred::with_creds;

    /// Commits of every kind of object on a real filesystem, as a squashed
    /// caller that cannot read what it made.
    #[test]
    fn commits_every_kind_of_object_as_squashed_caller() {
        use std::os::unix::fs::PermissionsExt;
        for fstype in ["xfs", "ext4"] {
            let Some(fs) = LoopFs::new(fstype, 512) else {
                return;
            };
            let dir = fs.mount_point().join("export");
            std::fs::create_dir_all(&dir).expect("mkdir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
            let exp = export(&dir, 1, MacKey::from_bytes([5; 32]));
            let sync = MetadataSync::new(&exp, true).expect("sync");
            let root = exp.resolve(exp.root_handle()).expect("root");
            let none = SetAttrs {
                mode: Some(0),
                ..SetAttrs::default()
            };
            with_creds(&nobody(), || {
                let (file, _) = ops::create(&exp, &root, b"f", &CreateHow::Guarded(none.clone()))
                    .expect("create");
                sync.created(&root, &file, &none).expect("file");
                let (sub, _) = ops::mkdir(&exp, &root, b"d", &none).expect("mkdir");
                sync.created(&root, &sub, &none).expect("dir");
                let (link, _) =
                    ops::symlink(&exp, &root, b"l", b"f", &SetAttrs::default()).expect("symlink");
                sync.created(&root, &link, &SetAttrs::default())
                    .expect("symlink");
                let (fifo, _) =
                    ops::mknod(&exp, &root, b"p", SpecialFile::Fifo, &none, false).expect("fifo");
                sync.attrs_changed(&fifo).expect("fifo attributes");
                sync.linked(&file, &sub).expect("link");
                sync.renamed(&root, &sub).expect("rename");
                sync.removed(&sub).expect("remove");
            })
            .expect("creds");
            let c = sync.counters();
            assert_eq!(c.file_fsyncs, 2, "{c:?}");
            assert_eq!(c.filesystem_syncs, 1, "{c:?}");
            assert_eq!(c.dir_fsyncs, 8, "{c:?}");

            let lazy = MetadataSync::new(&exp, false).expect("async");
            lazy.removed(&root).expect("async commit");
            lazy.attrs_changed(&root).expect("async commit");
            assert_eq!(lazy.counters(), MetadataSyncCounters::default());
        }
    }
}
