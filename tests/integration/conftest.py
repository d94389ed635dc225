"""Fixtures for the dionfs integration tests.

loopfs   a real filesystem on a 4096-byte-sector loop device (param: "xfs"
         default, "ext4", "btrfs"); one per type per session, torn down at
         the end (and on interruption, see tests/lib/loopfs.py).
server   DIONFS_BIN serve <loopfs>/export on ephemeral ports (wiped export,
         private --state-dir, --ports-file); extra flags from
         @pytest.mark.server_args(...). `url(path)`, `client(uid, gid)`,
         `restart()`. Stopped with SIGTERM (SIGKILL after 10 s); its log is
         printed when the test failed. Started `--insecure` (any client
         source port): see DionfsServer in tests/lib/servers.py for why.
ro_server / all_squash_server / no_root_squash_server   the variants.
secure_server   `server` with the default `secure` export (NFS and MNT only
         from source ports below 1024).
client   nfs-rs Client on `server` as uid/gid 1000 (AUTH_SYS).
root_client   the same as uid/gid 0 (squashed unless --no-root-squash).
nfsproc  tests/tools/nfsproc built once per session, bound to `server`.
iorhard  tests/tools/iorhard (concurrent libnfs clients, one connection
         each) built once per session, bound to `server`.

DIONFS_TEST_BACKEND=ganesha runs the same tests against NFS-Ganesha (see
tests/lib/ganesha-pytest.sh); tests marked dionfs_only are skipped then.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from loopfs import LoopFs  # noqa: E402
from nfstools import IorHard, NfsProc, build_iorhard, build_nfsproc  # noqa: E402
from servers import backend, make_server  # noqa: E402

FS_TYPES = ("xfs", "ext4", "btrfs")


def pytest_configure(config):
    config.addinivalue_line("markers", "server_args(*args): extra `dionfs serve` flags for `server`")
    config.addinivalue_line("markers", "dionfs_only: needs dionfs itself (not the Ganesha reference)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds")


def pytest_collection_modifyitems(config, items):
    if backend() != "dionfs":
        skip = pytest.mark.skip(reason=f"dionfs-only test (backend {backend()})")
        for item in items:
            if "dionfs_only" in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def _failed(node) -> bool:
    return any(getattr(getattr(node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))


@pytest.fixture(scope="session")
def _loopfs_pool():
    pool: dict[str, LoopFs] = {}
    yield pool
    for fs in pool.values():
        fs.destroy()


@pytest.fixture
def loopfs(request, _loopfs_pool) -> LoopFs:
    fstype = getattr(request, "param", "xfs")
    if fstype not in _loopfs_pool:
        _loopfs_pool[fstype] = LoopFs(fstype)
    return _loopfs_pool[fstype]


def _fresh_export(loopfs: LoopFs) -> str:
    export = loopfs.path("export")
    if os.path.lexists(export):
        shutil.rmtree(export)
    os.mkdir(export)
    os.chmod(export, 0o777)  # squashed and ordinary users can create at the top
    return export


def _server(request, loopfs, extra, secure=False):
    marker = request.node.get_closest_marker("server_args")
    args = list(extra) + (list(marker.args) if marker else [])
    srv = make_server(_fresh_export(loopfs), args, secure=secure)
    srv.loopfs = loopfs
    try:
        srv.start()
    except Exception:
        srv.cleanup()
        raise
    yield srv
    srv.close_clients()
    code = srv.stop()
    if _failed(request.node):
        print(f"\n===== {srv.name} log ({srv.log_path}) =====\n{srv.log_text()}\n===== end of log =====")
    srv.cleanup()
    if srv.killed:
        pytest.fail(f"{srv.name} ignored SIGTERM for 10 s and had to be killed", pytrace=False)
    elif code not in (0, None, -15) and srv.name == "dionfs":
        print(f"note: dionfs exited with {code} after SIGTERM")


@pytest.fixture
def server(request, loopfs):
    yield from _server(request, loopfs, [])


@pytest.fixture
def ro_server(request, loopfs):
    yield from _server(request, loopfs, ["--ro"])


@pytest.fixture
def all_squash_server(request, loopfs):
    yield from _server(request, loopfs, ["--all-squash", "--anonuid", "4242", "--anongid", "4243"])


@pytest.fixture
def no_root_squash_server(request, loopfs):
    yield from _server(request, loopfs, ["--no-root-squash"])


@pytest.fixture
def secure_server(request, loopfs):
    yield from _server(request, loopfs, [], secure=True)


@pytest.fixture
def client(server):
    return server.client(uid=1000, gid=1000)


@pytest.fixture
def root_client(server):
    return server.client(uid=0, gid=0)


@pytest.fixture(scope="session")
def nfsproc_bin(tmp_path_factory) -> str:
    return build_nfsproc(str(tmp_path_factory.mktemp("nfsproc")))


@pytest.fixture
def nfsproc(nfsproc_bin, server) -> NfsProc:
    return NfsProc(nfsproc_bin, server)


@pytest.fixture(scope="session")
def iorhard_bin(tmp_path_factory) -> str:
    return build_iorhard(str(tmp_path_factory.mktemp("iorhard")))


@pytest.fixture
def iorhard(iorhard_bin, server) -> IorHard:
    return IorHard(iorhard_bin, server)
