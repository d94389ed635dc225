"""Requests a well-behaved client would not send: the server must answer
them sensibly (or drop that connection) and keep serving everyone else."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from metrics import counters, free_port
from rawrpc import AUTH_NONE, NFS_PROGRAM, NFS_V3, call_header, record, u32
from wait import wait_until

MiB = 1 << 20


def test_read_larger_than_rtmax_is_clamped(server, client, nfsproc):
    with client.open("big", "wb") as f:
        f.write(os.urandom(3 * MiB))
    r = nfsproc("read", "big", 0, 2 * MiB)
    assert r["status"] == "NFS3_OK", r
    assert 0 < r.int("count") <= MiB, f"READ of 2 MiB with rtmax 1 MiB returned {r['count']} bytes"
    assert r.int("data_len") == r.int("count"), r


def test_write_larger_than_wtmax(server, client, nfsproc):
    client.touch("w")
    r = nfsproc("write", "w", 0, 2 * MiB, "file_sync", check=False)
    # Either a short write (count <= wtmax), an error status, or the
    # connection dropped (rc 2): but the server must still be there.
    if r.rc == 0 and r.get("write_status") == "NFS3_OK":
        assert r.int("count") <= MiB, r
    assert nfsproc("null")["nfs_null"] == "ok"
    assert server.alive()


def test_lookup_does_not_follow_symlinks_out(server, nfsproc, client):
    os.symlink("/", os.path.join(server.export, "escape"))
    os.symlink("..", os.path.join(server.export, "up"))
    for path in ("escape/etc", "escape/etc/passwd", "up/export"):
        r = nfsproc("lookup", path)
        assert r["status"] != "NFS3_OK", f"LOOKUP {path} went through a symlink: {r}"
    assert client.readlink("escape") == "/"
    # and a symlink handle is not a directory handle
    r = nfsproc("readdir", "escape", 4096)
    assert r["status"] == "NFS3ERR_NOTDIR", r


def test_dotdot_of_subdir_stays_inside(server, nfsproc, client):
    client.mkdir("sub")
    r = nfsproc("lookup", "sub/..")
    assert r["status"] == "NFS3_OK", r
    assert r["fileid"] == nfsproc("getattr", ".")["fileid"], "sub/.. is not the export root"


def _send(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        try:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            return s.recv(65536)
        except OSError:
            return b""


@pytest.mark.parametrize("what", ["garbage", "huge-record", "truncated-call", "wrong-program", "bad-rpc-version"])
def test_malformed_traffic_does_not_hurt_others(server, nfsproc, client, what):
    client.touch("alive")
    call = call_header(0x42, NFS_PROGRAM, NFS_V3, 0, cred=AUTH_NONE)
    payloads = {
        "garbage": os.urandom(4096),
        "huge-record": u32(0xFFFFFFF0) + b"\0" * 64,
        "truncated-call": u32(0x80000000 | 200) + call,  # 200 bytes announced, fewer sent
        "wrong-program": record(call.replace(u32(NFS_PROGRAM), u32(100099), 1)),
        "bad-rpc-version": record(call.replace(u32(0) + u32(2), u32(0) + u32(7), 1)),
    }
    for port in (server.nfs_port, server.mount_port):
        reply = _send(port, payloads[what])
        if what == "wrong-program" and port == server.nfs_port and reply:
            # RFC 5531: MSG_ACCEPTED + PROG_UNAVAIL (1)
            xid, mtype, stat = struct.unpack(">III", reply[4:16])
            assert (xid, mtype, stat) == (0x42, 1, 0), reply
            assert struct.unpack(">I", reply[24:28])[0] == 1, f"not PROG_UNAVAIL: {reply.hex()}"
        if what == "bad-rpc-version" and port == server.nfs_port and reply:
            xid, mtype, stat = struct.unpack(">III", reply[4:16])
            assert (xid, mtype, stat) == (0x42, 1, 1), f"not MSG_DENIED: {reply.hex()}"
    assert server.alive(), "server died"
    assert nfsproc("null")["nfs_null"] == "ok"
    assert client.exists("alive")


METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.dionfs_only
@pytest.mark.server_args("--metrics", METRICS)
def test_oversized_records_are_logged_a_few_at_a_time(server, nfsproc):
    """Connections that each announce a record longer than any call are
    closed; a host opening them in a loop got one warning per connection.
    Now at most 10 a minute, the tenth saying the rest are only counted,
    and the counter has every one."""
    for _ in range(30):
        _send(server.nfs_port, struct.pack(">I", 0xFFFFFFF0) + b"\0" * 64)
    lines = [line for line in server.log_text(tail=3000).splitlines()
             if "record too large" in line]
    assert len(lines) == 10, "\n".join(lines)
    assert "only counted" in lines[-1], lines[-1]
    wait_until(lambda: counters(METRICS, "connections_dropped")["connections_dropped"] >= 30, 10,
               lambda: f"30 connections dropped: {counters(METRICS, 'connections_dropped')}")
    assert nfsproc("null")["nfs_null"] == "ok"


SCRAPE_METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.dionfs_only
@pytest.mark.server_args("--metrics", SCRAPE_METRICS)
def test_silent_metrics_connections_are_bounded(server):
    """The metrics endpoint spawned a task per connection without a cap,
    and one that sent nothing or read nothing held it (and a rendering of
    every counter) for ever: 16 scrapes at most run at once, a connection
    past them is closed at once and counted, and each scrape ends within
    10 s whatever its client does."""
    host, port = SCRAPE_METRICS.split(":")
    silent = []
    try:
        for _ in range(16):
            s = socket.create_connection((host, int(port)), timeout=10)
            silent.append(s)
        # Past the cap: closed at once, without a response. (Accepted in
        # the order they connected, so the silent ones hold the slots.)
        extra = [socket.create_connection((host, int(port)), timeout=10) for _ in range(8)]
        for s in extra:
            s.settimeout(5)
            assert s.recv(100) == b"", "a connection past the cap was served"
            s.close()
        # The silent ones are answered after the 5 s request timeout (the
        # request does not matter) and their slots come back: a scrape
        # works again within the 10 s a scrape may take.
        def scraped() -> dict[str, int] | None:
            try:
                return counters(SCRAPE_METRICS, "metrics_connections_refused")
            except OSError:
                return None
        refused = wait_until(scraped, 15, "a scrape served after the silent ones", interval=0.2)
        assert refused["metrics_connections_refused"] >= 8, refused
        assert "metrics connection closed: 16 scrapes in progress" in server.log_text()
    finally:
        for s in silent:
            s.close()
