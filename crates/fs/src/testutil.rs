//! Test fixtures: a real filesystem on a loop device with 4096-byte
//! sectors, unmounted and detached on drop (also when a test panics).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::{ExportFs, MacKey, OpenFileCache};

/// A freshly made filesystem mounted on a temporary directory.
pub(crate) struct LoopFs {
    // Field order is drop order of the parts we clean up by hand in Drop;
    // `_tmp` (the image and mount point) goes last.
    mount_point: PathBuf,
    mounted: bool,
    device: Option<String>,
    _tmp: tempfile::TempDir,
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl LoopFs {
    /// A new `fstype` ("ext4" or "xfs") filesystem mounted in a temporary
    /// directory, or `None` (after printing "skipped") when not root.
    pub(crate) fn new(fstype: &str) -> Option<LoopFs> {
        let tmp = tempfile::Builder::new()
            .prefix("dionfs-fs-test")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let mount_point = tmp.path().join("mnt");
        std::fs::create_dir(&mount_point).expect("mkdir mnt");
        LoopFs::make(fstype, tmp, mount_point)
    }

    /// Like [`LoopFs::new`] but mounted on an existing directory `at`
    /// (to test mount points inside an export).
    pub(crate) fn mounted_at(fstype: &str, at: &Path) -> Option<LoopFs> {
        let tmp = tempfile::Builder::new()
            .prefix("dionfs-fs-test")
            .tempdir_in("/tmp")
            .expect("tempdir");
        LoopFs::make(fstype, tmp, at.to_path_buf())
    }

    fn make(fstype: &str, tmp: tempfile::TempDir, mount_point: PathBuf) -> Option<LoopFs> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root for loop devices");
            return None;
        }
        let image = tmp.path().join("image");
        // Sparse; XFS needs at least 300 MiB.
        let size = if fstype == "xfs" { 320 << 20 } else { 64 << 20 };
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size))
            .expect("image");
        let mut fs = LoopFs {
            mount_point,
            mounted: false,
            device: None,
            _tmp: tmp,
        };
        let image = image.to_str().expect("utf-8 temp path").to_string();
        let device = run(
            "losetup",
            &["--find", "--show", "--sector-size", "4096", &image],
        )
        .expect("losetup");
        fs.device = Some(device.clone());
        match fstype {
            "xfs" => run("mkfs.xfs", &["-q", "-f", &device]),
            "ext4" => run("mkfs.ext4", &["-q", "-F", "-b", "4096", &device]),
            other => panic!("unsupported test filesystem {other}"),
        }
        .expect("mkfs");
        let target = fs.mount_point.to_str().expect("utf-8 path").to_string();
        run("mount", &["-t", fstype, &device, &target]).expect("mount");
        fs.mounted = true;
        Some(fs)
    }

    /// The mount point.
    pub(crate) fn path(&self) -> &Path {
        &self.mount_point
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        if self.mounted {
            let target = self.mount_point.to_string_lossy().to_string();
            if let Err(e) = run("umount", &[&target]) {
                eprintln!("{e}; unmounting lazily");
                let _ = run("umount", &["-l", &target]);
            }
        }
        if let Some(device) = self.device.take() {
            if let Err(e) = run("losetup", &["-d", &device]) {
                eprintln!("{e}");
            }
        }
    }
}

/// An export of `dir` with its own cache.
pub(crate) fn export(dir: &Path, id: u16, key: MacKey) -> ExportFs {
    export_with_cache(dir, id, key, Arc::new(OpenFileCache::new(64)))
}

/// An export of `dir` using `cache`.
pub(crate) fn export_with_cache(
    dir: &Path,
    id: u16,
    key: MacKey,
    cache: Arc<OpenFileCache>,
) -> ExportFs {
    ExportFs::open(dir, id, key, cache).expect("open export")
}
