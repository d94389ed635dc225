"""scripts/leftovers and scripts/test's cleanup-check: only what a run
leaves behind fails it.

Loop devices and network namespaces are the kernel's: a run killed before
its cleanup (its session ended under it) left three loop devices attached,
and the next run on that kernel, which had left nothing, failed
cleanup-check on them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from netns import network_namespace

ROOT = Path(__file__).resolve().parents[2]
LEFTOVERS = ROOT / "scripts" / "leftovers"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("losetup"),
                                reason="needs root (loop devices, netns)")


@contextmanager
def stale_loop_device():
    """A loop device on a /var/tmp image named as the tests name theirs."""
    fd, image = tempfile.mkstemp(prefix="dionfs-test-stale-", suffix=".img", dir="/var/tmp")
    os.close(fd)
    os.truncate(image, 1 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", image], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        yield dev, image
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
        os.unlink(image)


def _leftovers(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LEFTOVERS), *args], capture_output=True, text=True, timeout=30)


def test_check_names_only_what_appeared_after_the_list(tmp_path):
    before = tmp_path / "before"
    with stale_loop_device() as (old_dev, old_image):
        listed = _leftovers("list")
        assert listed.returncode == 0, listed
        assert f"loop {old_dev}: " in listed.stdout and old_image in listed.stdout, listed.stdout
        before.write_text(listed.stdout)

        r = _leftovers("check", str(before))
        assert r.returncode == 0, r

        with stale_loop_device() as (new_dev, new_image), network_namespace() as ns:
            r = _leftovers("check", str(before))
            assert r.returncode == 1, r
            assert new_image in r.stderr and f"netns {ns}" in r.stderr, r.stderr
            assert old_image not in r.stderr, r.stderr

        r = _leftovers("check", str(before))
        assert r.returncode == 0, r


def test_bad_usage_is_an_error(tmp_path):
    assert _leftovers().returncode == 2
    assert _leftovers("check").returncode == 2
    assert _leftovers("check", str(tmp_path / "missing")).returncode == 2


def test_the_suite_passes_beside_a_loop_device_an_earlier_run_left():
    with stale_loop_device() as (dev, image):
        r = subprocess.run([str(ROOT / "scripts" / "test"), "--only", "cleanup-check", "--no-setup"],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "left by an earlier run" in r.stderr and image in r.stderr, r.stderr
        assert "all stages passed" in r.stderr, r.stderr
