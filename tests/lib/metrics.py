"""Reading a dionfs server's Prometheus counters in tests (`--metrics`)."""

from __future__ import annotations

import re
import socket
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counters(addr: str, pattern: str = r"\w+") -> dict[str, int]:
    """The server's `dionfs_<name>_total` counters whose name matches
    `pattern`, keyed by name, summed over their labels (exports, modes)."""
    body = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    out: dict[str, int] = {}
    for m in re.finditer(rf"^dionfs_({pattern})_total(?:\{{[^}}]*\}})? (\d+)$", body, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out
