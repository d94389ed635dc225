"""Reloading the configuration without a restart (issue 10): `SIGHUP` and
`dionfs reload` re-read the file `dionfs serve --config` was started with
and apply its exports while clients keep their connections. Exports added
are served at once, removed ones refuse MNT and answer their handles
NFS3ERR_STALE (as knfsd after `exportfs -r`), changed options apply to the
next call, and a bad file changes nothing and is reported as at start."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading

import pytest
from nfstools import NfsProc, assert_nfs_error, make_random_file, nfs_cat, nfs_ls
from netns import run_in_private_namespaces
from servers import DionfsServer, dionfs_bin
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

MiB = 1 << 20


def _fresh_dir(loopfs, name: str) -> str:
    path = loopfs.path(name)
    if os.path.lexists(path):
        shutil.rmtree(path)
    os.mkdir(path)
    os.chmod(path, 0o777)
    return path


class ReloadServer(DionfsServer):
    """`dionfs serve --config FILE --ports-file ... --pid-file ...` on
    ephemeral ports, whose exports a test rewrites (`write_config`) and
    reloads (`hup`, `reload_cli`)."""

    def __init__(self, exports: dict[str, dict]):
        super().__init__(next(iter(exports)))
        self.config = os.path.join(self.workdir, "dionfs.toml")
        self.pid_file = os.path.join(self.workdir, "dionfs.pid")
        # Debug: open_nfs_connections reads the connections' lines.
        self.extra_args = ["--ports-file", self.ports_file, "--pid-file", self.pid_file,
                           "--log-level", "debug"]
        self.write_config(exports)

    def write_config(self, exports: dict[str, dict], tail: str = "") -> None:
        """Exports by path, each with its extra options (TOML values)."""
        text = (f'[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
                f'portmap_port = false\nstate_dir = "{self.state_dir}"\n')
        for path, options in exports.items():
            clients = options.get("clients", '["127.0.0.1"]')
            text += f'\n[[export]]\npath = "{path}"\nclients = {clients}\nsecure = false\n'
            for key, value in options.items():
                if key != "clients":
                    text += f"{key} = {value}\n"
        write_atomic(self.config, text + tail)

    def reloads(self) -> int:
        """Reloads the log reports as done or failed so far."""
        return len(re.findall(r"reloaded: |reload failed", self.log_text(tail=100000)))

    def hup(self) -> str:
        """SIGHUP, then the log line that reports the reload."""
        n = self.reloads()
        self.proc.send_signal(signal.SIGHUP)
        return self.wait_reload(n)

    def reload_cli(self, *args: str) -> str:
        """`dionfs reload ARGS` (default: --pid-file of this server)."""
        n = self.reloads()
        argv = [dionfs_bin(), "reload"] + (list(args) or ["--pid-file", self.pid_file])
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"{argv}: rc={r.returncode} {r.stderr}"
        assert f"pid {self.proc.pid}" in r.stdout, r.stdout
        return self.wait_reload(n)

    def wait_reload(self, before: int, timeout: float = 30) -> str:
        def reported() -> str | None:
            assert self.alive(), f"dionfs died on reload:\n{self.log_text()}"
            lines = [line for line in self.log_text(tail=100000).splitlines()
                     if "reloaded: " in line or "reload failed" in line]
            return lines[before] if len(lines) > before else None
        return wait_until(reported, timeout, lambda: f"a reload reported:\n{self.log_text()}")

    def open_nfs_connections(self) -> set[int]:
        """Ids of the NFS connections the log shows open now."""
        opened, closed = set(), set()
        for line in self.log_text(tail=100000).splitlines():
            m = re.search(r"conn=(\d+)", line)
            if not m:
                continue
            if "connection opened" in line and f"local=127.0.0.1:{self.nfs_port}" in line:
                opened.add(int(m.group(1)))
            elif "connection closed" in line:
                closed.add(int(m.group(1)))
        return opened - closed

    def at(self, export: str) -> "ReloadServer":
        """This server with `export` as the one its clients and urls use."""
        self.export = export
        return self


def write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


@pytest.fixture
def reload_server(request, loopfs):
    servers: list[ReloadServer] = []

    def start(exports: dict[str, dict]) -> ReloadServer:
        srv = ReloadServer(exports)
        servers.append(srv)
        srv.start()
        return srv

    yield start
    for srv in servers:
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            print(f"\n===== dionfs log ({srv.log_path}) =====\n{srv.log_text()}\n===== end =====")
        code = srv.stop()
        srv.cleanup()
        assert code == 0, f"dionfs exited with {code} after SIGTERM"


class Reader(threading.Thread):
    """Reads one file again and again through one nfs-rs client (one
    connection), checking every pass against `digest`."""

    def __init__(self, client, path: str, digest: str):
        super().__init__(daemon=True)
        self.client, self.path, self.digest = client, path, digest
        self.passes = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        buf = bytearray(MiB)
        try:
            while not self.stop.is_set():
                h = hashlib.sha256()
                with self.client.open(self.path, "rb") as f:
                    while n := f.readinto(buf):
                        h.update(memoryview(buf)[:n])
                assert h.hexdigest() == self.digest, f"pass {self.passes + 1}: wrong data"
                self.passes += 1
        except BaseException as e:  # reported by the test
            self.error = e

    def wait_passes(self, n: int, timeout: float = 120) -> None:
        def done() -> bool:
            if self.passes >= n:
                return True
            assert self.error is None, f"the reader failed: {self.error!r}"
            assert self.is_alive(), "the reader stopped"
            return False
        wait_until(done, timeout, lambda: f"{n} passes of the reader ({self.passes} made)")
        assert self.error is None, f"the reader failed: {self.error!r}"

    def finish(self) -> None:
        self.stop.set()
        self.join(120)
        assert not self.is_alive(), "the reader did not stop"
        assert self.error is None, f"the reader failed: {self.error!r}"


def test_reload_adds_and_removes_exports_while_a_client_keeps_reading(reload_server, loopfs, nfsproc_bin):
    a, b, c = (_fresh_dir(loopfs, n) for n in ("reload-a", "reload-b", "reload-c"))
    digest = make_random_file(os.path.join(a, "big"), 64 * MiB, seed=10)
    for d in (b, c):
        with open(os.path.join(d, "hello"), "w") as f:
            f.write(f"in {d}\n")
    srv = reload_server({a: {}})
    proc = NfsProc(nfsproc_bin, srv)
    assert proc("mnt", export=b, check=False)["mnt_status"] == "MNT3ERR_NOENT"
    reader = Reader(srv.at(a).client(), "big", digest)
    reader.start()
    reader.wait_passes(1)
    before = srv.open_nfs_connections()
    assert before, "the reader's connection is not in the log"

    # SIGHUP: B added, A untouched.
    srv.write_config({a: {}, b: {"access": '"ro"'}})
    line = srv.hup()
    assert f"reloaded: added {b}; 1 unchanged" in line, line
    assert nfs_cat(srv.at(b).url("hello")) == f"in {b}\n".encode()
    assert_nfs_error("NFS3ERR_ROFS", srv.at(b).client().touch, "nope")

    # `dionfs reload --pid-file`: C added too.
    srv.write_config({a: {}, b: {"access": '"ro"'}, c: {}})
    line = srv.reload_cli()
    assert f"reloaded: added {c}; 2 unchanged" in line, line
    assert "hello" in nfs_ls(srv.at(c).url()).stdout.decode()
    srv.at(c).client().touch("written")
    assert os.path.exists(os.path.join(c, "written"))

    # SIGHUP again: B removed, while the reader still reads A.
    srv.write_config({a: {}, c: {}})
    line = srv.hup()
    assert f"reloaded: removed {b}; 2 unchanged" in line, line
    assert proc("mnt", export=b, check=False)["mnt_status"] == "MNT3ERR_NOENT"

    # The reader read on across the three reloads, on its connection.
    done = reader.passes
    reader.wait_passes(done + 1)
    reader.finish()
    still_open = srv.open_nfs_connections()
    assert before <= still_open, (f"connections open before the reloads were closed: "
                                  f"{sorted(before - still_open)}\n{srv.log_text(60)}")


def test_reload_removes_an_export(reload_server, loopfs, nfsproc_bin):
    a, b = (_fresh_dir(loopfs, n) for n in ("reload-a", "reload-b"))
    with open(os.path.join(b, "f"), "w") as f:
        f.write("b's file\n")
    with open(os.path.join(a, "f"), "w") as f:
        f.write("a's file\n")
    srv = reload_server({a: {}, b: {}})
    proc = NfsProc(nfsproc_bin, srv)
    fh_b = proc("lookup", "f", export=b)["fh"]
    root_b = proc("mnt", export=b)["root_fh"]
    fh_a = proc("lookup", "f", export=a)["fh"]
    assert proc("getattr-fh", fh_b)["status"] == "NFS3_OK"
    client_b = srv.at(b).client()
    with client_b.open("f", "rb") as f:
        assert f.read() == b"b's file\n"

    srv.write_config({a: {}})
    line = srv.hup()
    assert f"reloaded: removed {b}; 1 unchanged" in line, line

    assert proc("mnt", export=b, check=False)["mnt_status"] == "MNT3ERR_NOENT"
    for fh in (fh_b, root_b):
        assert proc("getattr-fh", fh)["status"] == "NFS3ERR_STALE"
    # A client that mounted B before: its calls are stale too.
    assert_nfs_error("NFS3ERR_STALE", client_b.listdir, "")
    assert proc("getattr-fh", fh_a)["status"] == "NFS3_OK"
    assert nfs_cat(srv.at(a).url("f")) == b"a's file\n"

    # Exported again: its handles work again (same id, same path).
    srv.write_config({a: {}, b: {}})
    assert f"reloaded: added {b}; 1 unchanged" in srv.hup()
    assert proc("getattr-fh", fh_b)["status"] == "NFS3_OK"


def test_reload_changes_options_of_a_served_export(reload_server, loopfs, nfsproc_bin):
    a = _fresh_dir(loopfs, "reload-a")
    srv = reload_server({a: {"access": '"rw"'}})
    proc = NfsProc(nfsproc_bin, srv)
    client = srv.at(a).client()  # one connection throughout
    with client.open("f", "wb") as f:
        f.write(b"x" * 100_000)
    client.touch("w")
    assert proc("write", "w", 0, 4096, "unstable")["write_status"] == "NFS3_OK"

    srv.write_config({a: {"access": '"ro"', "squash": '"all_squash"', "anonuid": 4242}})
    line = srv.hup()
    assert f"reloaded: changed {a} (access, squash, anonuid); 0 unchanged" in line, line
    assert proc("write", "w", 0, 4096, "unstable")["write_status"] == "NFS3ERR_ROFS"
    assert_nfs_error("NFS3ERR_ROFS", client.touch, "new")
    with client.open("f", "rb") as f:
        assert f.read() == b"x" * 100_000, "reads go on"
    assert os.path.getsize(os.path.join(a, "f")) == 100_000

    # Back to read-write, reading buffered now (a new data plane): writes
    # work again on the same connection, as the squashed user.
    srv.write_config({a: {"access": '"rw"', "squash": '"all_squash"', "anonuid": 4242,
                          "read_mode": '"buffered"'}})
    line = srv.hup()
    assert f"changed {a} (access, read_mode)" in line, line
    client.touch("made")
    assert os.stat(os.path.join(a, "made")).st_uid == 4242
    with client.open("f", "rb") as f:
        assert f.read() == b"x" * 100_000


def test_bad_config_on_reload_keeps_the_exports(reload_server, loopfs):
    a, b = (_fresh_dir(loopfs, n) for n in ("reload-a", "reload-b"))
    with open(os.path.join(a, "f"), "w") as f:
        f.write("still here\n")
    srv = reload_server({a: {}})
    client = srv.at(a).client()

    def line_of(needle: str) -> int:
        lines = open(srv.config).read().splitlines()
        return next(i for i, line in enumerate(lines, 1) if needle in line)

    # A syntax error, an export with a bad option, an export that does not
    # exist: none of the file is applied (A would become read-only), and
    # the log says where and why, as at start.
    srv.write_config({a: {"access": '"ro"'}, b: {}}, tail="bogus line\n")
    line = srv.hup()
    assert "reload failed" in line and f"{srv.config}:{line_of('bogus')}:" in line, line
    srv.write_config({a: {"access": '"ro"'}, b: {"squash": '"some_squash"'}})
    line = srv.hup()
    assert "reload failed" in line and f"{srv.config}:{line_of('some_squash')}:" in line, line
    srv.write_config({a: {"access": '"ro"'}, b: {}})
    os.rmdir(b)
    line = srv.hup()
    assert "reload failed" in line and f"{srv.config}:{line_of(b)}:" in line, line

    assert srv.alive()
    client.touch("rw-still")  # A stayed read-write
    with client.open("f", "rb") as f:
        assert f.read() == b"still here\n"

    # Fixed: applied.
    os.mkdir(b)
    assert f"added {b}" in srv.hup()


def test_dionfs_reload_waits_for_the_outcome_and_fails_with_a_failed_reload(reload_server, loopfs):
    """`dionfs reload --pid-file F` (what the unit's ExecReload runs, so
    `systemctl reload` reports it too) waits for the outcome the server
    records beside its pid file: what changed, or, for a file that does not
    load, the error and exit status 1. It exited 0 either way, as soon as
    the signal was sent."""
    a, b = (_fresh_dir(loopfs, n) for n in ("reload-cli-a", "reload-cli-b"))
    srv = reload_server({a: {}})
    argv = [dionfs_bin(), "reload", "--pid-file", srv.pid_file]
    srv.write_config({a: {}, b: {}})
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0 and f"(pid {srv.proc.pid}) reloaded: added {b}" in r.stdout, r
    srv.write_config({a: {}}, tail="bogus line\n")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert r.returncode == 1, r
    assert "did not reload, its exports stay as they were" in r.stderr, r.stderr
    assert f"{srv.config}:" in r.stderr, r.stderr
    srv.write_config({a: {}})
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0 and f"removed {b}" in r.stdout, r
    srv.stop()
    assert not os.path.exists(srv.pid_file[:-len(".pid")] + ".reload"), "outcome left behind"


def test_server_settings_need_a_restart(reload_server, loopfs):
    a, b = (_fresh_dir(loopfs, n) for n in ("reload-a", "reload-b"))
    srv = reload_server({a: {}})
    srv.write_config({a: {}, b: {}})
    text = open(srv.config).read().replace("portmap_port = false\n",
                                           "portmap_port = false\nmax_connections = 10\n"
                                           "idle_timeout = 60\n")
    write_atomic(srv.config, text)
    line = srv.hup()
    assert f"added {b}" in line, line
    assert re.search(r"reload: \[server\] max_connections, idle_timeout changed: not applied "
                     r"until a restart", srv.log_text()), srv.log_text(20)
    srv.at(b).client().listdir("")


def test_sighup_without_config_file_changes_nothing(server, client):
    client.touch("x")
    server.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "nothing to reload" in server.log_text(), 20, "\"nothing to reload\" logged")
    assert server.alive()
    assert "x" in client.listdir("")


def test_reload_tells_systemd(reload_server, loopfs, tmp_path, monkeypatch):
    """Type=notify: RELOADING=1 (with MONOTONIC_USEC) when a reload starts,
    READY=1 when it is done (sd_notify(3)); `systemctl reload` waits for
    it (dist/dionfs.service: ExecReload runs `dionfs reload`, which sends
    SIGHUP and waits for the outcome; test_systemd_unit runs the unit)."""
    a, b = (_fresh_dir(loopfs, n) for n in ("reload-a", "reload-b"))
    sock_path = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(sock_path)
    listener.settimeout(30)
    monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
    try:
        srv = reload_server({a: {}})
        assert listener.recv(4096).decode().startswith("READY=1\n")
        srv.write_config({a: {}, b: {}})
        srv.hup()
        reloading = listener.recv(4096).decode()
        assert re.fullmatch(r"RELOADING=1\nMONOTONIC_USEC=\d+", reloading), reloading
        ready = listener.recv(4096).decode()
        assert ready.startswith("READY=1\n") and "serving 2 export(s)" in ready, ready
    finally:
        listener.close()
    unit = open(os.path.join(os.path.dirname(__file__), "..", "..", "dist",
                             "dionfs.service")).read()
    assert "ExecReload=/usr/local/bin/dionfs reload --pid-file /run/dionfs.pid" in unit
    assert "--pid-file /run/dionfs.pid" in unit.split("ExecStart=")[1].splitlines()[0]


def test_reload_command_errors(tmp_path):
    """`dionfs reload` refuses what is not a running `dionfs serve`, and
    says so."""
    b = dionfs_bin()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pid_file = tmp_path / "other.pid"
        pid_file.write_text(f"{sleeper.pid}\n")
        for args, needle in ((["--pid-file", str(pid_file)], "not a `dionfs serve`"),
                             (["--pid", str(sleeper.pid)], "not a `dionfs serve`"),
                             (["--pid-file", str(tmp_path / "none.pid")], "cannot read pid file"),
                             (["--pid", "2147483647"], "no process")):
            r = subprocess.run([b, "reload"] + args, capture_output=True, text=True, timeout=30)
            assert r.returncode != 0 and needle in r.stderr, (args, r.returncode, r.stderr)
        assert sleeper.poll() is None, "SIGHUP was sent to a process that is not dionfs"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_reload_that_adds_a_name_matched_export_serves_open_connections(tmp_path):
    """An export whose client list names hosts, added by a reload when no
    export did, admits a matching client on the connections it already
    had (their names are looked up before their next call) and refuses one
    that does not match. In private namespaces, as test_client_names.py:
    names from a bind-mounted /etc/hosts, 127.0.0.2-3 on a private
    loopback, the standard ports."""
    import sys

    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        d.chmod(0o755)
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n127.0.0.2 build1.example.com\n"
                                    "127.0.0.3 intruder.example.org\n")
    head = (f'[server]\nlisten = "0.0.0.0"\nnfs_port = 2049\nmount_port = 20048\n'
            f'portmap_port = false\nstate_dir = "{tmp_path}/state"\n'
            f'\n[[export]]\npath = "{a}"\nclients = ["127.0.0.0/8"]\noptions = "rw,insecure"\n')
    conf = tmp_path / "dionfs.toml"
    conf.write_text(head)
    (tmp_path / "after.toml").write_text(
        head + f'\n[[export]]\npath = "{b}"\nclients = ["*.example.com"]\n'
               f'options = "rw,insecure"\n')
    client = tmp_path / "client.py"
    client.write_text(f"""
import os, signal, sys, time
sys.path.insert(0, {lib!r})
import rawrpc

def conn(src, port):
    return rawrpc.Conn("127.0.0.1", port, timeout=20, source=src)

mnt2, nfs2, mnt3 = conn("127.0.0.2", 20048), conn("127.0.0.2", 2049), conn("127.0.0.3", 20048)
status, fh_a = rawrpc.mnt(mnt2, {str(a)!r})
print(f"before: MNT a from 127.0.0.2: {{status}}")
print(f"before: MNT b from 127.0.0.2: {{rawrpc.mnt(mnt2, {str(b)!r})[0]}}")
accept, res = nfs2.rpc(100003, 3, 1, rawrpc.opaque(fh_a))
print(f"before: GETATTR a from 127.0.0.2: {{rawrpc.nfs_status(res)}}")

os.replace({str(tmp_path / "after.toml")!r}, {str(conf)!r})
os.kill(int(os.environ["DIONFS_PID"]), signal.SIGHUP)
for _ in range(200):
    if "reloaded:" in open({str(tmp_path / "dionfs.log")!r}).read():
        break
    time.sleep(0.05)

status, fh_b = rawrpc.mnt(mnt2, {str(b)!r})
print(f"after: MNT b from 127.0.0.2: {{status}}")
accept, res = nfs2.rpc(100003, 3, 1, rawrpc.opaque(fh_b))
print(f"after: GETATTR b from 127.0.0.2: {{rawrpc.nfs_status(res)}}")
print(f"after: MNT b from 127.0.0.3: {{rawrpc.mnt(mnt3, {str(b)!r})[0]}}")
""")
    script = tmp_path / "run.sh"
    script.write_text(f"""set -eu
mount --bind {tmp_path}/hosts /etc/hosts
{dionfs_bin()} serve --config {conf} --log-level debug > {tmp_path}/dionfs.log 2>&1 &
D=$!
for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/2049) 2>/dev/null && break; sleep 0.1; done
DIONFS_PID=$D {sys.executable} {client}
kill $D; wait $D || true
""")
    r = run_in_private_namespaces(script)
    out = r.stdout + r.stderr
    log = (tmp_path / "dionfs.log").read_text()
    print(out, log)
    assert r.returncode == 0, out
    assert "before: MNT a from 127.0.0.2: 0" in out, out
    assert "before: MNT b from 127.0.0.2: 2" in out, out     # not exported yet: NOENT
    assert "before: GETATTR a from 127.0.0.2: 0" in out, out
    assert f"reloaded: added {b}" in log, log
    assert "after: MNT b from 127.0.0.2: 0" in out, out      # build1.example.com
    assert "after: GETATTR b from 127.0.0.2: 0" in out, out  # on the connection it had
    assert "after: MNT b from 127.0.0.3: 13" in out, out     # intruder.example.org: ACCES
    # No reconnection: the two connections from 127.0.0.2 served it all.
    assert len(re.findall(r"connection opened .*peer=127\.0\.0\.2:", log)) == 2, log


def test_a_reload_that_removes_an_export_releases_the_nlm_locks_on_its_files(reload_server, loopfs):
    """A client's NLM lock on a file of an export a reload removes: the
    client can no longer reach the file to unlock it (STALE_FH), so the lock
    was held until a restart, and a process on the server waited on it for
    ever. Now the reload releases it and says so."""
    from test_nlm import S_GRANTED, Nlm, file_fh, local_denied

    a, b = _fresh_dir(loopfs, "reload-nlm-a"), _fresh_dir(loopfs, "reload-nlm-b")
    srv = reload_server({a: {}, b: {}}).at(b)
    fh = file_fh(srv, "locked")
    client = Nlm(srv, b"clientA")
    try:
        assert client.lock(fh, 1, 0, 10) == S_GRANTED
        assert local_denied(os.path.join(b, "locked"), 0, 1)
        srv.write_config({a: {}})
        assert "removed " + b in srv.hup()
        assert not local_denied(os.path.join(b, "locked"), 0, 1), "the lock outlived its export"
        assert "released the NLM locks held on files of the removed exports" in srv.log_text()
    finally:
        client.close()


def test_an_export_moved_under_its_id_keeps_the_nlm_locks(reload_server, loopfs):
    """An export moved to another path under the same id is removed and
    added, but its handles go on working through the new one: its clients'
    NLM locks are not released."""
    from test_nlm import S_GRANTED, Nlm, file_fh, local_denied

    b, c = _fresh_dir(loopfs, "reload-move-b"), _fresh_dir(loopfs, "reload-move-c")
    srv = reload_server({b: {"id": "7"}}).at(b)
    fh = file_fh(srv, "locked")
    client = Nlm(srv, b"clientA")
    try:
        assert client.lock(fh, 1, 0, 10) == S_GRANTED
        srv.write_config({c: {"id": "7"}})
        line = srv.hup()
        assert f"added {c}" in line and f"removed {b}" in line, line
        assert local_denied(os.path.join(b, "locked"), 0, 1), "the moved export's lock was released"
        assert "released the NLM locks" not in srv.log_text()
    finally:
        client.close()
