"""A raw NFSv4.1 client over tests/lib/rawrpc.py: EXCHANGE_ID,
CREATE_SESSION, SEQUENCE and the few ops the power-cut test sends (OPEN
with CLAIM_NULL or CLAIM_PREVIOUS, WRITE, COMMIT, RENAME, CLOSE,
LOOKUP, GETFH, RECLAIM_COMPLETE), with a known client owner, which no
client library lets a test choose.

Results are decoded as far as the test reads them: each COMPOUND's
status, and the op results up to the last one whose body is known
(`Compound.results`).
"""

from __future__ import annotations

import struct

from rawrpc import Conn, opaque, u32, u64

NFS4_PROGRAM, NFS_V4 = 100003, 4

# nfs_opnum4
OP_CLOSE, OP_COMMIT, OP_GETFH, OP_LOOKUP, OP_OPEN = 4, 5, 10, 15, 18
OP_PUTFH, OP_PUTROOTFH, OP_RENAME, OP_SAVEFH, OP_WRITE = 22, 24, 29, 32, 38
OP_EXCHANGE_ID, OP_CREATE_SESSION, OP_SEQUENCE, OP_RECLAIM_COMPLETE = 42, 43, 53, 58

# nfsstat4
OK, NOENT, DELAY, GRACE, NO_GRACE, RECLAIM_BAD = 0, 2, 10008, 10013, 10033, 10034

SHARE_ACCESS_BOTH, SHARE_DENY_NONE = 3, 0
UNSTABLE, FILE_SYNC = 0, 2


class Nfs4Error(RuntimeError):
    def __init__(self, what: str, status: int):
        super().__init__(f"{what}: nfsstat4 {status}")
        self.status = status


class Compound:
    """A COMPOUND's reply: `status`, and (opnum, status, body offset) of
    each result decoded, over `raw`."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.status, tag_len = struct.unpack(">II", raw[:8])
        at = 8 + tag_len + (-tag_len % 4)
        (numres,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        self.results: list[tuple[int, int, int]] = []
        for _ in range(numres):
            op, status = struct.unpack(">II", raw[at:at + 8])
            at += 8
            self.results.append((op, status, at))
            if status != OK:
                break
            size = _ok_size(op, raw, at)
            if size is None:
                break  # a body not decoded: the test reads nothing after it
            at += size

    def body(self, opnum: int) -> bytes:
        for op, status, at in self.results:
            if op == opnum:
                if status != OK:
                    raise Nfs4Error(f"op {opnum}", status)
                return self.raw[at:]
        raise Nfs4Error(f"op {opnum} not answered", self.status)


def _ok_size(op: int, raw: bytes, at: int) -> int | None:
    """Bytes of a successful result's body after its status, when fixed
    or easily found."""
    if op in (OP_PUTFH, OP_PUTROOTFH, OP_LOOKUP, OP_SAVEFH, OP_RECLAIM_COMPLETE):
        return 0
    if op == OP_SEQUENCE:
        return 16 + 5 * 4
    if op == OP_GETFH:
        (n,) = struct.unpack(">I", raw[at:at + 4])
        return 4 + n + (-n % 4)
    if op == OP_WRITE:
        return 4 + 4 + 8
    if op == OP_COMMIT:
        return 8
    if op == OP_CLOSE:
        return 16
    if op == OP_RENAME:
        return 2 * 20
    return None


def stateid(body: bytes) -> bytes:
    """The stateid4 a body starts with."""
    return body[:16]


class Client:
    """One client owner, one connection, one session with one slot."""

    def __init__(self, host: str, port: int, owner: bytes, verifier: bytes = b"powercut",
                 uid: int = 1000, gid: int = 1000):
        self.conn = Conn(host, port)
        self.owner = owner
        self.verifier = verifier
        self.auth = {"uid": uid, "gid": gid}
        self.session = b""
        self.seqid = 1

    def close(self) -> None:
        self.conn.close()

    def call(self, ops: list[bytes]) -> Compound:
        args = opaque(b"") + u32(1) + u32(len(ops)) + b"".join(ops)
        accept, res = self.conn.rpc(NFS4_PROGRAM, NFS_V4, 1, args, **self.auth)
        assert accept == 0, f"accept_stat {accept}"
        return Compound(res)

    def sequenced(self, ops: list[bytes]) -> Compound:
        seq = u32(OP_SEQUENCE) + self.session + u32(self.seqid) + u32(0) + u32(0) + u32(0)
        res = self.call([seq] + ops)
        if res.results and res.results[0][:2] == (OP_SEQUENCE, OK):
            self.seqid += 1
        return res

    def establish(self) -> None:
        """EXCHANGE_ID and CREATE_SESSION."""
        eid = (u32(OP_EXCHANGE_ID) + self.verifier + opaque(self.owner)
               + u32(0x00010000)  # EXCHGID4_FLAG_USE_NON_PNFS
               + u32(0)  # SP4_NONE
               + u32(0))  # no client_impl_id
        body = self.call([eid]).body(OP_EXCHANGE_ID)
        clientid, sequence = struct.unpack(">QI", body[:12])
        fore = u32(0) + u32(1 << 20) + u32(1 << 20) + u32(4096) + u32(16) + u32(1) + u32(0)
        back = u32(0) + u32(4096) + u32(4096) + u32(0) + u32(2) + u32(1) + u32(0)
        cs = (u32(OP_CREATE_SESSION) + u64(clientid) + u32(sequence) + u32(0) + fore + back
              + u32(0x40000000) + u32(1) + u32(0))  # one sec_parms: AUTH_NONE
        body = self.call([cs]).body(OP_CREATE_SESSION)
        self.session = body[:16]
        self.seqid = 1

    def reclaim_complete(self) -> int:
        return self.sequenced([u32(OP_RECLAIM_COMPLETE) + u32(0)]).status

    def lookup_path(self, path: str) -> bytes:
        """The handle of `path` from the pseudo-root."""
        ops = [u32(OP_PUTROOTFH)]
        ops += [u32(OP_LOOKUP) + opaque(p.encode()) for p in path.split("/") if p]
        ops.append(u32(OP_GETFH))
        body = self.sequenced(ops).body(OP_GETFH)
        (n,) = struct.unpack(">I", body[:4])
        return body[4:4 + n]

    def lookup(self, dir_fh: bytes, name: str) -> bytes:
        body = self.sequenced([putfh(dir_fh), u32(OP_LOOKUP) + opaque(name.encode()),
                               u32(OP_GETFH)]).body(OP_GETFH)
        (n,) = struct.unpack(">I", body[:4])
        return body[4:4 + n]

    def open_owner(self, name: bytes) -> bytes:
        return u64(0) + opaque(name)

    def create(self, dir_fh: bytes, name: str, owner: bytes) -> bytes:
        """OPEN (create, UNCHECKED4, no attributes) of `name`: its stateid."""
        op = (u32(OP_OPEN) + u32(0) + u32(SHARE_ACCESS_BOTH) + u32(SHARE_DENY_NONE)
              + self.open_owner(owner)
              + u32(1) + u32(0) + u32(0) + u32(0)  # OPEN4_CREATE, UNCHECKED4, empty fattr4
              + u32(0) + opaque(name.encode()))  # CLAIM_NULL
        return stateid(self.sequenced([putfh(dir_fh), op]).body(OP_OPEN))

    def reclaim_open(self, fh: bytes, owner: bytes) -> Compound:
        """OPEN CLAIM_PREVIOUS of the file `fh` (no delegation held)."""
        op = (u32(OP_OPEN) + u32(0) + u32(SHARE_ACCESS_BOTH) + u32(SHARE_DENY_NONE)
              + self.open_owner(owner)
              + u32(0)  # OPEN4_NOCREATE
              + u32(1) + u32(0))  # CLAIM_PREVIOUS, OPEN_DELEGATE_NONE
        return self.sequenced([putfh(fh), op])

    def write(self, fh: bytes, sid: bytes, offset: int, data: bytes, stable: int) -> None:
        op = u32(OP_WRITE) + sid + u64(offset) + u32(stable) + opaque(data)
        body = self.sequenced([putfh(fh), op]).body(OP_WRITE)
        (count,) = struct.unpack(">I", body[:4])
        assert count == len(data), f"WRITE of {len(data)} wrote {count}"

    def commit(self, fh: bytes) -> None:
        self.sequenced([putfh(fh), u32(OP_COMMIT) + u64(0) + u32(0)]).body(OP_COMMIT)

    def close_file(self, fh: bytes, sid: bytes) -> None:
        self.sequenced([putfh(fh), u32(OP_CLOSE) + u32(0) + sid]).body(OP_CLOSE)

    def rename(self, dir_fh: bytes, old: str, new: str) -> None:
        ops = [putfh(dir_fh), u32(OP_SAVEFH), u32(OP_RENAME) + opaque(old.encode())
               + opaque(new.encode())]
        self.sequenced(ops).body(OP_RENAME)


def putfh(fh: bytes) -> bytes:
    return u32(OP_PUTFH) + opaque(fh)
