"""Every procedure's arguments have a size limit that fits the procedure;
a longer call is answered GARBAGE_ARGS before its body is read into memory,
and the connection goes on. The limits are the largest encodings the
decoders accept (crates/proto: NfsProc3/MountProc3/Procedure::max_args_len),
so the largest legitimate calls are still served.
"""

from __future__ import annotations

import os
import struct

import pytest

from metrics import counters, free_port
from nfstools import rss_kib
from rawrpc import (GARBAGE_ARGS, MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, PORTMAP_PROGRAM,
                    PORTMAP_V2, SUCCESS, Conn, call, mnt, nfs_status, opaque, u32, u64)
from wait import wait_until

pytestmark = pytest.mark.dionfs_only  # dionfs's own limits

MiB = 1 << 20

NFS3_OK, NFS3ERR_NAMETOOLONG, NFS3ERR_BADHANDLE = 0, 63, 10001

# The limits of crates/proto, written out: fh 4+64, name 4+1024, sattr3 with
# every field set 60, symlink target 4+4096.
FH, NAME, SATTR, PATH = 68, 1028, 60, 4100
DIROPARGS = FH + NAME
NFS_LIMITS = {
    0: ("NULL", 0),
    1: ("GETATTR", FH),
    2: ("SETATTR", FH + SATTR + 12),
    3: ("LOOKUP", DIROPARGS),
    4: ("ACCESS", FH + 4),
    5: ("READLINK", FH),
    6: ("READ", FH + 12),
    8: ("CREATE", DIROPARGS + 4 + SATTR),
    9: ("MKDIR", DIROPARGS + SATTR),
    10: ("SYMLINK", DIROPARGS + SATTR + PATH),
    11: ("MKNOD", DIROPARGS + 4 + SATTR + 8),
    12: ("REMOVE", DIROPARGS),
    13: ("RMDIR", DIROPARGS),
    14: ("RENAME", 2 * DIROPARGS),
    15: ("LINK", FH + DIROPARGS),
    16: ("READDIR", FH + 20),
    17: ("READDIRPLUS", FH + 24),
    18: ("FSSTAT", FH),
    19: ("FSINFO", FH),
    20: ("PATHCONF", FH),
    21: ("COMMIT", FH + 12),
}
MOUNT_LIMITS = {0: ("NULL", 0), 1: ("MNT", 1028), 2: ("DUMP", 0), 3: ("UMNT", 1028),
                4: ("UMNTALL", 0), 5: ("EXPORT", 0)}
PORTMAP_LIMITS = {0: ("NULL", 0), 1: ("SET", 16), 2: ("UNSET", 16), 3: ("GETPORT", 16),
                  4: ("DUMP", 0)}

SATTR_NONE = u32(0) * 6  # set nothing: every set_* FALSE / DONT_CHANGE


def sattr_all() -> bytes:
    """sattr3 with every field set (the longest encoding, 60 bytes)."""
    t = u32(2) + u32(1) + u32(0)  # SET_TO_CLIENT_TIME, seconds, nseconds
    return u32(1) + u32(0o644) + u32(1) + u32(1000) + u32(1) + u32(1000) + u32(1) + u64(0) + t + t


def diropargs(fh: bytes, name: bytes) -> bytes:
    return opaque(fh) + opaque(name)


def nfs_args(proc: int, fh: bytes) -> bytes:
    """Small, well-formed arguments for each procedure but WRITE."""
    d = diropargs(fh, b"x")
    return {
        0: b"",
        1: opaque(fh),
        2: opaque(fh) + SATTR_NONE + u32(0),
        3: d,
        4: opaque(fh) + u32(0x3F),
        5: opaque(fh),
        6: opaque(fh) + u64(0) + u32(4096),
        8: d + u32(0) + SATTR_NONE,
        9: d + SATTR_NONE,
        10: d + SATTR_NONE + opaque(b"target"),
        11: d + u32(7) + SATTR_NONE,  # NF3FIFO
        12: d,
        13: d,
        14: d + diropargs(fh, b"y"),
        15: opaque(fh) + d,
        16: opaque(fh) + u64(0) + b"\0" * 8 + u32(4096),
        17: opaque(fh) + u64(0) + b"\0" * 8 + u32(4096) + u32(8192),
        18: opaque(fh),
        19: opaque(fh),
        20: opaque(fh),
        21: opaque(fh) + u64(0) + u32(0),
    }[proc]


def padded(args: bytes, size: int) -> bytes:
    """`args` followed by zeros up to `size` bytes (decoders ignore trailing
    bytes, as knfsd does: only the size can make such a call garbage)."""
    assert len(args) <= size
    return args + b"\0" * (size - len(args))


def mount_args(proc: int, export: str) -> bytes:
    return opaque(export.encode()) if proc in (1, 3) else b""


def mount_args_at_limit(proc: int, export: str) -> bytes:
    """MOUNT's decoders refuse trailing bytes, so the largest MNT and UMNT
    are a path of MNTPATHLEN (1024) bytes, not a padded short one."""
    if proc in (1, 3):
        return opaque((export + "/" + "d" * (1023 - len(export))).encode())
    return b""


def portmap_args(proc: int) -> bytes:
    return u32(NFS_PROGRAM) + u32(NFS_V3) + u32(6) + u32(0) if proc in (1, 2, 3) else b""


@pytest.fixture
def root_fh(server) -> bytes:
    with Conn(server.host, server.mount_port) as m:
        status, fh = mnt(m, server.export)
    assert status == 0, f"MNT {status}"
    return fh


def check_limits(conn: Conn, prog: int, vers: int, limits: dict, args_of, big: int = MiB,
                 args_at_limit=None) -> list[str]:
    """For each procedure: its arguments padded to exactly the limit are
    served; 4 bytes more, or `big`, get GARBAGE_ARGS; the same connection
    then serves the plain call. Returns what went wrong."""
    wrong = []
    for proc, (name, limit) in limits.items():
        args = args_of(proc)
        largest = padded(args_at_limit(proc) if args_at_limit else args, limit)
        for size in (limit, limit + 4, big):
            call_args = largest if size == limit else padded(args, size)
            accept, _ = conn.rpc(prog, vers, proc, call_args)
            want = SUCCESS if size == limit else GARBAGE_ARGS
            if accept != want:
                wrong.append(f"{name} with {size}-byte arguments (limit {limit}): "
                             f"accept_stat {accept}, expected {want}")
        accept, _ = conn.rpc(prog, vers, proc, args)
        if accept != SUCCESS:
            wrong.append(f"{name} after the refusals: accept_stat {accept}")
    return wrong


def test_nfs_arguments_over_the_procedure_limit_get_garbage_args(server, root_fh):
    with Conn(server.host, server.nfs_port) as c:
        wrong = check_limits(c, NFS_PROGRAM, NFS_V3, NFS_LIMITS, lambda p: nfs_args(p, root_fh))
    assert not wrong, "\n".join(wrong)
    assert server.alive()


def test_mount_arguments_over_the_procedure_limit_get_garbage_args(server):
    with Conn(server.host, server.mount_port) as c:
        wrong = check_limits(c, MOUNT_PROGRAM, MOUNT_V3, MOUNT_LIMITS,
                             lambda p: mount_args(p, server.export),
                             args_at_limit=lambda p: mount_args_at_limit(p, server.export))
    assert not wrong, "\n".join(wrong)


def test_portmap_arguments_over_the_procedure_limit_get_garbage_args(server):
    if not server.portmap_port:
        pytest.skip("no portmapper port in the ports file")
    # The portmapper's records are limited to 64 KiB (larger ones close the
    # connection, as before), so "big" is 60 KiB here.
    with Conn(server.host, server.portmap_port) as c:
        wrong = check_limits(c, PORTMAP_PROGRAM, PORTMAP_V2, PORTMAP_LIMITS, portmap_args,
                             big=60 * 1024)
    assert not wrong, "\n".join(wrong)


OVERSIZED_METRICS = f"127.0.0.1:{free_port()}"


def oversized_args() -> int:
    return counters(OVERSIZED_METRICS, "oversized_args").get("oversized_args", 0)


@pytest.mark.server_args("--metrics", OVERSIZED_METRICS)
def test_oversized_calls_are_refused_before_the_server_allocates(server, root_fh):
    """64 connections each announce a GETATTR with 1 MiB of arguments and
    send only the start: the server must not hold a megabyte per connection
    while it waits for the rest (before the per-procedure limit it did)."""
    pid = server.proc.pid
    conns = [Conn(server.host, server.nfs_port) for _ in range(64)]
    try:
        for c in conns:  # every connection accepted and parked
            assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        before = rss_kib(pid)
        refused = oversized_args()
        calls = []
        for i, c in enumerate(conns):
            msg = call(1000 + i, NFS_PROGRAM, NFS_V3, 1, padded(opaque(root_fh), MiB))
            split = len(msg) - MiB + 100  # record mark, call header, handle, a little
            c.send(msg[:split])
            calls.append((c, msg[split:], 1000 + i))
        # Every call refused on its header; the server now waits for the
        # rest of each record, to skip it.
        wait_until(lambda: oversized_args() == refused + 64, 30,
                   lambda: f"64 calls refused ({oversized_args() - refused} so far)")
        waiting = rss_kib(pid)
        print(f"RSS {before} KiB, {waiting} KiB with 64 oversized calls pending")
        assert waiting - before < 16 * 1024, f"RSS grew {waiting - before} KiB for 64 pending calls"
        for c, rest, xid in calls:
            c.send(rest)
        for c, _, xid in calls:
            assert c.reply(xid)[0] == GARBAGE_ARGS
            accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(root_fh))
            assert accept == SUCCESS and nfs_status(res) == NFS3_OK
        after = rss_kib(pid)
    finally:
        for c in conns:
            c.close()
    print(f"RSS {after} KiB after they were refused")
    assert after - before < 16 * 1024, f"RSS grew {after - before} KiB"


# ext4: XFS keeps symlink targets to 1024 bytes (XFS_SYMLINK_MAXLEN).
@pytest.mark.parametrize("loopfs", ["ext4"], indirect=True)
def test_largest_legitimate_calls_are_served(server, root_fh):
    name = b"n" * 255  # NAME_MAX
    target = b"t" * 4095  # PATH_MAX less the terminating NUL
    with Conn(server.host, server.nfs_port) as c:
        def nfs(proc, args):
            accept, res = c.rpc(NFS_PROGRAM, NFS_V3, proc, args)
            assert accept == SUCCESS, f"proc {proc}: accept_stat {accept}"
            return nfs_status(res), res

        st, _ = nfs(8, diropargs(root_fh, name) + u32(1) + SATTR_NONE)  # CREATE GUARDED
        assert st == NFS3_OK
        st, res = nfs(3, diropargs(root_fh, name))  # LOOKUP
        assert st == NFS3_OK
        st, _ = nfs(10, diropargs(root_fh, b"long-link") + sattr_all() + opaque(target))
        assert st == NFS3_OK
        assert os.readlink(os.path.join(server.export, "long-link")).encode() == target
        # A 4096-byte target is decoded (not GARBAGE_ARGS); the file system
        # refuses it as it would locally.
        st, _ = nfs(10, diropargs(root_fh, b"longer") + SATTR_NONE + opaque(b"t" * 4096))
        assert st == NFS3ERR_NAMETOOLONG
        # 64-byte handles, the protocol's largest: decoded, then judged.
        forged = b"\xab" * 64
        st, _ = nfs(1, opaque(forged))
        assert st == NFS3ERR_BADHANDLE
        # The largest RENAME and SYMLINK, exactly at their limits: decoded.
        big = diropargs(forged, b"m" * 1024)
        assert len(big + big) == NFS_LIMITS[14][1]
        st, _ = nfs(14, big + big)
        assert st == NFS3ERR_BADHANDLE
        args = big + sattr_all() + opaque(b"p" * 4096)
        assert len(args) == NFS_LIMITS[10][1]
        st, _ = nfs(10, args)
        assert st == NFS3ERR_BADHANDLE
    assert os.path.exists(os.path.join(server.export, name.decode()))


def test_a_write_keeps_its_phased_receive(server, root_fh, client):
    """WRITE is not held to a few KiB: its payload, up to max_transfer, is
    received in phases into the data plane's buffer."""
    client.touch("w")
    with Conn(server.host, server.nfs_port) as c:
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, diropargs(root_fh, b"w"))
        assert accept == SUCCESS and nfs_status(res) == NFS3_OK
        (n,) = struct.unpack(">I", res[4:8])
        fh = res[8:8 + n]
        data = os.urandom(MiB)
        args = opaque(fh) + u64(0) + u32(MiB) + u32(2) + opaque(data)  # FILE_SYNC
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 7, args)
        assert accept == SUCCESS and nfs_status(res) == NFS3_OK
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
    with open(os.path.join(server.export, "w"), "rb") as f:
        assert f.read() == data
