"""The tools an nfs-kernel-server operator reaches for, each asking the
running server over its metrics listener: `dionfs exportfs -v` (the
exports as the server applies them, in the config's words, and again
after a reload), `dionfs stats` (with no flags against `dionfs serve DIR`,
from a config's `metrics_listen`, and every N seconds like `nfsstat -s
N`, NFSv4's operations in a table of their own), `dionfs clients` (NLM
hosts holding locks, NFSv4 clients with their lease, sessions, opens and
locks) and NFSv4's state gauges; exit
status 1 for failures at run time and 2 for usage errors; the start-up
error for a taken port.

Every server here exports a directory under tmp_path: no loop devices."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import nfs_rs
import pytest
from metrics import free_port, value
from rawrpc import Conn
from servers import DionfsServer, dionfs_bin
from test_nlm import S_GRANTED, Nlm, file_fh
from wait import wait_until

pytestmark = pytest.mark.dionfs_only


def dionfs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([dionfs_bin(), *args], capture_output=True, text=True, timeout=timeout)


class ConfigServer(DionfsServer):
    """`dionfs serve --config FILE` on `export`, NFSv3, 4.1 and 4.2, its
    metrics on a free port, with `export_lines` in its export."""

    def __init__(self, export: str, export_lines: str = ""):
        super().__init__(export)
        self.metrics = f"127.0.0.1:{free_port()}"
        self.config = os.path.join(self.workdir, "dionfs.toml")
        self.pid_file = os.path.join(self.workdir, "dionfs.pid")
        self.extra_args = ["--ports-file", self.ports_file]
        self.write_config(export_lines)

    def write_config(self, export_lines: str) -> None:
        with open(self.config, "w") as f:
            f.write(f'[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
                    f'portmap_port = false\nstate_dir = "{self.state_dir}"\n'
                    f'metrics_listen = "{self.metrics}"\npid_file = "{self.pid_file}"\n'
                    f'grace_period = 0\nversions = ["3", "4.1", "4.2"]\n\n'
                    f'[[export]]\npath = "{self.export}"\nclients = ["127.0.0.1"]\n'
                    f'secure = false\nsquash = "no_root_squash"\n{export_lines}\n')


@pytest.fixture
def config_server(tmp_path):
    export = tmp_path.resolve() / "export"
    export.mkdir()
    os.chmod(export, 0o777)
    srv = ConfigServer(str(export), 'read_mode = "buffered"')
    srv.start()
    yield srv
    srv.close_clients()
    srv.stop()
    srv.cleanup()


def test_exportfs_v_shows_what_the_running_server_applies(config_server):
    srv = config_server
    r = dionfs("exportfs", "-v", "--metrics", srv.metrics)
    assert r.returncode == 0, r.stderr
    assert f'path = "{srv.export}"' in r.stdout, r.stdout
    # In the config's words, defaults included, not `read_mode=Buffered`.
    for line in ['read_mode = "buffered"', 'write_mode = "direct"', 'squash = "no_root_squash"',
                 'access = "rw"', 'durability = "sync"', 'clients = ["127.0.0.1/32"]']:
        assert line + "\n" in r.stdout, (line, r.stdout)
    # The config's own listing (no server) is kept.
    offline = dionfs("exportfs", "--config", srv.config)
    assert offline.returncode == 0 and srv.export in offline.stdout, offline.stderr

    # A reload changes what the server applies, and so the listing.
    srv.write_config('read_mode = "dontcache"\naccess = "ro"')
    r = dionfs("reload", "--pid-file", srv.pid_file)
    assert r.returncode == 0, r.stderr + r.stdout

    def listing() -> str | None:
        out = dionfs("exportfs", "-v", "--metrics", srv.metrics).stdout
        return out if 'read_mode = "dontcache"' in out else None

    out = wait_until(listing, 30, "the reloaded exports in `dionfs exportfs -v`")
    assert 'access = "ro"\n' in out, out


def nfs_nulls(srv, n: int) -> None:
    with Conn(srv.host, srv.nfs_port) as c:
        for _ in range(n):
            accept, _ = c.rpc(100003, 3, 0)
            assert accept == 0


def v3_calls(stats: str) -> list[int]:
    """The totals of each `NFS v3 calls: N` line of `dionfs stats`."""
    return [int(line.split()[3]) for line in stats.splitlines()
            if line.startswith("NFS v3 calls:")]


def test_stats_from_a_configs_metrics_listen_and_every_n_seconds(config_server):
    srv = config_server
    nfs_nulls(srv, 5)
    r = dionfs("stats", "--config", srv.config)
    assert r.returncode == 0, r.stderr
    assert v3_calls(r.stdout) and v3_calls(r.stdout)[0] >= 5, r.stdout
    # Interval mode: each report counts the calls since the one before.
    t0 = time.monotonic()
    proc = subprocess.Popen([dionfs_bin(), "stats", "--config", srv.config, "1", "--count", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: proc.poll() is not None or None, 30, "two reports")
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert out.count("-- calls in the last 1 s --") == 2, out
    assert v3_calls(out) == [0, 0], "the calls before it are not counted again:\n" + out
    assert time.monotonic() - t0 >= 2
    # --count needs an interval; an interval of 0 is refused.
    assert dionfs("stats", "--count", "2").returncode == 2
    assert dionfs("stats", "0").returncode == 2


def test_stats_without_flags_against_serve_dir(tmp_path):
    """`dionfs serve DIR` serves its metrics on 127.0.0.1:9049 unless told
    otherwise, where `dionfs stats` looks without flags."""
    if os.path.exists("/etc/dionfs.toml"):
        pytest.skip("/etc/dionfs.toml installed: stats would read its metrics_listen")
    with socket.socket() as s:
        # As the server binds it: past connections' TIME-WAIT do not count.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", 9049))
        except OSError:
            pytest.skip("127.0.0.1:9049 is taken here")
    export = tmp_path / "export"
    export.mkdir()
    srv = DionfsServer(str(export), ["--no-portmap"])
    srv.start()
    try:
        nfs_nulls(srv, 3)
        r = dionfs("stats")
        assert r.returncode == 0, r.stderr
        assert v3_calls(r.stdout)[0] >= 3, r.stdout
        r = dionfs("exportfs")
        assert r.returncode == 0 and f'path = "{export}"' in r.stdout, r.stderr
    finally:
        srv.stop()
        srv.cleanup()
    # --no-metrics: no listener, and the tools say what to start.
    srv = DionfsServer(str(export), ["--no-portmap", "--no-metrics"])
    srv.start()
    try:
        r = dionfs("stats")
        assert r.returncode == 1, r.stderr
        assert "no dionfs server answers at 127.0.0.1:9049" in r.stderr, r.stderr
        assert "dionfs serve DIR" in r.stderr and "--metrics" in r.stderr, r.stderr
    finally:
        srv.stop()
        srv.cleanup()


def test_clients_lists_nlm_hosts_and_nfs4_clients(config_server):
    srv = config_server
    r = dionfs("clients", "--metrics", srv.metrics)
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)

    fh = file_fh(srv, "locked")
    nlm = Nlm(srv, b"host-a")
    try:
        assert nlm.lock(fh, 1, 0, 10) == S_GRANTED
        url = f"nfs://{srv.host}/?version=4.1&nfsport={srv.nfs_port}"
        v4 = nfs_rs.Client.connect(url, uid=0, gid=0, connect_timeout=10, operation_timeout=60)
        srv._clients.append(v4)
        v4.stat(srv.export)
        # An open the client holds (nfs-rs keeps its OPEN until close).
        with v4.open(os.path.join(srv.export, "held"), "wb") as held:
            held.write(b"x")
            held.flush()

            def listed() -> list[str] | None:
                out = dionfs("clients", "--metrics", srv.metrics).stdout.splitlines()
                return out if len(out) == 2 and " opens=1 " in "".join(out) else None

            lines = wait_until(listed, 30, "an NLM host and an NFSv4 client with its open")
            nlm_line = next(line for line in lines if "\tnlm\t" in line)
            assert nlm_line.startswith("127.0.0.1") and "name=host-a" in nlm_line, lines
            v4_line = next(line for line in lines if "\tnfs4\t" in line)
            assert v4_line.startswith("127.0.0.1"), lines
            for field in ("vers=4.1", "sessions=1", "opens=1", "locks=0"):
                assert f" {field} " in v4_line, (field, v4_line)
            lease = v4_line.split(" lease=")[1].split()[0]
            assert lease.endswith("s") and 0 < int(lease[:-1]) <= 90, v4_line

            r = dionfs("clients", "--json", "--config", srv.config)
            assert r.returncode == 0, r.stderr
            clients = json.loads(r.stdout)
            assert {c["protocol"] for c in clients} == {"nlm", "nfs4"}, clients
            v4_client = next(c for c in clients if c["protocol"] == "nfs4")
            assert v4_client["minor_version"] == 1, v4_client
            assert (v4_client["sessions"], v4_client["opens"], v4_client["locks"]) == (1, 1, 0)
            assert v4_client["state"] == "active" and v4_client["lease_remaining"] > 0, v4_client

            # The same state as gauges.
            assert value(srv.metrics, "nfs4_clients") == 1
            assert value(srv.metrics, "nfs4_sessions") == 1
            assert value(srv.metrics, "nfs4_open_stateids") == 1
            assert value(srv.metrics, "nfs4_lock_stateids") == 0
        # Closed: the open is gone.
        wait_until(lambda: value(srv.metrics, "nfs4_open_stateids") == 0 or None, 30,
                   "the open closed")
        # `dionfs stats` shows NFSv4's operations, OPEN among them.
        r = dionfs("stats", "--metrics", srv.metrics)
        assert r.returncode == 0, r.stderr
        assert "NFS v4 operations:" in r.stdout, r.stdout
        ops = r.stdout.split("NFS v4 operations:")[1].splitlines()
        for op in ("OPEN", "CLOSE", "WRITE", "SEQUENCE"):
            assert any(line.split()[:1] == [op] for line in ops), (op, r.stdout)
        nlm_client = next(c for c in clients if c["protocol"] == "nlm")
        assert nlm_client == {"protocol": "nlm", "address": "127.0.0.1", "name": "host-a"}
    finally:
        nlm.close()


def test_exit_status_one_at_run_time_two_for_usage(tmp_path):
    nobody = f"127.0.0.1:{free_port()}"
    for tool in (["stats"], ["exportfs", "-v"], ["clients"]):
        r = dionfs(*tool, "--metrics", nobody)
        assert r.returncode == 1, (tool, r.stderr)
        assert f"no dionfs server answers at {nobody}" in r.stderr, r.stderr
    missing = str(tmp_path / "missing.toml")
    no_metrics = tmp_path / "no-metrics.toml"
    no_metrics.write_text('[server]\nmetrics_listen = "off"\n')
    for args in (["stats", "--bogus"], ["clients", "--config", missing],
                 ["stats", "--config", str(no_metrics)], ["exportfs", "--config", missing],
                 ["serve"], ["serve", str(tmp_path), "--read-mode", "fast"],
                 ["serve", "--config", missing], ["stats", "--metrics", "x", "--config", missing]):
        r = dionfs(*args)
        assert r.returncode == 2, (args, r.stderr)
    r = dionfs("stats", "--config", str(no_metrics))
    assert "no metrics_listen" in r.stderr, r.stderr


def test_a_taken_port_names_what_probably_holds_it_and_the_flag(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        r = dionfs("serve", str(export), "--listen", "127.0.0.1", "--nfs-port", str(port),
                   "--mount-port", "0", "--no-portmap", "--no-metrics",
                   "--state-dir", str(tmp_path / "state"))
    assert r.returncode == 1, r.stderr
    assert f"cannot listen for NFS on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "probably held by" in r.stderr and "--nfs-port" in r.stderr, r.stderr
