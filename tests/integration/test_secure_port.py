"""The `secure` export option (the default) and `--insecure`, as exports(5):
on a secure export, NFS calls and MNT must come from a reserved source port
(below 1024). knfsd answers NFS3ERR_PERM to other NFS calls, rpc.mountd
refuses MNT with MNT3ERR_ACCES; NULL calls, the other MOUNT procedures and
the portmapper are not restricted.

The `server` fixture is `--insecure` (see tests/lib/servers.py); these tests
use `secure_server` for the default.
"""

from __future__ import annotations

import os
import re
import struct

import nfs_rs
import pytest

from nfstools import NfsProc
from rawrpc import (MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, PORTMAP_PROGRAM, PORTMAP_V2,
                    SUCCESS, Conn, mnt, nfs_status, opaque, u32, u64)

pytestmark = pytest.mark.dionfs_only

NFS3_OK, NFS3ERR_PERM = 0, 1
MNT3_OK, MNT3ERR_ACCES = 0, 13
REFUSAL = "the source port is not reserved"


def root_fh_from_reserved_port(srv) -> bytes:
    with Conn(srv.host, srv.mount_port, reserved=True) as m:
        assert m.source_port < 1024
        status, fh = mnt(m, srv.export)
    assert status == MNT3_OK, f"MNT from reserved port {m.source_port}: {status}"
    return fh


def nfs_calls(fh: bytes) -> list[tuple[str, int, bytes]]:
    """A call of each kind that takes a handle, including a WRITE (received
    in phases: its refused payload must be skipped, not break the stream)."""
    return [
        ("GETATTR", 1, opaque(fh)),
        ("LOOKUP", 3, opaque(fh) + opaque(b"x")),
        ("MKDIR", 9, opaque(fh) + opaque(b"d") + u32(0) * 6),
        ("WRITE", 7, opaque(fh) + u64(0) + u32(8192) + u32(0) + opaque(b"w" * 8192)),
        ("READDIRPLUS", 17, opaque(fh) + u64(0) + b"\0" * 8 + u32(4096) + u32(8192)),
        ("FSINFO", 19, opaque(fh)),
    ]


def test_unreserved_port_is_refused_on_a_secure_export(secure_server):
    srv = secure_server
    fh = root_fh_from_reserved_port(srv)

    with Conn(srv.host, srv.mount_port) as m:
        assert m.source_port >= 1024
        assert mnt(m, srv.export) == (MNT3ERR_ACCES, None)
        # The other MOUNT procedures are not restricted (as rpc.mountd).
        for proc in (0, 2, 5):  # NULL, DUMP, EXPORT
            assert m.rpc(MOUNT_PROGRAM, MOUNT_V3, proc)[0] == SUCCESS

    with Conn(srv.host, srv.nfs_port) as c:
        # NULL is how clients probe a server: never restricted.
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        for name, proc, args in nfs_calls(fh):
            accept, res = c.rpc(NFS_PROGRAM, NFS_V3, proc, args)
            assert accept == SUCCESS, name
            assert nfs_status(res) == NFS3ERR_PERM, f"{name}: {nfs_status(res)}"
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS

    if srv.portmap_port:
        with Conn(srv.host, srv.portmap_port) as p:
            accept, res = p.rpc(PORTMAP_PROGRAM, PORTMAP_V2, 3,
                                u32(NFS_PROGRAM) + u32(NFS_V3) + u32(6) + u32(0))
            assert accept == SUCCESS and struct.unpack(">I", res)[0] == srv.nfs_port

    # The refused MKDIR did nothing.
    assert not os.path.exists(os.path.join(srv.export, "d"))

    # One warning an operator can act on, not one per refused call.
    refusals = [line for line in srv.log_text().splitlines() if REFUSAL in line]
    assert len(refusals) == 1, "\n".join(refusals)
    assert "127.0.0.1" in refusals[0] and "insecure" in refusals[0], refusals[0]


def test_reserved_port_is_served_on_a_secure_export(secure_server):
    srv = secure_server
    fh = root_fh_from_reserved_port(srv)
    with Conn(srv.host, srv.nfs_port, reserved=True) as c:
        for name, proc, args in nfs_calls(fh):
            accept, res = c.rpc(NFS_PROGRAM, NFS_V3, proc, args)
            assert accept == SUCCESS and nfs_status(res) != NFS3ERR_PERM, name
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
        assert nfs_status(res) == NFS3_OK
    assert REFUSAL not in srv.log_text()


def test_insecure_export_serves_any_port(server):
    """`--insecure` (what every other test's server runs with)."""
    assert "--insecure" in server.command()
    with Conn(server.host, server.mount_port) as m:
        assert m.source_port >= 1024
        status, fh = mnt(m, server.export)
        assert status == MNT3_OK
    with Conn(server.host, server.nfs_port) as c:
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
        assert accept == SUCCESS and nfs_status(res) == NFS3_OK
    assert REFUSAL not in server.log_text()


def client_ports(srv) -> list[int]:
    return [int(p) for p in re.findall(r"connection opened .*?peer=127\.0\.0\.1:(\d+)", srv.log_text())]


# The client ports are read from the connections' lines, debug lines.
@pytest.mark.server_args("--log-level", "debug")
def test_clients_running_as_root_bind_reserved_ports(secure_server, nfsproc_bin):
    """libnfs (nfs-ls, nfs-cp, nfsproc) and nfs-rs bind a reserved source port
    when run as root, as the Linux client does, so they work with the
    default; nfs-rs with `noresvport` does not, unless the export is
    insecure."""
    srv = secure_server
    r = NfsProc(nfsproc_bin, srv)("getattr", ".")
    assert r["status"] == "NFS3_OK", r
    srv.client().listdir("")
    ports = client_ports(srv)
    assert ports and all(p < 1024 for p in ports), ports
    with pytest.raises(nfs_rs.NfsError):
        srv.client(noresvport=True)
    assert REFUSAL in srv.log_text()
