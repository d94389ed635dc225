"""A real filesystem on a loop device with 4096-byte logical sectors.

The image is a sparse file under /var/tmp; the loop device is attached with
`losetup --find --show --sector-size 4096` (and direct I/O on its backing
file, so the host page cache holds only one copy of the data). Every LoopFs
is recorded in a registry that is torn down at interpreter exit and on
SIGTERM/SIGINT/SIGHUP, so an interrupted test run leaves no mount, loop
device or image behind.
"""

from __future__ import annotations

import atexit
import errno
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

MKFS = {
    "xfs": ["mkfs.xfs", "-q", "-f"],
    "ext4": ["mkfs.ext4", "-q", "-F", "-b", "4096"],
    "btrfs": ["mkfs.btrfs", "-q", "-f"],
}

_live: list["LoopFs"] = []
_before_destroy: list = []


def before_destroy_all(fn) -> None:
    """Run fn() before tearing down on exit/signal (e.g. kill servers using the fs)."""
    _before_destroy.append(fn)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class LoopFs:
    """A mounted loop filesystem; `destroy()` undoes everything, idempotently."""

    def __init__(self, fstype: str = "xfs", size: str = "2G", base: str = "/var/tmp",
                 mkfs_args: list[str] | tuple[str, ...] = (), mount_options: str | None = None,
                 thin: str | None = None):
        """`mkfs_args` go to mkfs before the device (e.g. ext4 `-m 10`); `mount_options`
        to `mount -o` (e.g. `usrquota`). `thin` (a size, e.g. "100M"): the image
        lives on a tmpfs of that size, a thin-provisioned device whose writes to
        blocks never written before fail once `fill_backing()` has filled the
        tmpfs, as a failing disk's would (the filesystem stays up; a failed
        writeback is reported to fsync)."""
        if fstype not in MKFS:
            raise ValueError(f"unsupported filesystem {fstype!r}")
        self.fstype = fstype
        self.mount_options = mount_options
        self.image: str | None = None
        self.device: str | None = None
        self.mountpoint: str | None = None
        self.backing: str | None = None
        self._mounted = False
        _live.append(self)
        try:
            if thin:
                self.backing = tempfile.mkdtemp(prefix=f"dionfs-test-{fstype}-thin-", dir="/tmp")
                _run(["mount", "-t", "tmpfs", "-o", f"size={thin}", "tmpfs", self.backing])
                base = self.backing
            fd, self.image = tempfile.mkstemp(prefix=f"dionfs-test-{fstype}-", suffix=".img", dir=base)
            os.close(fd)
            _run(["truncate", "-s", size, self.image])
            # Not direct on tmpfs: the loop driver takes a short direct write
            # there (the tmpfs full part-way) for a whole one.
            direct_io = "off" if thin else "on"
            self.device = _run(
                ["losetup", "--find", "--show", "--sector-size", "4096",
                 f"--direct-io={direct_io}", self.image]
            ).stdout.strip()
            lbs = open(f"/sys/block/{os.path.basename(self.device)}/queue/logical_block_size").read().strip()
            if lbs != "4096":
                raise RuntimeError(f"{self.device}: logical block size {lbs}, expected 4096")
            _run(MKFS[fstype] + list(mkfs_args) + [self.device])
            self.mountpoint = tempfile.mkdtemp(prefix=f"dionfs-test-{fstype}-mnt-", dir="/tmp")
            self._mount()
        except BaseException:
            self.destroy()
            raise

    def __repr__(self) -> str:
        return f"LoopFs({self.fstype} {self.device} on {self.mountpoint})"

    def path(self, *parts: str) -> str:
        assert self.mountpoint
        return os.path.join(self.mountpoint, *parts)

    def fill_backing(self) -> None:
        """Fills a `thin` image's tmpfs: from now on, what the filesystem
        writes to blocks it never wrote before fails (EIO or ENOSPC at the
        loop device), and what it writes over blocks it wrote succeeds."""
        assert self.backing
        with open(os.path.join(self.backing, "fill"), "wb", buffering=0) as f:
            for chunk in (1 << 20, 4096):
                try:
                    while True:
                        f.write(bytes(chunk))
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise

    def sync(self) -> None:
        """Make everything written so far durable (syncfs of this filesystem only)."""
        _run(["sync", "--file-system", self.mountpoint])

    def log_forcer(self, name: str, stop: threading.Event, period: float) -> threading.Thread:
        """A daemon thread (not started) that appends a byte to `name` and
        fsyncs it every `period` seconds until `stop` is set or the
        filesystem fails: each fsync forces the log up to then, so a later
        `shutdown()` cuts at a random point of a log that keeps moving."""
        def force() -> None:
            fd = os.open(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                while not stop.is_set():
                    try:
                        os.write(fd, b"x")
                        os.fsync(fd)
                    except OSError:
                        return
                    time.sleep(period)
            finally:
                os.close(fd)
        return threading.Thread(target=force, daemon=True)

    def shutdown(self) -> None:
        """Simulate a power cut: stop the filesystem *without* flushing its log.

        `xfs_io -x -c shutdown` without `-f` is FS_IOC_SHUTDOWN with
        NOLOGFLUSH: XFS drops its in-memory log (the CIL and unwritten
        iclogs), ext4 aborts its journal; every later call on the
        filesystem fails with EIO. What was not on the device is gone, as
        after a power cut. Follow with `remount()` (after whoever holds files
        open on it, e.g. a server, has let go).
        """
        assert self._mounted and self.mountpoint
        _run(["xfs_io", "-x", "-c", "shutdown", self.mountpoint])

    def remount(self) -> None:
        """Unmount and mount again: log recovery replays what reached the device.

        Fails loudly (RuntimeError) when the filesystem outlives the umount,
        see `wait_released`: mounting then would not read the device afresh.
        """
        assert self.device and self.mountpoint
        if self._mounted:
            for attempt in range(40):
                r = subprocess.run(["umount", self.mountpoint], capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.25)  # a server that was just stopped may still be closing files
            else:
                raise RuntimeError(f"umount {self.mountpoint}: {r.stderr.strip()}")
            self._mounted = False
        wait_released(self.device, self.mountpoint)
        self._mount()

    def _mount(self) -> None:
        opts = ["-o", self.mount_options] if self.mount_options else []
        _run(["mount", "-t", self.fstype] + opts + [self.device, self.mountpoint])
        self._mounted = True

    def destroy(self) -> None:
        if self._mounted and self.mountpoint:
            for attempt in range(20):
                r = subprocess.run(["umount", self.mountpoint], capture_output=True, text=True)
                if r.returncode == 0 or not os.path.ismount(self.mountpoint):
                    break
                time.sleep(0.25)  # a server being killed may still hold files open
            else:
                subprocess.run(["umount", "-l", self.mountpoint], capture_output=True)
            self._mounted = False
        if self.mountpoint and os.path.isdir(self.mountpoint) and not os.path.ismount(self.mountpoint):
            shutil.rmtree(self.mountpoint, ignore_errors=True)
            self.mountpoint = None
        if self.device:
            for attempt in range(20):
                r = subprocess.run(["losetup", "-d", self.device], capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.25)
            self.device = None
        if self.backing and os.path.isdir(self.backing):
            for attempt in range(20):  # the loop device may still hold the image a moment
                if subprocess.run(["umount", self.backing], capture_output=True).returncode == 0:
                    break
                if not os.path.ismount(self.backing):
                    break
                time.sleep(0.25)
            if not os.path.ismount(self.backing):
                shutil.rmtree(self.backing, ignore_errors=True)
                self.backing = None
        if self.image and os.path.exists(self.image):
            os.unlink(self.image)
            self.image = None
        if self in _live:
            _live.remove(self)


def wait_released(device: str, mountpoint: str, timeout: float = 5.0) -> None:
    """Waits until no filesystem holds `device`; raises RuntimeError naming
    the processes whose mount namespaces still hold it if one still does
    after `timeout` seconds.

    A mount namespace made while the filesystem was mounted (any `unshare
    -m`, a container) has a copy of the mount; unless propagation carries
    our umount to it, the umount detaches only our copy and the superblock
    lives on. `mount` then re-attaches that live superblock instead of
    reading the device: after `shutdown()` a shut-down filesystem, every
    call EIO, no log recovery. A mounted filesystem claims its block device
    exclusively, so an O_EXCL open of the device fails with EBUSY while one
    is alive anywhere. (It may take a moment to go after the last umount.)
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            fd = os.open(device, os.O_RDONLY | os.O_EXCL | os.O_CLOEXEC)
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        else:
            os.close(fd)
            return
    holders = mount_holders(device)
    if holders:
        shown = ", ".join(f"pid {pid} ({comm})" for pid, comm in holders[:20])
        if len(holders) > 20:
            shown += f" and {len(holders) - 20} more"
        who = f"the mount namespaces of {shown} still hold it"
    else:
        who = ("no process's /proc/PID/mountinfo shows it (a lazily unmounted "
               "filesystem with files still open? another holder of the device?)")
    raise RuntimeError(
        f"remount of {device} on {mountpoint}: after umount the filesystem on {device} "
        f"is still alive {timeout:g} s later (O_EXCL open: EBUSY): {who}. Mounting now "
        "would re-attach that filesystem (shut down, if it was) instead of a fresh one "
        "recovered from the device. End those processes or unmount it in their "
        "namespaces; scripts/test runs in a private mount namespace so that other "
        "namespaces get no copy of its mounts.")


def mount_holders(device: str) -> list[tuple[int, str]]:
    """(pid, comm) of every process whose mount namespace has a mount of the
    filesystem on block device `device` (mountinfo's major:minor field)."""
    rdev = os.stat(device).st_rdev
    want = f"{os.major(rdev)}:{os.minor(rdev)}"
    holders = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/mountinfo") as f:
                held = any(line.split(" ", 3)[2] == want for line in f)
            if not held:
                continue
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except (OSError, IndexError):
            continue  # gone meanwhile, or a kernel thread
        holders.append((int(name), comm))
    return sorted(holders)


def destroy_all() -> None:
    for fn in _before_destroy:
        try:
            fn()
        except Exception as e:
            print(f"cleanup hook {fn} failed: {e}")
    for fs in list(reversed(_live)):
        try:
            fs.destroy()
        except Exception as e:  # keep going: clean up as much as possible
            print(f"loopfs cleanup of {fs!r} failed: {e}")


def _on_signal(signum, frame):
    destroy_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(destroy_all)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_sig, _on_signal)
# SIGINT stays with pytest (KeyboardInterrupt runs fixture finalizers, then atexit).


# Fills the filesystem of the file argv[1] (created if missing) with
# fallocate, as whoever runs it: a non-root user leaves root's reserved
# blocks free. Then gives back argv[2] bytes, if given, by truncating.
FILL_SCRIPT = """
import errno, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
off, chunk = 0, 1 << 30
while chunk >= 4096:
    try:
        os.posix_fallocate(fd, off, chunk)
        off += chunk
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        chunk //= 2
if len(sys.argv) > 2:
    os.ftruncate(fd, max(off - int(sys.argv[2]), 0))
os.fsync(fd)
"""
