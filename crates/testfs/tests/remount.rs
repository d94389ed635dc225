//! `LoopFs::remount` gets a fresh filesystem, or fails loudly.
//!
//! A power-cut test shuts a filesystem down and remounts it. If a mount
//! namespace made elsewhere (`unshare -m`, a container) holds a copy of the
//! mount, the umount leaves the shut-down superblock alive and the mount
//! re-attaches it: every call fails with EIO and the test fails as if the
//! code under test had a bug. remount must say so instead, naming who holds
//! the filesystem, and work once the holder is gone.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dionfs_testfs::{runs_as_root, wait_until, LoopFs};

/// A process in a mount namespace of its own; killed and reaped when
/// dropped, also when the test panics.
struct Holder(Child);

impl Holder {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until process `pid` is in a mount namespace of its own that has
/// `mnt` mounted.
fn wait_holding(pid: u32, mnt: &Path) {
    let ours = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let mnt = mnt.to_str().unwrap();
    let holding = || {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt"));
        let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"));
        match (theirs, mountinfo) {
            (Ok(theirs), Ok(mountinfo)) => {
                theirs != ours && mountinfo.lines().any(|l| l.split(' ').nth(4) == Some(mnt))
            }
            _ => false,
        }
    };
    wait_until(
        holding,
        Duration::from_secs(10),
        &format!("pid {pid} to hold {mnt} in a mount namespace of its own"),
    );
}

/// Writes `path` and syncs it (data and metadata) and its directory.
fn write_durably(path: &Path, text: &str) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f.sync_all().unwrap();
    std::fs::File::open(path.parent().unwrap())
        .unwrap()
        .sync_all()
        .unwrap();
}

#[test]
fn remount_refuses_a_filesystem_another_mount_namespace_still_holds() {
    if !runs_as_root("a remount test", &["xfs_io", "unshare"]) {
        return;
    }
    let Some(mut fs) = LoopFs::new("xfs", 320) else {
        return;
    };
    write_durably(&fs.path("durable"), "before the cut\n");
    // Declared after `fs`, so dropped (killed) before it is torn down.
    let mut holder = Holder(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare"),
    );
    wait_holding(holder.0.id(), fs.mount_point());
    fs.shutdown().unwrap();

    let err = fs
        .remount()
        .expect_err("remount re-attached a filesystem another namespace holds");
    println!("{err}");
    let mnt = fs.mount_point().to_str().unwrap();
    assert!(err.contains(mnt), "{err}");
    assert!(err.contains("/dev/loop"), "{err}");
    assert!(
        err.contains(&format!("pid {} (sleep)", holder.0.id())),
        "{err}"
    );
    assert!(err.contains("re-attach"), "{err}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.lines().any(|l| l.split(' ').nth(4) == Some(mnt)),
        "remount mounted the shut-down filesystem"
    );

    holder.kill();
    fs.remount().expect("remount once the holder is gone");
    write_durably(&fs.path("after"), "after the remount\n");
    assert_eq!(
        std::fs::read_to_string(fs.path("durable")).unwrap(),
        "before the cut\n"
    );
}
