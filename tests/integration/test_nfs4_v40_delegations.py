"""NFSv4.0 delegations (issue 43, docs/nfs4-complete-design.md B4): a
minor version 0 client has no back channel; the server calls it back on a
connection of its own to the address its SETCLIENTID gave, once
SETCLIENTID_CONFIRM has made that address the client's (CB_NULL first).
A hand-encoded 4.0 client (test_nfs4_v40's V40) with a callback listener
of its own here sees each call:

- the probe (CB_NULL), then a read delegation on an open of a confirmed
  open-owner (a first OPEN awaiting OPEN_CONFIRM gets none, as knfsd);
- another client's conflicting OPEN waits (`NFS4ERR_DELAY`) while the
  server sends CB_RECALL (minor version 0, the client's
  `callback_ident`, the delegation's stateid) to that address, and goes
  through after DELEGRETURN; the holder's own write open recalls
  nothing;
- a callback address on another host than the client's, or none, gets
  no delegation;
- a holder that stops answering: RENEW answers `NFS4ERR_CB_PATH_DOWN`,
  and the delegation is revoked within a lease, the conflicting open
  then going through.

The kernel client's side is tests/realclient/deleg.py --vers 4.0; pynfs'
4.0 delegation tests are run locally (docs/nfs4-complete-design.md)."""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time

import pytest
from rawrpc import opaque, read_record, u32, u64
from test_nfs4_delegations import _delegations, _file
from test_nfs4_ops import Server, _stop, op, putfh
from test_nfs4_v40 import OK, OP_GETATTR, OP_OPEN, OP_OPEN_CONFIRM, OP_RENEW, V40

pytestmark = pytest.mark.dionfs_only

DELAY, BAD_STATEID, CB_PATH_DOWN = 10008, 10025, 10048
OP_DELEGRETURN = 8
READ, BOTH = 1, 3
OPEN4_RESULT_CONFIRM = 2
OPEN_DELEGATE_NONE, OPEN_DELEGATE_READ, OPEN_DELEGATE_WRITE = 0, 1, 2
CB_PROGRAM, CB_GETATTR, CB_RECALL = 0x4000_0000, 3, 4
SIZE_AND_CHANGE = (1 << 3) | (1 << 4)
IDENT = 0x1234


class Callbacks:
    """A callback listener on 127.0.0.1: each CB_NULL counted, each
    CB_COMPOUND's (minorversion, callback_ident, CB_RECALL stateid) kept,
    every call answered while `answering`."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.answering = True
        self.nulls = 0
        self.recalls: list[tuple[int, int, bytes]] = []
        # CB_GETATTR: the handles asked about; answered (change, size).
        self.getattrs: list[bytes] = []
        self.attrs = (7, 12345)
        self.cond = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def addr(self) -> bytes:
        return b"127.0.0.1.%d.%d" % (self.port >> 8, self.port & 0xFF)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    rec = read_record(conn)
                except (OSError, ConnectionError, struct.error):
                    return
                xid, _, _, prog, vers, proc = struct.unpack(">IIIIII", rec[:24])
                assert (prog, vers) == (CB_PROGRAM, 1), (prog, vers)
                at = 24
                for _ in range(2):  # credential, verifier
                    (_, n) = struct.unpack(">II", rec[at:at + 8])
                    at += 8 + n + (-n % 4)
                results = b""
                with self.cond:
                    if proc == 0:
                        self.nulls += 1
                    else:
                        (taglen,) = struct.unpack(">I", rec[at:at + 4])
                        at += 4 + taglen + (-taglen % 4)
                        minor, ident, nops = struct.unpack(">III", rec[at:at + 12])
                        at += 12
                        ops = b""
                        for _ in range(nops):
                            (num,) = struct.unpack(">I", rec[at:at + 4])
                            if num == CB_GETATTR:
                                (n,) = struct.unpack(">I", rec[at + 4:at + 8])
                                self.getattrs.append(rec[at + 8:at + 8 + n])
                                at += 8 + n + (-n % 4)
                                (words,) = struct.unpack(">I", rec[at:at + 4])
                                (mask,) = struct.unpack(">I", rec[at + 4:at + 8])
                                at += 4 + 4 * words
                                ops += (u32(CB_GETATTR) + u32(OK) + u32(1) + u32(mask)
                                        + opaque(u64(self.attrs[0]) + u64(self.attrs[1])))
                                continue
                            assert num == CB_RECALL, f"callback op {num}"
                            self.recalls.append((minor, ident, rec[at + 4:at + 20]))
                            (n,) = struct.unpack(">I", rec[at + 24:at + 28])
                            at += 28 + n + (-n % 4)
                            ops += u32(CB_RECALL) + u32(OK)
                        results = u32(OK) + opaque(b"") + u32(nops) + ops
                    self.cond.notify_all()
                    answering = self.answering
                if answering:
                    reply = struct.pack(">IIIIII", xid, 1, 0, 0, 0, 0) + results
                    conn.sendall(u32(len(reply) | 0x8000_0000) + reply)

    def wait(self, cond, timeout: float = 15) -> bool:
        with self.cond:
            return self.cond.wait_for(cond, timeout)

    def close(self) -> None:
        self.sock.close()


def open4(seqid: int, clientid: int, owner: bytes, name: bytes, access: int) -> bytes:
    """OPEN4args: `access`, deny none, `owner`, no create, CLAIM_NULL."""
    return (u32(seqid) + u32(access) + u32(0) + u64(clientid) + opaque(owner) + u32(0)
            + u32(0) + opaque(name))


class Holder40(V40):
    """V40 whose SETCLIENTID gives `callback` (cb_program, address,
    callback_ident): its Callbacks' address unless told otherwise."""

    def __init__(self, server, client_id: bytes, callbacks: Callbacks, addr: bytes | None = None):
        self.callback = (CB_PROGRAM, addr or callbacks.addr(), IDENT)
        super().__init__(server, client_id)

    def open_confirmed(self, dir_fh: bytes, fh: bytes, owner: bytes, name: bytes, access: int) -> dict:
        """A new open-owner's first OPEN (which awaits OPEN_CONFIRM, and
        so gets no delegation) confirmed, then its second OPEN's result."""
        first = self.compound([putfh(dir_fh), op(OP_OPEN, open4(0, self.clientid, owner, name, access))])
        body = first.of(OP_OPEN)
        assert body["rflags"] & OPEN4_RESULT_CONFIRM and body["delegation"] == OPEN_DELEGATE_NONE, body
        confirm = self.compound([putfh(fh), op(OP_OPEN_CONFIRM, body["stateid"] + u32(1))])
        assert confirm.last() == (OP_OPEN_CONFIRM, OK), confirm.ops
        return self.compound([putfh(dir_fh), op(OP_OPEN, open4(2, self.clientid, owner, name, access))]).of(OP_OPEN)


class Rival:
    """Another 4.0 client (no callback path), opening with a new owner
    each time (so that no seqid is in question)."""

    def __init__(self, server):
        self.c = V40(server, b"rival-v40")
        self.n = 0

    def open_status(self, dir_fh: bytes, name: bytes, access: int) -> int:
        self.n += 1
        res = self.c.compound([putfh(dir_fh), op(OP_OPEN, open4(0, self.c.clientid, b"r%d" % self.n, name,
                                                                 access))])
        return res.last()[1]


@pytest.fixture
def deleg_server(tmp_path):
    export = tmp_path.resolve() / "export"
    export.mkdir()
    os.chmod(export, 0o777)
    srv = Server({str(export): 'clients = ["127.0.0.1"]\nsquash = "no_root_squash"'},
                 "delegations = true\nlease_time = 10\n")
    with open(srv.config) as f:
        text = f.read()
    with open(srv.config, "w") as f:
        f.write(re.sub(r"^versions = .*$", 'versions = ["3", "4.0", "4.1", "4.2"]', text, count=1,
                       flags=re.M))
    srv.start()
    yield srv
    _stop(srv)


def _delegated(srv, name: str, callbacks: Callbacks) -> tuple[Holder40, bytes, bytes, bytes]:
    """A file `name` and a Holder40 with a read delegation of it: (holder,
    export fh, file fh, delegation stateid)."""
    _file(srv, name)
    holder = Holder40(srv, b"holder-" + name.encode(), callbacks)
    # SETCLIENTID_CONFIRM has the server probe the address.
    assert callbacks.wait(lambda: callbacks.nulls >= 1), "no CB_NULL probe"
    time.sleep(0.2)  # the probe's answer read by the server
    dir_fh, fh = holder.fh(srv.export), holder.fh(srv.export + "/" + name)
    opened = holder.open_confirmed(dir_fh, fh, b"owner", name.encode(), READ)
    assert opened["delegation"] == OPEN_DELEGATE_READ, opened
    return holder, dir_fh, fh, opened["deleg_stateid"]


def test_a_v40_client_is_called_back_at_its_address(deleg_server):
    srv = deleg_server
    callbacks = Callbacks()
    holder, dir_fh, fh, deleg = _delegated(srv, "f", callbacks)
    assert _delegations(srv) == 1
    # The holder's own write open (another owner) is no conflict.
    first = holder.compound([putfh(dir_fh), op(OP_OPEN, open4(0, holder.clientid, b"writer", b"f", BOTH))])
    assert first.last() == (OP_OPEN, OK), first.ops
    time.sleep(0.5)
    assert callbacks.recalls == []
    # Another client's is: it waits while the holder is called back.
    rival = Rival(srv)
    assert rival.open_status(dir_fh, b"f", BOTH) == DELAY
    assert callbacks.wait(lambda: callbacks.recalls)
    assert callbacks.recalls == [(0, IDENT, deleg)]
    assert rival.open_status(dir_fh, b"f", BOTH) == DELAY
    assert holder.compound([putfh(fh), op(OP_DELEGRETURN, deleg)]).last() == (OP_DELEGRETURN, OK)
    assert _delegations(srv) == 0
    assert rival.open_status(dir_fh, b"f", BOTH) == OK
    assert len(callbacks.recalls) == 1
    callbacks.close()


def _size(client: V40, fh: bytes) -> int:
    """GETATTR of size and change (PUTFH, GETATTR: no clientid or
    stateid in the COMPOUND): the size, or the failed status as a
    negative number."""
    res = client.compound([putfh(fh), op(OP_GETATTR, u32(1) + u32(SIZE_AND_CHANGE))])
    if res.last() != (OP_GETATTR, OK):
        return -res.last()[1]
    return struct.unpack(">QQ", res.of(OP_GETATTR)["attrs"])[1]


def test_a_write_delegation_s_holder_is_asked_for_its_size(deleg_server):
    srv = deleg_server
    _file(srv, "w")
    callbacks = Callbacks()
    holder = Holder40(srv, b"holder-w", callbacks)
    assert callbacks.wait(lambda: callbacks.nulls >= 1), "no CB_NULL probe"
    time.sleep(0.2)
    dir_fh, fh = holder.fh(srv.export), holder.fh(srv.export + "/w")
    opened = holder.open_confirmed(dir_fh, fh, b"owner", b"w", BOTH)
    assert opened["delegation"] == OPEN_DELEGATE_WRITE, opened
    # The holder's own GETATTR names no client, but comes on its
    # connection: no callback, the server's attributes.
    assert _size(holder, fh) == len(b"before\n")
    assert callbacks.getattrs == [] and callbacks.recalls == []
    # Another client's: the holder is asked (CB_GETATTR) and the server
    # waits up to 30 ms for its answer, the size the holder has; DELAY
    # if the answer comes later, and the size on the retry, which the
    # answer serves without asking again.
    other = V40(srv, b"stat-er-v40")
    first = _size(other, fh)
    assert first in (12345, -DELAY), first
    assert callbacks.wait(lambda: callbacks.getattrs)
    time.sleep(0.2)
    assert _size(other, fh) == 12345
    assert callbacks.getattrs == [fh]
    assert callbacks.recalls == [] and _delegations(srv) == 1
    holder.close()
    other.close()
    callbacks.close()


def test_no_delegation_without_a_callback_address_of_the_client_s_own(deleg_server):
    srv = deleg_server
    _file(srv, "g")
    callbacks = Callbacks()
    for n, addr in enumerate((b"192.0.2.1.8.1", b"0.0.0.0.0.0", b"not an address")):
        client = Holder40(srv, b"elsewhere-%d" % n, callbacks, addr=addr)
        dir_fh, fh = client.fh(srv.export), client.fh(srv.export + "/g")
        opened = client.open_confirmed(dir_fh, fh, b"owner", b"g", READ)
        assert opened["delegation"] == OPEN_DELEGATE_NONE, (addr, opened)
        client.close()
    assert callbacks.nulls == 0
    assert _delegations(srv) == 0
    callbacks.close()


def test_a_holder_that_stops_answering_loses_it_within_a_lease(deleg_server):
    srv = deleg_server
    callbacks = Callbacks()
    holder, dir_fh, fh, deleg = _delegated(srv, "h", callbacks)
    assert holder.compound([op(OP_RENEW, u64(holder.clientid))]).last() == (OP_RENEW, OK)
    callbacks.answering = False
    rival = Rival(srv)
    assert rival.open_status(dir_fh, b"h", BOTH) == DELAY
    assert callbacks.wait(lambda: callbacks.recalls)
    # The recall went unanswered (a tenth of the 10 s lease, at least
    # 1 s): the path is down, which RENEW tells a client holding
    # delegations (RFC 7530 section 16.29.4).
    renew = [op(OP_RENEW, u64(holder.clientid))]
    deadline = time.monotonic() + 10
    while holder.compound(renew).last() != (OP_RENEW, CB_PATH_DOWN):
        assert time.monotonic() < deadline, "RENEW never said CB_PATH_DOWN"
        time.sleep(0.5)
    # Revoked within a lease of the recall: the rival's open goes through,
    # the stateid is gone (minor version 0 has no FREE_STATEID).
    deadline = time.monotonic() + 25
    while rival.open_status(dir_fh, b"h", BOTH) != OK:
        assert time.monotonic() < deadline, "the delegation was never revoked"
        time.sleep(1)
    assert _delegations(srv) == 0
    back = holder.compound([putfh(fh), op(OP_DELEGRETURN, deleg)])
    assert back.last() == (OP_DELEGRETURN, BAD_STATEID), back.ops
    # Holding none, the client hears nothing of its path from RENEW.
    assert holder.compound(renew).last() == (OP_RENEW, OK)
    callbacks.close()
