"""Readahead of sequential direct READs (crates/dataplane/src/readahead.rs)
through independent clients, on XFS on a 4096-byte-sector loop device.

- test_sequential_qd1_read_gets_readahead_hits: libnfs's nfs-cat (one READ in
  flight) reads a 48 MiB file in direct mode; the bytes are exact and the
  server's metrics show READs served from prefetched data.
- test_sequential_read_with_reads_in_flight_gets_readahead_hits: libnfs
  (tests/tools/iorhard `stream`, one connection) writes a 96 MiB file and
  reads it back with 8 READs of 1 MiB in flight, checking every byte: READs
  are served from prefetched chunks, and the chunks past the READs in
  flight are not read twice nor thrown away unused but for a few.
- test_clients_reading_their_own_parts_each_get_readahead: four libnfs
  clients (tests/tools/iorhard `stream -P K/4`, 2 READs of 1 MiB in flight
  each) read their own quarters of one 128 MiB file at the same time, every
  byte checked: each quarter is a stream of its own, served from prefetched
  chunks, though the clients' READs interleave.
- test_small_reads_get_room_beside_large_ones: while four such clients
  read a file in 1 MiB READs, another reads 4 KiB at a time (one in
  flight) from a second file: large reads wait for room at the device
  (`large_read_waits_total` grows), and every client finishes with its
  bytes checked.
- test_large_read_depth_zero_makes_no_room: the same with
  `--large-read-depth-mib 0` (no limit): no large read waits.
- test_overwrite_between_sequential_reads_is_read_fresh: a client reads a
  file sequentially, 1 MiB at a time, so the server prefetches the chunks
  ahead; it then overwrites (misaligned) bytes inside them and reads on: it
  must get the new bytes, never the prefetched ones. Same for a SETATTR size
  shrink and re-extend.
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import pytest

from metrics import counters, free_port
from nfstools import nfs_cat

pytestmark = pytest.mark.dionfs_only  # readahead and --metrics are dionfs's

MiB = 1 << 20


METRICS = f"127.0.0.1:{free_port()}"
DIRECT = pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                                 "--metrics", METRICS)


def metrics() -> dict[str, int]:
    """The server's readahead counters (one export)."""
    return counters(METRICS, r"readahead_\w+")


def settled() -> dict[str, int]:
    """The readahead counters once the prefetches in flight are done: the
    same in three readings 50 ms apart (a fixed sleep was too short on a
    loaded machine: a chunk still queued when the test overwrote it is
    dropped without being read, so no discard is counted)."""
    last, same = metrics(), 0
    deadline = time.monotonic() + 20
    while same < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
        now = metrics()
        same = same + 1 if now == last else 0
        last = now
    return last


def write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o666)


@DIRECT
def test_sequential_qd1_read_gets_readahead_hits(server, loopfs):
    data = random.Random(1).randbytes(48 * MiB + 12345)
    write_local(os.path.join(server.export, "seq"), data)
    before = metrics()
    got = nfs_cat(server.url("seq"))
    assert got == data, "nfs-cat returned wrong bytes"
    after = metrics()
    hits = after["readahead_hits"] - before["readahead_hits"]
    prefetched = after["readahead_bytes"] - before["readahead_bytes"]
    # All but the first READs and the tail past the last whole chunk come
    # from prefetched chunks; leave room for READs that overtook a queued
    # prefetch on a loaded machine.
    assert hits >= 20, after
    assert prefetched >= 20 * MiB, after
    assert after["readahead_misses"] - before["readahead_misses"] < hits, after


@DIRECT
def test_sequential_read_with_reads_in_flight_gets_readahead_hits(server, iorhard, loopfs):
    size = 96 * MiB
    iorhard.run("stream", "inflight", size, "write", q=4, x=MiB, timeout=600)
    before = metrics()
    res = iorhard.run("stream", "inflight", size, "read", q=8, x=MiB, timeout=600)
    after = metrics()
    got = {k: after[k] - before.get(k, 0) for k in after}
    print(f"{got}\n{res.stdout}")
    reads = size // MiB
    # Before readahead served READs with others in flight, none of these
    # came from prefetched chunks. Leave room for the start of the stream
    # and for READs that overtook a queued prefetch on a loaded machine.
    assert got["readahead_hits"] >= reads // 2, got
    assert got["readahead_bytes"] >= size // 2, got
    # Prefetched chunks are read once and mostly used: some are dropped
    # unused (READs that overtook their chunk, late READs past the kept
    # chunks; 2-4% of a 4 GiB file's, 12-17 of this short stream's 96 on
    # an idle host, 20 once in the whole suite on a loaded one).
    assert got["readahead_discards"] <= reads // 4, got


def start_part_readers(iorhard, name: str, size: int, parts: int) -> list[subprocess.Popen]:
    """One libnfs client per part of file `name` (`iorhard stream -P K/N`),
    2 READs of 1 MiB in flight each, all at once."""
    return [subprocess.Popen(iorhard.argv({"q": 2, "x": MiB, "P": f"{k}/{parts}"})
                             + ["stream", name, str(size), "read"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k in range(parts)]


def read_parts(procs: list[subprocess.Popen]) -> None:
    """Waits for the part readers; each must have read its bytes exactly."""
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and "bad_bytes=0" in out and "result=ok" in out, (out, err)


@DIRECT
def test_clients_reading_their_own_parts_each_get_readahead(server, iorhard, loopfs):
    size, parts = 512 * MiB, 4
    iorhard.run("stream", "parts", size, "write", q=4, x=MiB, timeout=600)
    before = metrics()
    read_parts(start_part_readers(iorhard, "parts", size, parts))
    after = metrics()
    got = {k: after[k] - before.get(k, 0) for k in after}
    print(got)
    reads = size // MiB
    # With one stream per file (MAX_STREAMS = 1 in readahead.rs) the four
    # interleaved clients got 42-91 hits of these 512 READs, while one of
    # them read alone; with a stream each 251-419, and 229-437 with three
    # busy loops beside (2026-11-27). At 128 MiB this was flaky: 28 hits
    # of 128 in a loaded CI run, where the clients' start is a large share
    # of their READs (and the bug's 0-27 as close).
    assert got["readahead_hits"] >= reads // 4, got
    assert got["readahead_discards"] <= reads // 5, got


def small_beside_large(iorhard) -> int:
    """Four clients read their quarters of a 128 MiB file in 1 MiB READs
    while another reads a second file 4 KiB at a time (one in flight);
    every client's bytes are checked. Returns how many large reads waited
    for room at the device."""
    size, parts = 128 * MiB, 4
    iorhard.run("stream", "large", size, "write", q=4, x=MiB, timeout=600)
    iorhard.run("stream", "small", 4 * MiB, "write", q=4, x=MiB, timeout=600)
    before = counters(METRICS, r"large_read_waits")
    small = subprocess.Popen(iorhard.argv({"q": 1, "x": 4096}) + ["readloop", "small", "8192", "8"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # the small reader under way before the large ones start
    read_parts(start_part_readers(iorhard, "large", size, parts))
    waits = counters(METRICS, r"large_read_waits").get("large_read_waits", 0) \
        - before.get("large_read_waits", 0)
    out, err = small.communicate(timeout=600)
    assert small.returncode == 0 and "result=ok" in out, (out, err)
    print(f"large_read_waits: {waits}; small: {out.split()[0]}")
    return waits


@DIRECT
def test_small_reads_get_room_beside_large_ones(server, iorhard, loopfs):
    # With no room made, no large read ever waits.
    assert small_beside_large(iorhard) > 0


@pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                         "--metrics", METRICS, "--large-read-depth-mib", "0")
def test_large_read_depth_zero_makes_no_room(server, iorhard, loopfs):
    assert small_beside_large(iorhard) == 0


@DIRECT
def test_overwrite_between_sequential_reads_is_read_fresh(server, client, loopfs):
    size = 16 * MiB
    data = bytearray(random.Random(2).randbytes(size))
    write_local(os.path.join(server.export, "ow"), bytes(data))
    f = client.open("ow", "r+b")

    def read_on(first: int, last: int) -> None:
        for i in range(first, last):
            got = f.read_at(i * MiB, MiB)
            assert got == bytes(data[i * MiB:(i + 1) * MiB]), f"MiB {i} differs"

    read_on(0, 4)
    ahead = settled()  # the prefetches of MiB 4.. are done
    assert ahead["readahead_bytes"] >= MiB, ahead
    patch = b"fresh bytes" * 1000
    at = 4 * MiB + 777  # misaligned, inside the first prefetched chunk
    assert f.write_at(patch, at) == len(patch)
    data[at:at + len(patch)] = patch
    read_on(4, 8)
    assert metrics()["readahead_discards"] > ahead["readahead_discards"]

    # A shrink and re-extend while chunks ahead are prefetched: zeros now.
    settled()
    client.truncate("ow", 9 * MiB)
    client.truncate("ow", size)
    data[9 * MiB:] = bytes(size - 9 * MiB)
    read_on(8, 16)
