"""Calls run with the caller's privileges, not the server's (issue 7, item 3).

dionfs runs as root; a WRITE or a SETATTR size from a non-root caller must
behave as that user's own write or truncate on the server would: the kernel
clears set-user-ID (and group-executable set-group-ID) bits when a writer
lacks CAP_FSETID, refuses blocks reserved for root to a caller without
CAP_SYS_RESOURCE, and enforces disk quotas unless the writer has
CAP_SYS_RESOURCE. The set-id checks compare with the same operation done
locally by a process with the caller's (squashed) ids.

- test_write_clears_setid / test_truncate_clears_setid: root-owned 4777,
  root:1000 2775 and uid-1000-owned 4755 files written (an aligned overwrite
  and a misaligned extending write) or truncated (shrink and extend) by uid
  1000, and a root-owned 6777 file by a root-squashed root; XFS and ext4, in
  every write mode. The bits must go exactly as locally.
- test_all_squash_clears_setid: all_squash callers (uid 1000 and root) too.
- test_no_root_squash_root_keeps_setid: an unsquashed root caller keeps them
  (root has CAP_FSETID locally too).
- TestReservedBlocks: on ext4 with 10 % reserved blocks filled up to the
  reserve by uid 1000, WRITE and MKDIR by uid 1000 or a squashed root get
  NFS3ERR_NOSPC; an unsquashed root may still use the reserve.
- TestQuota: on ext4 with user quota, a WRITE by uid 1000 past its block hard
  limit gets NFS3ERR_DQUOT; an unsquashed root writing the same file does
  not (if the server has CAP_SYS_RESOURCE at all). Skipped where the kernel
  cannot enable ext4 quota (CONFIG_QFMT_V2).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from loopfs import FILL_SCRIPT, LoopFs
from nfstools import NfsProc

pytestmark = pytest.mark.dionfs_only  # write modes are dionfs flags

MODES = ("buffered", "dontcache", "direct")
ANON = (65534, 65534)  # root_squash maps root to the default anonuid/anongid
ALL_SQUASH_ANON = (4242, 4243)  # what conftest's all_squash_server uses
# The interpreter running pytest may live where other users cannot execute
# it (pyenv under /root); local operations as other users use the system one.
LOCAL_PYTHON = "/usr/bin/python3"

# A setid case: the file's owner, group and mode, the caller's AUTH_SYS ids,
# and the ids the server maps them to (what the local reference runs as).
SETID_CASES = {
    "root-4777": dict(owner=(0, 0), mode=0o4777, caller=(1000, 1000), local=(1000, 1000)),
    "group-2775": dict(owner=(0, 1000), mode=0o2775, caller=(1000, 1000), local=(1000, 1000)),
    "own-4755": dict(owner=(1000, 1000), mode=0o4755, caller=(1000, 1000), local=(1000, 1000)),
    "squashed-root-6777": dict(owner=(0, 0), mode=0o6777, caller=(0, 0), local=ANON),
}
SIZE = 10000
# (offset, length) of each WRITE: an aligned overwrite and a misaligned one
# past EOF. In direct mode the first is one O_DIRECT write, the second a
# read-modify-write of the edge block and then the exact-size fix-up.
# (offset, count, stable_how). The UNSTABLE writes over cached pages
# (make_file just wrote them), extending or not, are made on the
# connection's own task, not a blocking thread (DataPlane::write_on_task):
# they must switch credentials all the same.
WRITES = {"aligned": (0, 4096, "file_sync"), "extending": (9950, 100, "file_sync"),
          "unstable-overwrite": (100, 1000, "unstable"),
          "unstable-extending": (9950, 100, "unstable")}
TRUNCATES = {"shrink": 5000, "extend": 20000}


def modes_matrix(fstypes=("xfs", "ext4")) -> list:
    return [pytest.param(fs, marks=pytest.mark.server_args("--write-mode", m, "--read-mode", m),
                         id=f"{fs}-{m}")
            for fs in fstypes for m in MODES]


def run_local(ids: tuple[int, int], code: str, *args: str) -> None:
    """Run Python `code` locally as uid/gid `ids` with no supplementary
    groups (and, for a non-root uid, no capabilities)."""
    uid, gid = ids
    r = subprocess.run([LOCAL_PYTHON, "-c", code, *args], user=uid, group=gid, extra_groups=[],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"local operation as {uid}:{gid} failed: {r.stderr}"


LOCAL_WRITE = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
os.pwrite(fd, b"w" * int(sys.argv[3]), int(sys.argv[2]))
os.close(fd)
"""
LOCAL_TRUNCATE = "import os, sys; os.truncate(sys.argv[1], int(sys.argv[2]))"


def make_file(path: str, owner: tuple[int, int], mode: int) -> None:
    with open(path, "wb") as f:
        f.write(b"x" * SIZE)
    os.chown(path, *owner)
    os.chmod(path, mode)  # after chown, which would clear the set-id bits


def mode_of(path: str) -> str:
    return oct(stat.S_IMODE(os.stat(path).st_mode))


def expected_mode(case: dict) -> str:
    """The mode local semantics give (see should_remove_suid): a writer
    without CAP_FSETID loses set-user-ID, and set-group-ID on a
    group-executable file; root keeps both."""
    mode = case["mode"]
    if case["local"][0] != 0:
        mode &= ~stat.S_ISUID
        if mode & stat.S_IXGRP:
            mode &= ~stat.S_ISGID
    return oct(mode)


class SetidRun:
    """Files for each (case, operation) in the export, each one beside a twin
    the same operation is applied to locally as the mapped caller."""

    def __init__(self, server, cases: dict):
        self.server = server
        self.cases = cases
        self.local_dir = os.path.join(server.export, "local")
        os.mkdir(self.local_dir)
        self.got: dict[str, str] = {}
        self.local: dict[str, str] = {}
        self.want: dict[str, str] = {}

    def check(self, op: str, nfs_op, local_code: str, args: dict) -> None:
        for case_name, case in self.cases.items():
            for kind, arg in args.items():
                name = f"{case_name}-{op}-{kind}"
                path = os.path.join(self.server.export, name)
                twin = os.path.join(self.local_dir, name)
                make_file(path, case["owner"], case["mode"])
                make_file(twin, case["owner"], case["mode"])
                nfs_op(name, case["caller"], arg)
                run_local(case["local"], local_code, twin, *(str(a) for a in arg))
                self.got[name] = mode_of(path)
                self.local[name] = mode_of(twin)
                self.want[name] = expected_mode(case)

    def assert_as_local(self) -> None:
        # The local reference must show the semantics we claim, or the
        # comparison proves nothing.
        assert self.local == self.want, f"local semantics differ from expected: {self.local}"
        assert self.got == self.local, (
            "modes after the NFS calls differ from the same calls made locally:\n"
            + "\n".join(f"  {n}: nfs {self.got[n]}, local {self.local[n]}"
                        for n in self.got if self.got[n] != self.local[n]))


def nfs_write(np: NfsProc):
    def op(name: str, caller: tuple[int, int], arg: tuple[int, int]) -> None:
        off, n, how = arg
        r = np("write", name, off, n, how, uid=caller[0], gid=caller[1])
        assert r["write_status"] == "NFS3_OK" and r.int("count") == n, r
    return op


def nfs_truncate(np: NfsProc):
    def op(name: str, caller: tuple[int, int], size: tuple[int]) -> None:
        r = np("truncate", name, size[0], uid=caller[0], gid=caller[1])
        assert r["status"] == "NFS3_OK", r
    return op


@pytest.mark.parametrize("loopfs", modes_matrix(), indirect=True)
def test_write_clears_setid(server, nfsproc, loopfs):
    run = SetidRun(server, SETID_CASES)
    run.check("write", nfs_write(nfsproc), LOCAL_WRITE, WRITES)
    run.assert_as_local()


@pytest.mark.parametrize("loopfs", modes_matrix(), indirect=True)
def test_truncate_clears_setid(server, nfsproc, loopfs):
    run = SetidRun(server, SETID_CASES)
    run.check("truncate", nfs_truncate(nfsproc), LOCAL_TRUNCATE,
              {k: (v,) for k, v in TRUNCATES.items()})
    run.assert_as_local()


def test_all_squash_clears_setid(all_squash_server, nfsproc_bin):
    np = NfsProc(nfsproc_bin, all_squash_server)
    cases = {
        "user-4777": dict(owner=(0, 0), mode=0o4777, caller=(1000, 1000), local=ALL_SQUASH_ANON),
        "root-6777": dict(owner=(0, 0), mode=0o6777, caller=(0, 0), local=ALL_SQUASH_ANON),
    }
    run = SetidRun(all_squash_server, cases)
    run.check("write", nfs_write(np), LOCAL_WRITE, WRITES)
    run.check("truncate", nfs_truncate(np), LOCAL_TRUNCATE, {k: (v,) for k, v in TRUNCATES.items()})
    run.assert_as_local()


@pytest.mark.parametrize("loopfs", modes_matrix(("xfs",)), indirect=True)
def test_no_root_squash_root_keeps_setid(no_root_squash_server, nfsproc_bin, loopfs):
    np = NfsProc(nfsproc_bin, no_root_squash_server)
    cases = {
        "root-6777": dict(owner=(0, 0), mode=0o6777, caller=(0, 0), local=(0, 0)),
        "user-6755": dict(owner=(1000, 1000), mode=0o6755, caller=(0, 0), local=(0, 0)),
    }
    run = SetidRun(no_root_squash_server, cases)
    run.check("write", nfs_write(np), LOCAL_WRITE, WRITES)
    run.check("truncate", nfs_truncate(np), LOCAL_TRUNCATE, {k: (v,) for k, v in TRUNCATES.items()})
    run.assert_as_local()


# ---------------------------------------------------------------- reserved blocks, quota

def fill_to_reserve(fs: LoopFs) -> None:
    """Fill `fs` as uid 1000, outside the export, until only root's reserved
    blocks are free."""
    fill = fs.path("fill")
    with open(fill, "wb"):
        pass
    os.chown(fill, 1000, 1000)
    run_local((1000, 1000), FILL_SCRIPT, fill)
    st = os.statvfs(fs.mountpoint)
    assert st.f_bavail == 0 and st.f_bfree > 256, (
        f"fill left {st.f_bavail} blocks for users and {st.f_bfree} in all")


def nfs_create_and_write(np: NfsProc, name: str, ids: tuple[int, int], n: int = 65536) -> str:
    """CREATE `name`, then one FILE_SYNC WRITE of `n` bytes; the WRITE status."""
    r = np("create", "unchecked", ".", name, uid=ids[0], gid=ids[1])
    assert r["status"] == "NFS3_OK", r
    return np("write", name, 0, n, "file_sync", uid=ids[0], gid=ids[1])["write_status"]


class TestReservedBlocks:
    """ext4 keeps 10 % of its blocks for root (mkfs.ext4 -m, s_resuid 0);
    the kernel lets a task use them only with fsuid 0 or CAP_SYS_RESOURCE."""

    @pytest.fixture
    def loopfs(self):
        fs = LoopFs("ext4", size="64M", mkfs_args=["-m", "10"])
        yield fs
        fs.destroy()

    def test_squashed_callers_get_nospc(self, server, nfsproc, loopfs):
        fill_to_reserve(loopfs)
        assert nfs_create_and_write(nfsproc, "user", (1000, 1000)) == "NFS3ERR_NOSPC"
        assert nfs_create_and_write(nfsproc, "root", (0, 0)) == "NFS3ERR_NOSPC"
        for name, (uid, gid) in (("userdir", (1000, 1000)), ("rootdir", (0, 0))):
            r = nfsproc("mkdir", ".", name, uid=uid, gid=gid)
            assert r["status"] == "NFS3ERR_NOSPC", r

    @pytest.mark.parametrize("mode", [
        pytest.param(m, marks=pytest.mark.server_args("--write-mode", m)) for m in MODES])
    def test_only_unsquashed_root_uses_reserve(self, no_root_squash_server, nfsproc_bin,
                                               loopfs, mode):
        np = NfsProc(nfsproc_bin, no_root_squash_server)
        fill_to_reserve(loopfs)
        assert nfs_create_and_write(np, "user", (1000, 1000)) == "NFS3ERR_NOSPC"
        assert np("mkdir", ".", "userdir")["status"] == "NFS3ERR_NOSPC"
        # Root still may: the reserve is there, and dionfs lets root use it.
        assert nfs_create_and_write(np, "root", (0, 0)) == "NFS3_OK"
        assert os.path.getsize(os.path.join(no_root_squash_server.export, "root")) == 65536
        assert np("mkdir", ".", "rootdir", uid=0, gid=0)["status"] == "NFS3_OK"


CAP_SYS_RESOURCE = 24


def has_capability(pid: int, cap: int) -> bool:
    """Whether process `pid` has capability number `cap` in its effective set."""
    with open(f"/proc/{pid}/status") as f:
        eff = next(line for line in f if line.startswith("CapEff:"))
    return bool(int(eff.split()[1], 16) >> cap & 1)


def quota_fs() -> LoopFs:
    """ext4 with the quota feature, mounted with user quota enforcement; skip
    the test where this kernel cannot do that."""
    try:
        return LoopFs("ext4", size="256M", mkfs_args=["-O", "quota"], mount_options="usrquota")
    except subprocess.CalledProcessError as e:
        if e.cmd[0] != "mount":
            raise
        pytest.skip("this kernel cannot mount ext4 with quota (needs CONFIG_QUOTA and "
                    f"CONFIG_QFMT_V2): {e.stderr.strip()}")


class TestQuota:
    """A block hard limit of 1 MiB for uid 1000 (setquota); the kernel ignores
    hard limits only for a writer with CAP_SYS_RESOURCE."""

    LIMIT_KIB = 1024

    @pytest.fixture
    def loopfs(self):
        fs = quota_fs()
        yield fs
        fs.destroy()

    @pytest.mark.parametrize("mode", [
        pytest.param(m, marks=pytest.mark.server_args("--write-mode", m)) for m in MODES])
    def test_write_past_hard_limit_is_dquot(self, no_root_squash_server, nfsproc_bin,
                                            loopfs, mode):
        assert shutil.which("setquota"), "setquota missing (Debian package quota)"
        subprocess.run(["setquota", "-u", "1000", "0", str(self.LIMIT_KIB), "0", "0",
                        loopfs.mountpoint], check=True, capture_output=True)
        np = NfsProc(nfsproc_bin, no_root_squash_server)
        chunk = 256 * 1024
        r = np("create", "unchecked", ".", "f")
        assert r["status"] == "NFS3_OK", r
        statuses = [np("write", "f", k * chunk, chunk, "file_sync")["write_status"]
                    for k in range(2 * self.LIMIT_KIB * 1024 // chunk)]
        assert "NFS3ERR_DQUOT" in statuses, statuses
        assert statuses[0] == "NFS3_OK", statuses
        # Root writing the same file (charged to uid 1000) passes the limit
        # locally by CAP_SYS_RESOURCE, which the server keeps for root if it
        # has it at all (a service manager may have taken it away).
        root_exempt = has_capability(no_root_squash_server.proc.pid, CAP_SYS_RESOURCE)
        end = 2 * self.LIMIT_KIB * 1024
        r = np("write", "f", end, chunk, "file_sync", uid=0, gid=0)
        assert r["write_status"] == ("NFS3_OK" if root_exempt else "NFS3ERR_DQUOT"), r


def test_ids_of_minus_one_are_the_anonymous_user(server, nfsproc):
    """AUTH_SYS uid, gid or a supplementary gid 0xFFFFFFFF, which is no
    user or group on Linux: `setfsuid(-1)` changes nothing and `setgroups`
    refuses it, so every call with one failed (NFS3ERR_SERVERFAULT, an
    error line each). knfsd takes the anonymous user and group for them;
    so does dionfs, and a supplementary group of -1 is left out."""
    import rawrpc
    from rawrpc import opaque, u32

    fh = bytes.fromhex(nfsproc("lookup", ".")["fh"])

    def create(c, xid: int, name: bytes, uid: int, gid: int, gids: list[int]) -> int:
        args = opaque(fh) + opaque(name) + u32(0) + u32(0) * 6  # UNCHECKED, no attributes
        c.send(rawrpc.call(xid, rawrpc.NFS_PROGRAM, 3, 8, args, cred=rawrpc.auth_sys(uid, gid, gids)))
        accept, res = c.reply(xid)
        assert accept == rawrpc.SUCCESS
        return rawrpc.nfs_status(res)

    with rawrpc.Conn(server.host, server.nfs_port) as c:
        assert create(c, 1, b"by-uid", 0xFFFFFFFF, 1000, []) == 0
        assert create(c, 2, b"by-gid", 1000, 0xFFFFFFFF, []) == 0
        assert create(c, 3, b"by-gids", 1000, 1000, [0xFFFFFFFF, 1000]) == 0
    owner = lambda name: (lambda st: (st.st_uid, st.st_gid))(os.stat(os.path.join(server.export, name)))
    assert owner("by-uid") == (65534, 1000)
    assert owner("by-gid") == (1000, 65534)
    assert owner("by-gids") == (1000, 1000)
    assert "cannot switch to the client's credentials" not in server.log_text()
