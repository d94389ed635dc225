//! Test support shared by the crates of the workspace:
//!
//! - [`LoopFs`]: a fresh XFS, ext4 or btrfs on a loop device with 4096-byte
//!   sectors (so direct-I/O alignment is enforced the way real disks enforce
//!   it), mounted on a temporary directory. It always unmounts, detaches and
//!   deletes what it set up when dropped, also when the test panics.
//! - [`runs_as_root`]: whether a test that needs root runs here, decided in
//!   this one place for every such test.
//! - [`wait_until`] and [`wait_until_async`]: wait for a condition with a
//!   deadline, instead of sleeping a fixed time and hoping it came true.

mod wait;

pub use wait::{wait_until, wait_until_async};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// A filesystem on a loop device backed by a sparse image.
pub struct LoopFs {
    /// "xfs", "ext4" or "btrfs".
    pub kind: &'static str,
    mnt: PathBuf,
    /// Whether we created `mnt` (and so remove it).
    made_mnt: bool,
    image: PathBuf,
    dev: Option<String>,
    mounted: bool,
}

impl LoopFs {
    /// A new filesystem of `kind` of at least `size_mib` MiB (raised to
    /// what mkfs needs), or `None` when not root (see [`runs_as_root`]: the
    /// test returns early). As root, panics when it cannot be made.
    pub fn new(kind: &'static str, size_mib: u64) -> Option<LoopFs> {
        Self::with_sector_size(kind, size_mib, 4096)
    }

    /// [`LoopFs::new`] with another logical sector size (512 gives XFS
    /// different read and write alignments).
    pub fn with_sector_size(kind: &'static str, size_mib: u64, sector: u32) -> Option<LoopFs> {
        let base = scratch_name(kind);
        Self::make(kind, size_mib, sector, base.with_extension("mnt"), true)
    }

    /// [`LoopFs::new`] mounted on the existing directory `at` (to test a
    /// mount point inside another filesystem); `at` is left in place.
    pub fn mounted_at(kind: &'static str, size_mib: u64, at: &Path) -> Option<LoopFs> {
        Self::make(kind, size_mib, 4096, at.to_path_buf(), false)
    }

    /// The mount point.
    pub fn mount_point(&self) -> &Path {
        &self.mnt
    }

    /// `name` inside the filesystem.
    pub fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    /// The `/sys` statistics file of the loop device (iostat's fields:
    /// the third is sectors read, in 512-byte units).
    pub fn device_stat_path(&self) -> Option<PathBuf> {
        let dev = self.dev.as_deref()?;
        let name = Path::new(dev).file_name()?;
        Some(Path::new("/sys/block").join(name).join("stat"))
    }

    /// Simulates a power cut: stops the filesystem without flushing its log
    /// (`xfs_io -x -c shutdown`, FS_IOC_SHUTDOWN with NOLOGFLUSH; XFS drops
    /// its in-memory log, ext4 aborts its journal). Every later call on it
    /// fails with EIO; follow with [`LoopFs::remount`] once nothing holds a
    /// file of it open.
    pub fn shutdown(&self) -> Result<(), String> {
        run(
            "xfs_io",
            &["-x", "-c", "shutdown", &self.mnt.to_string_lossy()],
        )
        .map(|_| ())
    }

    /// Unmounts and mounts again: log recovery replays what reached the
    /// device.
    ///
    /// Fails loudly, naming who holds it, when the filesystem outlives the
    /// umount (see `wait_released`): mounting then would not read the
    /// device afresh.
    pub fn remount(&mut self) -> Result<(), String> {
        let mnt = self.mnt.to_string_lossy().to_string();
        let dev = self.dev.clone().ok_or("no device")?;
        if self.mounted {
            // A descriptor closing late makes umount EBUSY for a moment.
            let mut last = Ok(String::new());
            for _ in 0..50 {
                last = run("umount", &[&mnt]);
                if last.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            last?;
            self.mounted = false;
        }
        wait_released(&dev, &mnt, Duration::from_secs(5))?;
        run("mount", &["-t", self.kind, &dev, &mnt])?;
        self.mounted = true;
        Ok(())
    }

    fn make(
        kind: &'static str,
        size_mib: u64,
        sector: u32,
        mnt: PathBuf,
        make_mnt: bool,
    ) -> Option<LoopFs> {
        let mkfs = format!("mkfs.{kind}");
        let tools = ["losetup", "mount", "umount", mkfs.as_str()];
        if !runs_as_root(&format!("{kind} on a loop device"), &tools) {
            return None;
        }
        let mut fs = LoopFs {
            kind,
            image: scratch_name(kind).with_extension("img"),
            mnt,
            made_mnt: false,
            dev: None,
            mounted: false,
        };
        // Every step leaves `fs` describing what exists, so a failure (or
        // panic) here still cleans up through Drop.
        if let Err(e) = fs.setup(&mkfs, size_mib.max(min_size_mib(kind)), sector, make_mnt) {
            panic!("setting up {kind} on a loop device failed: {e}");
        }
        Some(fs)
    }

    fn setup(
        &mut self,
        mkfs: &str,
        size_mib: u64,
        sector: u32,
        make_mnt: bool,
    ) -> Result<(), String> {
        let image = std::fs::File::create(&self.image).map_err(|e| e.to_string())?;
        image.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        drop(image);
        let image = self.image.to_string_lossy().to_string();
        let sector = sector.to_string();
        let dev = run(
            "losetup",
            &["--find", "--show", "--sector-size", &sector, &image],
        )?;
        self.dev = Some(dev.clone());
        let args: &[&str] = match self.kind {
            "ext4" => &["-q", "-F", "-b", "4096"],
            _ => &["-q", "-f"],
        };
        run(mkfs, &[args, &[dev.as_str()]].concat())?;
        if make_mnt {
            std::fs::create_dir(&self.mnt).map_err(|e| e.to_string())?;
            self.made_mnt = true;
        }
        run(
            "mount",
            &["-t", self.kind, &dev, &self.mnt.to_string_lossy()],
        )?;
        self.mounted = true;
        Ok(())
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let mnt = self.mnt.to_string_lossy().to_string();
        if self.mounted {
            // A descriptor closing late (a thread of the test still
            // finishing) makes umount EBUSY for a moment: retry, then detach
            // lazily rather than leave a mount behind.
            let unmounted = (0..50).any(|_| {
                run("umount", &[&mnt]).is_ok() || {
                    std::thread::sleep(Duration::from_millis(100));
                    false
                }
            });
            if !unmounted {
                eprintln!("umount {mnt} kept failing; detaching lazily");
                let _ = run("umount", &["-l", &mnt]);
            }
        }
        if self.made_mnt {
            let _ = std::fs::remove_dir(&self.mnt);
        }
        if let Some(dev) = self.dev.take() {
            if let Err(e) = run("losetup", &["-d", &dev]) {
                eprintln!("losetup -d {dev}: {e}");
            }
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Whether a test that needs root, and the programs `tools`, runs here: the
/// one place that decides it, for every root-only test of the workspace.
///
/// Not root (a developer's `cargo test`): prints "skipped: {what} needs
/// root" and returns `false`, and the test returns early. As root: returns
/// `true`, or panics naming a tool that is not installed. The suite runs as
/// root so that these tests run; one that cannot set itself up there must
/// fail, not pass having tested nothing. (Later steps of a setup, such as
/// mkfs or mount, panic when they fail for the same reason.)
pub fn runs_as_root(what: &str, tools: &[&str]) -> bool {
    if !rustix::process::geteuid().is_root() {
        println!("skipped: {what} needs root");
        return false;
    }
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|tool| !tool_exists(tool))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: running as root, but {} not installed",
        missing.join(", ")
    );
    true
}

/// Waits until no filesystem holds the block device `dev` (mounted on
/// `mnt` until now); after `timeout`, an error naming the processes whose
/// mount namespaces still hold it.
///
/// A mount namespace made while the filesystem was mounted (any `unshare
/// -m`, a container) has a copy of the mount; unless propagation carries our
/// umount to it, the umount detaches only our copy and the superblock lives
/// on. `mount` then re-attaches that live superblock instead of reading the
/// device: after [`LoopFs::shutdown`] a shut-down filesystem, every call
/// EIO, no log recovery. A mounted filesystem claims its block device
/// exclusively, so an `O_EXCL` open of the device fails with EBUSY while
/// one is alive anywhere. (It may take a moment to go after the last
/// umount.)
fn wait_released(dev: &str, mnt: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let flags = OFlags::RDONLY | OFlags::EXCL | OFlags::CLOEXEC;
        match rustix::fs::open(dev, flags, Mode::empty()) {
            Ok(_fd) => return Ok(()),
            Err(Errno::BUSY) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(Errno::BUSY) => break,
            Err(e) => return Err(format!("open {dev} with O_EXCL: {e}")),
        }
    }
    let holders = mount_holders(dev)?;
    let who = if holders.is_empty() {
        "no process's /proc/PID/mountinfo shows it (a lazily unmounted \
         filesystem with files still open? another holder of the device?)"
            .to_string()
    } else {
        let mut shown: Vec<String> = holders
            .iter()
            .take(20)
            .map(|(pid, comm)| format!("pid {pid} ({comm})"))
            .collect();
        if holders.len() > 20 {
            shown.push(format!("and {} more", holders.len() - 20));
        }
        format!("the mount namespaces of {} still hold it", shown.join(", "))
    };
    Err(format!(
        "remount of {dev} on {mnt}: after umount the filesystem on {dev} is \
         still alive {}s later (O_EXCL open: EBUSY): {who}. Mounting now \
         would re-attach that filesystem (shut down, if it was) instead of a \
         fresh one recovered from the device. End those processes or unmount \
         it in their namespaces; scripts/test runs in a private mount \
         namespace so that other namespaces get no copy of its mounts.",
        timeout.as_secs_f32()
    ))
}

/// (pid, comm) of every process whose mount namespace has a mount of the
/// filesystem on block device `dev` (mountinfo's major:minor field).
fn mount_holders(dev: &str) -> Result<Vec<(u32, String)>, String> {
    let rdev = rustix::fs::stat(dev)
        .map_err(|e| format!("stat {dev}: {e}"))?
        .st_rdev;
    let want = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let mut holders = Vec::new();
    let proc = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
    for entry in proc.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // A process gone meanwhile, or a kernel thread: skipped.
        let Ok(mountinfo) = std::fs::read_to_string(entry.path().join("mountinfo")) else {
            continue;
        };
        if !mountinfo
            .lines()
            .any(|line| line.split(' ').nth(2) == Some(want.as_str()))
        {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        holders.push((pid, comm.trim().to_string()));
    }
    holders.sort();
    Ok(holders)
}

/// The smallest filesystem mkfs accepts, in MiB.
fn min_size_mib(kind: &str) -> u64 {
    match kind {
        "xfs" => 320,
        "btrfs" => 128,
        _ => 64,
    }
}

/// A fresh path under the temporary directory; "dionfs-" so the test
/// suite's leftover check recognises it.
fn scratch_name(kind: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "dionfs-test-{kind}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn tool_exists(tool: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(tool).exists())
}
