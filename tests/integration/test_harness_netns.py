"""The guest harnesses start over a network namespace name left by a killed run.

A run killed without its cleanup (a session's end, SIGKILL) left
/run/netns/nfsh behind with no namespace under it; the next run's
`netns.sh up` saw the name listed, skipped creating it, and every
`ip -n nfsh` failed ("setting the network namespace ... Invalid
argument"): the realclient stage failed before the guest booted.
tests/lib/netns.sh's netns_clear_stale removes such a name and leaves
a live namespace alone.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

NETNS_SH = Path(__file__).resolve().parents[1] / "lib" / "netns.sh"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (ip netns)")


def _clear_stale(name: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", '. "$1"; netns_clear_stale "$2"', "t", str(NETNS_SH), name],
                          capture_output=True, text=True, check=True)


def _enterable(name: str) -> bool:
    return subprocess.run(["ip", "netns", "exec", name, "true"], capture_output=True).returncode == 0


def test_a_name_without_a_namespace_is_removed_and_the_namespace_made_again():
    name = f"dionfs-stale-{uuid.uuid4().hex[:8]}"
    os.makedirs("/run/netns", exist_ok=True)
    Path("/run/netns", name).touch()
    try:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert name in listed and not _enterable(name)
        out = _clear_stale(name)
        assert "cannot be entered" in out.stderr
        assert not Path("/run/netns", name).exists()
        subprocess.run(["ip", "netns", "add", name], check=True)
        assert _enterable(name)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
        Path("/run/netns", name).unlink(missing_ok=True)


def test_a_live_namespace_is_left_alone():
    name = f"dionfs-live-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        out = _clear_stale(name)
        assert out.stderr == ""
        assert _enterable(name)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
