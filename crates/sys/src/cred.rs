//! Per-thread filesystem credentials.
//!
//! The server runs as root and performs every metadata operation on behalf
//! of an NFS caller on a blocking-pool thread. Before it does, it switches
//! *that thread's* filesystem identity (fsuid, fsgid, supplementary groups)
//! to the caller's squashed credentials, so the kernel itself checks
//! permissions and new files get the right owner — the way knfsd does it
//! with `nfsd_setuser`.
//!
//! Linux keeps credentials per task (thread). The C library's `setgroups()`
//! (and `setuid()` & co.) broadcast the change to every thread of the
//! process, so we never use them: `setfsuid`/`setfsgid` are issued as raw
//! system calls, and the supplementary groups through rustix's raw
//! `setgroups` system call, which only touches the calling thread.
//!
//! When the fsuid moves from 0 to non-zero the kernel drops the thread's
//! effective filesystem capabilities (`CAP_DAC_OVERRIDE`, `CAP_CHOWN`,
//! `CAP_FOWNER`, `CAP_FSETID`, `CAP_DAC_READ_SEARCH`, ...) and gives them
//! back when it returns to 0 (`cap_task_fix_setuid`). That is what makes the
//! permission checks those of the squashed user, and makes a write or
//! truncate clear set-id bits as the user's own would. knfsd's
//! `nfsd_setuser` also drops `CAP_SYS_RESOURCE` for a non-root fsuid
//! (`CAP_NFSD_SET`), so that quotas and the blocks a filesystem reserves for
//! root bind the caller; the kernel does not, so we lower and raise it here
//! with `capset` on the calling thread. `CAP_SETUID`/`CAP_SETGID` are
//! dropped by neither, so the thread can always switch back.

use std::cell::RefCell;
use std::io;

use rustix::thread::CapabilitySet;

/// What knfsd drops besides the filesystem set the kernel drops itself for
/// a non-root fsuid (`CAP_NFSD_SET` = `CAP_FS_SET | CAP_SYS_RESOURCE`).
const NFSD_EXTRA_DROPPED: CapabilitySet = CapabilitySet::SYS_RESOURCE;

/// The filesystem identity an operation runs with.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Creds {
    /// Filesystem user id.
    pub uid: u32,
    /// Filesystem group id.
    pub gid: u32,
    /// Supplementary groups (AUTH_SYS carries at most 16).
    pub groups: Vec<u32>,
}

impl Creds {
    /// Root with no supplementary groups: the identity every server thread
    /// has at rest.
    pub const fn root() -> Creds {
        Creds {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    /// Whether these credentials are the resting root identity.
    pub fn is_root(&self) -> bool {
        self.uid == 0 && self.gid == 0 && self.groups.is_empty()
    }
}

thread_local! {
    /// What this thread's filesystem credentials are now, as set through
    /// this module. A thread that never called `with_creds` is root.
    static CURRENT: RefCell<Creds> = const { RefCell::new(Creds::root()) };
}

/// The filesystem credentials the calling thread currently runs with (as
/// set by [`with_creds`]; root outside of it).
pub fn current() -> Creds {
    CURRENT.with(|c| c.borrow().clone())
}

/// The calling thread's current filesystem uid (root outside `with_creds`).
pub fn current_uid() -> u32 {
    CURRENT.with(|c| c.borrow().uid)
}

/// Runs `f` with the calling thread's filesystem credentials set to `creds`,
/// then restores the credentials the thread had before (root, for a server
/// thread at rest) — also when `f` panics.
///
/// Fails (without running `f`) if the kernel refused the switch; in that case
/// the thread's previous credentials are back in place.
pub fn with_creds<T>(creds: &Creds, f: impl FnOnce() -> T) -> io::Result<T> {
    let previous = current();
    if previous == *creds {
        return Ok(f());
    }
    if let Err(e) = apply(creds) {
        // Put back whatever we may have half-changed.
        restore_or_abort(&previous);
        return Err(e);
    }
    let _guard = Restore { previous };
    Ok(f())
}

/// Runs `f` as root (fsuid 0, all filesystem capabilities back), then returns
/// to the thread's current credentials. A no-op wrapper when the thread
/// already is root. Used for the few calls that need a capability the
/// squashed user lacks, such as `open_by_handle_at` (`CAP_DAC_READ_SEARCH`).
pub fn as_root<T>(f: impl FnOnce() -> T) -> io::Result<T> {
    with_creds(&Creds::root(), f)
}

/// Puts the previous credentials back when dropped (normal return or
/// unwinding).
struct Restore {
    previous: Creds,
}

impl Drop for Restore {
    fn drop(&mut self) {
        restore_or_abort(&self.previous);
    }
}

/// A thread whose credentials are unknown must not run any further request:
/// it could act with somebody else's identity. Restoring can only fail if
/// the process lost `CAP_SETUID`/`CAP_SETGID`, which a running server never
/// does, so this is an invariant violation and we stop the process.
fn restore_or_abort(previous: &Creds) {
    if let Err(e) = apply(previous) {
        eprintln!("dionfs: cannot restore thread credentials {previous:?}: {e}; aborting");
        std::process::abort();
    }
}

/// Switches the calling thread to `creds` and records them as current.
fn apply(creds: &Creds) -> io::Result<()> {
    // Whether the thread is (as recorded) root now: the extra capabilities
    // change only when that changes, so switching between two squashed
    // users costs no capability calls.
    let (was_root, same_groups, same_gid) = CURRENT.with(|c| {
        let c = c.borrow();
        (c.uid == 0, c.groups == creds.groups, c.gid == creds.gid)
    });
    let becomes_root = creds.uid == 0;
    // Order: groups and gid first, uid last. Once the fsuid is non-zero the
    // thread has dropped its filesystem capabilities, but not CAP_SETGID,
    // so any order works; this one mirrors knfsd's nfsd_setuser.
    let groups: Vec<rustix::process::Gid> = creds
        .groups
        .iter()
        .map(|&g| rustix::process::Gid::from_raw(g))
        .collect();
    // What the thread has already (as recorded, and verified when it was
    // set) is not set again: most callers come with no supplementary
    // groups, as root has none.
    let set_groups = || {
        if same_groups {
            Ok(())
        } else {
            rustix::thread::set_thread_groups(&groups).map_err(io::Error::from)
        }
    };
    let result = set_groups()
        .and_then(|()| {
            if same_gid {
                Ok(())
            } else {
                set_fsgid(creds.gid)
            }
        })
        .and_then(|()| set_fsuid(creds.uid))
        .and_then(|()| {
            if was_root == becomes_root {
                Ok(())
            } else {
                set_extra_capabilities(becomes_root)
            }
        });
    // Record what we asked for even on failure: the caller then restores the
    // previous state, which rewrites every part in which it differs from
    // this request, including any part that failed (a part equal in both
    // was skipped by both, so the thread still has it). The capability
    // change reads the thread's sets and only adds or removes bits, so
    // redoing it after a partial failure is harmless.
    CURRENT.with(|c| *c.borrow_mut() = creds.clone());
    result
}

/// Raises (`raise`) or lowers [`NFSD_EXTRA_DROPPED`] in the calling thread's
/// effective set. Raising takes only what the permitted set holds, like
/// knfsd's `cap_raise_nfsd_set`; the permitted set itself never changes, so
/// the capabilities can always come back.
fn set_extra_capabilities(raise: bool) -> io::Result<()> {
    // `None`: capget/capset on the calling thread, not the whole process.
    let mut sets = rustix::thread::capabilities(None)?;
    let effective = if raise {
        sets.effective | (sets.permitted & NFSD_EXTRA_DROPPED)
    } else {
        sets.effective - NFSD_EXTRA_DROPPED
    };
    if effective != sets.effective {
        sets.effective = effective;
        rustix::thread::set_capabilities(None, sets)?;
    }
    Ok(())
}

/// `setfsuid(uid)` for this thread only, verified.
///
/// `setfsuid` cannot report errors: it always returns the *previous* fsuid.
/// Calling it a second time with the same value returns the value now in
/// force, which must be the one we asked for.
fn set_fsuid(uid: u32) -> io::Result<()> {
    // SAFETY: setfsuid takes one integer argument and touches no memory of
    // ours; it changes only the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) };
    // SAFETY: as above.
    let now = unsafe { libc::syscall(libc::SYS_setfsuid, uid as libc::c_long) };
    if now as u32 != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("setfsuid({uid}) did not take effect (fsuid is {now})"),
        ));
    }
    Ok(())
}

/// `setfsgid(gid)` for this thread only, verified like [`set_fsuid`].
fn set_fsgid(gid: u32) -> io::Result<()> {
    // SAFETY: setfsgid takes one integer argument and touches no memory of
    // ours; it changes only the calling thread's credentials.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
    // SAFETY: as above.
    let now = unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
    if now as u32 != gid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("setfsgid({gid}) did not take effect (fsgid is {now})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::OpenOptionsExt;
    use std::path::PathBuf;

    /// Whether a test of switching credentials runs here (it needs root).
    fn runs_as_root() -> bool {
        dionfs_testfs::runs_as_root("switching credentials", &[])
    }

    /// The fs uid/gid of the calling thread as the kernel sees them
    /// (4th field of the Uid:/Gid: lines).
    fn kernel_fs_ids() -> (u32, u32) {
        let status = fs::read_to_string("/proc/thread-self/status").expect("read status");
        let field = |key: &str| -> u32 {
            let line = status
                .lines()
                .find(|l| l.starts_with(key))
                .expect("status line");
            line.split_whitespace()
                .nth(4)
                .expect("fs id field")
                .parse()
                .expect("number")
        };
        (field("Uid:"), field("Gid:"))
    }

    fn kernel_groups() -> String {
        let status = fs::read_to_string("/proc/thread-self/status").expect("read status");
        status
            .lines()
            .find(|l| l.starts_with("Groups:"))
            .map(|l| l.trim_start_matches("Groups:").trim().to_string())
            .unwrap_or_default()
    }

    /// A root-owned 0600 file, removed on drop.
    struct RootOnlyFile(PathBuf);
    impl RootOnlyFile {
        fn new(tag: &str) -> RootOnlyFile {
            let path = std::env::temp_dir().join(format!(
                "dionfs-cred-{tag}-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            let _ = fs::remove_file(&path);
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .expect("create root-only file");
            RootOnlyFile(path)
        }
    }
    impl Drop for RootOnlyFile {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }

    fn nobody() -> Creds {
        Creds {
            uid: 65534,
            gid: 65534,
            groups: vec![65534, 100],
        }
    }

    #[test]
    fn squashed_thread_cannot_open_root_only_file_and_is_restored() {
        if !runs_as_root() {
            return;
        }
        let file = RootOnlyFile::new("open");
        let inside = with_creds(&nobody(), || {
            assert_eq!(kernel_fs_ids(), (65534, 65534));
            assert_eq!(kernel_groups(), "100 65534");
            assert_eq!(current_uid(), 65534);
            fs::File::open(&file.0).map(|_| ())
        })
        .expect("switch creds");
        let err = inside.expect_err("nobody must not open a 0600 root file");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);

        // Restored: root again, capabilities back.
        assert_eq!(kernel_fs_ids(), (0, 0));
        assert_eq!(kernel_groups(), "");
        assert!(current().is_root());
        fs::File::open(&file.0).expect("root opens again");
    }

    #[test]
    fn restored_after_panic() {
        if !runs_as_root() {
            return;
        }
        let result = std::panic::catch_unwind(|| {
            let _ = with_creds(&nobody(), || panic!("boom"));
        });
        assert!(result.is_err());
        assert_eq!(kernel_fs_ids(), (0, 0));
        assert!(current().is_root());
    }

    #[test]
    fn other_threads_unaffected() {
        if !runs_as_root() {
            return;
        }
        let file = RootOnlyFile::new("threads");
        let path = file.0.clone();
        let (to_root, from_squashed) = std::sync::mpsc::channel::<()>();
        let (to_squashed, from_root) = std::sync::mpsc::channel::<()>();
        let squashed = std::thread::spawn(move || {
            with_creds(&nobody(), || {
                to_root.send(()).expect("send");
                // Stay squashed until the root thread has checked.
                from_root.recv().expect("recv");
                assert_eq!(kernel_fs_ids(), (65534, 65534));
            })
            .expect("switch creds");
        });
        from_squashed.recv().expect("recv");
        // While the other thread is squashed, this one is still root.
        assert_eq!(kernel_fs_ids(), (0, 0));
        fs::File::open(&path).expect("root thread opens");
        to_squashed.send(()).expect("send");
        squashed.join().expect("join");
    }

    /// The calling thread's effective or permitted capability set as the
    /// kernel reports it (`CapEff:` / `CapPrm:`, hexadecimal).
    fn kernel_capabilities(key: &str) -> u64 {
        let status = fs::read_to_string("/proc/thread-self/status").expect("read status");
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .expect("capability line");
        u64::from_str_radix(line[key.len()..].trim(), 16).expect("hex capability set")
    }

    const CAP_FSETID: u64 = 1 << 4;
    const CAP_SYS_RESOURCE: u64 = 1 << 24;
    const DROPPED: u64 = CAP_FSETID | CAP_SYS_RESOURCE;

    /// Set while this test binary runs inside the user namespace that
    /// [`run_in_user_namespace`] made.
    const IN_USER_NAMESPACE: &str = "DIONFS_CRED_TEST_IN_USER_NAMESPACE";

    /// Under a non-root fsuid the thread lacks CAP_FSETID (dropped by the
    /// kernel) and CAP_SYS_RESOURCE (dropped by us, as knfsd does); both come
    /// back with root, and the permitted set never changes.
    fn check_capability_switching() {
        let effective = kernel_capabilities("CapEff:");
        let permitted = kernel_capabilities("CapPrm:");
        assert_eq!(effective & DROPPED, DROPPED, "root starts with both");
        let user = Creds {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        with_creds(&nobody(), || {
            let squashed = kernel_capabilities("CapEff:");
            assert_eq!(squashed & DROPPED, 0, "squashed: CapEff {squashed:x}");
            assert_eq!(kernel_capabilities("CapPrm:"), permitted);
            with_creds(&user, || {
                assert_eq!(kernel_capabilities("CapEff:") & DROPPED, 0);
            })
            .expect("switch to another user");
            as_root(|| assert_eq!(kernel_capabilities("CapEff:"), effective)).expect("as_root");
            assert_eq!(kernel_capabilities("CapEff:"), squashed);
        })
        .expect("switch creds");
        assert_eq!(kernel_capabilities("CapEff:"), effective, "restored");

        // knfsd keys on the fsuid: root with other groups keeps everything.
        let root_in_groups = Creds {
            uid: 0,
            gid: 100,
            groups: vec![100],
        };
        with_creds(&root_in_groups, || {
            assert_eq!(kernel_capabilities("CapEff:"), effective);
        })
        .expect("switch creds");

        let panicked = std::panic::catch_unwind(|| {
            let _ = with_creds(&user, || panic!("boom"));
        });
        assert!(panicked.is_err());
        assert_eq!(
            kernel_capabilities("CapEff:"),
            effective,
            "restored after panic"
        );
    }

    #[test]
    fn non_root_fsuid_drops_fsetid_and_sys_resource() {
        if !runs_as_root() {
            return;
        }
        let permitted = kernel_capabilities("CapPrm:");
        if permitted & DROPPED == DROPPED {
            check_capability_switching();
            return;
        }
        assert!(
            std::env::var_os(IN_USER_NAMESPACE).is_none(),
            "no CAP_FSETID and CAP_SYS_RESOURCE even in a new user namespace: CapPrm {permitted:x}"
        );
        run_in_user_namespace("non_root_fsuid_drops_fsetid_and_sys_resource");
    }

    /// Runs this binary's test `name` again inside a new user namespace that
    /// maps ids 0-65535 to themselves. Its first process holds every
    /// capability within it, which this one may not: a container or service
    /// manager can take CAP_SYS_RESOURCE out of the bounding set, and then no
    /// capability call could show it come back.
    fn run_in_user_namespace(name: &str) {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::process::{Command, Stdio};

        let exe = std::env::current_exe().expect("test binary");
        // The test's path inside this crate: "cred::tests::<name>".
        let module = module_path!().split_once("::").expect("crate::module").1;
        let test = format!("{module}::{name}");
        let spawned = Command::new("unshare")
            // The shell waits until we have written the id maps, so that the
            // test binary is executed as (mapped) root with full capabilities.
            .args(["--user", "--", "sh", "-c"])
            .arg(r#"echo unshared && read go && exec "$0" "$@""#)
            .arg(&exe)
            .args([test.as_str(), "--exact", "--test-threads=1", "--nocapture"])
            .env(IN_USER_NAMESPACE, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        // As root (the caller's test runs only then), a test that cannot
        // set itself up fails: see `dionfs_testfs::runs_as_root`.
        let mut child = spawned
            .unwrap_or_else(|e| panic!("CAP_SYS_RESOURCE not permitted here and no unshare: {e}"));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read from unshare");
        if line.trim() != "unshared" {
            let out = child.wait_with_output().expect("wait");
            panic!(
                "CAP_SYS_RESOURCE not permitted here and no user namespace: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let pid = child.id();
        fs::write(format!("/proc/{pid}/uid_map"), "0 0 65536\n").expect("write uid_map");
        fs::write(format!("/proc/{pid}/gid_map"), "0 0 65536\n").expect("write gid_map");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"go\n")
            .expect("let the child go on");
        let mut report = String::new();
        stdout
            .read_to_string(&mut report)
            .expect("read the child's report");
        let out = child.wait_with_output().expect("wait");
        // "1 passed": a filter matching nothing would also exit 0.
        assert!(
            out.status.success() && report.contains("1 passed"),
            "{test} in a user namespace failed ({}):\n{report}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn nested_as_root_returns_to_squashed() {
        if !runs_as_root() {
            return;
        }
        let file = RootOnlyFile::new("nested");
        with_creds(&nobody(), || {
            as_root(|| {
                assert_eq!(kernel_fs_ids(), (0, 0));
                fs::File::open(&file.0).expect("root opens");
            })
            .expect("as_root");
            assert_eq!(kernel_fs_ids(), (65534, 65534));
        })
        .expect("switch creds");
        assert_eq!(kernel_fs_ids(), (0, 0));
    }

    #[test]
    fn parts_already_in_force_are_kept_and_the_rest_switched() {
        if !runs_as_root() {
            return;
        }
        let user = |uid, gid, groups: &[u32]| Creds {
            uid,
            gid,
            groups: groups.to_vec(),
        };
        // Same groups and gid, other uid; then other gid; then other groups.
        with_creds(&user(1000, 100, &[5, 6]), || {
            assert_eq!(
                (kernel_fs_ids(), kernel_groups()),
                ((1000, 100), "5 6".into())
            );
            with_creds(&user(1001, 100, &[5, 6]), || {
                assert_eq!(
                    (kernel_fs_ids(), kernel_groups()),
                    ((1001, 100), "5 6".into())
                );
                with_creds(&user(1001, 101, &[5, 6]), || {
                    assert_eq!(kernel_fs_ids(), (1001, 101));
                    with_creds(&user(1001, 101, &[]), || {
                        assert_eq!((kernel_fs_ids(), kernel_groups()), ((1001, 101), "".into()));
                    })
                    .expect("switch groups");
                    assert_eq!(kernel_groups(), "5 6");
                })
                .expect("switch gid");
                assert_eq!(kernel_fs_ids(), (1001, 100));
            })
            .expect("switch uid");
            assert_eq!(kernel_fs_ids(), (1000, 100));
        })
        .expect("switch");
        assert_eq!((kernel_fs_ids(), kernel_groups()), ((0, 0), "".into()));
        // A squashed user with no groups, as root has none.
        with_creds(&user(65534, 65534, &[]), || {
            assert_eq!(
                (kernel_fs_ids(), kernel_groups()),
                ((65534, 65534), "".into())
            );
        })
        .expect("switch");
        assert_eq!(kernel_fs_ids(), (0, 0));
    }
}
