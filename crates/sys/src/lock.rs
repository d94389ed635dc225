//! Open file description locks (`F_OFD_SETLK`, `F_OFD_GETLK`): POSIX
//! byte-range locks owned by an open file description rather than a
//! process, so one server process can hold locks for many remote owners
//! (one description each) that conflict with each other and with local
//! processes' `fcntl` locks exactly as the kernel decides. `rustix` wraps
//! only whole-file OFD locks.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// What a lock call asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    /// Shared (`F_RDLCK`): needs a descriptor open for reading.
    Read,
    /// Exclusive (`F_WRLCK`): needs a descriptor open for writing.
    Write,
    /// Release (`F_UNLCK`).
    Unlock,
}

impl LockType {
    fn raw(self) -> libc::c_short {
        (match self {
            LockType::Read => libc::F_RDLCK,
            LockType::Write => libc::F_WRLCK,
            LockType::Unlock => libc::F_UNLCK,
        }) as libc::c_short
    }
}

/// A byte range as `fcntl` takes it: `len` 0 reaches to the end of the
/// file and beyond. Both fit `off_t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    pub start: i64,
    pub len: i64,
}

fn flock(kind: LockType, range: LockRange) -> libc::flock {
    // SAFETY: `flock` is plain old data; all-zero is a valid value (and
    // `l_pid` must be 0 for OFD locks).
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind.raw();
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = range.start;
    fl.l_len = range.len;
    fl
}

/// Takes, changes or releases the lock of `fd`'s open file description
/// on `range`, without waiting: `Ok(false)` when another owner's lock
/// is in the way. Taking a range the description already holds converts
/// it (upgrade, downgrade), releasing part of a range splits it, as for
/// any POSIX lock.
pub fn ofd_setlk<Fd: AsFd>(fd: Fd, kind: LockType, range: LockRange) -> io::Result<bool> {
    let fl = flock(kind, range);
    // SAFETY: the descriptor is borrowed, so open for the call; `fl` is a
    // valid `flock` that outlives it.
    let rc = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(e),
    }
}

/// The first lock that would keep `fd`'s description from taking `kind`
/// on `range`, as (exclusive, range), or `None` if nothing would. Locks
/// of the description itself never conflict.
pub fn ofd_getlk<Fd: AsFd>(
    fd: Fd,
    kind: LockType,
    range: LockRange,
) -> io::Result<Option<(bool, LockRange)>> {
    let mut fl = flock(kind, range);
    // SAFETY: as in `ofd_setlk`; the kernel writes the conflicting lock
    // into `fl`, which is valid for writes for the call.
    let rc = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if fl.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(None);
    }
    Ok(Some((
        fl.l_type == libc::F_WRLCK as libc::c_short,
        LockRange {
            start: fl.l_start,
            len: fl.l_len,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn open(path: &std::path::Path) -> std::fs::File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    }

    #[test]
    fn descriptions_conflict_and_split() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let (a, b) = (open(&path), open(&path));
        let r = |start, len| LockRange { start, len };
        assert!(ofd_setlk(&a, LockType::Write, r(0, 100)).unwrap());
        assert!(!ofd_setlk(&b, LockType::Read, r(50, 1)).unwrap());
        assert_eq!(
            ofd_getlk(&b, LockType::Read, r(50, 1)).unwrap(),
            Some((true, r(0, 100)))
        );
        // Unlocking the middle splits a's lock in two.
        assert!(ofd_setlk(&a, LockType::Unlock, r(40, 20)).unwrap());
        assert!(ofd_setlk(&b, LockType::Write, r(45, 10)).unwrap());
        assert!(!ofd_setlk(&b, LockType::Read, r(30, 1)).unwrap());
        assert!(!ofd_setlk(&b, LockType::Read, r(70, 1)).unwrap());
        // Downgrade to shared: others may share it.
        assert!(ofd_setlk(&a, LockType::Read, r(0, 40)).unwrap());
        assert!(ofd_setlk(&b, LockType::Read, r(0, 40)).unwrap());
        // To EOF and beyond.
        assert!(ofd_setlk(&a, LockType::Write, r(1 << 40, 0)).unwrap());
        assert!(!ofd_setlk(&b, LockType::Read, r(i64::MAX - 1, 1)).unwrap());
        drop(a);
        assert!(ofd_setlk(&b, LockType::Write, r(0, 0)).unwrap());
    }
}
