//! fanotify(7) on single files, for delegations: an open of a marked file
//! by any process is held by the kernel until we answer it
//! (`FAN_OPEN_PERM`), and a write to one (or a truncate) is told after
//! the fact (`FAN_MODIFY`). Needs `CAP_SYS_ADMIN` (`FAN_CLASS_CONTENT`).
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
        // SAFETY: plain flags; the result is a new descriptor or -1.
        let fd = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC,
                (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Fanotify {
            // SAFETY: `fd` was just returned to us and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn mark(&self, flags: libc::c_uint, file: BorrowedFd<'_>) -> io::Result<()> {
        // Through the descriptor's /proc link: fanotify_mark takes no
        // `O_PATH` descriptor as its object (EBADF), and the link resolves
        // to the very inode whatever the descriptor is.
        let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(io::Error::other)?;
        // SAFETY: `path` is a NUL-terminated string that outlives the
        // call; `file` stays open across it.
        let rc = unsafe {
            libc::fanotify_mark(
                self.fd.as_raw_fd(),
                flags,
                MASK,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
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
        let n = loop {
            // SAFETY: `buf` is writable for its length.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        let mut events = Vec::new();
        let mut at = 0;
        let meta_len = std::mem::size_of::<libc::fanotify_event_metadata>();
        while at + meta_len <= n {
            // SAFETY: at least `meta_len` bytes the kernel wrote are at
            // `at`; read_unaligned copes with the byte buffer's alignment.
            let meta: libc::fanotify_event_metadata = unsafe {
                std::ptr::read_unaligned(buf[at..].as_ptr().cast::<libc::fanotify_event_metadata>())
            };
            if meta.vers != libc::FANOTIFY_METADATA_VERSION || (meta.event_len as usize) < meta_len
            {
                return Err(io::Error::other("fanotify: unknown event format"));
            }
            let file = (meta.fd >= 0).then(|| {
                // SAFETY: the kernel opened this descriptor for us.
                unsafe { OwnedFd::from_raw_fd(meta.fd) }
            });
            events.push(Event {
                mask: meta.mask,
                pid: meta.pid,
                file,
            });
            at += meta.event_len as usize;
        }
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

impl AsFd for Fanotify {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn an_open_of_a_watched_file_waits_for_the_answer_and_a_write_is_told() {
        let fan = match Fanotify::new() {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return, // not root
            Err(e) => panic!("fanotify_init: {e}"),
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
