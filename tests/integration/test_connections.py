"""The RPC layer under hostile or merely numerous clients: raw sockets.

- Thousands of idle connections cost little server memory.
- A record larger than the limit closes that connection only, before the
  server allocates for it; other clients carry on.
- Calls pipelined on one connection are all answered (matched by xid).
"""

import resource
import socket
import struct
import subprocess
import time

import pytest

import rawrpc
from metrics import counters, free_port, value
from nfstools import rss_kib
from rawrpc import AUTH_NONE, NFS_PROGRAM, NFS_V3, call_header, opaque, read_record, record, u32
from wait import wait_until


def call(xid: int, prog: int, vers: int, proc: int, args: bytes = b"") -> bytes:
    """An RPC call with AUTH_NONE, as one record."""
    return rawrpc.call(xid, prog, vers, proc, args, cred=AUTH_NONE)


def connect(server) -> socket.socket:
    s = socket.create_connection((server.host, server.nfs_port), timeout=10)
    return s


def null_ok(server) -> bool:
    with connect(server) as s:
        s.sendall(call(7, NFS_PROGRAM, NFS_V3, 0))
        reply = read_record(s)
    xid, mtype, stat, _flavor, _len, accept = struct.unpack(">IIIIII", reply[:24])
    return (xid, mtype, stat, accept) == (7, 1, 0, 0)


IDLE_METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.dionfs_only  # measures dionfs's own memory
@pytest.mark.server_args("--metrics", IDLE_METRICS)
def test_thousands_of_idle_connections_cost_little(server):
    pid = server.proc.pid
    assert null_ok(server)
    before = rss_kib(pid)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    conns = []
    try:
        for _ in range(2000):
            conns.append(connect(server))
        # The server has accepted every one of them, and parked them: it
        # answers a call after them.
        open_now = lambda: value(IDLE_METRICS, "connections_open")  # noqa: E731
        wait_until(lambda: open_now() >= 2000, 30,
                   lambda: f"2000 connections open ({open_now()} so far)")
        assert null_ok(server)
        after = rss_kib(pid)
    finally:
        for s in conns:
            s.close()
    per_conn = (after - before) * 1024 / 2000
    print(f"RSS {before} KiB -> {after} KiB with 2000 idle connections: {per_conn:.0f} bytes each")
    # A task, a socket and small buffers: a few KiB each, never the
    # megabyte a per-connection max-size record buffer would cost.
    assert per_conn < 16 * 1024, f"{per_conn:.0f} bytes per idle connection"


CAP_METRICS = f"127.0.0.1:{free_port()}"


@pytest.mark.dionfs_only  # dionfs's connection policy
@pytest.mark.server_args("--max-connections", "20", "--metrics", CAP_METRICS)
def test_clients_holding_every_connection_do_not_lock_others_out(server):
    """20 connections (the cap here) from one host, each making a call and
    then keeping quiet: every other client's connection was accepted and
    closed at once, for as long as they stayed open (a call now and then
    beats the idle timeout). Now a new connection closes the one quiet
    longest (quiet for 5 s at least), and its client would reconnect."""
    hogs = []
    for i in range(20):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.settimeout(10)
        s.connect((server.host, server.nfs_port))
        s.sendall(call(100 + i, NFS_PROGRAM, NFS_V3, 0))
        read_record(s)
        hogs.append(s)
    try:
        # Quiet for a second, less than 5 s: the cap holds.
        time.sleep(1)
        with pytest.raises((ConnectionError, OSError)):
            null_ok(server)
        # Quiet for 5 s and more now: the server's threshold for making
        # room, so a fixed wait (nothing to poll without connecting, and a
        # refused connection would count).
        time.sleep(5)
        with open(f"{server.export}/f", "wb") as f:
            f.write(b"c" * 100_000)
        r = subprocess.run(["nfs-cat", server.url("f")], capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout == b"c" * 100_000, r.stderr[-300:]
        closed = 0
        for s in hogs:
            s.settimeout(0.5)
            try:
                closed += s.recv(1) == b""
            except (socket.timeout, ConnectionError):
                pass
        c = counters(CAP_METRICS, r"connections_(?:evicted|refused)")
        # nfs-cat's MOUNT connection took a hog's place, and its NFS one
        # another unless the MOUNT one had closed already.
        evicted = c["connections_evicted"]
        assert closed == evicted and evicted in (1, 2), (closed, c)
        assert c["connections_refused"] == 1, c
        # One line per listener (MOUNT's, NFS's) that closed one.
        assert server.log_text().count("closing the connection quiet longest") == evicted
    finally:
        for s in hogs:
            s.close()


@pytest.mark.dionfs_only  # dionfs's log
def test_a_server_out_of_descriptors_says_so_a_few_times(server):
    """Out of descriptors, accept() fails for every connection waiting, and
    the listener tries again ten times a second: each try was a line."""
    subprocess.run(["prlimit", "--pid", str(server.proc.pid), "--nofile=64:64"], check=True)
    conns = []
    try:
        for _ in range(100):
            conns.append(socket.create_connection((server.host, server.nfs_port), timeout=10))
        wait_until(lambda: "accept failed" in server.log_text(), 10, "a line on the failed accepts")
        # Then 2 s of the listener trying again, 10 times a second: no
        # count of the tries to wait for, and none of them may log.
        time.sleep(2)
    finally:
        for s in conns:
            s.close()
    lines = server.log_text().count("accept failed")
    assert 1 <= lines <= 2, lines
    assert "raise the open-file limit" in server.log_text()


@pytest.mark.dionfs_only  # dionfs's record-size policy
def test_oversized_record_closes_only_that_connection(server):
    bystander = connect(server)
    hostile = connect(server)
    try:
        # Claim a 1.5 GiB fragment and send nothing more: the server must
        # refuse it from the header alone.
        hostile.sendall(u32(0x80000000 | (1536 << 20)))
        hostile.settimeout(10)
        assert hostile.recv(1) == b"", "the connection should be closed"
        bystander.sendall(call(9, NFS_PROGRAM, NFS_V3, 0))
        reply = read_record(bystander)
        assert struct.unpack(">I", reply[:4])[0] == 9
    finally:
        bystander.close()
        hostile.close()
    assert server.alive()
    # The line may be written just after the connection closes.
    wait_until(lambda: "record" in server.log_text().lower(), 10,
               lambda: f"a line about the record:\n{server.log_text()}")


def test_pipelined_calls_are_all_answered(server):
    with connect(server) as s:
        xids = list(range(100, 164))
        s.sendall(b"".join(call(x, NFS_PROGRAM, NFS_V3, 0) for x in xids))
        seen = {struct.unpack(">I", read_record(s)[:4])[0] for _ in xids}
    assert seen == set(xids)


@pytest.mark.parametrize(
    "prog,vers,proc,accept_stat",
    [
        (NFS_PROGRAM, 2, 0, 2),  # PROG_MISMATCH
        (NFS_PROGRAM, 3, 99, 3),  # PROC_UNAVAIL
        (400000, 1, 0, 1),  # PROG_UNAVAIL
        (NFS_PROGRAM, 3, 1, 4),  # GETATTR without a handle: GARBAGE_ARGS
    ],
)
def test_rpc_errors(server, prog, vers, proc, accept_stat):
    with connect(server) as s:
        s.sendall(call(5, prog, vers, proc))
        reply = read_record(s)
    xid, mtype, stat, _flavor, _len, accept = struct.unpack(">IIIIII", reply[:24])
    assert (xid, mtype, stat, accept) == (5, 1, 0, accept_stat)
    if accept_stat == 2:
        assert struct.unpack(">II", reply[24:32]) == (3, 4)


@pytest.mark.dionfs_only
def test_unsupported_auth_flavor_is_refused(server):
    """RPCSEC_GSS (flavor 6) is not served: AUTH_ERROR / AUTH_BADCRED, not
    a silent downgrade to anonymous."""
    body = call_header(11, NFS_PROGRAM, NFS_V3, 0, cred=u32(6) + opaque(b"\0" * 8))
    with connect(server) as s:
        s.sendall(record(body))
        reply = read_record(s)
    xid, mtype, stat, reject, auth = struct.unpack(">IIIII", reply[:20])
    assert (xid, mtype, stat, reject, auth) == (11, 1, 1, 1, 1)
