"""ONC RPC over a raw TCP socket, for calls no client library sends: oversized
arguments, forged handles, a chosen source port.

Only what the tests need: AUTH_SYS (or AUTH_NONE) calls as single-fragment
records, replies read whole, the accept status and the results split off.
The one place the tests (and bench/stall.py) encode RPC calls.
"""

from __future__ import annotations

import random
import socket
import struct

NFS_PROGRAM, NFS_V3 = 100003, 3
MOUNT_PROGRAM, MOUNT_V3 = 100005, 3
PORTMAP_PROGRAM, PORTMAP_V2 = 100000, 2

# accept_stat (RFC 5531)
SUCCESS, PROG_UNAVAIL, PROG_MISMATCH, PROC_UNAVAIL, GARBAGE_ARGS = 0, 1, 2, 3, 4

IPPORT_RESERVED = 1024


def u32(v: int) -> bytes:
    return struct.pack(">I", v)


def u64(v: int) -> bytes:
    return struct.pack(">Q", v)


def opaque(b: bytes) -> bytes:
    """XDR variable-length opaque: length, bytes, zero padding."""
    return u32(len(b)) + b + b"\0" * (-len(b) % 4)


# A credential or verifier of flavor AUTH_NONE (RFC 5531): no body.
AUTH_NONE = u32(0) + u32(0)


def auth_sys(uid: int, gid: int, gids: list[int] | tuple[int, ...] = (),
             machine: bytes = b"rawrpc") -> bytes:
    """An AUTH_SYS credential (RFC 5531 appendix A): flavor and body."""
    body = u32(0) + opaque(machine) + u32(uid) + u32(gid) + u32(len(gids))
    body += b"".join(u32(g) for g in gids)
    return u32(1) + opaque(body)


def record(body: bytes) -> bytes:
    """`body` as one record: a last-fragment mark, then the bytes."""
    return u32(0x80000000 | len(body)) + body


def call_header(xid: int, prog: int, vers: int, proc: int, cred: bytes) -> bytes:
    """A call message up to its arguments: `cred`, an AUTH_NONE verifier."""
    return (u32(xid) + u32(0) + u32(2) + u32(prog) + u32(vers) + u32(proc)
            + cred + AUTH_NONE)


def call(xid: int, prog: int, vers: int, proc: int, args: bytes = b"",
         uid: int = 1000, gid: int = 1000, cred: bytes | None = None) -> bytes:
    """One call as one record, AUTH_SYS as uid/gid unless `cred` is given
    (e.g. AUTH_NONE), AUTH_NONE verifier."""
    if cred is None:
        cred = auth_sys(uid, gid)
    return record(call_header(xid, prog, vers, proc, cred) + args)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the server")
        buf += chunk
    return bytes(buf)


def read_record(s: socket.socket) -> bytes:
    out = b""
    last = False
    while not last:
        (word,) = struct.unpack(">I", recv_exact(s, 4))
        last = bool(word & 0x80000000)
        out += recv_exact(s, word & 0x7FFFFFFF)
    return out


def parse_reply(reply: bytes) -> tuple[int, int, bytes]:
    """(xid, accept_stat, results) of an accepted reply; asserts it is one."""
    xid, mtype, stat = struct.unpack(">III", reply[:12])
    assert (mtype, stat) == (1, 0), f"not an accepted reply: {reply[:32].hex()}"
    _flavor, vlen = struct.unpack(">II", reply[12:20])
    at = 20 + vlen + (-vlen % 4)
    (accept,) = struct.unpack(">I", reply[at:at + 4])
    return xid, accept, reply[at + 4:]


def connect(host: str, port: int, reserved: bool = False, timeout: float = 30,
            source: str | None = None) -> socket.socket:
    """A connection from an ordinary (ephemeral) source port, or from a free
    reserved one (below 1024; needs root). A reserved one is closed with a
    reset, so that the port is not held in TIME_WAIT after the test.
    `source`: the local address to call from (another loopback address,
    to be another client)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source is not None and not reserved:
        s.bind((source, 0))
    if reserved:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for p in random.sample(range(600, IPPORT_RESERVED), IPPORT_RESERVED - 600):
            try:
                s.bind((source or host, p))
                break
            except OSError:
                continue
        else:
            s.close()
            raise RuntimeError("no free reserved port")
    s.settimeout(timeout)
    s.connect((host, port))
    return s


class Conn:
    """One RPC connection: `rpc(prog, vers, proc, args)` sends a call and
    returns (accept_stat, results)."""

    def __init__(self, host: str, port: int, reserved: bool = False, timeout: float = 30,
                 source: str | None = None):
        self.sock = connect(host, port, reserved, timeout, source)
        self.xid = random.randrange(1 << 20)

    @property
    def source_port(self) -> int:
        return self.sock.getsockname()[1]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self, xid: int) -> tuple[int, bytes]:
        got, accept, results = parse_reply(read_record(self.sock))
        assert got == xid, f"reply for xid {got}, expected {xid}"
        return accept, results

    def rpc(self, prog: int, vers: int, proc: int, args: bytes = b"", **auth) -> tuple[int, bytes]:
        self.xid += 1
        self.send(call(self.xid, prog, vers, proc, args, **auth))
        return self.reply(self.xid)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def mnt(conn: Conn, path: str) -> tuple[int, bytes | None]:
    """MOUNT3 MNT: (mountstat3, root handle or None)."""
    accept, res = conn.rpc(MOUNT_PROGRAM, MOUNT_V3, 1, opaque(path.encode()))
    assert accept == SUCCESS, f"MNT accept_stat {accept}"
    (status,) = struct.unpack(">I", res[:4])
    if status != 0:
        return status, None
    (n,) = struct.unpack(">I", res[4:8])
    return 0, res[8:8 + n]


def nfs_status(results: bytes) -> int:
    """The nfsstat3 that starts every NFSv3 result but NULL's."""
    return struct.unpack(">I", results[:4])[0]
