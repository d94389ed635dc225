"""NFSv4.1 file data through nfs-rs (`?version=4.1`): OPEN, WRITE, READ,
truncate (SETATTR with the open's stateid) and CLOSE on an export, the
bytes checked on the server's disk, and a file written over v4 read over
v3 and the other way round (one data path: docs/nfs4-design.md).

The server runs from a config file on a temporary directory: no loop
devices."""

from __future__ import annotations

import os

import nfs_rs
import pytest
from test_nfs4_metadata import V4Server

pytestmark = pytest.mark.dionfs_only


@pytest.fixture
def server(tmp_path):
    export = tmp_path.resolve() / "export"
    export.mkdir()
    os.chmod(export, 0o777)
    srv = V4Server({str(export): 'clients = ["127.0.0.1"]'})
    srv.start()
    yield srv
    srv.close_clients()
    code = srv.stop()
    srv.cleanup()
    assert code == 0, f"dionfs exited with {code} after SIGTERM"


def test_write_read_truncate_over_v4(server):
    c = server.v4()
    path = "/f"
    local = server.export + path
    data = os.urandom(3 * 1024 * 1024 + 123)
    with c.open(path, "wb") as f:
        f.write(data)
    with open(local, "rb") as f:
        assert f.read() == data, "the server's disk differs from what v4 wrote"
    with c.open(path, "rb") as f:
        assert f.read() == data
    with c.open(path, "r+b") as f:
        f.seek(4093)
        f.write(b"xyz")
    expect = data[:4093] + b"xyz" + data[4096:]
    with open(local, "rb") as f:
        assert f.read() == expect
    c.truncate(path, 5000)
    assert os.path.getsize(local) == 5000
    assert c.stat(path).size == 5000
    with c.open(path, "rb") as f:
        assert f.read() == expect[:5000]


def test_one_file_over_v3_and_v4(server):
    v4 = server.v4()
    url = (f"nfs://{server.host}{server.export}?version=3&nfsport={server.nfs_port}"
           f"&mountport={server.mount_port}")
    v3 = nfs_rs.Client.connect(url, uid=1000, gid=1000, connect_timeout=10,
                               operation_timeout=60)
    server._clients.append(v3)
    path = "/shared"
    with v4.open(path, "wb") as f:
        f.write(b"written over v4\n")
    with v3.open(path, "rb") as f:
        assert f.read() == b"written over v4\n"
    before = v4.stat(path)
    with v3.open(path, "ab") as f:
        f.write(b"and over v3\n")
    with v4.open(path, "rb") as f:
        assert f.read() == b"written over v4\nand over v3\n"
    after = v4.stat(path)
    assert after.size == len(b"written over v4\nand over v3\n")
    assert (after.mtime, after.ctime) != (before.mtime, before.ctime)
