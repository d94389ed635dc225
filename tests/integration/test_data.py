"""Data integrity through libnfs's command-line tools (nfs-cp, nfs-cat, nfs-ls)
and nfs-rs: files of many sizes both ways, sha256-compared, on XFS, ext4 and
btrfs, in each read/write mode; a 64 MiB file; concurrent misaligned writers.
"""

from __future__ import annotations

import os
import threading

import pytest
from nfstools import ls_names, make_random_file, nfs_cat, nfs_cp, nfs_ls, sha256_file

MiB = 1 << 20
SIZES = [0, 1, 511, 4095, 4096, 4097, 47008, 65536 + 3, MiB - 1, MiB, MiB + 1, 5 * MiB + 123]


def _roundtrip(server, tmp_path, sizes, uid=1000, gid=1000):
    for size in sizes:
        src = str(tmp_path / f"src-{size}")
        back = str(tmp_path / f"back-{size}")
        digest = make_random_file(src, size, seed=size)
        url = server.url(f"f-{size}", uid=uid, gid=gid)
        nfs_cp(src, url)
        local = os.path.join(server.export, f"f-{size}")
        assert os.path.getsize(local) == size, f"size after nfs-cp up: {os.path.getsize(local)} != {size}"
        assert sha256_file(local) == digest, f"{size}-byte file corrupted on the way up"
        nfs_cp(url, back)
        assert sha256_file(back) == digest, f"{size}-byte file corrupted on the way down"
        os.unlink(back)
        os.unlink(src)


def test_nfs_cp_both_ways(server, tmp_path):
    _roundtrip(server, tmp_path, SIZES)
    st = os.stat(os.path.join(server.export, "f-1"))
    assert (st.st_uid, st.st_gid) == (1000, 1000)


@pytest.mark.parametrize("loopfs", ["ext4", "btrfs"], indirect=True)
def test_nfs_cp_other_filesystems(server, tmp_path, loopfs):
    _roundtrip(server, tmp_path, [1, 4097, 47008, MiB + 1, 3 * MiB + 5])


def _mode(m):
    return pytest.param(m, marks=pytest.mark.server_args("--read-mode", m, "--write-mode", m), id=m)


@pytest.mark.parametrize("mode", [_mode("buffered"), _mode("dontcache"), _mode("direct")])
def test_read_write_modes(server, client, tmp_path, mode):
    _roundtrip(server, tmp_path, [1, 4095, 47008, MiB + 1])
    data = bytearray(os.urandom(300000))
    with client.open("rmw", "w+b") as f:
        f.write(bytes(data))
        for off, n in [(1, 1), (4095, 3), (8191, 47008), (299990, 50)]:
            patch = os.urandom(n)
            f.write_at(patch, off)
            data[off:off + n] = patch
        assert f.read_at(0, len(data)) == bytes(data)
    with open(os.path.join(server.export, "rmw"), "rb") as f:
        assert f.read() == bytes(data)


def test_nfs_cat_and_ls(server, client):
    client.mkdir("dir")
    for i in range(20):
        with client.open(f"dir/file{i}", "wb") as f:
            f.write(f"content {i}\n".encode())
    assert nfs_cat(server.url("dir/file7")) == b"content 7\n"
    r = nfs_ls(server.url("dir"))
    assert r.returncode == 0, r.stderr
    names = [n for n in ls_names(r.stdout) if n not in (".", "..")]
    assert sorted(names) == sorted(f"file{i}" for i in range(20))
    r = nfs_ls(server.url(), recursive=True)
    assert r.returncode == 0 and b"file19" in r.stdout, r.stderr


def test_nfs_ls_2000_entries(server):
    d = os.path.join(server.export, "big")
    os.mkdir(d)
    want = set()
    for i in range(2000):
        n = f"f{i:04d}" + "y" * (i % 29)
        open(os.path.join(d, n), "w").close()
        want.add(n)
    r = nfs_ls(server.url("big"))
    assert r.returncode == 0, r.stderr
    got = [n for n in ls_names(r.stdout) if n not in (".", "..")]
    assert len(got) == len(set(got)) == 2000 and set(got) == want


@pytest.mark.slow
def test_64mib_file(server, client, tmp_path):
    size = 64 * MiB + 4097
    src = str(tmp_path / "big.src")
    digest = make_random_file(src, size, seed=64)
    nfs_cp(src, server.url("big.bin", uid=1000, gid=1000))
    assert sha256_file(os.path.join(server.export, "big.bin")) == digest
    back = str(tmp_path / "big.back")
    nfs_cp(server.url("big.bin", uid=1000, gid=1000), back)
    assert sha256_file(back) == digest
    os.unlink(back)
    # nfs-rs: streamed read in 8 MiB chunks, then a full rewrite through nfs-rs
    import hashlib

    h = hashlib.sha256()
    buf = bytearray(8 * MiB)
    with client.open("big.bin", "rb") as f:
        while n := f.readinto(buf):
            h.update(memoryview(buf)[:n])
    assert h.hexdigest() == digest
    with open(src, "rb") as inp, client.open("big2.bin", "wb") as out:
        while chunk := inp.read(8 * MiB):
            out.write(chunk)
    assert sha256_file(os.path.join(server.export, "big2.bin")) == digest
    os.unlink(src)


def test_concurrent_misaligned_writers(server):
    """Adjacent 47008-byte writes from 4 clients into one file (the IOR-hard
    pattern of DESIGN.md): no write may lose another's bytes."""
    bs, nblocks, nclients = 47008, 96, 4
    clients = [server.client() for _ in range(nclients)]
    clients[0].touch("shared")
    errors = []

    def writer(k):
        try:
            with clients[k].open("shared", "r+b") as f:
                for b in range(k, nblocks, nclients):
                    f.write_at(bytes([b % 251 + 1]) * bs, b * bs)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(nclients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    path = os.path.join(server.export, "shared")
    assert os.path.getsize(path) == bs * nblocks
    with open(path, "rb") as f:
        for b in range(nblocks):
            blk = f.read(bs)
            assert blk == bytes([b % 251 + 1]) * bs, f"block {b} (offset {b * bs}) corrupted"


def test_concurrent_extending_writers_keep_exact_size(server):
    """Extending writes racing: the size must end exactly at the furthest byte."""
    clients = [server.client() for _ in range(3)]
    clients[0].touch("grow")
    ends = []

    def writer(k):
        with clients[k].open("grow", "r+b") as f:
            for i in range(40):
                off = (i * 3 + k) * 10007
                f.write_at(b"q" * 5003, off)
                ends.append(off + 5003)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert os.path.getsize(os.path.join(server.export, "grow")) == max(ends)
    assert clients[1].stat("grow").size == max(ends)
