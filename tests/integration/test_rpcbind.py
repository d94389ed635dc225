"""The port mapper as clients on a kernel-NFSD host see it (issue 10):

- test_builtin_rpcbind_answers_rpcinfo_and_showmount: no rpcbind on the
  host, so dionfs serves port 111 itself: `rpcinfo -p` (portmap v2 DUMP),
  `rpcinfo` (rpcbind v4 DUMP), `rpcinfo -T tcp HOST nfs 3` (GETADDR, then a
  NULL call to the port it names) and `showmount -e` (libtirpc finds
  mountd through rpcbind, then MOUNT EXPORT) all work, and the port mapper
  and NSM answer over UDP (`rpcinfo -u`).
- test_registers_with_the_hosts_rpcbind: a real rpcbind (Debian's) holds
  port 111: dionfs registers NFS, MOUNT, NLM and NSM with it at start (rpcinfo -p
  lists them, showmount -e works through it) and unregisters at SIGTERM.

Each runs in a network namespace of its own (port 111 of the host is never
touched) and a private mount namespace with a tmpfs on /run (the rpcbind
socket and lock of the host are never touched).

- test_dump_over_udp_is_no_amplifier: the port mapper of the server
  fixture (an ephemeral port) flooded with DUMPs over UDP.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid

import pytest
import rawrpc
from metrics import counters, free_port

from servers import dionfs_bin

pytestmark = pytest.mark.dionfs_only


def _need(*tools: str) -> None:
    for t in tools:
        if not shutil.which(t):
            pytest.fail(f"{t} missing (scripts/test installs rpcbind and nfs-common)")


def _in_private_netns(script: str, tmp_path) -> str:
    """Runs `script` (bash) as root in a fresh network namespace with
    loopback up and a private mount namespace with /run on a tmpfs;
    returns its output; fails the test on a non-zero exit."""
    ns = f"dionfs-rpcb-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        path = tmp_path / "script.sh"
        # A failing command ends the script: its servers go with it.
        path.write_text("set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
                        "mount -t tmpfs tmpfs /run\n" + script)
        r = subprocess.run(["ip", "netns", "exec", ns, "unshare", "-m", "bash", str(path)],
                           capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        print(out)
        assert r.returncode == 0, out
        return out
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


# Debian's rpcbind on the namespace's port 111 ($RPCBIND), ready once its
# local socket is.
_START_RPCBIND = """
mkdir -p /run/rpcbind
chown _rpc /run/rpcbind 2>/dev/null || true
rpcbind -f &
RPCBIND=$!
for i in $(seq 50); do [ -S /run/rpcbind.sock ] && break; sleep 0.1; done
"""


def _serve(tmp_path, listen: str = "127.0.0.1", allow: str = "") -> str:
    export = tmp_path / "export"
    export.mkdir()
    (export / "hello").write_text("hi\n")
    return f"""
{dionfs_bin()} serve {export} --listen {listen} --state-dir {tmp_path}/state --log-level debug \\
    --insecure {allow} > {tmp_path}/dionfs.log 2>&1 &
DIONFS=$!
for i in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && break
    sleep 0.1
done
sleep 0.3
"""


def test_builtin_rpcbind_answers_rpcinfo_and_showmount(tmp_path):
    _need("rpcinfo", "showmount")
    out = _in_private_netns(_serve(tmp_path) + """
echo "== rpcinfo -p"; rpcinfo -p 127.0.0.1
echo "== rpcinfo"; rpcinfo 127.0.0.1
echo "== getaddr"; rpcinfo -T tcp 127.0.0.1 nfs 3; rpcinfo -T tcp 127.0.0.1 mountd 3
rpcinfo -T tcp 127.0.0.1 nlockmgr 4
echo "== udp"; rpcinfo -u 127.0.0.1 portmapper 2; rpcinfo -u 127.0.0.1 status 1
echo "== showmount"; showmount -e 127.0.0.1
kill $DIONFS; wait $DIONFS
""", tmp_path)
    v2 = out.split("== rpcinfo -p")[1].split("== rpcinfo\n")[0]
    for line in ("100000    2   tcp    111  portmapper", "100005    3   tcp  20048  mountd",
                 "100003    3   tcp   2049  nfs", "100003    4   tcp   2049  nfs",
                 "100000    2   udp    111  portmapper"):
        assert line in v2, v2
    # The lock service, on ports of its own.
    assert re.search(r"100021    4   tcp  +\d+  nlockmgr", v2), v2
    assert re.search(r"100024    1   udp  +\d+  status", v2), v2
    v4 = out.split("== rpcinfo\n")[1].split("== getaddr")[0]
    assert "100003    3    tcp       127.0.0.1.8.1" in v4, v4
    assert "100000    4    tcp       127.0.0.1.0.111" in v4, v4
    assert "program 100003 version 3 ready and waiting" in out
    assert "program 100005 version 3 ready and waiting" in out
    assert "program 100021 version 4 ready and waiting" in out
    udp = out.split("== udp")[1]
    # Over UDP: the port mapper itself, and NSM (where sm-notify sends).
    assert "program 100000 version 2 ready and waiting" in udp, udp
    assert "program 100024 version 1 ready and waiting" in udp, udp
    assert f"{tmp_path}/export 127.0.0.0/8" in out.split("== showmount")[1]


def test_registers_with_the_hosts_rpcbind(tmp_path):
    _need("rpcbind", "rpcinfo", "showmount")
    out = _in_private_netns(_START_RPCBIND + _serve(tmp_path) + """
echo "== while serving"; rpcinfo -p 127.0.0.1
echo "== showmount"; showmount -e 127.0.0.1
kill $DIONFS; wait $DIONFS
echo "== after stop"; rpcinfo -p 127.0.0.1
kill $RPCBIND; wait $RPCBIND || true
""", tmp_path)
    serving = out.split("== while serving")[1].split("== showmount")[0]
    assert "100003    3   tcp   2049  nfs" in serving, serving
    assert "100003    4   tcp   2049  nfs" in serving, serving
    assert "100005    3   tcp  20048  mountd" in serving, serving
    assert "100000    4   udp    111  portmapper" in serving, "not the real rpcbind answering"
    assert re.search(r"100021    4   tcp  +\d+  nlockmgr", serving), serving
    assert re.search(r"100024    1   udp  +\d+  status", serving), serving
    # NSM over TCP too (registering it over UDP unset it until 2026-11-27).
    assert re.search(r"100024    1   tcp  +\d+  status", serving), serving
    assert f"{tmp_path}/export 127.0.0.0/8" in out.split("== showmount")[1]
    after = out.split("== after stop")[1]
    for prog in ("100003", "100005", "100021", "100024"):
        assert prog not in after, after
    log = open(tmp_path / "dionfs.log").read()
    assert "registered with it" in log and "unregistered from the host's rpcbind" in log, log


_BOTH_ALLOWED = "--allow 127.0.0.1 --allow ::1"
_BOTH_FAMILIES = """
echo "== getaddr"; rpcinfo -T tcp 127.0.0.1 nfs 3; rpcinfo -T tcp6 ::1 nfs 3
rpcinfo -T tcp6 ::1 mountd 3; rpcinfo -T tcp6 ::1 nlockmgr 4
echo "== udp"; rpcinfo -u 127.0.0.1 status 1; rpcinfo -T udp6 ::1 status 1
echo "== showmount v4"; showmount -e 127.0.0.1
echo "== showmount v6"; showmount -e ::1
echo "== nfs-ls"; nfs-ls 'nfs://127.0.0.1{export}/?version=3'
"""


def _check_both_families(out: str, tmp_path) -> None:
    getaddr = out.split("== getaddr")[1].split("== udp")[0]
    assert getaddr.count("ready and waiting") == 4, getaddr
    assert out.split("== udp")[1].split("== showmount")[0].count("ready and waiting") == 2, out
    for family in ("v4", "v6"):
        listing = out.split(f"== showmount {family}")[1]
        assert f"{tmp_path}/export 127.0.0.1/32,::1/128" in listing, listing
    assert "hello" in out.split("== nfs-ls")[1], out
    log = open(tmp_path / "dionfs.log").read()
    # IPv4 clients are seen as themselves, not as ::ffff:127.0.0.1 (in
    # the connection lines, at debug).
    assert "peer=127.0.0.1:" in log and "::ffff:" not in log, log


def test_listen_on_the_ipv6_any_address_serves_both_families(tmp_path):
    """`listen = "::"` (knfsd listens on both): IPv4 and IPv6 clients find
    NFS, MOUNT, NLM and NSM through the built-in port mapper, each given
    addresses of its own family, and IPv4 clients are seen by their IPv4
    addresses. Before, the port mapper answered IPv4 clients with
    `tcp6 ::ffff:127.0.0.1` addresses: `rpcinfo -T tcp 127.0.0.1 nfs 3`,
    `showmount -e 127.0.0.1` and mounts through it failed."""
    _need("rpcinfo", "showmount")
    out = _in_private_netns(_serve(tmp_path, "::", _BOTH_ALLOWED) + _BOTH_FAMILIES.format(export=f"{tmp_path}/export") + """
kill $DIONFS; wait $DIONFS
""", tmp_path)
    _check_both_families(out, tmp_path)


def test_listen_on_the_ipv6_any_address_registers_both_families(tmp_path):
    """With the host's rpcbind, a server on `::` registers each program
    under `tcp` and `tcp6` (`udp`, `udp6`), as knfsd's services are
    registered, and unregisters them all at SIGTERM. Before, it registered
    netid `tcp` with the address `::`, which neither family could use."""
    _need("rpcbind", "rpcinfo", "showmount")
    out = _in_private_netns(_START_RPCBIND + _serve(tmp_path, "::", _BOTH_ALLOWED) + """
echo "== registered"; rpcinfo 127.0.0.1
""" + _BOTH_FAMILIES.format(export=f"{tmp_path}/export") + """
kill $DIONFS; wait $DIONFS
echo "== after stop"; rpcinfo 127.0.0.1
kill $RPCBIND; wait $RPCBIND || true
""", tmp_path)
    registered = out.split("== registered")[1].split("== getaddr")[0]
    for netid, addr in (("tcp ", "0.0.0.0.8.1"), ("tcp6", "::.8.1")):
        assert re.search(rf"100003    3    {netid}\s+{re.escape(addr)}\s+nfs", registered), registered
    for netid in ("udp ", "udp6"):
        assert re.search(rf"100024    1    {netid}", registered), registered
    _check_both_families(out, tmp_path)
    after = out.split("== after stop")[1]
    for prog in ("100003", "100005", "100021", "100024"):
        assert prog not in after, after


UDP_METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.server_args("--metrics", UDP_METRICS)
def test_dump_over_udp_is_no_amplifier(server):
    """Over UDP anyone can put a victim's address as the source of a DUMP;
    the reply (rpcbind v4's: 652 bytes here, for a call of 68) went to the
    victim for every call, as fast as they came: a reflection amplifier,
    as port mappers are known to be. Now at most 16 replies larger than
    their call leave each second (dropped ones counted, one warning), and
    GETPORT, no larger than its call, is answered every time in the
    middle of the flood."""
    port = server.portmap_port
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(1.5)
    answered: dict[str, int] = {"dump": 0, "getport": 0}
    sizes: dict[str, int] = {}

    def reader() -> None:
        while True:
            try:
                reply = sock.recv(65536)
            except (socket.timeout, OSError):
                return
            kind = "getport" if struct.unpack(">I", reply[:4])[0] >= 1_000_000 else "dump"
            answered[kind] += 1
            sizes[kind] = max(sizes.get(kind, 0), len(reply))

    t = threading.Thread(target=reader)
    t.start()
    dumps = getports = 0
    nfs_tcp = rawrpc.u32(rawrpc.NFS_PROGRAM) + rawrpc.u32(3) + rawrpc.u32(6) + rawrpc.u32(0)
    started = time.monotonic()
    for i in range(400):
        vers = 2 if i % 2 else 4  # portmap v2 and rpcbind v4 DUMP (procedure 4 in both)
        sock.send(rawrpc.call(i, rawrpc.PORTMAP_PROGRAM, vers, 4)[4:])
        dumps += 1
        if i % 8 == 0:
            sock.send(rawrpc.call(1_000_000 + i, rawrpc.PORTMAP_PROGRAM, 2, 3, nfs_tcp)[4:])
            getports += 1
            time.sleep(0.025)  # within the socket buffers, and over more than a second
    elapsed = time.monotonic() - started
    t.join()
    call_size = len(rawrpc.call(0, rawrpc.PORTMAP_PROGRAM, 2, 4)) - 4
    print(f"{dumps} DUMPs, {answered['dump']} answered in {elapsed:.2f} s; "
          f"{getports} GETPORTs, {answered['getport']} answered; sizes {sizes}, call {call_size}")
    assert sizes["dump"] > 8 * call_size, sizes
    assert answered["getport"] == getports, answered
    assert 16 <= answered["dump"] <= 16 + 16 * (elapsed + 1.5) + 2, answered
    dropped = counters(UDP_METRICS, "udp_replies_dropped")["udp_replies_dropped"]
    assert dropped == dumps - answered["dump"], (dropped, answered)
    assert server.log_text(tail=2000).count("UDP replies larger than their call") == 1
    sock.close()
