"""The files dionfs keeps for itself are its own (issue 40, item 1).

The server runs with umask 0 (client-given modes apply exactly), and before
this issue created its state directory with default modes: `nlm/` and every
`integrity/` directory 0777, `nlm/hosts` and `nlm/state` 0666, so any local
user could rewrite the record of lock clients or replace checksum files.

- test_nothing_of_the_server_is_open_to_other_users: a server with an
  integrity export, an NLM lock recorded, a reload outcome, a pid and a
  ports file, all in a directory every user can enter; then, as `nobody`,
  nothing of it can be written, listed or read (the pid file aside, nothing
  can be read at all), and as root every mode is owner-only.
- test_an_open_state_directory_is_tightened_at_start: a state directory laid
  out as an earlier version left it (and a file another user planted in it)
  is made owner-only at start, the planted file is taken back, and the log
  says what changed.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import tempfile

import pytest
from nfstools import nfs_cp
from servers import DionfsServer
from test_nlm import S_GRANTED, Nlm, file_fh
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

NOBODY = 65534


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", *argv], user=NOBODY, group=NOBODY, extra_groups=[],
                          capture_output=True, text=True, timeout=60)


def walk(root: str) -> list[str]:
    """Every path under `root`, `root` included (as root sees them)."""
    out = [root]
    for dirpath, dirnames, filenames in os.walk(root):
        out += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return out


def open_bits(path: str) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode) & 0o077


class PrivateServer(DionfsServer):
    """A server whose state, pid and ports files sit in a directory any user
    may enter (`public`), so that only their own modes keep others out."""

    def __init__(self, export: str, public: str, extra: list[str]):
        super().__init__(export, extra)
        os.rmdir(self.state_dir)  # the server creates it
        self.state_dir = os.path.join(public, "state")
        self.ports_file = os.path.join(public, "ports.json")
        self.pid_file = os.path.join(public, "dionfs.pid")
        self.extra_args += ["--pid-file", self.pid_file]


@pytest.fixture
def public_dir():
    d = tempfile.mkdtemp(prefix="dionfs-state-test-")
    os.chmod(d, 0o755)
    yield d
    subprocess.run(["rm", "-rf", d])


def start(loopfs, public: str, extra: list[str]) -> PrivateServer:
    export = loopfs.path("export")
    subprocess.run(["rm", "-rf", export], check=True)
    os.mkdir(export)
    os.chmod(export, 0o777)
    srv = PrivateServer(export, public, ["--integrity", "crc32c", "--grace-period", "0"] + extra)
    srv.start()
    return srv


def test_nothing_of_the_server_is_open_to_other_users(loopfs, public_dir, tmp_path):
    srv = start(loopfs, public_dir, [])
    try:
        # Checksums (integrity/files/XX/*.crc, the intent log).
        src = tmp_path / "data"
        src.write_bytes(os.urandom(100_000))
        nfs_cp(str(src), srv.url("written"))
        # A lock client recorded (nlm/hosts, nlm/state).
        fh = file_fh(srv, "locked")
        c = Nlm(srv, b"state-test-client")
        assert c.lock(fh, 1, 0, 10) == S_GRANTED
        c.close()
        # A reload outcome beside the pid file (this server has no config:
        # the reload fails, and says so in that file).
        reload_file = os.path.splitext(srv.pid_file)[0] + ".reload"
        srv.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: os.path.exists(reload_file), 30,
                   lambda: f"{reload_file}:\n{srv.log_text()}")

        state = walk(srv.state_dir)
        names = {os.path.relpath(p, srv.state_dir) for p in state}
        for expected in ("nlm", "nlm/hosts", "nlm/state", "integrity", "integrity/files",
                         "integrity/intent.log", "fh.key", "lock"):
            assert expected in names, sorted(names)
        assert any(p.endswith(".crc") for p in state), sorted(names)
        files = state + [srv.pid_file, srv.ports_file, reload_file]

        # As root: every mode owner-only.
        loose = {p: oct(stat.S_IMODE(os.lstat(p).st_mode)) for p in files if open_bits(p)}
        assert not loose, loose
        # As nobody: nothing writable, nothing readable or listable. Each
        # path is given as an argument, not in the script's text.
        script = 'for p; do if [ -w "$p" ] || [ -r "$p" ]; then echo "open: $p"; fi; done; ' \
                 'ls "$0" >/dev/null 2>&1 && echo "listed: $0"; ' \
                 'echo x >> "$1" 2>/dev/null && echo "appended: $1"; ' \
                 'rm -f "$2" 2>/dev/null; [ -e "$2" ] || echo "removed: $2"; true'
        hosts = os.path.join(srv.state_dir, "nlm", "hosts")
        r = as_nobody(script, srv.state_dir, hosts, srv.pid_file, *files)
        assert r.returncode == 0, r.stderr
        assert r.stdout == "", r.stdout
        # And nobody can make a file in it.
        r = as_nobody('touch "$0/planted" 2>/dev/null && echo planted; true',
                      os.path.join(srv.state_dir, "nlm"))
        assert r.stdout == "", r.stdout
        # A fresh state directory needed no repair.
        assert "open to other local users" not in srv.log_text(100000)
    finally:
        srv.stop()
        srv.cleanup()


def test_an_open_state_directory_is_tightened_at_start(loopfs, public_dir):
    state = os.path.join(public_dir, "state")
    # As an earlier version left it, with the umask of 0 it ran with.
    layout = {
        "": 0o755, "nlm": 0o777, "nlm/hosts": 0o666, "nlm/state": 0o666,
        "integrity": 0o777, "integrity/files": 0o777, "integrity/files/ab": 0o777,
        "integrity/intent.log": 0o666, "integrity/files/ab/ab00.crc": 0o600,
    }
    for rel, mode in layout.items():
        path = os.path.join(state, rel)
        if rel.endswith((".crc", ".log", "hosts", "state")):
            with open(path, "w") as f:
                f.write("3\n" if rel == "nlm/state" else "")
        else:
            os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)
    # What another user could put there meanwhile.
    planted = os.path.join(state, "integrity/files/ab/planted.crc")
    with open(planted, "w") as f:
        f.write("forged")
    os.chown(planted, NOBODY, NOBODY)
    os.chmod(planted, 0o644)

    srv = start(loopfs, public_dir, [])
    try:
        for path in walk(state):
            assert open_bits(path) == 0, (path, oct(os.lstat(path).st_mode))
        assert os.lstat(planted).st_uid == 0
        log = srv.log_text(100000)
        assert "open to other local users" in log, log
        assert "nlm/hosts 0666->0600" in log, log
        assert "created by another user" in log and "planted.crc" in log, log
        # The server serves on: the NSM state moved on from the old one.
        assert open(os.path.join(state, "nlm/state")).read().strip() == "5"
        r = as_nobody('[ -w "$0" ] && echo writable; true', os.path.join(state, "nlm/hosts"))
        assert r.stdout == ""
        # The next start has nothing to repair.
        srv.restart()
        assert srv.log_text(100000).count("open to other local users") == 1
    finally:
        srv.stop()
        srv.cleanup()
