"""Running a bash script as root in a fresh network namespace (loopback
up, so 127.0.0.2, 127.0.0.3, ... are the test's own hosts) and a private
mount namespace (so it may bind-mount /etc/hosts, /etc/resolv.conf, ...)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def network_namespace() -> Iterator[str]:
    """A new named network namespace ("dionfs-test-...", as cleanup-check
    knows them), deleted on leaving."""
    ns = f"dionfs-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def run_in_private_namespaces(script: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `script` there; its output (text), whatever its exit status."""
    with network_namespace() as ns:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        return subprocess.run(["ip", "netns", "exec", ns, "unshare", "-m", "bash", str(script)],
                              capture_output=True, text=True, timeout=timeout)
