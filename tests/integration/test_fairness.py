"""One slow or hostile client must not stop the others.

bench/stall.py opens connections that each send the start of a 1 MiB WRITE
and stall, and connections that send READs and never read the replies.
Meanwhile an independent client (libnfs's nfs-cat and nfs-cp) reads and
writes files and must be done within seconds, while every stalled
connection is still open. Afterwards the server drops the stalled writers
after --stall-timeout and the non-readers after --reply-timeout, its memory
stays bounded, and a writer that stalls for less than the timeout and then
finishes its call gets its data written intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import select
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metrics import free_port, value
from nfstools import make_random_file, nfs_cat, nfs_cp, rss_kib, sha256_file
from rawrpc import (NFS_PROGRAM, NFS_V3, SUCCESS, Conn, call, mnt, nfs_status, opaque, parse_reply,
                    read_record, u32, u64)
from wait import wait_until

pytestmark = pytest.mark.dionfs_only  # dionfs's own limits and metrics

REPO = Path(__file__).resolve().parents[2]
STALL_PY = REPO / "bench" / "stall.py"
MiB = 1 << 20

# Long enough for 1000 connections to be set up and the normal client to
# finish while all of them are still open; short enough for the test.
STALL_TIMEOUT = 8
REPLY_TIMEOUT = 5
# How long the well-behaved client may take (it takes well under a second
# on an idle server).
CLIENT_DEADLINE = 5
NONREADERS = 100  # the issue: 100 connections that never read


METRICS = f"127.0.0.1:{free_port()}"
SERVER_ARGS = ("--stall-timeout", str(STALL_TIMEOUT), "--reply-timeout", str(REPLY_TIMEOUT),
               "--metrics", METRICS)


def dropped(reason: str) -> int:
    return value(METRICS, "connections_dropped_total", f'reason="{reason}"')


def start_attackers(server, writers: int, readers: int, file: str,
                    sent: int = 64 << 10) -> tuple[subprocess.Popen, dict]:
    """bench/stall.py against `file` in the export's root, each writer
    sending `sent` bytes of its 1 MiB WRITE's payload; returns once all its
    connections are set up."""
    p = subprocess.Popen(
        [sys.executable, str(STALL_PY), "--host", server.host,
         "--nfs-port", str(server.nfs_port), "--mount-port", str(server.mount_port),
         "--export", server.export, "--file", file,
         "--writers", str(writers), "--readers", str(readers), "--sent", str(sent)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([p.stdout], [], [], 60)
    if not ready:
        p.kill()
        raise AssertionError("bench/stall.py set nothing up within 60 s")
    line = p.stdout.readline()
    if not line:
        p.wait(10)
        raise AssertionError(f"bench/stall.py failed: {p.stderr.read()}")
    return p, json.loads(line)


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(10)


@pytest.mark.server_args(*SERVER_ARGS)
# 64 KiB is about a fresh connection's whole receive window, so whether
# those writers' windows close depends on timing; 256 KiB always closes
# it, and the server must read (stage) the start of the payload to learn
# whether the rest comes, without taking a pool buffer for it.
@pytest.mark.parametrize("writers,sent", [(64, 64 << 10), (1000, 64 << 10), (200, 256 << 10)])
def test_stalled_and_non_reading_clients_do_not_stop_others(server, writers, sent, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, writers + 1024)), hard))
    big = os.path.join(server.export, "big")
    big_sum = make_random_file(big, 4 * MiB, seed=1)
    os.chmod(big, 0o666)
    src = str(tmp_path / "src")
    src_sum = make_random_file(src, 3 * MiB + 1234, seed=2)
    pid = server.proc.pid
    rss_before = rss_kib(pid)

    attackers, info = start_attackers(server, writers, NONREADERS, "big", sent)
    try:
        print(f"{writers} stalled writers and {NONREADERS} non-readers set up in "
              f"{info['setup_s']} s")
        started = time.monotonic()
        # The well-behaved client: a READ-heavy and a WRITE-heavy job.
        data = nfs_cat(server.url("big"), timeout=60)
        read_s = time.monotonic() - started
        nfs_cp(src, server.url("copy"), timeout=60)
        took = time.monotonic() - started
        print(f"normal client: read 4 MiB in {read_s:.2f} s, read + wrote in {took:.2f} s")
        # Every attacker was still connected meanwhile: this was no
        # race against the timeouts.
        assert dropped("stalled_record") == 0
        assert dropped("unread_replies") == 0
        assert value(METRICS, "connections_open") >= writers + NONREADERS
        assert took < CLIENT_DEADLINE, f"the normal client took {took:.1f} s"
        assert hashlib.sha256(data).hexdigest() == big_sum
        assert sha256_file(os.path.join(server.export, "copy")) == src_sum

        # The stalled writers go after the stall timeout, the non-readers
        # after the reply timeout; all their buffers come back.
        wait_until(lambda: dropped("stalled_record") == writers, STALL_TIMEOUT + 10,
                   f"{writers} stalled writers dropped", interval=0.2)
        wait_until(lambda: dropped("unread_replies") == NONREADERS, REPLY_TIMEOUT + 10,
                   f"{NONREADERS} non-readers dropped", interval=0.2)
        wait_until(lambda: value(METRICS, "connections_open") == 0, 10,
                   "the attackers' connections closed", interval=0.2)
        rss_after = rss_kib(pid)
        print(f"server RSS {rss_before} KiB -> {rss_after} KiB")
        # Bounded by the pools (32 + 32 buffers of 1.2 MiB at most), not by
        # the attackers' calls (64 MiB of WRITEs, 128 MiB of READ replies).
        assert rss_after - rss_before < 110 * 1024
        # A few warnings per reason, not one per attacker: the last says
        # the rest are counted only (every drop is in the metric above).
        log = server.log_text(tail=5000)
        for what, n in (("a call stopped arriving", writers),
                        ("the client read none of its replies", NONREADERS)):
            lines = [line for line in log.splitlines() if f"dropping connection: {what}" in line]
            assert 1 <= len(lines) <= 10, f"{len(lines)} warnings for {n} '{what}' drops"
            if n > 10:
                # (Failed once in CI, with one line found, the first: all of
                # them and the log's size say more next time.)
                assert "only counted" in lines[-1], (len(log.splitlines()), lines)
    finally:
        stop(attackers)


@pytest.mark.server_args(*SERVER_ARGS)
def test_a_writer_that_stalls_briefly_then_finishes_is_written_intact(server):
    target = os.path.join(server.export, "late")
    with open(target, "wb") as f:
        f.write(b"\xee" * (3 * MiB))
    os.chmod(target, 0o666)
    big = os.path.join(server.export, "big")
    make_random_file(big, MiB, seed=3)
    os.chmod(big, 0o666)
    attackers, _ = start_attackers(server, 64, 0, "big")
    try:
        with Conn(server.host, server.mount_port) as m:
            status, root = mnt(m, server.export)
        assert status == 0
        with Conn(server.host, server.nfs_port) as c:
            accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(root) + opaque(b"late"))
            assert accept == SUCCESS and nfs_status(res) == 0
            (n,) = struct.unpack(">I", res[4:8])
            fh = res[8:8 + n]
            # Misaligned, so the direct path reads and rewrites its edges.
            offset, data = 4096 + 100, os.urandom(MiB)
            args = opaque(fh) + u64(offset) + u32(MiB) + u32(2) + opaque(data)  # FILE_SYNC
            c.xid += 1
            msg = call(c.xid, NFS_PROGRAM, NFS_V3, 7, args)
            c.send(msg[:len(msg) // 3])
            time.sleep(STALL_TIMEOUT / 2)
            c.send(msg[len(msg) // 3:])
            accept, res = c.reply(c.xid)
            assert accept == SUCCESS and nfs_status(res) == 0
        with open(target, "rb") as f:
            content = f.read()
        assert content[:offset] == b"\xee" * offset
        assert content[offset:offset + MiB] == data
        assert content[offset + MiB:] == b"\xee" * (3 * MiB - offset - MiB)
    finally:
        stop(attackers)


def _lookup(c: Conn, root: bytes, name: str) -> bytes:
    accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(root) + opaque(name.encode()), uid=0, gid=0)
    assert accept == SUCCESS and nfs_status(res) == 0
    (n,) = struct.unpack(">I", res[4:8])
    return res[8:8 + n]


def _share_delays() -> int:
    return value(METRICS, "calls_delayed_by_share_total")


@pytest.mark.server_args(*SERVER_ARGS)
def test_small_requests_are_not_held_to_the_large_buffer_share(server):
    """READs and WRITEs of at most 64 KiB take small buffers of their own
    pools: 48 of them pipelined on one connection all run at once (none
    waits for one of the connection's 8 shares of the large pools, as they
    all did before), and every reply is right."""
    make_random_file(os.path.join(server.export, "f"), 4 * MiB, seed=3)
    os.chmod(os.path.join(server.export, "f"), 0o666)  # root is squashed
    data = open(os.path.join(server.export, "f"), "rb").read()
    with Conn(server.host, server.mount_port, reserved=True) as m:
        status, root = mnt(m, server.export)
    assert status == 0
    with Conn(server.host, server.nfs_port, reserved=True) as c:
        fh = _lookup(c, root, "f")

        def pipeline(calls: list[tuple[int, bytes]]) -> dict[int, bytes]:
            base = c.xid + 1
            c.send(b"".join(call(base + i, NFS_PROGRAM, NFS_V3, proc, args, uid=0, gid=0)
                            for i, (proc, args) in enumerate(calls)))
            c.xid += len(calls)
            out = {}
            for _ in calls:
                xid, accept, res = parse_reply(read_record(c.sock))
                assert accept == SUCCESS and nfs_status(res) == 0, (xid, res[:8].hex())
                out[xid - base] = res
            return out

        before = _share_delays()
        reads = pipeline([(6, opaque(fh) + u64(i * 4096 + 7) + u32(4096)) for i in range(48)])
        for i, res in reads.items():
            # READ3resok: status, post_op_attr (1 + 84), count, eof, data.
            (count,) = struct.unpack(">I", res[4 + 88:4 + 92])
            payload = res[4 + 100:4 + 100 + count]
            assert payload == data[i * 4096 + 7:i * 4096 + 7 + 4096], f"READ {i}"
        writes = pipeline([(7, opaque(fh) + u64(i * 8192) + u32(8192) + u32(0) + opaque(bytes([i]) * 8192))
                           for i in range(48)])
        assert len(writes) == 48
        assert _share_delays() == before, "small calls waited for a large-buffer share"
    with open(os.path.join(server.export, "f"), "rb") as f:
        for i in range(48):
            f.seek(i * 8192)
            assert f.read(8192) == bytes([i]) * 8192, f"WRITE {i}"


def test_clients_that_do_not_read_directory_listings_cost_no_memory(server):
    """READDIRPLUS replies are as large as a READ's (up to the largest
    transfer, 1 MiB), but reserved no room in the connection's send buffer
    before they ran: a client that pipelined them and never read the
    replies had them all built and queued. 12 connections with 64 each of
    a 3,000-entry directory, unread: the server's memory grew by hundreds
    of MB. Now they wait for room like READs; an unread connection has a
    send buffer's worth built, no more."""
    d = os.path.join(server.export, "big")
    os.mkdir(d)
    for i in range(3000):
        open(os.path.join(d, "an-entry-with-a-rather-long-name-%06d" % i), "w").close()
    with Conn(server.host, server.mount_port, reserved=True) as m:
        _, root = mnt(m, server.export)
    with Conn(server.host, server.nfs_port, reserved=True) as c:
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(root) + opaque(b"big"), uid=0, gid=0)
    assert accept == SUCCESS and nfs_status(res) == 0
    (n,) = struct.unpack(">I", res[4:8])
    dir_fh = res[8:8 + n]
    readdirplus = opaque(dir_fh) + u64(0) + b"\0" * 8 + u32(MiB) + u32(MiB)
    before = rss_kib(server.proc.pid)
    deaf = []
    try:
        for k in range(12):
            s = socket.create_connection((server.host, server.nfs_port), timeout=30)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"".join(call(k * 100 + i, NFS_PROGRAM, NFS_V3, 17, readdirplus, 0, 0)
                               for i in range(64)))
            deaf.append(s)
        # The peak while the listings pile up, watched for 5 s (nothing
        # marks when they have all been made).
        peak = 0
        for _ in range(10):
            time.sleep(0.5)
            peak = max(peak, rss_kib(server.proc.pid))
        # Another client still lists the directory.
        r = subprocess.run(["nfs-ls", server.url("big")], capture_output=True, timeout=120)
        assert r.returncode == 0 and r.stdout.count(b"an-entry") == 3000, r.stderr[-300:]
    finally:
        for s in deaf:
            s.close()
    grown = peak - before
    print(f"RSS {before} KiB, at most {peak} KiB with 12 connections not reading their listings")
    assert grown < 64 * 1024, f"{grown} KiB"
