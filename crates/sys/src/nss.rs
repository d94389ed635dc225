//! Users and groups by id and by name, from the name service switch
//! (`/etc/passwd` and `/etc/group`, or LDAP, sssd, ... as
//! `nsswitch.conf` says), through the C library's reentrant calls
//! (`getpwuid_r`, `getgrgid_r`, `getpwnam_r`, `getgrnam_r`).
//!
//! Each call may block (a directory server over the network): call them
//! from a blocking thread. They fill a caller's buffer with the entry's
//! strings and say `ERANGE` when it is too small; the buffer then grows,
//! by doubling from [`FIRST_BUF`] up to [`MAX_BUF`] (a group's member
//! list is the only thing that gets long).
//!
//! "Not found" is `Ok(None)`, which is what glibc and musl answer for a
//! name or id that does not exist (`0` with a null result); an error
//! number is an error of the lookup itself (a directory server that does
//! not answer, a buffer past [`MAX_BUF`]).

use std::ffi::{c_char, c_int, CStr, CString};
use std::io;
use std::mem::MaybeUninit;

/// The first buffer's size: what glibc's `sysconf(_SC_GETPW_R_SIZE_MAX)`
/// and `sysconf(_SC_GETGR_R_SIZE_MAX)` suggest.
pub const FIRST_BUF: usize = 1024;
/// The largest buffer tried: an entry that needs more (a group with tens
/// of thousands of members) is an `ERANGE` error.
pub const MAX_BUF: usize = 1 << 20;

/// The name of the user `uid`, if there is one.
pub fn user_name(uid: u32) -> io::Result<Option<String>> {
    let name = with_growing_buffer(|buf| {
        let mut entry = MaybeUninit::<libc::passwd>::uninit();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `entry` and `result` are valid for writes, `buf` for
        // `buf.len()` bytes; getpwuid_r writes the entry's strings into
        // `buf` only, and keeps no pointer past the call.
        let rc = unsafe {
            libc::getpwuid_r(
                uid,
                entry.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: `result` is what getpwuid_r stored: null or `entry`,
        // alive in this closure.
        let Some(filled) = (unsafe { found(rc, result) })? else {
            return Ok(None);
        };
        // SAFETY: a filled entry's `pw_name` is a NUL-terminated string
        // in `buf`, alive (borrowed) while it is copied here.
        let name = unsafe { CStr::from_ptr(filled.pw_name) };
        Ok(Some(name.to_bytes().to_vec()))
    })?;
    name.map(utf8).transpose()
}

/// The name of the group `gid`, if there is one.
pub fn group_name(gid: u32) -> io::Result<Option<String>> {
    let name = with_growing_buffer(|buf| {
        let mut entry = MaybeUninit::<libc::group>::uninit();
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as in `user_name`, for getgrgid_r (which also writes
        // the member list into `buf`).
        let rc = unsafe {
            libc::getgrgid_r(
                gid,
                entry.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: `result` is what getgrgid_r stored: null or `entry`,
        // alive in this closure.
        let Some(filled) = (unsafe { found(rc, result) })? else {
            return Ok(None);
        };
        // SAFETY: as in `user_name`: `gr_name` is a NUL-terminated string
        // in `buf`, alive while it is copied.
        let name = unsafe { CStr::from_ptr(filled.gr_name) };
        Ok(Some(name.to_bytes().to_vec()))
    })?;
    name.map(utf8).transpose()
}

/// The id of the user called `name`, if there is one. A name with a NUL
/// byte names nobody.
pub fn user_id(name: &str) -> io::Result<Option<u32>> {
    let Ok(name) = CString::new(name) else {
        return Ok(None);
    };
    with_growing_buffer(|buf| {
        let mut entry = MaybeUninit::<libc::passwd>::uninit();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: `name` is a NUL-terminated string that outlives the
        // call; the rest as in `user_name`, for getpwnam_r.
        let rc = unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                entry.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: `result` is what getpwnam_r stored: null or `entry`,
        // alive in this closure.
        let filled = unsafe { found(rc, result) }?;
        Ok(filled.map(|filled| filled.pw_uid))
    })
}

/// The id of the group called `name`, if there is one. A name with a NUL
/// byte names none.
pub fn group_id(name: &str) -> io::Result<Option<u32>> {
    let Ok(name) = CString::new(name) else {
        return Ok(None);
    };
    with_growing_buffer(|buf| {
        let mut entry = MaybeUninit::<libc::group>::uninit();
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: as in `user_id`, for getgrnam_r.
        let rc = unsafe {
            libc::getgrnam_r(
                name.as_ptr(),
                entry.as_mut_ptr(),
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        // SAFETY: `result` is what getgrnam_r stored: null or `entry`,
        // alive in this closure.
        let filled = unsafe { found(rc, result) }?;
        Ok(filled.map(|filled| filled.gr_gid))
    })
}

/// What one `get*_r` call answered: `rc` its return value, `result` the
/// entry it filled (null: none).
///
/// # Safety
///
/// `result` is what the call stored: null, or (with `rc == 0`) a pointer
/// to the entry it filled, which (with the buffer its strings are in)
/// stays alive and unchanged for `'a`.
unsafe fn found<'a, E>(rc: c_int, result: *mut E) -> Result<Option<&'a E>, c_int> {
    if rc != 0 {
        return Err(rc);
    }
    if result.is_null() {
        return Ok(None);
    }
    // SAFETY: a zero return with a non-null result: the call filled the
    // entry `result` points to, alive for 'a (the caller's promise).
    Ok(Some(unsafe { &*result }))
}

/// Runs `attempt` with a buffer of [`FIRST_BUF`] bytes, then twice as
/// large each time it fails with `ERANGE`, up to [`MAX_BUF`]. Any other
/// error number, or `ERANGE` at the largest size, is the error.
fn with_growing_buffer<T>(
    mut attempt: impl FnMut(&mut [c_char]) -> Result<Option<T>, c_int>,
) -> io::Result<Option<T>> {
    let mut len = FIRST_BUF;
    loop {
        let mut buf: Vec<c_char> = vec![0; len];
        match attempt(&mut buf) {
            Ok(found) => return Ok(found),
            Err(libc::ERANGE) if len < MAX_BUF => len = (len * 2).min(MAX_BUF),
            Err(errno) => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// A name as text: names that are not UTF-8 cannot be sent where text is
/// wanted (an NFSv4 owner string), and are an `InvalidData` error.
fn utf8(name: Vec<u8>) -> io::Result<String> {
    String::from_utf8(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "name is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An id that no test machine has: the largest valid one below
    /// `(uid_t)-1`, far above any allocation range.
    const NOBODY_HAS: u32 = u32::MAX - 2;

    #[test]
    fn root_is_found_both_ways() {
        assert_eq!(user_name(0).unwrap().as_deref(), Some("root"));
        assert_eq!(group_name(0).unwrap().as_deref(), Some("root"));
        assert_eq!(user_id("root").unwrap(), Some(0));
        assert_eq!(group_id("root").unwrap(), Some(0));
    }

    #[test]
    fn what_does_not_exist_is_none() {
        assert_eq!(user_name(NOBODY_HAS).unwrap(), None);
        assert_eq!(group_name(NOBODY_HAS).unwrap(), None);
        assert_eq!(user_id("dionfs-no-such-user").unwrap(), None);
        assert_eq!(group_id("dionfs-no-such-group").unwrap(), None);
        assert_eq!(user_id("").unwrap(), None);
        assert_eq!(user_id("ro\0ot").unwrap(), None, "a NUL ends no name");
        assert_eq!(group_id("ro\0ot").unwrap(), None);
    }

    #[test]
    fn the_buffer_grows_on_erange_up_to_the_bound() {
        let mut sizes = Vec::new();
        let got = with_growing_buffer(|buf| {
            sizes.push(buf.len());
            if buf.len() < 8 * FIRST_BUF {
                Err(libc::ERANGE)
            } else {
                Ok(Some(buf.len()))
            }
        });
        assert_eq!(got.unwrap(), Some(8 * FIRST_BUF));
        assert_eq!(
            sizes,
            [FIRST_BUF, 2 * FIRST_BUF, 4 * FIRST_BUF, 8 * FIRST_BUF]
        );

        let mut largest = 0;
        let e = with_growing_buffer::<()>(|buf| {
            largest = buf.len();
            Err(libc::ERANGE)
        })
        .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ERANGE));
        assert_eq!(largest, MAX_BUF);

        let e = with_growing_buffer::<()>(|_| Err(libc::EIO)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
    }
}
