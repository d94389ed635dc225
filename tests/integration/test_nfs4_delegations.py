"""NFSv4.1 delegations (issue 43, docs/nfs4-complete-design.md section C)
with a hand-encoded client that has a back channel, so that the test sees
each CB_RECALL and chooses to answer it or not:

- with `delegations = true` a read open gets a read delegation and an
  open of both a write one; off (the default), or without a back
  channel, none;
- another client's conflicting OPEN, a v3 WRITE (nfs-rs), I/O with the
  anonymous stateid, and every other conflicting call (another v4
  client's SETATTR, REMOVE, RENAME and LINK, a v3 client's, an NLM
  LOCK) wait (`NFS4ERR_DELAY`, `NFS3ERR_JUKEBOX`, NLM's grace-period
  denial) while the holder is called back, and go through once it
  returns the delegation; the file is unchanged until then;
- a holder that never answers loses the delegation within a lease: its
  stateid is `DELEG_REVOKED`, SEQUENCE says `RECALLABLE_STATE_REVOKED`
  until FREE_STATEID, and the conflicting open goes through.

The kernel client's side (caching with no calls on the wire, recalls it
answers) is tests/realclient/deleg.py's; pynfs's `deleg` tests are run
locally (docs/nfs4-complete-design.md)."""

from __future__ import annotations

import os
import struct
import threading
import time

import nfs_rs
import pytest
from rawrpc import opaque, read_record, u32, u64
from test_nfs4_ops import (OK, OP_DELEGRETURN, OP_FREE_STATEID, OP_GETATTR, OP_OPEN, OP_READ, OP_SEQUENCE,
                           OP_TEST_STATEID, V41, Server, _stop, local, lock_owner, op, putfh)
from metrics import scrape

pytestmark = pytest.mark.dionfs_only

DELAY, DELEG_REVOKED = 10008, 10087
OP_WRITE = 38
READ, WRITE, BOTH = 1, 2, 3
WANT_READ_DELEG, WANT_WRITE_DELEG = 0x0100, 0x0200
OPEN_DELEGATE_READ, OPEN_DELEGATE_WRITE, OPEN_DELEGATE_NONE_EXT = 1, 2, 3
RECALLABLE_STATE_REVOKED = 0x40
CB_SEQUENCE, CB_GETATTR, CB_RECALL = 11, 3, 4
FATTR4_CHANGE, FATTR4_SIZE = 3, 4


class Holder(V41):
    """V41 whose session has a back channel on its connection (AUTH_NONE
    callbacks). CB_COMPOUNDs the server sends are kept in `recalls` (the
    CB_RECALL stateids) as they arrive, answered only if `answering`."""

    def __init__(self, server, owner: bytes, answering: bool = True):
        self.answering = answering
        self.recalls: list[bytes] = []
        # CB_GETATTR: the handles asked about, and the (change, size)
        # answered.
        self.getattrs: list[bytes] = []
        self.cb_attrs: tuple[int, int] | None = (0, 0)  # None: CB_GETATTR not answered
        self.callbacks = 0
        super().__init__(server, owner, back_channel=True)

    def _callback(self, record: bytes) -> None:
        """A CB_NULL or CB_COMPOUND call from the server: noted, and
        answered if `answering`."""
        self.callbacks += 1
        xid, _, _, _, _, proc = struct.unpack(">IIIIII", record[:24])
        at = 24
        for _ in range(2):  # credential, verifier
            (_, n) = struct.unpack(">II", record[at:at + 8])
            at += 8 + n + (-n % 4)
        results = b""
        if proc == 1:
            (taglen,) = struct.unpack(">I", record[at:at + 4])
            at += 4 + taglen + (-taglen % 4) + 8  # tag, minorversion, callback_ident
            (nops,) = struct.unpack(">I", record[at:at + 4])
            at += 4
            ops = []
            for _ in range(nops):
                (num,) = struct.unpack(">I", record[at:at + 4])
                at += 4
                if num == CB_SEQUENCE:
                    session, seqid, slot, highest, _ = struct.unpack(">16sIIII", record[at:at + 32])
                    (lists,) = struct.unpack(">I", record[at + 32:at + 36])
                    assert lists == 0
                    at += 36
                    ops.append(u32(CB_SEQUENCE) + u32(OK) + session + u32(seqid) + u32(slot)
                               + u32(highest) + u32(highest))
                elif num == CB_GETATTR:
                    (n,) = struct.unpack(">I", record[at:at + 4])
                    self.getattrs.append(record[at + 4:at + 4 + n])
                    at += 4 + n + (-n % 4)
                    (words,) = struct.unpack(">I", record[at:at + 4])
                    asked = struct.unpack(f">{words}I", record[at + 4:at + 4 + 4 * words])
                    assert asked[0] == (1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE), asked
                    at += 4 + 4 * words
                    if self.cb_attrs is None:
                        return
                    change, size = self.cb_attrs
                    ops.append(u32(CB_GETATTR) + u32(OK) + u32(1) + u32(asked[0])
                               + opaque(u64(change) + u64(size)))
                elif num == CB_RECALL:
                    self.recalls.append(record[at:at + 16])
                    (n,) = struct.unpack(">I", record[at + 20:at + 24])
                    at += 24 + n + (-n % 4)
                    ops.append(u32(CB_RECALL) + u32(OK))
                else:
                    raise AssertionError(f"callback op {num}")
            results = u32(OK) + opaque(b"") + u32(len(ops)) + b"".join(ops)
        if not self.answering:
            return
        reply = struct.pack(">IIIIII", xid, 1, 0, 0, 0, 0) + results
        self.conn.send(struct.pack(">I", len(reply) | 0x8000_0000) + reply)

    def wait_recall(self, timeout: float = 15) -> bytes:
        """The next CB_RECALL's stateid, read from the connection."""
        self.serve_callbacks(lambda: self.recalls, timeout)
        return self.recalls.pop(0)

    def serve_callbacks(self, until, timeout: float = 15) -> None:
        """Callbacks read from the connection (and answered if
        `answering`) until `until()`."""
        self.conn.sock.settimeout(timeout)
        try:
            while not until():
                record = read_record(self.conn.sock)
                assert struct.unpack(">I", record[4:8])[0] == 0, "a reply nobody waits for"
                self._callback(record)
        finally:
            self.conn.sock.settimeout(30)

    def open_deleg(self, fh: bytes, access: int, want: int) -> tuple[bytes, int, bytes | None]:
        """OPEN (CLAIM_FH) of `fh` wanting a delegation: the open stateid,
        the delegation type and its stateid (None for none)."""
        self.opens += 1
        owner = lock_owner(self.clientid, b"deleg-owner-%d" % self.opens)
        args = u32(0) + u32(access | want) + u32(0) + owner + u32(0) + u32(4)
        opened = self.call([putfh(fh), op(OP_OPEN, args)]).of(OP_OPEN)
        return opened["stateid"], opened["delegation"], opened["deleg_stateid"]


def _open_status(client: V41, fh: bytes, access: int) -> int:
    client.opens += 1
    owner = lock_owner(client.clientid, b"rival-%d" % client.opens)
    args = u32(0) + u32(access | 0x0400) + u32(0) + owner + u32(0) + u32(4)
    return client.call([putfh(fh), op(OP_OPEN, args)]).last()[1]


def _delegations(srv: Server) -> int:
    for line in scrape(srv.metrics).splitlines():
        if line.startswith("dionfs_nfs4_delegations "):
            return int(line.split()[1])
    raise AssertionError("no dionfs_nfs4_delegations gauge")


def _start(tmp_path, lines: str, name: str) -> Server:
    export = tmp_path.resolve() / name / "export"
    export.mkdir(parents=True)
    os.chmod(export, 0o777)
    srv = Server({str(export): 'clients = ["127.0.0.1"]\nsquash = "no_root_squash"'}, lines)
    srv.start()
    return srv


@pytest.fixture
def deleg_server(tmp_path):
    srv = _start(tmp_path, "delegations = true\nlease_time = 10\n", "on")
    yield srv
    _stop(srv)


@pytest.fixture
def plain_server(tmp_path):
    srv = _start(tmp_path, "", "off")
    yield srv
    _stop(srv)


def _file(srv: Server, name: str, data: bytes = b"before\n") -> None:
    path = local(srv, "/" + name)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o666)


def _delegated(srv: Server, name: str, access: int = READ, answering: bool = True
               ) -> tuple[Holder, bytes, bytes]:
    """A file `name` made on the server and a Holder that opened it for
    `access` and got the delegation that access may have: (holder, fh,
    delegation stateid)."""
    _file(srv, name)
    holder = Holder(srv, b"holder-" + name.encode(), answering)
    fh = holder.fh(srv.export + "/" + name)
    want, expected = ((WANT_WRITE_DELEG, OPEN_DELEGATE_WRITE) if access == BOTH
                      else (WANT_READ_DELEG, OPEN_DELEGATE_READ))
    _, kind, deleg = holder.open_deleg(fh, access, want)
    assert kind == expected and deleg is not None
    return holder, fh, deleg


def test_no_delegation_when_off_or_without_a_back_channel(plain_server, deleg_server):
    _file(plain_server, "f")
    holder = Holder(plain_server, b"off-holder")
    _, kind, _ = holder.open_deleg(holder.fh(plain_server.export + "/f"), READ, WANT_READ_DELEG)
    assert kind == OPEN_DELEGATE_NONE_EXT
    _file(deleg_server, "f")
    # V41's session has no back channel: nothing to recall with.
    bare = V41(deleg_server, b"no-back-channel")
    bare.opens += 1
    args = (u32(0) + u32(READ | WANT_READ_DELEG) + u32(0)
            + lock_owner(bare.clientid, b"o") + u32(0) + u32(4))
    res = bare.call([putfh(bare.fh(deleg_server.export + "/f")), op(OP_OPEN, args)])
    assert res.status == OK
    assert res.of(OP_OPEN)["delegation"] == OPEN_DELEGATE_NONE_EXT
    assert _delegations(deleg_server) == 0


def test_a_write_only_open_gets_a_write_delegation_if_the_caller_may_read(deleg_server):
    srv = deleg_server
    _file(srv, "wo")
    holder = Holder(srv, b"write-only")
    fh = holder.fh(srv.export + "/wo")
    _, kind, deleg = holder.open_deleg(fh, WRITE, WANT_WRITE_DELEG)
    assert kind == OPEN_DELEGATE_WRITE and deleg is not None
    # The client reads from its cache under it, so it may READ with it.
    assert holder.read(fh, deleg).of(OP_READ)["data"] == b"before\n"
    # A file the caller may write but not read: none (knfsd's rule).
    _file(srv, "wo-only")
    os.chmod(local(srv, "/wo-only"), 0o622)
    _, kind, _ = holder.open_deleg(holder.fh(srv.export + "/wo-only"), WRITE, WANT_WRITE_DELEG)
    assert kind == OPEN_DELEGATE_NONE_EXT


def test_a_conflicting_open_waits_for_the_holder_to_return_it(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "f")
    assert _delegations(srv) == 1
    # The holder reads under it: its delegation stateid serves READ.
    assert holder.read(fh, deleg).of(OP_READ)["data"] == b"before\n"
    # Another client reading is no conflict; writing is.
    rival = V41(srv, b"rival")
    assert _open_status(rival, fh, READ) == OK
    assert _open_status(rival, fh, BOTH) == DELAY
    assert holder.wait_recall() == deleg
    # Recalled once: a retry sends no second CB_RECALL, and waits again.
    assert _open_status(rival, fh, BOTH) == DELAY
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert _delegations(srv) == 0
    assert _open_status(rival, fh, BOTH) == OK
    assert holder.recalls == []
    # Recalled in the last 30 s: no new delegation of the file.
    _, kind, _ = holder.open_deleg(fh, READ, WANT_READ_DELEG)
    assert kind == OPEN_DELEGATE_NONE_EXT


def test_a_write_delegation_is_recalled_by_a_reader(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "w", BOTH)
    rival = V41(srv, b"reader")
    assert _open_status(rival, fh, READ) == DELAY
    assert holder.wait_recall() == deleg
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert _open_status(rival, fh, READ) == OK


def _size_and_change(client: V41, fh: bytes) -> tuple[int, int] | int:
    """GETATTR of size and change: (size, change), or the failed status."""
    res = client.call([putfh(fh), op(OP_GETATTR, u32(1) + u32((1 << FATTR4_CHANGE) | (1 << FATTR4_SIZE)))])
    if res.last()[1] != OK:
        return res.last()[1]
    change, size = struct.unpack(">QQ", res.of(OP_GETATTR)["attrs"])
    return size, change


def _size_and_change_after_delay(client: V41, fh: bytes, seconds: float = 5) -> tuple[int, int] | int:
    """_size_and_change, asked again while DELAY (as a client does) for up
    to `seconds`: the holder's CB_GETATTR reply is read on its own
    connection, and a GETATTR sent the moment the holder has answered can
    come before the server has taken the answer in (DELAY then)."""
    deadline = time.monotonic() + seconds
    got = _size_and_change(client, fh)
    while got == DELAY and time.monotonic() < deadline:
        time.sleep(0.05)
        got = _size_and_change(client, fh)
    return got


def test_a_getattr_asks_the_write_delegation_s_holder(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "ga", BOTH)
    rival = V41(srv, b"stat-er")
    # Before: the server's own. The holder then says (CB_GETATTR) it has
    # 12345 bytes, changed in its cache and not sent (another change).
    assert _size_and_change(rival, fh) == DELAY
    holder.cb_attrs = (7, 12345)
    holder.serve_callbacks(lambda: holder.getattrs)
    assert holder.getattrs == [fh]
    server_change = os.stat(local(srv, "/ga")).st_ctime_ns
    got = _size_and_change_after_delay(rival, fh)
    assert isinstance(got, tuple) and got[0] == 12345, got
    # Its change moved on from the server's (the file's times are now).
    assert got[1] > (server_change // 10**9 << 30 | server_change % 10**9), got
    # Nothing recalled; the file on the server untouched.
    assert holder.recalls == [] and _delegations(srv) == 1
    assert os.stat(local(srv, "/ga")).st_size == len(b"before\n")
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert _size_and_change(rival, fh) == (len(b"before\n"), server_change // 10**9 << 30
                                           | server_change % 10**9)


def test_a_getattr_waits_for_the_holder_s_answer(deleg_server):
    """A holder that answers CB_GETATTR at once: the GETATTR that made
    the server ask gets the answer, not DELAY (the server waits up to
    30 ms for it, as knfsd does). Three tries, each with a delegation of
    its own, for a test host too slow once to answer in time; a server
    that does not wait answers DELAY to every one."""
    srv = deleg_server
    rival = V41(srv, b"stat-er")
    tries = []
    for n in range(3):
        holder, fh, deleg = _delegated(srv, f"gw{n}", BOTH)
        holder.cb_attrs = (7, 54321 + n)
        answering = threading.Thread(target=holder.serve_callbacks,
                                     args=(lambda h=holder: h.getattrs,), daemon=True)
        answering.start()
        started = time.monotonic()
        got = _size_and_change(rival, fh)
        tries.append((got, round(time.monotonic() - started, 3)))
        answering.join(timeout=20)
        assert not answering.is_alive() and holder.getattrs == [fh]
        assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
        if got != DELAY:
            assert isinstance(got, tuple) and got[0] == 54321 + n, tries
            break
    assert tries[-1][0] != DELAY, f"DELAY every time: {tries}"


def test_a_write_delegation_s_holder_that_does_not_tell_its_attributes_returns_it(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "gb", BOTH)
    holder.cb_attrs = None
    rival = V41(srv, b"stat-er")
    assert _size_and_change(rival, fh) == DELAY
    holder.serve_callbacks(lambda: holder.getattrs)
    # No answer within the callback's timeout (10 s): recalled instead.
    # (The holder renews its 10 s lease meanwhile: a courtesy client in
    # the way would be expired, not called back.)
    time.sleep(5)
    assert holder.call([]).status == OK
    assert holder.wait_recall(timeout=30) == deleg
    assert _size_and_change(rival, fh) == DELAY
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert _size_and_change(rival, fh)[0] == len(b"before\n")


def test_a_v3_write_waits_for_the_recall(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "v3")
    url = f"nfs://{srv.host}{srv.export}?version=3&nfsport={srv.nfs_port}&mountport={srv.mount_port}"
    v3 = nfs_rs.Client.connect(url, uid=1000, gid=1000, connect_timeout=10, operation_timeout=60)
    srv._clients.append(v3)
    done: list[object] = []
    jukebox: list[str] = []

    def write() -> None:
        # nfs-rs gives JUKEBOX back as an error: try again, as a kernel
        # client does.
        for _ in range(60):
            try:
                with v3.open("/v3", "r+b") as f:
                    f.write_at(b"AFTER", 0)
                done.append(True)
                return
            except nfs_rs.NfsError as e:
                jukebox.append(str(e))
                time.sleep(0.5)
        done.append(False)

    # (Looked at with stat alone while the file is delegated: an open by
    # this process would wait for the return, as any process's does.)
    mtime = os.stat(local(srv, "/v3")).st_mtime_ns
    writer = threading.Thread(target=write)
    writer.start()
    assert holder.wait_recall() == deleg
    time.sleep(1)
    assert os.stat(local(srv, "/v3")).st_mtime_ns == mtime, "written under a delegation not yet returned"
    assert not done
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    writer.join(60)
    assert done == [True], jukebox
    # NFS3ERR_JUKEBOX, as nfs-rs words it.
    assert jukebox and all("try again" in e for e in jukebox), jukebox
    with open(local(srv, "/v3"), "rb") as f:
        assert f.read() == b"AFTERe\n"


def test_a_holder_that_does_not_answer_loses_it_within_a_lease(deleg_server):
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "dead", answering=False)
    rival = V41(srv, b"waiting")
    start = time.monotonic()
    status = DELAY
    while status == DELAY and time.monotonic() - start < 60:
        status = _open_status(rival, fh, BOTH)
        # The holder keeps its lease (its callbacks go unanswered).
        holder.call([])
        time.sleep(1)
    waited = time.monotonic() - start
    assert status == OK, f"still {status} after {waited:.0f} s"
    # The callback times out (10 s), then a lease (10 s) from the recall.
    assert 5 < waited < 45, waited
    assert holder.callbacks >= 1
    res = holder.read(fh, deleg)
    assert res.last()[1] == DELEG_REVOKED
    assert res.of(OP_SEQUENCE)["flags"] & RECALLABLE_STATE_REVOKED
    assert holder.call([op(OP_TEST_STATEID, u32(1) + deleg)]).of(OP_TEST_STATEID)["codes"] == [DELEG_REVOKED]
    assert holder.call([op(OP_FREE_STATEID, deleg)]).last()[1] == OK
    assert not holder.call([]).of(OP_SEQUENCE)["flags"] & RECALLABLE_STATE_REVOKED
    assert _delegations(srv) == 0


def test_io_without_an_open_recalls_too(deleg_server):
    """A WRITE with the anonymous stateid (no OPEN to recall by) recalls
    the delegation itself; a READ with it does not recall a read one."""
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "anon")
    rival = V41(srv, b"anonymous-io")
    anonymous = bytes(16)
    read = op(OP_READ, anonymous + u64(0) + u32(100))
    assert rival.call([putfh(fh), read]).last()[1] == OK
    write = op(OP_WRITE, anonymous + u64(0) + u32(2) + opaque(b"ANON"))
    mtime = os.stat(local(srv, "/anon")).st_mtime_ns
    assert rival.call([putfh(fh), write]).last()[1] == DELAY
    assert holder.wait_recall() == deleg
    assert os.stat(local(srv, "/anon")).st_mtime_ns == mtime
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert rival.call([putfh(fh), write]).last()[1] == OK
    with open(local(srv, "/anon"), "rb") as f:
        assert f.read() == b"ANONre\n"


OP_SAVEFH, OP_SETATTR, OP_REMOVE, OP_RENAME, OP_LINK = 32, 34, 28, 29, 11
NLM_DENIED_GRACE = 4


def _v4_conflict(kind: str):
    """Another NFSv4.1 client's op on file `name`: its status."""
    def run(srv: Server, name: str) -> str:
        rival = getattr(srv, "_rival", None) or V41(srv, b"conflicting", uid=0, gid=0)
        srv._rival = rival
        d = rival.fh(srv.export)
        f = rival.fh(srv.export + "/" + name)
        ops = {
            "setattr": [putfh(f), op(OP_SETATTR, bytes(16) + u32(2) + u32(0) + u32(2) + opaque(u32(0o600)))],
            "remove": [putfh(d), op(OP_REMOVE, opaque(name.encode()))],
            "rename": [putfh(d), op(OP_SAVEFH), putfh(d),
                       op(OP_RENAME, opaque(name.encode()) + opaque(name.encode() + b".new"))],
            "link": [putfh(f), op(OP_SAVEFH), putfh(d), op(OP_LINK, opaque(name.encode() + b".link"))],
        }[kind]
        status = rival.call(ops).last()[1]
        return {OK: "ok", DELAY: "later"}.get(status, str(status))
    return run


def _v3_conflict(kind: str):
    """An NFSv3 client's (nfs-rs) call on file `name`: "ok" or "later"
    (NFS3ERR_JUKEBOX, which nfs-rs words "try again")."""
    def run(srv: Server, name: str) -> str:
        v3 = getattr(srv, "_v3", None)
        if v3 is None:
            url = f"nfs://{srv.host}{srv.export}?version=3&nfsport={srv.nfs_port}&mountport={srv.mount_port}"
            v3 = nfs_rs.Client.connect(url, uid=0, gid=0, connect_timeout=10, operation_timeout=60)
            srv._clients.append(v3)
            srv._v3 = v3
        try:
            {"setattr": lambda: v3.chmod("/" + name, 0o600),
             "remove": lambda: v3.remove("/" + name),
             "rename": lambda: v3.rename("/" + name, "/" + name + ".new"),
             "link": lambda: v3.link("/" + name, "/" + name + ".link")}[kind]()
            return "ok"
        except nfs_rs.NfsError as e:
            return "later" if "try again" in str(e) else str(e)
    return run


def _nlm_conflict(srv: Server, name: str) -> str:
    """An NLM LOCK of file `name`: "ok", or "later" (the grace-period
    denial, which Linux's lockd waits out and retries)."""
    from rawrpc import Conn, mnt
    from test_nlm import Nlm, S_GRANTED
    with Conn(srv.host, srv.mount_port, reserved=True) as m:
        _, root = mnt(m, srv.export)
    with Conn(srv.host, srv.nfs_port, reserved=True) as c:
        _, res = c.rpc(100003, 3, 3, opaque(root) + opaque(name.encode()), uid=0, gid=0)
    (n,) = struct.unpack(">I", res[4:8])
    fh = res[8:8 + n]
    status = Nlm(srv, b"nlm-host").lock(fh, 1, 0, 10)
    return {S_GRANTED: "ok", NLM_DENIED_GRACE: "later"}.get(status, str(status))


CONFLICTS = {f"v4-{k}": _v4_conflict(k) for k in ("setattr", "remove", "rename", "link")}
CONFLICTS.update({f"v3-{k}": _v3_conflict(k) for k in ("setattr", "remove", "rename", "link")})
CONFLICTS["nlm-lock"] = _nlm_conflict


@pytest.mark.parametrize("conflict", sorted(CONFLICTS))
def test_every_conflicting_call_recalls_and_waits(deleg_server, conflict):
    srv = deleg_server
    name = conflict.replace("-", "_")
    holder, fh, deleg = _delegated(srv, name)
    assert CONFLICTS[conflict](srv, name) == "later"
    assert holder.wait_recall() == deleg
    assert os.path.exists(local(srv, "/" + name))
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    assert CONFLICTS[conflict](srv, name) == "ok"


def test_a_process_on_the_server_opening_it_recalls_and_waits(deleg_server):
    """This test's own process is a process on the server: its open of
    the delegated file waits while the holder is called back, and goes on
    once the holder returns the delegation."""
    srv = deleg_server
    holder, fh, deleg = _delegated(srv, "local")
    opened: list[float] = []

    def local_write() -> None:
        start = time.monotonic()
        with open(local(srv, "/local"), "r+b") as f:
            opened.append(time.monotonic() - start)
            f.write(b"LOCAL")

    writer = threading.Thread(target=local_write)
    writer.start()
    assert holder.wait_recall() == deleg
    time.sleep(1)
    assert not opened, "the open went on with the delegation out"
    assert holder.call([putfh(fh), op(OP_DELEGRETURN, deleg)]).last()[1] == OK
    writer.join(30)
    assert opened and 1 <= opened[0] < 10, opened
    assert holder.read(fh, holder.open_deleg(fh, READ, 0x0400)[0]).of(OP_READ)["data"] == b"LOCALe\n"
