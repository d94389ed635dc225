"""One path, different options per client (issue 45): the most common
/etc/exports line, `/srv/a host(rw,no_root_squash) *(ro)` (here with `*` first: the single
host wins whatever the order, as with rpc.mountd), converted by
`dionfs exportfs --convert` and served as it is. Two clients on one
machine: 127.0.0.1 (the host's entry: read-write, root is root) and
127.0.0.2 (everyone's: read-only, root squashed), each over NFSv3 and
NFSv4.1 with nfs-rs, as root. A reload that makes everyone's entry
read-write lets 127.0.0.2 write.

The server and its clients run in a private network namespace where
127.0.0.2 is an address of its own on lo, so that a connection to it comes
from it (the 127.0.0.0/8 route would give 127.0.0.1 as the source).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from netns import run_in_private_namespaces
from servers import dionfs_bin

pytestmark = pytest.mark.dionfs_only


def _converted_config(tmp_path, export) -> str:
    """The config `dionfs exportfs --convert` makes of the exports line,
    with this test's state directory and ports."""
    exports = tmp_path / "exports"
    # Everyone first: the single host wins anyway, as with rpc.mountd.
    exports.write_text(f"{export} *(ro,insecure) 127.0.0.1(rw,no_root_squash,insecure)\n")
    r = subprocess.run([dionfs_bin(), "exportfs", "--convert", str(exports)],
                       capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    toml = r.stdout
    assert toml.count("[[export.client]]") == 2, toml
    assert 'match = ["127.0.0.1"]\noptions = "rw,no_root_squash,insecure"' in toml, toml
    assert 'match = ["0.0.0.0/0", "::/0"]\noptions = "ro,insecure"' in toml, toml
    return toml.replace(
        'state_dir = "/var/lib/dionfs"',
        f'state_dir = "{tmp_path}/state"\nlisten = "0.0.0.0"\nnfs_port = 2049\n'
        f'mount_port = 20048\nportmap_port = false\nversions = ["3", "4.1"]')


CLIENT = """
import errno, sys
import nfs_rs

export = sys.argv[1]

def connect(host, version):
    url = f"nfs://{host}{export}?version={version}&nfsport=2049"
    if version == "3":
        url += "&mountport=20048"
    return nfs_rs.Client.connect(url, uid=0, gid=0, connect_timeout=10,
                                 operation_timeout=30)

def outcome(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__

def read(c, path):
    with c.open(path, "rb") as f:
        return f.read()

def write(c, path):
    with c.open(path, "wb") as f:
        f.write(b"written")

if sys.argv[2] == "after-reload":
    # The reload made everyone's entry read-write: 127.0.0.2 may write
    # once the server has read the new config (SIGHUP was just sent).
    import time
    clients = {v: connect("127.0.0.2", v) for v in ("3", "4.1")}
    deadline = time.monotonic() + 20
    for version, c in clients.items():
        while True:
            result = outcome(lambda: write(c, f"/after-reload-v{version}"))
            if result == "ok" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        print(f"after reload v{version} 127.0.0.2 write: {result}")
    sys.exit(0)

for version in ("3", "4.1"):
    for host in ("127.0.0.1", "127.0.0.2"):
        c = connect(host, version)
        name = f"/by-{host}-v{version}"
        print(f"v{version} {host} write: {outcome(lambda: write(c, name))}")
        print(f"v{version} {host} read root-only: {outcome(lambda: read(c, '/root-only'))}")
        print(f"v{version} {host} read public: {outcome(lambda: read(c, '/public'))}")
"""


def test_each_client_gets_its_entrys_options_over_v3_and_v41(tmp_path):
    export = tmp_path.resolve() / "export"
    export.mkdir()
    export.chmod(0o777)
    # Root's alone: readable by root as root, not by a squashed root.
    (export / "root-only").write_bytes(b"secret")
    (export / "root-only").chmod(0o600)
    (export / "public").write_bytes(b"public")
    (export / "public").chmod(0o644)
    config = tmp_path / "dionfs.toml"
    config.write_text(_converted_config(tmp_path, export))

    listing = subprocess.run([dionfs_bin(), "exportfs", "--config", str(config)],
                             capture_output=True, text=True, check=False)
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout
    assert "127.0.0.1/32(rw,sync,insecure,no_root_squash," in lines, lines
    assert "0.0.0.0/0(ro,sync,insecure,root_squash," in lines, lines
    assert 'read_mode = "direct"' in lines and "Direct" not in lines, lines

    # What a reload then reads: everyone's entry read-write.
    rw = config.read_text().replace('options = "ro,insecure"', 'options = "rw,insecure"')
    assert rw != config.read_text()
    (tmp_path / "dionfs.toml.rw").write_text(rw)
    client = tmp_path / "client.py"
    client.write_text(CLIENT)
    script = tmp_path / "run.sh"
    script.write_text(f"""set -eu
ip addr add 127.0.0.2/32 dev lo
{dionfs_bin()} serve --config {config} > {tmp_path}/dionfs.log 2>&1 &
D=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && break; sleep 0.1; done
{sys.executable} {client} {export} before
echo "--- exportfs -v"
{dionfs_bin()} exportfs -v
echo "--- reload"
cp {config}.rw {config}
kill -HUP $D
{sys.executable} {client} {export} after-reload
kill $D; wait $D || true
""")
    r = run_in_private_namespaces(script)
    out = r.stdout + r.stderr
    print(out, (tmp_path / "dionfs.log").read_text())
    assert r.returncode == 0, out
    for v in ("3", "4.1"):
        # The host's entry: read-write, and root stays root.
        assert f"v{v} 127.0.0.1 write: ok" in out, out
        assert (export / f"by-127.0.0.1-v{v}").stat().st_uid == 0
        assert f"v{v} 127.0.0.1 read root-only: ok" in out, out
        # Everyone else's: read-only, and root is squashed.
        assert f"v{v} 127.0.0.2 write: EROFS" in out, out
        assert not (export / f"by-127.0.0.2-v{v}").exists()
        assert f"v{v} 127.0.0.2 read root-only: EACCES" in out, out
        assert f"v{v} 127.0.0.2 read public: ok" in out, out
    # A reload applies a changed entry.
    for v in ("3", "4.1"):
        assert f"after reload v{v} 127.0.0.2 write: ok" in out, out
        assert (export / f"after-reload-v{v}").exists()
    # The running server lists both entries in the config's words.
    running = out.split("--- exportfs -v", 1)[1].split("--- reload", 1)[0]
    assert running.count("[[export.client]]") == 2, running
    assert ('match = ["127.0.0.1/32"]\naccess = "rw"\nsquash = "no_root_squash"'
            in running), running
    assert 'match = ["0.0.0.0/0", "::/0"]\naccess = "ro"\nsquash = "root_squash"' in running, running
