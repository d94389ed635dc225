"""NFSv4.1 names and metadata through nfs-rs (`?version=4.1`): the
pseudo-root leading to the exports a client may use, and stat, mkdir,
readdir, rename, symlink/readlink, chmod, remove and rmdir on an export,
with root squash and read-only exports applied as over NFSv3. Files'
data: test_nfs4_data.py.

The server runs from a config file (`versions` has no flag) on a
temporary directory: no loop devices."""

from __future__ import annotations

import os

import nfs_rs
import pytest
from servers import DionfsServer

pytestmark = pytest.mark.dionfs_only


class V4Server(DionfsServer):
    """`dionfs serve --config FILE` serving NFSv3, 4.1 and 4.2 with the
    exports `exports` (path -> extra TOML lines)."""

    def __init__(self, exports: dict[str, str]):
        super().__init__(next(iter(exports)))
        self.config = os.path.join(self.workdir, "dionfs.toml")
        self.extra_args = ["--ports-file", self.ports_file]
        text = (f'[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
                f'portmap_port = false\nstate_dir = "{self.state_dir}"\n'
                f'versions = ["3", "4.1", "4.2"]\n')
        for path, extra in exports.items():
            text += f'\n[[export]]\npath = "{path}"\nsecure = false\n{extra}\n'
        with open(self.config, "w") as f:
            f.write(text)

    def v4(self, path: str = "", uid: int = 1000, gid: int = 1000):
        """An nfs-rs NFSv4.1 client mounting `path` (default: the export)."""
        base = path if path else self.export
        url = f"nfs://{self.host}{base}?version=4.1&nfsport={self.nfs_port}"
        c = nfs_rs.Client.connect(url, uid=uid, gid=gid, connect_timeout=10,
                                  operation_timeout=60)
        self._clients.append(c)
        return c


@pytest.fixture
def v4_server(tmp_path):
    """`rw` (read-write, root_squash), `ro` (read-only) and `hidden`
    (10.0.0.0/8 only), side by side."""
    top = tmp_path.resolve() / "exports"
    paths = {}
    for name in ("rw", "ro", "hidden"):
        paths[name] = str(top / name)
        os.makedirs(paths[name])
        os.chmod(paths[name], 0o777)
    srv = V4Server({
        paths["rw"]: 'clients = ["127.0.0.1"]',
        paths["ro"]: 'clients = ["127.0.0.1"]\naccess = "ro"',
        paths["hidden"]: 'clients = ["10.0.0.0/8"]',
    })
    srv.paths = paths
    srv.top = str(top)
    srv.start()
    yield srv
    srv.close_clients()
    code = srv.stop()
    srv.cleanup()
    assert code == 0, f"dionfs exited with {code} after SIGTERM"


def test_the_pseudo_root_shows_only_the_exports_a_client_may_use(v4_server):
    c = v4_server.v4("/")
    assert sorted(c.listdir(v4_server.top)) == ["ro", "rw"]
    root = c.stat(v4_server.paths["rw"])
    assert root.type == nfs_rs.FileType.DIRECTORY
    assert root.fileid == os.stat(v4_server.paths["rw"]).st_ino
    with pytest.raises(FileNotFoundError):
        c.stat(v4_server.paths["hidden"])


def test_names_and_metadata_on_an_export(v4_server):
    local = v4_server.paths["rw"]
    c = v4_server.v4()
    st = c.stat("/")
    assert st.type == nfs_rs.FileType.DIRECTORY
    assert st.fileid == os.stat(local).st_ino

    c.mkdir("/d")
    c.symlink("over/there", "/l")
    assert sorted(c.listdir("/")) == ["d", "l"]
    assert c.readlink("/l") == "over/there"
    assert os.readlink(os.path.join(local, "l")) == "over/there"
    assert os.stat(os.path.join(local, "d")).st_uid == 1000

    c.chmod("/d", 0o705)
    assert c.stat("/d").mode & 0o7777 == 0o705
    assert os.stat(os.path.join(local, "d")).st_mode & 0o7777 == 0o705

    c.rename("/d", "/e")
    assert sorted(c.listdir("/")) == ["e", "l"]
    assert os.path.isdir(os.path.join(local, "e"))

    c.mkdir("/e/inner")
    with pytest.raises(nfs_rs.NfsError):
        c.rmdir("/e")  # not empty
    c.rmdir("/e/inner")
    c.rmdir("/e")
    c.remove("/l")
    assert c.listdir("/") == []
    assert os.listdir(local) == []
    with pytest.raises(FileNotFoundError):
        c.stat("/e")


def test_many_entries_are_listed_across_readdir_pages(v4_server):
    local = v4_server.paths["rw"]
    names = [f"entry-{i:04d}-" + "x" * 40 for i in range(600)]
    for name in names:
        os.mkdir(os.path.join(local, name))
    c = v4_server.v4()
    assert sorted(c.listdir("/")) == names


def test_root_is_squashed_and_read_only_exports_refuse_changes(v4_server):
    root = v4_server.v4(uid=0, gid=0)
    root.mkdir("/made-by-root")
    st = os.stat(os.path.join(v4_server.paths["rw"], "made-by-root"))
    assert (st.st_uid, st.st_gid) == (65534, 65534)

    os.mkdir(os.path.join(v4_server.paths["ro"], "present"))
    ro = v4_server.v4(v4_server.paths["ro"])
    assert ro.listdir("/") == ["present"]
    with pytest.raises(nfs_rs.NfsError, match="(?i)read-only"):
        ro.mkdir("/new")
    with pytest.raises(nfs_rs.NfsError, match="(?i)read-only"):
        ro.rmdir("/present")
    assert os.path.isdir(os.path.join(v4_server.paths["ro"], "present"))
