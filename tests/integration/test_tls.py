"""RPC-with-TLS (RFC 9289) end to end: a client probes with an AUTH_TLS NULL
call, gets the STARTTLS verifier, and runs NFSv3 (MOUNT, GETATTR, a
misaligned direct WRITE, READ) and NFSv4.1 (EXCHANGE_ID, CREATE_SESSION,
SEQUENCE) inside TLS, with Python's `ssl` as the client; clients that do not
probe are served in plaintext on the same ports; with a client CA, a
certificate it signed is accepted and one of another CA refused.

Certificates are made with `openssl` in the test's temporary directory.
"""

from __future__ import annotations

import os
import resource
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import rawnfs4  # noqa: E402
from metrics import free_port, value  # noqa: E402
from nfstools import rss_kib  # noqa: E402
from wait import wait_until  # noqa: E402
from rawrpc import (  # noqa: E402
    MOUNT_PROGRAM, MOUNT_V3, NFS_PROGRAM, NFS_V3, SUCCESS, Conn, call_header, mnt,
    nfs_status, opaque, read_record, record, u32, u64)

pytestmark = pytest.mark.dionfs_only

AUTH_TLS = 7
FATTR3_LEN = 84
# The IOR-hard transfer (seeds/004), at an odd offset: misaligned both ends.
SIZE, OFFSET = 47008, 12345


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> tuple[Path, Path]:
    key, pem = d / f"{name}.key", d / f"{name}.pem"
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(pem), "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return pem, key


def make_cert(d: Path, name: str, ca: tuple[Path, Path], san: str) -> tuple[Path, Path]:
    key, csr, pem = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem"
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
            "-CAcreateserial", "-out", str(pem), "-days", "2", "-extfile", str(ext))
    return pem, key


def make_expired_cert(d: Path, name: str, ca: tuple[Path, Path], san: str) -> tuple[Path, Path]:
    """A certificate `ca` signed that was valid for one day in 2020
    (`openssl ca`, as `openssl x509 -req` cannot date one in the past)."""
    key, csr, pem = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem"
    db = d / f"{name}-ca"
    db.mkdir()
    (db / "index.txt").write_text("")
    (db / "serial").write_text("01\n")
    cnf = db / "ca.cnf"
    cnf.write_text(f"[ca]\ndefault_ca = dflt\n[dflt]\ndatabase = {db}/index.txt\n"
                   f"new_certs_dir = {db}\nserial = {db}/serial\ndefault_md = sha256\n"
                   "policy = any\n[any]\ncommonName = supplied\n"
                   f"[ext]\nsubjectAltName = {san}\nbasicConstraints = CA:FALSE\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    openssl("ca", "-batch", "-config", str(cnf), "-cert", str(ca[0]), "-keyfile", str(ca[1]),
            "-in", str(csr), "-out", str(pem), "-startdate", "20200101000000Z",
            "-enddate", "20200102000000Z", "-extensions", "ext", "-notext")
    return pem, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    server_ca = make_ca(d, "server-ca")
    client_ca = make_ca(d, "client-ca")
    stranger_ca = make_ca(d, "stranger-ca")
    server = make_cert(d, "server", server_ca, "DNS:localhost,IP:127.0.0.1")
    server2 = make_cert(d, "server2", server_ca, "DNS:localhost,IP:127.0.0.1")
    client = make_cert(d, "client", client_ca, "DNS:client.example")
    other = make_cert(d, "other", client_ca, "DNS:other.example,URI:spiffe://example.org/other")
    stranger = make_cert(d, "stranger", stranger_ca, "DNS:client.example")
    expired = make_expired_cert(d, "expired", client_ca, "DNS:client.example")
    return {"server_ca": server_ca[0], "client_ca": client_ca[0],
            "server": server[0], "server_key": server[1],
            "server2": server2[0], "server2_key": server2[1],
            "client": client[0], "client_key": client[1],
            "other": other[0], "other_key": other[1],
            "stranger": stranger[0], "stranger_key": stranger[1],
            "expired": expired[0], "expired_key": expired[1]}


def fingerprint(cert: Path) -> str:
    """`openssl x509 -fingerprint -sha256`'s AB:12:... of `cert`."""
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in",
                          str(cert)], check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]


def restart_with(server, *args: str):
    """`server` again, on its ports, with `args` added."""
    server.close_clients()
    server.stop()
    server.extra_args += list(args)
    server.start()
    return server


@pytest.fixture
def tls_server(server, certs):
    return restart_with(server, "--tls-certificate", str(certs["server"]),
                        "--tls-key", str(certs["server_key"]))


@pytest.fixture
def mtls_server(server, certs):
    return restart_with(server, "--tls-certificate", str(certs["server"]),
                        "--tls-key", str(certs["server_key"]),
                        "--tls-client-ca", str(certs["client_ca"]))


def context(certs, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(certs["server_ca"])
    ctx.set_alpn_protocols(["sunrpc"])
    if cert:
        ctx.load_cert_chain(certs[cert], certs[f"{cert}_key"])
    return ctx


def probe(conn: Conn, prog: int, vers: int) -> bytes:
    """Sends the AUTH_TLS NULL call; returns the reply message."""
    conn.xid += 1
    conn.send(record(call_header(conn.xid, prog, vers, 0, u32(AUTH_TLS) + u32(0))))
    return read_record(conn.sock)


def starttls(conn: Conn, prog: int, vers: int, ctx: ssl.SSLContext) -> None:
    """Probes, checks the STARTTLS answer, and puts `conn` inside TLS."""
    reply = probe(conn, prog, vers)
    xid, mtype, stat, flavor, vlen = struct.unpack(">IIIII", reply[:20])
    assert (xid, mtype, stat, flavor) == (conn.xid, 1, 0, 0), reply.hex()
    assert reply[20:20 + vlen] == b"STARTTLS", reply.hex()
    assert struct.unpack(">I", reply[28:32])[0] == SUCCESS
    conn.sock = ctx.wrap_socket(conn.sock, server_hostname="localhost")
    assert conn.sock.selected_alpn_protocol() == "sunrpc"
    assert conn.sock.version() == "TLSv1.3"


def partial_client_hello(certs) -> bytes:
    """The first half of a ClientHello (Python's ssl, through memory)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context(certs).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[0] == 0x16, hello[:5].hex()  # a handshake record
    return hello[:len(hello) // 2]


def fattr_size(attrs: bytes) -> int:
    return struct.unpack(">Q", attrs[20:28])[0]


def test_nfsv3_inside_tls(tls_server, certs):
    """MOUNT, GETATTR, a misaligned 47,008-byte WRITE into a direct-write
    export and a READ of it, byte for byte, all inside TLS."""
    srv = tls_server
    name = "tls-data"
    path = os.path.join(srv.export, name)
    with open(path, "wb"):
        pass
    os.chmod(path, 0o666)
    data = os.urandom(SIZE)
    ctx = context(certs)
    with Conn(srv.host, srv.mount_port) as m:
        starttls(m, MOUNT_PROGRAM, MOUNT_V3, ctx)
        status, root = mnt(m, srv.export)
        assert status == 0 and root
    with Conn(srv.host, srv.nfs_port) as c:
        starttls(c, NFS_PROGRAM, NFS_V3, ctx)
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(root))  # GETATTR
        assert accept == SUCCESS and nfs_status(res) == 0
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(root) + opaque(name.encode()))
        assert accept == SUCCESS and nfs_status(res) == 0
        (n,) = struct.unpack(">I", res[4:8])
        fh = res[8:8 + n]
        args = opaque(fh) + u64(OFFSET) + u32(SIZE) + u32(2) + opaque(data)  # FILE_SYNC
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 7, args)
        assert accept == SUCCESS and nfs_status(res) == 0
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
        assert accept == SUCCESS and nfs_status(res) == 0
        assert fattr_size(res[4:]) == OFFSET + SIZE
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 6, opaque(fh) + u64(OFFSET) + u32(SIZE))
        assert accept == SUCCESS and nfs_status(res) == 0
        at = 8 + (FATTR3_LEN if struct.unpack(">I", res[4:8])[0] else 0)
        count, _eof, length = struct.unpack(">III", res[at:at + 12])
        assert count == length == SIZE
        assert res[at + 12:at + 12 + SIZE] == data, "READ inside TLS differs"
    with open(path, "rb") as f:
        local = f.read()
    assert local[:OFFSET] == bytes(OFFSET)
    assert local[OFFSET:] == data, "the file differs from the WRITE inside TLS"


def test_nfsv41_inside_tls(tls_server, certs):
    """EXCHANGE_ID, CREATE_SESSION and a SEQUENCE'd PUTROOTFH + GETFH
    inside TLS."""
    srv = tls_server
    c = rawnfs4.Client(srv.host, srv.nfs_port, owner=b"tls-test-client")
    try:
        starttls(c.conn, rawnfs4.NFS4_PROGRAM, rawnfs4.NFS_V4, context(certs))
        c.establish()
        res = c.sequenced([u32(rawnfs4.OP_PUTROOTFH), u32(rawnfs4.OP_GETFH)])
        assert res.status == rawnfs4.OK
        assert res.body(rawnfs4.OP_GETFH)
    finally:
        c.close()


def test_plaintext_clients_are_served_beside_tls(tls_server, certs):
    """Opportunistic: a client that never probes is served as before, on
    the same port, while a TLS connection is open."""
    srv = tls_server
    with Conn(srv.host, srv.nfs_port) as t, Conn(srv.host, srv.nfs_port) as p:
        starttls(t, NFS_PROGRAM, NFS_V3, context(certs))
        assert p.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        assert t.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        assert p.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS


FLOOD_METRICS = f"127.0.0.1:{free_port()}"
# Half-open handshakes at once: thousands, well under max_connections
# (4096), as a test process may hold (its open-file limit is raised).
HALF_OPEN = 3000
# Long enough to open them all on a slow machine (about 1.5 s here).
FLOOD_TIMEOUT = 8
# What one may cost the server: an idle connection's bound (16 KiB,
# test_connections.py), plus 8 KiB for its handshake: rustls's state (about
# 4 KiB measured) and the half ClientHello (a few hundred bytes). Measured:
# 18 KiB each; 26 KiB when each handshake kept a 16 KiB read buffer, which
# this bound catches, as it would a record's worth held for each client.
PER_HALF_OPEN_KIB = 24


@pytest.mark.server_args("--metrics", FLOOD_METRICS)
def test_thousands_of_half_open_handshakes_keep_memory_bounded(server, certs):
    """HALF_OPEN connections each probe, are answered STARTTLS, send half
    a ClientHello and fall silent. Each costs the server at most
    PER_HALF_OPEN_KIB of memory (RSS before and with all of them open);
    a well-behaved client is served meanwhile, in TLS and in plaintext;
    and `--tls-handshake-timeout` closes every one of them, counted as
    failed handshakes and logged a few lines a minute, not one each."""
    srv = restart_with(server, "--tls-certificate", str(certs["server"]),
                       "--tls-key", str(certs["server_key"]),
                       "--tls-handshake-timeout", str(FLOOD_TIMEOUT))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < HALF_OPEN + 256:
        pytest.skip(f"{HALF_OPEN} sockets need an open-file limit above {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HALF_OPEN + 256), hard))
    open_now = lambda: value(FLOOD_METRICS, "connections_open")  # noqa: E731
    # One whole handshake first: what every handshake shares is allocated.
    null_inside_tls(srv, certs, None)
    wait_until(lambda: open_now() == 0, 10, "the first connection closed")
    before = rss_kib(srv.proc.pid)
    hello = partial_client_hello(certs)
    half_open = []
    start = time.monotonic()
    try:
        for _ in range(HALF_OPEN):
            c = Conn(srv.host, srv.nfs_port, timeout=10)
            half_open.append(c)
            assert probe(c, NFS_PROGRAM, NFS_V3)[20:28] == b"STARTTLS"
            c.sock.sendall(hello)
        wait_until(lambda: open_now() == HALF_OPEN, 10,
                   lambda: f"{HALF_OPEN} half-open handshakes ({open_now()} open)")
        assert time.monotonic() - start < FLOOD_TIMEOUT, "too slow to open them all in time"
        peak = rss_kib(srv.proc.pid)
        per_conn = (peak - before) / HALF_OPEN
        print(f"RSS {before} KiB -> {peak} KiB with {HALF_OPEN} half-open handshakes: "
              f"{per_conn:.1f} KiB each")
        assert per_conn < PER_HALF_OPEN_KIB, f"{per_conn:.1f} KiB per half-open handshake"
        null_inside_tls(srv, certs, None)
        with Conn(srv.host, srv.nfs_port, timeout=10) as plain:
            assert plain.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        wait_until(lambda: open_now() == 0, FLOOD_TIMEOUT + 20,
                   lambda: f"the half-open handshakes closed ({open_now()} open)")
        assert time.monotonic() - start >= FLOOD_TIMEOUT, "closed before the timeout"
        for c in half_open:
            try:
                assert c.sock.recv(1) == b"", "a half-open handshake got bytes"
            except ConnectionResetError:
                pass
    finally:
        for c in half_open:
            c.close()
    failed = value(FLOOD_METRICS, "tls_handshake_failures_total")
    assert failed >= HALF_OPEN
    lines = srv.log_text(tail=100000).count("TLS handshake failed, connection closed")
    assert 0 < lines <= 10, f"{lines} lines for {HALF_OPEN} timed-out handshakes"


def test_a_probe_without_tls_is_refused(server):
    """Without a certificate the probe gets AUTH_ERROR (AUTH_BADCRED), and the
    connection goes on in plaintext."""
    with Conn(server.host, server.nfs_port) as c:
        reply = probe(c, NFS_PROGRAM, NFS_V3)
        xid, mtype, denied, reject, stat = struct.unpack(">IIIII", reply[:20])
        assert (xid, mtype, denied, reject, stat) == (c.xid, 1, 1, 1, 1), reply.hex()
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS


def null_inside_tls(srv, certs, cert: str | None) -> None:
    with Conn(srv.host, srv.nfs_port, timeout=10) as c:
        starttls(c, NFS_PROGRAM, NFS_V3, context(certs, cert))
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS


def test_mtls_accepts_the_client_cas_certificates_only(mtls_server, certs):
    """With --tls-client-ca: a certificate that CA signed is accepted, none
    at all too (exports will decide), one of another CA refused."""
    null_inside_tls(mtls_server, certs, "client")
    null_inside_tls(mtls_server, certs, None)
    # TLS 1.3: the server checks the client's certificate after the
    # client's side of the handshake; the refusal comes as an alert or a
    # closed connection at the first call.
    with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout, OSError)):
        null_inside_tls(mtls_server, certs, "stranger")


def test_a_reload_reads_the_certificate_again(loopfs, certs, tmp_path):
    """`dionfs reload` (SIGHUP) reads the certificate and key again: the
    next handshake presents the new certificate, a connection in TLS
    already goes on, and a key that does not go with its certificate
    leaves the running pair (with a warning)."""
    import shutil

    from test_reload import ReloadServer, _fresh_dir

    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    shutil.copy(certs["server"], cert)
    shutil.copy(certs["server_key"], key)
    export = _fresh_dir(loopfs, "tls-reload")
    srv = ReloadServer({export: {}})
    tail = f'\n[tls]\ncertificate = "{cert}"\nkey = "{key}"\n'
    srv.write_config({export: {}}, tail)
    srv.start()
    try:
        def presented() -> bytes:
            with Conn(srv.host, srv.nfs_port, timeout=10) as c:
                starttls(c, NFS_PROGRAM, NFS_V3, context(certs))
                assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
                return c.sock.getpeercert(binary_form=True)

        first = presented()
        with Conn(srv.host, srv.nfs_port, timeout=10) as kept:
            starttls(kept, NFS_PROGRAM, NFS_V3, context(certs))
            shutil.copy(certs["server2"], cert)
            shutil.copy(certs["server2_key"], key)
            line = srv.hup()
            assert "reloaded: " in line, line
            second = presented()
            assert second != first, "the reload did not read the new certificate"
            assert kept.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS
        # A key of another certificate: refused, the running pair stays.
        shutil.copy(certs["server_key"], key)
        line = srv.hup()
        assert "reloaded: " in line, line
        assert "TLS: " in srv.log_text(20) and "does not go with" in srv.log_text(20)
        assert presented() == second
    finally:
        srv.stop()
        srv.cleanup()


def test_a_reload_turns_tls_on_and_off(loopfs, certs):
    """A server started without [tls] refuses probes; a reload that adds
    [tls] (and an export needing TLS) turns it on: probes are answered and
    the export is served inside TLS only. A reload that takes both away
    turns it off: probes are refused again, and a connection already in
    TLS goes on."""
    from test_reload import ReloadServer, _fresh_dir

    def refused() -> bool:
        with Conn(srv.host, srv.nfs_port, timeout=10) as c:
            reply = probe(c, NFS_PROGRAM, NFS_V3)
            return struct.unpack(">III", reply[8:20]) == (1, 1, 1)  # AUTH_BADCRED

    export = _fresh_dir(loopfs, "tls-on")
    srv = ReloadServer({export: {}})
    srv.start()
    try:
        assert refused()
        tail = f'\n[tls]\ncertificate = "{certs["server"]}"\nkey = "{certs["server_key"]}"\n'
        srv.write_config({export: {"xprtsec": '["tls"]'}}, tail)
        line = srv.hup()
        assert "reloaded: " in line and "xprtsec" in line, line
        assert "RPC-with-TLS is on" in srv.log_text(50)
        assert "restart" not in line, line
        fh = root_of(srv, export)
        assert v3_getattr(srv, certs, fh, None) == NFS3ERR_ACCES
        assert v3_getattr(srv, certs, fh, "") == 0
        with Conn(srv.host, srv.nfs_port, timeout=10) as kept:
            starttls(kept, NFS_PROGRAM, NFS_V3, context(certs))
            srv.write_config({export: {}})
            line = srv.hup()
            assert "reloaded: " in line, line
            assert "RPC-with-TLS is off" in srv.log_text(50)
            assert refused()
            accept, res = kept.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
            assert accept == SUCCESS and nfs_status(res) == 0
        assert v3_getattr(srv, certs, fh, None) == 0
    finally:
        srv.stop()
        srv.cleanup()


# Per-export `xprtsec` (knfsd's export option): exports that need TLS, or
# mTLS, or plaintext only, on one server with a client CA.
NFS3ERR_ACCES = 13
NFS4ERR_WRONGSEC = 10016
OP_GETATTR, OP_SECINFO_NO_NAME = 9, 52


@pytest.fixture
def xprtsec_server(loopfs, certs):
    from test_reload import ReloadServer, _fresh_dir

    exports = {_fresh_dir(loopfs, "xprtsec-tls"): {"xprtsec": '["tls"]'},
               _fresh_dir(loopfs, "xprtsec-none"): {"xprtsec": '["none"]'},
               _fresh_dir(loopfs, "xprtsec-mtls"): {"xprtsec": '["mtls"]'}}
    srv = ReloadServer(exports)
    srv.tail = (f'\n[tls]\ncertificate = "{certs["server"]}"\nkey = "{certs["server_key"]}"\n'
                f'client_ca = "{certs["client_ca"]}"\n')
    srv.write_config(exports, srv.tail)
    srv.start()
    srv.paths = list(exports)
    try:
        yield srv
    finally:
        srv.stop()
        srv.cleanup()


def root_of(srv, path: str) -> bytes:
    """The export's root handle, by MNT over plaintext: answered whatever
    the export's xprtsec, as rpc.mountd answers it (a Linux client sends
    MNT in plaintext even with `xprtsec=tls`)."""
    with Conn(srv.host, srv.mount_port) as m:
        status, root = mnt(m, path)
    assert status == 0 and root, f"MNT {path}: {status}"
    return root


def v3_getattr(srv, certs, fh: bytes, tls: str | None) -> int:
    """GETATTR's nfsstat3 over plaintext (`tls` None), TLS without a
    client certificate ("") or with the certificate `tls`."""
    with Conn(srv.host, srv.nfs_port, timeout=10) as c:
        if tls is not None:
            starttls(c, NFS_PROGRAM, NFS_V3, context(certs, tls or None))
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
        assert accept == SUCCESS
        return nfs_status(res)


def test_xprtsec_decides_which_connections_use_an_export_over_v3(xprtsec_server, certs):
    """As knfsd's check_xprtsec_policy: each connection is exactly one of
    none, tls, mtls, and an export allows the ones its list names;
    anything else is NFS3ERR_ACCES (nfserr_wrongsec as nfsd3_map_status
    maps it). A reload applies a changed list."""
    srv = xprtsec_server
    tls_only, none_only, mtls_only = (root_of(srv, p) for p in srv.paths)
    # Plain, TLS, TLS with a certificate the client CA signed.
    expected = {
        "tls": (tls_only, [NFS3ERR_ACCES, 0, NFS3ERR_ACCES]),
        "none": (none_only, [0, NFS3ERR_ACCES, NFS3ERR_ACCES]),
        "mtls": (mtls_only, [NFS3ERR_ACCES, NFS3ERR_ACCES, 0]),
    }
    for name, (fh, statuses) in expected.items():
        got = [v3_getattr(srv, certs, fh, t) for t in (None, "", "client")]
        assert got == statuses, f"xprtsec [{name}]: {got}"
    # A WRITE over plaintext into the TLS export: ACCES, nothing written
    # (its payload skipped as it is received); its handle comes by LOOKUP
    # inside TLS, as a plaintext LOOKUP is refused too.
    path = os.path.join(srv.paths[0], "f")
    with open(path, "wb") as f:
        f.write(b"unchanged")
    os.chmod(path, 0o666)
    with Conn(srv.host, srv.nfs_port, timeout=10) as c:
        starttls(c, NFS_PROGRAM, NFS_V3, context(certs))
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(tls_only) + opaque(b"f"))
        assert accept == SUCCESS and nfs_status(res) == 0
        (n,) = struct.unpack(">I", res[4:8])
        fh = res[8:8 + n]
    with Conn(srv.host, srv.nfs_port, timeout=10) as c:
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 3, opaque(tls_only) + opaque(b"f"))
        assert accept == SUCCESS and nfs_status(res) == NFS3ERR_ACCES
        data = os.urandom(SIZE)
        args = opaque(fh) + u64(0) + u32(SIZE) + u32(2) + opaque(data)  # FILE_SYNC
        accept, res = c.rpc(NFS_PROGRAM, NFS_V3, 7, args)
        assert accept == SUCCESS and nfs_status(res) == NFS3ERR_ACCES
        assert c.rpc(NFS_PROGRAM, NFS_V3, 0)[0] == SUCCESS, "the connection goes on"
    with open(path, "rb") as f:
        assert f.read() == b"unchanged"
    log = srv.log_text(tail=100000)
    assert "the export's xprtsec does not allow this connection" in log, log
    assert "MNT answered" in log and "xprtsec-tls" in log, log
    # A reload that lets plaintext in too.
    exports = {srv.paths[0]: {"xprtsec": '["none", "tls"]'},
               srv.paths[1]: {"xprtsec": '["none"]'},
               srv.paths[2]: {"xprtsec": '["mtls"]'}}
    srv.write_config(exports, srv.tail)
    line = srv.hup()
    assert "reloaded: " in line and "xprtsec" in line, line
    assert v3_getattr(srv, certs, tls_only, None) == 0
    assert v3_getattr(srv, certs, tls_only, "") == 0


def test_an_mtls_export_takes_only_a_good_certificate(xprtsec_server, certs):
    """An `mtls` export: a certificate the client CA signed gets in; an
    expired one and one of another CA fail their handshakes, a client
    presenting none is refused its calls (NFS3ERR_ACCES), each costing
    only its own connection (a client in mTLS meanwhile is served on), and
    the log says why in words an operator can act on."""
    srv = xprtsec_server
    fh = root_of(srv, srv.paths[2])
    with Conn(srv.host, srv.nfs_port, timeout=10) as served:
        starttls(served, NFS_PROGRAM, NFS_V3, context(certs, "client"))
        for cert in ("expired", "stranger"):
            with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout, OSError)):
                v3_getattr(srv, certs, fh, cert)
            accept, res = served.rpc(NFS_PROGRAM, NFS_V3, 1, opaque(fh))
            assert accept == SUCCESS and nfs_status(res) == 0
        assert v3_getattr(srv, certs, fh, "") == NFS3ERR_ACCES
        assert v3_getattr(srv, certs, fh, "client") == 0
    log = srv.log_text(tail=100000)
    for why in ("TLS handshake failed, connection closed: the client's certificate has expired",
                "was not signed by a CA of [tls] client_ca (unknown CA)",
                "the client presented no certificate, and the export needs one signed by "
                "[tls] client_ca"):
        assert why in log, f"{why!r} not in:\n{log}"


def test_xprtsec_over_v41_is_wrongsec_and_secinfo_answers(xprtsec_server, certs):
    """NFSv4.1 on a plain connection: PUTFH of the TLS export's root then
    GETATTR is WRONGSEC at PUTFH; PUTFH then SECINFO_NO_NAME answers (RFC
    8881 section 2.6.3.1.1.5); the same handle inside TLS works."""
    srv = xprtsec_server
    fh = root_of(srv, srv.paths[0])
    getattr_ = u32(OP_GETATTR) + u32(1) + u32(1 << 1)  # type
    for tls in (False, True):
        c = rawnfs4.Client(srv.host, srv.nfs_port, owner=b"xprtsec-%d" % tls)
        try:
            if tls:
                starttls(c.conn, rawnfs4.NFS4_PROGRAM, rawnfs4.NFS_V4, context(certs))
            c.establish()
            res = c.sequenced([rawnfs4.putfh(fh), getattr_])
            if tls:
                assert res.status == rawnfs4.OK, res.results
            else:
                assert res.status == NFS4ERR_WRONGSEC
                assert [r[:2] for r in res.results] == [
                    (rawnfs4.OP_SEQUENCE, 0), (rawnfs4.OP_PUTFH, NFS4ERR_WRONGSEC)]
            res = c.sequenced([rawnfs4.putfh(fh), u32(OP_SECINFO_NO_NAME) + u32(0)])
            assert res.status == rawnfs4.OK, res.results
            # The pseudo-root stays visible.
            res = c.sequenced([u32(rawnfs4.OP_PUTROOTFH), u32(rawnfs4.OP_GETFH)])
            assert res.status == rawnfs4.OK
        finally:
            c.close()


def test_serve_dir_takes_xprtsec(server, certs):
    """`dionfs serve DIR --xprtsec tls,mtls`: plaintext NFS calls are
    refused (NFS3ERR_ACCES), TLS of either kind served; without a
    certificate to serve TLS with, the start fails (exit 2) saying so."""
    srv = restart_with(server, "--tls-certificate", str(certs["server"]),
                       "--tls-key", str(certs["server_key"]),
                       "--tls-client-ca", str(certs["client_ca"]),
                       "--xprtsec", "tls,mtls")
    fh = root_of(srv, srv.export)
    assert [v3_getattr(srv, certs, fh, t) for t in (None, "", "client")] == [
        NFS3ERR_ACCES, 0, 0]
    from servers import dionfs_bin
    r = subprocess.run([dionfs_bin(), "serve", srv.export, "--xprtsec", "tls", "--nfs-port", "0",
                        "--mount-port", "0", "--no-portmap", "--no-metrics"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "needs RPC-with-TLS" in r.stderr and "--tls-certificate" in r.stderr, r.stderr
    r = subprocess.run([dionfs_bin(), "serve", srv.export, "--xprtsec", "tls,ssl"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "`ssl` is not a transport security" in r.stderr, r.stderr


def test_an_export_needing_tls_without_tls_is_a_start_error(loopfs, tmp_path):
    """`xprtsec = ["tls"]` without a [tls] table: dionfs serve refuses to
    start, naming the export."""
    from servers import dionfs_bin
    from test_reload import _fresh_dir

    export = _fresh_dir(loopfs, "xprtsec-no-tls")
    config = tmp_path / "dionfs.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
                      f'portmap_port = false\nstate_dir = "{tmp_path}/state"\n'
                      f'[[export]]\npath = "{export}"\nxprtsec = ["tls"]\n')
    r = subprocess.run([dionfs_bin(), "serve", "--config", str(config)], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert export in r.stderr and "needs RPC-with-TLS" in r.stderr, r.stderr


# Client certificates in export client lists: `tls-san:` and `tls-sha256:`.
MNT3ERR_ACCES = 13


def test_export_clients_can_name_client_certificates(loopfs, certs):
    """An export's clients can name a client certificate: `tls-san:` a DNS
    name or URI among its subject alternative names, `tls-sha256:` its
    fingerprint. Such an entry matches only an mTLS connection whose
    certificate it names: that client gets in (MNT and NFS calls inside
    TLS); another certificate of the same CA, a TLS connection without one
    and a plain connection, from the same address, are refused as a
    client not in the list is (MNT ACCES, NFS3ERR_ACCES)."""
    from test_reload import ReloadServer, _fresh_dir

    exports = {
        _fresh_dir(loopfs, "by-san"): {"clients": '["tls-san:client.example"]'},
        _fresh_dir(loopfs, "by-uri"): {"clients": '["tls-san:spiffe://example.org/other"]'},
        _fresh_dir(loopfs, "by-sha256"): {
            "clients": f'["tls-sha256:{fingerprint(certs["other"])}"]'},
    }
    srv = ReloadServer(exports)
    tail = (f'\n[tls]\ncertificate = "{certs["server"]}"\nkey = "{certs["server_key"]}"\n'
            f'client_ca = "{certs["client_ca"]}"\n')
    srv.write_config(exports, tail)
    srv.start()
    try:
        def mnt_as(path: str, tls: str | None) -> tuple[int, bytes | None]:
            with Conn(srv.host, srv.mount_port, timeout=10) as m:
                if tls is not None:
                    starttls(m, MOUNT_PROGRAM, MOUNT_V3, context(certs, tls or None))
                return mnt(m, path)

        by_san, by_uri, by_sha256 = exports
        # Plain, TLS without a certificate, and two certificates of the CA
        # (the first refusal of each export is the one logged: a plain MNT,
        # a GETATTR with a certificate).
        connections = (None, "", "client", "other")
        for path, admitted in ((by_san, "client"), (by_uri, "other"), (by_sha256, "other")):
            mnts = [mnt_as(path, t) for t in connections]
            assert [m[0] for m in mnts] == [
                0 if t == admitted else MNT3ERR_ACCES for t in connections], (path, mnts)
            root = mnts[connections.index(admitted)][1]
            getattrs = [v3_getattr(srv, certs, root, t) for t in reversed(connections)]
            assert getattrs == [
                0 if t == admitted else NFS3ERR_ACCES for t in reversed(connections)], \
                (path, getattrs)
        log = srv.log_text(tail=100000)
        assert "neither the client nor its certificate is in the export's client list" in log
        assert "match only connections with a client certificate" in log, log
    finally:
        srv.stop()
        srv.cleanup()


def test_certificate_entries_without_client_ca_are_a_start_error(loopfs, tmp_path, certs):
    """`tls-san:` in clients without [tls] client_ca, and a malformed
    fingerprint: dionfs serve exits 2 saying what is wrong."""
    from servers import dionfs_bin
    from test_reload import _fresh_dir

    export = _fresh_dir(loopfs, "certificates-no-ca")
    head = (f'[server]\nlisten = "127.0.0.1"\nnfs_port = 0\nmount_port = 0\n'
            f'portmap_port = false\nstate_dir = "{tmp_path}/state"\n'
            f'[tls]\ncertificate = "{certs["server"]}"\nkey = "{certs["server_key"]}"\n')
    config = tmp_path / "dionfs.toml"
    for clients, expected in (('"tls-san:client.example"', "client_ca"),
                              ('"tls-sha256:AB:CD"', "64 hex digits")):
        config.write_text(f'{head}[[export]]\npath = "{export}"\nclients = [{clients}]\n')
        r = subprocess.run([dionfs_bin(), "serve", "--config", str(config)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (r.returncode, r.stderr)
        assert expected in r.stderr, r.stderr
