"""Direct READs and aligned direct WRITEs through io_uring from the
connection's own task (no blocking thread; `crates/sys/src/uring.rs`), on
XFS on a 4096-byte-sector loop device, through nfs-rs.

- test_random_direct_reads_go_through_the_ring: reads of 1 byte to 47008
  bytes at random misaligned offsets, and past the end, of a file written
  locally; each answer is checked against the file, and the server's
  `ring_reads` counter shows they were read through io_uring, into pool
  buffers registered with the ring (`ring_fixed_ops`).
- test_reads_racing_misaligned_writes: nfs-rs READs of records that other
  connections rewrite (misaligned WRITEs) are each wholly old or wholly new,
  whichever path (ring, or blocking when a writer holds the range) served
  them.
- test_aligned_direct_writes_go_through_the_ring: aligned WRITEs (4 KiB to
  1 MiB, extending and not) by uid 1000 land exactly and are counted in
  `ring_writes`; misaligned ones take the blocking path (not counted). The
  file is owned by uid 1000 and the data checked locally. (Set-id clearing
  by ring writes, which run as the caller's registered credentials, is
  test_privileges.py's aligned case in direct mode.)
- test_no_io_uring_runs_everything_on_threads: `--no-io-uring` serves
  direct READs and aligned WRITEs on blocking threads (counters stay 0).
- test_buffered_reads_do_not_use_the_ring: a buffered export reads on
  blocking threads (the page cache may block), so the counter stays 0.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from metrics import counters, free_port

pytestmark = pytest.mark.dionfs_only  # the ring and --metrics are dionfs's


METRICS = f"127.0.0.1:{free_port()}"
DIRECT = pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                                 "--metrics", METRICS)
BUFFERED = pytest.mark.server_args("--read-mode", "buffered", "--write-mode", "buffered",
                                   "--metrics", METRICS)


def counter(name: str) -> int:
    found = counters(METRICS, name)
    assert name in found, f"no dionfs_{name}_total metric"
    return found[name]


def ring_reads() -> int:
    return counter("ring_reads")


def write_local(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o666)


@DIRECT
def test_random_direct_reads_go_through_the_ring(server, client, loopfs):
    rng = random.Random(7)
    data = rng.randbytes(8 * (1 << 20) + 4321)
    write_local(os.path.join(server.export, "r"), data)
    f = client.open("r", "rb")
    before = ring_reads()
    reads = 0
    for _ in range(300):
        off = rng.randrange(len(data) + 10_000)
        n = rng.choice([1, 511, 4096, 4097, 47008, rng.randrange(1, 65536)])
        got = f.read_at(off, n)
        assert got == data[off:off + n], f"read {n} at {off}"
        reads += 1
    got = ring_reads() - before
    # Random reads never start readahead and no writer holds a range, so
    # every READ is read through the ring (nfs-rs sends one READ per call,
    # all under rtmax).
    assert got >= reads, (got, reads)
    # Into pool buffers registered with the ring (pinned once): the server
    # runs as root, so RLIMIT_MEMLOCK does not stop the registration.
    assert counter("ring_fixed_ops") >= reads


@DIRECT
def test_reads_racing_misaligned_writes(server, client, loopfs):
    record, records = 47008, 64
    old = bytes([1]) * (record * records)
    write_local(os.path.join(server.export, "w"), old)
    new = bytes([2]) * record
    errors: list[str] = []

    def writer(first: int) -> None:
        wc = server.client(uid=1000, gid=1000)
        wf = wc.open("w", "r+b")
        for i in range(first, records, 2):
            assert wf.write_at(new, i * record) == record

    def reader(seed: int) -> None:
        rc = server.client(uid=1000, gid=1000)
        rf = rc.open("w", "rb")
        rng = random.Random(seed)
        for _ in range(200):
            i = rng.randrange(records)
            got = rf.read_at(i * record, record)
            if got not in (old[:record], new):
                errors.append(f"record {i} half written")

    before = ring_reads()
    threads = [threading.Thread(target=writer, args=(w,)) for w in (0, 1)]
    threads += [threading.Thread(target=reader, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert ring_reads() > before
    f = client.open("w", "rb")
    assert f.read_at(0, record * records) == new * records


@DIRECT
def test_aligned_direct_writes_go_through_the_ring(server, client, loopfs):
    rng = random.Random(11)
    f = client.open("aw", "w+b")
    model = bytearray()
    before = counter("ring_writes")
    aligned = 0
    for _ in range(60):
        n = rng.choice([4096, 8192, 65536, 1 << 20])
        off = rng.randrange(0, 4 << 20, 4096)
        data = rng.randbytes(n)
        assert f.write_at(data, off) == n
        if len(model) < off + n:
            model.extend(bytes(off + n - len(model)))
        model[off:off + n] = data
        # UNSTABLE ones of at most 64 KiB go through the page cache.
        if n > 65536:
            aligned += 1
    assert aligned > 0
    misaligned = 0
    for _ in range(20):
        n = rng.randrange(1, 20000)
        off = rng.randrange(0, 4 << 20)
        data = rng.randbytes(n)
        assert f.write_at(data, off) == n
        if len(model) < off + n:
            model.extend(bytes(off + n - len(model)))
        model[off:off + n] = data
        if off % 4096 or n % 4096:
            misaligned += 1
    f.close()
    assert counter("ring_writes") - before == aligned
    with open(os.path.join(server.export, "aw"), "rb") as local:
        assert local.read() == bytes(model)
    st = os.stat(os.path.join(server.export, "aw"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)


@pytest.mark.server_args("--read-mode", "direct", "--write-mode", "direct",
                         "--metrics", METRICS, "--no-io-uring")
def test_no_io_uring_runs_everything_on_threads(server, client, loopfs):
    write_local(os.path.join(server.export, "n"), bytes(range(256)) * 400)
    f = client.open("n", "r+b")
    assert f.read_at(4096, 8192) == (bytes(range(256)) * 400)[4096:4096 + 8192]
    assert f.write_at(b"z" * 4096, 8192) == 4096
    f.close()
    assert (counter("ring_reads"), counter("ring_writes")) == (0, 0)
    with open(os.path.join(server.export, "n"), "rb") as local:
        assert local.read(8192 + 4096)[8192:] == b"z" * 4096


@BUFFERED
def test_buffered_reads_do_not_use_the_ring(server, client, loopfs):
    write_local(os.path.join(server.export, "b"), b"x" * 100_000)
    f = client.open("b", "rb")
    assert f.read_at(5, 70_000) == b"x" * 70_000
    assert ring_reads() == 0


def _acl_denying(uid: int) -> bytes:
    """A system.posix_acl_access value: user::rw- user:UID:--- group::r--
    mask::r-- other::r-- (the file's mode bits stay 0644)."""
    import struct
    entries = [(0x01, 6, 0xFFFFFFFF), (0x02, 0, uid), (0x04, 4, 0xFFFFFFFF),
               (0x10, 4, 0xFFFFFFFF), (0x20, 4, 0xFFFFFFFF)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


@DIRECT
def test_permission_changes_bind_the_next_ring_call(server, client, loopfs):
    """The ring path remembers a caller's READ/WRITE grant per open file
    (no credential switch on the next call) only while the file's owner,
    mode and ctime stay as they were: every change below must be refused
    or granted again on the very next call."""
    from nfstools import assert_nfs_error
    path = os.path.join(server.export, "p")
    data = os.urandom(16384)
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, 0, 0)
    os.chmod(path, 0o644)
    f = client.open("p", "rb")
    assert f.read_at(0, 4096) == data[:4096]  # opens the file: blocking path
    before = ring_reads()
    for _ in range(3):
        assert f.read_at(4096, 4096) == data[4096:8192]
    assert ring_reads() - before >= 3

    os.chmod(path, 0o640)  # others lose read
    assert_nfs_error("NFS3ERR_ACCES", f.read_at, 0, 4096)
    os.chmod(path, 0o644)
    assert f.read_at(0, 4096) == data[:4096]

    # An ACL entry that denies uid 1000 leaves the mode bits alone: only
    # the ctime tells the change.
    mode = os.stat(path).st_mode
    os.setxattr(path, "system.posix_acl_access", _acl_denying(1000))
    assert os.stat(path).st_mode == mode
    assert_nfs_error("NFS3ERR_ACCES", f.read_at, 0, 4096)
    os.removexattr(path, "system.posix_acl_access")
    assert f.read_at(0, 4096) == data[:4096]

    os.chown(path, 2000, 2000)
    os.chmod(path, 0o640)  # owner 2000 now; 1000 is "other"
    assert_nfs_error("NFS3ERR_ACCES", f.read_at, 0, 4096)
    os.chown(path, 1000, 1000)  # the caller owns it: allowed again
    assert f.read_at(0, 4096) == data[:4096]

    w = client.open("p", "r+b")
    os.chown(path, 0, 0)
    os.chmod(path, 0o666)
    before = counter("ring_writes")
    # Over 64 KiB: smaller UNSTABLE writes go through the page cache.
    big = 128 << 10
    assert w.write_at(b"a" * big, 0) == big
    assert w.write_at(b"b" * big, big) == big
    assert counter("ring_writes") - before == 2
    os.chmod(path, 0o644)
    assert_nfs_error("NFS3ERR_ACCES", w.write_at, b"c" * big, 2 * big)
    with open(path, "rb") as local:
        assert local.read() == b"a" * big + b"b" * big
