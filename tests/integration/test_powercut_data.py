"""Extending misaligned writes survive a power cut without zeros past the end.

A client appends 47008-byte records (misaligned: every record's last block
is partial and past the end of the file) while local fsyncs of another file
force the filesystem's log at random moments; then the filesystem is shut
down without flushing its log (`xfs_io -x -c shutdown`, as after a power
cut) and mounted again. Whatever the log kept, the file must be a prefix of
what was written: its size may be any point the appends reached, but its
last block must hold written data, never zeros a block-rounded direct write
left behind (the old trim-after-write scheme had a window where the log
could hold the rounded size). Zeros inside the file are allowed, in whole
blocks or in part of one: data not yet on disk when the power went.

Against the old scheme (block-rounded direct write, then ftruncate) this
caught a file ending in zeros (size 2822144 = 689 blocks, records of 47008)
in one of six direct-mode cycles; the i_size watcher in
crates/dataplane/tests/loop_fs.rs catches it every time.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

pytestmark = pytest.mark.dionfs_only  # modes are dionfs flags

B = 4096
REC = 47008


def _record(k: int) -> bytes:
    rng = random.Random(k)
    return bytes(rng.randrange(1, 256) for _ in range(REC))


@pytest.mark.parametrize("cycle", range(4))
@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.server_args(
    "--read-mode", m, "--write-mode", m), id=m) for m in ("direct", "buffered")])
def test_appends_survive_power_cut_without_zeros_past_the_end(server, loopfs, mode, cycle):
    records = [_record(k) for k in range(120)]
    data = b"".join(records)
    client = server.client(uid=1000, gid=1000)
    stop = threading.Event()
    written = [0]

    def append():
        try:
            with client.open("appended", "wb") as f:
                for rec in records:
                    if stop.is_set():
                        return
                    f.write(rec)
                    written[0] += len(rec)
        except Exception:
            pass  # the filesystem went away under the server

    # Daemons, and stopped whatever happens: a test failing before the
    # cut must not leave them writing and fsyncing for the rest of the run.
    threads = [threading.Thread(target=append, daemon=True),
               loopfs.log_forcer("log-forcer", stop, 0.002)]
    for t in threads:
        t.start()
    random.seed(cycle)
    deadline = time.monotonic() + 10
    cut_at = random.randrange(4, 60) * REC
    while written[0] < cut_at and time.monotonic() < deadline and threads[0].is_alive():
        time.sleep(0.001)
    try:
        loopfs.shutdown()
    finally:
        stop.set()
    for t in threads:
        t.join(30)
    server.close_clients()
    server.stop()
    loopfs.remount()

    path = os.path.join(server.export, "appended")
    got = open(path, "rb").read() if os.path.exists(path) else b""
    size = len(got)
    print(f"{mode} cycle {cycle}: {written[0]} bytes acknowledged, {size} after the power cut")
    assert size <= len(data)
    for start in range(0, size, B):
        block = got[start:start + B]
        want = data[start:start + len(block)]
        if block != want:
            # Uncommitted data may be lost, also in part of a block: a
            # record's partial edge goes to the page cache (buffered) while
            # the neighbouring record's interior goes to the device, so the
            # cut can keep one and not the other. Each byte is then the
            # data written or zero, never anything else.
            stray = [i for i, (g, w) in enumerate(zip(block, want)) if g not in (w, 0)]
            assert not stray and start + B < size, (
                f"block at {start} of {size}: bytes neither written nor zero at "
                f"{[start + i for i in stray[:8]]}, or a block of zeros at the end")
    last = (size - 1) // B * B if size else 0
    assert got[last:] == data[last:size], f"the file ends in bytes nobody wrote (size {size})"
