"""An NFSv4.1 workload survives a power cut, as tests/integration/
test_powercut_data.py checks for v3: what the server acknowledged is
there after it, and so is the record of its clients.

A raw v4.1 client (tests/lib/rawnfs4.py, for a client owner of the test's
choosing) opens a file it keeps open, then in turn creates files, writes
them UNSTABLE, COMMITs and renames them, while local fsyncs of another
file force the filesystem's log at random moments. The server runs on
XFS on a 4096-byte-sector loop device with its state directory on the
same filesystem, and the default `sync` export option. Mid-workload the
filesystem is shut down without flushing its log (`xfs_io -x -c
shutdown`, as after a power cut); the server is killed, the filesystem
mounted again and the server restarted on the same state directory.

Then every file whose COMMIT was acknowledged holds its data, every
acknowledged rename is there, and the client is in the recovery record:
the server holds a grace period in which it reclaims the file it had
open (OPEN CLAIM_PREVIOUS), while a client not in the record gets
NFS4ERR_NO_GRACE, and its own reclaim after RECLAIM_COMPLETE
NFS4ERR_RECLAIM_BAD.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
import rawnfs4
from servers import DionfsServer

pytestmark = pytest.mark.dionfs_only

REC = 40_000  # bytes per file: misaligned, its last block partial


def _data(k: int) -> bytes:
    return random.Random(k).randbytes(REC)


@pytest.mark.parametrize("cycle", range(3))
def test_v4_workload_survives_power_cut(loopfs, cycle):
    export = loopfs.path(f"export-v4-{cycle}")
    os.makedirs(export)
    os.chmod(export, 0o777)
    srv = DionfsServer(export, ["--nfs-versions", "3,4.1,4.2", "--grace-period", "60"])
    srv.state_dir = loopfs.path(f"state-v4-{cycle}")
    os.makedirs(srv.state_dir)
    clients: list[rawnfs4.Client] = []
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        srv.start()
        a = rawnfs4.Client(srv.host, srv.nfs_port, b"powercut client A")
        clients.append(a)
        a.establish()
        assert a.reclaim_complete() == rawnfs4.OK
        root = a.lookup_path(export)
        held_sid = a.create(root, "held", b"holder")
        held = a.lookup(root, "held")
        a.write(held, held_sid, 0, b"held open", rawnfs4.FILE_SYNC)

        committed: list[int] = []  # files whose COMMIT was acknowledged
        renamed: list[int] = []  # files whose RENAME was acknowledged

        def workload():
            try:
                for k in range(10_000):
                    if stop.is_set():
                        return
                    name = f"f{k}"
                    sid = a.create(root, name, b"writer")
                    fh = a.lookup(root, name)
                    data = _data(k)
                    a.write(fh, sid, 0, data[:REC // 2], rawnfs4.UNSTABLE)
                    a.write(fh, sid, REC // 2, data[REC // 2:], rawnfs4.UNSTABLE)
                    a.commit(fh)
                    committed.append(k)
                    a.close_file(fh, sid)
                    a.rename(root, name, f"g{k}")
                    renamed.append(k)
            except Exception:
                pass  # the filesystem went away under the server

        threads = [threading.Thread(target=workload, daemon=True),
                   loopfs.log_forcer(f"log-forcer-{cycle}", stop, 0.003)]
        for t in threads:
            t.start()
        rng = random.Random(cycle)
        cut_at = rng.randrange(5, 40)
        deadline = time.monotonic() + 60
        while len(renamed) < cut_at and time.monotonic() < deadline and threads[0].is_alive():
            time.sleep(0.001)
        assert len(renamed) >= cut_at, f"the workload reached {len(renamed)} renames only"
        # What was acknowledged before the cut. The server outlives this
        # cut (a real one would take it down too), and a reply after it can
        # claim what was lost: a rename made in memory just before the
        # shutdown is aborted with the log, and XFS's fsync of a directory
        # (xfs_dir_fsync) then finds the directory unpinned and returns 0.
        acked_commit, acked_rename = list(committed), list(renamed)
        loopfs.shutdown()
        stop.set()
        for t in threads:
            t.join(60)
        # Power cut: the server dies with the filesystem.
        srv.proc.kill()
        srv.proc.wait(10)
        srv.proc = None
        for c in clients:
            c.close()
        clients.clear()
        loopfs.remount()

        print(f"cycle {cycle}: {len(acked_commit)} commits and {len(acked_rename)} renames "
              f"acknowledged")
        for k in acked_commit:
            new, old = os.path.join(export, f"g{k}"), os.path.join(export, f"f{k}")
            if k in acked_rename:
                assert os.path.exists(new) and not os.path.exists(old), f"rename of f{k} lost"
            path = new if os.path.exists(new) else old
            with open(path, "rb") as f:
                assert f.read() == _data(k), f"committed data of {path} lost"
        with open(os.path.join(export, "held"), "rb") as f:
            assert f.read() == b"held open"

        srv.start()
        a = rawnfs4.Client(srv.host, srv.nfs_port, b"powercut client A")
        clients.append(a)
        a.establish()
        # Not in the record: no reclaim, and no new state in grace.
        b = rawnfs4.Client(srv.host, srv.nfs_port, b"powercut client B")
        clients.append(b)
        b.establish()
        assert b.reclaim_open(held, b"holder").status == rawnfs4.NO_GRACE
        res = a.reclaim_open(held, b"holder")
        assert res.status == rawnfs4.OK, f"reclaim: {res.status}"
        assert a.reclaim_complete() == rawnfs4.OK
        assert a.reclaim_open(held, b"holder").status == rawnfs4.RECLAIM_BAD
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        for c in clients:
            c.close()
        if srv.proc is not None and srv.proc.poll() is not None:
            srv.proc = None
        srv.stop()
        log = srv.log_text()
        srv.cleanup()
        print(log[-4000:])
