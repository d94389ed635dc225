"""Start/stop an NFSv3 server under test: dionfs, or NFS-Ganesha as a reference.

Both expose the same interface (`ServerBase`), driven by dionfs's command-line
flags (`--ro`, `--all-squash`, `--allow ...`); the Ganesha backend translates
them into an EXPORT block so the same tests can be checked against a mature
server (see tests/lib/ganesha-pytest.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"


def dionfs_bin() -> str:
    return os.environ.get("DIONFS_BIN", str(REPO / "target" / "debug" / "dionfs"))


class ServerError(RuntimeError):
    pass


_running: set = set()
_workdirs: set = set()


def kill_all() -> None:
    """Kill every server process started here (exit/signal cleanup)."""
    for p in list(_running):
        if p.poll() is None:
            p.kill()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        _running.discard(p)
    for d in list(_workdirs):
        shutil.rmtree(d, ignore_errors=True)
        _workdirs.discard(d)


try:
    from loopfs import before_destroy_all

    before_destroy_all(kill_all)
except ImportError:  # used without loopfs
    pass


class ServerBase:
    """A running server exporting `export` (an absolute local path)."""

    name = "?"

    def __init__(self, export: str, extra_args: list[str] | None = None):
        self.export = export
        self.extra_args = list(extra_args or [])
        self.host = HOST
        self.nfs_port: int | None = None
        self.mount_port: int | None = None
        self.portmap_port: int | None = None
        self.workdir = tempfile.mkdtemp(prefix=f"{self.name}-test-")
        _workdirs.add(self.workdir)
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc: subprocess.Popen | None = None
        self.exit_code: int | None = None
        self.killed = False
        self._clients: list = []

    # ---- URLs and clients
    def url(self, path: str = "", **params) -> str:
        q = {"version": "3", "nfsport": self.nfs_port, "mountport": self.mount_port}
        q.update({k: v for k, v in params.items() if v is not None})
        path = path.lstrip("/")
        base = f"nfs://{self.host}{self.export}" + (f"/{path}" if path else "")
        return base + "?" + urllib.parse.urlencode(q)

    def client(self, uid: int | None = 1000, gid: int | None = 1000, **kw):
        """An nfs-rs Client on the export (closed at teardown)."""
        import nfs_rs

        kw.setdefault("connect_timeout", 10)
        kw.setdefault("operation_timeout", 60)
        c = nfs_rs.Client.connect(self.url(), uid=uid, gid=gid, **kw)
        self._clients.append(c)
        return c

    def close_clients(self) -> None:
        for c in self._clients:
            try:
                c.close()
            except Exception:
                pass
        self._clients.clear()

    def log_text(self, tail: int = 300) -> str:
        try:
            lines = Path(self.log_path).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    # ---- lifecycle
    def start(self) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code."""
        p = self.proc
        if p is None:
            return self.exit_code
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.killed = True
                p.kill()
                p.wait(10)
        self.exit_code = p.returncode
        _running.discard(p)
        self.proc = None
        return self.exit_code

    def restart(self, extra_args: list[str] | None = None) -> None:
        """Stop and start again on the same ports (and the same state dir)."""
        if extra_args is not None:
            self.extra_args = list(extra_args)
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.close_clients()
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        _workdirs.discard(self.workdir)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class DionfsServer(ServerBase):
    """dionfs serve EXPORT (or --config FILE).

    `secure`: dionfs exports are `secure` by default, as in exports(5): NFS
    calls and MNT only from source ports below 1024. The suite's clients run
    as root and usually bind such a port (libnfs tries 512-1023; nfs-rs binds
    one unless `noresvport`), but that range is shared by every test and
    bench run on the machine, and when libnfs finds no free port in it, it
    quietly connects from an ordinary one, which a secure export refuses. So
    the servers the tests start are `--insecure` unless a test asks for
    `secure=True` (tests/integration/test_secure_port.py does); --config
    servers say `secure = false` in their TOML.
    """

    name = "dionfs"

    def __init__(self, export: str, extra_args: list[str] | None = None, config: str | None = None,
                 secure: bool = False):
        super().__init__(export, extra_args)
        self.config = config
        self.secure = secure
        self.state_dir = os.path.join(self.workdir, "state")
        self.ports_file = os.path.join(self.workdir, "ports.json")
        os.makedirs(self.state_dir, exist_ok=True)

    def command(self) -> list[str]:
        b = dionfs_bin()
        if self.config:
            return [b, "serve", "--config", self.config] + self.extra_args
        return [
            b, "serve", self.export,
            "--listen", self.host,
            "--nfs-port", str(self.nfs_port or 0),
            "--mount-port", str(self.mount_port or 0),
            "--portmap-port", str(self.portmap_port or 0),
            "--state-dir", self.state_dir,
            "--ports-file", self.ports_file,
        ] + ([] if self.secure else ["--insecure"]) + self.extra_args

    def start(self, wait: float = 30.0) -> None:
        b = dionfs_bin()
        if not os.access(b, os.X_OK):
            raise ServerError(f"dionfs binary {b} missing (run `cargo build` or set DIONFS_BIN)")
        if os.path.exists(self.ports_file):
            os.unlink(self.ports_file)
        log = open(self.log_path, "ab")
        log.write(f"\n=== start: {' '.join(self.command())}\n".encode())
        log.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        _running.add(self.proc)
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                self.proc = None
                raise ServerError(f"dionfs exited with {self.exit_code} before writing "
                                  f"{self.ports_file}; log:\n{self.log_text()}")
            try:
                ports = json.loads(Path(self.ports_file).read_text())
                self.nfs_port = int(ports["nfs"])
                self.mount_port = int(ports["mount"])
                self.portmap_port = ports.get("portmap")
                return
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                time.sleep(0.05)
        self.stop()
        raise ServerError(f"dionfs wrote no ports file within {wait}s; log:\n{self.log_text()}")


GANESHA_CONF = """\
NFS_CORE_PARAM {{
    Protocols = 3;
    NFS_Port = {nfs_port};
    MNT_Port = {mount_port};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
    mount_path_pseudo = false;
    Plugins_Dir = "/usr/lib/x86_64-linux-gnu/ganesha";
}}
NFS_KRB5 {{ Active_krb5 = false; }}
NFSv4 {{ Graceless = true; RecoveryBackend = fs; RecoveryRoot = "{workdir}/recovery"; }}
EXPORT {{
    Export_Id = 1;
    Path = "{export}";
    Pseudo = "{export}";
    Protocols = 3;
    Transports = TCP;
    SecType = sys;
    Access_Type = None;
    Squash = {squash};
    Anonymous_Uid = {anonuid};
    Anonymous_Gid = {anongid};
    MaxRead = {max_transfer};
    MaxWrite = {max_transfer};
    PrefRead = {max_transfer};
    PrefWrite = {max_transfer};
    FSAL {{ Name = VFS; }}
    CLIENT {{ Clients = {clients}; Access_Type = {access}; }}
}}
LOG {{ Default_Log_Level = EVENT; }}
"""


class GaneshaServer(ServerBase):
    """NFS-Ganesha with an EXPORT translated from dionfs flags.

    Needs to run in a private network namespace that has its own rpcbind
    (tests/lib/ganesha-pytest.sh sets that up); uses ports 2049/20048.
    """

    name = "ganesha"

    def config_text(self) -> str:
        a = self.extra_args
        squash, access, clients = "Root_Squash", "RW", []
        anonuid = anongid = 65534
        max_transfer = 1048576
        i = 0
        while i < len(a):
            f = a[i]
            if f == "--ro":
                access = "RO"
            elif f == "--all-squash":
                squash = "All_Squash"
            elif f == "--no-root-squash":
                squash = "No_Root_Squash"
            elif f in ("--anonuid", "--anongid", "--allow", "--max-transfer",
                       "--read-mode", "--write-mode"):
                v = a[i + 1]
                i += 1
                if f == "--anonuid":
                    anonuid = int(v)
                elif f == "--anongid":
                    anongid = int(v)
                elif f == "--allow":
                    clients.append(v)
                elif f == "--max-transfer":
                    max_transfer = int(v)
            i += 1
        return GANESHA_CONF.format(
            nfs_port=self.nfs_port, mount_port=self.mount_port, workdir=self.workdir,
            export=self.export, squash=squash, anonuid=anonuid, anongid=anongid,
            max_transfer=max_transfer, clients=", ".join(clients or ["127.0.0.1"]),
            access=access)

    def start(self, wait: float = 30.0) -> None:
        import socket

        self.nfs_port, self.mount_port, self.portmap_port = 2049, 20048, 111
        os.makedirs(os.path.join(self.workdir, "recovery"), exist_ok=True)
        conf = os.path.join(self.workdir, "ganesha.conf")
        Path(conf).write_text(self.config_text())
        cmd = ["ganesha.nfsd", "-F", "-f", conf, "-L", self.log_path,
               "-p", os.path.join(self.workdir, "ganesha.pid"), "-N", "NIV_EVENT"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=open(os.path.join(self.workdir, "stdout"), "ab"),
                                     stderr=subprocess.STDOUT)
        _running.add(self.proc)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                self.proc = None
                raise ServerError(f"ganesha exited with {self.exit_code}; log:\n{self.log_text()}")
            try:
                for port in (self.nfs_port, self.mount_port):
                    socket.create_connection((self.host, port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise ServerError(f"ganesha not listening after {wait}s; log:\n{self.log_text()}")


def backend() -> str:
    return os.environ.get("DIONFS_TEST_BACKEND", "dionfs")


def make_server(export: str, extra_args: list[str] | None = None, secure: bool = False) -> ServerBase:
    """A dionfs (or Ganesha) server; see DionfsServer for `secure`."""
    if backend() == "ganesha":
        return GaneshaServer(export, extra_args)
    return DionfsServer(export, extra_args, secure=secure)
