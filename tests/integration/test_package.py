"""The Debian package (`cargo deb -p dionfs`, crates/cli/Cargo.toml's
`[package.metadata.deb]`): what it ships, and its life on a Debian 12
machine under systemd: installed, served from through its unit by a real
client (libnfs's nfs-cat), upgraded, removed, purged.

This machine's PID 1 need not be systemd (under CI it is not), and the
package must not be left on it: so the package goes into a throw-away copy
of this very machine, booted by its own systemd. The container's root is an
overlay of this machine's / (its dpkg database, apt, systemd 252, rpcbind,
deb-systemd-helper, as installed) with a tmpfs taking every write, booted
with `systemd-nspawn --boot` into basic.target (so the host's enabled
servers, Ganesha or PostgreSQL, stay down), rpcbind socket-activated on port
111 as on a Debian host. dpkg and apt run there, as root, with systemd as
PID 1, so the maintainer scripts do what they do on a real machine; when the
container exits, the overlay goes and nothing of the package remains, even
if a test failed half-way. The export is a directory of this machine bound
in (ext4: direct I/O and file handles, which an overlay lacks).

Shown, in order:
- the .deb holds /usr/sbin/dionfs stripped (its debug symbols in the
  separate -dbgsym .ddeb), the unit, /etc/dionfs.toml as its one conffile,
  a man page per command and dionfs.toml(5) that `man -l` renders without a
  warning, and the bash, zsh and fish completions where Debian's shells
  look for them;
- installing starts nothing and enables nothing (nothing listens on 2049),
  and makes /var/lib/dionfs, 0700 root;
- started with the installed /etc/dionfs.toml, which exports nothing, the
  unit fails once, saying why, and is not restarted (exit status 2);
- with an export written into /etc/dionfs.toml, `systemctl start dionfs`
  serves a file nfs-cat reads;
- a package with a higher version installed over it restarts the running
  server (a new main pid), which serves again;
- removing it stops the server and keeps /var/lib/dionfs (its file-handle
  key) and the edited /etc/dionfs.toml; purging removes both.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import uuid

import pytest

from nfstools import make_random_file
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UPGRADE_REVISION = "2"  # the second package: VERSION-2 over VERSION-1
URL = "nfs://127.0.0.1/srv/export/{name}?version=3"  # via rpcbind on 111

CONFIG = """\
[server]
metrics_listen = "127.0.0.1:9049"

[[export]]
path = "/srv/export"
clients = ["127.0.0.1"]
options = "rw,sync,no_subtree_check"
"""


def _cargo_deb(*args: str) -> str:
    """`cargo deb -p dionfs ARGS`; the path of the .deb it wrote."""
    r = subprocess.run(["cargo", "deb", "-p", "dionfs", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, f"cargo deb {args}: exit {r.returncode}\n{r.stdout}{r.stderr}"
    debs = [line.strip() for line in r.stdout.splitlines() if line.strip().endswith(".deb")]
    assert len(debs) == 1, r.stdout
    return debs[0]


@pytest.fixture(scope="module")
def debs(tmp_path_factory):
    """The package as `cargo deb` makes it (a release build), and the same
    with a higher revision, for the upgrade."""
    if shutil.which("cargo-deb") is None:
        pytest.fail("cargo-deb missing (scripts/test's setup installs it: "
                    "cargo install cargo-deb --locked)")
    out = tmp_path_factory.mktemp("debs")
    first = _cargo_deb("--output", str(out / "first"))
    second = _cargo_deb("--no-build", "--deb-revision", UPGRADE_REVISION,
                        "--output", str(out / "second"))
    return {"dir": str(out), "first": first, "second": second}


@pytest.fixture(scope="module")
def unpacked(debs, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("unpacked"))
    subprocess.run(["dpkg-deb", "-x", debs["first"], root], check=True)
    return root


def test_the_package_ships_a_stripped_binary_pages_and_completions(debs, unpacked):
    binary = os.path.join(unpacked, "usr/sbin/dionfs")
    assert os.stat(binary).st_mode & 0o777 == 0o755
    sections = subprocess.run(["readelf", "-S", "-W", binary], capture_output=True,
                              text=True, check=True).stdout
    assert ".debug_info" not in sections and ".symtab" not in sections, "not stripped"
    # The symbols apart, found by the binary's build id.
    ddebs = glob.glob(os.path.join(os.path.dirname(debs["first"]), "dionfs-dbgsym_*.ddeb"))
    assert len(ddebs) == 1, os.listdir(os.path.dirname(debs["first"]))
    listing = subprocess.run(["dpkg-deb", "-c", ddebs[0]], capture_output=True, text=True,
                             check=True).stdout
    assert re.search(r"\./usr/lib/debug/\.build-id/../\S+\.debug", listing), listing

    package = subprocess.run(["dpkg-deb", "-f", debs["first"], "Package"], capture_output=True,
                             text=True, check=True).stdout
    assert package.strip() == "dionfs"
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", debs["first"]], capture_output=True,
                             check=True).stdout
    conf = subprocess.run(["tar", "-xOf", "-", "./conffiles"], input=control, capture_output=True,
                          check=True).stdout.decode()
    assert conf.split() == ["/etc/dionfs.toml"]
    assert os.path.isfile(os.path.join(unpacked, "usr/lib/systemd/system/dionfs.service"))

    pages = sorted(glob.glob(os.path.join(unpacked, "usr/share/man/man*/*")))
    names = [os.path.basename(p) for p in pages]
    subcommands = ["clients", "exportfs", "reload", "scrub", "serve", "stats"]
    assert sorted(names) == sorted(["dionfs.toml.5.gz", "dionfs.8.gz"]
                                   + [f"dionfs-{s}.8.gz" for s in subcommands]), names
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8")
    for page in pages:
        r = subprocess.run(["man", "-l", "--warnings", page], capture_output=True, text=True,
                           env=env, timeout=60)
        assert r.returncode == 0 and r.stderr == "", f"{page}: {r.stderr}"
        assert "dionfs" in r.stdout

    for path in ("usr/share/bash-completion/completions/dionfs",
                 "usr/share/zsh/vendor-completions/_dionfs",
                 "usr/share/fish/vendor_completions.d/dionfs.fish"):
        text = open(os.path.join(unpacked, path)).read()
        assert "serve" in text and "exportfs" in text, path


class Machine:
    """This machine's / under an overlay (writes to a tmpfs), booted by
    systemd in a container with a network namespace of its own."""

    def __init__(self, root: str, binds: dict[str, str]):
        self.root = root
        self.name = f"dionfs-deb-{uuid.uuid4().hex[:8]}"
        self.tmpfs = os.path.join(root, "layers")
        self.merged = os.path.join(root, "merged")
        self.proc = None
        self.log = open(os.path.join(root, "boot.log"), "w")
        os.makedirs(self.tmpfs)
        os.makedirs(self.merged)
        # The upper layer on a file system of its own: overlayfs refuses an
        # upper directory inside its lower one (here /).
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", self.tmpfs], check=True)
        os.makedirs(os.path.join(self.tmpfs, "upper"))
        os.makedirs(os.path.join(self.tmpfs, "work"))
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir=/,upperdir={self.tmpfs}/upper,workdir={self.tmpfs}/work",
                        self.merged], check=True)
        # A host built as a container image may carry Docker's
        # /usr/sbin/policy-rc.d ("exit 101"), under which deb-systemd-invoke
        # starts, restarts and stops nothing: the maintainer scripts would
        # seem to do nothing. A Debian machine has none; nor has the box.
        policy = os.path.join(self.merged, "usr/sbin/policy-rc.d")
        if os.path.lexists(policy):
            os.remove(policy)
        argv = ["systemd-nspawn", "--quiet", "--keep-unit", "--register=no",
                f"--directory={self.merged}", "--private-network", f"--machine={self.name}",
                # As in test_systemd_unit.py: what the unit keeps and what
                # opening files by handle needs, which nspawn withholds.
                "--capability=CAP_IPC_LOCK,CAP_SYS_RESOURCE",
                "--system-call-filter=open_by_handle_at"]
        argv += [f"--bind={src}:{dst}" for src, dst in binds.items()]
        # basic.target: sockets (rpcbind's) but none of the host's enabled
        # services; no timers (man-db, dpkg-db-backup) either.
        argv += ["--boot", "--", "systemd.unit=basic.target", "systemd.mask=timers.target"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.leader = wait_until(self._init, 60, lambda: f"the container's systemd: {self.boot_log()}",
                                 interval=0.1)
        wait_until(lambda: self.run("systemctl", "is-system-running", check=False).stdout.strip()
                   in ("running", "degraded"), 120, lambda: f"the container's boot: {self.boot_log()}",
                   interval=0.2)

    def _init(self) -> int | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited {self.proc.returncode}: {self.boot_log()}")
        try:
            kids = open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read().split()
        except OSError:
            return None
        for pid in map(int, kids):
            try:
                if os.readlink(f"/proc/{pid}/exe").endswith("/systemd"):
                    return pid
            except OSError:
                continue
        return None

    def boot_log(self) -> str:
        self.log.flush()
        return re.sub(r"\x1b\[[0-9;]*m", "", open(self.log.name).read())[-4000:]

    def run(self, *argv: str, check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """A command inside the container (all its namespaces)."""
        prefix = ["env", *[f"{k}={v}" for k, v in (env or {}).items()]] if env else []
        r = subprocess.run(["nsenter", f"--target={self.leader}", "--all", *prefix, *argv],
                           capture_output=True, text=True, timeout=timeout)
        if check:
            assert r.returncode == 0, f"{argv}: exit {r.returncode}\n{r.stdout}{r.stderr}"
        return r

    def apt(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("apt-get", "-y", "-q", "--no-install-recommends",
                        "-o", "Dpkg::Options::=--force-confold", *args,
                        env={"DEBIAN_FRONTEND": "noninteractive"})

    def host_tool(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A program of this machine in the container's network only."""
        return subprocess.run(["nsenter", f"--target={self.leader}", "--net", *argv],
                              capture_output=True, timeout=timeout)

    def prop(self, name: str) -> str:
        return self.run("systemctl", "show", "--value", "-p", name, "dionfs").stdout.strip()

    def journal(self) -> str:
        return self.run("journalctl", "--no-pager", "-o", "cat", "-u", "dionfs",
                        check=False).stdout

    def listening(self, port: int) -> bool:
        out = self.run("ss", "-Htln", f"sport = :{port}").stdout
        return out.strip() != ""

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run(["nsenter", f"--target={self.leader}", "--all", "systemctl", "exit", "0"],
                           capture_output=True, timeout=30)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        for mnt in (self.merged, self.tmpfs):
            if os.path.ismount(mnt):
                subprocess.run(["umount", mnt], check=True)


@pytest.fixture(scope="module")
def box(debs, tmp_path_factory):
    for tool in ("systemd-nspawn", "nsenter", "nfs-cat"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} missing (scripts/test installs systemd-container, libnfs-utils)")
    root = str(tmp_path_factory.mktemp("machine"))
    export = os.path.join(root, "export")
    os.makedirs(export)
    os.chmod(export, 0o777)
    machine = None
    try:
        machine = Machine(root, binds={debs["dir"]: "/debs", export: "/srv/export"})
        machine.export = export
        machine.debs = {k: "/debs/" + os.path.relpath(v, debs["dir"])
                        for k, v in debs.items() if k != "dir"}
        yield machine
    finally:
        if machine is not None:
            print(machine.journal())
            machine.close()


def test_installing_starts_nothing(box):
    assert box.run("dpkg-query", "-W", "-f=${Status}", "dionfs", check=False).stdout \
        != "install ok installed"
    box.apt("install", box.debs["first"])
    assert box.run("dpkg-query", "-W", "-f=${Status} ${Version}", "dionfs").stdout.startswith(
        "install ok installed")
    assert box.prop("ActiveState") == "inactive"
    assert box.run("systemctl", "is-enabled", "dionfs", check=False).stdout.strip() == "disabled"
    assert not box.listening(2049)
    st = box.run("stat", "-c", "%a %U %G", "/var/lib/dionfs").stdout.split()
    assert st == ["700", "root", "root"], st
    assert box.run("stat", "-c", "%a", "/usr/sbin/dionfs").stdout.strip() == "755"
    # /usr/lib/systemd/system, which Debian 12's merged /usr also shows as
    # /lib/systemd/system.
    assert box.prop("FragmentPath").endswith("/lib/systemd/system/dionfs.service")
    assert "dionfs" in box.run("man", "-w", "dionfs.toml").stdout


def test_the_installed_config_fails_once_saying_why(box):
    r = box.run("systemctl", "start", "dionfs", check=False)
    assert r.returncode != 0
    # Not "activating (auto-restart)": RestartPreventExitStatus=2.
    assert (box.prop("ActiveState"), box.prop("Result")) == ("failed", "exit-code")
    assert box.prop("ExecMainStatus") == "2"
    assert box.prop("NRestarts") == "0"
    assert "no [[export]] sections: nothing to serve" in box.journal()
    box.run("systemctl", "reset-failed", "dionfs")


def _served(box, name: str, want: bytes) -> bool:
    r = box.host_tool("nfs-cat", URL.format(name=name))
    return r.returncode == 0 and r.stdout == want


def test_the_unit_serves_an_edited_config(box, tmp_path):
    box.run("sh", "-c", f"cat > /etc/dionfs.toml <<'EOF'\n{CONFIG}EOF")
    src = os.path.join(box.export, "data")
    make_random_file(src, 1024 * 1024 + 17, seed=45)
    box.want = open(src, "rb").read()
    box.run("systemctl", "start", "dionfs")  # Type=notify: returns once serving
    assert box.prop("ActiveState") == "active", box.journal()
    assert _served(box, "data", box.want), box.journal()
    key = box.run("ls", "-A", "/var/lib/dionfs").stdout.split()
    assert key, "the state directory holds nothing"
    box.state = key


def test_an_upgrade_restarts_the_running_server(box):
    before = box.prop("MainPID")
    assert before not in ("", "0")
    box.apt("install", box.debs["second"])
    version = box.run("dpkg-query", "-W", "-f=${Version}", "dionfs").stdout
    assert version.endswith(f"-{UPGRADE_REVISION}"), version
    assert box.prop("ActiveState") == "active", box.journal()
    assert box.prop("MainPID") not in ("0", before), box.journal()
    # The edited conffile was kept.
    assert box.run("cat", "/etc/dionfs.toml").stdout == CONFIG
    assert _served(box, "data", box.want), box.journal()


def test_removing_keeps_the_state_and_purging_removes_it(box):
    box.apt("remove", "dionfs")
    assert box.prop("ActiveState") in ("inactive", "failed", "")
    assert not box.listening(2049)
    assert box.run("test", "-e", "/usr/sbin/dionfs", check=False).returncode != 0
    assert box.run("ls", "-A", "/var/lib/dionfs").stdout.split() == box.state
    assert box.run("cat", "/etc/dionfs.toml").stdout == CONFIG
    assert box.run("dpkg-query", "-W", "-f=${Status}", "dionfs").stdout \
        == "deinstall ok config-files"

    box.apt("purge", "dionfs")
    for path in ("/var/lib/dionfs", "/etc/dionfs.toml", "/usr/lib/systemd/system/dionfs.service"):
        assert box.run("test", "-e", path, check=False).returncode != 0, path
    r = box.run("dpkg-query", "-W", "-f=${Status}", "dionfs", check=False)
    assert r.returncode != 0 or "not-installed" in r.stdout, r.stdout
