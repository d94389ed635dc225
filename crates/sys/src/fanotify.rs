//! fanotify(7) on single files, for delegations: an open of a marked file
//! by any process is held by the kernel until we answer it
//! (`FAN_OPEN_PERM`), and a write to one (or a truncate) is told after
//! the fact (`FAN_MODIFY`). Needs `CAP_SYS_ADMIN` (`FAN_CLASS_CONTENT`).
//! [`FidWatch`], a second group, tells changes made without an open:
//! attributes and link count (chmod, chown, utimes, link, unlink:
//! `FAN_ATTRIB`) and renames (`FAN_MOVE_SELF`), naming the file by its
//! kernel handle (those events need `FAN_REPORT_FID`, which a group of
//! permission events cannot have).
//!
//! Why not a lease (`F_SETLEASE`), as knfsd takes through the VFS: a
//! userspace lease is broken by every other open description of the file,
//! the server's own included (its open-file cache opens files read-write),
//! and the open that breaks it waits up to `lease-break-time`; knfsd's
//! delegations are `FL_DELEG` leases, which know their own breaker
//! (`lm_breaker_owns_lease`) and which userspace cannot take.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// What a mark watches: opens (held until answered) and writes.
const MASK: u64 = libc::FAN_OPEN_PERM | libc::FAN_MODIFY;

/// A fanotify group of the content class.
pub struct Fanotify {
    fd: OwnedFd,
}

/// One event read.
pub struct Event {
    /// `FAN_OPEN_PERM`, `FAN_MODIFY`, `FAN_Q_OVERFLOW` bits.
    pub mask: u64,
    /// The process (thread group) that caused it.
    pub pid: i32,
    /// The file, opened read-only for us by the kernel; what a permission
    /// event is answered by ([`Fanotify::answer`]). None for an overflow.
    pub file: Option<OwnedFd>,
}

impl Event {
    /// Whether the event waits for an answer.
    pub fn is_permission(&self) -> bool {
        self.mask & libc::FAN_OPEN_PERM != 0
    }

    /// Whether events were lost (the queue overflowed).
    pub fn is_overflow(&self) -> bool {
        self.mask & libc::FAN_Q_OVERFLOW != 0
    }
}

impl Fanotify {
    /// A new group; `EPERM` without `CAP_SYS_ADMIN`.
    pub fn new() -> io::Result<Fanotify> {
        let fd = init(
            libc::FAN_CLASS_CONTENT,
            libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC,
        )?;
        Ok(Fanotify { fd })
    }

    fn mark(&self, flags: libc::c_uint, file: BorrowedFd<'_>) -> io::Result<()> {
        mark(&self.fd, flags, MASK, file)
    }

    /// Watches the file `file` refers to.
    pub fn watch(&self, file: BorrowedFd<'_>) -> io::Result<()> {
        self.mark(libc::FAN_MARK_ADD, file)
    }

    /// Stops watching it.
    pub fn unwatch(&self, file: BorrowedFd<'_>) -> io::Result<()> {
        self.mark(libc::FAN_MARK_REMOVE, file)
    }

    /// Waits for events and returns those read (at least one).
    pub fn read(&self) -> io::Result<Vec<Event>> {
        let mut buf = [0u8; 4096];
        let n = read_events(&self.fd, &mut buf)?;
        let events = parse(&buf[..n])?
            .into_iter()
            .map(|(meta, _)| Event {
                mask: meta.mask,
                pid: meta.pid,
                file: (meta.fd >= 0).then(|| {
                    // SAFETY: the kernel opened this descriptor for us,
                    // and each event is taken once.
                    unsafe { OwnedFd::from_raw_fd(meta.fd) }
                }),
            })
            .collect();
        Ok(events)
    }

    /// Lets the open of permission event `file` go on.
    pub fn allow(&self, file: RawFd) -> io::Result<()> {
        let response = libc::fanotify_response {
            fd: file,
            response: libc::FAN_ALLOW,
        };
        let len = std::mem::size_of::<libc::fanotify_response>();
        // SAFETY: `response` is a plain struct of `len` bytes.
        let n = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&response as *const libc::fanotify_response).cast::<libc::c_void>(),
                len,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A notification group reporting files by handle, for what happens to
/// a file without an open.
pub struct FidWatch {
    fd: OwnedFd,
}

/// One event of a [`FidWatch`].
pub struct FidEvent {
    pub mask: u64,
    pub pid: i32,
    /// The file's kernel handle (as `name_to_handle_at` gives it).
    pub handle: Option<crate::handle::KernelHandle>,
}

/// What a [`FidWatch`] mark watches.
const FID_MASK: u64 = libc::FAN_ATTRIB | libc::FAN_MOVE_SELF;

impl FidWatch {
    /// A new group; `EPERM` without `CAP_SYS_ADMIN`.
    pub fn new() -> io::Result<FidWatch> {
        let fd = init(
            libc::FAN_CLASS_NOTIF | libc::FAN_REPORT_FID,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )?;
        Ok(FidWatch { fd })
    }

    /// Watches the file `file` refers to.
    pub fn watch(&self, file: BorrowedFd<'_>) -> io::Result<()> {
        mark(&self.fd, libc::FAN_MARK_ADD, FID_MASK, file)
    }

    /// Stops watching it.
    pub fn unwatch(&self, file: BorrowedFd<'_>) -> io::Result<()> {
        mark(&self.fd, libc::FAN_MARK_REMOVE, FID_MASK, file)
    }

    /// Waits for events and returns those read.
    pub fn read(&self) -> io::Result<Vec<FidEvent>> {
        let mut buf = [0u8; 4096];
        let n = read_events(&self.fd, &mut buf)?;
        let events = parse(&buf[..n])?
            .into_iter()
            .map(|(meta, info)| FidEvent {
                mask: meta.mask,
                pid: meta.pid,
                handle: fid_handle(info),
            })
            .collect();
        Ok(events)
    }
}

/// A new fanotify group of `class` (and reporting) flags, close-on-exec,
/// whose event descriptors are opened with `event_flags`.
fn init(class: libc::c_uint, event_flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain flags; the result is a new descriptor or -1.
    let fd = unsafe { libc::fanotify_init(class | libc::FAN_CLOEXEC, event_flags as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The events in `buf` (what one read gave): each one's metadata and
/// the information records after it.
fn parse(buf: &[u8]) -> io::Result<Vec<(libc::fanotify_event_metadata, &[u8])>> {
    let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
    let mut events = Vec::new();
    let mut at = 0;
    while at + meta_len <= buf.len() {
        // SAFETY: at least `meta_len` bytes the kernel wrote are at `at`;
        // read_unaligned copes with the byte buffer's alignment.
        let meta: libc::fanotify_event_metadata = unsafe {
            std::ptr::read_unaligned(buf[at..].as_ptr().cast::<libc::fanotify_event_metadata>())
        };
        let len = meta.event_len as usize;
        let info_at = meta.metadata_len as usize;
        if meta.vers != libc::FANOTIFY_METADATA_VERSION
            || info_at < meta_len
            || len < info_at
            || at + len > buf.len()
        {
            return Err(io::Error::other("fanotify: unknown event format"));
        }
        events.push((meta, &buf[at + info_at..at + len]));
        at += len;
    }
    Ok(events)
}

/// The handle in an event's first `FAN_EVENT_INFO_TYPE_FID` record:
/// header (type, pad, length: 4 bytes), `fsid` (8), then `struct
/// file_handle` (`handle_bytes`, `handle_type`, the bytes).
fn fid_handle(mut info: &[u8]) -> Option<crate::handle::KernelHandle> {
    while info.len() >= 4 {
        let kind = info[0];
        let len = u16::from_ne_bytes([info[2], info[3]]) as usize;
        if len < 4 || len > info.len() {
            return None;
        }
        if kind == libc::FAN_EVENT_INFO_TYPE_FID && len >= 20 {
            let record = &info[..len];
            let bytes = u32::from_ne_bytes(record[12..16].try_into().ok()?) as usize;
            let handle_type = i32::from_ne_bytes(record[16..20].try_into().ok()?);
            let handle = record.get(20..20 + bytes)?;
            return Some(crate::handle::KernelHandle {
                handle_type,
                bytes: handle.to_vec(),
            });
        }
        info = &info[len..];
    }
    None
}

/// Marks (or unmarks) the inode `file` refers to in group `group`,
/// through the descriptor's /proc link: fanotify_mark takes no `O_PATH`
/// descriptor as its object (EBADF), and the link resolves to the very
/// inode whatever the descriptor is.
fn mark(group: &OwnedFd, flags: libc::c_uint, mask: u64, file: BorrowedFd<'_>) -> io::Result<()> {
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(io::Error::other)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call;
    // `file` stays open across it.
    let rc = unsafe {
        libc::fanotify_mark(
            group.as_raw_fd(),
            flags,
            mask,
            libc::AT_FDCWD,
            path.as_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads a group's events into `buf` (waiting for some): the length.
fn read_events(group: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe {
            libc::read(
                group.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl AsFd for Fanotify {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The group made, or None without the privilege (not root).
    fn unless_eperm<T>(made: io::Result<T>) -> Option<T> {
        match made {
            Ok(group) => Some(group),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => None,
            Err(e) => panic!("fanotify_init: {e}"),
        }
    }

    #[test]
    fn a_chmod_and_a_rename_are_told_by_handle() {
        let Some(fid) = unless_eperm(FidWatch::new()) else {
            return; // not root
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        fid.watch(file.as_fd()).unwrap();
        let (handle, _) =
            crate::handle::name_to_handle_at(&file, c"", rustix::fs::AtFlags::EMPTY_PATH).unwrap();
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("chmod 600 {0} && mv {0} {0}.new", path.display()))
            .status()
            .unwrap();
        assert!(status.success());
        let mut seen = 0;
        while seen != libc::FAN_ATTRIB | libc::FAN_MOVE_SELF {
            for event in fid.read().unwrap() {
                assert_eq!(event.handle.as_ref(), Some(&handle));
                assert_ne!(event.pid as u32, std::process::id());
                seen |= event.mask;
            }
        }
        fid.unwatch(file.as_fd()).unwrap();
    }
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn an_open_of_a_watched_file_waits_for_the_answer_and_a_write_is_told() {
        let Some(fan) = unless_eperm(Fanotify::new()) else {
            return; // not root
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        // An O_PATH descriptor (what `dionfs_fs::Node` holds) will do.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&path)
            .unwrap();
        fan.watch(file.as_fd()).unwrap();
        // Another process opens it for writing, and writes.
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("echo y >> {}", path.display()))
            .spawn()
            .unwrap();
        let mut opened = false;
        let mut written = false;
        let start = std::time::Instant::now();
        while !(opened && written) {
            assert!(
                start.elapsed().as_secs() < 10,
                "events: open {opened}, write {written}"
            );
            for event in fan.read().unwrap() {
                assert_eq!(event.pid as u32, child.id());
                if event.is_permission() {
                    // Held: the child cannot have written yet (a stat:
                    // an open here would wait for this very answer).
                    assert_eq!(std::fs::metadata(&path).unwrap().len(), 1);
                    opened = true;
                    fan.allow(event.file.as_ref().unwrap().as_raw_fd()).unwrap();
                }
                if event.mask & libc::FAN_MODIFY != 0 {
                    written = true;
                }
            }
        }
        let mut child = child;
        assert!(child.wait().unwrap().success());
        fan.unwatch(file.as_fd()).unwrap();
        // Unwatched: this process's own opens are not held (watched,
        // they would wait for an answer only this thread could give).
        assert_eq!(std::fs::read(&path).unwrap(), b"xy\n");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"z")
            .unwrap();
    }
}
