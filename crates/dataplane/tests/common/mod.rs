//! Test helpers: real filesystems on loop devices with 4096-byte sectors
//! (where direct-I/O alignment is enforced the way real disks enforce it),
//! and small wrappers around the data plane.
//!
//! A [`LoopFs`] always unmounts and detaches what it set up when dropped,
//! including when the test panics.

#![allow(dead_code)]

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use dionfs_dataplane::{
    DataConfig, DataError, DataFile, DataPlane, Mode, ReadData, Stable, WriteDone,
};

/// A filesystem of `kind` on a loop device backed by a sparse image in
/// /tmp, mounted on a temporary directory.
pub struct LoopFs {
    pub kind: &'static str,
    pub mnt: PathBuf,
    image: PathBuf,
    dev: Option<String>,
    mounted: bool,
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

impl LoopFs {
    /// Sets up the filesystem, or says why not ("skipped: ...") and returns
    /// `None` when not root or a tool is missing.
    pub fn new(kind: &'static str, size_mib: u64) -> Option<LoopFs> {
        Self::with_sector_size(kind, size_mib, 4096)
    }

    /// [`LoopFs::new`] with another logical sector size (512 gives XFS
    /// different read and write alignments).
    pub fn with_sector_size(kind: &'static str, size_mib: u64, sector: u32) -> Option<LoopFs> {
        if !rustix::process::geteuid().is_root() {
            println!("skipped: {kind} loop-device tests need root");
            return None;
        }
        let mkfs = format!("mkfs.{kind}");
        for tool in ["losetup", "mount", "umount", mkfs.as_str()] {
            if !tool_exists(tool) {
                println!("skipped: {tool} not installed");
                return None;
            }
        }
        let base = std::env::temp_dir().join(format!(
            "dionfs-dp-{kind}-{}-{}",
            std::process::id(),
            unique()
        ));
        let mut fs = LoopFs {
            kind,
            mnt: base.with_extension("mnt"),
            image: base.with_extension("img"),
            dev: None,
            mounted: false,
        };
        // Every step leaves `fs` describing what exists, so a failure (or
        // panic) here still cleans up through Drop.
        if let Err(e) = fs.setup(&mkfs, size_mib, sector) {
            panic!("setting up {kind} on a loop device failed: {e}");
        }
        Some(fs)
    }

    fn setup(&mut self, mkfs: &str, size_mib: u64, sector: u32) -> Result<(), String> {
        let image = std::fs::File::create(&self.image).map_err(|e| e.to_string())?;
        image.set_len(size_mib << 20).map_err(|e| e.to_string())?;
        drop(image);
        let image_path = self.image.to_string_lossy().to_string();
        let dev = run(
            "losetup",
            &[
                "--find",
                "--show",
                "--sector-size",
                &sector.to_string(),
                &image_path,
            ],
        )?;
        self.dev = Some(dev.clone());
        let force = match self.kind {
            "ext4" => "-F",
            _ => "-f",
        };
        run(mkfs, &[force, "-q", &dev])?;
        std::fs::create_dir(&self.mnt).map_err(|e| e.to_string())?;
        run("mount", &[&dev, &self.mnt.to_string_lossy()])?;
        self.mounted = true;
        Ok(())
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let mnt = self.mnt.to_string_lossy().to_string();
        if self.mounted {
            let mut done = false;
            for _ in 0..50 {
                if run("umount", &[&mnt]).is_ok() {
                    done = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            if !done {
                eprintln!("umount {mnt} kept failing; detaching lazily");
                let _ = run("umount", &["-l", &mnt]);
            }
        }
        let _ = std::fs::remove_dir(&self.mnt);
        if let Some(dev) = &self.dev {
            if let Err(e) = run("losetup", &["-d", dev]) {
                eprintln!("losetup -d {dev}: {e}");
            }
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Opens (creating) `path` the way the filesystem backend does: a buffered
/// O_RDWR descriptor and, if the filesystem accepts it, an O_DIRECT one.
pub fn open_data_file(path: &Path) -> DataFile {
    let buffered = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open buffered");
    let direct = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .ok();
    DataFile::new(buffered.into(), direct.map(Into::into)).expect("DataFile::new")
}

pub fn plane(read_mode: Mode, write_mode: Mode) -> DataPlane {
    DataPlane::new(DataConfig {
        read_mode,
        write_mode,
        max_transfer: 1 << 20,
        max_in_flight: 16,
    })
    .expect("plane")
}

/// WRITE `data` at `offset` through the data plane (the same steps as the
/// server: take a buffer, fill the payload slot, write).
pub fn write_at(
    plane: &DataPlane,
    file: &DataFile,
    offset: u64,
    data: &[u8],
    stable: Stable,
) -> Result<WriteDone, DataError> {
    let buf = plane.pool().get_blocking()?;
    let mut wb = plane.write_buffer(file, buf, offset, data.len())?;
    wb.payload_mut().copy_from_slice(data);
    plane.write(file, wb, stable)
}

/// READ `count` bytes at `offset` through the data plane.
pub fn read_at(
    plane: &DataPlane,
    file: &DataFile,
    offset: u64,
    count: u32,
) -> Result<ReadData, DataError> {
    let buf = plane.pool().get_blocking()?;
    plane.read(file, buf, offset, count)
}

/// The whole file through the data plane, in `max_transfer` chunks.
pub fn read_all(plane: &DataPlane, file: &DataFile) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let r = read_at(plane, file, out.len() as u64, 1 << 20).expect("read");
        out.extend_from_slice(r.data());
        if r.eof() {
            return out;
        }
        assert!(!r.is_empty(), "empty read without eof at {}", out.len());
    }
}

/// The byte every test writes at file position `pos` (never zero, so a lost
/// write shows as a zero).
pub fn pattern(pos: u64, salt: u8) -> u8 {
    ((pos.wrapping_mul(31) ^ (pos >> 9)) % 251) as u8 + 1 + salt % 4
}

pub fn pattern_bytes(offset: u64, len: usize, salt: u8) -> Vec<u8> {
    (offset..offset + len as u64)
        .map(|p| pattern(p, salt))
        .collect()
}

/// The kernel's view of the file size.
pub fn fs_size(file: &DataFile) -> u64 {
    rustix::fs::fstat(file.buffered_fd())
        .expect("fstat")
        .st_size as u64
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
