"""Every NFSv3 and MOUNTv3 procedure at least once, mostly through nfs-rs;
nfsproc (tests/tools/nfsproc.c, libnfs raw API) for what nfs-rs does not
expose: MKNOD, PATHCONF, plain READDIR, CREATE GUARDED/EXCLUSIVE, the SETATTR
guard, explicit WRITE UNSTABLE + COMMIT, MOUNT NULL/DUMP/UMNT.
"""

from __future__ import annotations

import os
import stat
import struct
import time

import nfs_rs
import pytest
from nfstools import assert_nfs_error
from rawrpc import SUCCESS, Conn, mnt, opaque
from servers import backend

MiB = 1 << 20


# ------------------------------------------------------------------ NULL, MOUNT

def test_null_nfs_and_mount(nfsproc):
    r = nfsproc("null")
    assert r.get("mount_null") == "ok" and r.get("nfs_null") == "ok", r


def test_mnt_returns_root_handle_and_auth_sys(server, nfsproc):
    r = nfsproc("mnt")
    assert r["mnt_status"] == "MNT3_OK", r
    assert 0 < len(r["root_fh"]) // 2 <= 64, r
    flavors = r["auth_flavors"].split(",")
    assert "1" in flavors, f"AUTH_SYS (1) not offered: {r}"


def test_mnt_unknown_path_is_noent(server, nfsproc):
    r = nfsproc("mnt", export=server.export + "/no-such-dir")
    assert r["mnt_status"] in ("MNT3ERR_NOENT", "MNT3ERR_ACCES"), r


def test_export_list(server, nfsproc):
    exports = nfs_rs.list_exports(f"nfs://{server.host}/?nfsport={server.nfs_port}"
                                  f"&mountport={server.mount_port}")
    assert server.export in [e.path for e in exports], exports
    r = nfsproc("export")
    assert r.int("exports") >= 1 and r["export"].split()[0] == server.export, r


def test_dump_and_umnt(server, nfsproc):
    assert nfsproc("mnt")["mnt_status"] == "MNT3_OK"
    r = nfsproc("dump")
    # DUMP may legitimately be empty (servers need not keep a mount list),
    # but whatever it lists must be our export.
    assert r.int("mounts") >= 0, r
    if r.int("mounts"):
        assert r["mount"].endswith(":" + server.export), r
    r = nfsproc("umnt")
    assert r.get("umnt") == "ok", r


def _dump(conn) -> list[tuple[str, str]]:
    """MOUNT3 DUMP over a raw connection: (host, directory) pairs."""
    accept, res = conn.rpc(100005, 3, 2)
    assert accept == SUCCESS
    out, at = [], 0
    while struct.unpack(">I", res[at:at + 4])[0] == 1:
        at += 4
        fields = []
        for _ in range(2):
            (n,) = struct.unpack(">I", res[at:at + 4])
            fields.append(res[at + 4:at + 4 + n].decode())
            at += 4 + n + (-n % 4)
        out.append((fields[0], fields[1]))
    return out


@pytest.mark.dionfs_only  # a dionfs bound; Ganesha keeps its own list
def test_the_mount_list_is_canonical_and_bounded(server):
    """MNT records the directory as its lookups resolved it, and keeps at
    most 256 entries a client: the list recorded each spelling a client
    sent (`/export/./d`, `/export/././d`, ...), without bound, and DUMP
    sent them all back."""
    for i in range(300):
        os.mkdir(os.path.join(server.export, f"d{i}"))
    with Conn(server.host, server.mount_port, reserved=True) as m:
        for i in range(300):
            status, _ = mnt(m, server.export + "/" + "./" * i + "d0/" + "x/.." * (i % 2))
            assert status == (0 if i % 2 == 0 else 2), (i, status)  # no "x" in d0: NOENT
        assert _dump(m) == [("127.0.0.1", server.export + "/d0")]
        for i in range(300):
            assert mnt(m, f"{server.export}/d{i}")[0] == 0
        listed = _dump(m)
        assert len(listed) == 256, len(listed)
        assert ("127.0.0.1", f"{server.export}/d299") in listed
        assert ("127.0.0.1", f"{server.export}/d1") not in listed
        # UMNT finds the entry however it is spelt.
        accept, _ = m.rpc(100005, 3, 3, opaque(f"{server.export}/./d299//".encode()))
        assert accept == SUCCESS
        assert ("127.0.0.1", f"{server.export}/d299") not in _dump(m)


# ------------------------------------------------------------------ attributes

def test_getattr_matches_local_file(server, client):
    local = os.path.join(server.export, "f")
    with open(local, "wb") as f:
        f.write(b"x" * 12345)
    os.chown(local, 1000, 1000)
    os.chmod(local, 0o640)
    info = client.stat("f")
    st = os.stat(local)
    assert info.type == nfs_rs.FileType.FILE
    assert info.size == 12345
    assert info.mode & 0o7777 == 0o640
    assert (info.uid, info.gid) == (1000, 1000)
    assert info.nlink == 1
    assert info.mtime == st.st_mtime_ns
    dinfo = client.stat("")
    assert dinfo.type == nfs_rs.FileType.DIRECTORY
    assert info.fileid != dinfo.fileid
    assert client.stat("f").fileid == info.fileid, "fileid not stable"


def test_setattr_mode_size_times(server, client):
    with client.open("s", "wb") as f:
        f.write(b"abcdef" * 1000)
    client.chmod("s", 0o600)
    assert client.stat("s").mode & 0o7777 == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(server.export, "s")).st_mode) == 0o600
    client.truncate("s", 10)
    assert client.stat("s").size == 10
    with client.open("s", "rb") as f:
        assert f.read() == b"abcdefabcd"
    client.truncate("s", 3 * MiB + 5)  # extend: a hole reading as zeros
    with client.open("s", "rb") as f:
        assert f.read_at(3 * MiB, 5) == b"\0" * 5
    t_atime, t_mtime = 1_600_000_000_123_456_789, 1_500_000_000_987_654_321
    client.utime("s", ns=(t_atime, t_mtime))
    info = client.stat("s")
    assert info.mtime == t_mtime and info.atime == t_atime, info
    st = os.stat(os.path.join(server.export, "s"))
    assert st.st_mtime_ns == t_mtime


def test_setattr_chown_by_root_without_squash(no_root_squash_server):
    c = no_root_squash_server.client(uid=0, gid=0)
    c.touch("o")
    c.chown("o", 1234, 5678)
    info = c.stat("o")
    assert (info.uid, info.gid) == (1234, 5678)
    st = os.stat(os.path.join(no_root_squash_server.export, "o"))
    assert (st.st_uid, st.st_gid) == (1234, 5678)


def test_setattr_chown_by_user_is_denied(server, client):
    client.touch("mine")
    assert_nfs_error(("NFS3ERR_PERM", "NFS3ERR_ACCES"), client.chown, "mine", 0, 0)


def test_setattr_guard(server, nfsproc, client):
    client.touch("g")
    r = nfsproc("setattr-guard", "g", "600")
    assert r["bad_guard_status"] == "NFS3ERR_NOT_SYNC", r
    assert r["good_guard_status"] == "NFS3_OK", r
    assert r["mode"] == "0600", r


# ------------------------------------------------------------------ LOOKUP, ACCESS, READLINK

def test_lookup_path_and_noent(server, client):
    os.makedirs(os.path.join(server.export, "a/b/c"))
    open(os.path.join(server.export, "a/b/c/leaf"), "w").close()
    assert client.exists("a/b/c/leaf")
    assert client.stat("a/b").type == nfs_rs.FileType.DIRECTORY
    assert not client.exists("a/b/nope")
    e = assert_nfs_error("NFS3ERR_NOENT", client.stat, "a/nope/x")
    assert isinstance(e, FileNotFoundError)


def test_lookup_dot_dot_stays_in_export(server, nfsproc):
    # ".." of the export root must not lead out of the export.
    r = nfsproc("lookup", "..")
    if r["status"] == "NFS3_OK":
        root = nfsproc("mnt")["root_fh"]
        g = nfsproc("getattr", ".")
        assert r["fileid"] == g["fileid"], f"'..' of the root escaped the export: {r}"
    else:
        assert r["status"] in ("NFS3ERR_ACCES", "NFS3ERR_NOENT", "NFS3ERR_PERM"), r


def test_access(server, client, nfsproc):
    p = os.path.join(server.export, "acc")
    open(p, "w").close()
    os.chown(p, 1000, 1000)
    os.chmod(p, 0o640)
    assert client.access("acc", os.R_OK | os.W_OK)
    assert not client.access("acc", os.X_OK)
    other = server.client(uid=2000, gid=2000)
    assert not other.access("acc", os.R_OK)
    assert not other.access("acc", os.W_OK)
    group = server.client(uid=2000, gid=1000)
    assert group.access("acc", os.R_OK) and not group.access("acc", os.W_OK)
    r = nfsproc("access", "acc", "0x3f")
    assert r["status"] == "NFS3_OK", r
    granted = r.int("access")
    assert granted & 0x01, f"ACCESS3_READ not granted to owner: {r}"
    assert granted & 0x04, f"ACCESS3_MODIFY not granted to owner: {r}"
    assert not granted & 0x20, f"ACCESS3_EXECUTE granted on a 0640 file: {r}"


def test_symlink_and_readlink(server, client, nfsproc):
    client.symlink("some/target/../x", "ln")
    assert client.readlink("ln") == "some/target/../x"
    assert os.readlink(os.path.join(server.export, "ln")) == "some/target/../x"
    assert client.stat("ln").type == nfs_rs.FileType.SYMLINK
    r = nfsproc("symlink", ".", "ln2", "/absolute/elsewhere")
    assert r["status"] == "NFS3_OK", r
    r = nfsproc("readlink", "ln2")
    assert r["status"] == "NFS3_OK" and r["target"] == "/absolute/elsewhere", r
    r = nfsproc("readlink", ".")
    assert r["status"] in ("NFS3ERR_INVAL", "NFS3ERR_BADTYPE"), r


# ------------------------------------------------------------------ READ, WRITE, COMMIT

@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 65537, MiB - 1, MiB, MiB + 1, 3 * MiB + 17])
def test_write_read_roundtrip(server, client, size):
    data = os.urandom(size)
    with client.open("rw.bin", "wb") as f:
        assert f.write(data) == size
    with client.open("rw.bin", "rb") as f:
        assert f.read() == data
    with open(os.path.join(server.export, "rw.bin"), "rb") as f:
        assert f.read() == data


def test_misaligned_read_write_at(server, client):
    data = bytearray(os.urandom(2 * MiB + 333))
    with client.open("m.bin", "w+b") as f:
        f.write(bytes(data))
        for off, n in [(1, 10), (4095, 2), (4097, 8191), (123457, 47008), (MiB - 7, 14), (2 * MiB, 333)]:
            patch = os.urandom(n)
            f.write_at(patch, off)
            data[off:off + n] = patch
            assert f.read_at(off - 1, n + 2) == bytes(data[off - 1:off + n + 1])
        # reads crossing and past EOF
        assert f.read_at(len(data) - 5, 100) == bytes(data[-5:])
        assert f.read_at(len(data) + 4096, 10) == b""
    with open(os.path.join(server.export, "m.bin"), "rb") as f:
        assert f.read() == bytes(data)
    assert os.path.getsize(os.path.join(server.export, "m.bin")) == len(data)


def test_append(server, client):
    with client.open("ap", "wb") as f:
        f.write(b"hello ")
    with client.open("ap", "ab") as f:
        f.write(b"world")
    with client.open("ap", "rb") as f:
        assert f.read() == b"hello world"


def test_write_unstable_commit(server, nfsproc, client):
    client.touch("c")
    r = nfsproc("write", "c", 4096 * 3 + 5, 100000, "unstable", "commit")
    assert r["write_status"] == "NFS3_OK" and r.int("count") == 100000, r
    assert r["commit_status"] == "NFS3_OK", r
    assert r["verf_match"] == "1", f"COMMIT verifier differs from WRITE verifier: {r}"
    r2 = nfsproc("read", "c", 4096 * 3 + 5, 100000)
    assert r2["status"] == "NFS3_OK" and r2.int("count") == 100000, r2
    assert r2["pattern_mismatches"] == "0", r2
    assert os.path.getsize(os.path.join(server.export, "c")) == 4096 * 3 + 5 + 100000


@pytest.mark.parametrize("how", ["data_sync", "file_sync"])
def test_write_stable(server, nfsproc, client, how):
    client.touch("st")
    r = nfsproc("write", "st", 7, 5000, how)
    assert r["write_status"] == "NFS3_OK" and r.int("count") == 5000, r
    want = {"data_sync": ("DATA_SYNC", "FILE_SYNC"), "file_sync": ("FILE_SYNC",)}[how]
    assert r["committed"] in want, f"asked {how}, server answered committed={r['committed']}"


def test_read_eof_flag(server, nfsproc, client):
    with client.open("e", "wb") as f:
        f.write(b"z" * 10000)
    r = nfsproc("read", "e", 9000, 4096)
    assert r["status"] == "NFS3_OK" and r.int("count") == 1000 and r["eof"] == "1", r
    r = nfsproc("read", "e", 20000, 10)
    assert r["status"] == "NFS3_OK" and r.int("count") == 0 and r["eof"] == "1", r
    r = nfsproc("read", "e", 0, 100)
    assert r.int("count") == 100 and r["eof"] == "0", r


# ------------------------------------------------------------------ CREATE, MKDIR, SYMLINK, MKNOD

def test_create_unchecked_truncates_via_open(server, client):
    with client.open("u", "wb") as f:
        f.write(b"0123456789")
    with client.open("u", "wb") as f:  # w: create or truncate
        f.write(b"ab")
    with client.open("u", "rb") as f:
        assert f.read() == b"ab"
    st = os.stat(os.path.join(server.export, "u"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)


def test_create_modes(server, nfsproc):
    r = nfsproc("create", "unchecked", ".", "cu")
    assert r["status"] == "NFS3_OK" and r["type"] == "reg", r
    r = nfsproc("create", "unchecked", ".", "cu")
    assert r["status"] == "NFS3_OK", f"UNCHECKED create of an existing file: {r}"
    r = nfsproc("create", "guarded", ".", "cg")
    assert r["status"] == "NFS3_OK" and r["mode"] == "0644", r
    assert stat.S_IMODE(os.stat(os.path.join(server.export, "cg")).st_mode) == 0o644
    r = nfsproc("create", "guarded", ".", "cg")
    assert r["status"] == "NFS3ERR_EXIST", r


def test_create_exclusive(server, nfsproc):
    r1 = nfsproc("create", "exclusive", ".", "cx", "verf0001")
    assert r1["status"] == "NFS3_OK", r1
    # A retransmission (same verifier) succeeds with the same file ...
    r2 = nfsproc("create", "exclusive", ".", "cx", "verf0001")
    assert r2["status"] == "NFS3_OK", f"EXCLUSIVE retry with the same verifier: {r2}"
    if "fileid" in r1 and "fileid" in r2:
        assert r1["fileid"] == r2["fileid"]
    # ... another verifier is a different create: EXIST.
    r3 = nfsproc("create", "exclusive", ".", "cx", "verf0002")
    assert r3["status"] == "NFS3ERR_EXIST", r3
    # An existing file made otherwise is never "ours".
    open(os.path.join(server.export, "plain"), "w").close()
    r4 = nfsproc("create", "exclusive", ".", "plain", "verf0001")
    assert r4["status"] == "NFS3ERR_EXIST", r4


def test_mkdir(server, client, nfsproc):
    client.mkdir("d1", 0o750)
    st = os.stat(os.path.join(server.export, "d1"))
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o750
    assert (st.st_uid, st.st_gid) == (1000, 1000)
    client.mkdir("p/q/r", parents=True)
    assert os.path.isdir(os.path.join(server.export, "p/q/r"))
    r = nfsproc("mkdir", ".", "d2")
    assert r["status"] == "NFS3_OK" and r["type"] == "dir", r


def test_mknod(server, nfsproc):
    r = nfsproc("mknod", "fifo", ".", "fifo")
    assert r["status"] == "NFS3_OK" and r["type"] == "fifo", r
    assert stat.S_ISFIFO(os.lstat(os.path.join(server.export, "fifo")).st_mode)
    r = nfsproc("mknod", "sock", ".", "sock")
    assert r["status"] == "NFS3_OK" and r["type"] == "sock", r
    assert stat.S_ISSOCK(os.lstat(os.path.join(server.export, "sock")).st_mode)
    r = nfsproc("mknod", "reg", ".", "notnod")
    assert r["status"] == "NFS3ERR_BADTYPE", r
    r = nfsproc("mknod", "fifo", ".", "fifo")
    assert r["status"] == "NFS3ERR_EXIST", r


def test_mknod_device_needs_privilege(server, nfsproc):
    # uid 1000, and root is squashed: a character device must be refused.
    for uid in (1000, 0):
        r = nfsproc("mknod", "chr", ".", f"null{uid}", uid=uid, gid=uid)
        assert r["status"] in ("NFS3ERR_PERM", "NFS3ERR_ACCES", "NFS3ERR_NOTSUPP"), r
        assert not os.path.lexists(os.path.join(server.export, f"null{uid}"))


@pytest.mark.dionfs_only  # a dionfs policy (--allow-devices); Ganesha has none
def test_mknod_device_needs_allow_devices(no_root_squash_server, nfsproc_bin):
    """Even an unsquashed root may not make device nodes unless the export allows it."""
    from nfstools import NfsProc

    np = NfsProc(nfsproc_bin, no_root_squash_server)
    r = np("mknod", "chr", ".", "null", uid=0, gid=0)
    assert r["status"] == "NFS3ERR_PERM", r
    assert not os.path.lexists(os.path.join(no_root_squash_server.export, "null"))


@pytest.mark.server_args("--allow-devices")
def test_mknod_device_no_root_squash(no_root_squash_server, nfsproc_bin):
    from nfstools import NfsProc

    np = NfsProc(nfsproc_bin, no_root_squash_server)
    r = np("mknod", "chr", ".", "null", uid=0, gid=0)
    assert r["status"] == "NFS3_OK", r
    st = os.lstat(os.path.join(no_root_squash_server.export, "null"))
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3


# ------------------------------------------------------------------ REMOVE, RMDIR, RENAME, LINK

def test_remove_and_rmdir(server, client, nfsproc):
    client.touch("f")
    client.mkdir("d")
    client.remove("f")
    assert not os.path.exists(os.path.join(server.export, "f"))
    client.rmdir("d")
    assert not os.path.exists(os.path.join(server.export, "d"))
    client.touch("f2")
    assert nfsproc("remove", ".", "f2")["status"] == "NFS3_OK"
    client.mkdir("d2")
    assert nfsproc("rmdir", ".", "d2")["status"] == "NFS3_OK"
    assert client.listdir("") == []


def test_rename_across_directories(server, client, nfsproc):
    client.mkdir("src/sub", parents=True)
    client.mkdir("dst")
    with client.open("src/sub/file", "wb") as f:
        f.write(b"payload")
    client.rename("src/sub/file", "dst/moved")
    assert not client.exists("src/sub/file")
    with client.open("dst/moved", "rb") as f:
        assert f.read() == b"payload"
    client.rename("src/sub", "dst/subdir")  # a directory, across parents
    assert os.path.isdir(os.path.join(server.export, "dst/subdir"))
    assert not os.path.exists(os.path.join(server.export, "src/sub"))
    # rename over an existing file replaces it
    client.touch("dst/victim")
    client.rename("dst/moved", "dst/victim")
    with client.open("dst/victim", "rb") as f:
        assert f.read() == b"payload"
    r = nfsproc("rename", "dst", "victim", "src", "back")
    assert r["status"] == "NFS3_OK", r
    assert os.path.exists(os.path.join(server.export, "src/back"))


def test_rename_errors(server, client, nfsproc):
    client.mkdir("d/full", parents=True)
    client.touch("d/full/x")
    client.mkdir("empty")
    client.touch("file")
    r = nfsproc("rename", ".", "missing", ".", "x")
    assert r["status"] == "NFS3ERR_NOENT", r
    r = nfsproc("rename", ".", "empty", "d", "full")  # over a non-empty dir
    assert r["status"] in ("NFS3ERR_NOTEMPTY", "NFS3ERR_EXIST"), r
    r = nfsproc("rename", ".", "file", "d", "full")  # file over a dir
    assert r["status"] in ("NFS3ERR_ISDIR", "NFS3ERR_EXIST"), r
    r = nfsproc("rename", "d", ".", ".", "dd")
    assert r["status"] != "NFS3_OK", r
    r = nfsproc("rename", ".", "d", "d/full", "loop")  # a dir into itself
    assert r["status"] == "NFS3ERR_INVAL", r


def test_link(server, client, nfsproc):
    with client.open("orig", "wb") as f:
        f.write(b"same inode")
    client.mkdir("other")
    client.link("orig", "other/hard")
    assert client.stat("orig").nlink == 2
    assert client.stat("other/hard").fileid == client.stat("orig").fileid
    assert os.stat(os.path.join(server.export, "orig")).st_nlink == 2
    r = nfsproc("link", "orig", ".", "third")
    assert r["status"] == "NFS3_OK", r
    assert client.stat("orig").nlink == 3
    r = nfsproc("link", "other", ".", "dirlink")  # hard link to a directory
    assert r["status"] in ("NFS3ERR_ISDIR", "NFS3ERR_PERM", "NFS3ERR_INVAL", "NFS3ERR_NOTSUPP",
                           "NFS3ERR_BADTYPE"), r
    assert not os.path.lexists(os.path.join(server.export, "dirlink"))
    r = nfsproc("link", "orig", ".", "third")
    assert r["status"] == "NFS3ERR_EXIST", r


# ------------------------------------------------------------------ READDIR, READDIRPLUS

N_ENTRIES = 2000


def _populate(dirpath: str, n: int = N_ENTRIES) -> set[str]:
    os.makedirs(dirpath)
    names = set()
    for i in range(n):
        name = f"entry-{i:05d}" + "x" * (i % 37)  # varied lengths (XDR padding)
        open(os.path.join(dirpath, name), "w").close()
        names.add(name)
    return names


def test_readdirplus_paging_nfsrs(server):
    names = _populate(os.path.join(server.export, "big"))
    c = server.client(readdir_buffer=(1024, 4096))
    seen = [e.name for e in c.scandir("big") if e.name not in (".", "..")]
    assert len(seen) == len(set(seen)), "duplicate entries across pages"
    assert set(seen) == names
    # resumable pages, each small
    pos, pages, got, cookies = nfs_rs.DirectoryCookie(), 0, [], set()
    while True:
        page = c.scandir_page("big", pos)
        pages += 1
        got += [e.name for e in page.entries if e.name not in (".", "..")]
        for e in page.entries:
            assert e.fh is not None and e.info.type == nfs_rs.FileType.FILE or e.name in (".", "..")
        if page.eof:
            break
        assert page.next.cookie not in cookies, "cookie repeated"
        cookies.add(page.next.cookie)
        pos = page.next
        assert pages < 10_000
    assert pages > 10, f"only {pages} pages with a 4 KiB maxcount"
    assert sorted(got) == sorted(names)


def test_readdir_paging_nfsproc(server, nfsproc):
    names = _populate(os.path.join(server.export, "big"))
    r = nfsproc("readdir", "big", 1024, "names")
    assert r["status"] == "NFS3_OK" and r["eof"] == "1", r.stdout[-500:]
    got = [n for n in r.entries if n not in (".", "..")]
    assert len(got) == len(set(got)) and set(got) == names
    assert r.int("pages") > 10, r["pages"]
    r = nfsproc("readdirplus", "big", 512, 2048, "names")
    assert r["status"] == "NFS3_OK" and r["eof"] == "1", r.stdout[-500:]
    got = [n for n in r.entries if n not in (".", "..")]
    assert len(got) == len(set(got)) and set(got) == names
    assert r.int("pages") > 20, r["pages"]
    assert r.int("with_attr") == r.int("entries") and r.int("with_fh") >= len(names), r


def test_readdir_too_small(server, nfsproc, client):
    client.touch("a" * 200)
    r = nfsproc("readdir", ".", 16)
    if r["status"] == "NFS3_OK" and backend() == "ganesha":
        pytest.xfail("Ganesha ignores a too small READDIR count")
    assert r["status"] == "NFS3ERR_TOOSMALL", r


def test_readdir_empty_dir(server, nfsproc, client):
    client.mkdir("empty")
    assert client.listdir("empty") == [] or set(client.listdir("empty")) <= {".", ".."}
    r = nfsproc("readdir", "empty", 4096, "names")
    assert r["status"] == "NFS3_OK" and set(r.entries) <= {".", ".."}, r


# ------------------------------------------------------------------ FSSTAT, FSINFO, PATHCONF

def test_fsstat(server, client, nfsproc):
    fs = client.fs_stat()
    sv = os.statvfs(server.export)
    assert fs.total_bytes == sv.f_blocks * sv.f_frsize
    assert 0 < fs.free_bytes <= fs.total_bytes
    assert fs.available_bytes <= fs.free_bytes
    assert fs.total_files > 0
    r = nfsproc("fsstat")
    assert r["status"] == "NFS3_OK" and r.int("tbytes") == fs.total_bytes, r


def test_fsinfo(server, client, nfsproc):
    info = client.fs_info()
    assert info.max_read == MiB and info.max_write == MiB, info
    assert client.io_limits.max_read == MiB and client.io_limits.max_write == MiB
    assert info.supports_links and info.supports_symlinks and info.can_set_time
    r = nfsproc("fsinfo")
    assert r["status"] == "NFS3_OK", r
    assert r.int("rtmax") == MiB and r.int("wtmax") == MiB, r
    assert 0 < r.int("rtpref") <= MiB and 0 < r.int("wtpref") <= MiB, r
    assert r.int("dtpref") > 0 and r.int("maxfilesize") > 1 << 40, r


@pytest.mark.server_args("--max-transfer", "262144")
def test_fsinfo_max_transfer(server, client):
    info = client.fs_info()
    assert info.max_read == 262144 and info.max_write == 262144, info
    data = os.urandom(MiB + 12345)
    with client.open("mt", "wb") as f:
        f.write(data)
    with client.open("mt", "rb") as f:
        assert f.read() == data


def test_pathconf(server, nfsproc):
    r = nfsproc("pathconf", ".")
    assert r["status"] == "NFS3_OK", r
    if r.int("name_max") == 1024 and backend() == "ganesha":
        pytest.xfail("Ganesha's VFS FSAL reports name_max=1024, not the filesystem's 255")
    assert r.int("name_max") == os.statvfs(server.export).f_namemax == 255, r
    assert r["no_trunc"] == "1" and r["case_preserving"] == "1" and r["case_insensitive"] == "0", r
    assert r.int("linkmax") >= 1, r
