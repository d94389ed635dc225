"""LoopFs.remount() gets a fresh filesystem, or fails loudly.

A power-cut test shuts a filesystem down and remounts it. If a mount
namespace made elsewhere (`unshare -m`, a container) holds a copy of the
mount, the umount leaves the shut-down superblock alive and the mount
re-attaches it: every call fails with EIO and the test fails as if dionfs
had a bug. remount() must say so instead, naming who holds the filesystem,
and work once the holder is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from loopfs import LoopFs  # noqa: E402
from wait import wait_until  # noqa: E402


def _wait_holding(pid: int, mountpoint: str) -> None:
    """Until process `pid` is in a mount namespace of its own that has
    `mountpoint` mounted."""
    ours = os.readlink("/proc/self/ns/mnt")

    def holding() -> bool:
        try:
            if os.readlink(f"/proc/{pid}/ns/mnt") == ours:
                return False
            with open(f"/proc/{pid}/mountinfo") as f:
                return any(line.split(" ")[4] == mountpoint for line in f)
        except OSError:
            return False

    wait_until(holding, 10, f"pid {pid} to hold {mountpoint} in a mount namespace of its own")


def test_remount_refuses_a_filesystem_another_mount_namespace_still_holds():
    fs = LoopFs("xfs", size="320M")
    holder = None
    try:
        with open(fs.path("durable"), "w") as f:
            f.write("before the cut\n")
        fs.sync()
        # A copy of the mount, in a namespace that our umount does not reach.
        holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "600"],
                                  stdin=subprocess.DEVNULL)
        _wait_holding(holder.pid, fs.mountpoint)
        fs.shutdown()

        with pytest.raises(RuntimeError) as err:
            fs.remount()
        msg = str(err.value)
        print(msg)
        assert fs.device in msg and fs.mountpoint in msg, msg
        assert f"pid {holder.pid} (sleep)" in msg, msg
        assert "re-attach" in msg, msg
        assert not os.path.ismount(fs.mountpoint), "remount mounted the shut-down filesystem"

        holder.kill()
        holder.wait()
        holder = None
        fs.remount()
        with open(fs.path("after"), "w") as f:
            f.write("after the remount\n")
        fs.sync()
        assert open(fs.path("durable")).read() == "before the cut\n"
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        fs.destroy()
