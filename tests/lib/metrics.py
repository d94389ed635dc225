"""Reading a dionfs server's Prometheus metrics in tests (`--metrics`)."""

from __future__ import annotations

import random
import re
import socket
import urllib.request


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to `bind(0)` and `connect`."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int) -> list[int]:
    """`n` distinct TCP ports on 127.0.0.1 that nothing listens on now,
    below the kernel's ephemeral range: a port from `bind(0)` was free
    when asked, but the kernel could give it to another server's
    `--nfs-port 0` or a client's connection before the server meant to
    take it bound it (a suite run: "cannot listen for metrics on
    127.0.0.1:45569: Address already in use"). Below the range only
    another caller of this one could take it. Each is held until all
    are picked, so they differ."""
    low = _ephemeral_low()
    held: list[socket.socket] = []
    try:
        for _ in range(200 * n):
            if len(held) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", random.randrange(10000, max(10001, low))))
            except OSError:
                s.close()
                continue
            held.append(s)
        while len(held) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    """One of [`free_ports`]."""
    return free_ports(1)[0]


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
