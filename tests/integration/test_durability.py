"""Metadata durability: a power cut right after the reply loses nothing acknowledged.

RFC 1813 (section 3.3, and "Stable storage" in 1.1) lets a server reply to
CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK and SETATTR only
once the change is on stable storage; knfsd does it (`commit_metadata` in
fs/nfsd/vfs.c) unless the export says `async`.

Each case: prepare a state locally and make it durable, start dionfs on it,
make one kind of change through a real client (nfs-rs, or tests/tools/nfsproc
for what nfs-rs does not do), then at once cut the power: `xfs_io -x -c
shutdown` without `-f` (FS_IOC_SHUTDOWN with NOLOGFLUSH, which XFS and ext4
both implement) drops whatever the filesystem's log had not written, then
unmount and mount again (log recovery). Every acknowledged change must be
there. A canary made locally just before the cut, never synced, must be gone:
that shows the cut really lost what was not durable.

Each case runs alone, so one procedure's commit cannot cover for another's.
The filesystems are our own (not the shared `loopfs` pool): a shutdown ends
them until they are mounted again. ext4 is mounted with a long journal commit
interval so its periodic commit cannot make an unsynced change durable by
chance within a case.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from loopfs import LoopFs  # noqa: E402
from nfstools import NfsProc  # noqa: E402
from servers import DionfsServer  # noqa: E402

pytestmark = pytest.mark.dionfs_only

MOUNT_OPTIONS = {"xfs": None, "ext4": "commit=600"}

# Times set by SETATTR (whole seconds, well away from "now").
ATIME, MTIME = 1_000_000_000, 1_100_000_000


@pytest.fixture(scope="module", params=["xfs", "ext4"])
def cutfs(request):
    fs = LoopFs(request.param, "512M", mount_options=MOUNT_OPTIONS[request.param])
    yield fs
    fs.destroy()


def _fresh_export(fs: LoopFs) -> str:
    export = fs.path("export")
    if os.path.lexists(export):
        shutil.rmtree(export)
    os.mkdir(export)
    os.chmod(export, 0o777)
    return export


def _write(path: str, data: bytes = b"data\n") -> None:
    with open(path, "wb") as f:
        f.write(data)


def power_cut(fs: LoopFs, nfsproc_bin: str, prepare, act, server_args=(), request=None) -> str:
    """prepare(export) locally (made durable), act(client, nfsproc) through
    dionfs, cut the power, remount. Returns the export path to check."""
    export = _fresh_export(fs)
    prepare(export)
    fs.sync()
    srv = DionfsServer(export, ["--no-root-squash", *server_args])
    srv.start()
    try:
        client = srv.client(uid=0, gid=0)
        act(client, NfsProc(nfsproc_bin, srv))
        # Not synced: must not survive the cut.
        os.mkdir(fs.path("canary"))
        fs.shutdown()
    except BaseException:
        print(f"===== dionfs log =====\n{srv.log_text()}")
        raise
    finally:
        srv.cleanup()
    fs.remount()
    assert not os.path.lexists(fs.path("canary")), (
        "an unsynced change survived the power cut: the cut lost nothing, so this case proves nothing")
    return export


def ok(result) -> None:
    assert result.get("status") == "NFS3_OK", str(result)


# ---------------------------------------------------------------- the cases
# Each: (prepare(export), act(client, nfsproc), check(export)).

def _nothing(export):
    pass


def create_act(c, p):
    c.touch("touched")
    ok(p("create", "guarded", ".", "guarded", uid=0, gid=0))
    ok(p("create", "exclusive", ".", "exclusive", "verifier", uid=0, gid=0))


def create_check(x):
    for name in ("touched", "guarded", "exclusive"):
        assert stat.S_ISREG(os.lstat(f"{x}/{name}").st_mode), name
    assert stat.S_IMODE(os.lstat(f"{x}/guarded").st_mode) == 0o644


def mkdir_act(c, p):
    c.mkdir("made", 0o750)
    c.mkdir("made/inner", 0o700)


def mkdir_check(x):
    assert stat.S_IMODE(os.lstat(f"{x}/made").st_mode) == 0o750
    assert stat.S_ISDIR(os.lstat(f"{x}/made/inner").st_mode)


def symlink_act(c, p):
    c.symlink("some/where/else", "link")
    ok(p("symlink", ".", "link2", "../outside", uid=0, gid=0))


def symlink_check(x):
    assert os.readlink(f"{x}/link") == "some/where/else"
    assert os.readlink(f"{x}/link2") == "../outside"


def mknod_act(c, p):
    ok(p("mknod", "fifo", ".", "fifo", uid=0, gid=0))


def mknod_check(x):
    st = os.lstat(f"{x}/fifo")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o644


def remove_prepare(x):
    _write(f"{x}/victim")
    os.mkdir(f"{x}/d")
    _write(f"{x}/d/victim2")
    os.symlink("target", f"{x}/oldlink")


def remove_act(c, p):
    c.remove("victim")
    c.remove("d/victim2")
    c.remove("oldlink")


def remove_check(x):
    for name in ("victim", "d/victim2", "oldlink"):
        assert not os.path.lexists(f"{x}/{name}"), name


def rmdir_prepare(x):
    os.makedirs(f"{x}/empty")
    os.makedirs(f"{x}/outer/empty2")


def rmdir_act(c, p):
    c.rmdir("empty")
    c.rmdir("outer/empty2")


def rmdir_check(x):
    assert not os.path.lexists(f"{x}/empty")
    assert not os.path.lexists(f"{x}/outer/empty2")


def rename_same_prepare(x):
    _write(f"{x}/old", b"old contents")
    _write(f"{x}/replaced", b"to be replaced")
    _write(f"{x}/over", b"replacement")


def rename_same_act(c, p):
    c.rename("old", "new")
    c.rename("over", "replaced")


def rename_same_check(x):
    assert not os.path.lexists(f"{x}/old") and not os.path.lexists(f"{x}/over")
    assert Path(f"{x}/new").read_bytes() == b"old contents"
    assert Path(f"{x}/replaced").read_bytes() == b"replacement"


def rename_across_prepare(x):
    os.makedirs(f"{x}/a/subdir")
    os.makedirs(f"{x}/b")
    _write(f"{x}/a/file", b"moving")


def rename_across_act(c, p):
    c.rename("a/file", "b/file")
    ok(p("rename", "a", "subdir", "b", "subdir", uid=0, gid=0))


def rename_across_check(x):
    assert not os.path.lexists(f"{x}/a/file") and not os.path.lexists(f"{x}/a/subdir")
    assert Path(f"{x}/b/file").read_bytes() == b"moving"
    assert stat.S_ISDIR(os.lstat(f"{x}/b/subdir").st_mode)


def link_prepare(x):
    _write(f"{x}/file")
    os.mkdir(f"{x}/d")


def link_act(c, p):
    c.link("file", "d/hardlink")


def link_check(x):
    st = os.lstat(f"{x}/file")
    assert st.st_nlink == 2
    assert os.lstat(f"{x}/d/hardlink").st_ino == st.st_ino


def setattr_prepare(x):
    _write(f"{x}/file")
    os.chmod(f"{x}/file", 0o644)
    os.mkdir(f"{x}/dir", 0o755)
    os.symlink("file", f"{x}/link")
    os.mkfifo(f"{x}/fifo", 0o644)


def setattr_mode_act(c, p):
    c.chmod("file", 0o751)
    c.chmod("dir", 0o700)
    ok(p("setattr", "fifo", "mode=600", uid=0, gid=0))


def setattr_mode_check(x):
    assert stat.S_IMODE(os.lstat(f"{x}/file").st_mode) == 0o751
    assert stat.S_IMODE(os.lstat(f"{x}/dir").st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(f"{x}/fifo").st_mode) == 0o600


def setattr_owner_act(c, p):
    c.chown("file", 1234, 5678)
    c.chown("dir", 1235, 5679)
    ok(p("setattr", "link", "uid=1236", "gid=5680", uid=0, gid=0))


def setattr_owner_check(x):
    for name, owner in (("file", (1234, 5678)), ("dir", (1235, 5679)), ("link", (1236, 5680))):
        st = os.lstat(f"{x}/{name}")
        assert (st.st_uid, st.st_gid) == owner, name


def setattr_times_act(c, p):
    c.utime("file", ns=(ATIME * 10**9, MTIME * 10**9))
    ok(p("setattr", "fifo", f"atime={ATIME}", f"mtime={MTIME}", uid=0, gid=0))


def setattr_times_check(x):
    for name in ("file", "fifo"):
        st = os.lstat(f"{x}/{name}")
        assert (st.st_atime_ns, st.st_mtime_ns) == (ATIME * 10**9, MTIME * 10**9), name


def setattr_size_act(c, p):
    ok(p("truncate", "file", "3", uid=0, gid=0))


def setattr_size_check(x):
    assert os.lstat(f"{x}/file").st_size == 3


CASES = {
    "create": (_nothing, create_act, create_check),
    "mkdir": (_nothing, mkdir_act, mkdir_check),
    "symlink": (_nothing, symlink_act, symlink_check),
    "mknod-fifo": (_nothing, mknod_act, mknod_check),
    "remove": (remove_prepare, remove_act, remove_check),
    "rmdir": (rmdir_prepare, rmdir_act, rmdir_check),
    "rename-in-dir": (rename_same_prepare, rename_same_act, rename_same_check),
    "rename-across-dirs": (rename_across_prepare, rename_across_act, rename_across_check),
    "link": (link_prepare, link_act, link_check),
    "setattr-mode": (setattr_prepare, setattr_mode_act, setattr_mode_check),
    "setattr-owner": (setattr_prepare, setattr_owner_act, setattr_owner_check),
    "setattr-times": (setattr_prepare, setattr_times_act, setattr_times_check),
    "setattr-size": (setattr_prepare, setattr_size_act, setattr_size_check),
}


@pytest.mark.parametrize("case", list(CASES))
def test_acknowledged_change_survives_power_cut(cutfs, nfsproc_bin, case):
    prepare, act, check = CASES[case]
    export = power_cut(cutfs, nfsproc_bin, prepare, act)
    check(export)


def test_async_export_may_lose_acknowledged_changes(cutfs, nfsproc_bin):
    """`--async` (exports(5) `async`): replies come before the changes are
    durable, so a power cut may lose acknowledged changes. Not asserted
    either way (the filesystem may have written some by itself); what is
    asserted is that every call was answered NFS3_OK and the filesystem
    comes back consistent. The outcome is printed."""
    def prepare(x):
        remove_prepare(x)
        rename_same_prepare(x)

    def act(c, p):
        create_act(c, p)
        mkdir_act(c, p)
        remove_act(c, p)
        rename_same_act(c, p)

    export = power_cut(cutfs, nfsproc_bin, prepare, act, server_args=["--async"])
    kept = {}
    for name, check in (("create", create_check), ("mkdir", mkdir_check),
                        ("remove", remove_check), ("rename", rename_same_check)):
        try:
            check(export)
            kept[name] = True
        except (AssertionError, OSError):
            kept[name] = False
    print(f"async export on {cutfs.fstype}: acknowledged changes kept after the power cut: {kept}")
    # The filesystem is usable again and the server serves it.
    srv = DionfsServer(export, ["--no-root-squash"])
    srv.start()
    try:
        srv.client(uid=0, gid=0).touch("after")
        assert os.path.exists(f"{export}/after")
    finally:
        srv.cleanup()
