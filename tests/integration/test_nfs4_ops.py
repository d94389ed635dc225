"""NFSv4.1 operations one by one against `dionfs serve --config`, with the
server's per-operation call counts (`/metrics`) showing which ops a step
sent (issue 42).

nfs-rs (`?version=4.1`) drives what its API reaches: EXCHANGE_ID,
CREATE_SESSION, RECLAIM_COMPLETE, SEQUENCE, PUTROOTFH/PUTFH, LOOKUP, GETFH,
GETATTR, SETATTR, ACCESS, OPEN, WRITE, COMMIT, READ, CLOSE, CREATE, LINK,
SAVEFH, RENAME, REMOVE, READDIR, READLINK, DESTROY_SESSION and
DESTROY_CLIENTID. It has no lock, stateid or raw COMPOUND API, so `V41`
here (a few ops encoded by hand over tests/lib/rawrpc.py) drives the rest
that needs the real server: an NLM (v3) lock against a v4 lock, lease
expiry with and without a conflicting client, the session reply cache
for a retransmitted non-idempotent COMPOUND, bad stateids, PUTPUBFH,
RESTOREFH, SECINFO, BIND_CONN_TO_SESSION, BACKCHANNEL_CTL and
DELEGRETURN (test_nfs4_delegations.py has the delegations themselves;
crates/server/tests/nfs4_rare_ops.rs sends those and the
retransmission to an in-process server as well). The other ops (LOOKUPP, VERIFY, NVERIFY, OPEN_DOWNGRADE,
LOCK/LOCKT/LOCKU in depth, the OPEN create modes, SECINFO_NO_NAME, the
4.2 ops) are tested with the raw Rust client in crates/server/tests/.

The server runs on a temporary directory: no loop devices."""

from __future__ import annotations

import os
import re
import struct
import time

import nfs_rs
import pytest
from metrics import free_port, scrape
from rawrpc import Conn, opaque, parse_reply, read_record, u32, u64, call as rpc_call, SUCCESS
from test_nfs4_metadata import V4Server
from test_nlm import S_DENIED, S_GRANTED, Nlm, file_fh, local_denied
from wait import wait_until

pytestmark = pytest.mark.dionfs_only

# nfsstat4 (RFC 8881 section 15.1)
OK, NOENT = 0, 2
NOTSUPP, DENIED, NOFILEHANDLE = 10004, 10010, 10020
STALE_STATEID, OLD_STATEID, BAD_STATEID = 10023, 10024, 10025
LOCKS_HELD, BADSESSION, SEQ_MISORDERED = 10037, 10052, 10063
RETRY_UNCACHED_REP, CLIENTID_BUSY = 10068, 10074

# nfs_opnum4
(OP_CLOSE, OP_CREATE, OP_DELEGRETURN, OP_GETATTR, OP_GETFH, OP_LOCK, OP_LOCKT,
 OP_LOCKU, OP_LOOKUP) = 4, 6, 8, 9, 10, 12, 13, 14, 15
OP_OPEN, OP_PUTFH, OP_PUTPUBFH, OP_PUTROOTFH, OP_READ, OP_REMOVE = 18, 22, 23, 24, 25, 28
OP_RESTOREFH, OP_SAVEFH, OP_SECINFO = 31, 32, 33
OP_BACKCHANNEL_CTL, OP_BIND_CONN, OP_EXCHANGE_ID, OP_CREATE_SESSION = 40, 41, 42, 43
OP_DESTROY_SESSION, OP_FREE_STATEID, OP_SEQUENCE, OP_TEST_STATEID = 44, 45, 53, 55
OP_DESTROY_CLIENTID, OP_RECLAIM_COMPLETE = 57, 58

WRITE_LT = 2
CONN_BACK_CHAN = 0x2  # CREATE_SESSION4_FLAG_CONN_BACK_CHAN
AUTH_SYS = 1


class Server(V4Server):
    """V4Server with metrics on a free port and `server_lines` added to
    its `[server]` table (e.g. `lease_time = 10`)."""

    def __init__(self, exports: dict[str, str], server_lines: str = ""):
        super().__init__(exports)
        self.metrics = f"127.0.0.1:{free_port()}"
        with open(self.config) as f:
            text = f.read()
        text = text.replace("versions =", f'metrics_listen = "{self.metrics}"\n{server_lines}versions =', 1)
        with open(self.config, "w") as f:
            f.write(text)

    def ops(self) -> dict[str, int]:
        """NFSv4 operations (and COMPOUND) served so far, by name."""
        return {m.group(1): int(m.group(2)) for m in re.finditer(
            r'^dionfs_call_seconds_count\{program="nfs4",procedure="(\w+)"\} (\d+)$',
            scrape(self.metrics), re.M)}


class Sent:
    """`with Sent(server) as s:` ... `s.ops`: the ops served in the block."""

    def __init__(self, server: Server):
        self.server = server

    def __enter__(self):
        self.before = self.server.ops()
        return self

    def __exit__(self, *exc):
        after = self.server.ops()
        self.ops = {k: v - self.before.get(k, 0) for k, v in after.items() if v != self.before.get(k, 0)}


def _start(tmp_path, server_lines: str = "") -> Server:
    export = tmp_path.resolve() / "export"
    export.mkdir()
    os.chmod(export, 0o777)
    srv = Server({str(export): 'clients = ["127.0.0.1"]'}, server_lines)
    srv.start()
    return srv


def _stop(srv: Server):
    srv.close_clients()
    code = srv.stop()
    srv.cleanup()
    assert code == 0, f"dionfs exited with {code} after SIGTERM"


@pytest.fixture
def server(tmp_path):
    srv = _start(tmp_path)
    yield srv
    _stop(srv)


@pytest.fixture
def short_lease(tmp_path):
    """A server whose clients' leases are 10 s (the shortest allowed)."""
    srv = _start(tmp_path, "lease_time = 10\n")
    yield srv
    _stop(srv)


def local(server, path: str) -> str:
    return server.export + path


# ---------------------------------------------------------------- nfs-rs


def test_a_client_sets_up_and_ends_its_session(server):
    with Sent(server) as s:
        c = server.v4()
        assert c.stat("/").fileid == os.stat(server.export).st_ino
    for op in ("EXCHANGE_ID", "CREATE_SESSION", "RECLAIM_COMPLETE", "SEQUENCE", "PUTROOTFH",
               "LOOKUP", "GETFH", "GETATTR"):
        assert s.ops.get(op, 0) >= 1, (op, s.ops)
    assert c.health.lease_healthy is not False
    with Sent(server) as s:
        c.close()
    assert s.ops.get("DESTROY_SESSION") == 1 and s.ops.get("DESTROY_CLIENTID") == 1, s.ops


def test_getattr_and_setattr(server):
    c = server.v4()
    path = "/f"
    with open(local(server, path), "wb") as f:
        f.write(b"x" * 1234)
    os.chown(local(server, path), 1000, 1000)
    with Sent(server) as s:
        st = c.stat(path)
    assert s.ops.get("GETATTR", 0) >= 1, s.ops
    want = os.stat(local(server, path))
    assert (st.type, st.size, st.fileid, st.uid, st.gid, st.nlink) == \
        (nfs_rs.FileType.FILE, 1234, want.st_ino, 1000, 1000, 1)
    assert st.mode & 0o7777 == want.st_mode & 0o7777
    assert st.mtime == want.st_mtime_ns

    with Sent(server) as s:
        c.chmod(path, 0o640)
        c.truncate(path, 10)
        c.utime(path, ns=(1_000_000_123, 2_000_000_456))
    assert s.ops.get("SETATTR") == 3, s.ops
    got = os.stat(local(server, path))
    assert (got.st_mode & 0o7777, got.st_size) == (0o640, 10)
    assert (got.st_atime_ns, got.st_mtime_ns) == (1_000_000_123, 2_000_000_456)
    assert c.stat(path).mtime == 2_000_000_456
    # Not the owner's to give away (NFS4ERR_PERM), nor root's when squashed.
    with pytest.raises(PermissionError):
        c.chown(path, 2000, 2000)
    with pytest.raises(PermissionError):
        server.v4(uid=0, gid=0).chown(path, 0, 0)
    with pytest.raises(PermissionError):
        server.v4(uid=2000, gid=2000).chmod(path, 0o777)
    assert os.stat(local(server, path)).st_uid == 1000
    assert os.stat(local(server, path)).st_mode & 0o7777 == 0o640


def test_access_answers_for_the_caller_and_a_squashed_root(server):
    path = "/private"
    with open(local(server, path), "wb") as f:
        f.write(b"secret")
    os.chown(local(server, path), 1000, 1000)
    os.chmod(local(server, path), 0o640)
    owner, other, root = server.v4(), server.v4(uid=2000, gid=2000), server.v4(uid=0, gid=0)
    same_group = server.v4(uid=2000, gid=1000)
    with Sent(server) as s:
        assert owner.access(path, os.R_OK | os.W_OK)
    assert s.ops.get("ACCESS") == 1, s.ops
    assert not owner.access(path, os.X_OK)
    assert same_group.access(path, os.R_OK)
    assert not same_group.access(path, os.W_OK)
    assert not other.access(path, os.R_OK)
    assert not root.access(path, os.R_OK), "root is squashed to nobody"
    # What ACCESS refused, OPEN refuses too (NFS4ERR_ACCESS).
    with pytest.raises(PermissionError):
        other.open(path, "rb")
    with pytest.raises(PermissionError):
        root.open(path, "rb")
    with pytest.raises(PermissionError):
        same_group.open(path, "r+b")
    with same_group.open(path, "rb") as f:
        assert f.read() == b"secret"


def test_open_write_commit_read_close(server):
    c = server.v4()
    path = "/data"
    data = os.urandom(300_000)
    with Sent(server) as s:
        with c.open(path, "wb") as f:
            f.write(data)
    for op in ("OPEN", "WRITE", "CLOSE"):
        assert s.ops.get(op, 0) >= 1, (op, s.ops)
    with open(local(server, path), "rb") as f:
        assert f.read() == data
    with Sent(server) as s:
        with c.open(path, "rb") as f:
            assert f.read_at(123_456, 1000) == data[123_456:124_456]
            assert f.read_at(len(data) - 10, 100) == data[-10:]
            assert f.read_at(len(data) + 10, 100) == b""
    assert s.ops.get("READ", 0) >= 2 and s.ops.get("CLOSE") == 1, s.ops
    with Sent(server) as s:
        with c.open(path, "r+b") as f:
            f.write_at(b"ABC", 5)
    assert s.ops.get("WRITE") == 1 and s.ops.get("COMMIT") == 1, s.ops
    with open(local(server, path), "rb") as f:
        assert f.read(10) == data[:5] + b"ABC" + data[8:10]
    with c.open(path, "ab") as f:
        f.write(b"tail")
    assert os.path.getsize(local(server, path)) == len(data) + 4
    # OPEN of a missing name without create, and of a directory.
    with pytest.raises(FileNotFoundError):
        c.open("/missing", "rb")
    os.mkdir(local(server, "/dir"))
    with pytest.raises(IsADirectoryError) as e:
        c.open("/dir", "rb")
    assert e.value.code_name == "NFS4ERR_ISDIR", e.value
    # Creating opens on a read-only file of someone else.
    os.chmod(local(server, path), 0o644)
    os.chown(local(server, path), 1000, 1000)
    with pytest.raises(PermissionError):
        server.v4(uid=2000, gid=2000).open(path, "wb")
    assert os.path.getsize(local(server, path)) == len(data) + 4


def test_create_makes_directories_and_symlinks(server):
    c = server.v4()
    with Sent(server) as s:
        c.mkdir("/d", 0o750)
        c.symlink("../some/where", "/d/l")
    assert s.ops.get("CREATE") == 2, s.ops
    st = os.stat(local(server, "/d"))
    assert st.st_mode & 0o7777 == 0o750 and (st.st_uid, st.st_gid) == (1000, 1000)
    assert os.readlink(local(server, "/d/l")) == "../some/where"
    with pytest.raises(FileExistsError):
        c.mkdir("/d")
    with pytest.raises(FileExistsError):
        c.symlink("x", "/d/l")
    with pytest.raises(FileNotFoundError):
        c.mkdir("/nowhere/d")
    # Squashed root creates as nobody.
    server.v4(uid=0, gid=0).mkdir("/byroot")
    st = os.stat(local(server, "/byroot"))
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    # No write permission in the directory: NFS4ERR_ACCESS.
    with pytest.raises(PermissionError):
        server.v4(uid=2000, gid=2000).mkdir("/d/other")


def test_lookup_and_readdir(server):
    top = local(server, "")
    os.makedirs(top + "/a/b/c")
    with open(top + "/a/b/file", "wb") as f:
        f.write(b"12345")
    c = server.v4()
    with Sent(server) as s:
        st = c.stat("/a/b/c")
    assert s.ops.get("LOOKUP", 0) >= 1, s.ops
    assert st.fileid == os.stat(top + "/a/b/c").st_ino
    assert c.stat("/a/b/c/../file").size == 5
    with pytest.raises(FileNotFoundError):
        c.stat("/a/b/nothing")
    with pytest.raises(NotADirectoryError):
        c.stat("/a/b/file/x")
    with Sent(server) as s:
        entries = {e.name: e for e in c.scandir("/a/b")}
    assert s.ops.get("READDIR", 0) >= 1, s.ops
    assert sorted(entries) == ["c", "file"]
    assert entries["file"].info.size == 5
    assert entries["file"].info.fileid == os.stat(top + "/a/b/file").st_ino
    assert entries["c"].info.type == nfs_rs.FileType.DIRECTORY
    with pytest.raises(NotADirectoryError):
        c.listdir("/a/b/file")
    assert c.listdir("/a/b/c") == []


def test_remove_and_its_errors(server):
    top = local(server, "")
    os.makedirs(top + "/full/inner")
    os.mkdir(top + "/empty")
    with open(top + "/f", "wb"):
        pass
    c = server.v4()
    with Sent(server) as s:
        c.remove("/f")
    assert s.ops.get("REMOVE") == 1, s.ops
    assert not os.path.exists(top + "/f")
    with pytest.raises(FileNotFoundError):
        c.remove("/f")
    with pytest.raises(nfs_rs.NfsError) as e:
        c.rmdir("/full")
    assert e.value.code_name == "NFS4ERR_NOTEMPTY", e.value
    assert os.path.isdir(top + "/full/inner")
    c.rmdir("/empty")
    assert not os.path.exists(top + "/empty")
    # Another user may not remove from a directory it cannot write.
    os.chmod(top + "/full", 0o755)
    os.chown(top + "/full", 1000, 1000)
    with pytest.raises(PermissionError):
        server.v4(uid=2000, gid=2000).rmdir("/full/inner")
    assert os.path.isdir(top + "/full/inner")


def test_rename_and_link(server):
    top = local(server, "")
    with open(top + "/a", "wb") as f:
        f.write(b"A")
    with open(top + "/b", "wb") as f:
        f.write(b"B")
    os.makedirs(top + "/d/sub")
    os.makedirs(top + "/full/x")
    os.mkdir(top + "/e")
    # All the caller's (fs.protected_hardlinks: no links to others' files).
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(dirpath, name), 1000, 1000)
    c = server.v4()
    with Sent(server) as s:
        c.link("/a", "/a2")
    assert s.ops.get("LINK") == 1 and s.ops.get("SAVEFH", 0) >= 1, s.ops
    assert os.stat(top + "/a2").st_ino == os.stat(top + "/a").st_ino
    assert c.stat("/a").nlink == 2
    with pytest.raises(FileExistsError):
        c.link("/a", "/b")
    with pytest.raises(FileNotFoundError):
        c.link("/nothing", "/n2")
    with pytest.raises(nfs_rs.NfsError) as e:
        c.link("/d", "/d2")
    assert e.value.code_name == "NFS4ERR_ISDIR", e.value

    with Sent(server) as s:
        c.rename("/a", "/b")  # over an existing file
    assert s.ops.get("RENAME") == 1, s.ops
    with open(top + "/b", "rb") as f:
        assert f.read() == b"A"
    assert not os.path.exists(top + "/a")
    c.rename("/e", "/d/sub2")
    assert os.path.isdir(top + "/d/sub2")
    with pytest.raises(FileNotFoundError):
        c.rename("/a", "/z")
    # Onto a non-empty directory, a file onto a directory, a directory
    # onto a file (pynfs RNM: EXIST is allowed for each as well).
    with pytest.raises(nfs_rs.NfsError) as e:
        c.rename("/d/sub2", "/full")
    assert e.value.code_name in ("NFS4ERR_EXIST", "NFS4ERR_NOTEMPTY"), e.value
    with pytest.raises(nfs_rs.NfsError) as e:
        c.rename("/b", "/d")
    assert e.value.code_name in ("NFS4ERR_EXIST", "NFS4ERR_ISDIR"), e.value
    with pytest.raises(nfs_rs.NfsError) as e:
        c.rename("/d/sub2", "/b")
    assert e.value.code_name in ("NFS4ERR_EXIST", "NFS4ERR_NOTDIR"), e.value
    assert os.path.isdir(top + "/full/x") and os.path.isdir(top + "/d/sub2")
    assert os.path.isdir(top + "/d/sub") and os.path.isfile(top + "/b")


def test_readlink(server):
    top = local(server, "")
    os.symlink("target/with spaces/é", top + "/l")
    with open(top + "/f", "wb"):
        pass
    c = server.v4()
    with Sent(server) as s:
        assert c.readlink("/l") == "target/with spaces/é"
    assert s.ops.get("READLINK") == 1, s.ops
    with pytest.raises(nfs_rs.NfsError) as e:
        c.readlink("/f")
    assert e.value.code_name == "NFS4ERR_INVAL", e.value


def test_the_pseudo_root_is_read_only_and_leads_to_the_export(server):
    c = server.v4("/")
    parts = [p for p in server.export.split("/") if p]
    path = ""
    for name in parts[:-1]:
        path += "/" + name
        assert c.listdir(path) == [parts[len(path.split("/")) - 1]], path
        st = c.stat(path)
        assert st.type == nfs_rs.FileType.DIRECTORY
        assert c.stat(path).fileid == st.fileid, "a pseudo directory's fileid is stable"
    assert c.stat(server.export).fileid == os.stat(server.export).st_ino
    new = f"/{parts[0]}/nfsrs4-new-{os.getpid()}"
    with pytest.raises(nfs_rs.NfsError) as e:
        c.mkdir(new)
    assert e.value.code_name == "NFS4ERR_ROFS", e.value
    assert not os.path.exists(new)
    # The export's files through the pseudo-root are the same files.
    with c.open(server.export + "/via-root", "wb") as f:
        f.write(b"ok")
    with open(local(server, "/via-root"), "rb") as f:
        assert f.read() == b"ok"


def test_named_attributes_are_not_served(server):
    # nfs-rs's xattrs are OPENATTR named attributes, which dionfs does not
    # serve; the NFSv4.2 xattr ops are tested in crates/server/tests/nfs4_v42.rs.
    with open(local(server, "/f"), "wb"):
        pass
    c = server.v4()
    assert c.capabilities.named_attributes is False
    with pytest.raises(nfs_rs.NfsUnsupportedError):
        c.listxattr("/f")


def test_one_file_open_over_v3_and_v4_at_once(server):
    v4 = server.v4()
    url = (f"nfs://{server.host}{server.export}?version=3&nfsport={server.nfs_port}"
           f"&mountport={server.mount_port}")
    v3 = nfs_rs.Client.connect(url, uid=1000, gid=1000, connect_timeout=10, operation_timeout=60)
    server._clients.append(v3)
    a, b = os.urandom(70_000), os.urandom(70_000)
    with v4.open("/shared", "w+b") as f4, v3.open("/shared", "r+b") as f3:
        f4.write_at(a, 0)
        assert f3.read_at(0, len(a)) == a
        f3.write_at(b, 50_000)
        assert f4.read_at(0, 200_000) == a[:50_000] + b
        f3.truncate(1000)
        assert f4.read_at(0, 200_000) == a[:1000]
        assert v4.stat("/shared").size == 1000
    with open(local(server, "/shared"), "rb") as f:
        assert f.read() == a[:1000]


# ------------------------------------------------------ raw NFSv4.1 calls


def op(num: int, args: bytes = b"") -> bytes:
    return u32(num) + args


def lock_owner(clientid: int, owner: bytes) -> bytes:
    return u64(clientid) + opaque(owner)


class Results:
    """A COMPOUND's status and its ops' (opnum, status, body)."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.status, tlen = struct.unpack(">II", raw[:8])
        at = 8 + tlen + (-tlen % 4)
        (n,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        self.ops: list[tuple[int, int, dict]] = []
        for _ in range(n):
            num, status = struct.unpack(">II", raw[at:at + 8])
            at += 8
            body, at = _body(num, status, raw, at)
            self.ops.append((num, status, body))

    def last(self) -> tuple[int, int, dict]:
        return self.ops[-1]

    def of(self, num: int) -> dict:
        for n, status, body in self.ops:
            if n == num:
                assert status == OK, (num, status)
                return body
        raise AssertionError(f"no result of op {num}: {self.ops}")


def _opaque_at(raw: bytes, at: int) -> tuple[bytes, int]:
    (n,) = struct.unpack(">I", raw[at:at + 4])
    return raw[at + 4:at + 4 + n], at + 4 + n + (-n % 4)


def _bitmap_at(raw: bytes, at: int) -> int:
    (n,) = struct.unpack(">I", raw[at:at + 4])
    return at + 4 + 4 * n


def _denied_at(raw: bytes, at: int) -> tuple[dict, int]:
    off, length, lt, clientid = struct.unpack(">QQIQ", raw[at:at + 28])
    owner, at = _opaque_at(raw, at + 28)
    return {"offset": off, "length": length, "type": lt, "clientid": clientid, "owner": owner}, at


def _body(num: int, status: int, raw: bytes, at: int) -> tuple[dict, int]:
    """The decoded result body of op `num`, for the ops V41 sends."""
    if status != OK:
        if num in (OP_LOCK, OP_LOCKT) and status == DENIED:
            return _denied_at(raw, at)
        return {}, at
    if num == OP_SEQUENCE:
        return {"sessionid": raw[at:at + 16], "flags": struct.unpack(">I", raw[at + 32:at + 36])[0]}, at + 36
    if num in (OP_GETFH,):
        fh, at = _opaque_at(raw, at)
        return {"fh": fh}, at
    if num in (OP_LOCK, OP_LOCKU, OP_CLOSE):
        return {"stateid": raw[at:at + 16]}, at + 16
    if num == OP_OPEN:
        stateid = raw[at:at + 16]
        at = _bitmap_at(raw, at + 16 + 20 + 4)
        (deleg,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        deleg_stateid = None
        if deleg in (1, 2):  # read, write: stateid, recall, (space limit), ACE
            deleg_stateid = raw[at:at + 16]
            at += 20 + (12 if deleg == 2 else 0)  # limit_by and 8 bytes either way
            _, at = _opaque_at(raw, at + 12)
        if deleg == 3:
            (why,) = struct.unpack(">I", raw[at:at + 4])
            at += 4 + (4 if why in (1, 2) else 0)
        return {"stateid": stateid, "delegation": deleg, "deleg_stateid": deleg_stateid}, at
    if num == OP_READ:
        (eof,) = struct.unpack(">I", raw[at:at + 4])
        data, at = _opaque_at(raw, at + 4)
        return {"eof": bool(eof), "data": data}, at
    if num == OP_CREATE:
        return {}, _bitmap_at(raw, at + 20)
    if num == OP_REMOVE:
        return {}, at + 20
    if num == OP_SECINFO:
        (n,) = struct.unpack(">I", raw[at:at + 4])
        at += 4
        flavors = []
        for _ in range(n):
            (flavor,) = struct.unpack(">I", raw[at:at + 4])
            at += 4
            if flavor == 6:  # RPCSEC_GSS: oid, qop, service
                _, at = _opaque_at(raw, at)
                at += 8
            flavors.append(flavor)
        return {"flavors": flavors}, at
    if num == OP_TEST_STATEID:
        (n,) = struct.unpack(">I", raw[at:at + 4])
        return {"codes": list(struct.unpack(f">{n}I", raw[at + 4:at + 4 + 4 * n]))}, at + 4 + 4 * n
    if num == OP_BIND_CONN:
        return {"sessionid": raw[at:at + 16], "dir": struct.unpack(">I", raw[at + 16:at + 20])[0]}, at + 24
    if num == OP_EXCHANGE_ID:
        clientid, seq = struct.unpack(">QI", raw[at:at + 12])
        return {"clientid": clientid, "sequenceid": seq}, len(raw)  # always alone
    if num == OP_CREATE_SESSION:
        return {"sessionid": raw[at:at + 16]}, len(raw)  # always alone
    if num == OP_GETATTR:
        at = _bitmap_at(raw, at)
        vals, at = _opaque_at(raw, at)
        return {"attrs": vals}, at
    return {}, at  # ops whose result is the status alone


def channel_attrs() -> bytes:
    # headerpad, maxrequestsize, maxresponsesize, maxresponsesize_cached,
    # maxoperations, maxrequests, no rdma_ird
    return u32(0) + u32(1 << 20) + u32(1 << 20) + u32(64 << 10) + u32(16) + u32(4) + u32(0)


class V41:
    """A hand-encoded NFSv4.1 client on one TCP connection: EXCHANGE_ID as
    `owner`, CREATE_SESSION (with `back_channel`, the connection carries
    the session's back channel too: callbacks, AUTH_NONE), RECLAIM_COMPLETE,
    then `call(ops)` as SEQUENCE on slot 0 and `ops`. A callback the server
    sends while a reply is awaited goes to `_callback`, which ignores it."""

    def __init__(self, server, owner: bytes, uid: int = 1000, gid: int = 1000,
                 back_channel: bool = False):
        self.server, self.uid, self.gid = server, uid, gid
        self.conn = Conn(server.host, server.nfs_port)
        eid = self.compound([op(OP_EXCHANGE_ID, u64(0x0102030405060708) + opaque(owner)
                                + u32(0x00010000) + u32(0) + u32(0))]).of(OP_EXCHANGE_ID)
        self.clientid = eid["clientid"]
        flags = CONN_BACK_CHAN if back_channel else 0
        cs = self.compound([op(OP_CREATE_SESSION, u64(self.clientid) + u32(eid["sequenceid"]) + u32(flags)
                               + channel_attrs() + channel_attrs() + u32(0x40000000)
                               + u32(1) + u32(0))]).of(OP_CREATE_SESSION)
        self.sessionid = cs["sessionid"]
        self.seqid = 1
        assert self.call([op(OP_RECLAIM_COMPLETE, u32(0))]).status == OK
        self.opens = 0

    @staticmethod
    def args(ops: list[bytes]) -> bytes:
        return opaque(b"") + u32(1) + u32(len(ops)) + b"".join(ops)

    def send_raw(self, args: bytes, conn: Conn | None = None) -> Results:
        conn = conn or self.conn
        conn.xid += 1
        conn.send(rpc_call(conn.xid, 100003, 4, 1, args, uid=self.uid, gid=self.gid))
        reply = read_record(conn.sock)
        while struct.unpack(">I", reply[4:8])[0] == 0:  # a callback CALL
            self._callback(reply)
            reply = read_record(conn.sock)
        xid, accept, res = parse_reply(reply)
        assert (xid, accept) == (conn.xid, SUCCESS)
        return Results(res)

    def _callback(self, record: bytes) -> None:
        """A CALL on the back channel: not answered here."""

    def compound(self, ops: list[bytes], conn: Conn | None = None) -> Results:
        return self.send_raw(self.args(ops), conn)

    def sequence(self, seqid: int | None = None, cachethis: bool = False) -> bytes:
        return op(OP_SEQUENCE, self.sessionid + u32(self.seqid if seqid is None else seqid)
                  + u32(0) + u32(0) + u32(1 if cachethis else 0))

    def call(self, ops: list[bytes], cachethis: bool = False, conn: Conn | None = None) -> Results:
        res = self.compound([self.sequence(cachethis=cachethis)] + ops, conn)
        if res.ops and res.ops[0][:2] == (OP_SEQUENCE, OK):
            self.seqid += 1
        return res

    def fh(self, path: str) -> bytes:
        ops = [op(OP_PUTROOTFH)] + [op(OP_LOOKUP, opaque(p.encode())) for p in path.split("/") if p]
        return self.call(ops + [op(OP_GETFH)]).of(OP_GETFH)["fh"]

    def open(self, fh: bytes, access: int = 3) -> bytes:
        """OPEN (CLAIM_FH, no create, share `access`, no deny, no
        delegation wanted) of `fh`: its stateid."""
        self.opens += 1
        owner = lock_owner(self.clientid, b"open-owner-%d" % self.opens)
        args = u32(0) + u32(access | 0x0400) + u32(0) + owner + u32(0) + u32(4)
        return self.call([putfh(fh), op(OP_OPEN, args)]).of(OP_OPEN)["stateid"]

    def lock(self, fh: bytes, open_stateid: bytes, off: int, length: int, owner: bytes) -> Results:
        locker = u32(1) + u32(0) + open_stateid + u32(0) + lock_owner(self.clientid, owner)
        return self.call([putfh(fh), op(OP_LOCK, u32(WRITE_LT) + u32(0) + u64(off) + u64(length) + locker)])

    def lockt(self, fh: bytes, off: int, length: int, owner: bytes) -> Results:
        return self.call([putfh(fh), op(OP_LOCKT, u32(WRITE_LT) + u64(off) + u64(length)
                                        + lock_owner(self.clientid, owner))])

    def locku(self, fh: bytes, lock_stateid: bytes, off: int, length: int) -> Results:
        return self.call([putfh(fh), op(OP_LOCKU, u32(WRITE_LT) + u32(0) + lock_stateid
                                        + u64(off) + u64(length))])

    def read(self, fh: bytes, stateid: bytes, off: int = 0, count: int = 100) -> Results:
        return self.call([putfh(fh), op(OP_READ, stateid + u64(off) + u32(count))])

    def close(self):
        self.conn.close()


def putfh(fh: bytes) -> bytes:
    return op(OP_PUTFH, opaque(fh))


def status(res: Results) -> int:
    return res.last()[1]


def test_putpubfh_savefh_and_restorefh(server):
    c = V41(server, b"fh-ops")
    root = c.call([op(OP_PUTROOTFH), op(OP_GETFH)]).of(OP_GETFH)["fh"]
    # PUTPUBFH: the public filehandle is the root (RFC 8881 section 18.20).
    assert c.call([op(OP_PUTPUBFH), op(OP_GETFH)]).of(OP_GETFH)["fh"] == root
    export = c.fh(server.export)
    assert export != root
    # SAVEFH, walk on, RESTOREFH: the saved one is current again.
    lookups = [op(OP_LOOKUP, opaque(p.encode())) for p in server.export.split("/") if p]
    res = c.call([op(OP_PUTROOTFH), op(OP_SAVEFH)] + lookups + [op(OP_GETFH), op(OP_RESTOREFH), op(OP_GETFH)])
    fhs = [body["fh"] for n, _, body in res.ops if n == OP_GETFH]
    assert fhs == [export, root], res.ops
    # RESTOREFH with nothing saved: NOFILEHANDLE (RFC 8881 section
    # 15.1.16.4: it supersedes v4.0's NFS4ERR_RESTOREFH), as SAVEFH
    # without a current filehandle.
    assert status(c.call([op(OP_PUTROOTFH), op(OP_RESTOREFH)])) == NOFILEHANDLE
    assert status(c.call([op(OP_SAVEFH)])) == NOFILEHANDLE
    c.close()


def test_secinfo_names_auth_sys_and_consumes_the_filehandle(server):
    os.mkdir(local(server, "/dir"))
    c = V41(server, b"secinfo")
    export = c.fh(server.export)
    with Sent(server) as s:
        res = c.call([putfh(export), op(OP_SECINFO, opaque(b"dir"))])
    assert s.ops.get("SECINFO") == 1, s.ops
    assert AUTH_SYS in res.of(OP_SECINFO)["flavors"]
    # RFC 8881 section 2.6.3.1.1.8: SECINFO leaves no current filehandle.
    res = c.call([putfh(export), op(OP_SECINFO, opaque(b"dir")), op(OP_GETFH)])
    assert res.last()[:2] == (OP_GETFH, NOFILEHANDLE), res.ops
    assert status(c.call([putfh(export), op(OP_SECINFO, opaque(b"nothing"))])) == NOENT
    c.close()


def test_bind_conn_to_session_backchannel_ctl_and_destroying(server):
    c = V41(server, b"binder")
    # A second connection joins the session; SEQUENCE works over it.
    other = Conn(server.host, server.nfs_port)
    with Sent(server) as s:
        res = c.compound([op(OP_BIND_CONN, c.sessionid + u32(1) + u32(0))], conn=other)
    assert s.ops.get("BIND_CONN_TO_SESSION") == 1, s.ops
    body = res.of(OP_BIND_CONN)
    assert body["sessionid"] == c.sessionid and body["dir"] == 1, body
    assert status(c.call([op(OP_PUTROOTFH)], conn=other)) == OK
    bogus = bytes(16)
    assert status(c.compound([op(OP_BIND_CONN, bogus + u32(1) + u32(0))], conn=other)) == BADSESSION
    # BACKCHANNEL_CTL: a callback program and AUTH_NONE for it.
    with Sent(server) as s:
        assert status(c.call([op(OP_BACKCHANNEL_CTL, u32(0x40000001) + u32(1) + u32(0))])) == OK
    assert s.ops.get("BACKCHANNEL_CTL") == 1, s.ops
    # DESTROY_CLIENTID with a session left is CLIENTID_BUSY; after
    # DESTROY_SESSION it goes, and the session with it.
    assert status(c.call([op(OP_DESTROY_CLIENTID, u64(c.clientid))])) == CLIENTID_BUSY
    assert status(c.call([op(OP_DESTROY_SESSION, c.sessionid)])) == OK
    assert status(c.compound([op(OP_DESTROY_CLIENTID, u64(c.clientid))])) == OK
    res = c.call([op(OP_PUTROOTFH)])
    assert res.ops[0][:2] == (OP_SEQUENCE, BADSESSION), res.ops
    other.close()
    c.close()


def test_a_retransmission_is_answered_from_the_reply_cache(server):
    for name in ("a", "b", "c"):
        os.mkdir(local(server, "/" + name))
    c = V41(server, b"retransmit")
    export = c.fh(server.export)
    # Cached: REMOVE again on the same slot and seqid is not done again
    # (not NOENT, and "a" made again stays): the first reply, byte for
    # byte, even on another connection.
    args = c.args([c.sequence(cachethis=True), putfh(export), op(OP_REMOVE, opaque(b"a"))])
    first = c.send_raw(args)
    assert first.status == OK, first.ops
    c.seqid += 1
    os.mkdir(local(server, "/a"))
    with Sent(server) as s:
        again = c.send_raw(args)
        other = Conn(server.host, server.nfs_port)
        on_other = c.send_raw(args, conn=other)
    assert again.raw == first.raw and on_other.raw == first.raw
    assert "REMOVE" not in s.ops, s.ops
    assert os.path.isdir(local(server, "/a")), "the REMOVE ran again"
    # Not cached: RETRY_UNCACHED_REP from SEQUENCE, the REMOVE not run
    # again (it would be NOENT).
    args = c.args([c.sequence(cachethis=False), putfh(export), op(OP_REMOVE, opaque(b"b"))])
    assert c.send_raw(args).status == OK
    c.seqid += 1
    os.mkdir(local(server, "/b"))
    with Sent(server) as s:
        res = c.send_raw(args)
    assert [r[:2] for r in res.ops] == [(OP_SEQUENCE, RETRY_UNCACHED_REP)], res.ops
    assert "REMOVE" not in s.ops, s.ops
    assert os.path.isdir(local(server, "/b")), "the REMOVE ran again"
    # A seqid ahead of the slot's next one is misordered, and nothing runs.
    res = c.compound([c.sequence(seqid=c.seqid + 1), putfh(export), op(OP_REMOVE, opaque(b"c"))])
    assert res.ops[0][:2] == (OP_SEQUENCE, SEQ_MISORDERED), res.ops
    assert os.path.isdir(local(server, "/c"))
    other.close()
    c.close()


def test_bad_stateids_are_refused(server):
    with open(local(server, "/f"), "wb") as f:
        f.write(b"0123456789")
    os.chmod(local(server, "/f"), 0o666)
    c = V41(server, b"stateids")
    fh = c.fh(server.export + "/f")
    sid = c.open(fh)
    assert c.read(fh, sid).of(OP_READ)["data"] == b"0123456789"
    made_up = u32(1) + b"\x07" * 12
    future = u32(struct.unpack(">I", sid[:4])[0] + 1) + sid[4:]
    assert status(c.read(fh, made_up)) in (BAD_STATEID, STALE_STATEID)
    assert status(c.read(fh, future)) == BAD_STATEID
    # A lock moves its stateid on; the first one is then OLD.
    lock = c.lock(fh, sid, 0, 5, b"lo").of(OP_LOCK)["stateid"]
    newer = c.locku(fh, lock, 0, 5).of(OP_LOCKU)["stateid"]
    assert newer[4:] == lock[4:] and newer[:4] != lock[:4]
    assert status(c.locku(fh, lock, 0, 5)) == OLD_STATEID
    # TEST_STATEID says which are good; FREE_STATEID of a made-up one is BAD.
    res = c.call([op(OP_TEST_STATEID, u32(3) + sid + made_up + newer)])
    codes = res.of(OP_TEST_STATEID)["codes"]
    assert codes[0] == OK and codes[1] in (BAD_STATEID, STALE_STATEID) and codes[2] == OK, codes
    assert status(c.call([op(OP_FREE_STATEID, made_up)])) in (BAD_STATEID, STALE_STATEID)
    # A lock stateid with locks held cannot be freed; without, it can.
    held = c.lock(fh, sid, 0, 5, b"lo2").of(OP_LOCK)["stateid"]
    assert status(c.call([op(OP_FREE_STATEID, held)])) == LOCKS_HELD
    gone = c.locku(fh, held, 0, 5).of(OP_LOCKU)["stateid"]
    assert status(c.call([op(OP_FREE_STATEID, gone)])) == OK
    assert status(c.locku(fh, gone, 0, 5)) == BAD_STATEID
    # After CLOSE the open's stateid is no longer good.
    assert status(c.call([putfh(fh), op(OP_FREE_STATEID, newer)])) == OK
    assert status(c.call([putfh(fh), op(OP_CLOSE, u32(0) + sid)])) == OK
    assert status(c.read(fh, sid)) == BAD_STATEID
    # DELEGRETURN of what is no delegation (a closed open's stateid).
    assert status(c.call([putfh(fh), op(OP_DELEGRETURN, sid)])) == BAD_STATEID
    c.close()


def test_v3_nlm_locks_and_v4_locks_conflict(server):
    nlm_fh = file_fh(server, "shared")  # 4096 bytes, mode 0666
    v4 = V41(server, b"v4-locker")
    fh = v4.fh(server.export + "/shared")
    sid = v4.open(fh)
    lock = v4.lock(fh, sid, 0, 100, b"owner-a").of(OP_LOCK)["stateid"]
    nlm = Nlm(server, b"v3host")
    try:
        # The v4 lock holds NLM off...
        assert nlm.lock(nlm_fh, 1, 50, 10) == S_DENIED
        stat, holder = nlm.test(nlm_fh, 1, 99, 5)
        assert stat == S_DENIED, stat
        exclusive, _svid, oh, off, length = holder
        assert (exclusive, off, length) == (True, 0, 100) and oh.endswith(b"owner-a"), holder
        # ...and an NLM lock holds v4 off, LOCK and LOCKT alike.
        assert nlm.lock(nlm_fh, 1, 200, 10) == S_GRANTED
        res = v4.lock(fh, sid, 205, 1, b"owner-b")
        assert status(res) == DENIED
        denied = res.last()[2]
        assert (denied["offset"], denied["length"], denied["type"]) == (200, 10, WRITE_LT), denied
        assert status(v4.lockt(fh, 0, 1000, b"owner-c")) == DENIED
        assert status(v4.lockt(fh, 100, 100, b"owner-c")) == OK, "[100, 200) is free"
        # Each let go: the other may take it.
        assert status(v4.locku(fh, lock, 0, 100)) == OK
        assert nlm.lock(nlm_fh, 1, 50, 10) == S_GRANTED
        assert nlm.unlock(nlm_fh, 1, 0, 0) == S_GRANTED
        assert status(v4.lock(fh, sid, 205, 1, b"owner-d")) == OK
        assert local_denied(local(server, "/shared"), 205, 1)
    finally:
        nlm.close()
        v4.close()


def courtesy(server, renew: V41 | None = None) -> bool:
    """The log says a client's lease ran out holding state. `renew`: a
    client kept alive meanwhile."""
    if renew is not None:
        assert status(renew.call([])) == OK
    return "a courtesy client now" in server.log_text(1000)


@pytest.mark.slow
def test_a_lapsed_lease_keeps_its_locks_until_it_comes_back(short_lease):
    server = short_lease
    with open(local(server, "/f"), "wb") as f:
        f.write(b"x" * 100)
    os.chmod(local(server, "/f"), 0o666)
    holder, idle = V41(server, b"holder"), V41(server, b"idle")
    fh = holder.fh(server.export + "/f")
    lock = holder.lock(fh, holder.open(fh), 0, 10, b"lo").of(OP_LOCK)["stateid"]
    t0 = time.monotonic()
    wait_until(lambda: courtesy(server), 40, lambda: server.log_text(30), interval=0.5)
    assert time.monotonic() - t0 >= 9, "the lease is 10 s"
    # A client holding nothing is gone with its lease...
    res = idle.call([])
    assert res.ops[0][:2] == (OP_SEQUENCE, BADSESSION), res.ops
    # ...one holding a lock keeps it while nobody wants it, and has it
    # back with its next SEQUENCE.
    assert local_denied(local(server, "/f"), 0, 10)
    assert status(holder.locku(fh, lock, 0, 10)) == OK
    assert not local_denied(local(server, "/f"), 0, 10)
    holder.close()
    idle.close()


@pytest.mark.slow
@pytest.mark.parametrize("rival", ["v4", "nlm"])
def test_a_lapsed_lease_gives_its_locks_to_a_conflicting_client(short_lease, rival):
    server = short_lease
    nlm_fh = file_fh(server, "f")
    holder, other = V41(server, b"holder"), V41(server, b"other")
    fh = holder.fh(server.export + "/f")
    holder.lock(fh, holder.open(fh), 0, 10, b"lo").of(OP_LOCK)
    other_sid = other.open(fh)
    nlm = Nlm(server, b"rival-host")

    tries = []

    def take() -> bool:
        tries.append(1)
        if rival == "v4":
            return status(other.lock(fh, other_sid, 5, 1, b"rival-%d" % len(tries))) == OK
        return nlm.lock(nlm_fh, 7, 5, 1) == S_GRANTED

    try:
        assert not take(), "the lock is held"
        wait_until(lambda: courtesy(server, renew=other), 40, lambda: server.log_text(30), interval=0.5)
        assert take(), "a conflict expires the courtesy client"
        res = holder.call([])
        assert res.ops[0][:2] == (OP_SEQUENCE, BADSESSION), res.ops
    finally:
        nlm.close()
        holder.close()
        other.close()
