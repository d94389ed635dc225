"""dist/dionfs.service under a real systemd (issue 10's "Operations"): the
unit exactly as shipped, its binary at /usr/local/bin/dionfs and its
exports in /etc/dionfs.toml as the README installs them, started by
systemd 252 as PID 1 of a container (`systemd-nspawn --volatile=yes`: the
host's /usr, an empty /etc and /var, a network namespace of its own with
only loopback). As on a Debian host running nfs-kernel-server, rpcbind is
socket-activated on port 111.

Each test drives the container from here, in order: `systemctl` and
`journalctl` run inside it (nsenter), libnfs's tools in its network
namespace only. Shown:

- the unit becomes active only once dionfs said READY=1 (Type=notify), with
  its status line; it registered NFS, MOUNT, NLM and NSM with rpcbind
  (`rpcinfo -p`, `showmount -e`); its hardening leaves what calls need:
  an unprivileged caller's WRITE and READ back (io_uring, credentials
  switched per call), a squashed root's file created, the state directory
  made by systemd (`StateDirectory=`, mode 0700);
- `systemctl reload` re-reads /etc/dionfs.toml and serves a new export, the
  same process and connections going on (RELOADING=1, READY=1), and fails,
  changing nothing, while the file does not load;
- `dionfs stats` counts the calls;
- the server killed (SIGKILL) is started again by systemd
  (`Restart=on-failure`), and serves; rpc-statd started (as mount.nfs
  starts it) finds NSM taken and leaves it running; NSM unset at rpcbind
  (as a stopping rpc.statd unsets it), dionfs registers it again;
- `systemctl stop`: dionfs leaves rpcbind's list (UNSET at exit) and the
  journal holds plain lines (no colour codes, no second timestamp), each
  with its priority (`journalctl -p warning` shows the warnings only).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid

import pytest
from loopfs import LoopFs
from nfstools import make_random_file, sha256_file

from servers import dionfs_bin
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
URL = "nfs://127.0.0.1{path}?version=3"  # found through rpcbind on port 111

CONFIG = """\
[server]
metrics_listen = "127.0.0.1:9049"

[[export]]
path = "/srv/export"
clients = ["127.0.0.1"]
options = "rw,sync,no_subtree_check"
"""

SECOND_EXPORT = """
[[export]]
path = "/srv/second"
clients = ["127.0.0.1"]
options = "ro"
"""


class Container:
    """A systemd-nspawn container booted with the host's /usr, our units
    in /etc/systemd/system, and the given binds."""

    def __init__(self, root: str, binds: dict[str, str], ro_binds: dict[str, str]):
        self.name = f"dionfs-{uuid.uuid4().hex[:8]}"
        self.log = open(os.path.join(root, "boot.log"), "w")
        argv = ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no", "--directory=/",
                "--volatile=yes", "--private-network", f"--machine={self.name}",
                # What a host's PID 1 has and nspawn withholds by default: the
                # capabilities the unit keeps, and the system call that opens
                # files by handle (refused in containers: it reaches past a
                # container's root).
                "--capability=CAP_IPC_LOCK,CAP_SYS_RESOURCE", "--system-call-filter=open_by_handle_at",
                "--boot"]
        for src, dst in ro_binds.items():
            argv.insert(-1, f"--bind-ro={src}:{dst}")
        for src, dst in binds.items():
            argv.insert(-1, f"--bind={src}:{dst}")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.leader = self._find_init()
        except BaseException:
            # The binds (the test's filesystem) go with the container.
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.log.close()
            raise

    def _find_init(self) -> int:
        """The container's PID 1 (systemd), a descendant of nspawn."""
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {self.proc.returncode}: {self.boot_log()}")
            for pid in self._descendants(self.proc.pid):
                try:
                    exe = os.readlink(f"/proc/{pid}/exe")
                except OSError:
                    continue
                if exe.endswith("/systemd") and self._has_own_pid_ns(pid):
                    return pid
            time.sleep(0.1)
        raise RuntimeError(f"no systemd in the container: {self.boot_log()}")

    @staticmethod
    def _descendants(pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            try:
                kids = open(f"/proc/{p}/task/{p}/children").read().split()
            except OSError:
                continue
            out += [int(k) for k in kids]
            todo += [int(k) for k in kids]
        return out

    @staticmethod
    def _has_own_pid_ns(pid: int) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        except OSError:
            return False

    def boot_log(self) -> str:
        self.log.flush()
        return re.sub(r"\x1b\[[0-9;]*m", "", open(self.log.name).read())[-4000:]

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """A command inside the container (all its namespaces)."""
        r = subprocess.run(["nsenter", f"--target={self.leader}", "--all", *argv],
                           capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{argv}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        return r

    def host_tool(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A host program in the container's network namespace only."""
        return subprocess.run(["nsenter", f"--target={self.leader}", "--net", *argv],
                              capture_output=True, timeout=timeout)

    def wait_until(self, cond, timeout: float, what: str) -> None:
        """`wait.wait_until`, with the container's journal on a timeout."""
        wait_until(cond, timeout, lambda: f"{what}\n{self.journal()}", interval=0.2)

    def prop(self, unit: str, name: str) -> str:
        return self.run("systemctl", "show", "--value", "-p", name, unit).stdout.strip()

    def journal(self, unit: str = "dionfs") -> str:
        return self.run("journalctl", "--no-pager", "-o", "cat", "-u", unit, check=False).stdout

    def close(self) -> None:
        if self.proc.poll() is None:
            subprocess.run(["nsenter", f"--target={self.leader}", "--all", "systemctl", "exit", "0"],
                           capture_output=True, timeout=30)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    for tool in ("systemd-nspawn", "nsenter", "rpcbind"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} missing (scripts/test installs systemd-container, rpcbind)")
    root = str(tmp_path_factory.mktemp("systemd"))
    units = os.path.join(root, "units")
    os.makedirs(os.path.join(units, "multi-user.target.wants"))
    os.makedirs(os.path.join(units, "sockets.target.wants"))
    shutil.copy(os.path.join(REPO, "dist", "dionfs.service"), units)
    os.symlink("/etc/systemd/system/dionfs.service",
               os.path.join(units, "multi-user.target.wants", "dionfs.service"))
    os.symlink("/lib/systemd/system/rpcbind.socket",
               os.path.join(units, "sockets.target.wants", "rpcbind.socket"))
    os.symlink("/dev/null", os.path.join(units, "systemd-firstboot.service"))  # asks questions
    # rpcbind drops to _rpc, which Debian's package makes at install.
    sysusers = os.path.join(root, "sysusers.d")
    os.makedirs(sysusers)
    with open(os.path.join(sysusers, "rpc.conf"), "w") as f:
        f.write('u _rpc - "rpcbind" /run/rpcbind\n')
    # /usr is the host's, read-only: /usr/local/bin is bound from here.
    bindir = os.path.join(root, "bin")
    os.makedirs(bindir)
    shutil.copy(dionfs_bin(), os.path.join(bindir, "dionfs"))
    config = os.path.join(root, "dionfs.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    fs = LoopFs("xfs", "1G")
    box = None
    try:
        export = fs.path("export")
        os.makedirs(export)
        os.makedirs(fs.path("second"))
        os.chmod(export, 0o777)
        with open(os.path.join(export, "hello"), "w") as f:
            f.write("hello from systemd\n")
        with open(fs.path("second", "inside"), "w") as f:
            f.write("second export\n")
        box = Container(root, binds={fs.mountpoint: "/srv"},
                        ro_binds={units: "/etc/systemd/system", sysusers: "/etc/sysusers.d",
                                  config: "/etc/dionfs.toml", bindir: "/usr/local/bin",
                                  # libtirpc's (rpcbind, rpcinfo): the host's
                                  **{f: f for f in ("/etc/netconfig", "/etc/rpc", "/etc/services")
                                     if os.path.exists(f)}})
        box.config, box.export = config, export
        box.wait_until(lambda: box.run("systemctl", "is-system-running", check=False).stdout.strip()
                       in ("running", "degraded")
                       and box.prop("dionfs", "ActiveState") != "activating", 120, "the container's boot")
        yield box
    finally:
        if box is not None:
            print(box.journal())
            box.close()
        fs.destroy()


def test_the_unit_starts_serving_registered_with_rpcbind_and_hardened(box, tmp_path):
    assert box.prop("dionfs", "ActiveState") == "active", box.journal()
    assert box.prop("dionfs", "StatusText") == "serving 1 export(s) on 0.0.0.0, NFS port 2049"
    failed = box.run("systemctl", "--failed", "--no-legend", "--plain").stdout
    assert failed.strip() == "", failed

    rpcinfo = box.run("rpcinfo", "-p", "127.0.0.1").stdout
    for line in ("100000    4   tcp    111  portmapper", "100003    3   tcp   2049  nfs",
                 "100005    3   tcp  20048  mountd"):
        assert line in rpcinfo, rpcinfo
    assert re.search(r"100021    4   tcp  +\d+  nlockmgr", rpcinfo), rpcinfo
    assert re.search(r"100024    1   udp  +\d+  status", rpcinfo), rpcinfo
    assert re.search(r"100024    1   tcp  +\d+  status", rpcinfo), rpcinfo
    assert "/srv/export 127.0.0.1" in box.run("showmount", "-e", "127.0.0.1").stdout
    assert box.prop("rpcbind", "ActiveState") == "active"  # activated by the registrations

    ls = box.host_tool("nfs-ls", URL.format(path="/srv/export/"))
    assert ls.returncode == 0 and b"hello" in ls.stdout, ls
    assert box.host_tool("nfs-cat", URL.format(path="/srv/export/hello")).stdout == b"hello from systemd\n"

    # An ordinary user's WRITE (direct I/O, io_uring, its own credentials)
    # and READ back, through the hardened unit.
    src = str(tmp_path / "src")
    digest = make_random_file(src, 3 * 1024 * 1024 + 4321, seed=10)
    cp = box.host_tool("nfs-cp", src, URL.format(path="/srv/export/user.dat") + "&uid=1000&gid=1000")
    assert cp.returncode == 0, cp
    st = os.stat(os.path.join(box.export, "user.dat"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    assert sha256_file(os.path.join(box.export, "user.dat")) == digest
    back = str(tmp_path / "back")
    cp = box.host_tool("nfs-cp", URL.format(path="/srv/export/user.dat") + "&uid=1000&gid=1000", back)
    assert cp.returncode == 0 and sha256_file(back) == digest, cp
    # Root is squashed (exports(5)'s default).
    cp = box.host_tool("nfs-cp", src, URL.format(path="/srv/export/root.dat"))
    assert cp.returncode == 0, cp
    assert os.stat(os.path.join(box.export, "root.dat")).st_uid == 65534

    mode = box.run("stat", "-c", "%a", "/var/lib/dionfs").stdout.strip()
    assert mode == "700", mode
    assert box.run("test", "-s", "/var/lib/dionfs/nlm/state", check=False).returncode == 0
    journal = box.journal()
    assert not re.search(r"\b(ERROR|WARN)\b", journal), journal
    # Warnings are the journal's warnings (priority 4): a MNT of a path
    # not exported is one.
    assert box.host_tool("nfs-ls", URL.format(path="/srv/nothing/")).returncode != 0
    warnings = box.run("journalctl", "--no-pager", "-o", "cat", "-u", "dionfs", "-p", "warning").stdout
    assert "MNT refused: not exported" in warnings and "INFO" not in warnings, warnings


def test_reload_serves_a_new_export_in_the_same_process(box):
    pid = box.prop("dionfs", "MainPID")
    assert box.host_tool("nfs-ls", URL.format(path="/srv/second/")).returncode != 0
    good = open(box.config).read()
    with open(box.config, "a") as f:  # in place: the container sees the bound file
        f.write("bogus line\n")
    r = box.run("systemctl", "reload", "dionfs", check=False)
    assert r.returncode != 0, "systemctl reload succeeded with a file that does not load"
    assert box.prop("dionfs", "ActiveState") == "active"
    assert "did not reload" in box.journal()
    with open(box.config, "w") as f:
        f.write(good + SECOND_EXPORT)
    box.run("systemctl", "reload", "dionfs")
    assert box.prop("dionfs", "ActiveState") == "active"
    assert box.prop("dionfs", "MainPID") == pid
    assert box.prop("dionfs", "StatusText").startswith("serving 2 export(s)"), box.journal()
    out = box.host_tool("nfs-cat", URL.format(path="/srv/second/inside"))
    assert out.stdout == b"second export\n", out
    assert "/srv/second 127.0.0.1" in box.run("showmount", "-e", "127.0.0.1").stdout


def test_stats_count_the_calls(box):
    out = box.run("dionfs", "stats").stdout
    # nfs-cat and nfs-cp made READs, WRITEs, LOOKUPs.
    for proc in ("READ", "WRITE", "LOOKUP"):
        m = re.search(rf"^\s*{proc}\s+(\d+)", out, re.M)
        assert m and int(m.group(1)) > 0, out


def test_a_killed_server_is_started_again(box):
    pid = int(box.prop("dionfs", "MainPID"))
    box.run("kill", "-KILL", str(pid))
    box.wait_until(lambda: box.prop("dionfs", "ActiveState") == "active"
                   and box.prop("dionfs", "MainPID") not in ("0", str(pid)), 30, "systemd's restart")
    assert int(box.prop("dionfs", "NRestarts")) == 1
    assert box.host_tool("nfs-cat", URL.format(path="/srv/export/hello")).stdout == b"hello from systemd\n"


def test_rpc_statd_started_leaves_the_server_serving_nsm(box):
    """mount.nfs starts rpc-statd for a locking mount of another server;
    while the unit conflicted with rpc-statd, that stopped dionfs. Now
    rpc.statd finds NSM registered (dionfs's) and does not start. And what
    rpcbind loses (here NSM unset, as a stopping rpc.statd unsets it whoever
    set it, or rpcbind restarted without its warm-start file) dionfs sets
    again within 10 s, so rebooted clients' SM_NOTIFY finds it."""
    def nsm_ports() -> set[str]:
        out = box.run("rpcinfo", "-p", "127.0.0.1").stdout
        return set(re.findall(r"100024    1   (?:tcp|udp) +(\d+)  status", out))

    ours = nsm_ports()
    assert len(ours) == 2, ours  # TCP and UDP
    pid = box.prop("dionfs", "MainPID")
    assert box.run("systemctl", "start", "rpc-statd", check=False).returncode != 0
    assert "Statd service already running" in box.journal("rpc-statd")
    assert box.prop("dionfs", "ActiveState") == "active"
    assert box.prop("dionfs", "MainPID") == pid
    assert nsm_ports() == ours
    box.run("rpcinfo", "-d", "100024", "1")
    assert nsm_ports() == set()
    box.wait_until(lambda: nsm_ports() == ours, 25, "dionfs's NSM registrations back")
    assert "had lost some of dionfs's registrations" in box.journal()


def test_stop_leaves_rpcbind_and_the_journal_plain(box):
    box.run("systemctl", "stop", "dionfs")
    assert box.prop("dionfs", "ActiveState") == "inactive"
    assert box.prop("dionfs", "Result") == "success"
    rpcinfo = box.run("rpcinfo", "-p", "127.0.0.1").stdout
    for prog in ("100003", "100005", "100021", "100024"):
        assert prog not in rpcinfo, rpcinfo
    journal = box.journal()
    assert "\x1b[" not in journal, "colour codes in the journal"
    serving = [line for line in journal.splitlines() if "dionfs serving NFS over TCP" in line]
    assert len(serving) == 2, journal  # the first start and systemd's restart
    assert all(line.lstrip().startswith("INFO") for line in serving), serving
