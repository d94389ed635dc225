"""Client lists with host names and wildcards, as in /etc/exports (issue 10):
an export for `*.example.com` and `db?.lab` admits a client whose address
resolves (and resolves back) to a matching name and refuses one whose name
does not match, both at MNT and for NFS calls with a handle obtained by an
admitted client. Names come from /etc/hosts, bind-mounted in a private mount
namespace, in a private network namespace (127.0.0.2-4 on its loopback).
"""

from __future__ import annotations

import sys

import pytest

from netns import run_in_private_namespaces
from servers import dionfs_bin

pytestmark = pytest.mark.dionfs_only

LIB = str(__import__("pathlib").Path(__file__).resolve().parents[1] / "lib")


def _write_config(tmp_path, export, clients: str) -> None:
    """tmp_path/dionfs.toml: `export` for `clients` (a TOML list) on the
    standard ports."""
    (tmp_path / "dionfs.toml").write_text(f"""
[server]
listen = "0.0.0.0"
nfs_port = 2049
mount_port = 20048
portmap_port = false
state_dir = "{tmp_path}/state"

[[export]]
path = "{export}"
clients = {clients}
options = "rw,insecure"
""")


def test_host_names_and_wildcards_in_client_lists(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    export.chmod(0o755)
    (tmp_path / "hosts").write_text(
        "127.0.0.1 localhost\n"
        "127.0.0.2 build1.example.com\n"
        "127.0.0.3 intruder.example.org\n"
        "127.0.0.4 db7.lab\n")
    _write_config(tmp_path, export, '["*.example.com", "db?.lab"]')
    client = tmp_path / "client.py"
    client.write_text(f"""
import sys
sys.path.insert(0, {LIB!r})
import rawrpc

def conn(src, port):
    return rawrpc.Conn("127.0.0.1", port, timeout=20, source=src)

handle = None
for src in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
    status, fh = rawrpc.mnt(conn(src, 20048), {str(export)!r})
    print(f"MNT from {{src}}: {{status}}")
    if src == "127.0.0.2":
        handle = fh
# GETATTR with the admitted client's handle, from each address.
for src in ("127.0.0.2", "127.0.0.3"):
    accept, res = conn(src, 2049).rpc(100003, 3, 1, rawrpc.opaque(handle))
    print(f"GETATTR from {{src}}: {{rawrpc.nfs_status(res)}}")
""")
    script = tmp_path / "run.sh"
    script.write_text(f"""set -eu
mount --bind {tmp_path}/hosts /etc/hosts
{dionfs_bin()} serve --config {tmp_path}/dionfs.toml --log-level debug > {tmp_path}/dionfs.log 2>&1 &
D=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && break; sleep 0.1; done
{sys.executable} {client}
kill $D; wait $D || true
""")
    r = run_in_private_namespaces(script)
    out = r.stdout + r.stderr
    log = (tmp_path / "dionfs.log").read_text()
    print(out, log)
    assert r.returncode == 0, out
    assert "MNT from 127.0.0.2: 0" in out, out          # build1.example.com
    assert "MNT from 127.0.0.3: 13" in out, out         # intruder.example.org: ACCES
    assert "MNT from 127.0.0.4: 0" in out, out          # db7.lab matches db?.lab
    assert "GETATTR from 127.0.0.2: 0" in out, out
    assert "GETATTR from 127.0.0.3: 0" not in out, out  # refused with the same handle
    # The connection's line (a debug line) names the client's host.
    assert "names=build1.example.com" in log, log


def test_a_client_whose_name_server_does_not_answer_holds_no_threads(tmp_path):
    """With names in a client list, each new connection's address is
    looked up, and a name server that does not answer (an attacker's, for
    its own reverse zone) makes the resolver wait seconds. A lookup per
    connection, each on a blocking thread, let 600 connections from such an
    address take all 512 threads NFS calls run on; now one lookup per
    address runs at a time, at most eight in all, and the others wait
    without a thread."""
    export = tmp_path / "export"
    export.mkdir()
    export.chmod(0o755)
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n127.0.0.2 good.example.com\n")
    (tmp_path / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:4 attempts:1\n")
    (tmp_path / "nsswitch.conf").write_text("hosts: files dns\n")
    _write_config(tmp_path, export, '["*.example.com"]')
    client = tmp_path / "client.py"
    client.write_text(f"""
import os, socket, sys, time
sys.path.insert(0, {LIB!r})
import rawrpc
pid = int(sys.argv[1])
hogs = []
for _ in range(600):
    s = socket.socket()
    s.bind(("127.0.0.3", 0))
    s.connect(("127.0.0.1", 2049))
    hogs.append(s)
time.sleep(1.5)
print("threads while waiting:", len(os.listdir(f"/proc/{{pid}}/task")))
t = time.monotonic()
status, fh = rawrpc.mnt(rawrpc.Conn("127.0.0.1", 20048, timeout=30, source="127.0.0.2"), {str(export)!r})
accept, res = rawrpc.Conn("127.0.0.1", 2049, timeout=30, source="127.0.0.2").rpc(
    100003, 3, 1, rawrpc.opaque(fh))
print(f"good client: MNT {{status}}, GETATTR {{rawrpc.nfs_status(res)}} in {{time.monotonic() - t:.2f}} s")
""")
    sink = ("import socket, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.bind(('127.0.0.1', 53))\n"
            "time.sleep(3600)\n")
    script = tmp_path / "run.sh"
    script.write_text(f"""set -eu
mount --bind {tmp_path}/hosts /etc/hosts
mount --bind {tmp_path}/resolv.conf /etc/resolv.conf
mount --bind {tmp_path}/nsswitch.conf /etc/nsswitch.conf
{sys.executable} -c "{sink}" &
SINK=$!
{dionfs_bin()} serve --config {tmp_path}/dionfs.toml > {tmp_path}/dionfs.log 2>&1 &
D=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && break; sleep 0.1; done
{sys.executable} {client} $D
kill $D $SINK; wait $D || true
""")
    r = run_in_private_namespaces(script)
    out = r.stdout + r.stderr
    print(out)
    assert r.returncode == 0, out
    assert "good client: MNT 0, GETATTR 0" in out, out
    threads = int(out.split("threads while waiting:")[1].split()[0])
    assert threads < 100, out
