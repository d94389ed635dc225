"""Small direct-mode READs that cluster (`crates/dataplane/src/cluster.rs`),
through libnfs (tests/tools/iorhard), on XFS and ext4 on 4096-byte-sector
loop devices.

- test_ior_read_back_clusters_and_leaves_no_cache: IOR-hard's shape, 8
  clients (one connection each, 4 READs in flight) writing 47008-byte
  records into one shared file and then all reading the whole file back
  side by side, every byte checked by the clients: the server's
  `clustered_reads` counter shows the READs went through the page cache,
  and two seconds after the last READ the file has (almost) nothing left
  in it (the cluster drops what it read when it goes idle), as direct mode
  promises.
- test_random_reads_of_a_large_file_stay_direct: random 4 KiB READs of a
  file far larger than the cluster's reach, several in flight, are never
  counted as clustered.
- test_ior_rewrite_reads_uncached_edges_first: a second IOR-hard pass over
  the file with its pages dropped: the records' partial pages that hold
  the first pass's data are read in before each write
  (`edge_page_reads`, `DataPlane::read_partial_pages`), and the clients
  read every byte of the second pass back.
"""

from __future__ import annotations

import os
import random
import subprocess
import threading

import pytest

from metrics import counters, free_port
from wait import wait_until

pytestmark = pytest.mark.dionfs_only  # --metrics and the counter are dionfs's

METRICS = f"127.0.0.1:{free_port()}"
DIRECT = pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                                 "--metrics", METRICS)
REC = 47008


def clustered() -> int:
    return counters(METRICS, "clustered_reads").get("clustered_reads", 0)


def resident_bytes(path: str) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@DIRECT
@pytest.mark.parametrize("loopfs", ["xfs", "ext4"], indirect=True)
def test_ior_read_back_clusters_and_leaves_no_cache(server, iorhard, loopfs):
    clients, records = 8, 96
    before = clustered()
    res = iorhard.run("ior", "shared", clients, records, REC, q=4, S="unstable", s=5)
    got = clustered() - before
    reads = clients * clients * records  # every client reads every record
    print(f"{loopfs}: {got} of {reads} READs clustered\n{res.stdout}")
    assert got > reads // 2, f"{got} of {reads} READs went through the page cache"
    path = os.path.join(server.export, "shared")
    # The cluster ends a second after its last READ (swept every 250 ms).
    wait_until(lambda: resident_bytes(path) <= 1 << 20, 5,
               lambda: f"the cluster's pages dropped ({resident_bytes(path)} bytes of the "
                       f"{clients * records * REC}-byte file cached)", interval=0.25)


@DIRECT
@pytest.mark.parametrize("loopfs", ["xfs"], indirect=True)
def test_random_reads_of_a_large_file_stay_direct(server, client, loopfs):
    size = 256 << 20
    path = os.path.join(server.export, "big")
    with open(path, "wb") as f:
        f.truncate(size)
    os.chmod(path, 0o644)
    before = clustered()
    errors: list[str] = []
    files = [server.client().open("big", "rb") for _ in range(4)]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(200):
            off = rng.randrange(size // 4096) * 4096
            if files[seed].read_at(off, 4096) != bytes(4096):
                errors.append(f"reader {seed}: wrong bytes at {off}")

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert clustered() == before


@DIRECT
@pytest.mark.parametrize("loopfs", ["xfs"], indirect=True)
def test_ior_rewrite_reads_uncached_edges_first(server, iorhard, loopfs):
    """A second IOR-hard pass over the file, its pages dropped from the
    cache first: each record's partial first and last pages hold the first
    pass's data, and the server reads them in before it writes the record
    (`edge_page_reads`), not inside the write; every byte of the second
    pass is read back by the clients."""
    clients, records = 8, 48
    iorhard.run("ior", "shared", clients, records, REC, q=4, S="unstable", s=5)
    path = os.path.join(server.export, "shared")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    before = counters(METRICS, "edge_page_reads").get("edge_page_reads", 0)
    res = iorhard.run("ior", "shared", clients, records, REC, q=4, S="unstable", s=6)
    got = counters(METRICS, "edge_page_reads").get("edge_page_reads", 0) - before
    print(f"{got} edge pages read before their writes\n{res.stdout}")
    # Most of the 2 * clients * records partial pages are shared by two
    # neighbouring records: the first of the two to come reads it.
    assert got >= clients * records // 2, got
