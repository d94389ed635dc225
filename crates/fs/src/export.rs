//! One exported directory tree: turning NFS file handles into open files
//! and names into handles, without ever leaving the export.
//!
//! Security rules (DESIGN.md, "Exports and security"):
//! - A handle is only accepted if its MAC verifies with the server key and
//!   it carries this export's id ([`crate::handle`]).
//! - Lookups are single components, opened with `openat2(2)` and
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//!   RESOLVE_NO_XDEV`: a symlink is never followed on a client's behalf (its
//!   handle is the symlink itself), and mount points inside the export are
//!   not crossed (LOOKUP of one fails with ACCES).
//! - `..` of the export root is the export root.
//! - A *directory* reached by handle or by `..` must still lie under the
//!   export root, checked by comparing the kernel's path of the descriptor
//!   with the root's; a directory that was moved out is `Stale`. This is
//!   knfsd's `nfsd_acceptable()` rule. Like knfsd with `no_subtree_check`,
//!   non-directories are not checked: a file that a local user moved out of
//!   the export stays reachable through a handle issued before the move
//!   (a file can have many names, so "under the root" is not well defined).
//!   When the export root is the root of its mount, every file on the mount
//!   is inside and the check is skipped.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dionfs_dataplane::DataFile;
use dionfs_logs::LogEvery;
use dionfs_sys::cred;
use dionfs_sys::handle::{name_to_handle_at, open_by_handle_at, KernelHandle};
use rustix::fs::{
    openat, openat2, readlinkat, statx, AtFlags, Mode, OFlags, ResolveFlags, StatxAttributes,
    StatxFlags, CWD,
};
use rustix::io::Errno;

use crate::attr::{Attr, FileKind};
use crate::cache::{Key, OpenFile, OpenFileCache};
use crate::handle::{self, MacKey};
use crate::FsError;

/// Longest file name we accept (Linux `NAME_MAX`, our PATHCONF `name_max`).
pub const NAME_MAX: usize = 255;

/// A file of the export, resolved: an `O_PATH` descriptor (an ordinary
/// read-only one for files we just created), its NFS handle and its type.
/// Cheap to hold for the duration of one request; not meant to be cached
/// (the open-file cache holds its own).
pub struct Node {
    pub(crate) fd: OwnedFd,
    pub(crate) kernel: KernelHandle,
    pub(crate) fh: Vec<u8>,
    pub(crate) kind: FileKind,
}

impl Node {
    /// The NFS file handle of this file.
    pub fn fh(&self) -> &[u8] {
        &self.fh
    }

    /// The file's type.
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Its `O_PATH` descriptor, to watch it by (delegations).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn require_dir(&self) -> Result<(), FsError> {
        if self.kind == FileKind::Directory {
            Ok(())
        } else {
            Err(FsError::NotDir)
        }
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("fd", &self.fd.as_raw_fd())
            .field("kind", &self.kind)
            .field("kernel", &self.kernel)
            .finish()
    }
}

/// The filesystem backend of one export. All methods are blocking; the
/// server calls them on tokio's blocking pool, the metadata operations
/// inside `dionfs_sys::cred::with_creds` with the caller's squashed
/// credentials so that the kernel checks permissions as that user.
pub struct ExportFs {
    pub(crate) export_id: u16,
    /// The root as the configuration names it, for log lines.
    root_path: PathBuf,
    pub(crate) key: MacKey,
    pub(crate) root: Node,
    /// A normal (not `O_PATH`) descriptor of the root: `open_by_handle_at`
    /// refuses `O_PATH` ones as its mount argument.
    pub(crate) mount_fd: OwnedFd,
    /// Whether the export root is the root of its mount, so that every file
    /// reachable by handle is inside the export.
    root_is_mount_root: bool,
    /// The filesystem (superblock) the export lives on: with a kernel
    /// handle, the open-file cache's key, so that exports sharing a
    /// filesystem share its open files.
    pub(crate) fs_id: u64,
    pub(crate) cache: Arc<OpenFileCache>,
    /// The checksum store, on exports with `integrity = "crc32c"`: every
    /// regular file opened for I/O gets its checksums attached.
    pub(crate) integrity: Option<Arc<dionfs_integrity::Store>>,
}

impl std::fmt::Debug for ExportFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportFs")
            .field("export_id", &self.export_id)
            .field("root", &self.root)
            .finish()
    }
}

impl ExportFs {
    /// The server-wide cache of open files this export shares.
    pub fn open_file_cache(&self) -> &Arc<OpenFileCache> {
        &self.cache
    }

    /// Opens the export rooted at `root` (a directory; symlinks in this
    /// administrator-given path are followed once, here).
    ///
    /// Also sets the process umask to 0: NFS clients send the exact mode
    /// they want for new files (RFC 1813 `sattr3`), and knfsd applies it
    /// without a umask. The umask is process-wide and the server never
    /// wants one, so doing it here keeps every caller correct.
    pub fn open(
        root: &Path,
        export_id: u16,
        key: MacKey,
        cache: Arc<OpenFileCache>,
    ) -> io::Result<ExportFs> {
        rustix::process::umask(Mode::empty());
        let mount_fd = openat(
            CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let root_fd = openat(
            &mount_fd,
            c".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let stx = statx(
            &root_fd,
            c"",
            AtFlags::EMPTY_PATH,
            StatxFlags::TYPE | StatxFlags::INO,
        )?;
        let root_dev = (u64::from(stx.stx_dev_major) << 32) | u64::from(stx.stx_dev_minor);
        let root_is_mount_root = stx
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
            && stx.stx_attributes.contains(StatxAttributes::MOUNT_ROOT);
        let (kernel, mount_id) = name_to_handle_at(&root_fd, c"", AtFlags::EMPTY_PATH)?;
        let fs_id = u64::try_from(mount_id)
            .ok()
            .and_then(fs_identity)
            .unwrap_or(root_dev);
        let fh = handle::encode(&key, export_id, &kernel)
            .map_err(|e| io::Error::other(format!("{}: {e}", root.display())))?;
        // Every call opens its files by handle. A server that cannot (no
        // CAP_DAC_READ_SEARCH; a container's system call filter, which
        // refuses it by default) would start and then fail every MNT.
        cred::as_root(|| open_by_handle_at(&mount_fd, &kernel, OFlags::PATH))?.map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot open files by handle ({e}): dionfs needs the capability \
                     CAP_DAC_READ_SEARCH and the system call open_by_handle_at, which \
                     containers refuse by default (systemd-nspawn: \
                     --system-call-filter=open_by_handle_at)"
                ),
            )
        })?;
        Ok(ExportFs {
            export_id,
            root_path: root.to_path_buf(),
            key,
            root: Node {
                fd: root_fd,
                kernel,
                fh,
                kind: FileKind::Directory,
            },
            mount_fd,
            root_is_mount_root,
            fs_id,
            cache,
            integrity: None,
        })
    }

    /// Keeps block checksums of this export's files in `store` (the
    /// export's `integrity = "crc32c"`). Exports sharing a filesystem share
    /// its open files, so they must agree on this (the server checks).
    pub fn set_integrity(&mut self, store: Arc<dionfs_integrity::Store>) {
        self.integrity = Some(store);
    }

    /// Whether this export keeps block checksums.
    pub fn has_integrity(&self) -> bool {
        self.integrity.is_some()
    }

    /// The filesystem (superblock) the export lives on, as the open-file
    /// cache and the checksum store key files.
    pub fn fs_id(&self) -> u64 {
        self.fs_id
    }

    /// Opens the inode `kernel` of this export's filesystem read-only, for
    /// integrity recovery and scrub; `Stale` if it no longer exists or has
    /// no name left.
    pub fn open_inode(&self, kernel: &KernelHandle) -> Result<OwnedFd, FsError> {
        let fd = self.open_kernel_handle(kernel, OFlags::RDONLY)?;
        if crate::attr::Attr::of_fd(&fd)?.nlink == 0 {
            return Err(FsError::Stale);
        }
        Ok(fd)
    }

    /// A new open file description of the regular file `fh` names, for
    /// byte-range locks held on a remote owner's behalf (NLM): read-write
    /// where the file and filesystem allow, else read-only (the bool says
    /// which). Opened as the server, like the data plane's descriptors;
    /// NLM checks the caller's access itself.
    pub fn open_for_locks(&self, fh: &[u8]) -> Result<(OwnedFd, bool), FsError> {
        let node = self.resolve(fh)?;
        match node.kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        let flags = OFlags::CLOEXEC | OFlags::NOCTTY;
        match self.open_kernel_handle(&node.kernel, flags | OFlags::RDWR) {
            Ok(fd) => Ok((fd, true)),
            Err(FsError::Rofs | FsError::Access | FsError::Perm) => Ok((
                self.open_kernel_handle(&node.kernel, flags | OFlags::RDONLY)?,
                false,
            )),
            Err(e) => Err(e),
        }
    }

    /// This export's id (also inside every handle it issues).
    pub fn export_id(&self) -> u16 {
        self.export_id
    }

    /// The handle of the export root (what MOUNT returns).
    pub fn root_handle(&self) -> &[u8] {
        &self.root.fh
    }

    /// Whether `fh` is a handle this export issued (length, version, MAC,
    /// export id), without opening anything: `BadHandle` if not.
    pub fn verify_handle(&self, fh: &[u8]) -> Result<(), FsError> {
        handle::verify(&self.key, self.export_id, fh).map(|_| ())
    }

    /// Verifies `fh` and opens the file it names (`O_PATH`).
    ///
    /// Not ours (length, version, MAC, export): `BadHandle`. The file no
    /// longer exists, or is a directory no longer under the export root:
    /// `Stale`. Switches to root credentials for `open_by_handle_at` if the
    /// thread is squashed (cheaper to call it before `with_creds`).
    pub fn resolve(&self, fh: &[u8]) -> Result<Node, FsError> {
        let kernel = handle::decode(&self.key, self.export_id, fh)?;
        let fd = self.open_kernel_handle(&kernel, OFlags::PATH)?;
        let stx = statx(
            &fd,
            c"",
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            StatxFlags::TYPE | StatxFlags::NLINK,
        )?;
        let kind = FileKind::from_mode(u32::from(stx.stx_mode))?;
        if kind == FileKind::Directory && !self.is_within_export(fd.as_fd())? {
            return Err(FsError::Stale);
        }
        // A file with no name left is deleted, even while some descriptor
        // (ours in the open-file cache, say) keeps the inode alive: its
        // handle is stale, as RFC 1813 says of removed files.
        if kind != FileKind::Directory && stx.stx_nlink == 0 {
            self.cache.evict(&(self.fs_id, kernel));
            return Err(FsError::Stale);
        }
        Ok(Node {
            fd,
            kernel,
            fh: fh.to_vec(),
            kind,
        })
    }

    /// `open_by_handle_at` on this export's mount, as root.
    pub(crate) fn open_kernel_handle(
        &self,
        kernel: &KernelHandle,
        flags: OFlags,
    ) -> Result<OwnedFd, FsError> {
        let opened =
            cred::as_root(|| open_by_handle_at(&self.mount_fd, kernel, flags)).map_err(|e| {
                tracing::error!(error = %e, "cannot switch to root credentials");
                FsError::ServerFault
            })?;
        opened.map_err(|e| match Errno::from_io_error(&e) {
            Some(Errno::STALE) | Some(Errno::NOENT) => FsError::Stale,
            // The MAC says we issued it, but this filesystem cannot decode
            // it (the export now points at another filesystem).
            Some(Errno::INVAL) | Some(Errno::OPNOTSUPP) => FsError::BadHandle,
            _ => FsError::from(e),
        })
    }

    /// LOOKUP: the file called `name` in directory `dir`, and its
    /// attributes. `.` is `dir`; `..` of the export root is the root.
    pub fn lookup(&self, dir: &Node, name: &[u8]) -> Result<(Node, Attr), FsError> {
        dir.require_dir()?;
        let name = check_name(name)?;
        let fd = match name.as_bytes() {
            b"." => openat(
                dir.fd(),
                c".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?,
            b".." => self.open_parent(dir)?,
            _ => open_beneath(dir.fd(), &name, OFlags::PATH | OFlags::NOFOLLOW)?,
        };
        self.node_from_fd(fd)
    }

    /// `..` of `dir`, kept inside the export.
    fn open_parent(&self, dir: &Node) -> Result<OwnedFd, FsError> {
        if dir.kernel == self.root.kernel {
            // Searching the root still needs search permission on it.
            return Ok(openat(
                self.root.fd(),
                c".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?);
        }
        // RESOLVE_BENEATH would refuse "..", which is the point: here we
        // walk up on purpose and check the result instead.
        let fd = openat2(
            dir.fd(),
            c"..",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_XDEV | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(lookup_errno)?;
        if !self.is_within_export(fd.as_fd())? {
            // `dir` was moved out of the export after we resolved it.
            return Err(FsError::Stale);
        }
        Ok(fd)
    }

    /// Builds a [`Node`] (and its attributes) for a descriptor we opened
    /// inside the export.
    pub(crate) fn node_from_fd(&self, fd: OwnedFd) -> Result<(Node, Attr), FsError> {
        let attr = Attr::of_fd(&fd)?;
        let (kernel, _mount_id) = name_to_handle_at(&fd, c"", AtFlags::EMPTY_PATH)?;
        let fh = handle::encode(&self.key, self.export_id, &kernel)?;
        let node = Node {
            fd,
            kernel,
            fh,
            kind: attr.kind,
        };
        Ok((node, attr))
    }

    /// Whether the directory open at `fd` lies under the export root,
    /// judged by the kernel's current path of both (`/proc` magic links,
    /// which are only meaningful for directories: they have one name).
    fn is_within_export(&self, fd: BorrowedFd<'_>) -> Result<bool, FsError> {
        if self.root_is_mount_root {
            return Ok(true);
        }
        let root = fd_path(self.root.fd())?;
        let path = fd_path(fd)?;
        if path.ends_with(b" (deleted)") {
            return Ok(false);
        }
        if path == root || root == b"/" {
            return Ok(true);
        }
        Ok(path.len() > root.len() && path.starts_with(&root) && path[root.len()] == b'/')
    }
}

// Opening regular files for the data plane, through the open-file cache.
impl ExportFs {
    /// The open file for READ/WRITE/COMMIT on the regular file `fh`, from
    /// the cache or opened now (by handle, as root: `O_RDWR`, or `O_RDONLY`
    /// where writing is refused, e.g. on a read-only filesystem; plus an
    /// `O_DIRECT` descriptor beside it where the filesystem allows one).
    ///
    /// This does not check the caller's permission: call
    /// [`crate::ops::check_file_access`] under the caller's credentials.
    pub fn open_file(&self, fh: &[u8]) -> Result<Arc<OpenFile>, FsError> {
        self.open_file_as(fh, Checksums::Required)
    }

    /// [`ExportFs::open_file`] for READ and COMMIT, which need no new
    /// checksums: where the file is new to the checksum store and its
    /// checksums cannot be created because the state directory's
    /// filesystem is full, the file without them, answered unchecked (as a
    /// file whose stale checksums cannot be rebuilt is) rather than
    /// failing. That open is not cached, so the next call tries again, and
    /// WRITEs, which go through [`ExportFs::open_file`], still fail with
    /// `NFS3ERR_NOSPC` until there is room.
    pub fn open_file_to_read(&self, fh: &[u8]) -> Result<Arc<OpenFile>, FsError> {
        self.open_file_as(fh, Checksums::IfRoom)
    }

    fn open_file_as(&self, fh: &[u8], checksums: Checksums) -> Result<Arc<OpenFile>, FsError> {
        let kernel = crate::handle::decode(&self.key, self.export_id, fh)?;
        let key = (self.fs_id, kernel);
        if let Some(file) = self.cache.get(&key) {
            // No syscall on a hit: a file deleted behind our back (not
            // through REMOVE/RENAME, which evict) is found by the statx
            // every READ/WRITE/COMMIT makes for its reply attributes
            // ([`crate::ops::file_attr`]), which answers STALE.
            return Ok(file);
        }
        // Verifies the file still exists (and a directory still lies in
        // the export) and tells its type before anything is opened for I/O.
        let node = self.resolve(fh)?;
        self.open_node_as(node.kind, key, checksums)
    }

    /// [`ExportFs::open_file`] when that needs no syscall: the file if the
    /// cache holds it, `None` if it would have to be opened. For async
    /// callers, which then open it on a blocking thread.
    pub fn cached_file(&self, fh: &[u8]) -> Result<Option<Arc<OpenFile>>, FsError> {
        let kernel = crate::handle::decode(&self.key, self.export_id, fh)?;
        Ok(self.cache.get(&(self.fs_id, kernel)))
    }

    /// [`ExportFs::open_file`] for a file already resolved.
    pub(crate) fn open_file_of(&self, node: &Node) -> Result<Arc<OpenFile>, FsError> {
        let key = (self.fs_id, node.kernel.clone());
        if let Some(file) = self.cache.get(&key) {
            return Ok(file);
        }
        self.open_node(node.kind, key)
    }

    /// Opens the data-plane descriptors of a resolved file of type `kind`
    /// (by its kernel handle, the second half of `key`) and registers them
    /// (or returns the file a concurrent opener registered).
    fn open_node(&self, kind: FileKind, key: Key) -> Result<Arc<OpenFile>, FsError> {
        self.open_node_as(kind, key, Checksums::Required)
    }

    fn open_node_as(
        &self,
        kind: FileKind,
        key: Key,
        checksums: Checksums,
    ) -> Result<Arc<OpenFile>, FsError> {
        match kind {
            FileKind::Regular => {}
            FileKind::Directory => return Err(FsError::IsDir),
            _ => return Err(FsError::Inval),
        }
        let kernel = &key.1;
        let (buffered, access) = match self.open_kernel_handle(kernel, OFlags::RDWR) {
            Ok(fd) => (fd, OFlags::RDWR),
            Err(FsError::Rofs | FsError::Access | FsError::Perm) => (
                self.open_kernel_handle(kernel, OFlags::RDONLY)?,
                OFlags::RDONLY,
            ),
            Err(e) => return Err(e),
        };
        let direct = match self.open_kernel_handle(kernel, access | OFlags::DIRECT) {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(error = %e, "no O_DIRECT descriptor for this file");
                None
            }
        };
        let sums = match &self.integrity {
            Some(store) => {
                match store.open_file(integrity_key(self.fs_id, kernel), buffered.as_fd()) {
                    Ok(sums) => Some(sums),
                    Err(e) => {
                        checksums_open_failed(&e);
                        if checksums == Checksums::Required || !state_full(&e) {
                            return Err(FsError::from(e));
                        }
                        None
                    }
                }
            }
            None => None,
        };
        let mut data = DataFile::new(buffered, direct).map_err(|e| {
            tracing::warn!(error = %e, "cannot set up the data plane for a file");
            match Errno::from_io_error(&e) {
                Some(errno) => FsError::from(errno),
                None => FsError::ServerFault,
            }
        })?;
        if let Some(sums) = sums {
            data = data.with_integrity(sums);
        }
        let file = Arc::new(OpenFile::new(
            key.clone(),
            data.with_export(&self.root_path),
        ));
        if self.integrity.is_some() && file.data().integrity().is_none() {
            // Without the checksums it must have: for this call only.
            return Ok(file);
        }
        Ok(self.cache.insert(key, file))
    }
}

/// Whether [`ExportFs::open_node_as`] may open a file of an integrity
/// export without its checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Checksums {
    Required,
    /// Without them if the state directory is full (READ, COMMIT).
    IfRoom,
}

/// The checksum store's name for the inode `kernel` of filesystem `fs_id`.
pub(crate) fn integrity_key(fs_id: u64, kernel: &KernelHandle) -> dionfs_integrity::FileKey {
    dionfs_integrity::FileKey {
        fs_id,
        handle_type: kernel.handle_type,
        handle: kernel.bytes.clone(),
    }
}

/// A file's checksums could not be opened (for a file new to the store,
/// created: impossible with the state directory's filesystem full), so
/// neither could the file: logged at most once a minute, since every call
/// on such a file tries again. The client gets the errno (NFS3ERR_NOSPC).
fn checksums_open_failed(e: &std::io::Error) {
    static WARNED: LogEvery = LogEvery::new(std::time::Duration::from_secs(60));
    if WARNED.due() {
        if state_full(e) {
            tracing::error!(error = %e, "cannot create a file's checksums, the state directory \
                being full: WRITEs of files new to the checksum store fail (NFS3ERR_NOSPC) and \
                their READs are answered unchecked until it has room; repeats within a minute \
                are not logged");
        } else {
            tracing::error!(error = %e, "cannot open a file's checksums, so its READs and WRITEs \
                fail; repeats within a minute are not logged");
        }
    }
}

/// Whether `e`, from opening a file's checksums, says the state
/// directory's filesystem is full (or its quota spent).
fn state_full(e: &std::io::Error) -> bool {
    matches!(Errno::from_io_error(e), Some(Errno::NOSPC | Errno::DQUOT))
}

/// The device number of the superblock behind mount `mount_id`, from
/// `/proc/self/mountinfo` (field 3, `major:minor`). Unlike a file's
/// `st_dev`, which btrfs makes different per subvolume, it is the same
/// for every file and every mount (bind mounts included) of one
/// filesystem, which is what a kernel file handle is relative to.
pub(crate) fn fs_identity(mount_id: u64) -> Option<u64> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let id: u64 = fields.next()?.parse().ok()?;
        if id != mount_id {
            return None;
        }
        let (major, minor) = fields.nth(1)?.split_once(':')?;
        Some((major.parse::<u64>().ok()? << 32) | minor.parse::<u64>().ok()?)
    })
}

/// Opens the single component `name` of `dir`, never following a symlink
/// or leaving `dir`, and never crossing into another mount.
pub(crate) fn open_beneath(
    dir: BorrowedFd<'_>,
    name: &CString,
    flags: OFlags,
) -> Result<OwnedFd, FsError> {
    create_beneath(dir, name, flags, Mode::empty())
}

/// [`open_beneath`] with the mode for `O_CREAT`.
pub(crate) fn create_beneath(
    dir: BorrowedFd<'_>,
    name: &CString,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, FsError> {
    openat2(
        dir,
        name.as_c_str(),
        flags | OFlags::CLOEXEC,
        mode,
        ResolveFlags::BENEATH
            | ResolveFlags::NO_SYMLINKS
            | ResolveFlags::NO_MAGICLINKS
            | ResolveFlags::NO_XDEV,
    )
    .map_err(lookup_errno)
}

/// Errors of our `openat2` lookups: a mount point inside the export is
/// not crossed (`EXDEV`), which the client sees as ACCES; `EAGAIN` is
/// `RESOLVE_BENEATH` refusing because of a concurrent rename.
fn lookup_errno(errno: Errno) -> FsError {
    match errno {
        Errno::XDEV => FsError::Access,
        other => FsError::from(other),
    }
}

/// Validates one file name from a client. The rules and statuses are
/// knfsd's (`lookup_one_common` returns EACCES for an empty name or one
/// containing `/` or NUL). `.` and `..` pass; each operation decides what
/// they mean for it.
pub(crate) fn check_name(name: &[u8]) -> Result<CString, FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') {
        return Err(FsError::Access);
    }
    CString::new(name).map_err(|_| FsError::Access)
}

/// Whether a validated name is `.` or `..`.
pub(crate) fn is_dot_or_dotdot(name: &CString) -> bool {
    matches!(name.as_bytes(), b"." | b"..")
}

/// `/proc/thread-self/fd/N`: the path through which calls that have no
/// `AT_EMPTY_PATH` form (chmod, truncate, access, link) reach the file an
/// `O_PATH` descriptor names. The kernel jumps through the magic link to
/// that very inode, without following a symlink it may be.
pub(crate) fn proc_fd_path(fd: BorrowedFd<'_>) -> CString {
    let path = format!("/proc/thread-self/fd/{}", fd.as_raw_fd());
    // A formatted integer after a fixed prefix contains no NUL byte.
    CString::new(path).unwrap_or_default()
}

/// The kernel's current path of `fd` (what `/proc/thread-self/fd/N` says).
fn fd_path(fd: BorrowedFd<'_>) -> Result<Vec<u8>, FsError> {
    let link = readlinkat(CWD, proc_fd_path(fd).as_c_str(), Vec::new())?;
    Ok(link.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;
    use crate::testutil::{export, LoopFs};
    use std::os::unix::fs::symlink;

    #[test]
    fn names_are_checked_like_knfsd() {
        assert_eq!(check_name(b""), Err(FsError::Access));
        assert_eq!(check_name(b"a/b"), Err(FsError::Access));
        assert_eq!(check_name(b"a\0b"), Err(FsError::Access));
        assert_eq!(check_name(&[b'x'; 256]), Err(FsError::NameTooLong));
        assert!(check_name(&[b'x'; 255]).is_ok());
        assert!(check_name(b"..").is_ok());
    }

    #[test]
    fn handles_round_trip_survive_restart_and_go_stale() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
        std::fs::write(dir.join("sub/file"), b"x").expect("write");

        let key = MacKey::from_bytes([3; 32]);
        let exp = export(&dir, 7, key.clone());
        let root = exp.resolve(exp.root_handle()).expect("root");
        assert_eq!(root.kind(), FileKind::Directory);
        let (sub, _) = exp.lookup(&root, b"sub").expect("sub");
        let (file, attr) = exp.lookup(&sub, b"file").expect("file");
        assert_eq!(attr.kind, FileKind::Regular);
        assert_eq!(attr.size, 1);
        assert_eq!(handle::export_id(file.fh()), Some(7));
        let fh = file.fh().to_vec();
        let again = exp.resolve(&fh).expect("resolve");
        assert_eq!(again.kernel, file.kernel);

        // A new ExportFs (a server restart) with the same key accepts it.
        let restarted = export(&dir, 7, key.clone());
        assert_eq!(
            restarted.resolve(&fh).expect("after restart").kind(),
            FileKind::Regular
        );
        // Another key or export id does not.
        let other_key = export(&dir, 7, MacKey::from_bytes([4; 32]));
        assert_eq!(other_key.resolve(&fh).err(), Some(FsError::BadHandle));
        let other_export = export(&dir, 8, key);
        assert_eq!(other_export.resolve(&fh).err(), Some(FsError::BadHandle));

        // Any flipped byte is a bad handle.
        for i in 0..fh.len() {
            let mut bad = fh.clone();
            bad[i] ^= 0x40;
            assert_eq!(
                exp.resolve(&bad).err(),
                Some(FsError::BadHandle),
                "byte {i}"
            );
        }

        // Deleted (and no longer open anywhere): stale.
        drop((file, again));
        std::fs::remove_file(dir.join("sub/file")).expect("rm");
        assert_eq!(exp.resolve(&fh).err(), Some(FsError::Stale));
    }

    #[test]
    fn dotdot_stays_inside_and_symlinks_are_not_followed() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(dir.join("a/b")).expect("mkdir");
        std::fs::write(fs.mount_point().join("secret"), b"outside").expect("write");
        symlink("../secret", dir.join("up")).expect("symlink");
        symlink("/etc", dir.join("abs")).expect("symlink");
        let exp = export(&dir, 1, MacKey::from_bytes([1; 32]));
        let root = exp.resolve(exp.root_handle()).expect("root");

        // `..` at the root is the root.
        let (parent, _) = exp.lookup(&root, b"..").expect("..");
        assert_eq!(parent.fh(), exp.root_handle());
        let (dot, _) = exp.lookup(&root, b".").expect(".");
        assert_eq!(dot.fh(), exp.root_handle());
        // `..` of a subdirectory works and can come back to the root.
        let (a, _) = exp.lookup(&root, b"a").expect("a");
        let (b, _) = exp.lookup(&a, b"b").expect("b");
        let (b_parent, _) = exp.lookup(&b, b"..").expect("b/..");
        assert_eq!(b_parent.fh(), a.fh());
        let (a_parent, _) = exp.lookup(&a, b"..").expect("a/..");
        assert_eq!(a_parent.fh(), exp.root_handle());

        // Symlinks are returned as symlinks, never followed.
        for name in [&b"up"[..], b"abs"] {
            let (link, attr) = exp.lookup(&root, name).expect("symlink");
            assert_eq!(attr.kind, FileKind::Symlink);
            assert_eq!(link.kind(), FileKind::Symlink);
            assert_eq!(exp.lookup(&link, b"x").err(), Some(FsError::NotDir));
        }
        assert_eq!(
            ops::readlink(&exp.lookup(&root, b"up").expect("up").0),
            Ok(b"../secret".to_vec())
        );
        // Multi-component names cannot be used to walk anywhere.
        assert_eq!(exp.lookup(&root, b"../secret").err(), Some(FsError::Access));
        assert_eq!(exp.lookup(&root, b"a/b").err(), Some(FsError::Access));
        assert_eq!(exp.lookup(&root, b"").err(), Some(FsError::Access));
        assert_eq!(
            exp.lookup(&root, &[b'n'; 256]).err(),
            Some(FsError::NameTooLong)
        );
        assert_eq!(exp.lookup(&root, b"missing").err(), Some(FsError::NoEnt));

        // A directory moved out of the export is stale, by handle and by `..`.
        let (b_again, _) = exp.lookup(&a, b"b").expect("b");
        std::fs::rename(dir.join("a/b"), fs.mount_point().join("b-outside")).expect("mv out");
        assert_eq!(exp.resolve(b.fh()).err(), Some(FsError::Stale));
        std::fs::create_dir(fs.mount_point().join("b-outside/c")).expect("mkdir c");
        let (c, _) = exp.lookup(&b_again, b"c").expect("c, through an old node");
        assert_eq!(exp.lookup(&c, b"..").err(), Some(FsError::Stale));
    }

    #[test]
    fn mount_points_are_not_crossed() {
        let Some(fs) = LoopFs::new("ext4", 64) else {
            return;
        };
        let dir = fs.mount_point().join("export");
        std::fs::create_dir_all(dir.join("mnt")).expect("mkdir");
        let Some(inner) = LoopFs::mounted_at("ext4", 64, &dir.join("mnt")) else {
            return;
        };
        let exp = export(&dir, 1, MacKey::from_bytes([1; 32]));
        let root = exp.resolve(exp.root_handle()).expect("root");
        assert_eq!(exp.lookup(&root, b"mnt").err(), Some(FsError::Access));
        drop(exp);
        drop(inner);
    }
}
