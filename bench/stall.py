#!/usr/bin/env python3
"""Slow and hostile NFSv3 clients, for fairness benchmarks and tests.

Opens --writers connections that each send the start of a WRITE (record
mark, RPC call header, WRITE arguments and --sent bytes of a --size payload)
and then send nothing more, and --readers connections that each send
--reads READs of --read-size bytes and never read the replies. Prints one
JSON line on stdout once every connection is set up, then holds them until
killed (SIGTERM/SIGINT) or for --hold seconds.

The file is named by --fh HEX, or looked up: MNT --export on --mount-port,
then LOOKUP --file in the export's root (AUTH_SYS as --uid/--gid). Python 3
standard library only, and tests/lib/rawrpc.py for the calls.

    bench/stall.py --host 127.0.0.1 --nfs-port 2049 --mount-port 20048 \\
        --export /srv/x --file big --writers 64 --readers 4

A server that lets such clients stop others answers a well-behaved client
slowly or not at all while this runs; a fair one drops the writers after
its stall timeout and the readers after its reply timeout.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import signal
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lib"))

from rawrpc import (MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, SUCCESS,  # noqa: E402
                    auth_sys, call_header, opaque, parse_reply, read_record, record, u32, u64)

NFSPROC3_LOOKUP, NFSPROC3_READ, NFSPROC3_WRITE = 3, 6, 7
MOUNTPROC3_MNT = 1
UNSTABLE = 0
MiB = 1 << 20


def call_body(xid: int, prog: int, vers: int, proc: int, uid: int, gid: int) -> bytes:
    """RPC call header with AUTH_SYS credentials and an AUTH_NONE verifier."""
    return call_header(xid, prog, vers, proc, auth_sys(uid, gid, machine=b"stall"))


def results(reply: bytes) -> bytes:
    """The results of an accepted, successful reply."""
    _xid, accept, res = parse_reply(reply)
    if accept != SUCCESS:
        raise RuntimeError(f"call refused: accept_stat {accept}")
    return res


def rpc(s: socket.socket, prog: int, proc: int, args: bytes, uid: int, gid: int) -> bytes:
    vers = NFS_V3 if prog == NFS_PROGRAM else MOUNT_V3
    s.sendall(record(call_body(random.randrange(1 << 31), prog, vers, proc, uid, gid) + args))
    return results(read_record(s))


def lookup_fh(a) -> bytes:
    """MNT the export, LOOKUP the file in its root: the file's handle."""
    with socket.create_connection((a.host, a.mount_port), timeout=30) as m:
        res = rpc(m, MOUNT_PROGRAM, MOUNTPROC3_MNT, opaque(a.export.encode()), a.uid, a.gid)
    (status,) = struct.unpack(">I", res[:4])
    if status != 0:
        raise RuntimeError(f"MNT {a.export}: mountstat3 {status}")
    (n,) = struct.unpack(">I", res[4:8])
    root = res[8:8 + n]
    with socket.create_connection((a.host, a.nfs_port), timeout=30) as c:
        res = rpc(c, NFS_PROGRAM, NFSPROC3_LOOKUP, opaque(root) + opaque(a.file.encode()),
                  a.uid, a.gid)
    (status,) = struct.unpack(">I", res[:4])
    if status != 0:
        raise RuntimeError(f"LOOKUP {a.file}: nfsstat3 {status}")
    (n,) = struct.unpack(">I", res[4:8])
    return res[8:8 + n]


def write_head(fh: bytes, offset: int, size: int, uid: int, gid: int) -> tuple[bytes, int]:
    """A WRITE of `size` bytes at `offset`, up to its payload: (bytes to
    send first, length of the whole record including its mark)."""
    body = call_body(random.randrange(1 << 31), NFS_PROGRAM, NFS_V3, NFSPROC3_WRITE, uid, gid)
    body += opaque(fh) + u64(offset) + u32(size) + u32(UNSTABLE) + u32(size)
    total = len(body) + size + (-size % 4)
    return u32(0x80000000 | total) + body, 4 + total


def read_call(fh: bytes, offset: int, count: int, uid: int, gid: int) -> bytes:
    body = call_body(random.randrange(1 << 31), NFS_PROGRAM, NFS_V3, NFSPROC3_READ, uid, gid)
    return record(body + opaque(fh) + u64(offset) + u32(count))


def connect(a) -> socket.socket:
    s = socket.create_connection((a.host, a.nfs_port), timeout=30)
    # A small receive buffer, so that unread replies back up at the server
    # rather than in this host's kernel.
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--nfs-port", type=int, default=2049)
    p.add_argument("--mount-port", type=int, default=20048)
    p.add_argument("--export", help="export path, to MNT (with --file)")
    p.add_argument("--file", help="file in the export's root, to LOOKUP")
    p.add_argument("--fh", help="the file's handle in hex (instead of --export/--file)")
    p.add_argument("--writers", type=int, default=64, help="stalled WRITE connections")
    p.add_argument("--size", type=int, default=MiB, help="payload of each WRITE")
    p.add_argument("--sent", type=int, default=64 << 10,
                   help="payload bytes each writer sends before stalling")
    p.add_argument("--readers", type=int, default=0, help="connections not reading replies")
    p.add_argument("--reads", type=int, default=64, help="READs each reader sends")
    p.add_argument("--read-size", type=int, default=MiB)
    p.add_argument("--uid", type=int, default=0)
    p.add_argument("--gid", type=int, default=0)
    p.add_argument("--hold", type=float, default=0, help="seconds to hold (0: until killed)")
    a = p.parse_args()
    if a.fh:
        fh = bytes.fromhex(a.fh)
    elif a.export and a.file:
        fh = lookup_fh(a)
    else:
        p.error("give --fh, or --export and --file")
    if not 0 <= a.sent <= a.size:
        p.error("--sent must be between 0 and --size")

    want = a.writers + a.readers + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(want, soft)), hard))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.monotonic()
    socks = []
    pattern = bytes(range(256)) * (a.sent // 256 + 1)
    for i in range(a.writers):
        s = connect(a)
        head, _ = write_head(fh, i * a.size, a.size, a.uid, a.gid)
        s.sendall(head + pattern[:a.sent])
        socks.append(s)
    for i in range(a.readers):
        s = connect(a)
        s.setblocking(False)
        calls = b"".join(read_call(fh, 0, a.read_size, a.uid, a.gid) for _ in range(a.reads))
        try:
            sent = s.send(calls)  # as much as the socket takes; the rest is dropped
        except BlockingIOError:
            sent = 0
        socks.append(s)
        if sent < len(calls) and i == 0:
            print(f"note: reader sent {sent} of {len(calls)} bytes of calls", file=sys.stderr)
    print(json.dumps({"writers": a.writers, "readers": a.readers, "fh": fh.hex(),
                      "setup_s": round(time.monotonic() - started, 3)}), flush=True)
    try:
        if a.hold > 0:
            time.sleep(a.hold)
        else:
            signal.pause()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
