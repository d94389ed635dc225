"""Running a bash script as root in a fresh network namespace (loopback
up, so 127.0.0.2, 127.0.0.3, ... are the test's own hosts) and a private
mount namespace (so it may bind-mount /etc/hosts, /etc/resolv.conf, ...)."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path


def run_in_private_namespaces(script: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `script` there; its output (text), whatever its exit status."""
    ns = f"dionfs-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        return subprocess.run(["ip", "netns", "exec", ns, "unshare", "-m", "bash", str(script)],
                              capture_output=True, text=True, timeout=timeout)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
