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
//!   their own: an `O_PATH` descriptor (what a [`Node`] holds) cannot be
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
//! Group commit: concurrent commits of one directory share fsyncs. A
//! commit may only ride on an fsync that *started after* its change was
//! made; one that arrives while an fsync of that directory is running waits
//! for the next, which starts when the running one ends and covers every
//! commit that arrived meanwhile. (XFS and jbd2 batch concurrent log forces
//! too; this saves the system calls, the wake-ups and, on ext4, a cache
//! flush per caller.)

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dionfs_sys::cred;
use dionfs_sys::handle::KernelHandle;
use parking_lot::{Condvar, Mutex, MutexGuard};
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
    /// Directories with commits in progress; an entry lives while someone
    /// uses it.
    dirs: Mutex<HashMap<KernelHandle, Arc<DirCommits>>>,
    counters: Counters,
}

/// What [`MetadataSync`] did, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetadataSyncCounters {
    /// Commits of a directory asked for (each waits for one fsync).
    pub dir_commits: u64,
    /// fsyncs of directories issued (fewer than `dir_commits` when
    /// concurrent commits shared one).
    pub dir_fsyncs: u64,
    /// fsyncs of regular files.
    pub file_fsyncs: u64,
    /// Filesystem-wide `syncfs` calls (attribute changes of symlinks and
    /// special files).
    pub filesystem_syncs: u64,
}

#[derive(Default)]
struct Counters {
    dir_commits: AtomicU64,
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
            dirs: Mutex::new(HashMap::new()),
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
            dir_commits: c.dir_commits.load(Ordering::Relaxed),
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
                fsync_node(node)
            }
            _ => self.filesystem(),
        }
    }

    /// fsync of a directory, shared with concurrent commits of the same
    /// directory.
    fn dir(&self, dir: &Node) -> Result<(), FsError> {
        Counters::bump(&self.counters.dir_commits);
        let commits = {
            let mut dirs = self.dirs.lock();
            match dirs.get(&dir.kernel) {
                Some(c) => c.clone(),
                None => {
                    let c = Arc::<DirCommits>::default();
                    dirs.insert(dir.kernel.clone(), c.clone());
                    c
                }
            }
        };
        let result = commits
            .commit(|| {
                Counters::bump(&self.counters.dir_fsyncs);
                fsync_node(dir)
            })
            .map(|_generation| ());
        // Forget the directory once nobody else uses it. Clones are only
        // made under the map's lock, so the count cannot grow meanwhile.
        let mut dirs = self.dirs.lock();
        drop(commits);
        if dirs
            .get(&dir.kernel)
            .is_some_and(|c| Arc::strong_count(c) == 1)
        {
            dirs.remove(&dir.kernel);
        }
        result
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

/// The kernel's path of `node`, for log lines.
fn describe(node: &Node) -> String {
    match readlinkat(CWD, proc_fd_path(node.fd()).as_c_str(), Vec::new()) {
        Ok(path) => format!("{:?} {}", node.kind, path.to_string_lossy()),
        Err(_) => format!("{:?} {:?}", node.kind, node.kernel),
    }
}

/// Group commit of one directory: fsyncs are numbered in the order they
/// start; one runs at a time.
#[derive(Default)]
struct DirCommits {
    state: Mutex<Generations>,
    finished: Condvar,
}

#[derive(Default)]
struct Generations {
    /// The number of the latest fsync started.
    started: u64,
    /// The number of the latest fsync finished (`started` if none runs).
    finished: u64,
    /// The number of the latest fsync that failed (0: none).
    failed: u64,
}

impl DirCommits {
    /// Waits until an fsync that started after this call has finished,
    /// running it (`sync_now`) if nobody else is; returns that fsync's
    /// number. The caller's change must be complete before the call.
    fn commit(&self, sync_now: impl FnOnce() -> Result<(), FsError>) -> Result<u64, FsError> {
        let mut state = self.state.lock();
        // A running fsync may have started before our change: the first
        // one to start from now on is the one that covers us.
        let needed = state.started + 1;
        loop {
            if state.finished >= needed {
                // Finished: ours, or a later one (which covers us too).
                // Report a failure of any of them rather than miss ours.
                return if state.failed >= needed {
                    Err(FsError::Io)
                } else {
                    Ok(state.finished)
                };
            }
            if state.started == state.finished {
                // Nobody syncs: we run the next fsync, for everybody
                // waiting for it.
                state.started += 1;
                let this = state.started;
                let result = MutexGuard::unlocked(&mut state, sync_now);
                state.finished = this;
                if result.is_err() {
                    state.failed = this;
                }
                self.finished.notify_all();
                return result.map(|()| this);
            }
            self.finished.wait(&mut state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::MacKey;
    use crate::ops::{CreateHow, SpecialFile};
    use crate::testutil::{export, LoopFs};
    use dionfs_sys::cred::{with_creds, Creds};
    use std::sync::Barrier;
    use std::time::Duration;

    /// Every commit is covered by an fsync that started after its change,
    /// and concurrent commits share fsyncs.
    #[test]
    fn group_commit_covers_every_change_and_batches() {
        const THREADS: usize = 16;
        const ROUNDS: usize = 20;
        let commits = DirCommits::default();
        // Changes are numbered; each fsync notes, when it starts, how many
        // changes were complete (fsync n is entry n - 1).
        let changes = AtomicU64::new(0);
        let starts = Mutex::new(Vec::<u64>::new());
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        barrier.wait();
                        let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                        let generation = commits
                            .commit(|| {
                                starts.lock().push(changes.load(Ordering::SeqCst));
                                std::thread::sleep(Duration::from_millis(2));
                                Ok(())
                            })
                            .expect("commit");
                        let seen = starts.lock()[generation as usize - 1];
                        assert!(
                            seen >= mine,
                            "change {mine} rode on fsync {generation}, which started after only {seen} changes"
                        );
                    }
                });
            }
        });
        let fsyncs = starts.lock().len();
        assert!(fsyncs >= ROUNDS, "at least one fsync per round");
        assert!(
            fsyncs < THREADS * ROUNDS / 2,
            "{fsyncs} fsyncs for {} concurrent commits: no batching",
            THREADS * ROUNDS
        );
    }

    /// A failed fsync fails the commit that ran it and those that waited
    /// for it; the next one starts afresh.
    #[test]
    fn group_commit_failure_reaches_every_waiter() {
        let commits = DirCommits::default();
        let running = Barrier::new(2);
        let release = Barrier::new(2);
        std::thread::scope(|s| {
            // Holds fsync 1 open so the others queue for fsync 2.
            s.spawn(|| {
                commits
                    .commit(|| {
                        running.wait();
                        release.wait();
                        Ok(())
                    })
                    .expect("first")
            });
            running.wait();
            let waiters: Vec<_> = (0..4)
                .map(|_| s.spawn(|| commits.commit(|| Err(FsError::Io))))
                .collect();
            // Let the waiters queue up behind the running fsync.
            std::thread::sleep(Duration::from_millis(50));
            release.wait();
            for w in waiters {
                assert_eq!(w.join().expect("join"), Err(FsError::Io));
            }
        });
        assert!(
            commits.commit(|| Ok(())).is_ok(),
            "a new fsync after a failure"
        );
    }

    fn nobody() -> Creds {
        Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        }
    }

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
                let (file, _) = exp
                    .create(&root, b"f", &CreateHow::Guarded(none.clone()))
                    .expect("create");
                sync.created(&root, &file, &none).expect("file");
                let (sub, _) = exp.mkdir(&root, b"d", &none).expect("mkdir");
                sync.created(&root, &sub, &none).expect("dir");
                let (link, _) = exp
                    .symlink(&root, b"l", b"f", &SetAttrs::default())
                    .expect("symlink");
                sync.created(&root, &link, &SetAttrs::default())
                    .expect("symlink");
                let (fifo, _) = exp
                    .mknod(&root, b"p", SpecialFile::Fifo, &none, false)
                    .expect("fifo");
                sync.attrs_changed(&fifo).expect("fifo attributes");
                sync.linked(&file, &sub).expect("link");
                sync.renamed(&root, &sub).expect("rename");
                sync.removed(&sub).expect("remove");
            })
            .expect("creds");
            let c = sync.counters();
            assert_eq!(c.file_fsyncs, 2, "{c:?}");
            assert_eq!(c.filesystem_syncs, 1, "{c:?}");
            assert_eq!(c.dir_commits, 8, "{c:?}");
            assert!(sync.dirs.lock().is_empty(), "directories forgotten");

            let lazy = MetadataSync::new(&exp, false).expect("async");
            lazy.removed(&root).expect("async commit");
            lazy.attrs_changed(&root).expect("async commit");
            assert_eq!(lazy.counters(), MetadataSyncCounters::default());
        }
    }
}
