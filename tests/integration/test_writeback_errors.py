"""Writes that a failed writeback lost must never be committed.

The kernel reports a failed writeback (of data an UNSTABLE WRITE left in
the page cache) once to each open file: to the first fsync through it. The
server's COMMIT syncs the file through its open-file cache's descriptor, so
nothing else of the server may sync through that descriptor and swallow the
error, and the file may not close (and be opened again for the COMMIT)
without a sync that reports it. Either way the COMMIT would answer NFS3_OK
with the verifier the WRITEs got, and the client would drop data the disk
never got; knfsd moves its verifier instead (nfsd_file_check_write_error).

The failing disk: XFS on a loop device whose image lives on a tmpfs that
the test fills (`LoopFs(thin=...)`), so that writes to blocks never written
before fail at the device while the filesystem stays up.
"""

from __future__ import annotations

import mmap
import os
import subprocess

import pytest
from loopfs import LoopFs
from nfstools import NfsProc
from servers import DionfsServer
from wait import wait_until

MiB = 1 << 20


@pytest.fixture
def thin_xfs():
    fs = LoopFs("xfs", size="1G", thin="100M")
    yield fs
    fs.destroy()


def serve(fs: LoopFs, nfsproc_bin: str, *args: str) -> tuple[DionfsServer, NfsProc]:
    export = fs.path("export")
    os.mkdir(export)
    os.chmod(export, 0o777)
    srv = DionfsServer(export, ["--write-mode", "buffered", *args])
    srv.start()
    return srv, NfsProc(nfsproc_bin, srv)


def write_unstable(nfsproc: NfsProc, name: str, size: int) -> set[str]:
    """`size` bytes of UNSTABLE WRITEs into `name` (left in the page cache by
    a buffered export); the verifiers they got."""
    verfs = set()
    for offset in range(0, size, MiB):
        r = nfsproc("write", name, offset, MiB, "unstable")
        assert r["write_status"] == "NFS3_OK", r
        verfs.add(r["write_verf"])
    return verfs


def committed(nfsproc: NfsProc, name: str, verfs: set[str]) -> bool:
    """Whether a COMMIT of `name` now answers NFS3_OK with one of `verfs`: the
    client would then take what it wrote with them for safe on disk."""
    r = nfsproc("write", name, 0, 0, "unstable", "commit", check=False)
    return r.get("commit_status") == "NFS3_OK" and r.get("commit_verf") in verfs


def lost_on_disk(fs: LoopFs, name: str) -> bool:
    """Whether the data of `name` is not on the device (read past the page cache)."""
    fd = os.open(fs.path("export", name), os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 4096)
        os.preadv(fd, [buf], 3 * MiB)
    except OSError:
        return True
    finally:
        os.close(fd)
    # nfsproc writes byte (offset * 7 + 1) at every offset.
    return buf[:] != bytes(((3 * MiB + i) * 7 + 1) & 0xFF for i in range(4096))


def filesystem_up(fs: LoopFs) -> bool:
    """Whether the filesystem still answers (a shut-down XFS fails every
    call, COMMIT included: the tests would pass without what they test)."""
    try:
        os.listdir(fs.path("export"))
        return True
    except OSError:
        return False


@pytest.mark.dionfs_only
def test_a_setattr_does_not_swallow_the_writeback_error_of_a_commit(thin_xfs, nfsproc_bin):
    """A SETATTR (sync export: fsync of the file before the reply) between
    the WRITEs and their COMMIT: its fsync writes the data back, which
    fails. It answered NFS3ERR_IO, and synced through the open-file cache's
    descriptor, so the COMMIT after it found no error to report: NFS3_OK
    with the WRITEs' verifier, for 4 MiB the disk never got."""
    srv, nfsproc = serve(thin_xfs, nfsproc_bin)
    try:
        assert nfsproc("create", "unchecked", ".", "f")["status"] == "NFS3_OK"
        thin_xfs.sync()
        thin_xfs.fill_backing()
        verfs = write_unstable(nfsproc, "f", 4 * MiB)
        assert len(verfs) == 1, verfs
        r = nfsproc("setattr", "f", "mode=600")
        assert r["status"] == "NFS3ERR_IO", r
        assert lost_on_disk(thin_xfs, "f")
        assert not committed(nfsproc, "f", verfs), "COMMIT answered for data the disk never got"
        assert filesystem_up(thin_xfs)
    finally:
        srv.cleanup()


@pytest.mark.dionfs_only
def test_a_written_file_leaving_the_open_file_cache_is_synced_first(thin_xfs, nfsproc_bin):
    """`--open-files 1`: the file written UNSTABLE leaves the cache when
    another is opened, and its descriptors closed with the data still in
    the page cache. A local process then synced it (any fsync of the file
    is told of a failed writeback first), and the COMMIT, through a
    descriptor opened after that, found nothing to report: NFS3_OK with the
    WRITEs' verifier. Now the server keeps such a file open until it has
    synced it (within about a second), and the failure moves the verifier."""
    srv, nfsproc = serve(thin_xfs, nfsproc_bin, "--open-files", "1")
    try:
        for name in ("a", "b"):
            assert nfsproc("create", "unchecked", ".", name)["status"] == "NFS3_OK"
        thin_xfs.sync()
        thin_xfs.fill_backing()
        verfs = write_unstable(nfsproc, "a", 4 * MiB)
        assert len(verfs) == 1, verfs
        # Opening "b" pushes "a" out of the cache.
        assert nfsproc("write", "b", 0, 4096, "unstable")["write_status"] == "NFS3_OK"
        subprocess.run(["xfs_io", "-c", "fsync", thin_xfs.path("export", "a")], capture_output=True)
        assert lost_on_disk(thin_xfs, "a")
        # The server syncs what left its cache within a second or two (a
        # COMMIT before that finds the file still open, and fails).
        wait_until(lambda: "could not be synced" in srv.log_text(tail=200), 5,
                   "the server's failed sync of the evicted file", interval=0.2)
        assert not committed(nfsproc, "a", verfs), "COMMIT answered for data the disk never got"
        assert "could not be synced" in srv.log_text(tail=200)
        assert filesystem_up(thin_xfs)
    finally:
        srv.cleanup()
