//! Kernel file handles: `name_to_handle_at(2)` and `open_by_handle_at(2)`.
//!
//! A kernel file handle names an inode on one filesystem independently of
//! any path (for ext4 and XFS: inode number + generation), which is what an
//! NFS file handle must carry to survive renames and server restarts.
//! Neither call is wrapped by rustix, so they live here.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rustix::fs::{AtFlags, OFlags};

/// The kernel's `MAX_HANDLE_SZ`: the largest handle any filesystem encodes.
pub const MAX_HANDLE_SZ: usize = 128;

/// Size of `struct file_handle`'s header: `u32 handle_bytes; int handle_type`.
const HEADER: usize = 8;

/// An opaque kernel file handle as returned by `name_to_handle_at`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelHandle {
    /// The filesystem's handle type (`FILEID_*`), needed to decode it.
    pub handle_type: i32,
    /// The filesystem-specific handle bytes.
    pub bytes: Vec<u8>,
}

/// `struct file_handle` in a buffer aligned for its `u32`/`int` header.
struct RawHandle {
    words: Vec<u32>,
}

impl RawHandle {
    fn with_capacity(bytes: usize) -> RawHandle {
        let words = (HEADER + bytes).div_ceil(4);
        let mut raw = RawHandle {
            words: vec![0; words],
        };
        raw.words[0] = bytes as u32;
        raw
    }

    fn from_handle(handle: &KernelHandle) -> RawHandle {
        let mut raw = RawHandle::with_capacity(handle.bytes.len());
        raw.words[1] = handle.handle_type as u32;
        for (i, chunk) in handle.bytes.chunks(4).enumerate() {
            let mut word = [0u8; 4];
            word[..chunk.len()].copy_from_slice(chunk);
            raw.words[2 + i] = u32::from_ne_bytes(word);
        }
        raw
    }

    fn handle_bytes(&self) -> usize {
        self.words[0] as usize
    }

    fn to_handle(&self) -> KernelHandle {
        let len = self.handle_bytes();
        let bytes: Vec<u8> = self.words[2..]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .take(len)
            .collect();
        KernelHandle {
            handle_type: self.words[1] as i32,
            bytes,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut libc::c_void {
        self.words.as_mut_ptr().cast()
    }
}

/// `name_to_handle_at(dirfd, path, &handle, &mount_id, flags)`.
///
/// `flags` may hold `AT_EMPTY_PATH` (handle of `dirfd` itself) and
/// `AT_SYMLINK_FOLLOW`; without the latter a trailing symlink is not
/// followed. We never ask for `AT_HANDLE_FID` (a handle that cannot be
/// opened) nor for connectable handles (which embed the parent and would be
/// larger). Returns the handle and the mount id of the file's mount.
pub fn name_to_handle_at<Fd: AsFd>(
    dirfd: Fd,
    path: &CStr,
    flags: AtFlags,
) -> io::Result<(KernelHandle, i32)> {
    let mut capacity = MAX_HANDLE_SZ;
    // The kernel reports the size it needs on EOVERFLOW; one retry suffices,
    // a few are allowed in case the file changed in between.
    for _ in 0..4 {
        let mut raw = RawHandle::with_capacity(capacity);
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `raw` is a `struct file_handle` whose `handle_bytes` field
        // states the capacity that follows the 8-byte header, and the buffer
        // really is that long and 4-byte aligned; `path` is NUL-terminated;
        // `mount_id` is a valid `int` to write. The kernel writes only within
        // those bounds.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_name_to_handle_at,
                dirfd.as_fd().as_raw_fd(),
                path.as_ptr(),
                raw.as_mut_ptr(),
                &mut mount_id as *mut libc::c_int,
                flags.bits() as libc::c_int,
            )
        };
        if rc == 0 {
            return Ok((raw.to_handle(), mount_id));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EOVERFLOW) && raw.handle_bytes() > capacity {
            capacity = raw.handle_bytes();
            continue;
        }
        return Err(err);
    }
    Err(io::Error::from_raw_os_error(libc::EOVERFLOW))
}

/// `open_by_handle_at(mount_fd, handle, flags | O_CLOEXEC)`.
///
/// `mount_fd` is any descriptor on the mount the handle came from, opened
/// normally (the kernel rejects an `O_PATH` descriptor here with `EBADF`). The
/// kernel requires `CAP_DAC_READ_SEARCH`, which a thread has only while its
/// fsuid is 0: call this with root filesystem credentials
/// ([`crate::cred::as_root`]). A handle whose inode no longer exists fails
/// with `ESTALE`.
pub fn open_by_handle_at<Fd: AsFd>(
    mount_fd: Fd,
    handle: &KernelHandle,
    flags: OFlags,
) -> io::Result<OwnedFd> {
    if handle.bytes.len() > MAX_HANDLE_SZ {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut raw = RawHandle::from_handle(handle);
    let flags = flags | OFlags::CLOEXEC;
    // SAFETY: `raw` is a well-formed `struct file_handle` (header plus
    // `handle_bytes` bytes, 4-byte aligned) that the kernel only reads.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount_fd.as_fd().as_raw_fd(),
            raw.as_mut_ptr(),
            flags.bits() as libc::c_int,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{openat, Mode, CWD};
    use std::io::{Read, Write};

    /// Whether a test of file handles runs here (`open_by_handle_at`
    /// needs CAP_DAC_READ_SEARCH: root).
    fn runs_as_root() -> bool {
        dionfs_testfs::runs_as_root("open_by_handle_at", &[])
    }

    #[test]
    fn round_trip_through_a_handle() {
        if !runs_as_root() {
            return;
        }
        /// Removes the test directory even if an assertion fails.
        struct Cleanup(std::path::PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let dir = std::env::temp_dir().join(format!("dionfs-handle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let _cleanup = Cleanup(dir.clone());
        let path = dir.join("f");
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(b"hello"))
            .expect("write");
        let dirfd = openat(
            CWD,
            dir.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .expect("open dir");

        let (handle, mount_id) =
            name_to_handle_at(&dirfd, c"f", AtFlags::empty()).expect("name_to_handle_at");
        assert!(!handle.bytes.is_empty() && handle.bytes.len() <= MAX_HANDLE_SZ);
        // The same file gives the same handle, through AT_EMPTY_PATH too.
        let filefd = openat(&dirfd, "f", OFlags::PATH, Mode::empty()).expect("open file");
        let (again, mount_again) =
            name_to_handle_at(&filefd, c"", AtFlags::EMPTY_PATH).expect("by fd");
        assert_eq!(handle, again);
        assert_eq!(mount_id, mount_again);

        let fd = open_by_handle_at(&dirfd, &handle, OFlags::RDONLY).expect("open_by_handle_at");
        let mut contents = String::new();
        std::fs::File::from(fd)
            .read_to_string(&mut contents)
            .expect("read");
        assert_eq!(contents, "hello");

        // Nothing may hold the inode open for it to go away.
        drop(filefd);
        std::fs::remove_file(&path).expect("unlink");
        let err = open_by_handle_at(&dirfd, &handle, OFlags::RDONLY).expect_err("deleted");
        assert_eq!(err.raw_os_error(), Some(libc::ESTALE));
    }

    #[test]
    fn squashed_thread_cannot_open_by_handle() {
        if !runs_as_root() {
            return;
        }
        let dirfd = openat(
            CWD,
            std::env::temp_dir().as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .expect("open tmp");
        let (handle, _) =
            name_to_handle_at(&dirfd, c"", AtFlags::EMPTY_PATH).expect("name_to_handle_at");
        let nobody = crate::cred::Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let denied = crate::cred::with_creds(&nobody, || {
            let squashed = open_by_handle_at(&dirfd, &handle, OFlags::PATH);
            let root = crate::cred::as_root(|| open_by_handle_at(&dirfd, &handle, OFlags::PATH))
                .expect("as_root");
            assert!(root.is_ok(), "root may open by handle: {root:?}");
            squashed
        })
        .expect("switch creds");
        assert_eq!(
            denied
                .expect_err("needs CAP_DAC_READ_SEARCH")
                .raw_os_error(),
            Some(libc::EPERM)
        );
    }
}
