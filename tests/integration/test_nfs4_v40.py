"""NFSv4.0 (RFC 7530, minor version 0) against `dionfs serve --config`
whose `versions` list has "4.0", with clients written elsewhere:

- nfs-rs (`?version=4.0`): names, metadata and data, with the server's
  per-operation counts (`/metrics`) showing the 4.0 state ops it sent
  (SETCLIENTID, SETCLIENTID_CONFIRM, OPEN, OPEN_CONFIRM, CLOSE);
- libnfs 4.0.0 (Debian's nfs-cp, nfs-ls, nfs-cat; `?version=4` is 4.0);
- an nfs-rs 4.0 client and a 4.1 client on one file.

Raw COMPOUNDs (tests/lib/rawrpc.py) cover what no library sends: the open
owner's seqid (OPEN_CONFIRM, BAD_SEQID, a retransmitted CLOSE answered
from the owner's last reply), RENEW, a 4.1 op in a 4.0 COMPOUND and the
other way round, minor version 0 on a server not serving it, and the 4.0
`acl` attribute (nfs-rs has only the 4.1 `dacl` one).

The server runs on a temporary directory (ext4 here, which keeps POSIX
ACLs): no loop devices."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess

import nfs_rs
import pytest
from nfs_rs import Acl41Flags, NfsAcl41
from rawrpc import SUCCESS, Conn, call as rpc_call, opaque, parse_reply, read_record, u32, u64
from test_nfs4_ops import V41, Sent, Server, _bitmap_at, _opaque_at, _stop, op, putfh

pytestmark = pytest.mark.dionfs_only

# nfsstat4 (RFC 7530 section 13; OP_NOT_IN_SESSION is RFC 8881's)
OK, NOTSUPP, MINOR_VERS_MISMATCH = 0, 10004, 10021
BAD_STATEID, BAD_SEQID, OP_ILLEGAL, OP_NOT_IN_SESSION = 10025, 10026, 10044, 10071

# nfs_opnum4 (RFC 7530 section 16; 53 is RFC 8881's SEQUENCE)
OP_CLOSE, OP_GETATTR, OP_GETFH, OP_LOOKUP, OP_OPEN, OP_OPEN_CONFIRM = 4, 9, 10, 15, 18, 20
OP_PUTFH, OP_PUTROOTFH, OP_READ, OP_RENEW, OP_SETATTR = 22, 24, 25, 30, 34
OP_SETCLIENTID, OP_SETCLIENTID_CONFIRM, OP_SEQUENCE, OP_ILLEGAL = 35, 36, 53, 10044

OPEN4_RESULT_CONFIRM = 2
FATTR4_ACL = 12
# nfsace4 (RFC 7530 section 6.2.1)
ALLOW = 0
IDENTIFIER_GROUP = 0x40
R, W, X = 0x1, 0x2 | 0x4, 0x20  # READ_DATA, WRITE_DATA | APPEND_DATA, EXECUTE
ANYONE = 0x80 | 0x20000 | 0x100000  # READ_ATTRIBUTES, READ_ACL, SYNCHRONIZE

ALL_VERSIONS = ("3", "4.0", "4.1", "4.2")


class V40Server(Server):
    """test_nfs4_ops's Server (metrics, `ops()`) on one export, serving
    `versions`: minor version 0 only when they name "4.0"."""

    def __init__(self, export: str, versions=ALL_VERSIONS):
        super().__init__({export: 'clients = ["127.0.0.1"]'})
        with open(self.config) as f:
            text = f.read()
        listed = ", ".join(f'"{v}"' for v in versions)
        text = re.sub(r"^versions = .*$", f"versions = [{listed}]", text, count=1, flags=re.M)
        with open(self.config, "w") as f:
            f.write(text)

    def v4(self, version: str = "4.0", uid: int = 1000, gid: int = 1000):
        """An nfs-rs client of `version` on the export (closed at teardown).
        From an ordinary source port: the export is not `secure`, and the
        reserved ports are shared with every other test run here."""
        url = (f"nfs://{self.host}{self.export}?version={version}&nfsport={self.nfs_port}"
               f"&noresvport=true")
        c = nfs_rs.Client.connect(url, uid=uid, gid=gid, connect_timeout=10, operation_timeout=60)
        self._clients.append(c)
        return c

    def libnfs_url(self, path: str) -> str:
        """A libnfs URL of `path` in the export over NFSv4 (4.0 in libnfs
        4.0.0: no MOUNT, straight to the NFS port)."""
        return f"nfs://{self.host}{self.export}/{path}?version=4&nfsport={self.nfs_port}"

    def local(self, path: str) -> str:
        return os.path.join(self.export, path)


def _start(tmp_path, versions=ALL_VERSIONS) -> V40Server:
    export = tmp_path.resolve() / "export"
    export.mkdir()
    os.chmod(export, 0o777)
    srv = V40Server(str(export), versions)
    srv.start()
    return srv


@pytest.fixture
def server(tmp_path):
    srv = _start(tmp_path)
    yield srv
    _stop(srv)


def slurp(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- nfs-rs


def test_nfs_rs_sets_up_a_v40_client_and_confirms_its_opens(server):
    with Sent(server) as s:
        c = server.v4()
        assert c.version == nfs_rs.Version.NFS_V4_0
        with c.open("f", "wb") as f:
            f.write(b"hello over NFSv4.0\n")
    for name in ("SETCLIENTID", "SETCLIENTID_CONFIRM", "OPEN", "OPEN_CONFIRM", "WRITE", "CLOSE"):
        assert s.ops.get(name, 0) >= 1, (name, s.ops)
    # Minor version 0 has no sessions: none of 4.1's ops went by.
    for name in ("EXCHANGE_ID", "CREATE_SESSION", "SEQUENCE", "RECLAIM_COMPLETE"):
        assert name not in s.ops, (name, s.ops)
    assert slurp(server.local("f")) == b"hello over NFSv4.0\n"


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 65_537, (1 << 20) + 7, 3 * (1 << 20) + 123])
def test_nfs_rs_writes_and_reads_back_over_v40(server, size):
    c = server.v4()
    data = os.urandom(size)
    with c.open("data", "wb") as f:
        f.write(data)
    assert slurp(server.local("data")) == data, "the server's disk differs from what was written"
    with c.open("data", "rb") as f:
        assert f.read() == data
    assert c.stat("data").size == size
    if size > 10:
        with c.open("data", "r+b") as f:
            f.write_at(b"XYZ", size // 2)
            assert f.read_at(size // 2 - 1, 5) == data[size // 2 - 1:size // 2] + b"XYZ" + \
                data[size // 2 + 3:size // 2 + 4]
        assert slurp(server.local("data")) == data[:size // 2] + b"XYZ" + data[size // 2 + 3:]


def test_nfs_rs_names_and_metadata_over_v40(server):
    c = server.v4()
    c.mkdir("d", 0o750)
    st = os.stat(server.local("d"))
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o750, 1000, 1000)
    with c.open("d/f", "wb") as f:
        f.write(b"x" * 1234)
    st = c.stat("d/f")
    want = os.stat(server.local("d/f"))
    assert (st.type, st.size, st.fileid, st.uid, st.gid) == \
        (nfs_rs.FileType.FILE, 1234, want.st_ino, 1000, 1000)
    assert (st.owner, st.group) == ("1000", "1000"), "numeric owner strings (the default idmap)"
    assert st.mode & 0o7777 == want.st_mode & 0o7777

    c.symlink("over/there", "d/l")
    assert c.readlink("d/l") == "over/there"
    assert os.readlink(server.local("d/l")) == "over/there"
    c.link("d/f", "d/hard")
    assert c.stat("d/f").nlink == 2 and os.stat(server.local("d/hard")).st_ino == want.st_ino
    c.rename("d/hard", "d/moved")
    assert sorted(c.listdir("d")) == ["f", "l", "moved"]
    assert sorted(os.listdir(server.local("d"))) == ["f", "l", "moved"]

    c.chmod("d/f", 0o604)
    c.truncate("d/f", 10)
    got = os.stat(server.local("d/f"))
    assert (got.st_mode & 0o7777, got.st_size) == (0o604, 10)
    assert c.stat("d/f").mode & 0o7777 == 0o604

    with pytest.raises(nfs_rs.NfsError):
        c.rmdir("d")  # not empty
    for name in ("d/f", "d/l", "d/moved"):
        c.remove(name)
    c.rmdir("d")
    assert os.listdir(server.export) == []
    with pytest.raises(FileNotFoundError):
        c.stat("d")


def test_listing_the_export_root_with_nfs_rs_is_badname(server):
    # nfs-rs lists the root it mounted as LOOKUP "." from it, and "." is
    # no name in NFSv4: BADNAME, as knfsd's check_filename and Ganesha
    # answer. A subdirectory lists.
    os.mkdir(server.local("sub"))
    c = server.v4()
    for root in ("/", ""):
        with pytest.raises(nfs_rs.NfsError) as e:
            c.listdir(root)
        assert e.value.code_name == "NFS4ERR_BADNAME", e.value
    assert c.listdir("sub") == []


# ---------------------------------------------------------------- libnfs


def libnfs(*args: str) -> str:
    for tool in ("nfs-cp", "nfs-ls", "nfs-cat"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian package libnfs-utils)")
    r = subprocess.run(list(args), capture_output=True, timeout=60)
    assert r.returncode == 0, (args, r.returncode, r.stdout[-500:], r.stderr[-500:])
    return r.stdout.decode(errors="replace")


def test_libnfs_copies_lists_and_reads_over_v40(server, tmp_path):
    # libnfs 4.0.0 cannot WRITE 4 KiB or more over v4 (its tools fail
    # with "Failed to write to dest file"), so only small files go to the
    # server and the large ones come from it.
    with Sent(server) as s:
        for size in (1, 100, 3000):
            src = tmp_path / f"up-{size}"
            src.write_bytes(os.urandom(size))
            assert f"copied {size} bytes" in libnfs("nfs-cp", str(src), server.libnfs_url(f"up-{size}"))
            assert slurp(server.local(f"up-{size}")) == src.read_bytes(), size
    for name in ("SETCLIENTID", "SETCLIENTID_CONFIRM", "OPEN", "OPEN_CONFIRM", "WRITE", "CLOSE"):
        assert s.ops.get(name, 0) >= 1, (name, s.ops)

    for size in (4096, (1 << 20) + 1, 3 * (1 << 20) + 5):
        data = os.urandom(size)
        with open(server.local(f"down-{size}"), "wb") as f:
            f.write(data)
        dst = tmp_path / f"down-{size}"
        assert f"copied {size} bytes" in libnfs("nfs-cp", server.libnfs_url(f"down-{size}"), str(dst))
        assert dst.read_bytes() == data, size

    os.mkdir(server.local("dir"))
    for name in ("alpha", "beta"):
        with open(server.local(f"dir/{name}"), "w") as f:
            f.write(name)
    os.mkdir(server.local("dir/gamma"))
    listing = libnfs("nfs-ls", server.libnfs_url("dir"))
    names = sorted(line.split()[-1] for line in listing.splitlines() if line.strip())
    assert names == ["alpha", "beta", "gamma"], listing
    assert any(line.startswith("d") and line.endswith(" gamma") for line in listing.splitlines()), listing
    assert libnfs("nfs-cat", server.libnfs_url("dir/beta")) == "beta"


# ---------------------------------------------------- a 4.0 and a 4.1 client


def test_a_v40_and_a_v41_client_share_a_file(server):
    v40, v41 = server.v4("4.0"), server.v4("4.1")
    assert (v40.version, v41.version) == (nfs_rs.Version.NFS_V4_0, nfs_rs.Version.NFS_V4_1)
    a, b = os.urandom(300_000), os.urandom(70_000)
    with v40.open("shared", "wb") as f:
        f.write(a)
    with v41.open("shared", "rb") as f:
        assert f.read() == a
    with v41.open("shared", "r+b") as f:
        f.write_at(b, 250_000)
    with v40.open("shared", "rb") as f:
        assert f.read() == a[:250_000] + b
    # Both open at once.
    with v40.open("shared", "r+b") as f40, v41.open("shared", "r+b") as f41:
        f40.write_at(b"4.0", 0)
        assert f41.read_at(0, 3) == b"4.0"
        f41.write_at(b"4.1", 3)
        assert f40.read_at(0, 6) == b"4.04.1"
    assert slurp(server.local("shared")) == b"4.04.1" + a[6:250_000] + b
    assert v40.stat("shared").size == v41.stat("shared").size == 320_000


# ------------------------------------------------------ raw NFSv4.0 calls


def walk(path: str) -> list[bytes]:
    """PUTROOTFH and a LOOKUP per component of `path`."""
    return [op(OP_PUTROOTFH)] + [op(OP_LOOKUP, opaque(p.encode())) for p in path.split("/") if p]


class Reply:
    """A COMPOUND's status and its results' (opnum, status, body), decoded
    up to the first failed one (the last, RFC 7530 section 15.2)."""

    def __init__(self, raw: bytes):
        self.status, tag_len = struct.unpack(">II", raw[:8])
        at = 8 + tag_len + (-tag_len % 4)
        (n,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        self.ops: list[tuple[int, int, dict]] = []
        for _ in range(n):
            num, status = struct.unpack(">II", raw[at:at + 8])
            at += 8
            body = {}
            if status == OK:
                body, at = _body(num, raw, at)
            self.ops.append((num, status, body))
            if status != OK:
                break

    def last(self) -> tuple[int, int]:
        return self.ops[-1][:2]

    def of(self, num: int) -> dict:
        for n, status, body in self.ops:
            if n == num:
                assert status == OK, (num, status, self.ops)
                return body
        raise AssertionError(f"no result of op {num}: {self.ops}")


def _body(num: int, raw: bytes, at: int) -> tuple[dict, int]:
    """A successful result's body, for the ops sent here."""
    if num == OP_SETCLIENTID:
        return {"clientid": struct.unpack(">Q", raw[at:at + 8])[0], "verifier": raw[at + 8:at + 16]}, at + 16
    if num == OP_GETFH:
        fh, at = _opaque_at(raw, at)
        return {"fh": fh}, at
    if num == OP_OPEN:
        # stateid, change_info4, rflags, attrset, open_delegation4
        stateid = raw[at:at + 16]
        (rflags,) = struct.unpack(">I", raw[at + 36:at + 40])
        at = _bitmap_at(raw, at + 40)
        (deleg,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        deleg_stateid = None
        if deleg in (1, 2):  # OPEN_DELEGATE_READ, _WRITE: stateid, recall, ...
            deleg_stateid = raw[at:at + 16]
            at += 20
            if deleg == 2:  # nfs_space_limit4: limitby, then 8 bytes either way
                at += 12
            at += 12  # nfsace4: type, flag, mask, then who
            _, at = _opaque_at(raw, at)
        else:
            assert deleg == 0, f"OPEN_DELEGATE {deleg} in minor version 0"
        return {"stateid": stateid, "rflags": rflags, "delegation": deleg,
                "deleg_stateid": deleg_stateid}, at
    if num in (OP_OPEN_CONFIRM, OP_CLOSE):
        return {"stateid": raw[at:at + 16]}, at + 16
    if num == OP_READ:
        (eof,) = struct.unpack(">I", raw[at:at + 4])
        data, at = _opaque_at(raw, at + 4)
        return {"eof": bool(eof), "data": data}, at
    if num == OP_GETATTR:
        attrs, at = _opaque_at(raw, _bitmap_at(raw, at))
        return {"attrs": attrs}, at
    if num == OP_SETATTR:
        return {}, _bitmap_at(raw, at)
    return {}, at  # results that are their status alone


class V40:
    """A hand-encoded NFSv4.0 client on one TCP connection, AUTH_SYS as
    uid/gid 1000: `compound(ops)`, and SETCLIENTID (no callback path,
    as libnfs sends it) then SETCLIENTID_CONFIRM as `client_id`."""

    # SETCLIENTID's callback: cb_program, netaddr4 (netid, universal
    # address), callback_ident. None: no callback path, as libnfs sends.
    callback: tuple[int, bytes, int] | None = None

    def __init__(self, server, client_id: bytes | None = None):
        self.conn = Conn(server.host, server.nfs_port)
        self.clientid = None
        if client_id is not None:
            self.clientid = self.setclientid(client_id)

    def compound(self, ops: list[bytes], minor: int = 0) -> Reply:
        self.conn.xid += 1
        args = opaque(b"v40-test") + u32(minor) + u32(len(ops)) + b"".join(ops)
        self.conn.send(rpc_call(self.conn.xid, 100003, 4, 1, args, uid=1000, gid=1000))
        xid, accept, res = parse_reply(read_record(self.conn.sock))
        assert (xid, accept) == (self.conn.xid, SUCCESS)
        return Reply(res)

    @staticmethod
    def setclientid_op(client_id: bytes, callback: tuple[int, bytes, int] | None = None) -> bytes:
        program, addr, ident = callback or (0, b"0.0.0.0.0.0", 0)
        callback = u32(program) + opaque(b"tcp") + opaque(addr)
        return op(OP_SETCLIENTID, b"verifier" + opaque(client_id) + callback + u32(ident))

    def setclientid(self, client_id: bytes) -> int:
        res = self.compound([self.setclientid_op(client_id, self.callback)]).of(OP_SETCLIENTID)
        confirm = self.compound([op(OP_SETCLIENTID_CONFIRM, u64(res["clientid"]) + res["verifier"])])
        assert confirm.status == OK, confirm.ops
        return res["clientid"]

    def fh(self, path: str) -> bytes:
        return self.compound(walk(path) + [op(OP_GETFH)]).of(OP_GETFH)["fh"]

    def close(self):
        self.conn.close()


def open_args(seqid: int, clientid: int, owner: bytes, name: bytes) -> bytes:
    """OPEN4args: share both, deny none, `owner`, no create, CLAIM_NULL `name`."""
    return u32(seqid) + u32(3) + u32(0) + u64(clientid) + opaque(owner) + u32(0) + u32(0) + opaque(name)


def test_setclientid_open_confirm_and_the_open_owner_s_seqid(server):
    with open(server.local("f"), "wb") as f:
        f.write(b"0123456789")
    os.chmod(server.local("f"), 0o666)
    with Sent(server) as s:
        c = V40(server, b"raw-v40-client")
    assert s.ops.get("SETCLIENTID") == 1 and s.ops.get("SETCLIENTID_CONFIRM") == 1, s.ops
    export = c.fh(server.export)
    fh = c.fh(server.export + "/f")
    owner = b"raw-open-owner"

    # A new open owner's first OPEN (seqid 0) must be confirmed (RFC 7530
    # "Use of Open Confirmation"), and its stateid is good for nothing
    # until then.
    opened = c.compound([putfh(export), op(OP_OPEN, open_args(0, c.clientid, owner, b"f")), op(OP_GETFH)])
    body = opened.of(OP_OPEN)
    assert body["rflags"] & OPEN4_RESULT_CONFIRM, body
    assert opened.of(OP_GETFH)["fh"] == fh
    unconfirmed = body["stateid"]
    read = c.compound([putfh(fh), op(OP_READ, unconfirmed + u64(0) + u32(100))])
    assert read.last() == (OP_READ, BAD_STATEID), read.ops
    sid = c.compound([putfh(fh), op(OP_OPEN_CONFIRM, unconfirmed + u32(1))]).of(OP_OPEN_CONFIRM)["stateid"]
    assert sid[4:] == unconfirmed[4:] and sid[:4] != unconfirmed[:4], (sid.hex(), unconfirmed.hex())
    assert c.compound([putfh(fh), op(OP_READ, sid + u64(0) + u32(100))]).of(OP_READ)["data"] == b"0123456789"

    # The owner's next seqid is 2: 5 is BAD_SEQID ("Sequencing of Lock
    # Requests"), which does not use a seqid up.
    bad = c.compound([putfh(fh), op(OP_CLOSE, u32(5) + sid)])
    assert bad.last() == (OP_CLOSE, BAD_SEQID), bad.ops
    close = [putfh(fh), op(OP_CLOSE, u32(2) + sid)]
    assert c.compound(close).last() == (OP_CLOSE, OK)
    # The same CLOSE again (a new xid, so no RPC reply cache): the owner's
    # seqid says replay, and its last reply is the answer ("Recovery from
    # Replayed Requests").
    with Sent(server) as s:
        again = c.compound(close)
    assert again.last() == (OP_CLOSE, OK), again.ops
    assert s.ops.get("CLOSE") == 1, s.ops
    # The owner outlives its last open (for that replay), so a wrong seqid
    # is still BAD_SEQID, as knfsd; the stateid itself is gone.
    bad = c.compound([putfh(fh), op(OP_CLOSE, u32(5) + sid)])
    assert bad.last() == (OP_CLOSE, BAD_SEQID), bad.ops
    read = c.compound([putfh(fh), op(OP_READ, sid + u64(0) + u32(100))])
    assert read.last() == (OP_READ, BAD_STATEID), read.ops
    # A confirmed owner's next OPEN (seqid 3) needs no confirming.
    reopened = c.compound([putfh(export), op(OP_OPEN, open_args(3, c.clientid, owner, b"f"))])
    assert not reopened.of(OP_OPEN)["rflags"] & OPEN4_RESULT_CONFIRM, reopened.ops

    # RENEW of the client's id.
    with Sent(server) as s:
        assert c.compound([op(OP_RENEW, u64(c.clientid))]).last() == (OP_RENEW, OK)
    assert s.ops.get("RENEW") == 1, s.ops
    c.close()


def test_a_v41_op_in_a_v40_compound_is_illegal(server):
    c = V40(server)
    sequence = op(OP_SEQUENCE, bytes(16) + u32(1) + u32(0) + u32(0) + u32(0))
    res = c.compound([op(OP_PUTROOTFH), sequence])
    # RFC 7530 section 15.2 and its ILLEGAL op: an opnum outside 4.0's is
    # answered as OP_ILLEGAL with NFS4ERR_OP_ILLEGAL, and the COMPOUND
    # stops there.
    assert res.status == OP_ILLEGAL, res.ops
    assert [r[:2] for r in res.ops] == [(OP_PUTROOTFH, OK), (OP_ILLEGAL, OP_ILLEGAL)], res.ops
    c.close()


def test_v40_s_own_ops_are_not_supported_in_v41(server):
    # In a session, RFC 8881 section 15.2 leaves 4.0's SETCLIENTID,
    # SETCLIENTID_CONFIRM, RENEW and OPEN_CONFIRM one error: NOTSUPP.
    c = V41(server, b"a-v41-client")
    for name, args in (("SETCLIENTID", V40.setclientid_op(b"in-a-session")),
                       ("SETCLIENTID_CONFIRM", op(OP_SETCLIENTID_CONFIRM, u64(c.clientid) + b"verifier")),
                       ("RENEW", op(OP_RENEW, u64(c.clientid))),
                       ("OPEN_CONFIRM", op(OP_OPEN_CONFIRM, bytes(16) + u32(1)))):
        res = c.call([op(OP_PUTROOTFH), args])
        assert res.ops[-1][1] == NOTSUPP and res.ops[-1][0] == struct.unpack(">I", args[:4])[0], \
            (name, res.ops)
    c.close()
    # Without a session the first op is checked before anything else
    # (RFC 8881 section 18.46.3): only SEQUENCE and the session-making
    # ops may come first, anything else is OP_NOT_IN_SESSION, SETCLIENTID
    # too (knfsd's nfs41_check_op_ordering answers so as well).
    raw = V40(server)
    res = raw.compound([V40.setclientid_op(b"wrong-minor-version")], minor=1)
    assert (res.status, res.last()) == (OP_NOT_IN_SESSION, (OP_SETCLIENTID, OP_NOT_IN_SESSION)), res.ops
    raw.close()


def test_a_server_without_v40_answers_minor_vers_mismatch(tmp_path):
    srv = _start(tmp_path, versions=("3", "4.1", "4.2"))
    try:
        c = V40(srv)
        # RFC 7530 section 15.2: a minor version not served is
        # MINOR_VERS_MISMATCH with no results; minor version 1 is served.
        res = c.compound([op(OP_PUTROOTFH), op(OP_GETFH)])
        assert (res.status, res.ops) == (MINOR_VERS_MISMATCH, []), (res.status, res.ops)
        assert c.compound([op(OP_PUTROOTFH)], minor=1).status != MINOR_VERS_MISMATCH
        c.close()
    finally:
        _stop(srv)


# ------------------------------------------------------------------ ACLs


def getfacl(path: str) -> list[str]:
    """The server's view: `getfacl -n` entries, comments left out."""
    out = subprocess.run(["getfacl", "-n", "-p", "-c", path], check=True, capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith("#")]


def encode_acl(aces: list[tuple[int, int, int, str]]) -> bytes:
    """fattr4 with only `acl`: bitmap, then the nfsace4 array as attrlist."""
    attrs = u32(len(aces)) + b"".join(u32(t) + u32(fl) + u32(m) + opaque(who.encode())
                                      for t, fl, m, who in aces)
    return u32(1) + u32(1 << FATTR4_ACL) + opaque(attrs)


def decode_acl(attrs: bytes) -> list[tuple[int, int, int, str]]:
    (n,) = struct.unpack(">I", attrs[:4])
    at, aces = 4, []
    for _ in range(n):
        t, fl, m = struct.unpack(">III", attrs[at:at + 12])
        who, at = _opaque_at(attrs, at + 12)
        aces.append((t, fl, m, who.decode()))
    return aces


def test_the_v40_acl_attribute_is_the_posix_acl(server):
    # nfs-rs reaches ACLs only as 4.1's `dacl`, and over 4.0 refuses it
    # ("DACL requires NFSv4.1") once it has looked the path up, asking
    # the server nothing more, though the server lists `acl` among its
    # supported attributes: so the 4.0 `acl` attribute goes by hand.
    c = server.v4()
    c.touch("mine")
    assert c.capabilities.acl is True
    with Sent(server) as s:
        with pytest.raises(nfs_rs.NfsUnsupportedError):
            c.getdacl("mine")
        with pytest.raises(nfs_rs.NfsUnsupportedError):
            c.setdacl("mine", NfsAcl41(Acl41Flags(0), ()))
    assert set(s.ops) <= {"COMPOUND", "PUTFH", "LOOKUP", "GETFH", "GETATTR", "RENEW"}, s.ops

    path = server.local("mine")
    os.chmod(path, 0o600)
    raw = V40(server)
    fh = raw.fh(server.export + "/mine")
    anonymous = bytes(16)
    aces = [(ALLOW, 0, R | W, "OWNER@"), (ALLOW, 0, R, "1001"), (ALLOW, 0, R, "GROUP@"),
            (ALLOW, IDENTIFIER_GROUP, R | W, "50"), (ALLOW, 0, 0, "EVERYONE@")]
    with Sent(server) as s:
        res = raw.compound([putfh(fh), op(OP_SETATTR, anonymous + encode_acl(aces))])
    assert res.last() == (OP_SETATTR, OK), res.ops
    assert s.ops.get("SETATTR") == 1, s.ops
    assert getfacl(path) == [
        "user::rw-", "user:1001:r--", "group::r--", "group:50:rw-", "mask::rw-", "other::---",
    ]

    subprocess.run(["setfacl", "-m", "u:1002:rx", path], check=True)
    got = raw.compound([putfh(fh), op(OP_GETATTR, u32(1) + u32(1 << FATTR4_ACL))]).of(OP_GETATTR)
    back = decode_acl(got["attrs"])
    assert (ALLOW, 0, ANYONE | R, "1001") in back, back
    assert (ALLOW, 0, ANYONE | R | X, "1002") in back, back
    assert (ALLOW, IDENTIFIER_GROUP, ANYONE | R | W, "50") in back, back
    raw.close()
