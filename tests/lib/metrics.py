"""Reading a dionfs server's Prometheus metrics in tests (`--metrics`)."""

from __future__ import annotations

import re
import socket
import urllib.request


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(addr: str) -> str:
    """The server's `/metrics` page, as text."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        return r.read().decode()


def counters(addr: str, pattern: str = r"\w+") -> dict[str, int]:
    """The server's `dionfs_<name>_total` counters whose name matches
    `pattern`, keyed by name, summed over their labels (exports, modes)."""
    out: dict[str, int] = {}
    for m in re.finditer(rf"^dionfs_({pattern})_total(?:\{{[^}}]*\}})? (\d+)$", scrape(addr), re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


def value(addr: str, name: str, labels: str = "") -> int:
    """One sample: `dionfs_<name>{<labels>}` (a gauge, or one label set of
    a counter, e.g. `value(addr, "connections_dropped_total",
    'reason="idle"')`); asserts that the server has it."""
    series = f"dionfs_{name}" + (f"{{{labels}}}" if labels else "")
    m = re.search(rf"^{re.escape(series)} (\d+)$", scrape(addr), re.M)
    assert m, f"no metric {series}"
    return int(m.group(1))
