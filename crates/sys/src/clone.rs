//! Sharing a range of one file's extents with another (`FICLONERANGE`),
//! which neither `libc`'s safe surface nor `rustix` wraps (rustix has only
//! `FICLONE`, the whole file).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Makes `len` bytes of `dst` at `dst_offset` share the extents of `src`
/// at `src_offset` (`ioctl(FICLONERANGE)`, ioctl_ficlonerange(2)); `len`
/// 0 clones to the end of `src`. The filesystem refuses offsets and
/// lengths not aligned to its block size (`EINVAL`, but for a range
/// ending at `src`'s end), filesystems that cannot share extents
/// (ext4) answer `EOPNOTSUPP`, two filesystems `EXDEV`.
pub fn clone_range<Src: AsFd, Dst: AsFd>(
    src: Src,
    src_offset: u64,
    dst: Dst,
    dst_offset: u64,
    len: u64,
) -> io::Result<()> {
    let range = libc::file_clone_range {
        src_fd: i64::from(src.as_fd().as_raw_fd()),
        src_offset,
        src_length: len,
        dest_offset: dst_offset,
    };
    // SAFETY: FICLONERANGE reads one `struct file_clone_range`, which
    // `range` is and which outlives the call; both descriptors are open
    // for its duration (borrowed), and the kernel writes to no memory of
    // ours.
    let rc = unsafe {
        libc::ioctl(
            dst.as_fd().as_raw_fd(),
            libc::FICLONERANGE,
            &range as *const libc::file_clone_range,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_bad_descriptor_or_unsupported_filesystem_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let src = std::fs::File::create(dir.path().join("src")).unwrap();
        src.write_all_at(&[1u8; 8192], 0).unwrap();
        let dst = std::fs::File::create(dir.path().join("dst")).unwrap();
        // tmpfs and ext4 cannot clone; XFS and btrfs can.
        match clone_range(&src, 0, &dst, 0, 4096) {
            Ok(()) => {
                let mut got = [0u8; 4096];
                dst.read_exact_at(&mut got, 0).unwrap();
                assert_eq!(got, [1u8; 4096]);
            }
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::EBADF)
                ),
                "{e}"
            ),
        }
        // A read-only destination is refused (EBADF).
        let ro = std::fs::File::open(dir.path().join("dst")).unwrap();
        assert!(clone_range(&src, 0, &ro, 0, 4096).is_err());
    }
}
